"""``ib_write``: RDMA WRITE bandwidth per RDMA port, from GPU memory (GPUDirect) and host memory.

Per active port, a loopback through the port itself (the per-HCA GPUDirect check production fleets
run): the source buffer in the memory of the GPU nearest to that port, then in host memory for
comparison. Two engines:

* ``perftest``: runs the installed ``ib_write_bw`` as server and client on the same device
  (``--use_cuda_bus_id`` for GPU memory, ``--report_gbits``) and reads the client's table;
* ``pyverbs``: ccdiag's own RC loopback (:mod:`.rdma_worker`).

GPU memory is registered by DMA-BUF first, NVIDIA's recommended path on the open GPU kernel modules
(perftest ``--use_cuda_dmabuf`` when its ``--help`` lists it; the pyverbs engine exports the CUDA
allocation itself), and through ``nvidia_peermem`` when that fails or is not built in; each GPU
measurement says which registration it used.

Expected: the GPU->NIC PCIe path and the port's rate, the smaller of the two (topology). A GPU
figure low while the host figure is normal blames the GPU<->NIC path: a ``SYS``/``NODE`` path
(GPUDirect across the CPU socket halves, linux-rdma/perftest#241) or GPUDirect itself
(``nvidia_peermem``, ACS, IOMMU). Both low blames the port or its cable.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccdiag.host import procgroups
from ccdiag.bench import expected as exp
from ccdiag.bench.judge import judge
from ccdiag.bench.registry import Benchmark, BenchContext, module_missing, register
from ccdiag.bench.result import ERROR, PARTIAL, RAN, TIMEOUT, BenchResult, Expected, Measurement
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.probenames import PROBE_INFINIBAND

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: message size of the bandwidth test: large enough that per-message costs vanish (the production
#: GPUDirect check uses 8 MiB messages)
SIZE_BYTES = 8 << 20
QUICK_ITERS = 200
ITERS = 2000
#: output kept from a perftest process
MAX_OUTPUT_BYTES = 1 << 20


def rdma_ports(ctx: BenchContext) -> list[dict]:
    """Every active RDMA port with its NIC, GPU nearest to it, and the GID index to use (RoCE)."""
    topo = ctx.topology
    if topo is None:
        return []
    out = []
    states = topo.nic_states()
    for nic in topo.nics():
        st = states.get(nic.label) or {}
        ports = st.get("ports") or {}
        for port in nic.ports:
            pst = ports.get(port) or ports.get(str(port)) or {}
            if str(pst.get("state") if isinstance(pst, dict) else pst).upper().find("ACTIVE") < 0:
                continue
            near = topo.gpus_near_nic(nic.label)
            out.append({"nic": nic.label, "port": port, "gpu": near[0] if near else None,
                        "link_layer": nic.link_layer})
    return out


def gpu_bus_id(topo: Topology, gpu: str) -> str | None:
    """The GPU's full PCI address (``0000:18:00.0``): how perftest's ``--use_cuda_bus_id`` and the
    pyverbs engine pick the GPU whatever CUDA_VISIBLE_DEVICES says."""
    for g in topo.gpus():
        if g.label == gpu and g.bdf:
            return str(g.bdf)
    return None


class IbWrite(Benchmark):
    name = "ib_write"
    what = "RDMA WRITE loopback per port, from the nearest GPU's memory (GPUDirect) and from host memory"
    needs = ("live node", "active RDMA port", "ib_write_bw (perftest) or pyverbs")
    engine = "rdma"
    budget_s = 60.0
    quick_budget_s = 6.0

    def engine_choice(self) -> tuple[str | None, str | None]:
        if shutil.which("ib_write_bw"):
            return "perftest", None
        from ccdiag.bench.sysverbs import system_pyverbs_dirs

        missing = module_missing("pyverbs", "rdma-core's python3-pyverbs")
        if missing is None or system_pyverbs_dirs():
            return "pyverbs", None
        return None, f"neither ib_write_bw (perftest) nor pyverbs is installed ({missing})"

    def applicable(self, ctx: BenchContext) -> str | None:
        if not ctx.live:
            return ("a replayed snapshot cannot be measured: run `ccdiag bench ib_write` on the node itself, or "
                    "judge ib_write_bw outputs with `ccdiag bench import`")
        if not rdma_ports(ctx):
            nics = ctx.topology.nics() if ctx.topology is not None else []
            return "no active RDMA port" + (f" ({len(nics)} RDMA device(s), none ACTIVE)" if nics else
                                            " (no RDMA device in this node's topology)")
        engine, why = self.engine_choice()
        return why

    def run(self, ctx: BenchContext, budget_s: float) -> BenchResult:
        engine, why = self.engine_choice()
        res = BenchResult(self.name, RAN, budget_s=budget_s, engine={"name": engine},
                          params={"size_bytes": ctx.size_bytes or SIZE_BYTES, "iters": ctx.iters})
        t0 = time.monotonic()
        end = t0 + budget_s
        jobs = self.jobs(ctx)
        if engine == "perftest":
            dmabuf = perftest_has_dmabuf(_engine_env(ctx)) if any(j.get("cuda_bus_id") for j in jobs) else False
            for job in jobs:
                if time.monotonic() >= end:
                    res.outcome, res.reason = TIMEOUT, f"the budget of {budget_s:.0f} s ran out"
                    break
                res.measurements.append(run_perftest(job, ctx, end, dmabuf))
                ctx.tick(self.name, f"{job['src']}->{job['device']}:{job['port']}")
        else:
            from ccdiag.bench.engine import run_worker

            wr = run_worker({"jobs": jobs, "size_bytes": ctx.size_bytes or SIZE_BYTES, "iters": ctx.rounds()},
                            budget_s, env=_engine_env(ctx), module="ccdiag.bench.rdma_worker")
            for line in wr.lines:
                m = Measurement("ib_write", str(line.get("src")), str(line.get("dst")), op="rdma_write",
                                engine="pyverbs", error=line.get("error"))
                s = tuple(float(x) for x in line.get("samples_gbyte_s") or () if isinstance(x, (int, float)))
                m.samples_gbyte_s, m.gbyte_s = s, (statistics.median(s) if s else None)
                m.extra["buffer"] = line.get("buffer")
                if line.get("registration") in ("dmabuf", "peermem"):
                    m.extra["registration"] = line["registration"]
                    m.extra["dmabuf_error"] = line.get("dmabuf_error")
                res.measurements.append(m)
            if wr.fatal and not wr.lines:
                res.outcome, res.reason = ERROR, wr.fatal
            elif wr.timed_out or wr.budget_ran_out:
                res.outcome, res.reason = TIMEOUT, f"the budget of {budget_s:.0f} s ran out"
        for m, job in zip(res.measurements, jobs):
            m.extra.setdefault("buffer", job["buffer"])
        for m in res.measurements:
            dev, _, port = m.dst.partition(":")
            if m.src.startswith("GPU"):
                m.expected = exp.gpu_nic(ctx.topology, m.src, dev)
            else:
                m.expected = exp.host_nic(ctx.topology, dev)
            if m.error is None:
                judge(m, ctx.policy)
            else:
                m.status = UNKNOWN
        res.findings = findings(res.measurements, ctx.topology)
        if res.outcome == RAN and any(m.error for m in res.measurements):
            res.outcome, res.reason = PARTIAL, f"{sum(1 for m in res.measurements if m.error)} measurement(s) failed"
        res.duration_s = time.monotonic() - t0
        return res

    def jobs(self, ctx: BenchContext) -> list[dict]:
        topo = ctx.topology
        if topo is None:
            return []  # no topology, no RDMA port to loop through (rdma_ports)
        out = []
        for p in rdma_ports(ctx):
            gid = _gid_index(ctx, p["nic"], p["port"]) if (p["link_layer"] or "").lower() == "ethernet" else None
            base = {"device": p["nic"], "port": p["port"], "gid_index": gid}
            if p["gpu"] is not None:
                level = topo.level(p["gpu"], p["nic"])
                out.append({**base, "src": p["gpu"], "buffer": "gpu", "cuda_bus_id": gpu_bus_id(topo, p["gpu"]),
                            "note": f"buffer in {p['gpu']} memory ({level} from {p['nic']})"})
            out.append({**base, "src": "host", "buffer": "host", "cuda_bus_id": None, "note": "buffer in host memory"})
        return out


def _gid_index(ctx: BenchContext, nic: str, port: int) -> int | None:
    """The RoCE v2 GID index of this port that NCCL would pick (IPv4-mapped first), from the
    infiniband probe, read the way `ccdiag nccl` reads it."""
    from ccdiag.nccl.layout import gid_facts

    ib = ctx.runs.get(PROBE_INFINIBAND) if ctx.runs else None
    for dev in getattr(getattr(ib, "data", None), "devices", ()) or ():
        if dev.name != nic:
            continue
        for p in dev.ports:
            if p.port == port:
                v2_ipv4, v2, _ = gid_facts(p)
                return (v2_ipv4 or v2 or (None,))[0]
    return None


def _engine_env(ctx: BenchContext) -> dict:
    env = dict(ctx.env if ctx.env is not None else os.environ)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: what a perftest built with CUDA dma-buf support lists in its --help
DMABUF_FLAG = "--use_cuda_dmabuf"


def perftest_has_dmabuf(env: dict) -> bool:
    """Whether the installed ``ib_write_bw`` was built with CUDA dma-buf support (its ``--help``
    lists ``--use_cuda_dmabuf``)."""
    try:
        proc = subprocess.run(["ib_write_bw", "--help"], stdin=subprocess.DEVNULL, capture_output=True, env=env,
                              timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return DMABUF_FLAG in (proc.stdout + proc.stderr).decode("utf-8", "replace")


def perftest_argv(job: dict, ctx: BenchContext, tcp_port: int, dmabuf: bool = False) -> list[str]:
    argv = ["ib_write_bw", "-d", job["device"], "-i", str(job["port"]), "-s", str(ctx.size_bytes or SIZE_BYTES),
            "-n", str(ctx.iters or (QUICK_ITERS if ctx.quick else ITERS)), "-F", "--report_gbits",
            "-p", str(tcp_port)]
    if job.get("gid_index") is not None:
        argv += ["-x", str(job["gid_index"])]
    if job.get("cuda_bus_id") is not None:
        # by PCI address: a number would be CUDA's ordinal, which CUDA_VISIBLE_DEVICES renumbers
        argv.append(f"--use_cuda_bus_id={job['cuda_bus_id']}")
        if dmabuf:
            argv.append(DMABUF_FLAG)
    return argv


def _spawn(argv: list[str], env: dict) -> subprocess.Popen:
    with procgroups.starting():
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
        procgroups.register(proc.pid)
    return proc


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[str, bool]:
    """(output, timed out): waits at most ``timeout``, then kills the process group."""
    try:
        out, _ = proc.communicate(timeout=max(0.05, timeout))
        procgroups.forget(proc.pid)
        return out[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            out, _ = proc.communicate(timeout=1.0)
            procgroups.forget(proc.pid)
        except subprocess.TimeoutExpired:
            out = b""
        return (out or b"")[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"), True


def run_perftest(job: dict, ctx: BenchContext, end: float, dmabuf: bool | None = None) -> Measurement:
    """One loopback, GPU memory registered by DMA-BUF first when perftest supports it and through
    ``nvidia_peermem`` when that run fails (``dmabuf``: whether perftest supports it; None: ask it)."""
    if job.get("cuda_bus_id") is None:
        return _run_perftest_once(job, ctx, end, False)
    if dmabuf is None:
        dmabuf = perftest_has_dmabuf(_engine_env(ctx))
    first = None
    if dmabuf:
        first = _run_perftest_once(job, ctx, end, True)
        if first.error is None:
            first.extra["registration"] = "dmabuf"
            return first
    m = _run_perftest_once(job, ctx, end, False)
    m.extra["registration"] = "peermem"
    m.extra["dmabuf_error"] = first.error if first is not None else "this ib_write_bw has no --use_cuda_dmabuf"
    return m


def _run_perftest_once(job: dict, ctx: BenchContext, end: float, dmabuf: bool) -> Measurement:
    """One loopback: ``ib_write_bw`` server and client on the same port, bounded by ``end``. The
    client is started again while it cannot connect and the server still runs (the server opens its
    port after it set the device up, which takes longer on a loaded node than any fixed pause)."""
    m = Measurement("ib_write", job["src"], f"{job['device']}:{job['port']}", op="rdma_write", engine="perftest",
                    size_bytes=ctx.size_bytes or SIZE_BYTES, note=job.get("note"))
    env = _engine_env(ctx)
    argv = perftest_argv(job, ctx, _free_tcp_port(), dmabuf)
    m.extra["argv"] = " ".join(argv + ["127.0.0.1"])
    try:
        server = _spawn(argv, env)
    except OSError as exc:
        m.error = f"cannot start ib_write_bw: {exc.strerror or exc}"
        return m
    try:
        out, rc, late, tries = _client_until_connected(argv + ["127.0.0.1"], env, server, end)
    except OSError as exc:
        _finish(server, 0)
        m.error = f"cannot start ib_write_bw: {exc.strerror or exc}"
        return m
    srv_out, _ = _finish(server, min(2.0, max(0.05, end - time.monotonic())))
    m.extra["client_starts"] = tries
    if late:
        m.error = "ib_write_bw did not finish within the budget"
        return m
    return read_perftest_output(m, out, rc, srv_out)


#: what a perftest client prints when no server listens yet
_NOT_LISTENING = ("couldn't connect", "unable to open file descriptor for socket", "unable to init the socket")
CLIENT_RETRY_S = 0.2


def _client_until_connected(argv: list[str], env: dict, server: subprocess.Popen,
                            end: float) -> tuple[str, int | None, bool, int]:
    """Run the client until it connects, the server exits or ``end``: (output, exit code, timed out,
    starts)."""
    tries = 0
    while True:
        tries += 1
        client = _spawn(argv, env)
        out, late = _finish(client, end - time.monotonic())
        refused = client.returncode != 0 and any(k in out.lower() for k in _NOT_LISTENING)
        if late or not refused or server.poll() is not None or time.monotonic() + CLIENT_RETRY_S >= end:
            return out, client.returncode, late, tries
        time.sleep(CLIENT_RETRY_S)


def read_perftest_output(m: Measurement, out: str, returncode: int | None, server_out: str = "") -> Measurement:
    """Fill ``m`` from a client's output: its bandwidth, or the error perftest printed."""
    from ccdiag.benchparse.errors import BenchParseError
    from ccdiag.benchparse.perftest import parse_perftest

    try:
        parsed = parse_perftest(out)
    except BenchParseError as exc:
        tail = _error_lines(out) or _error_lines(server_out) or str(exc)
        m.error = f"ib_write_bw (exit {returncode}): {tail}"
        return m
    rows = [r for r in parsed.bw_rows if r.bw_average_gbyte_s is not None]
    if not rows:
        m.error = f"ib_write_bw printed no bandwidth row (exit {returncode}): {_error_lines(out)}"
        return m
    row = max(rows, key=lambda r: r.size_bytes or 0)
    m.gbyte_s = row.bw_average_gbyte_s
    m.samples_gbyte_s = tuple(x for x in (row.bw_average_gbyte_s, row.bw_peak_gbyte_s) if x)
    m.size_bytes = row.size_bytes
    return m


def _error_lines(text: str) -> str:
    keys = ("error", "fail", "couldn't", "unable", "not supported", "no device", "invalid")
    lines = [l.strip() for l in text.splitlines() if any(k in l.lower() for k in keys)]
    return "; ".join(lines[:3])[:400]


def findings(ms: list[Measurement], topology: Topology | None) -> list[Finding]:
    """GPU figure against host figure per port: which side of the port is at fault."""
    out: list[Finding] = []
    by_port: dict[str, dict[str, Measurement]] = {}
    for m in ms:
        by_port.setdefault(m.dst, {})["gpu" if m.src.startswith("GPU") else "host"] = m
    for port, pair in sorted(by_port.items()):
        out += _port_findings(port, pair.get("gpu"), pair.get("host"))
    return out


@dataclass(frozen=True)
class JudgedWrite:
    """A write figure that judge() held to its path: it reaches PASS/WARN/FAIL only with a figure, a
    ratio and an expected rate, which this holds as plain numbers for the findings to read."""

    m: Measurement
    gbyte_s: float
    ratio: float
    expected: Expected
    expected_gbyte_s: float


def judged_write(m: Measurement | None) -> JudgedWrite | None:
    """``m`` with its judged figures, or None when it was not judged (an error, no expected value)."""
    if m is None or m.status not in (PASS, WARN, FAIL):
        return None
    e = m.expected
    if m.gbyte_s is None or m.ratio is None or e is None or e.gbyte_s is None:
        return None
    return JudgedWrite(m, m.gbyte_s, m.ratio, e, e.gbyte_s)


def _port_findings(port: str, g: Measurement | None, h: Measurement | None) -> list[Finding]:
    """One port's findings: what could not be measured, then one verdict on what was."""
    dev, _, num = port.partition(":")
    comp = Component("ib_port", f"{dev} port {num}", device=dev, port=int(num) if num.isdigit() else None)
    out = [_error_finding(m, port, dev, comp) for m in (g, h) if m is not None and m.error]
    gj, hj = judged_write(g), judged_write(h)
    judged = [j for j in (gj, hj) if j is not None]
    if not judged:
        return out
    ev = tuple(Evidence(f"RDMA write from {j.m.src} ({j.m.engine}{registered(j.m)})", f"{j.gbyte_s * 8:.1f} Gb/s = "
                        f"{j.ratio:.0%} of {j.expected_gbyte_s * 8:.0f} Gb/s", j.m.extra.get("argv") or j.m.engine)
               for j in judged)
    ev += tuple(Evidence(f"DMA-BUF not used for {j.m.src}", j.m.extra["dmabuf_error"], j.m.engine) for j in judged
                if j.m.extra.get("registration") == "peermem" and j.m.extra.get("dmabuf_error"))
    bad = [j for j in judged if j.m.status != PASS]
    if not bad:
        out.append(Finding("bench.ib_write", PASS, comp, f"{port}: RDMA write at line rate "
                           f"({', '.join(f'{j.m.src} {j.ratio:.0%}' for j in judged)})", evidence=ev,
                           expected=judged[0].m.typical, expected_source=judged[0].m.threshold_source))
    elif gj is not None and gj.m.status != PASS and (h is None or h.status == PASS):
        out.append(_gpudirect_finding(gj, h, port, dev, comp, ev, bad))
    else:
        out.append(_hca_finding(bad, port, dev, comp, ev))
    return out


def registered(m: Measurement) -> str:
    """", GPU memory registered by DMA-BUF" / "... through nvidia_peermem", or nothing (host memory)."""
    how = {"dmabuf": "DMA-BUF", "peermem": "nvidia_peermem"}.get(m.extra.get("registration") or "")
    return f", GPU memory registered by {how}" if how else ""


def _error_finding(m: Measurement, port: str, dev: str, comp: Component) -> Finding:
    remedy = (f"Check `ibv_devinfo -d {dev}` (the port ACTIVE, the device usable by this user: "
              f"/dev/infiniband/uverbs*)")
    if m.src.startswith("GPU"):
        remedy += ("; for GPU buffers, that GPUDirect can register GPU memory (nvidia_peermem loaded: "
                   "`lsmod | grep peermem`, or a perftest built with dma-buf)")
    why = f" (DMA-BUF first: {m.extra['dmabuf_error']})" if m.extra.get("dmabuf_error") else ""
    return Finding("bench.ib_write.error", UNKNOWN, comp, f"{m.src}->{port}: could not measure: {m.error}{why}",
                   remedy=remedy + ".")


def _status_of(bad: list[JudgedWrite]) -> str:
    return FAIL if any(j.m.status == FAIL for j in bad) else WARN


def _gpudirect_finding(gj: JudgedWrite, h: Measurement | None, port: str, dev: str, comp: Component,
                       ev: tuple, bad: list[JudgedWrite]) -> Finding:
    """The GPU buffer is slow while host memory is not: the GPU<->NIC path or GPUDirect itself."""
    g = gj.m
    level = gj.expected.level
    host_part = f" while host memory reaches {h.ratio:.0%}" if h else ""
    head = f"{g.src}->{port} GPUDirect write {gj.gbyte_s * 8:.0f} Gb/s = {gj.ratio:.0%} of line rate"
    if level in ("SYS", "NODE", "PHB"):
        crosses = "the CPU socket" if level == "SYS" else "the host bridge"
        summary = f"{head}{host_part}: the GPU<->NIC path is {level} (crosses {crosses})"
        remedy = (f"Use a GPU on {dev}'s own PCIe switch for this rail (NCCL does with the right NCCL_IB_HCA "
                  f"order; see `ccdiag nccl`), or move the NIC/GPU to share a switch.")
        comp = Component("gpu_pair", f"{g.src}-{dev}", gpu=int(g.src[3:]) if g.src[3:].isdigit() else None,
                         device=dev, peer=dev)
    else:
        summary = f"{head} on a {level} path{host_part}"
        remedy = ("GPUDirect RDMA is not running at full rate: load nvidia_peermem (or use dma-buf), disable "
                  "ACS on the switch ports between GPU and NIC, and check the IOMMU setting (passthrough).")
    return Finding("bench.ib_write.gpudirect", _status_of(bad), comp, summary, evidence=ev,
                   expected=f"{gj.expected_gbyte_s * 8:.0f} Gb/s ({gj.expected.bottleneck})",
                   expected_source=gj.expected.source, remedy=remedy)


def _hca_finding(bad: list[JudgedWrite], port: str, dev: str, comp: Component, ev: tuple) -> Finding:
    """Every buffer is slow through a loopback of the port. The loopback turns round inside the
    HCA (the cable and switch never carry it), so the fault is the HCA or its PCIe slot, not the
    wire."""
    worst = min(bad, key=lambda j: j.ratio)
    return Finding("bench.ib_write.port", _status_of(bad), comp,
                   f"{port}: RDMA write {worst.gbyte_s * 8:.0f} Gb/s = {worst.ratio:.0%} of "
                   f"{worst.expected_gbyte_s * 8:.0f} Gb/s from {'every buffer' if len(bad) > 1 else worst.m.src} "
                   f"in a loopback through the HCA",
                   evidence=ev, expected=worst.m.typical, expected_source=worst.m.threshold_source,
                   remedy=(f"The HCA {dev} itself is slow (a loopback never reaches the cable or switch): check its "
                           f"PCIe link (`lspci -vv` LnkSta against LnkCap for {dev}'s slot), its firmware "
                           f"(`ibv_devinfo -d {dev}` fw_ver against the fleet) and its temperature/throttling; "
                           f"the cable and switch port are judged by a test between two hosts."))


register(IbWrite())
