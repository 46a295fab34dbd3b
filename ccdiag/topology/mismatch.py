"""Facts two probes disagree on, recorded while the topology is built.

Why a record of its own: the probes read one machine through separate doors (the InfiniBand
class, the PCI tree, the network interfaces, NVML). On a healthy node they name the same devices;
on a node mid-hotplug, or in a snapshot that was edited or damaged, one member can name a device
another does not have (an RDMA device whose PCI function is missing or already another RDMA
device's, a netdev pointing at an RDMA device nobody listed, an NVML GPU absent from the PCI bus).
The builder keeps going with what each probe said, never guesses which side is right, and notes
the disagreement here so that a check can report it (naming the device and both sources) instead
of a later lookup failing with an internal error.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mismatch:
    """One device two sources disagree about.

    ``device``: the name the first source gives ("mlx5_0", "ib0", "GPU3"); ``kind``: what sort of
    device ("nic", "netdev", "gpu"); ``summary``: one sentence naming both sides; ``sources``: the
    two (or more) places the facts were read, as an operator would look them up."""

    device: str
    kind: str
    summary: str
    sources: tuple[str, ...]
    bdf: str | None = None

    def to_json(self) -> dict:
        return {"device": self.device, "kind": self.kind, "summary": self.summary,
                "sources": list(self.sources), "bdf": self.bdf}
