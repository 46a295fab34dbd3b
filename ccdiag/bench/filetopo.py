"""What a pasted benchmark file's own GPU names (and an optional pasted ``nvidia-smi topo -m``) say a
path can carry, when no snapshot of the node it ran on is given.

Why: users attach nvbandwidth / p2pBandwidthLatencyTest / nccl-tests outputs to tickets without a
ccdiag snapshot. The files name their GPUs ("NVIDIA A40", "NVIDIA H100 80GB HBM3"); the hardware
catalogue (:mod:`ccdiag.topology.catalogue`) knows what those parts carry. Every expected value made
here says so in its source ("catalogue: ..."), and names the assumption it rests on. The live node
or a snapshot always wins over this (see :mod:`ccdiag.bench.imports`).

Where the catalogue cannot tell a path's links, no rate is made up: a bridged PCIe board may or may
not have its NVLink bridge fitted, a Volta/Pascal SXM2 board is a partial mesh, a 4-GPU HGX board has
direct links rather than NVSwitches. Those paths get no expected rate unless a pasted
``nvidia-smi topo -m`` names their level (NV4, PIX, SYS).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ccdiag.bench.result import Expected
from ccdiag.topology.bandwidth import pcie_gbyte_s
from ccdiag.topology.catalogue import GpuModel, SystemModel, catalogue, gpu_by_name, gpu_by_pci_id

#: PCIe signalling rate by generation (GT/s per lane)
_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
#: architectures whose 8-GPU SXM boards are partial NVLink meshes (DGX-1 hybrid cube mesh), not NVSwitch
_MESH_ARCHS = ("Pascal", "Volta")
#: the names CUDA and NVML print for a GPU the driver has no name for (a part newer than the driver):
#: "NVIDIA Graphics Device", "Graphics Device", "NVIDIA Device 2b85"
_GENERIC = re.compile(r"^(?:nvidia\s+)?(?:graphics\s+device|device(?:\s+[0-9a-f]{4})?)$", re.IGNORECASE)
#: PCI ids of NVIDIA parts as lspci -nn or a topology dump print them: "[10de:2b85]", "10de:2b85"
PCI_ID_IN_TEXT = re.compile(r"\b10de:([0-9a-fA-F]{4})\b")
#: the causes of "no peer access" between GPUs whose model the file does not name
ALL_PEER_CAUSES = ("a GeForce board (the driver offers no peer access over PCIe on GeForce parts: the NCCL "
                   "maintainers' answer for RTX 5090, NVIDIA/nccl-tests#287), PCIe ACS redirecting peer requests, an "
                   "IOMMU in translation mode, or a VM without P2P")


def is_generic(name: str | None) -> bool:
    """Whether ``name`` says nothing of the model (the driver printed a placeholder)."""
    return name is not None and _GENERIC.match(name.strip()) is not None


class MatrixTopology:
    """The levels of a pasted ``nvidia-smi topo -m`` standing in for a topology: it names paths
    (NV18, PIX, SYS) but carries no link rates; the catalogue supplies those (:class:`FileTopology`)."""

    def __init__(self, matrix: Any):
        self.m = matrix
        self._labels = set(matrix.gpus()) | set(matrix.nics()) | {matrix.nic_name(n) for n in matrix.nics()}

    def has_device(self, name: str) -> bool:
        return name in self._labels

    def level(self, a: str, b: str) -> str | None:
        a = self.m.label_of(a) or a
        b = self.m.label_of(b) or b
        return self.m.level(a, b)

    def gpus(self) -> list:
        return []


def _pcie_rate(model: GpuModel) -> float | None:
    if model.pcie_gen is None or model.pcie_width is None:
        return None
    return pcie_gbyte_s(_GTS.get(model.pcie_gen), model.pcie_width)


class FileTopology:
    """Expected values from the file's GPU names, the catalogue and (optionally) pasted levels.

    ``names``: GPU label ("GPU0") -> the model name the file printed. ``levels``: a
    :class:`MatrixTopology` from ``--from-smi``, or None. ``peer_access``: label pairs the file says
    cannot reach each other (p2pBandwidthLatencyTest ``CANNOT Access Peer``) map to False."""

    def __init__(self, names: dict[str, str], levels: MatrixTopology | None = None, pci_ids: Iterable[str] = ()):
        self.names = dict(names)
        self.pci_ids = tuple(sorted(set(pci_ids)))
        by_pci = {gpu_by_pci_id(p) for p in self.pci_ids} - {None}
        #: the one model the PCI ids given name (for GPUs the file names only generically)
        self.pci_model: GpuModel | None = next(iter(by_pci)) if len(by_pci) == 1 else None
        self.generic = sorted({n for n in self.names.values() if is_generic(n)})
        self.models = {g: gpu_by_name(n) or (self.pci_model if is_generic(n) else None) for g, n in self.names.items()}
        self.levels = levels

    # -- what the file's GPUs are --------------------------------------------------------------
    def model(self, *labels: str) -> GpuModel | None:
        """The one catalogue model all of ``labels`` are (None when unknown or mixed)."""
        ms = {self.models.get(l) for l in labels}
        if len(ms) != 1:
            return None
        return next(iter(ms))

    def known(self) -> bool:
        return any(m is not None for m in self.models.values())

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for n in self.names.values():
            counts[n] = counts.get(n, 0) + 1
        return ", ".join(f"{c} x {n}" for n, c in counts.items()) or "no GPU names"

    def peer_reason(self, why: str) -> str:
        """Why a pair has no peer access, from what the file says of its GPUs: the driver's GeForce policy
        when the model (or the PCI id of a generically named GPU) is a GeForce part; every cause that
        fits when the file names the GPUs only generically; else ACS, the IOMMU or a VM."""
        blocked = sorted({m.key for m in self.models.values() if m is not None and not m.peer_access_pcie})
        named = f"the file names the GPUs only as {', '.join(repr(n) for n in self.generic)}" if self.generic else ""
        if blocked and self.generic:
            return (f"{why}; {named}, and PCI id {', '.join(self.pci_ids)} is {', '.join(blocked)}: the driver offers no "
                    "peer access over PCIe on GeForce boards (first cause); otherwise ACS, an IOMMU or a VM")
        if blocked:
            return (f"{why}; the driver offers no peer access over PCIe on {', '.join(blocked)} "
                    "(GeForce/TITAN boards: hardware catalogue)")
        if self.generic:
            return (f"{why}; {named} (a driver older than the GPU), so the cause could be any that fits a model it "
                    f"could be: {ALL_PEER_CAUSES}; give --gpu-pci-id with the GPU's PCI device id (`lspci -nn -d 10de:`) "
                    "to name which")
        return f"{why}; peer access is blocked by ACS, an IOMMU, or a VM without P2P (see `nvidia-smi topo -p2p r`)"

    def level(self, a: str, b: str) -> str | None:
        if self.levels is None or not (self.levels.has_device(a) and self.levels.has_device(b)):
            return None
        return self.levels.level(a, b)

    def gpus(self) -> list:
        return []

    def has_device(self, name: str) -> bool:
        return name in self.names

    # -- expected values -----------------------------------------------------------------------
    def _nvswitch_board(self, model: GpuModel) -> bool:
        """All 8 GPUs of an SXM/superchip part reach each other over every link (NVSwitch)."""
        same = [g for g, m in self.models.items() if m is model]
        return (model.nvlink is not None and model.form_factor in ("sxm", "superchip")
                and model.architecture not in _MESH_ARCHS and len(same) >= 8)

    def peer(self, a: str, b: str, peer_access: bool = True, said: bool = False) -> tuple[Expected | None, str | None]:
        """GPU a -> GPU b copy with peer access (or staged through host memory without): the
        expected value, or None and the reason none can be given. ``said``: the file itself says
        the pair CAN access each other (a patched driver on a GeForce board): that wins over the
        catalogue's "no peer access over PCIe"."""
        model = self.model(a, b)
        if model is None:
            return None, self._why_no_model(a, b)
        level = self.level(a, b)
        blocked = not model.peer_access_pcie and not said
        if not peer_access or (level is not None and not level.startswith("NV") and blocked):
            return self.staged(model, a, b, level)
        if level is not None and level.startswith("NV") and level[2:].isdigit() and model.nvlink:
            n = int(level[2:])
            per = model.nvlink.gbyte_s_per_link
            return Expected(per * n, bottleneck=f"{a}-{b} NVLink", bottleneck_desc=f"{n} x NVLink{model.nvlink.generation}",
                            level=level, kind="nvlink",
                            source=f"catalogue: {model.key} {per:g} GB/s per NVLink x {n} (level {level} from the pasted "
                                   "nvidia-smi topo -m)"), None
        if level is not None:
            return self._pcie(model, a, b, level, said)
        spec = model.nvlink
        if spec is not None and self._nvswitch_board(model):
            return Expected(spec.total_gbyte_s, bottleneck=f"{a} NVLink", level=f"NV{spec.links}", kind="nvlink",
                            bottleneck_desc=f"{spec.links} x NVLink{spec.generation}",
                            source=f"catalogue: {model.key}, 8 GPUs on an NVSwitch baseboard, {spec.links} x "
                                   f"{spec.gbyte_s_per_link:g} GB/s per direction"), None
        if model.nvlink is None:
            return self._pcie(model, a, b, None, said)
        return None, (f"the catalogue cannot tell this {model.key} pair's links (an NVLink bridge, a partial mesh "
                      "or a 4-GPU board): give --from-smi with the node's nvidia-smi topo -m, or --replay SNAPSHOT")

    def _pcie(self, model: GpuModel, a: str, b: str, level: str | None,
              said: bool = False) -> tuple[Expected | None, str | None]:
        if not model.peer_access_pcie and not said:
            return self.staged(model, a, b, level)
        rate = _pcie_rate(model)
        if rate is None:
            return None, f"the catalogue has no PCIe generation for {model.key}"
        where = f"level {level} from the pasted nvidia-smi topo -m" if level else "assumed: both GPUs at full width"
        return Expected(rate, bottleneck=f"{a}/{b} PCIe", bottleneck_desc=f"Gen{model.pcie_gen} x{model.pcie_width}",
                        level=level, kind="pcie",
                        source=f"catalogue: {model.key} PCIe Gen{model.pcie_gen} x{model.pcie_width} ({where})"), None

    def staged(self, model: GpuModel, a: str, b: str, level: str | None = None) -> tuple[Expected | None, str | None]:
        rate = _pcie_rate(model)
        if rate is None:
            return None, f"the catalogue has no PCIe generation for {model.key}"
        return Expected(rate, bottleneck=f"{a}->host->{b}", bottleneck_desc=f"Gen{model.pcie_gen} x{model.pcie_width}",
                        level=level or "host", kind="staged",
                        source=f"catalogue: {model.key} PCIe Gen{model.pcie_gen} x{model.pcie_width}, copies staged "
                               "through host memory (no peer access)"), None

    def host_device(self, gpu: str, bidir: bool = False) -> tuple[Expected | None, str | None]:
        model = self.model(gpu)
        if model is None:
            return None, self._why_no_model(gpu)
        if model.c2c_gbyte_s:
            caveat = model.unsourced_note("c2c_gbyte_s")
            return Expected(model.c2c_gbyte_s, bottleneck=f"{gpu} NVLink-C2C", bottleneck_desc="NVLink-C2C",
                            level="C2C", kind="pcie_bidir" if bidir else "pcie",
                            source=f"catalogue: {model.key} NVLink-C2C {model.c2c_gbyte_s:g} GB/s per direction"
                                   + (f" (unsourced: {caveat.split(':')[0]})" if caveat else "")), None
        rate = _pcie_rate(model)
        if rate is None:
            return None, f"the catalogue has no host link rate for {model.key}"
        return Expected(rate, bottleneck=f"{gpu} PCIe", bottleneck_desc=f"Gen{model.pcie_gen} x{model.pcie_width}",
                        level="H2D", kind="pcie_bidir" if bidir else "pcie",
                        source=f"catalogue: {model.key} PCIe Gen{model.pcie_gen} x{model.pcie_width} "
                               "(assumed: the slot runs at the card's full width)"), None

    def _below_bridge(self, a: str, b: str, figure: float | None) -> tuple[Expected | None, str | None]:
        """A bridged board whose figure is below one PCIe link did not cross an NVLink bridge: the
        pair's path is PCIe (staged where the driver gives no peer access)."""
        model = self.model(a, b)
        rate = _pcie_rate(model) if model is not None else None
        if model is None or model.nvlink is None or not model.nvlink.bridged or rate is None or figure is None \
                or figure > rate:
            return None, None
        exp, why = self._pcie(model, a, b, None)
        if exp is not None:
            exp = Expected(exp.gbyte_s, bottleneck=exp.bottleneck, bottleneck_desc=exp.bottleneck_desc, level=exp.level,
                           kind=exp.kind, source=exp.source + f"; {figure:.1f} GB/s is below one PCIe link, so no "
                                                              "NVLink bridge carried it")
        return exp, why

    def ring(self, gpus: Iterable[str], nodes: int, peer_access: bool = True,
             figure: float | None = None) -> tuple[Expected | None, str | None]:
        """Bus bandwidth of a ring over the GPUs of one node (several nodes: the file does not say
        which NICs carried the traffic). ``figure``: the measured busbw, which tells a bridged
        board's PCIe ring from an NVLink one when nothing else does."""
        gpus = list(gpus)
        if nodes > 1:
            return self._across_nodes(gpus, nodes)
        if not gpus:
            return None, ("the file names no GPU or rank (a tail of the table without its header and '# Rank' "
                          "lines): give the whole output, or --replay SNAPSHOT of the node")
        if len(gpus) < 2:
            return None, "a single GPU: no ring to judge"
        exp, why = self.peer(gpus[0], gpus[1], peer_access)
        if exp is None and self.levels is None:
            exp = self._below_bridge(gpus[0], gpus[1], figure)[0]
        if exp is None:
            return None, why
        return Expected(exp.gbyte_s, bottleneck=exp.bottleneck, bottleneck_desc=exp.bottleneck_desc, level=exp.level,
                        kind="staged" if exp.kind == "staged" else "busbw",
                        source=exp.source.replace("catalogue: ", "catalogue (the ring's slowest hop): ", 1)), None

    def _across_nodes(self, gpus: list[str], nodes: int) -> tuple[Expected | None, str | None]:
        """A ring over several nodes crosses each node's network: judged only where the GPU model names a
        system whose network is part of the product (DGX Spark's built-in ConnectX-7), never guessed
        from a GPU that many vendors' servers carry with NICs of their choice."""
        model = self.model(*gpus) if gpus else None
        system = integrated_system(model, len(gpus)) if model is not None else None
        if system is None or not system.rail_gbit_s:
            return None, ("the ranks span several nodes and the file does not name the NICs or their rates: give "
                          "--replay with a snapshot of one of the nodes")
        per_gpu = system.rails * system.rail_gbit_s / 8.0 / max(system.gpus, 1)
        return Expected(per_gpu, bottleneck=f"{system.rail_nic} {system.rail_gbit_s:g} Gb/s",
                        bottleneck_desc=f"{system.rails} x {system.rail_nic} {system.rail_gbit_s:g} Gb/s", level="NET",
                        kind="busbw",
                        source=(f"catalogue: {system.key} ({model.key if model else ''}), {system.rails} x "
                                f"{system.rail_nic} at {system.rail_gbit_s:g} Gb/s per node for {system.gpus} GPU(s): the "
                                f"ring between {nodes} nodes crosses that link")), None

    def slow_causes(self, gpus: list[str]) -> tuple[str, ...]:
        """The known causes of a slow figure between nodes of the system these GPUs make (DGX Spark's
        built-in link), each with its source; empty where no such system is catalogued."""
        model = self.model(*gpus) if gpus else None
        system = integrated_system(model, len(gpus)) if model is not None else None
        return system.slow_causes if system is not None else ()

    def nic(self, gpu: str | None, dev: str) -> tuple[Expected | None, str | None]:
        return None, nic_reason(dev)

    def uniform_peers(self, labels: Iterable[str]) -> bool | None:
        """Whether every pair of ``labels`` crosses the same kind of path as far as can be told: a
        pasted matrix gives levels (grouped apart), a PCIe-only part or an NVSwitch board is uniform,
        a part that may mix NVLink and PCIe pairs is not; None when the file names no known model."""
        if self.levels is not None:
            return True
        model = self.model(*labels)
        if model is None:
            return None
        return model.nvlink is None or self._nvswitch_board(model)

    def _why_no_model(self, *labels: str) -> str:
        names = sorted({self.names.get(l, "an unnamed GPU") for l in labels})
        if len(names) > 1:
            return f"the pair mixes GPU models ({', '.join(names)})"
        if is_generic(names[0]):
            return (f"the file names the GPU only as {names[0]!r} (a driver older than the GPU): give --gpu-pci-id with "
                    "its PCI device id (`lspci -nn -d 10de:`), or --replay SNAPSHOT of the node")
        return (f"the hardware catalogue does not know {names[0]!r}: give --replay SNAPSHOT of the node, or "
                "--from-smi, or add the part to ccdiag/data/hardware.json")


def integrated_system(model: GpuModel, gpus_per_node: int) -> SystemModel | None:
    """The one catalogued system built around ``model`` whose network is part of the product (a fixed
    NIC, not a vendor's choice), when the run used that system's GPU count per node."""
    hits = [s for s in catalogue().systems if s.gpu == model.key and s.integrated_network and s.gpus == gpus_per_node]
    return hits[0] if len(hits) == 1 else None


def nic_reason(dev: str) -> str:
    return (f"perftest names the device ({dev}) but not its port rate: give --replay with a snapshot of the node "
            "(the catalogue's NIC rates need the NIC model, which perftest does not print)")




class OtherNode(FileTopology):
    """The file ran on other hardware than the snapshot given: nothing is held to that node's links
    (the file's own figures are still compared with each other)."""

    def __init__(self, names: dict[str, str], why: str, pci_ids: Iterable[str] = ()):
        super().__init__(names, pci_ids=pci_ids)
        self.why = why

    def peer(self, a: str, b: str, peer_access: bool = True, said: bool = False) -> tuple[Expected | None, str | None]:
        return None, self.why

    def host_device(self, gpu: str, bidir: bool = False) -> tuple[Expected | None, str | None]:
        return None, self.why

    def ring(self, gpus: Iterable[str], nodes: int, peer_access: bool = True,
             figure: float | None = None) -> tuple[Expected | None, str | None]:
        return None, self.why

    def slow_causes(self, gpus: list[str]) -> tuple[str, ...]:
        """The known causes of a slow figure between nodes of the system these GPUs make (DGX Spark's
        built-in link), each with its source; empty where no such system is catalogued."""
        model = self.model(*gpus) if gpus else None
        system = integrated_system(model, len(gpus)) if model is not None else None
        return system.slow_causes if system is not None else ()

    def nic(self, gpu: str | None, dev: str) -> tuple[Expected | None, str | None]:
        return None, self.why
