"""A test double of the CuPy API surface ccdiag's CUDA benchmark worker uses (SYNTHESIZED: no GPU,
no CUDA; see tests/fakes/README.md). Configured by the JSON in ``CCDIAG_FAKE_CUDA``:

``devices``: [{"bdf", "name", "numa"}], ``h2d`` / ``d2h`` / ``d2d``: GB/s per device index,
``p2p``: {"a-b": GB/s} with ``p2p_default``, ``no_peer``: ["a-b"], ``remote_factor``: host->device
rate multiplier when the pinned buffer sits on another NUMA node (buffer node = the CPU the
allocating thread is bound to, via ``cpu_numa``; streams do not slow each other), ``oom_devices``: [index],
``hang``: a benchmark kind whose copies never complete ("h2d", "p2p", "d2d", "gemm"),
``gemm_tflops``: TFLOPS per device index of a dense matmul (``cupy.matmul`` advances the clock of the
stream entered with ``with stream:`` by 2*n^3 / rate).
"""

from __future__ import annotations

import ctypes
import json
import os
import time

__version__ = "0.0-fake"
_CFG = json.loads(os.environ.get("CCDIAG_FAKE_CUDA") or "{}")


class CUDARuntimeError(RuntimeError):
    pass


class _Memory:
    class OutOfMemoryError(MemoryError):
        pass


class _State:
    current = 0
    ptrs: dict = {}  # ptr -> ("host", numa) | ("dev", device)
    next_ptr = 0x1000


def _rate(kind: str, dev: int) -> float:
    table = _CFG.get(kind) or {}
    return float(table.get(str(dev), table.get("default", 10.0)))


def _hang(kind: str) -> None:
    if _CFG.get("hang") == kind:
        time.sleep(3600)


def _bus_key(bdf: str) -> tuple[int, str]:
    """"0000:18:00.0", "00000000:18:00.0" and "18:00.0" name one device, as in CUDA."""
    parts = bdf.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    return int(parts[0] or "0", 16), ":".join(parts[1:])


class _Runtime:
    memcpyHostToHost, memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice = 0, 1, 2, 3
    hostAllocPortable, hostAllocMapped = 1, 2
    _mapped: dict = {}  # real host buffers behind mapped allocations (the host writes them)

    @staticmethod
    def deviceGetByPCIBusId(bdf: str) -> int:
        """The ordinal of the device at ``bdf`` among ``devices`` (what CUDA sees, in its order: a
        list that leaves GPUs out or reorders them stands for CUDA_VISIBLE_DEVICES)."""
        for i, b in enumerate(d["bdf"] for d in _CFG.get("devices") or []):
            if _bus_key(b) == _bus_key(bdf):
                return i
        raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")

    @staticmethod
    def getDeviceCount() -> int:
        return len(_CFG.get("devices") or [])

    @staticmethod
    def getDeviceProperties(i: int) -> dict:
        return {"name": (_CFG["devices"][i].get("name") or "Fake GPU").encode()}

    @staticmethod
    def driverGetVersion() -> int:
        return 12040

    @staticmethod
    def runtimeGetVersion() -> int:
        return 12040

    @staticmethod
    def deviceGetPCIBusId(i: int) -> str:
        return _CFG["devices"][i]["bdf"]

    @staticmethod
    def deviceCanAccessPeer(a: int, b: int) -> int:
        return 0 if f"{a}-{b}" in (_CFG.get("no_peer") or []) or f"{b}-{a}" in (_CFG.get("no_peer") or []) else 1

    @staticmethod
    def deviceEnablePeerAccess(peer: int) -> None:
        return None

    @staticmethod
    def hostAlloc(size: int, flags: int) -> int:
        if flags & 2:  # mapped: a real buffer, since the host writes it (the spin kernel's flag)
            buf = ctypes.create_string_buffer(max(8, size))
            _Runtime._mapped[ctypes.addressof(buf)] = buf
            return ctypes.addressof(buf)
        cpus = os.sched_getaffinity(0)
        cpu_numa = _CFG.get("cpu_numa") or {}
        numa = cpu_numa.get(str(min(cpus))) if len(cpus) == 1 else None
        ptr = _State.next_ptr
        _State.next_ptr += 0x1000
        _State.ptrs[ptr] = ("host", numa)
        return ptr

    @staticmethod
    def freeHost(ptr: int) -> None:
        _State.ptrs.pop(ptr, None)

    @staticmethod
    def malloc(size: int) -> int:
        if _State.current in (_CFG.get("oom_devices") or []):
            raise _Memory.OutOfMemoryError(f"out of memory to allocate {size} bytes (device {_State.current})")
        ptr = _State.next_ptr
        _State.next_ptr += 0x1000
        _State.ptrs[ptr] = ("dev", _State.current)
        return ptr

    @staticmethod
    def free(ptr: int) -> None:
        _State.ptrs.pop(ptr, None)

    @staticmethod
    def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        s = _Stream.by_ptr[stream]
        if kind == 1:
            _hang("h2d")
            dev, numa = _State.ptrs[dst][1], _State.ptrs[src][1]
            rate = _rate("h2d", dev)
        elif kind == 2:
            _hang("h2d")
            dev, numa = _State.ptrs[src][1], _State.ptrs[dst][1]
            rate = _rate("d2h", dev)
        else:
            _hang("d2d")
            dev, numa = _State.ptrs[src][1], None
            rate = _rate("d2d", dev)
        if kind in (1, 2):
            own = (_CFG["devices"][dev].get("numa"))
            if numa is not None and own is not None and numa != own:
                rate *= float(_CFG.get("remote_factor", 0.8))
        s.clock += size / (rate * 1e9)

    @staticmethod
    def memcpyPeerAsync(dst: int, dst_dev: int, src: int, src_dev: int, size: int, stream: int) -> None:
        _hang("p2p")
        s = _Stream.by_ptr[stream]
        if _Runtime.deviceCanAccessPeer(src_dev, dst_dev):
            table = _CFG.get("p2p") or {}
            rate = float(table.get(f"{src_dev}-{dst_dev}", _CFG.get("p2p_default", 100.0)))
        else:
            rate = float(_CFG.get("staged", 20.0))
        s.clock += size / (rate * 1e9) + 2e-6


class _Stream:
    by_ptr: dict = {}
    _n = 0
    entered: list = []  # the streams made current with ``with stream:``, innermost last

    def __init__(self, non_blocking: bool = False):
        _Stream._n += 1
        self.ptr = 0x10 + _Stream._n
        self.device = _State.current
        self.clock = 0.0
        _Stream.by_ptr[self.ptr] = self

    def synchronize(self) -> None:
        return None

    def __enter__(self):
        _Stream.entered.append(self)
        return self

    def __exit__(self, *exc):
        _Stream.entered.pop()


float16, float32 = "float16", "float32"


class ndarray:
    """Shape and type only: no values are ever computed."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype
        self.device = _State.current

    def astype(self, dtype):
        return ndarray(self.shape, dtype)


def empty(shape, dtype=float32):
    if _State.current in (_CFG.get("oom_devices") or []):
        raise _Memory.OutOfMemoryError(f"out of memory to allocate {shape} (device {_State.current})")
    return ndarray(shape, dtype)


class random:
    @staticmethod
    def standard_normal(size, dtype=float32):
        return empty(size, dtype)


def matmul(a, b, out=None):
    """Advances the entered stream's clock by the GEMM's time at the configured rate."""
    _hang("gemm")
    if not _Stream.entered:
        raise CUDARuntimeError("the fake times a matmul only on a stream entered with `with stream:`")
    s = _Stream.entered[-1]
    n, k = a.shape
    m = b.shape[1]
    s.clock += 2.0 * n * k * m / (_rate("gemm_tflops", s.device) * 1e12)
    return out if out is not None else ndarray((n, m), a.dtype)


class _Pool:
    def free_all_blocks(self) -> None:
        return None


def get_default_memory_pool():
    return _Pool()


class _Event:
    def __init__(self):
        self.t = None
        self.stream = None

    def record(self, stream) -> None:
        self.t = stream.clock
        self.stream = stream

    def synchronize(self) -> None:
        return None


def _elapsed(a: _Event, b: _Event) -> float:
    return (b.t - a.t) * 1e3


class _Device:
    def __init__(self, i: int = 0):
        self.id = i
        self._prev = None

    @property
    def pci_bus_id(self) -> str:
        return _CFG["devices"][self.id]["bdf"]

    def __enter__(self):
        self._prev = _State.current
        _State.current = self.id
        return self

    def __exit__(self, *exc):
        _State.current = self._prev


class RawKernel:
    """Compiles nothing; a launch records that the stream was held (``launches``)."""

    launches = 0

    def __init__(self, code: str, name: str):
        self.code, self.name = code, name

    def __call__(self, grid, block, args, stream=None):
        RawKernel.launches += 1


def int64(x: int) -> int:
    return int(x)


class _Cuda:
    runtime = _Runtime
    memory = _Memory
    Stream = _Stream
    Event = _Event
    Device = _Device
    get_elapsed_time = staticmethod(_elapsed)


cuda = _Cuda
