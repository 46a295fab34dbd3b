"""The node's topology: one graph of NUMA nodes, PCIe bridges, GPUs, NICs, NVSwitches and links,
and the one source of expected values (path levels and bottleneck bandwidths).

Data flows one way: probes -> :func:`build_topology` -> a read-only :class:`Topology` that the
checks, the ``topo`` command, the benchmarks, the NCCL recommender and the exporter query.

Modules: :mod:`.levels` (NCCL path levels and their order), :mod:`.bandwidth` (link rates as
payload GB/s), :mod:`.model` (value types and the queries), :mod:`.builder` (observations -> graph),
:mod:`.affinity` (which NIC a GPU uses for GPUDirect), :mod:`.pcie_tree` (the PCI functions as a
tree, for the PCIe checks), :mod:`.matrix` and :mod:`.dot` (rendering).
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the submodule defining it; loaded on first use, so that importing a light
#: submodule (levels, bandwidth) does not pay for networkx
_EXPORTS = {
    "Topology": "model", "Link": "model", "PathBandwidth": "model", "GpuNode": "model", "NicNode": "model",
    "build_topology": "builder", "pcie_gbyte_s": "bandwidth", "nvlink_gbyte_s": "bandwidth",
    "wire_gbyte_s": "bandwidth", "NVLINK_GBYTE_S_PER_LINK": "bandwidth", "LEVELS": "levels",
    "UNKNOWN": "levels", "level_rank": "levels", "gpudirect_capable": "levels",
}

__all__ = sorted(_EXPORTS) + ["pcie_gen"]


def __getattr__(name: str) -> Any:
    if name == "pcie_gen":
        from ccdiag.core.linkrates import pcie_gen

        return pcie_gen
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ccdiag.topology' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ccdiag.topology.{module}"), name)
