"""Link rates as payload bandwidth, and the bottleneck of a path.

Every expected value ccdiag judges a measurement against is the bottleneck of a path: the slowest
link between the two ends, taken either from what the links can do (capability) or from what they
trained to (current). Units: ``_gbyte_s`` is gigabytes (10^9 bytes) of payload per second per
direction; ``_gbit_s`` is a signalling rate on the wire.

Rates per direction: PCIe Gen1/2 use 8b/10b, Gen3-5 128b/130b (x16: 15.75 / 31.5 / 63 GB/s), Gen6
FLIT mode carries 242 payload bytes per 256-byte flit (x16 ~121 GB/s) (PCI-SIG base specifications,
as tabulated in stas00/ml-engineering network/README.md); NVLink per-link rates come from the
hardware catalogue (:mod:`.catalogue`, ``ccdiag/data/hardware.json``): by GPU model where the
catalogue knows the part (bridged GA102 boards: 14.06 GB/s per link), else by NVLink generation
(NVLink 2/3/4 25 GB/s, NVLink 5 50 GB/s per link per direction); InfiniBand and RoCE rates are Gb/s on the wire (IBTA lane rates), divided
by 8.
"""

from __future__ import annotations

from typing import Any

from ccdiag.core.linkrates import pcie_gen
from ccdiag.topology import catalogue as _catalogue


def __getattr__(name: str) -> Any:
    if name == "NVLINK_GBYTE_S_PER_LINK":  # generation -> GB/s per link per direction, from the catalogue
        return dict(_catalogue.catalogue().nvlink_gbyte_s_per_link)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pcie_gbyte_s(speed_gts: float | None, width: int | None) -> float | None:
    """GB/s per direction of a PCIe link: lanes x rate x encoding efficiency / 8 bits."""
    if not speed_gts or not width or width <= 0 or speed_gts <= 0:
        return None
    gen = pcie_gen(speed_gts)
    if gen is None:
        eff = 128 / 130 if speed_gts > 5.0 else 8 / 10
    elif gen <= 2:
        eff = 8 / 10
    elif gen <= 5:
        eff = 128 / 130
    else:
        eff = 242 / 256
    return speed_gts * width * eff / 8.0


def nvlink_gbyte_s(version: int | None, count: int, model: str | None = None) -> float | None:
    """GB/s per direction of ``count`` NVLinks of one generation; ``model`` is the GPU's name as NVML
    prints it, whose catalogue entry (when known) gives the part's own per-link rate. None for an
    unknown generation on an unknown part."""
    per = _catalogue.nvlink_gbyte_s_per_link(version, _catalogue.gpu_by_name(model))
    return None if per is None else per * count


def wire_gbyte_s(rate_gbit_s: float | None) -> float | None:
    """An InfiniBand/Ethernet signalling rate in Gb/s as GB/s."""
    return None if rate_gbit_s is None else rate_gbit_s / 8.0


def pcie_desc(speed: float | None, width: int | None) -> str:
    """"Gen5 x16" (or "16 GT/s x8" for a non-standard rate, "Gen? x?" when unknown)."""
    gen = pcie_gen(speed)
    g = f"Gen{gen}" if gen else (f"{speed:g} GT/s" if speed else "Gen?")
    return f"{g} x{width}" if width else f"{g} x?"

