"""Path levels between two devices, with the meanings NCCL and ``nvidia-smi topo -m`` give them.

One ordering for the whole project: the topology, the GPUDirect check, the ``topo`` command and the
NCCL recommender all rank levels with :func:`level_rank`, so "nearer" means the same everywhere.

Meanings (``nvidia-smi topo -m`` legend; NCCL ``src/graph/topo.h`` path types):
X self; NV# a bonded set of # NVLinks; PIX at most one PCIe bridge; PXB several PCIe bridges without
the host bridge; P2C a PCIe-to-CPU link through a chip-to-chip interconnect (NCCL 2.20+, Grace
systems; as good as PXB for GPUDirect); PHB through a PCIe host bridge (the CPU); NODE between host
bridges of one NUMA node; SYS across the inter-socket (SMP) interconnect.
"""

from __future__ import annotations

#: levels in order, nearest first ("NV" stands for every NV#)
LEVELS = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")

#: a level the topology could not determine (no PCIe data for one end)
UNKNOWN = "unknown"

_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "P2C": 3, "PHB": 4, "NODE": 5, "SYS": 6,
         "SOC": 6}  # SOC: what drivers before 2017 printed for SYS
_UNKNOWN_RANK = 7


def level_rank(level: str | None) -> int:
    """Smaller is nearer: X, then any NV#, PIX, PXB (= P2C), PHB, NODE, SYS; unknown last."""
    if not level:
        return _UNKNOWN_RANK
    if level.startswith("NV"):
        return _RANK["NV"]
    return _RANK.get(level, _UNKNOWN_RANK)


def gpudirect_capable(level: str | None) -> bool:
    """Whether GPUDirect RDMA between a GPU and a NIC at this level runs at full speed by NCCL's
    default (``NCCL_NET_GDR_LEVEL`` defaults to PXB: GDR is used up to PXB, not across the CPU)."""
    return level_rank(level) <= _RANK["PXB"]
