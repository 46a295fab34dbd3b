"""The hardware catalogue: what a GPU, NIC or system can carry when nothing live says so.

Why: a pasted benchmark file names its GPUs ("NVIDIA A40", "NVIDIA H100 80GB HBM3") but carries no
link rates, and NVML reports an NVLink's generation but not every part's per-link rate (bridged
GA102 boards run NVLink 3 at 14.06 GB/s per link, not the 25 of an A100). One data file,
``ccdiag/data/hardware.json``, holds those facts with the public source of each entry; this module
reads it into frozen dataclasses. There is one place to add a GPU: that file. Each entry names the
vendor page its figures come from (``source``), the figures that page states (``stated``, which the
tests hold the entry to), when they were compared (``checked``), and any figure no source states
(``unsourced``, said wherever the figure is used). Fields this reader does not know are kept in the
file for other readers (the schema is open to new per-entry fields).

Order of trust, applied by the callers: what the live node says (NVML link counts, PCIe
capability read from sysfs) over the catalogue, the catalogue over nothing (UNKNOWN).

Lookups: :func:`gpu_by_name` takes the names tools print (nvidia-smi, NVML, nvbandwidth,
p2pBandwidthLatencyTest, nccl-tests), with or without "NVIDIA"/"Tesla", dashes or spaces, MIG
suffixes (``NVIDIA H100 80GB HBM3 MIG 1g.10gb``); :func:`gpu_by_pci_id` takes the PCI device id
(``0x2330``). Both return None for a part the catalogue does not know.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

DATA_FILE = "hardware.json"


@dataclass(frozen=True)
class NvlinkSpec:
    """A GPU's NVLinks: generation, how many, and GB/s per link per direction."""

    generation: int
    links: int
    gbyte_s_per_link: float
    bridged: bool  # links reach a peer only through a bridge (PCIe boards)

    @property
    def total_gbyte_s(self) -> float:
        return self.links * self.gbyte_s_per_link


@dataclass(frozen=True)
class GpuModel:
    """One GPU model. ``peer_access_pcie`` is False where the driver offers no peer access over
    PCIe (GeForce boards); ``thermal_c`` holds the limits that are published or were read from a
    real ``nvidia-smi -q`` (``slowdown``, ``shutdown``, ``max_operating``, ``target``)."""

    key: str
    names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    architecture: str
    form_factor: str  # sxm | pcie | superchip
    nvlink: NvlinkSpec | None
    c2c_gbyte_s: float | None
    pcie_gen: int | None
    pcie_width: int | None
    peer_access_pcie: bool
    thermal_c: tuple[tuple[str, float], ...]
    sources: tuple[str, ...]
    note: str | None = None
    #: device-memory bandwidth, GB/s (10^9 B/s) of reads and writes together, as the vendor
    #: publishes it; ``hbm_by_name``: a board variant named in the model name ("80gb") -> its figure
    hbm_gbyte_s: float | None = None
    hbm_by_name: tuple[tuple[str, float], ...] = ()
    hbm_source: str | None = None
    #: the vendor's dense (no sparsity) tensor-core peak, TFLOPS by input type ("fp16", "bf16")
    dense_tflops: tuple[tuple[str, float], ...] = ()
    dense_tflops_source: str | None = None
    source: str = ""  # the vendor page the figures come from
    checked: str | None = None  # the date the figures were compared with it (None: no vendor page exists)
    unsourced: tuple[tuple[str, str], ...] = ()  # figure -> why no source states it

    def unsourced_note(self, figure: str) -> str | None:
        """Why no source states ``figure`` ("c2c_gbyte_s", "pcie", ...), None when one does."""
        return dict(self.unsourced).get(figure)

    def thermal(self, which: str) -> float | None:
        """A thermal limit in degrees C (``"slowdown"``, ``"shutdown"``, ...), None when not known."""
        return dict(self.thermal_c).get(which)

    def hbm_for(self, name: str | None = None) -> float | None:
        """The memory bandwidth of the board ``name`` (the name NVML prints: "NVIDIA A100-SXM4-80GB"
        picks the 80 GB figure), else the model's own; None when the catalogue has none."""
        words = set(normalize_name(name or "").split())
        for token, gbyte_s in self.hbm_by_name:
            if token in words:
                return gbyte_s
        return self.hbm_gbyte_s

    def dense_peak_tflops(self, dtype: str = "fp16") -> float | None:
        """The published dense tensor-core peak for inputs of ``dtype``, None when not published."""
        return dict(self.dense_tflops).get(dtype)


@dataclass(frozen=True)
class NicModel:
    key: str
    names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    port_rates_gbit_s: tuple[float, ...]
    max_port_gbit_s: float
    link_layers: tuple[str, ...]
    sources: tuple[str, ...]
    source: str = ""
    checked: str | None = None


@dataclass(frozen=True)
class SystemModel:
    """A reference system: its GPUs, NVSwitches, NVLink layout and RDMA rails."""

    key: str
    names: tuple[str, ...]
    gpu: str | None  # GpuModel.key
    gpus: int
    nvswitches: int
    nvlink_topology: str  # nvswitch | bridged-pairs | nvlink-switch-trays | none
    rail_nic: str | None
    rails: int
    rail_gbit_s: float | None
    sources: tuple[str, ...]
    note: str | None = None
    integrated_network: bool = False  # the NIC is part of the product (DGX Spark), not a vendor's choice
    source: str = ""
    checked: str | None = None
    #: known causes of a slow figure between two of these systems, each with the public thread or page
    #: that established it (the network is part of the product, so its failure modes are known too)
    slow_causes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Catalogue:
    gpus: tuple[GpuModel, ...]
    nics: tuple[NicModel, ...]
    systems: tuple[SystemModel, ...]
    nvlink_gbyte_s_per_link: tuple[tuple[int, float], ...]  # generation -> rate
    nvlink_sources: tuple[tuple[int, str], ...]


class CatalogueError(ValueError):
    """The data file does not hold what this reader expects (a packaging or editing mistake)."""


_NOISE = re.compile(r"\b(?:nvidia|tesla|quadro)\b")
_SEP = re.compile(r"[\s_\-]+")
_MIG = re.compile(r"\s+mig\s.*$")


def normalize_name(name: str) -> str:
    """"NVIDIA A100-SXM4-40GB" -> "a100 sxm4 40gb"; MIG suffixes dropped."""
    s = _SEP.sub(" ", name[:200].lower())
    s = _MIG.sub("", " " + s).strip()
    return " ".join(_NOISE.sub(" ", s).split())


def _ids(values: Any) -> tuple[int, ...]:
    return tuple(int(v, 16) if isinstance(v, str) else int(v) for v in values or ())


def _gpu(d: dict, per_gen: dict[int, float]) -> GpuModel:
    nv = d.get("nvlink")
    spec = None
    if nv:
        rate = nv.get("gbyte_s_per_link", per_gen.get(nv["generation"]))
        if rate is None:
            raise CatalogueError(f"{d['key']}: NVLink generation {nv['generation']} has no rate")
        spec = NvlinkSpec(int(nv["generation"]), int(nv["links"]), float(rate), bool(nv.get("bridged")))
    pcie = d.get("pcie") or {}
    hbm = d.get("hbm") or {}
    tflops = d.get("dense_tensor_tflops") or {}
    for what, fig in (("hbm", hbm), ("dense_tensor_tflops", tflops)):
        if fig and not fig.get("source"):
            raise CatalogueError(f"{d['key']}: {what} has no source")
    return GpuModel(d["key"], tuple(normalize_name(n) for n in d["names"]), _ids(d.get("pci_device_ids")),
                    d["architecture"], d["form_factor"], spec, d.get("c2c_gbyte_s"), pcie.get("gen"),
                    pcie.get("width"), bool(d.get("peer_access_pcie", True)),
                    tuple(sorted((k, float(v)) for k, v in (d.get("thermal_c") or {}).items())),
                    tuple(d["sources"]), d.get("note"),
                    float(hbm["gbyte_s"]) if hbm.get("gbyte_s") is not None else None,
                    tuple(sorted((normalize_name(k), float(v)) for k, v in (hbm.get("by_name") or {}).items())),
                    hbm.get("source"),
                    tuple(sorted((k, float(v)) for k, v in tflops.items() if k != "source")),
                    tflops.get("source"), source=str(d.get("source") or ""), checked=d.get("checked"),
                    unsourced=tuple(sorted((d.get("unsourced") or {}).items())))


def _nic(d: dict) -> NicModel:
    return NicModel(d["key"], tuple(normalize_name(n) for n in d["names"]), _ids(d.get("pci_device_ids")),
                    tuple(float(r) for r in d["port_rates_gbit_s"]), float(d["max_port_gbit_s"]),
                    tuple(d.get("link_layers", ())), tuple(d["sources"]), str(d.get("source") or ""), d.get("checked"))


def _system(d: dict) -> SystemModel:
    rails = d.get("rails") or {}
    return SystemModel(d["key"], tuple(d["names"]), d.get("gpu"), int(d["gpus"]), int(d.get("nvswitches", 0)),
                       d["nvlink_topology"], rails.get("nic"), int(rails.get("count", 0)),
                       rails.get("gbit_s"), tuple(d["sources"]), d.get("note"), bool(rails.get("integrated")),
                       str(d.get("source") or ""), d.get("checked"),
                       tuple(f"{c['cause']} ({c['source']})" for c in d.get("slow_causes") or ()))


def parse_catalogue(doc: dict) -> Catalogue:
    """The catalogue from the data file's JSON document (checked: every entry has a source)."""
    try:
        gens = doc["nvlink_generations"]
        per_gen = {int(g): float(v["gbyte_s_per_link"]) for g, v in gens.items()}
        srcs = tuple((int(g), "; ".join(v["sources"])) for g, v in gens.items())
        cat = Catalogue(tuple(_gpu(d, per_gen) for d in doc["gpus"]), tuple(_nic(d) for d in doc["nics"]),
                        tuple(_system(d) for d in doc["systems"]), tuple(sorted(per_gen.items())), srcs)
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogueError(f"hardware catalogue: {type(exc).__name__}: {exc}") from None
    entries: tuple[GpuModel | NicModel | SystemModel, ...] = (*cat.gpus, *cat.nics, *cat.systems)
    unsourced = [e.key for e in entries if not e.sources or not e.source.strip()]
    if unsourced:
        raise CatalogueError(f"hardware catalogue entries without a source: {', '.join(unsourced)}")
    return cat


@functools.lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """The shipped catalogue (read once per process)."""
    text = resources.files("ccdiag").joinpath("data").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse_catalogue(json.loads(text))


def _by_name(entries: tuple[Any, ...], name: str | None) -> Any:
    """The entry one of whose names is the longest word-prefix of ``name``."""
    if not name:
        return None
    s = normalize_name(name)
    best, best_len = None, -1
    for e in entries:
        for n in e.names:
            if (s == n or s.startswith(n + " ")) and len(n) > best_len:
                best, best_len = e, len(n)
    return best


@functools.lru_cache(maxsize=512)
def gpu_by_name(name: str | None) -> GpuModel | None:
    """The GPU model a tool's printed name denotes (``"NVIDIA A40"``, ``"Tesla V100-SXM2-32GB"``).
    Remembered per name: the topology asks it for every NVLink of every GPU pair (195,840 times at
    256 GPUs), and the shipped catalogue never changes in a process."""
    return _by_name(catalogue().gpus, name)


def gpu_by_pci_id(device_id: int | str | None) -> GpuModel | None:
    """The GPU model of a PCI device id (``0x2330`` or ``"0x2330"``; vendor 0x10de implied)."""
    did = _as_id(device_id)
    return next((g for g in catalogue().gpus if did in g.pci_device_ids), None) if did is not None else None


def gpu_by_key(key: str) -> GpuModel | None:
    return next((g for g in catalogue().gpus if g.key == key), None)


@functools.lru_cache(maxsize=512)
def nic_by_name(name: str | None) -> NicModel | None:
    """A NIC by the name tools print (``ConnectX-7``, ``MT4129``, ``MT28908 Family [ConnectX-6]``)."""
    if not name:
        return None
    hit = _by_name(catalogue().nics, name)
    if hit is not None:
        return hit
    m = re.search(r"\[(connectx[^\]]{0,20}|bluefield[^\]]{0,20})\]|\b(mt\d{4,5})\b", name.lower())
    return _by_name(catalogue().nics, m.group(1) or m.group(2)) if m else None


def nic_by_pci_id(device_id: int | str | None) -> NicModel | None:
    did = _as_id(device_id)
    return next((n for n in catalogue().nics if did in n.pci_device_ids), None) if did is not None else None


def system_by_key(key: str) -> SystemModel | None:
    return next((s for s in catalogue().systems if s.key == key), None)


def nvlink_gbyte_s_per_link(generation: int | None, model: GpuModel | None = None) -> float | None:
    """GB/s per link per direction: the model's own rate when the catalogue knows the part (bridged
    GA102 runs NVLink 3 at 14.06), else the generation's; None for an unknown generation."""
    if model is not None and model.nvlink is not None:
        return model.nvlink.gbyte_s_per_link
    return dict(catalogue().nvlink_gbyte_s_per_link).get(generation) if generation is not None else None


def _as_id(device_id: int | str | None) -> int | None:
    if device_id is None or isinstance(device_id, bool):
        return None
    if isinstance(device_id, int):
        return device_id
    s = device_id.strip().lower()
    return int(s, 16) if re.fullmatch(r"(?:0x)?[0-9a-f]{1,4}", s) else None
