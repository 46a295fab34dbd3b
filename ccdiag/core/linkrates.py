"""PCIe signalling rates by generation, in one place (topology, checks and policies all need them).

A link speed that is not a standard rate (a VM's emulated "Unknown", a mis-read) has no generation:
callers get None rather than a guess.
"""

from __future__ import annotations

#: GT/s per lane -> PCIe generation (PCI-SIG base specifications)
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_gen(speed_gts: float | None) -> int | None:
    """PCIe generation of a signalling rate (``32.0`` -> 5); None when not a standard rate."""
    if speed_gts is None:
        return None
    for gts, gen in GEN_BY_GTS.items():
        if abs(speed_gts - gts) < 0.05:
            return gen
    return None
