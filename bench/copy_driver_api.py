#!/usr/bin/env python3
"""Host<->device and device-local copies timed through the CUDA driver API itself (``libcuda.so.1``
by ctypes): the independent measure of what ccdiag's CuPy engine measures, sharing nothing with it
but the driver.

Why an own measure: the node the evidence comes from has no network, so nvbandwidth can only be used
when its source happens to be there; PyTorch is there, but a second measure written against the
driver's own interface, with its own way of holding the stream (``cuStreamWaitValue32`` on a flag
in mapped host memory, where ccdiag's engine uses a spin kernel), tells an engine error from a
property of the node. Method, as nvbandwidth and the CUDA samples time copies (never their code):
pinned host memory (``cuMemHostAlloc``) allocated by a thread bound to the GPU's own CPUs, one
non-blocking stream, events around ``reps`` back-to-back copies queued behind the held stream,
``warmup`` untimed rounds, the median of ``iters`` timed rounds, every sample kept. A device-local
copy counts the bytes copied once (as ccdiag's ``d2d``); ``hbm`` is the same copy with the bytes read
and written counted together (as ccdiag's ``hbm``).

    python bench/copy_driver_api.py --gpu GPU0=0000:18:00.0 --sizes-mib 1 4 16 64 256 1024 -o out.json

Prints progress on stderr and writes one JSON document; a machine without the driver gets a
document that says so (``error``), exit 3. GB/s is 10^9 bytes per second.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from ctypes import POINTER, c_char, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint32, c_uint64, c_void_p
from typing import Any

LIBRARY = "libcuda.so.1"
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DEFAULT = 0x0
CU_MEMHOSTALLOC_PORTABLE = 0x1
CU_MEMHOSTALLOC_DEVICEMAP = 0x2
CU_STREAM_WAIT_VALUE_EQ = 0x1

#: every driver function used, with its argument types as cuda.h declares them (``CUdeviceptr`` is
#: a 64-bit integer, handles are pointers); all return ``CUresult`` (an int, 0 = success)
PROTOTYPES: dict[str, tuple] = {
    "cuInit": (c_uint,),
    "cuDriverGetVersion": (POINTER(c_int),),
    "cuDeviceGetByPCIBusId": (POINTER(c_int), c_char_p),
    "cuDeviceGetName": (POINTER(c_char), c_int, c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(c_void_p), c_int),
    "cuDevicePrimaryCtxRelease_v2": (c_int,),
    "cuCtxSetCurrent": (c_void_p,),
    "cuMemAlloc_v2": (POINTER(c_uint64), c_size_t),
    "cuMemFree_v2": (c_uint64,),
    "cuMemHostAlloc": (POINTER(c_void_p), c_size_t, c_uint),
    "cuMemFreeHost": (c_void_p,),
    "cuMemHostGetDevicePointer_v2": (POINTER(c_uint64), c_void_p, c_uint),
    "cuStreamCreate": (POINTER(c_void_p), c_uint),
    "cuStreamDestroy_v2": (c_void_p,),
    "cuStreamSynchronize": (c_void_p,),
    "cuStreamWaitValue32_v2": (c_void_p, c_uint64, c_uint32, c_uint),
    "cuEventCreate": (POINTER(c_void_p), c_uint),
    "cuEventDestroy_v2": (c_void_p,),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuEventElapsedTime_v2": (POINTER(c_float), c_void_p, c_void_p),
    "cuMemcpyHtoDAsync_v2": (c_uint64, c_void_p, c_size_t, c_void_p),
    "cuMemcpyDtoHAsync_v2": (c_void_p, c_uint64, c_size_t, c_void_p),
    "cuMemcpyDtoDAsync_v2": (c_uint64, c_uint64, c_size_t, c_void_p),
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
}
#: functions the measure works without (the gate falls back to none, said so)
OPTIONAL = ("cuStreamWaitValue32_v2",)
#: the exported symbol tried when the newer one is absent: a driver older than CUDA 12.8 has no
#: ``cuEventElapsedTime_v2``, one older than 11.7 no ``cuStreamWaitValue32_v2``; the arguments are the same
OLDER_SYMBOL = {"cuEventElapsedTime_v2": "cuEventElapsedTime", "cuStreamWaitValue32_v2": "cuStreamWaitValue32"}


class DriverError(RuntimeError):
    pass


class Driver:
    """The bound functions of libcuda; a call that does not return CUDA_SUCCESS raises DriverError
    naming the function and the error."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.missing: list[str] = []
        self.fns: dict[str, Any] = {}
        for name, args in PROTOTYPES.items():
            fn = None
            for symbol in (name, OLDER_SYMBOL.get(name)):
                if symbol and fn is None:
                    fn = getattr(lib, symbol, None)
            if fn is None:
                if name not in OPTIONAL:
                    raise DriverError(f"{LIBRARY} has no {name}")
                self.missing.append(name)
                continue
            fn.argtypes = list(args)
            fn.restype = c_int
            self.fns[name] = fn

    def __call__(self, name: str, *args) -> None:
        rc = self.fns[name](*args)
        if rc != 0:
            label = c_char_p()
            try:
                self.fns["cuGetErrorName"](rc, ctypes.byref(label))
            except Exception:  # noqa: BLE001 - the name is a courtesy
                pass
            raise DriverError(f"{name}: {(label.value or b'').decode() or 'CUresult'} ({rc})")


def load(path: str = LIBRARY) -> Driver:
    return Driver(ctypes.CDLL(path))


def numa_cpus(bdf: str) -> set[int]:
    """The CPUs local to the device at ``bdf`` (sysfs local_cpulist), empty when not known."""
    try:
        text = open(f"/sys/bus/pci/devices/{bdf.lower()}/local_cpulist").read().strip()
    except OSError:
        return set()
    cpus: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part.strip():
            cpus.add(int(part))
    return cpus


class Gate:
    """A flag in mapped host memory that each timed round's stream waits on (``cuStreamWaitValue32``)
    until the host has queued the whole round; ``why_not`` says why rounds run without it."""

    def __init__(self, drv: Driver):
        self.drv = drv
        self.why_not: str | None = None
        self.host = c_void_p()
        self.dev = c_uint64()
        self.flag = None
        if "cuStreamWaitValue32_v2" in drv.missing:
            self.why_not = "cuStreamWaitValue32_v2 not in this driver"
            return
        drv("cuMemHostAlloc", ctypes.byref(self.host), 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)
        drv("cuMemHostGetDevicePointer_v2", ctypes.byref(self.dev), self.host, 0)
        self.flag = c_uint32.from_address(self.host.value)
        self.flag.value = 1

    def hold(self, stream: c_void_p) -> None:
        if self.why_not or self.flag is None:
            return
        self.flag.value = 0
        try:
            self.drv("cuStreamWaitValue32_v2", stream, self.dev.value, 1, CU_STREAM_WAIT_VALUE_EQ)
        except DriverError as exc:
            self.flag.value = 1
            self.why_not = f"stream wait not usable here ({exc})"

    def release(self) -> None:
        if self.flag is not None:
            self.flag.value = 1


def time_copies(drv: Driver, gate: Gate, stream: c_void_p, copy, nbytes: int, reps: int, warmup: int,
                iters: int) -> list[float]:
    """GB/s of each timed round of ``reps`` copies (``nbytes`` counted per copy)."""
    start, end = c_void_p(), c_void_p()
    drv("cuEventCreate", ctypes.byref(start), CU_EVENT_DEFAULT)
    drv("cuEventCreate", ctypes.byref(end), CU_EVENT_DEFAULT)
    try:
        out = []
        for k in range(warmup + iters):
            gate.hold(stream)
            try:
                drv("cuEventRecord", start, stream)
                for _ in range(reps):
                    copy()
                drv("cuEventRecord", end, stream)
            finally:
                gate.release()
            drv("cuStreamSynchronize", stream)
            ms = c_float()
            drv("cuEventElapsedTime_v2", ctypes.byref(ms), start, end)
            if k >= warmup and ms.value > 0:
                out.append(nbytes * reps / (ms.value / 1e3) / 1e9)
        return out
    finally:
        drv("cuEventDestroy_v2", start)
        drv("cuEventDestroy_v2", end)


def measure_gpu(drv: Driver, label: str, bdf: str, sizes: list[int], kinds: list[str], reps: int, warmup: int,
                iters: int, say) -> dict:
    """Figures of one GPU: ``{"figures": {"h2d:GPU0:<bytes>": GB/s}, "samples": {...}, "name", "gate"}``."""
    dev = c_int()
    drv("cuDeviceGetByPCIBusId", ctypes.byref(dev), bdf.encode())
    name = ctypes.create_string_buffer(256)
    drv("cuDeviceGetName", name, 256, dev)
    ctx = c_void_p()
    drv("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    cpus = numa_cpus(bdf)
    before = os.sched_getaffinity(0)
    out: dict = {"name": name.value.decode(errors="replace"), "figures": {}, "samples": {}, "errors": {},
                 "bound_to_cpus": sorted(cpus & before)[:8] if cpus & before else None}
    try:
        drv("cuCtxSetCurrent", ctx)
        if cpus & before:
            os.sched_setaffinity(0, cpus & before)  # pinned pages first touched on the GPU's own node
        gate = Gate(drv)
        stream = c_void_p()
        drv("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
        try:
            for size in sizes:
                host, a, b = c_void_p(), c_uint64(), c_uint64()
                try:
                    drv("cuMemHostAlloc", ctypes.byref(host), size, CU_MEMHOSTALLOC_PORTABLE)
                    drv("cuMemAlloc_v2", ctypes.byref(a), size)
                    drv("cuMemAlloc_v2", ctypes.byref(b), size)
                    ops = {"h2d": (lambda: drv("cuMemcpyHtoDAsync_v2", a, host, size, stream), size),
                           "d2h": (lambda: drv("cuMemcpyDtoHAsync_v2", host, a, size, stream), size),
                           "d2d": (lambda: drv("cuMemcpyDtoDAsync_v2", b, a, size, stream), size),
                           "hbm": (lambda: drv("cuMemcpyDtoDAsync_v2", b, a, size, stream), 2 * size)}
                    for kind in kinds:
                        key = f"{kind}:{label}:{size}"
                        copy, counted = ops[kind]
                        try:
                            samples = time_copies(drv, gate, stream, copy, counted, reps, warmup, iters)
                        except DriverError as exc:
                            out["errors"][key] = str(exc)
                            continue
                        out["samples"][key] = [round(x, 3) for x in samples]
                        if samples:
                            out["figures"][key] = round(statistics.median(samples), 3)
                            say(f"{key}: {out['figures'][key]:.1f} GB/s")
                except DriverError as exc:
                    out["errors"][f"*:{label}:{size}"] = str(exc)
                finally:
                    for ptr in (a, b):
                        if ptr.value:
                            drv("cuMemFree_v2", ptr)
                    if host.value:
                        drv("cuMemFreeHost", host)
        finally:
            drv("cuStreamDestroy_v2", stream)
        out["gate"] = gate.why_not or "cuStreamWaitValue32 on a flag in mapped host memory"
    finally:
        os.sched_setaffinity(0, before)
        drv("cuDevicePrimaryCtxRelease_v2", dev)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="append", default=[], metavar="LABEL=BDF", help="a GPU to measure (repeatable)")
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[256])
    ap.add_argument("--kinds", nargs="+", default=["h2d", "d2h", "d2d"], choices=["h2d", "d2h", "d2d", "hbm"])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args(argv)

    def say(msg: str) -> None:
        print(f"[driver-api] {msg}", file=sys.stderr, flush=True)

    doc: dict = {"engine": "cuda-driver-api (ctypes, libcuda.so.1)", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "reps": args.reps, "warmup": args.warmup, "iters": args.iters, "gpus": {}}
    code = 0
    try:
        gpus = [g.split("=", 1) for g in args.gpu]
        if not gpus or any(len(g) != 2 for g in gpus):
            raise SystemExit("give each GPU as --gpu LABEL=BDF, e.g. --gpu GPU0=0000:18:00.0")
        drv = load()
        drv("cuInit", 0)
        version = c_int()
        drv("cuDriverGetVersion", ctypes.byref(version))
        doc["cuda_driver_version"] = version.value
        for label, bdf in gpus:
            doc["gpus"][label] = measure_gpu(drv, label, bdf, [m << 20 for m in args.sizes_mib], args.kinds,
                                             args.reps, args.warmup, args.iters, say)
    except (OSError, DriverError) as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"
        say(doc["error"])
        code = 3
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
