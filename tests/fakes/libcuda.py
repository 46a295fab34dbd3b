"""A stand-in for the CUDA driver library at the C ABI (SYNTHESIZED: no GPU, no driver), for
driving ``bench/copy_driver_api.py`` the way it drives ``libcuda.so.1``.

Every function it binds is a ctypes function pointer declared with the prototype the measure
declares (``copy_driver_api.PROTOTYPES``, from cuda.h), so the measure's arguments go through
ctypes' conversions as they would to the driver (device pointers as 64-bit integers, handles and
host pointers as pointers, results written through ``byref`` out-parameters). Copies advance a
virtual clock per stream at the rates a test sets, events read that clock, and the stream-wait
gate records whether the host had closed its flag before queueing the round. Nothing here was
measured.
"""

from __future__ import annotations

import ctypes
from ctypes import CFUNCTYPE, c_int
from typing import Any, Callable

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_NOT_SUPPORTED = 801
_NAMES = {CUDA_ERROR_OUT_OF_MEMORY: b"CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_INVALID_DEVICE: b"CUDA_ERROR_INVALID_DEVICE",
          CUDA_ERROR_NOT_SUPPORTED: b"CUDA_ERROR_NOT_SUPPORTED"}


class LibCuda:
    """``devices``: [(bus id, name)]; ``rates``: GB/s per copy kind ("h2d", "d2h", "d2d");
    ``missing``: exported symbols this driver lacks; ``fail``: {function: CUresult} forced;
    ``max_alloc_bytes``: device allocations above this fail with out of memory."""

    def __init__(self, prototypes: dict[str, tuple], devices: list[tuple[str, str]], rates: dict[str, float],
                 missing: tuple[str, ...] = (), fail: dict[str, int] | None = None, max_alloc_bytes: int = 1 << 40,
                 older_symbols: dict[str, str] | None = None):
        self.devices, self.rates, self.fail = devices, rates, dict(fail or {})
        self.max_alloc_bytes = max_alloc_bytes
        self.next = 0x10000
        self.host_buffers: dict[int, Any] = {}
        self.dev_ptrs: dict[int, tuple[int, int]] = {}
        self.streams: dict[int, float] = {}
        self.events: dict[int, float] = {}
        self.current = 0
        self.holds = 0
        self.holds_with_flag_open = 0
        self.calls: list[str] = []
        self._keep: list[Any] = []
        impls = self._impls()
        for name, args in prototypes.items():
            impl = impls[name]
            for symbol in (name, (older_symbols or {}).get(name)):
                if symbol and symbol not in missing:
                    self._bind(symbol, args, impl)
                    break

    def _bind(self, symbol: str, args: tuple, impl: Callable[..., int]) -> None:
        def entry(*a: Any, _n=symbol, _f=impl) -> int:
            self.calls.append(_n)
            if _n in self.fail:
                return self.fail[_n]
            return _f(*a)

        fn = CFUNCTYPE(c_int, *args)(entry)
        self._keep.append(fn)
        setattr(self, symbol, fn)

    def _handle(self) -> int:
        self.next += 0x100
        return self.next

    def _impls(self) -> dict[str, Callable[..., int]]:
        def put(ptr: Any, value: Any) -> int:
            ptr[0] = value
            return CUDA_SUCCESS

        def by_bus(out, bus):
            for i, (b, _) in enumerate(self.devices):
                if b.lower() == bus.decode().lower():
                    return put(out, i)
            return CUDA_ERROR_INVALID_DEVICE

        def name(buf, length, dev):
            data = self.devices[dev][1].encode()[:length - 1] + b"\0"
            ctypes.memmove(ctypes.cast(buf, ctypes.c_void_p).value, data, len(data))
            return CUDA_SUCCESS

        def mem_alloc(out, size):
            if size > self.max_alloc_bytes:
                return CUDA_ERROR_OUT_OF_MEMORY
            h = self._handle()
            self.dev_ptrs[h] = (self.current, size)
            return put(out, h)

        def host_alloc(out, size, flags):
            buf = ctypes.create_string_buffer(max(64, size if flags & 2 else 64))  # mapped ones are really written
            self.host_buffers[ctypes.addressof(buf)] = buf
            return put(out, ctypes.addressof(buf))

        def copy(kind: str) -> Callable[..., int]:
            def impl(dst, src, size, stream):
                self.streams[stream] += size / (self.rates[kind] * 1e9)
                return CUDA_SUCCESS
            return impl

        def wait(stream, addr, value, flags):
            self.holds += 1
            if ctypes.c_uint32.from_address(addr).value == value:
                self.holds_with_flag_open += 1  # the round would start before it was queued
            return CUDA_SUCCESS

        def elapsed(out, a, b):
            return put(out, (self.events[b] - self.events[a]) * 1e3)

        def error_name(code, out):
            out[0] = _NAMES.get(code, b"CUDA_ERROR_UNKNOWN")
            return CUDA_SUCCESS

        def new(table: dict, value: float = 0.0) -> Callable[..., int]:
            def impl(out, flags):
                h = self._handle()
                table[h] = value
                return put(out, h)
            return impl

        def record(event, stream):
            self.events[event] = self.streams[stream]
            return CUDA_SUCCESS

        def set_current(ctx):
            self.current = ctx - 0x7000
            return CUDA_SUCCESS

        ok: Callable[..., int] = lambda *a: CUDA_SUCCESS  # noqa: E731
        return {
            "cuInit": ok, "cuDriverGetVersion": lambda out: put(out, 13000),
            "cuDeviceGetByPCIBusId": by_bus, "cuDeviceGetName": name,
            "cuDevicePrimaryCtxRetain": lambda out, dev: put(out, 0x7000 + dev),
            "cuDevicePrimaryCtxRelease_v2": ok, "cuCtxSetCurrent": set_current,
            "cuMemAlloc_v2": mem_alloc, "cuMemFree_v2": lambda p: (self.dev_ptrs.pop(p, None), CUDA_SUCCESS)[1],
            "cuMemHostAlloc": host_alloc, "cuMemFreeHost": lambda p: (self.host_buffers.pop(p, None), CUDA_SUCCESS)[1],
            "cuMemHostGetDevicePointer_v2": lambda out, p, flags: put(out, p),
            "cuStreamCreate": new(self.streams), "cuStreamDestroy_v2": ok, "cuStreamSynchronize": ok,
            "cuStreamWaitValue32_v2": wait, "cuEventCreate": new(self.events), "cuEventDestroy_v2": ok,
            "cuEventRecord": record, "cuEventElapsedTime_v2": elapsed,
            "cuMemcpyHtoDAsync_v2": copy("h2d"), "cuMemcpyDtoHAsync_v2": copy("d2h"), "cuMemcpyDtoDAsync_v2": copy("d2d"),
            "cuGetErrorName": error_name,
        }
