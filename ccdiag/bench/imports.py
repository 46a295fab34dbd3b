"""``ccdiag bench import``: judge figures users already have against this node's topology.

nvbandwidth, p2pBandwidthLatencyTest, nccl-tests and perftest print numbers without saying
whether they are normal. Each parsed file (:mod:`ccdiag.benchparse`) becomes the same judged
:class:`~ccdiag.bench.result.Measurement` s that ``ccdiag bench`` measures itself, and the same
localisation names the slow component.

Device numbering: these tools number GPUs by CUDA ordinal; ccdiag numbers them as NVML does (PCI
bus order). The two agree when the tool ran with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and no
``CUDA_VISIBLE_DEVICES``; where a file names each GPU's PCI address (p2pBandwidthLatencyTest,
nccl-tests) that address is used instead.

What a figure is held to, in order of trust: the node's topology (this node, or ``--replay
SNAPSHOT``) when the file's GPUs are that node's; else the hardware catalogue, picked by the GPU
names the file prints, with levels from ``--from-smi`` when given (:mod:`.filetopo`). A file whose
GPU models or hosts differ from the snapshot given is said to be so and never held to that node's
links. Whatever the topology, the file's own figures are compared with each other
(:mod:`.filerules`), and when no figure could be judged the result says UNKNOWN, why, and what
would make it judgeable.

Ring bus bandwidth (nccl-tests) is judged only for what a ring can carry: with NVLink SHARP
(NVLS), CollNet or a tree the busbw formula no longer counts bytes on one link and can exceed the
link's rate (nccl-tests issues #153 and #212), so such figures are reported, never judged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from ccdiag.bench import expected as exp
from ccdiag.bench import filerules, import_bwt
from ccdiag.bench.filetopo import PCI_ID_IN_TEXT, FileTopology, MatrixTopology, OtherNode
from ccdiag.bench.judge import judge, judge_against_peers
from ccdiag.bench.localize import localize
from ccdiag.bench.result import RAN, BenchResult, Expected, Measurement
from ccdiag.core.findings import FAIL, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.benchparse.formats import describe
from ccdiag.topology.catalogue import gpu_by_name, normalize_name

if TYPE_CHECKING:
    from ccdiag.inputs.policy import Policy
    from ccdiag.topology.model import Topology

__all__ = ["MatrixTopology", "NodeInfo", "import_file"]

#: text that shows NCCL was set to, or chose, an algorithm whose busbw is not a link's rate (a
#: plugin probe such as "Failed to find ncclCollNetPlugin_v10 symbol" says nothing of the kind)
IN_NETWORK = re.compile(r"NCCL_ALGO=[^\s]*(?:NVLS|Tree|CollNet)|NCCL_COLLNET_ENABLE=1|NCCL_SHARP_ENABLE=1"
                        r"|\bAlgo (?:NVLS|NVLSTree|CollNet\w*|Tree)\b|NVLS multicast support is available", re.IGNORECASE)


#: NCCL transport lines: a channel "via SHM" between ranks of one node means no peer access
_VIA = re.compile(r"\bvia (P2P|SHM|NET)\b")
Why = "tuple[Expected | None, str | None]"
#: what a file's figures may be held to: the node's topology (live or replayed), the levels of a
#: pasted ``nvidia-smi topo -m`` (``--from-smi``), or nothing
GivenTopology = Union["Topology", MatrixTopology, None]


@dataclass(frozen=True)
class NodeInfo:
    """The node a topology describes: its host name, and whether the user named it (``--replay``)."""

    hostname: str | None = None
    replayed: bool = False


class NodeExpect:
    """Expected values from a node's topology (the live node, or a snapshot)."""

    def __init__(self, topology: Topology):
        self.t = topology

    def _why(self, *names: str) -> str:
        return f"{' or '.join(names)} is not in the node's topology (or NVML lost it)"

    def peer(self, a: str, b: str, peer_access: bool = True) -> tuple[Expected | None, str | None]:
        e = exp.peer(self.t, a, b) if peer_access else exp.staged(self.t, a, b)
        return e, None if e is not None else self._why(a, b)

    def host_device(self, gpu: str, bidir: bool = False) -> tuple[Expected | None, str | None]:
        e = exp.host_device(self.t, gpu, bidir=bidir)
        return e, None if e is not None else self._why(gpu)

    def ring(self, gpus: Iterable[str], nodes: int, peer_access: bool = True,
             figure: float | None = None) -> tuple[Expected | None, str | None]:
        local = [g for g in gpus if self.t.has_device(g)]
        if not peer_access and len(local) >= 2:
            e = exp.staged(self.t, local[0], local[1])
            if e is not None:
                e = Expected(e.gbyte_s, e.current_gbyte_s, e.bottleneck, e.current_bottleneck, e.bottleneck_desc,
                             e.current_desc, e.level, "staged", e.source, e.links)
            return e, None if e is not None else self._why(*local[:2])
        rails = sorted({self.t.nearest_nics(g)[0][0] for g in local if self.t.nearest_nics(g)})
        e = exp.ring(self.t, local, nodes, rails)
        return e, None if e is not None else "the ring's GPUs are not in the node's topology"

    def nic(self, gpu: str | None, dev: str) -> tuple[Expected | None, str | None]:
        if gpu is not None and self.t.has_device(gpu) and self.t.has_device(dev):
            return exp.gpu_nic(self.t, gpu, dev), None
        if self.t.has_device(dev):
            return exp.host_nic(self.t, dev), None
        return None, (f"{dev} is not in this node's topology, and perftest does not print the port rate: give "
                      "--replay with a snapshot of the node the run was on")

    def uniform_peers(self, labels: Iterable[str]) -> bool:
        return True  # path levels are known: the peer rule compares pairs of one level only


def _model_key(name: str | None) -> str:
    m = gpu_by_name(name)
    return m.key if m is not None else normalize_name(name or "")


def _short(host: str) -> str:
    return host.split(".")[0].lower()


def _mismatch(topology: Topology, names: dict[str, str], hosts: list[str], node: NodeInfo) -> str | None:
    """Why the file did not run on the node the topology describes, or None."""
    node_models = Counter(_model_key(g.name) for g in topology.gpus() if g.name)
    file_models = Counter(_model_key(n) for n in names.values())
    if file_models and node_models:
        extra = [k for k, c in file_models.items() if node_models.get(k, 0) < c]
        if extra:
            have = ", ".join(f"{c} x {k}" for k, c in node_models.items())
            want = ", ".join(f"{c} x {k}" for k, c in file_models.items())
            return f"the file's GPUs ({want}) are not the node's ({have})"
    if node.replayed and hosts and node.hostname and _short(node.hostname) not in {_short(h) for h in hosts}:
        return f"the file ran on {', '.join(sorted(set(hosts))[:4])}, the snapshot is of {node.hostname}"
    return None


def choose(topology: GivenTopology, names: dict[str, str], hosts: list[str], node: NodeInfo,
           gpu_file: bool = True, pci_ids: tuple[str, ...] = ()) -> tuple[Any, str | None]:
    """What the file's figures are held to, and a note saying so when it is not the node itself.
    ``pci_ids``: PCI device ids of the file's GPUs (given, or printed in the file), which name a GPU the
    file names only generically."""
    if isinstance(topology, MatrixTopology):
        return FileTopology(names, levels=topology, pci_ids=pci_ids), None
    has_gpus = topology is not None and bool(topology.gpus())
    if topology is None or (not has_gpus and (names or gpu_file)):
        return FileTopology(names, pci_ids=pci_ids), None
    why = _mismatch(topology, names, hosts, node)
    if why is None:
        return NodeExpect(topology), None
    if node.replayed:
        return OtherNode(names, f"not judged against the snapshot: {why}", pci_ids), why
    return FileTopology(names, pci_ids=pci_ids), f"{why}: expected values come from the hardware catalogue"


def _judge(m: Measurement, ex: tuple[Expected | None, str | None], policy: Policy | None) -> Measurement:
    m.expected, why = ex
    if m.expected is None:
        m.status = UNKNOWN
        m.note = (m.note + "; " if m.note else "") + (why or "no expected value")
        return m
    # each direction of a bidirectional NVLink copy is held to its own, looser fractions
    bidir_nvlink = m.direction == "bidir" and m.expected.kind == "nvlink"
    return judge(m, policy, "nvlink_bidir" if bidir_nvlink else None)


def _gpu(i: Any) -> str:
    return f"GPU{int(i)}"


# -- nvbandwidth --------------------------------------------------------------------------------
def _nvb_end(label: str, device: str | None) -> str:
    if device == "CPU":
        return "host"
    return _gpu(label) if label.isdigit() else label


_BISECT_ROW = re.compile(r"^([0-9]{1,6})->([0-9]{1,6})$")


def _nvb_cells(name: str, mat: Any) -> Iterable[tuple[str, str, float]]:
    """(source, destination, GB/s) of each measured cell: GPU pairs, host<->GPU, and the multi-node bisect
    case's "a->b" rows; matrices whose rows are not devices (all-to-one totals, local copies,
    multicast) hold no pair and give nothing."""
    if mat.description.startswith("Bisect"):
        for r, row in enumerate(mat.bandwidth_gbyte_s):
            m = _BISECT_ROW.match(mat.row_labels[r]) if r < len(mat.row_labels) else None
            if m and row and row[0] is not None:
                yield _gpu(m.group(1)), _gpu(m.group(2)), float(row[0])
        return
    if mat.row_device is None or mat.column_device is None:
        return
    for r, row in enumerate(mat.bandwidth_gbyte_s):
        for c, val in enumerate(row):
            if val is None:
                continue
            rl = mat.row_labels[r] if r < len(mat.row_labels) else str(r)
            cl = mat.column_labels[c] if c < len(mat.column_labels) else str(c)
            rdev, cdev = _nvb_end(rl, mat.row_device), _nvb_end(cl, mat.column_device)
            src, dst = (cdev, rdev) if mat.direction == "column_to_row" else (rdev, cdev)
            if src != dst:
                yield src, dst, float(val)


def from_nvbandwidth(parsed: Any, ex: Any, policy: Policy | None, source: str) -> list[Measurement]:
    out = []
    for name, case in parsed.testcases.items():
        op = "read" if "read" in name else "write" if "write" in name else "copy"
        for mat in case.matrices:
            if mat.bandwidth_gbyte_s is None:
                continue  # latency testcases are reported by nvbandwidth itself; nothing to judge
            if " Total bandwidth" in mat.description:
                continue  # the sum of a bidirectional case's two per-direction matrices, read above
            bidir = "bidirectional" in name or mat.direction == "both"
            for src, dst, val in _nvb_cells(name, mat):
                pair = src.startswith("GPU") and dst.startswith("GPU")
                m = Measurement("p2p" if pair else "h2d" if src == "host" else "d2h", src, dst, op=op,
                                direction="bidir" if bidir else "uni", engine=f"import:nvbandwidth {name}",
                                gbyte_s=val, samples_gbyte_s=(val,), note=source)
                found = ex.peer(src, dst) if pair else ex.host_device(dst if src == "host" else src, bidir)
                if "_sm" in name and found[0] is not None:
                    m.note = f"{source}; SM copy kernels (copy-engine fractions apply loosely)"
                if pair:
                    m.extra["peer_uniform"] = ex.uniform_peers([src, dst])
                out.append(_judge(m, found, policy))
    return out


def _nvb_errors(parsed: Any, ex: Any, source: str) -> list[Finding]:
    """Testcases that stopped on an error. A multi-node build failing to create its memory names its
    cause: multi-node nvbandwidth allocates fabric memory, which needs the IMEX service and channels
    even on one node (the maintainers' answer in NVIDIA/nvbandwidth#35, and its README), and NVLink
    between the nodes (GB200/GB300 NVL racks) to cross them."""
    out = []
    for name, case in parsed.testcases.items():
        msg = case.message or ""
        if case.status != "Error" and "CUDA_ERROR" not in msg:
            continue
        if parsed.multinode and ("cuMem" in msg or "NOT_PERMITTED" in msg):
            models = sorted({_model_key(n.split(" (")[0]) for n in parsed.devices.values()})
            summary = (f"{name} failed creating its memory ({msg[:120]}): multi-node nvbandwidth allocates fabric memory, "
                       "which needs the IMEX service and its channels on every node (even a single one) and an NVLink "
                       f"fabric between the nodes; the processes ran on {', '.join(models) or 'GPUs the file does not name'}")
            remedy = ("On GB200/GB300 NVL racks: start nvidia-imex (`systemctl start nvidia-imex`), list the nodes in "
                      "/etc/nvidia-imex/nodes_config.cfg, create the channels (`nvidia-modprobe -s -i 0`). Other "
                      "systems have no multi-node NVLink: use the single-node build of nvbandwidth there.")
        else:
            summary = f"{name} stopped on an error: {msg[:160] or case.status}"
            remedy = "Rerun the testcase alone (`nvbandwidth -t NAME`); an error before any figure says nothing of the links."
        out.append(Finding("bench.nvbandwidth.error", WARN, Component("node", "nvbandwidth"), summary,
                           evidence=(Evidence("testcase", f"{name}: {case.status}", source),), remedy=remedy))
    return out


def _nvb_waived(parsed: Any, ex: Any, source: str) -> list[Finding]:
    """nvbandwidth waives its peer testcases when the driver gives no peer mapping: name why."""
    waived = [n for n, c in parsed.testcases.items() if c.status == "Waived" and n.startswith("device_to_device")]
    if not waived:
        return []
    why = _peer_reason(ex, "nvbandwidth waived its peer-to-peer testcases (no peer mapping)")
    return [Finding(
        "bench.p2p.no_peer_access", WARN, Component("node", "p2p"), f"{len(waived)} testcase(s) waived: {why}",
        evidence=tuple(Evidence("testcase", f"{n}: Waived", source) for n in waived[:8]),
        expected="peer testcases that run", expected_source="nvbandwidth waives a testcase whose peer mapping fails",
        remedy=("Expected on GeForce boards (no peer access over PCIe). Elsewhere check `nvidia-smi topo -p2p r`, "
                "ACS and the IOMMU on the node (`ccdiag check`)."))]


# -- p2pBandwidthLatencyTest --------------------------------------------------------------------
def _cuda_to_label(parsed: Any, topology: GivenTopology) -> dict[int, str]:
    """CUDA ordinal -> topology GPU label, by the PCI address the sample prints."""
    out = {}
    by_bdf = {}
    for g in (topology.gpus() if topology is not None and not isinstance(topology, MatrixTopology) else []):
        if g.bdf:
            parts = g.bdf.lower().split(":")
            if len(parts) == 3:
                by_bdf[(int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16))] = g.label
    for d in parsed.devices:
        try:
            key = (int(d.pci_domain_id, 16), int(d.pci_bus_id, 16), int(d.pci_device_id, 16))
        except (TypeError, ValueError):
            key = None
        out[d.index] = by_bdf.get(key, _gpu(d.index)) if key is not None else _gpu(d.index)
    return out


def _p2p_cell(parsed: Any, ex: Any, policy: Policy | None, source: str, a: str, b: str, ij: tuple[int, int], val: float,
              direction: str, enabled: bool) -> Measurement:
    # the sample's bidirectional figure counts both directions: halved per direction
    v = val / 2 if direction == "bidir" else val
    said = parsed.peer_access.get(ij)  # the file's CAN / CANNOT (or connectivity), None when not printed
    peer = enabled and said is not False
    m = Measurement("p2p", a, b, op="write" if enabled else "staged", direction=direction,
                    engine="import:p2pBandwidthLatencyTest", gbyte_s=v, samples_gbyte_s=(v,),
                    note=source if peer else f"{source}; P2P disabled: staged through host memory")
    if direction == "bidir":
        m.extra["bidir_total_gbyte_s"] = val
    if not enabled:
        m.extra["p2p_disabled"] = True
    if said is False:  # the pair's own access, whichever matrix this figure is from
        m.extra["peer_access"] = False
        if enabled:
            m.note = f"{source}; the pair cannot access each other (CANNOT Access Peer)"
    m.extra["peer_uniform"] = ex.uniform_peers([a, b])
    if not peer and enabled:
        m.extra["no_peer_reason"] = _peer_reason(ex, "the pair cannot access each other")
    if not enabled and said is not False:
        # a P2P-disabled run between GPUs that can reach each other: the user's copies do not take this
        # path, and staged copies behind one PCIe switch share its uplink twice (NVIDIA/nccl#1309), so
        # these figures only serve the enabled-vs-disabled comparison
        why = "P2P disabled on a pair that has peer access: compared with P2P enabled, not held to a rate"
        return _judge(m, (None, why), policy)
    if direction == "bidir" and not peer:
        # both directions staged through host memory share it: held to the unidirectional figures
        # (bidirectional below unidirectional), not to a rate
        why = "bidirectional staged copies are compared with the unidirectional ones, not held to a link rate"
        return _judge(m, (None, why), policy)
    if peer and said and isinstance(ex, FileTopology):
        return _judge(m, ex.peer(a, b, True, said=True), policy)
    return _judge(m, ex.peer(a, b, peer), policy)


def from_p2plat(parsed: Any, ex: Any, policy: Policy | None, source: str, topology: GivenTopology = None) -> list[Measurement]:
    names = _cuda_to_label(parsed, topology)
    out: list[Measurement] = []
    local: list[Measurement] = []
    mats = ((parsed.unidir_p2p_enabled_gbyte_s, "uni", True), (parsed.bidir_p2p_enabled_gbyte_s, "bidir", True),
            (parsed.unidir_p2p_disabled_gbyte_s, "uni", False))
    for mat, direction, enabled in mats:
        for i, row in enumerate(mat or ()):
            for j, val in enumerate(row):
                a, b = names.get(i, _gpu(i)), names.get(j, _gpu(j))
                if i != j:
                    out.append(_p2p_cell(parsed, ex, policy, source, a, b, (i, j), float(val), direction, enabled))
                elif direction == "uni" and enabled:
                    local.append(Measurement("d2d", a, a, engine="import:p2pBandwidthLatencyTest",
                                             gbyte_s=float(val), samples_gbyte_s=(float(val),), note=source))
    models = {names.get(d.index, _gpu(d.index)): _model_key(d.name) for d in parsed.devices}
    if topology is not None and not isinstance(topology, MatrixTopology) and topology.gpus():
        models = {g.label: g.name or "" for g in topology.gpus()} or models
    judge_against_peers(local, models)
    return out + local


def _p2p_access_only(parsed: Any, ex: Any, source: str, ms: list[Measurement]) -> list[Finding]:
    """A paste of the sample's device and CAN/CANNOT lines without its matrices (the part people copy
    first) still says which pairs have no peer access, and why."""
    blocked = parsed.pairs_without_peer_access()
    if not blocked or any(m.bench == "p2p" for m in ms):
        return []
    why = _peer_reason(ex, "the sample says these pairs CANNOT access each other")
    pairs = ", ".join(f"{a}-{b}" for a, b in blocked[:6]) + (" ..." if len(blocked) > 6 else "")
    geforce = "driver offers no peer access" in why
    return [Finding(
        "bench.p2p.no_peer_access", WARN, Component("node", "p2p"),
        f"{len(blocked)} ordered GPU pair(s) have no peer access ({pairs}): {why}",
        evidence=tuple(Evidence(f"Device={a} -> Device={b}", "CANNOT Access Peer", source) for a, b in blocked[:8]),
        expected="peer access between GPUs that NCCL and CUDA copies use directly",
        expected_source="p2pBandwidthLatencyTest 'CAN/CANNOT Access Peer' lines",
        remedy=("Expected on GeForce boards: the driver offers peer access only over an NVLink bridge; NCCL falls back "
                "to SHM." if geforce else "Check `nvidia-smi topo -p2p r` on the node; " + filerules.ACS_OR_IOMMU))]


# -- perftest -------------------------------------------------------------------------------------
def _perftest_bench(test: str | None) -> str:
    """The benchmark a perftest run measures, by its test's name (``RDMA_Write BW Test``)."""
    test = (test or "").lower()
    return "ib_write" if "write" in test else "ib_read" if "read" in test else "ib_send" if "send" in test else "ib_bw"


def _perftest_notes(m: Measurement, parsed: Any, row: Any, intervals: int) -> None:
    """What the figure's note must say: both directions summed (``-b``), the unit assumed for JSON,
    and a median of several intervals (``--run_infinitely``)."""
    if parsed.bidirectional:
        m.extra["bidir_total_gbyte_s"] = row.bw_average_gbyte_s
        m.note = (m.note or "") + (f"; bidirectional (-b): {row.bw_average_gbyte_s:.2f} GB/s is both directions "
                                   f"summed, {row.bw_average_gbyte_s / 2:.2f} GB/s each way")
    if getattr(parsed, "bw_unit_assumed", False):
        m.note = (m.note or "") + (f"; perftest's JSON does not record its unit: read as {parsed.bw_unit} "
                                   "(give --perftest-unit Gb/sec for a run with --report_gbits)")
    if intervals > 1:
        m.note = (m.note or "") + f"; the median of {intervals} intervals at {row.size_bytes} bytes"


def from_perftest(parsed: Any, ex: Any, policy: Policy | None, source: str) -> list[Measurement]:
    if parsed.kind != "bw" or not parsed.bw_rows:
        return []
    largest = max(r.size_bytes for r in parsed.bw_rows)
    at_largest = sorted((r for r in parsed.bw_rows if r.size_bytes == largest), key=lambda r: r.bw_average_gbyte_s)
    row = at_largest[len(at_largest) // 2]  # --run_infinitely prints one row per interval: their median
    dev = parsed.device or "?"
    gpu = _gpu(parsed.cuda_device) if parsed.use_cuda and parsed.cuda_device is not None else None
    bench = _perftest_bench(parsed.test)
    # -b prints both directions summed: halved, and labelled per direction
    half = 2.0 if parsed.bidirectional else 1.0
    samples = tuple(x / half for x in (row.bw_average_gbyte_s, row.bw_peak_gbyte_s) if x)
    m = Measurement(bench, gpu or "host", f"{dev}:{getattr(parsed, 'ib_port', None) or 1}",
                    op=bench.replace("ib_", "rdma_"), direction="bidir" if parsed.bidirectional else "uni",
                    engine=f"import:perftest {parsed.test or ''}".strip(),
                    gbyte_s=row.bw_average_gbyte_s / half, samples_gbyte_s=samples,
                    size_bytes=row.size_bytes, note=f"{source} ({parsed.role or 'side unknown'})")
    _perftest_notes(m, parsed, row, len(at_largest))
    if row.bw_min_gbyte_s is not None:
        m.extra["bw_min_gbyte_s"] = row.bw_min_gbyte_s / half
    return [_judge(m, ex.nic(gpu, dev), policy)] if m.gbyte_s is not None else []


#: a window's bandwidth below this fraction of the run's average is a dip worth naming
BW_MIN_DIP = 0.5


def _perftest_findings(parsed: Any, source: str) -> list[Finding]:
    """The BW min column (--report-min-bw): a window far below the average shows transient dips the
    average hides (congestion, throttling, a marginal link); 0.00 is a window never measured."""
    out: list[Finding] = []
    rows = [r for r in parsed.bw_rows if r.bw_min_gbyte_s is not None]
    if not rows:
        return out
    measured = [r for r in rows if r.bw_min_gbyte_s]
    if not measured:
        out.append(Finding(
            "bench.rdma.bw_min", UNKNOWN, Component("rdma", parsed.device or "?"),
            "BW min printed as 0.00 on every row: no window of --report-min-bw iterations was measured (the run did "
            "not ask for it, or had fewer iterations than the window); the column says nothing of dips",
            evidence=tuple(Evidence(f"{r.size_bytes} bytes", "BW min 0.00", source) for r in rows[:4])))
        return out
    dips = [r for r in measured if r.bw_min_gbyte_s < BW_MIN_DIP * r.bw_average_gbyte_s]
    if dips:
        r = min(dips, key=lambda x: x.bw_min_gbyte_s / x.bw_average_gbyte_s)
        out.append(Finding(
            "bench.rdma.bw_min", WARN, Component("rdma", parsed.device or "?"),
            f"bandwidth dipped to {r.bw_min_gbyte_s:.2f} GB/s in a window at {r.size_bytes} bytes, "
            f"{r.bw_min_gbyte_s / r.bw_average_gbyte_s:.0%} of the run's average {r.bw_average_gbyte_s:.2f} GB/s: "
            "transient drops the average hides",
            evidence=tuple(Evidence(f"{x.size_bytes} bytes", f"min {x.bw_min_gbyte_s:.2f} / average "
                                    f"{x.bw_average_gbyte_s:.2f} GB/s", source) for x in dips[:6]),
            remedy=("Dips within a run point at congestion (PFC pause / ECN counters on the switch port), thermal or "
                    "power throttling of the NIC, or a marginal link (symbol errors, FEC corrections: `mlxlink -d DEV "
                    "--show_ber`); compare with a run on an idle fabric.")))
    return out


# -- nccl-tests -----------------------------------------------------------------------------------
def _wrong_findings(run: Any, coll: str, source: str) -> list[Finding]:
    return [Finding(
        "bench.nccl.wrong", FAIL, Component("node", f"nccl-tests {coll}"),
        f"nccl-tests {coll} reported wrong results at {row.size_bytes} bytes: data was corrupted in flight",
        evidence=(Evidence("#wrong (out-of-place, in-place)",
                           f"{row.out_of_place.wrong if row.out_of_place else None}, "
                           f"{row.in_place.wrong if row.in_place else None}", f"{source} line {row.line_no}"),),
        remedy=("Silent corruption: run `ccdiag check` for XIDs, NVLink/PCIe/IB error counters on every node "
                "of the run, and bisect the nodes with `ccdiag bench pairs`.")) for row in run.wrong_rows]


def _transport(text: str) -> tuple[bool, str | None]:
    """Whether NCCL had peer access inside the node, and why not, from the log lines in the file."""
    head = text[:1 << 24]
    vias = {m.group(1) for m in _VIA.finditer(head)}
    if "NCCL_P2P_DISABLE=1" in head:
        return False, "peer access disabled by NCCL_P2P_DISABLE=1"
    if "SHM" in vias and "P2P" not in vias:
        return False, "the ring ran over SHM (staged through host memory): no peer access between the GPUs"
    return True, None


def _peer_reason(ex: Any, why: str) -> str:
    """Why GPUs lack peer access, from what is known of them: the file's names (and PCI ids), or the node's."""
    if isinstance(ex, FileTopology):
        return ex.peer_reason(why)
    names = {g.label: g.name or "" for g in ex.t.gpus()} if isinstance(ex, NodeExpect) else {}
    return FileTopology(names).peer_reason(why)


def _busbw_unknown(m: Measurement, busbw: float, in_network: str | None) -> bool:
    e = m.expected
    if not in_network and not (e is not None and e.gbyte_s and busbw > e.gbyte_s and e.kind == "busbw"):
        return False
    why = (f"the log shows {in_network}" if in_network or e is None else
           f"busbw {busbw:.1f} GB/s exceeds the ring's bottleneck link ({e.gbyte_s:.1f} GB/s)")
    m.status = UNKNOWN
    m.note = (f"{m.note}; not judged: {why}: with NVLink SHARP, CollNet or a tree, busbw no longer counts "
              "bytes on one link (set NCCL_ALGO=Ring for a link-health comparison)")
    return True


def _nccl_local_gpus(run: Any, ex: Any) -> list[str]:
    """The GPUs of the run's first host (the node the figure is held to); the node's own GPUs when
    the file names none."""
    hosts = sorted({d.host for d in run.devices}) or ["?"]
    local = sorted({_gpu(d.device) for d in run.devices if d.host == hosts[0]}, key=lambda g: int(g[3:]))
    if not local and isinstance(ex, NodeExpect):
        local = [g.label for g in ex.t.gpus()]
    return local


def _nccl_measurement(run: Any, row: Any, busbw: float, nodes: int, coll: str, ex: Any, source: str,
                      transport: tuple[bool, str | None]) -> Measurement:
    """The run's figure: busbw at its largest size, its notes saying what the file left unsaid."""
    peer, why = transport
    m = Measurement("nccl", f"{run.n_ranks or len(run.devices) or '?'} ranks", f"{nodes} node(s)", op=coll,
                    direction="ring", engine="import:nccl-tests", gbyte_s=busbw, samples_gbyte_s=(busbw,),
                    size_bytes=row.size_bytes,
                    note=(f"{source}; busbw at the largest size ({row.size_bytes} bytes), not the 'Avg bus bandwidth' "
                          "line (an average over every size, the small ones included)"))
    if run.header_inferred:
        m.note = (m.note or "") + f"; {run.header_inferred}"
    if "nccl-tests.nocheck" in run.format_ids:
        m.note = (m.note or "") + "; results not validated (-c 0: #wrong printed N/A)"
    if not peer:
        m.note = (m.note or "") + "; " + _peer_reason(ex, why or "no peer access")
    return m


def _nccl_staged(m: Measurement, busbw: float, ex: Any, coll: str, why: str | None, source: str) -> Finding:
    """A ring held to host-staged copies: the GPUs had no peer access, and why."""
    assert m.expected is not None
    reason = _peer_reason(ex, why or "the ring ran without peer access between the GPUs")
    return Finding(
        "bench.nccl.no_peer_access", WARN, Component("node", f"nccl-tests {coll}"),
        f"{coll} busbw {busbw:.1f} GB/s is held to a ring staged through host memory: {reason}",
        evidence=(Evidence("busbw (largest size)", f"{busbw:.1f} GB/s", source),),
        expected=f"{m.expected.gbyte_s:.1f} GB/s per PCIe link", expected_source=m.expected.source,
        remedy=("Expected on GeForce boards (no peer access over PCIe: NCCL uses SHM). Elsewhere check "
                "`nvidia-smi topo -p2p r`, ACS and the IOMMU (`ccdiag check`), and NCCL_P2P_DISABLE."))


def _nccl_verdict(m: Measurement, busbw: float, ex: Any, coll: str, local: list[str], nodes: int, why: str | None,
                  source: str) -> Finding | None:
    """The judged figure as a finding: a pass naming its bottleneck, or a slow ring with the known
    causes of a slow link between these systems and how to find the slow link."""
    e = m.expected
    if e is None:  # not judged
        return None
    if m.status == "pass":
        return Finding(
            "bench.nccl", "pass", Component("node", f"nccl-tests {coll}"),
            f"{coll} busbw {busbw:.1f} GB/s = {m.ratio:.0%} of the {e.gbyte_s:.1f} GB/s its bottleneck "
            f"({e.bottleneck_desc or e.bottleneck}) carries ({_typical_words(m)})",
            evidence=(Evidence("busbw (largest size)", f"{busbw:.1f} GB/s", source),),
            expected=f"{e.gbyte_s:.1f} GB/s", expected_source=e.source)
    if m.status not in ("warn", "fail"):
        return None
    known = ex.slow_causes(local) if isinstance(ex, FileTopology) and nodes > 1 else ()
    remedy = ("Measure the links one by one: `ccdiag bench p2p` inside the node, `ccdiag bench pairs` "
              "between nodes; check `ccdiag nccl --log` on an NCCL_DEBUG=INFO log of the run.")
    if known:
        remedy = ("Known causes of a slow link between these systems: "
                  + "; ".join(f"({i}) {c}" for i, c in enumerate(known, 1)) + ". " + remedy)
    return Finding(
        "bench.nccl", m.status, Component("node", f"nccl-tests {coll}"),
        f"{coll} busbw {busbw:.1f} GB/s at {m.size_bytes} bytes = {m.ratio:.0%} of the "
        f"{e.gbyte_s:.1f} GB/s its bottleneck ({e.bottleneck}) carries (typical {m.typical})"
        + (f"; {why}" if why else ""),
        evidence=(Evidence("busbw (largest size)", f"{busbw:.1f} GB/s", source),),
        expected=f"{e.gbyte_s:.1f} GB/s", expected_source=e.source, remedy=remedy)


def _nccl_run(run: Any, ex: Any, policy: Policy | None, source: str, transport: tuple[bool, str | None],
              in_network: str | None) -> tuple[Measurement | None, list[Finding]]:
    coll = (run.collective or "collective").replace("_perf", "")
    findings = _wrong_findings(run, coll, source) + _not_one_job(run, coll, source)
    rows = [r for r in run.rows if r.out_of_place is not None or r.in_place is not None]
    if not rows:
        return None, findings
    row = max(rows, key=lambda r: r.size_bytes)
    busbw = max(x.busbw_gbyte_s for x in (row.out_of_place, row.in_place) if x is not None)
    nodes = run.n_nodes or len({d.host for d in run.devices} or {"?"})
    local = _nccl_local_gpus(run, ex)
    m = _nccl_measurement(run, row, busbw, nodes, coll, ex, source, transport)
    peer, why = transport
    found = ex.ring(local, nodes, peer, figure=busbw)
    m.expected = found[0]
    if not _busbw_unknown(m, busbw, in_network):
        _judge(m, found, policy)
    if m.expected is not None and m.expected.kind == "staged":
        findings.append(_nccl_staged(m, busbw, ex, coll, why, source))
    verdict = _nccl_verdict(m, busbw, ex, coll, local, nodes, why, source)
    if verdict is not None:
        findings.append(verdict)
    return m, findings


def _not_one_job(run: Any, coll: str, source: str) -> list[Finding]:
    """The same rank number on several hosts: the processes did not form one job. nccl-tests built
    without MPI (MPI=1) runs each process alone as rank 0 (NVIDIA/nccl-tests#17: "didn't compile with
    MPI at all"), so its figures are single-process ones, never the network's."""
    by_rank: dict[int, set[str]] = {}
    for d in run.devices:
        by_rank.setdefault(d.rank, set()).add(d.host)
    dup = {r: h for r, h in by_rank.items() if len(h) > 1}
    if not dup:
        return []
    r, hosts = sorted(dup.items())[0]
    return [Finding(
        "bench.nccl.not_one_job", FAIL, Component("node", f"nccl-tests {coll}"),
        f"rank {r} appears on {len(hosts)} hosts ({', '.join(sorted(hosts)[:4])}): the processes did not join one job, "
        "so each ran the collective alone and no byte crossed the network",
        evidence=tuple(Evidence("# Rank line", f"rank {d.rank} on {d.host} device {d.device}", source)
                       for d in run.devices if d.rank == r)[:8],
        expected="ranks 0..N-1 once each across the hosts", expected_source="nccl-tests '# Rank' lines",
        remedy=("Build nccl-tests with MPI (`make MPI=1 MPI_HOME=...`) and launch one process per GPU under mpirun/srun; "
                "a build without MPI runs every process as its own rank 0."))]


def _failed_runs(parsed: Any, text: str, coll_source: str) -> list[Finding]:
    """A run that printed its table header and stopped: the failure line it printed instead of rows."""
    out = []
    for run in parsed.runs:
        if run.rows:
            continue
        head = text[:1 << 24]
        m = _TEST_FAILURE.search(head)
        warn = _WARN_FAILURE.search(head)
        why = m.group(0).strip() if m else "no row was printed (output cut, or the run failed)"
        coll = (run.collective or "collective").replace("_perf", "")
        out.append(Finding(
            "bench.nccl.failed", FAIL if m else UNKNOWN, Component("node", f"nccl-tests {coll}"),
            f"nccl-tests {coll} printed its table header but no row: {why[:200]}"
            + (f" (after {warn.group(0).strip()[:120]})" if warn else ""),
            evidence=tuple(Evidence(what, x.group(0).strip()[:200], coll_source)
                           for what, x in (("failure", m), ("NCCL WARN", warn)) if x is not None),
            remedy=("Rerun with NCCL_DEBUG=INFO and read the WARN line before the failure (`ccdiag nccl --log FILE` "
                    "names its cause).")))
    return out


#: the line nccl-tests prints when a call fails, and NCCL's own WARN of a failed call
_TEST_FAILURE = re.compile(r"Test (?:NCCL|CUDA) failure [^\n]{0,200}")
_WARN_FAILURE = re.compile(r"NCCL WARN [^\n]{0,60}(?:failure|failed|error)[^\n]{0,140}", re.IGNORECASE)


def _typical_words(m: Measurement) -> str:
    """``typical 77%-82%``; for a pass below the typical range, that it is above the warn floor only
    (a pass that printed "25% ... typical 35%-45%" alone would read as a contradiction)."""
    low, floor = m.extra.get("typical_low"), m.extra.get("warn_below")
    if m.ratio is not None and low is not None and floor is not None and m.ratio < low:
        return f"below the typical {m.typical}, above the {floor:.0%} warn floor"
    return f"typical {m.typical}"


def nccl_findings(parsed: Any, text: str, ex: Any, policy: Policy | None, source: str) -> tuple[list[Measurement], list[Finding]]:
    hit = IN_NETWORK.search(text[:1 << 24])
    transport = _transport(text)
    ms: list[Measurement] = []
    findings: list[Finding] = []
    for run in parsed.runs:
        m, found = _nccl_run(run, ex, policy, source, transport, hit.group(0) if hit else None)
        findings += found
        if m is not None:
            ms.append(m)
    findings += _failed_runs(parsed, text, source)
    if not transport[0] and not ms and any(not r.rows for r in parsed.runs):
        findings.append(Finding(
            "bench.nccl.no_peer_access", WARN, Component("node", "nccl-tests"),
            f"the GPUs had no peer access: {_peer_reason(ex, transport[1] or 'NCCL connected them via SHM')}",
            evidence=(Evidence("NCCL transport", transport[1] or "via SHM", source),),
            remedy=("Expected on GeForce boards (no peer access over PCIe: NCCL uses SHM). Elsewhere check "
                    "`nvidia-smi topo -p2p r`, ACS and the IOMMU (`ccdiag check`).")))
    return ms, findings


# -- one file ---------------------------------------------------------------------------------------
def _file_names(kind: str, parsed: Any) -> tuple[dict[str, str], list[str]]:
    """GPU label -> the model name the file prints, and the hosts it names (nccl-tests)."""
    if kind == "nvbandwidth":
        hosts = sorted({p.host for p in parsed.processes.values()})
        return {_gpu(i): n.split(" (")[0] for i, n in parsed.devices.items()}, hosts
    if kind == "bandwidthTest":
        return {_gpu(i): n for run in parsed.runs for i, n in run.devices.items()}, []
    if kind == "p2plat":
        return {_gpu(d.index): d.name for d in parsed.devices}, []
    if kind == "nccl-tests":
        devs = [d for r in parsed.runs for d in r.devices]
        hosts = sorted({d.host for d in devs})
        return {_gpu(d.device): d.name for d in devs if hosts and d.host == hosts[0]}, hosts
    if getattr(parsed, "cuda_device_name", None) and parsed.cuda_device is not None:
        return {_gpu(parsed.cuda_device): parsed.cuda_device_name}, []
    return {}, []


def _unjudged(res: BenchResult, ex: Any, note: str | None) -> Finding:
    reasons = sorted({(m.note or "").split("; ")[-1] for m in res.measurements if m.status == UNKNOWN} - {""})
    why = reasons[0] if len(reasons) == 1 else "; ".join(reasons[:3]) or (res.reason or "no figure to judge")
    known = isinstance(ex, FileTopology) and ex.known()
    return Finding(
        "bench.import.unjudged", UNKNOWN, Component("node", res.name),
        f"{len(res.measurements)} figure(s) read, none judged: {why}",
        evidence=(Evidence("file", res.params.get("file"), "bench import"),
                  Evidence("GPUs named by the file", ex.describe() if isinstance(ex, FileTopology) else "-",
                           "bench import")),
        remedy=("To judge these figures give one of: --replay SNAPSHOT of the node they ran on (`ccdiag snapshot` "
                "there); --from-smi with that node's `nvidia-smi topo -m`" +
                ("" if known else "; a GPU model the hardware catalogue knows (ccdiag/data/hardware.json)") + "."),
        details={"reasons": reasons, "node": note})


def _other_node(res: BenchResult, why: str) -> Finding:
    return Finding(
        "bench.import.other_node", UNKNOWN, Component("node", res.name),
        f"{res.params.get('file')}: {why}; not judged against that node",
        evidence=(Evidence("file", res.params.get("file"), "bench import"),),
        remedy="Give the snapshot of the node the file ran on, or no --replay to judge it from the hardware catalogue.")


def _parse(text: str, perftest_unit: str | None) -> tuple[str, Any]:
    from ccdiag.benchparse.detect import detect, parse_any
    from ccdiag.benchparse.perftest import parse_perftest

    kind = detect(text)
    return kind, parse_perftest(text, perftest_unit) if kind == "perftest" else parse_any(text)


def _measure(kind: str, parsed: Any, text: str, ex: Any, topology: GivenTopology, policy: Policy | None,
             source: str) -> tuple[list[Measurement], list[Finding]]:
    if kind == "nccl-tests":
        return nccl_findings(parsed, text, ex, policy, source)
    if kind == "nvbandwidth":
        return (from_nvbandwidth(parsed, ex, policy, source),
                _nvb_waived(parsed, ex, source) + _nvb_errors(parsed, ex, source))
    if kind == "p2plat":
        ms = from_p2plat(parsed, ex, policy, source, topology if isinstance(ex, NodeExpect) else None)
        return ms, _p2p_access_only(parsed, ex, source, ms)
    if kind == "bandwidthTest":
        ms = import_bwt.measurements(parsed, ex, source, lambda m, found: _judge(m, found, policy))
        numa = {g.label: g.numa for g in ex.t.gpus()} if isinstance(ex, NodeExpect) else None
        return ms, import_bwt.numa_findings(ms, source, numa) + import_bwt.slow_causes(ms, source)
    return from_perftest(parsed, ex, policy, source), _perftest_findings(parsed, source)


def _pci_ids(gpu_pci_ids: tuple[str, ...], text: str) -> tuple[str, ...]:
    """The GPUs' PCI device ids, given (``2b85``, ``0x2b85``, ``10de:2b85`` or lspci's ``[10de:2b85]``:
    the part after the vendor) or printed in the file as lspci -nn prints them."""
    return tuple(sorted({p.strip().strip("[]").lower().rpartition(":")[2].removeprefix("0x") for p in gpu_pci_ids}
                        | {m.group(1).lower() for m in PCI_ID_IN_TEXT.finditer(text[:1 << 20])}))


def _localized(kind: str, res: BenchResult, ex: Any) -> list[Finding]:
    """The slow component named: the RDMA rules for perftest, the localisation of each benchmark's
    figures for the GPU tools (nccl-tests has its own findings)."""
    real = ex.t if isinstance(ex, NodeExpect) else None
    if kind == "perftest":
        from ccdiag.bench.ib_write import findings as rdma_findings

        return rdma_findings([m for m in res.measurements if m.expected is not None], real)
    if kind == "nccl-tests":
        return []
    return [f for bench in sorted({m.bench for m in res.measurements})
            for f in localize(bench, [m for m in res.measurements if m.bench == bench], real)]


def import_file(text: str, topology: GivenTopology, policy: Policy | None, source: str, perftest_unit: str | None = None,
                node: NodeInfo | None = None, gpu_pci_ids: tuple[str, ...] = ()) -> BenchResult:
    """Parse one file (any supported tool) and judge it. Raises BenchParseError on a bad file.
    ``topology``: the node's (live or replayed), a :class:`MatrixTopology` (``--from-smi``) or None;
    ``node`` says whose it is. ``perftest_unit``: the bandwidth unit of a perftest JSON file
    ("MiB/sec" or "Gb/sec"), which the JSON itself does not record. ``gpu_pci_ids``: PCI device ids of
    the file's GPUs, which name GPUs the file calls only "NVIDIA Graphics Device" (ids printed in the
    file itself, as lspci -nn prints them, are read too)."""
    from ccdiag.bench import supportfiles

    if supportfiles.detect(text) is not None:  # nvidia-smi -q, dcgmi diag: judged by the node's rules
        return supportfiles.judge_file(text, source, policy)
    kind, parsed = _parse(text, perftest_unit)
    names, hosts = _file_names(kind, parsed)
    ex, note = choose(topology, names, hosts, node or NodeInfo(), gpu_file=kind != "perftest",
                      pci_ids=_pci_ids(gpu_pci_ids, text))
    res = BenchResult(f"import:{kind}", RAN, params={"file": source, "tool": kind})
    read_as = describe(getattr(parsed, "format_ids", ()))
    if read_as:
        res.params["read_as"] = read_as
    res.measurements, res.findings = _measure(kind, parsed, text, ex, topology, policy, source)
    if note:
        res.params["judged_against"] = note
        if isinstance(ex, OtherNode):
            res.findings.append(_other_node(res, note))
    if kind == "perftest" and not res.measurements:
        res.reason = "latency test: reported, not judged (no expected latency in the topology)"
    res.findings += _localized(kind, res, ex)
    res.findings += filerules.apply(res.measurements, source)
    if not filerules.judged(res.measurements, res.findings) and not any(
            f.status in (WARN, FAIL) for f in res.findings):
        res.findings.append(_unjudged(res, ex, note))
    return res
