"""``ccdiag bench import``: judge figures users already have against this node's topology.

nvbandwidth, p2pBandwidthLatencyTest, nccl-tests and perftest print numbers without saying
whether they are normal. Each parsed file (:mod:`ccdiag.benchparse`) becomes the same judged
:class:`~ccdiag.bench.result.Measurement` s that ``ccdiag bench`` measures itself, and the same
localisation names the slow component.

Device numbering: these tools number GPUs by CUDA ordinal; ccdiag numbers them as NVML does (PCI
bus order). The two agree when the tool ran with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and no
``CUDA_VISIBLE_DEVICES``; where a file names each GPU's PCI address (p2pBandwidthLatencyTest,
nccl-tests) that address is used instead.

Ring bus bandwidth (nccl-tests) is judged only for what a ring can carry: with NVLink SHARP
(NVLS), CollNet or a tree the busbw formula no longer counts bytes on one link and can exceed the
link's rate (nccl-tests issues #153 and #212), so such figures are reported, never judged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ccdiag.bench import expected as exp
from ccdiag.bench.judge import judge, judge_against_peers
from ccdiag.bench.localize import localize
from ccdiag.bench.result import RAN, BenchResult, Expected, Measurement
from ccdiag.findings import FAIL, UNKNOWN, Component, Evidence, Finding

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: text that shows NCCL was set to, or chose, an algorithm whose busbw is not a link's rate (a
#: plugin probe such as "Failed to find ncclCollNetPlugin_v10 symbol" says nothing of the kind)
IN_NETWORK = re.compile(r"NCCL_ALGO=[^\s]*(?:NVLS|Tree|CollNet)|NCCL_COLLNET_ENABLE=1|NCCL_SHARP_ENABLE=1"
                        r"|\bAlgo (?:NVLS|NVLSTree|CollNet\w*|Tree)\b|NVLS multicast support is available", re.I)


class MatrixTopology:
    """The levels of a pasted ``nvidia-smi topo -m`` standing in for a topology: it names paths
    (NV18, PIX, SYS) but carries no link rates, so measurements read against it are placed and
    explained, not given a ratio."""

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


def _expected(topology: Topology, kind: str, *names: str) -> Expected | None:
    if isinstance(topology, MatrixTopology):
        level = topology.level(names[0], names[-1]) if len(names) == 2 and all(map(topology.has_device, names)) else None
        return Expected(None, level=level, kind="pcie" if kind != "p2p" else "nvlink",
                        source="pasted nvidia-smi topo -m: levels only, no link rates")
    if kind == "h2d":
        return exp.host_device(topology, names[0])
    if kind == "h2d_bidir":
        return exp.host_device(topology, names[0], bidir=True)
    if kind == "p2p":
        return exp.peer(topology, *names)
    if kind == "staged":
        return exp.staged(topology, *names)
    if kind == "gpu_nic":
        return exp.gpu_nic(topology, *names)
    if kind == "host_nic":
        return exp.host_nic(topology, names[0])
    return None


def _judge(m: Measurement, policy: Any) -> Measurement:
    if m.expected is not None and m.expected.gbyte_s is None and m.expected.level:
        m.status = UNKNOWN
        m.note = (m.note + "; " if m.note else "") + f"path {m.expected.level}; {m.expected.source}"
        return m
    return judge(m, policy)


def _gpu(i: Any) -> str:
    return f"GPU{int(i)}"


# -- nvbandwidth --------------------------------------------------------------------------------
def from_nvbandwidth(parsed: Any, topology: Topology | None, policy: Any, source: str) -> list[Measurement]:
    out = []
    for name, case in parsed.testcases.items():
        for mat in case.matrices:
            if mat.bandwidth_gbyte_s is None:
                continue  # latency testcases are reported by nvbandwidth itself; nothing to judge
            bidir = "bidirectional" in name or mat.direction == "both"
            for r, row in enumerate(mat.bandwidth_gbyte_s):
                for c, val in enumerate(row):
                    if val is None:
                        continue
                    rl = mat.row_labels[r] if r < len(mat.row_labels) else str(r)
                    cl = mat.column_labels[c] if c < len(mat.column_labels) else str(c)
                    rdev = "host" if mat.row_device == "CPU" else _gpu(rl) if rl.isdigit() else rl
                    cdev = "host" if mat.column_device == "CPU" else _gpu(cl) if cl.isdigit() else cl
                    src, dst = (cdev, rdev) if mat.direction == "column_to_row" else (rdev, cdev)
                    if src == dst:
                        continue
                    op = "read" if "read" in name else "write" if "write" in name else "copy"
                    m = Measurement("p2p" if src.startswith("GPU") and dst.startswith("GPU") else
                                    "h2d" if src == "host" else "d2h", src, dst, op=op,
                                    direction="bidir" if bidir else "uni", engine=f"import:nvbandwidth {name}",
                                    gbyte_s=float(val), samples_gbyte_s=(float(val),), note=source)
                    if m.bench == "p2p":
                        m.expected = _expected(topology, "p2p", src, dst)
                    else:
                        gpu = dst if src == "host" else src
                        m.expected = _expected(topology, "h2d_bidir" if bidir else "h2d", gpu)
                    if "_sm" in name and m.expected is not None:
                        m.note = f"{source}; SM copy kernels (copy-engine fractions apply loosely)"
                    out.append(_judge(m, policy))
    return out


# -- p2pBandwidthLatencyTest --------------------------------------------------------------------
def _cuda_to_label(parsed: Any, topology: Topology | None) -> dict[int, str]:
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
        out[d.index] = by_bdf.get(key, _gpu(d.index))
    return out


def from_p2plat(parsed: Any, topology: Topology | None, policy: Any, source: str) -> list[Measurement]:
    names = _cuda_to_label(parsed, topology)
    out: list[Measurement] = []
    mats = ((parsed.unidir_p2p_enabled_gbyte_s, "uni", True), (parsed.bidir_p2p_enabled_gbyte_s, "bidir", True),
            (parsed.unidir_p2p_disabled_gbyte_s, "uni", False))
    local: list[Measurement] = []
    for mat, direction, enabled in mats:
        if not mat:
            continue
        for i, row in enumerate(mat):
            for j, val in enumerate(row):
                if val is None:
                    continue
                a, b = names.get(i, _gpu(i)), names.get(j, _gpu(j))
                if i == j:
                    if direction == "uni" and enabled:
                        local.append(Measurement("d2d", a, a, engine="import:p2pBandwidthLatencyTest",
                                                 gbyte_s=float(val), samples_gbyte_s=(float(val),), note=source))
                    continue
                # the sample's bidirectional figure counts both directions: halve it per direction
                v = float(val) / 2 if direction == "bidir" else float(val)
                peer = enabled and parsed.peer_access.get((i, j), True)
                m = Measurement("p2p", a, b, op="write" if enabled else "staged", direction=direction,
                                engine="import:p2pBandwidthLatencyTest", gbyte_s=v, samples_gbyte_s=(v,),
                                note=source if peer else f"{source}; P2P disabled: staged through host memory")
                m.expected = _expected(topology, "p2p" if peer else "staged", a, b)
                if not peer:
                    m.extra["peer_access"] = False
                    if enabled:
                        m.note = f"{source}; the pair cannot access each other (CANNOT Access Peer)"
                out.append(_judge(m, policy))
    models = {g.label: g.name or "" for g in topology.gpus()} if topology is not None else {}
    judge_against_peers(local, models)
    return out + local


# -- perftest -------------------------------------------------------------------------------------
def from_perftest(parsed: Any, topology: Topology | None, policy: Any, source: str) -> list[Measurement]:
    if parsed.kind != "bw" or not parsed.bw_rows:
        return []
    row = max(parsed.bw_rows, key=lambda r: r.size_bytes or 0)
    dev = parsed.device or "?"
    gpu = _gpu(parsed.cuda_device) if parsed.use_cuda and parsed.cuda_device is not None else None
    test = (parsed.test or "").lower()
    bench = "ib_write" if "write" in test else "ib_read" if "read" in test else "ib_send" if "send" in test else "ib_bw"
    m = Measurement(bench, gpu or "host", f"{dev}:{getattr(parsed, 'ib_port', None) or 1}",
                    op=bench.replace("ib_", "rdma_"), engine=f"import:perftest {parsed.test or ''}".strip(),
                    gbyte_s=row.bw_average_gbyte_s,
                    samples_gbyte_s=tuple(x for x in (row.bw_average_gbyte_s, row.bw_peak_gbyte_s) if x),
                    size_bytes=row.size_bytes, note=f"{source} ({parsed.role or 'side unknown'})")
    if getattr(parsed, "bw_unit_assumed", False):
        m.note += (f"; perftest's JSON does not record its unit: read as {parsed.bw_unit} "
                   "(give --perftest-unit Gb/sec for a run with --report_gbits)")
    if gpu is not None and topology is not None and topology.has_device(gpu) and topology.has_device(dev):
        m.expected = _expected(topology, "gpu_nic", gpu, dev)
    elif topology is not None and topology.has_device(dev):
        m.expected = _expected(topology, "host_nic", dev)
    else:
        m.note += f"; {dev} is not in this topology"
    return [_judge(m, policy)] if m.gbyte_s is not None else []


# -- nccl-tests -----------------------------------------------------------------------------------
def nccl_findings(parsed: Any, text: str, topology: Topology | None, policy: Any, source: str) -> tuple[list[Measurement], list[Finding]]:
    ms: list[Measurement] = []
    findings: list[Finding] = []
    hit = IN_NETWORK.search(text[:1 << 24])
    in_network = hit.group(0) if hit else None
    for run in parsed.runs:
        coll = (run.collective or "collective").replace("_perf", "")
        for row in run.wrong_rows:
            findings.append(Finding(
                "bench.nccl.wrong", FAIL, Component("node", f"nccl-tests {coll}"),
                f"nccl-tests {coll} reported wrong results at {row.size_bytes} bytes: data was corrupted in flight",
                evidence=(Evidence("#wrong (out-of-place, in-place)",
                                   f"{row.out_of_place.wrong if row.out_of_place else None}, "
                                   f"{row.in_place.wrong if row.in_place else None}", f"{source} line {row.line_no}"),),
                remedy=("Silent corruption: run `ccdiag check` for XIDs, NVLink/PCIe/IB error counters on every node "
                        "of the run, and bisect the nodes with `ccdiag bench pairs`.")))
        rows = [r for r in run.rows if r.out_of_place is not None]
        if not rows:
            continue
        row = max(rows, key=lambda r: r.size_bytes)
        busbw = max(row.out_of_place.busbw_gbyte_s, row.in_place.busbw_gbyte_s if row.in_place else 0.0)
        hosts = sorted({d.host for d in run.devices}) or ["?"]
        nodes = run.n_nodes or len(hosts)
        local = sorted({_gpu(d.device) for d in run.devices if d.host == hosts[0]}) or \
            [g.label for g in (topology.gpus() if topology is not None and hasattr(topology, "gpus") else [])]
        m = Measurement("nccl", f"{run.n_ranks or len(run.devices) or '?'} ranks", f"{nodes} node(s)", op=coll,
                        direction="ring", engine="import:nccl-tests", gbyte_s=busbw, samples_gbyte_s=(busbw,),
                        size_bytes=row.size_bytes, note=f"{source}; busbw at the largest size")
        if topology is not None and not isinstance(topology, MatrixTopology):
            rails = sorted({topology.nearest_nics(g)[0][0] for g in local if topology.has_device(g)
                            and topology.nearest_nics(g)})
            m.expected = exp.ring(topology, [g for g in local if topology.has_device(g)], nodes, rails)
        if in_network or (m.expected is not None and m.expected.gbyte_s and busbw > m.expected.gbyte_s):
            why = (f"the log shows {in_network}" if in_network else
                   f"busbw {busbw:.1f} GB/s exceeds the ring's bottleneck link ({m.expected.gbyte_s:.1f} GB/s)")
            m.status = UNKNOWN
            m.note = (f"{m.note}; not judged: {why}: with NVLink SHARP, CollNet or a tree, busbw no longer counts "
                      "bytes on one link (set NCCL_ALGO=Ring for a link-health comparison)")
        else:
            _judge(m, policy)
        ms.append(m)
        if m.status in ("warn", "fail"):
            e = m.expected
            findings.append(Finding(
                "bench.nccl", m.status, Component("node", f"nccl-tests {coll}"),
                f"{coll} busbw {busbw:.1f} GB/s at {row.size_bytes} bytes = {m.ratio:.0%} of the "
                f"{e.gbyte_s:.1f} GB/s its bottleneck ({e.bottleneck}) carries (typical {m.typical})",
                evidence=(Evidence("busbw (largest size)", f"{busbw:.1f} GB/s", source),),
                expected=f"{e.gbyte_s:.1f} GB/s", expected_source=e.source,
                remedy=("Measure the links one by one: `ccdiag bench p2p` inside the node, `ccdiag bench pairs` "
                        "between nodes; check `ccdiag nccl --log` on an NCCL_DEBUG=INFO log of the run.")))
    return ms, findings


def import_file(text: str, topology: Topology, policy: Any, source: str, perftest_unit: str | None = None) -> BenchResult:
    """Parse one file (any supported tool) and judge it. Raises BenchParseError on a bad file.
    ``perftest_unit``: the bandwidth unit of a perftest JSON file ("MiB/sec" or "Gb/sec"), which the
    JSON itself does not record."""
    from ccdiag.benchparse.detect import detect, parse_any
    from ccdiag.benchparse.perftest import parse_perftest

    kind = detect(text)
    parsed = parse_perftest(text, perftest_unit) if kind == "perftest" else parse_any(text)
    res = BenchResult(f"import:{kind}", RAN, params={"file": source, "tool": kind})
    if kind == "nccl-tests":
        res.measurements, res.findings = nccl_findings(parsed, text, topology, policy, source)
        return res
    if kind == "nvbandwidth":
        ms = from_nvbandwidth(parsed, topology, policy, source)
    elif kind == "p2plat":
        ms = from_p2plat(parsed, topology, policy, source)
    else:
        ms = from_perftest(parsed, topology, policy, source)
        if not ms:
            res.reason = "latency test: reported, not judged (no expected latency in the topology)"
    res.measurements = ms
    real = None if isinstance(topology, MatrixTopology) else topology
    if kind == "perftest":
        from ccdiag.bench.ib_write import findings as rdma_findings

        res.findings = rdma_findings(ms, real)
        return res
    for bench in sorted({m.bench for m in ms}):
        res.findings += localize(bench, [m for m in ms if m.bench == bench], real)
    return res
