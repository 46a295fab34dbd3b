"""The CuPy engine, run as a child process (:func:`ccdiag.bench.engine.worker_command`), one JSON
request on stdin: host<->device, device-local and peer copies, and what one GPU shows about itself
(``hbm``: a large device copy, reads and writes counted; ``gemm``: a dense FP16 GEMM for a few
seconds, TFLOPS).

Why a child process: a CUDA copy on a wedged GPU never completes, and a thread stuck in the driver
cannot be stopped; a process group can be killed. The parent (:mod:`.engine`) sends one JSON
request on stdin and reads JSON lines from stdout as they come (``info``, ``measure``, ``error``,
``done``), so whatever was measured before a kill is kept.

How it measures, following what nvbandwidth and the CUDA samples do (never their code):

* copies are made by the copy engines (``cudaMemcpyAsync`` / ``cudaMemcpyPeerAsync``) on a
  non-blocking stream and timed with CUDA events around ``reps`` back-to-back copies, after
  ``warmup`` untimed rounds; the figure is the median of ``iters`` timed rounds, with every sample
  kept so the spread shows;
* host buffers are pinned (``cudaHostAlloc``) by a thread first bound to the CPUs of the NUMA node
  asked for, so the pages are placed on that node when they are first touched;
* every timed round is queued behind a *spin kernel* that holds each stream until the host has
  queued the whole round and releases one flag in pinned memory (nvbandwidth's method): the events
  then time the copies, not Python's launch rate, and the two directions of a bidirectional copy
  (on two streams, maybe two GPUs) start together; a small copy's latency is the mean over many
  copies queued so;
* peer pairs without peer access are still copied (the driver stages them through host memory) and
  said so;
* devices are found by PCI address (``cudaDeviceGetByPCIBusId``), which means the same GPU under
  any ``CUDA_VISIBLE_DEVICES`` or ``CUDA_DEVICE_ORDER``.

GB/s here is 10^9 bytes per second of payload.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from ccdiag.probes.system import cpulist_cpus

#: copies per timed round, and untimed rounds before timing
DEFAULT_REPS = 4
DEFAULT_WARMUP = 2
LATENCY_BYTES = 8
LATENCY_REPS = 200
#: bytes of each of the two buffers of the device-memory copy (far beyond any GPU's L2 cache)
HBM_SIZE_BYTES = 1 << 30
#: the GEMM's square size, the seconds it runs, a timed round's length, and its most GEMMs per round
#: (each queued behind the gate; a stream holds about a thousand pending launches before the host
#: blocks, which would stall the gate's release)
GEMM_N = 8192
GEMM_SECONDS = 3.0
GEMM_ROUND_S = 0.25
GEMM_MAX_REPS = 256


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"type": kind, **fields}) + "\n")
    sys.stdout.flush()


class Deadline(Exception):
    pass


class Engine:
    """One request's measurements, in the order asked."""

    def __init__(self, cp: Any, req: dict):
        self.cp = cp
        self.rt = cp.cuda.runtime
        self.req = req
        self.size = int(req.get("size_bytes") or (256 << 20))
        self.iters = max(1, int(req.get("iters") or 5))
        self.reps = max(1, int(req.get("reps") or DEFAULT_REPS))
        warmup = req.get("warmup")
        self.warmup = max(0, int(warmup if warmup is not None else DEFAULT_WARMUP))
        self.deadline = time.monotonic() + float(req.get("budget_s") or 60.0)
        self.numa_cpus = {int(k): cpulist_cpus(v) for k, v in (req.get("numa_cpus") or {}).items()}
        self.allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.gate = Gate(cp)
        self.devices = self._map_devices()

    # -- set-up -------------------------------------------------------------------------------
    def _map_devices(self) -> dict[str, int]:
        """Topology GPU label -> CUDA device ordinal of this process, by PCI address: CUDA numbers
        the devices it was allowed to see (CUDA_VISIBLE_DEVICES) in its own order, NVML and the
        topology number every GPU by bus, so only the address names the same GPU in both."""
        count = int(self.rt.getDeviceCount())
        out: dict[str, int] = {}
        for g in self.req.get("gpus") or []:
            try:
                out[g["label"]] = int(self.rt.deviceGetByPCIBusId(str(g.get("bdf") or "")))
            except Exception:  # noqa: BLE001 - not visible to this process: listed as unmapped
                continue
        names = {}
        for i in range(count):
            try:
                names[i] = _name(self.rt.getDeviceProperties(i))
            except Exception:  # noqa: BLE001
                names[i] = None
        try:
            drv, rtv = self.rt.driverGetVersion(), self.rt.runtimeGetVersion()
        except Exception:  # noqa: BLE001
            drv = rtv = None
        emit("info", cuda_devices=count, mapped=out, names={str(k): v for k, v in names.items()},
             driver_version=drv, runtime_version=rtv, cupy_version=getattr(self.cp, "__version__", None),
             cupy_distribution=_cupy_distribution(), ccdiag_package=_package_dir(),
             unmapped=[g["label"] for g in self.req.get("gpus") or [] if g["label"] not in out],
             spin_kernel=self.gate.why_not or "used")
        return out

    def check_time(self) -> None:
        if time.monotonic() >= self.deadline:
            raise Deadline()

    def bind(self, numa: int | None) -> str | None:
        """Bind this thread to a NUMA node's CPUs; returns why not, or None."""
        if numa is None:
            return "NUMA node not known"
        cpus = self.numa_cpus.get(numa, set()) & self.allowed if self.allowed else self.numa_cpus.get(numa, set())
        if not cpus:
            return f"no CPU of NUMA node {numa} is available to this process"
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as exc:
            return f"cannot bind to NUMA node {numa}: {exc.strerror}"
        return None

    def unbind(self) -> None:
        if self.allowed:
            try:
                os.sched_setaffinity(0, self.allowed)
            except OSError:
                pass

    # -- timing -------------------------------------------------------------------------------
    def time_rounds(self, ops: list[tuple[int, Any, Any]], nbytes: int) -> list[list[float]]:
        """Run each (device, stream, op) concurrently: ``warmup`` untimed rounds, then ``iters``
        timed ones. Each round is queued on every stream behind the gate (one spin kernel per
        stream, released at once), so all streams start together; the events on each stream's own
        device time ``reps`` back-to-back copies. Returns, per stream, the GB/s of each timed
        round."""
        for _ in range(self.warmup):
            self._round(ops, timed=False)
            self.check_time()
        out: list[list[float]] = [[] for _ in ops]
        for _ in range(self.iters):
            for k, ms in enumerate(self._round(ops, timed=True)):
                if ms and ms > 0:
                    out[k].append(nbytes * self.reps / (ms / 1e3) / 1e9)
            self.check_time()
        return out

    def _round(self, ops: list[tuple[int, Any, Any]], timed: bool, reps: int | None = None) -> list[float | None]:
        """Queue one round on every stream behind the gate, release it, wait; milliseconds per stream."""
        cp = self.cp
        reps = reps or self.reps
        evs = []
        self.gate.close()
        try:
            for dev, stream, op in ops:
                with cp.cuda.Device(dev):
                    self.gate.hold(stream)
                    start, end = (cp.cuda.Event(), cp.cuda.Event()) if timed else (None, None)
                    if start is not None:
                        start.record(stream)
                    for _ in range(reps):
                        op(stream)
                    if end is not None:
                        end.record(stream)
                evs.append((stream, start, end))
        finally:
            self.gate.open()
        out: list[float | None] = []
        for stream, start, end in evs:
            stream.synchronize()
            out.append(cp.cuda.get_elapsed_time(start, end) if timed else None)
        return out

    def latency_us(self, dev: int, stream: Any, op: Any) -> float | None:
        """Mean time of one small copy among LATENCY_REPS queued behind the gate."""
        self._round([(dev, stream, op)], timed=False, reps=1)
        (ms,) = self._round([(dev, stream, op)], timed=True, reps=LATENCY_REPS)
        return ms * 1e3 / LATENCY_REPS if ms and ms > 0 else None

    # -- host <-> device ----------------------------------------------------------------------
    def host_device(self, gpu: dict, numa: int | None, remote: bool) -> None:
        label = gpu["label"]
        dev = self.devices[label]
        rt, cp = self.rt, self.cp
        why = self.bind(numa)
        host = dptr = None
        src = f"host:numa{numa}" if numa is not None else "host"
        try:
            host = rt.hostAlloc(self.size, 0)  # pinned; first touched by this bound thread
            with cp.cuda.Device(dev):
                dptr = rt.malloc(self.size)
                s1 = cp.cuda.Stream(non_blocking=True)
                s2 = cp.cuda.Stream(non_blocking=True)

                def h2d(s, h=host, d=dptr):
                    rt.memcpyAsync(d, h, self.size, rt.memcpyHostToDevice, s.ptr)

                def d2h(s, h=host, d=dptr):
                    rt.memcpyAsync(h, d, self.size, rt.memcpyDeviceToHost, s.ptr)

                note = (f"host memory on NUMA node {numa}, {label}'s remote node" if remote
                        else f"host memory on {label}'s own NUMA node {numa}") + (f" ({why})" if why else "")
                tasks = self.req.get("tasks") or []
                if "h2d" in tasks:
                    (h2d_s,) = self.time_rounds([(dev, s1, h2d)], self.size)
                    emit("measure", bench="h2d", src=src, dst=label, op="h2d", direction="uni",
                         samples_gbyte_s=h2d_s, size_bytes=self.size, note=note, remote=remote, numa=numa)
                if remote:
                    return
                if "d2h" in tasks:
                    (d2h_s,) = self.time_rounds([(dev, s1, d2h)], self.size)
                    emit("measure", bench="d2h", src=label, dst=src, op="d2h", direction="uni",
                         samples_gbyte_s=d2h_s, size_bytes=self.size, note=note, numa=numa)
                if "h2d" in tasks and "d2h" in tasks and self.req.get("bidir", True):
                    # a second device buffer so the two directions do not touch the same memory
                    dptr2 = rt.malloc(self.size)
                    try:
                        def d2h2(s, h=host, d=dptr2):
                            rt.memcpyAsync(h, d, self.size, rt.memcpyDeviceToHost, s.ptr)
                        a, b = self.time_rounds([(dev, s1, h2d), (dev, s2, d2h2)], self.size)
                    finally:
                        rt.free(dptr2)
                    emit("measure", bench="h2d", src=src, dst=label, op="h2d", direction="bidir",
                         samples_gbyte_s=a, size_bytes=self.size, note=note + "; while the other direction runs",
                         numa=numa)
                    emit("measure", bench="d2h", src=label, dst=src, op="d2h", direction="bidir",
                         samples_gbyte_s=b, size_bytes=self.size, note=note + "; while the other direction runs",
                         numa=numa)
        finally:
            if dptr is not None:
                with cp.cuda.Device(dev):
                    rt.free(dptr)
            if host is not None:
                rt.freeHost(host)
            self.unbind()

    # -- device-local ---------------------------------------------------------------------------
    def d2d(self, gpu: dict) -> None:
        label = gpu["label"]
        rt, cp = self.rt, self.cp
        with cp.cuda.Device(self.devices[label]):
            a = rt.malloc(self.size)
            try:
                b = rt.malloc(self.size)
                try:
                    s = cp.cuda.Stream(non_blocking=True)

                    def op(st, a=a, b=b):
                        rt.memcpyAsync(b, a, self.size, rt.memcpyDeviceToDevice, st.ptr)

                    (samples,) = self.time_rounds([(self.devices[label], s, op)], self.size)
                finally:
                    rt.free(b)
            finally:
                rt.free(a)
        emit("measure", bench="d2d", src=label, dst=label, op="copy", direction="uni", samples_gbyte_s=samples,
             size_bytes=self.size, note="device-local copy (bytes copied per second; memory reads and writes both)")

    # -- what one GPU shows about itself ---------------------------------------------------------
    def hbm(self, gpu: dict) -> None:
        """A device-to-device copy large enough to leave the L2 cache far behind; the figure counts
        the bytes read and the bytes written (the memory's own traffic), as the catalogue's HBM
        bandwidth does."""
        label = gpu["label"]
        rt, cp = self.rt, self.cp
        size = int(self.req.get("hbm_size_bytes") or HBM_SIZE_BYTES)
        dev = self.devices[label]
        with cp.cuda.Device(dev):
            a = rt.malloc(size)
            try:
                b = rt.malloc(size)
                try:
                    s = cp.cuda.Stream(non_blocking=True)

                    def op(st, a=a, b=b):
                        rt.memcpyAsync(b, a, size, rt.memcpyDeviceToDevice, st.ptr)

                    (samples,) = self.time_rounds([(dev, s, op)], 2 * size)
                finally:
                    rt.free(b)
            finally:
                rt.free(a)
        emit("measure", bench="hbm", src=label, dst=label, op="copy", direction="uni", samples_gbyte_s=samples,
             size_bytes=size, note=f"device-local copy of {size >> 20} MiB; bytes read and written counted together")

    def gemm(self, gpu: dict) -> None:
        """A dense n x n x n GEMM with FP16 inputs (FP32 accumulation, cuBLAS on the tensor cores),
        repeated for a few seconds; each timed round is sized from a first untimed one so a round
        lasts about ``GEMM_ROUND_S`` whatever the GPU."""
        label = gpu["label"]
        cp = self.cp
        n = int(self.req.get("gemm_n") or GEMM_N)
        dev = self.devices[label]
        flops = 2.0 * n * n * n
        with cp.cuda.Device(dev):
            a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            c = cp.empty((n, n), dtype=cp.float16)
            s = cp.cuda.Stream(non_blocking=True)

            def op(st, a=a, b=b, c=c):
                with st:
                    cp.matmul(a, b, out=c)

            self._round([(dev, s, op)], timed=False, reps=1)  # cuBLAS picks its kernel here
            (ms,) = self._round([(dev, s, op)], timed=True, reps=2)
            per_ms = (ms or 1.0) / 2
            seconds = float(self.req.get("gemm_seconds") or GEMM_SECONDS)
            reps = max(1, min(GEMM_MAX_REPS, int(GEMM_ROUND_S * 1e3 / max(per_ms, 1e-3))))
            rounds = max(1, min(self.iters * 4, int(seconds / GEMM_ROUND_S)))
            self.check_time()
            samples = []
            for _ in range(rounds):
                (ms,) = self._round([(dev, s, op)], timed=True, reps=reps)
                if ms and ms > 0:
                    samples.append(flops * reps / (ms / 1e3) / 1e12)
                self.check_time()
            del a, b, c
            try:
                cp.get_default_memory_pool().free_all_blocks()
            except Exception:  # noqa: BLE001 - only a courtesy to the tasks after this one
                pass
        emit("measure", bench="gemm", src=label, dst=label, op="gemm", direction="uni", samples_tflops=samples,
             size_bytes=3 * n * n * 2, gemm_n=n, reps=reps,
             note=f"FP16 GEMM {n}x{n}x{n}, FP32 accumulation, {reps} per timed round")

    # -- peer to peer -------------------------------------------------------------------------
    def peer_access(self, a: int, b: int) -> bool:
        rt, cp = self.rt, self.cp
        if not int(rt.deviceCanAccessPeer(a, b)):
            return False
        with cp.cuda.Device(a):
            try:
                rt.deviceEnablePeerAccess(b)
            except Exception as exc:  # noqa: BLE001 - already enabled is fine
                if "AlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                    raise
        return True

    def p2p(self, ga: dict, gb: dict, modes: list[str]) -> None:
        la, lb = ga["label"], gb["label"]
        a, b = self.devices[la], self.devices[lb]
        rt, cp = self.rt, self.cp
        peer = self.peer_access(a, b) and self.peer_access(b, a)
        note = None if peer else "staged through host memory: the pair has no peer access"
        with cp.cuda.Device(a):
            pa = rt.malloc(self.size)
            sa = cp.cuda.Stream(non_blocking=True)
        try:
            with cp.cuda.Device(b):
                pb = rt.malloc(self.size)
                sb = cp.cuda.Stream(non_blocking=True)
            try:
                def a_to_b(s):
                    rt.memcpyPeerAsync(pb, b, pa, a, self.size, s.ptr)

                def b_to_a(s):
                    rt.memcpyPeerAsync(pa, a, pb, b, self.size, s.ptr)

                common = dict(size_bytes=self.size, note=note, peer_access=peer)
                if "write" in modes:  # the source GPU pushes
                    (s,) = self.time_rounds([(a, sa, a_to_b)], self.size)
                    emit("measure", bench="p2p", src=la, dst=lb, op="write", direction="uni",
                         samples_gbyte_s=s, **common)
                if "read" in modes:  # the destination GPU pulls
                    (s,) = self.time_rounds([(b, sb, a_to_b)], self.size)
                    emit("measure", bench="p2p", src=la, dst=lb, op="read", direction="uni",
                         samples_gbyte_s=s, **common)
                if "bidir" in modes and int(ga.get("index") or 0) < int(gb.get("index") or 0):
                    s1, s2 = self.time_rounds([(a, sa, a_to_b), (b, sb, b_to_a)], self.size)
                    emit("measure", bench="p2p", src=la, dst=lb, op="write", direction="bidir",
                         samples_gbyte_s=s1, **common)
                    emit("measure", bench="p2p", src=lb, dst=la, op="write", direction="bidir",
                         samples_gbyte_s=s2, **common)
                if "latency" in modes:
                    def small(s):
                        rt.memcpyPeerAsync(pb, b, pa, a, LATENCY_BYTES, s.ptr)
                    lat = self.latency_us(a, sa, small)
                    emit("latency", bench="p2p", src=la, dst=lb, latency_us=lat, size_bytes=LATENCY_BYTES,
                         peer_access=peer)
            finally:
                with cp.cuda.Device(b):
                    rt.free(pb)
        finally:
            with cp.cuda.Device(a):
                rt.free(pa)

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> None:
        gpus = [g for g in self.req.get("gpus") or [] if g["label"] in self.devices]
        tasks = self.req.get("tasks") or []
        numas = sorted(self.numa_cpus)
        done_host = False
        for task in tasks:
            if task in ("h2d", "d2h"):
                if done_host:
                    continue  # one pass measures both directions and both at once
                done_host = True
                for g in gpus:
                    self._guard(task, "host", g["label"], lambda g=g: self.host_device(g, g.get("numa"), False))
                    remote = [n for n in numas if n != g.get("numa")]
                    if "h2d" in tasks and self.req.get("remote", True) and remote and g.get("numa") is not None:
                        self._guard("h2d", "host", g["label"],
                                    lambda g=g, r=remote[0]: self.host_device(g, r, True))
            elif task == "d2d":
                for g in gpus:
                    self._guard(task, g["label"], g["label"], lambda g=g: self.d2d(g))
            elif task == "hbm":
                for g in gpus:
                    self._guard(task, g["label"], g["label"], lambda g=g: self.hbm(g))
            elif task == "gemm":
                for g in gpus:
                    self._guard(task, g["label"], g["label"], lambda g=g: self.gemm(g))
            elif task == "p2p":
                modes = self.req.get("p2p_modes") or ["write", "read", "bidir", "latency"]
                for ga in gpus:
                    for gb in gpus:
                        if ga["label"] != gb["label"]:
                            self._guard(task, ga["label"], gb["label"],
                                        lambda ga=ga, gb=gb: self.p2p(ga, gb, modes))
        emit("done")

    def _guard(self, bench: str, src: str, dst: str, fn: Any) -> None:
        """One measurement's failure (out of memory, peer access refused) is that measurement's
        error line; the budget running out ends the run."""
        self.check_time()
        try:
            fn()
        except Deadline:
            raise
        except Exception as exc:  # noqa: BLE001 - reported, then the next measurement
            emit("error", bench=bench, src=src, dst=dst, error=f"{type(exc).__name__}: {exc}"[:500])


#: holds a stream until the host releases ``flag`` (pinned, mapped host memory), or until
#: ``max_cycles`` GPU clocks passed, so a host that died never leaves a GPU spinning
SPIN_SOURCE = r"""
extern "C" __global__ void ccdiag_spin(volatile const int *flag, long long max_cycles) {
    long long t0 = clock64();
    while (*flag == 0 && clock64() - t0 < max_cycles) { }
}
"""
#: the spin's safety limit: ~2-4 s at GPU clocks of 0.5-1 GHz, far beyond any round's queueing time
SPIN_MAX_CYCLES = 2_000_000_000


class Gate:
    """One flag in pinned host memory that spin kernels on every stream wait on.

    ``close()`` sets it to 0, ``hold(stream)`` queues a spin kernel on the stream (on the current
    device), ``open()`` sets it to 1 and every held stream starts at once. Where the kernel cannot
    be built (no NVRTC) the gate does nothing and ``why_not`` says why; the figures then include
    launch gaps and the run's info line says so."""

    def __init__(self, cp: Any):
        self.cp = cp
        self.why_not: str | None = None
        self.flag_ptr = None
        self._flag = None
        self._kernel = None
        try:
            import ctypes

            rt = cp.cuda.runtime
            self.flag_ptr = rt.hostAlloc(8, rt.hostAllocMapped | rt.hostAllocPortable)
            self._flag = ctypes.c_int.from_address(self.flag_ptr)
            self._flag.value = 1
            self._kernel = cp.RawKernel(SPIN_SOURCE, "ccdiag_spin")
        except Exception as exc:  # noqa: BLE001 - no NVRTC, no mapped memory: time without the gate
            self.why_not = f"spin kernel not available ({type(exc).__name__}: {str(exc)[:200]})"
            self._kernel = None

    def close(self) -> None:
        if self._flag is not None:
            self._flag.value = 0

    def hold(self, stream: Any) -> None:
        if self._kernel is None or self.why_not:
            return
        try:
            self._kernel((1,), (1,), (self.flag_ptr, self.cp.int64(SPIN_MAX_CYCLES)), stream=stream)
        except Exception as exc:  # noqa: BLE001 - e.g. the kernel does not compile for this GPU
            self.why_not = f"spin kernel not available ({type(exc).__name__}: {str(exc)[:200]})"

    def open(self) -> None:
        if self._flag is not None:
            self._flag.value = 1


def _cupy_distribution() -> str:
    """Which CuPy distribution this process sees (``cupy-cuda13x 13.6.0 (CUDA 13)``)."""
    from ccdiag.bench.cupy_dist import describe, installed

    try:
        return describe(installed())
    except Exception as exc:  # noqa: BLE001 - metadata that cannot be read: said, never fatal
        return f"unknown ({type(exc).__name__}: {exc})"


def _package_dir() -> str:
    """Where this worker's ccdiag package lives (the installed one, never a checkout beside it)."""
    import ccdiag

    return os.path.dirname(os.path.abspath(ccdiag.__file__ or ""))


def _name(props: Any) -> str | None:
    name = props.get("name") if isinstance(props, dict) else None
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return name


def read_request() -> dict | None:
    """The parent's JSON request from stdin (at most 1 MiB), or None after saying why."""
    try:
        req = json.loads(sys.stdin.read(1 << 20) or "{}")
    except ValueError as exc:
        emit("fatal", error=f"bad request: {exc}")
        return None
    if not isinstance(req, dict):
        emit("fatal", error="bad request: not a JSON object")
        return None
    return req


def main() -> int:
    req = read_request()
    if req is None:
        return 2
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or CUDA libraries that fail to load
        emit("fatal", error=f"CuPy not available ({type(exc).__name__}: {exc}); pip install '.[gpu]' in ccdiag's source tree")
        return 3
    try:
        engine = Engine(cupy, req)
    except Exception as exc:  # noqa: BLE001 - no driver, no device
        emit("fatal", error=f"CUDA not usable ({type(exc).__name__}: {exc})")
        return 3
    try:
        engine.run()
    except Deadline:
        emit("budget", error="the time budget ran out")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
