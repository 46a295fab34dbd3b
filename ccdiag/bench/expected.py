"""Expected bandwidth of each measured path, read from the topology (never from per-SKU constants).

Each function names the path's bottleneck link twice: as the hardware can carry (capability, what a
measurement is judged against) and as the links trained now (a GPU at x8, NVLinks down), so that a
low figure that matches a trained-down link is blamed on that link, and a low figure on a healthy
path is blamed on what the measurements share (:mod:`.localize`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ccdiag.bench.result import Expected

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology


def _desc(link: Any, current: bool) -> str | None:
    if link is None:
        return None
    return link.current_desc if current else link.max_desc


def _from_paths(cap: Any, cur: Any, kind: str, source: str) -> Expected:
    return Expected(
        gbyte_s=cap.gbyte_s, current_gbyte_s=cur.gbyte_s,
        bottleneck=cap.bottleneck.name if cap.bottleneck else None,
        current_bottleneck=cur.bottleneck.name if cur.bottleneck else None,
        bottleneck_desc=_desc(cap.bottleneck, False), current_desc=_desc(cur.bottleneck, True),
        level=cap.level, kind=kind, source=source, links=tuple(l.name for l in cap.links))


def _missing(topology: Topology | None, *names: str) -> str | None:
    """The first name the topology cannot place: absent, or a GPU NVML lost (its links unknown)."""
    for n in names:
        if topology is None or not topology.has_device(n):
            return n
        if n.startswith("GPU"):
            try:
                if topology.gpu(n).failed:
                    return n
            except KeyError:
                pass
    return None


def host_device(topology: Topology | None, gpu: str, bidir: bool = False) -> Expected | None:
    """Host memory on the GPU's own NUMA node <-> the GPU: the PCIe path to the root complex."""
    if topology is None or _missing(topology, gpu):
        return None
    cap, cur = topology.expected_h2d(gpu), topology.expected_h2d(gpu, current=True)
    return _from_paths(cap, cur, "pcie_bidir" if bidir else "pcie",
                       f"topology: PCIe path host->{gpu}, bottleneck link")


def peer(topology: Topology | None, a: str, b: str) -> Expected | None:
    """GPU a -> GPU b: NVLink count x per-link rate, or the PCIe bottleneck of their path."""
    if topology is None or _missing(topology, a, b):
        return None
    cap, cur = topology.path_bandwidth(a, b), topology.current_path_bandwidth(a, b)
    kind = "nvlink" if (cap.level or "").startswith("NV") else "pcie"
    return _from_paths(cap, cur, kind, f"topology: path {a}->{b} ({cap.level}), bottleneck link")


def staged(topology: Topology | None, a: str, b: str) -> Expected | None:
    """A copy between GPUs without peer access goes through host memory: down one GPU's PCIe path
    and up the other's. Expected: the slower of the two paths (the copy engines overlap the halves)."""
    ea, eb = host_device(topology, a), host_device(topology, b)
    if ea is None or eb is None:
        return None
    worse = min((ea, eb), key=lambda e: e.gbyte_s if e.gbyte_s is not None else float("inf"))
    cur = min((x for x in (ea.current_gbyte_s, eb.current_gbyte_s) if x is not None), default=None)
    return Expected(worse.gbyte_s, cur, worse.bottleneck, worse.current_bottleneck, worse.bottleneck_desc,
                    worse.current_desc, level="host", kind="staged",
                    source=f"topology: {a}->host->{b}, the slower PCIe path", links=ea.links + eb.links)


def gpu_nic(topology: Topology | None, gpu: str, nic: str) -> Expected | None:
    """GPU memory -> NIC -> wire (GPUDirect RDMA): the smaller of the PCIe path and the port rate."""
    if topology is None or _missing(topology, gpu, nic):
        return None
    cap = topology.expected_gpu_nic(gpu, nic)
    cur = topology.expected_gpu_nic(gpu, nic, current=True)
    return _from_paths(cap, cur, "rdma", f"topology: {gpu}->{nic} ({cap.level}) then the port's wire")


def host_nic(topology: Topology | None, nic: str) -> Expected | None:
    """Host memory -> NIC -> wire: the NIC's PCIe path to its root complex, then the port rate."""
    if topology is None or _missing(topology, nic):
        return None
    cap, cur = topology.expected_h2d(nic), topology.expected_h2d(nic, current=True)
    node = topology.node_id(nic)
    wires = [l for l in topology.links() if l.kind in ("ib", "roce") and l.a == node]
    if not wires:
        return _from_paths(cap, cur, "rdma", f"topology: host->{nic} PCIe path (no port rate known)")
    wire = max(wires, key=lambda l: l.max_gbyte_s or 0.0)
    best = _from_paths(cap, cur, "rdma", f"topology: host->{nic} PCIe path, then the port's wire")
    if wire.max_gbyte_s is not None and (best.gbyte_s is None or wire.max_gbyte_s < best.gbyte_s):
        best = Expected(wire.max_gbyte_s, wire.current_gbyte_s, wire.name, wire.name, wire.max_desc,
                        wire.current_desc, best.level, "rdma", best.source, best.links + (wire.name,))
    return best


def ring(topology: Topology | None, gpus: list[str], nodes: int = 1, nics_per_node: list[str] | None = None) -> Expected | None:
    """Bus bandwidth a ring over ``gpus`` can reach: the slowest hop between consecutive GPUs, and
    across nodes the node's RDMA rails together (NCCL runs rings over every rail at once, so the
    ideal multi-node busbw is the node's aggregate NIC bandwidth: 8 x 50 GB/s NDR gives ~400,
    and 381.8 GB/s was measured on such nodes, stas00/ml-engineering network/README)."""
    gpus = [g for g in gpus if topology is not None and topology.has_device(g)]
    if len(gpus) < 2 and nodes <= 1:
        return None
    best: Expected | None = None
    for a, b in zip(gpus, gpus[1:] + gpus[:1]):
        if a == b:
            continue
        e = peer(topology, a, b)
        if e is not None and e.gbyte_s is not None and (best is None or e.gbyte_s < cast(float, best.gbyte_s)):
            best = e
    if nodes > 1 and nics_per_node:
        total = cur = 0.0
        names = []
        for nic in nics_per_node:
            e = host_nic(topology, nic)
            if e is not None and e.gbyte_s:
                total += e.gbyte_s
                cur += e.current_gbyte_s or 0.0
                names.append(nic)
        if names and (best is None or best.gbyte_s is None or total < best.gbyte_s):
            best = Expected(total, cur, f"RDMA rails {', '.join(names)}", None,
                            f"{len(names)} rails", None, "NET", "busbw",
                            "topology: the node's RDMA rails together")
    if best is None:
        return None
    return Expected(best.gbyte_s, best.current_gbyte_s, best.bottleneck, best.current_bottleneck,
                    best.bottleneck_desc, best.current_desc, best.level, "busbw",
                    "topology: the ring's slowest hop" if best.level != "NET" else best.source, best.links)


def _gpu_model(topology: Topology | None, gpu: str) -> tuple[Any, str | None]:
    """The catalogue's model of ``gpu`` (by the name NVML printed) and that name; (None, name) when
    the catalogue does not know the part."""
    from ccdiag.topology.catalogue import gpu_by_name

    try:
        name = topology.gpu(gpu).name if topology is not None else None
    except KeyError:
        return None, None
    return gpu_by_name(name), name


def hbm(topology: Topology | None, gpu: str) -> Expected | None:
    """The GPU's device memory: the catalogue's published bandwidth of this board (no link of the
    topology carries it). None when the GPU is unknown or the catalogue has no figure for its model."""
    if topology is None or _missing(topology, gpu):
        return None
    model, name = _gpu_model(topology, gpu)
    figure = model.hbm_for(name) if model is not None else None
    if figure is None:
        return None
    return Expected(figure, None, f"{gpu} memory", None, f"{model.key} {figure:,.0f} GB/s", None, level="HBM",
                    kind="hbm", source=f"catalogue {model.key}: {model.hbm_source}")


def gemm(topology: Topology | None, gpu: str, dtype: str = "fp16") -> Expected | None:
    """The GPU's tensor cores: the SKU's published dense peak for ``dtype`` inputs, from the
    catalogue. None when the GPU is unknown or its model has no published figure there."""
    if topology is None or _missing(topology, gpu):
        return None
    model, _ = _gpu_model(topology, gpu)
    peak = model.dense_peak_tflops(dtype) if model is not None else None
    if peak is None:
        return None
    return Expected(None, None, f"{gpu} tensor cores", None, f"{model.key} dense {dtype.upper()} {peak:,.1f} TFLOPS",
                    None, level="SM", kind="gemm", source=f"catalogue {model.key}: {model.dense_tflops_source}",
                    tflops=peak)
