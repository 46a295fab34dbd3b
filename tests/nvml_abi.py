"""A stand-in for the NVML shared library, at the C ABI, for driving the real ``pynvml`` wrapper.

``pynvml`` looks every C function up through ``_nvmlGetFunctionPointer(name)``, which takes
``getattr(nvmlLib, name)`` from the loaded ``libnvidia-ml.so.1``. :func:`install` puts an object
there whose attributes are ctypes function pointers (``CFUNCTYPE`` closures) declared with the
prototypes of ``nvml.h``. pynvml then calls them exactly as it calls the driver: its ``c_uint``
arguments, ``byref`` out-parameters, string buffers with their lengths, arrays of
``nvmlFieldValue_t``. Because the prototypes are declared, ctypes refuses arguments of the wrong
kind (a structure passed by value where the C function takes a pointer raises instead of handing
the driver garbage), and every answer is written through the caller's pointers, so what ccdiag
reads back went through the same memory the real library would have written.

The GPUs answered here are SYNTHESIZED (see :class:`AbiGpu`): plausible H100-like values, not a
capture from a machine. Prototypes follow nvml.h as shipped with the NVIDIA driver (function names
and parameter order as in NVIDIA's NVML API reference).
"""

from __future__ import annotations

import ctypes
from ctypes import CFUNCTYPE, POINTER, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import Any, Callable

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
#: first fake device handle; handle = base + index
HANDLE_BASE = 0x7A000

VOID = c_void_p  # pointers and device handles: ctypes accepts byref()/buffers/None, refuses structures
ENUM = c_uint  # C enums are int-sized; pynvml passes them as c_uint (or plain ints)


@dataclass
class AbiGpu:
    """One SYNTHESIZED GPU as the stand-in library describes it."""

    uuid: str
    bus_id: str  # "00000000:18:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = "1650000000001"
    vbios: str = "96.00.51.00.0E"  # a real Hopper board's format (an H800's nvidia-smi -q)
    nvlinks: int = 2
    fabric_state: int = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
    fabric_health_mask: int = 0x0A
    #: running compute processes: (pid, used bytes or None for NVML_VALUE_NOT_AVAILABLE)
    processes: tuple[tuple[int, int | None], ...] = ()
    #: {function name: NVML return code} forced for this GPU
    fail: dict[str, int] = field(default_factory=dict)


class NvmlAbi:
    """The stand-in library: a namespace of C function pointers plus a log of what was called."""

    def __init__(self, gpus: list[AbiGpu], driver: str = "570.133.20"):
        self.gpus = gpus
        self.driver = driver
        self.called: list[str] = []
        self._keep: list[Any] = []  # closures and buffers that must outlive the calls
        self._error_strings: dict[int, ctypes.Array] = {}
        self.functions: dict[str, Any] = {}
        self._define()

    # -- plumbing ----------------------------------------------------------------------------
    def _fn(self, name: str, argtypes: tuple, impl: Callable[..., int], restype: Any = c_int) -> None:
        proto = CFUNCTYPE(restype, *argtypes)

        def entry(*args: Any) -> Any:
            self.called.append(name)
            try:
                return impl(*args)
            except Exception as exc:  # pragma: no cover - a bug in the stand-in, shown loudly
                raise SystemExit(f"stand-in {name} failed: {exc!r}")

        cfunc = proto(entry)
        self._keep.append(cfunc)
        self.functions[name] = cfunc

    def gpu(self, handle: int | None) -> tuple[int, AbiGpu]:
        index = (handle or 0) - HANDLE_BASE
        if not 0 <= index < len(self.gpus):
            raise KeyError(handle)
        return index, self.gpus[index]

    def _per_gpu(self, name: str, argtypes: tuple, impl: Callable[..., int]) -> None:
        """A device function: the first argument is a handle; forced failures answer first."""

        def wrapped(handle: int, *rest: Any) -> int:
            try:
                index, g = self.gpu(handle)
            except KeyError:
                return NVML_ERROR_INVALID_ARGUMENT
            if name in g.fail:
                return g.fail[name]
            return impl(index, g, *rest)

        self._fn(name, (VOID,) + argtypes, wrapped)

    @staticmethod
    def _put(ctype: Any, address: int | None, value: Any) -> int:
        if not address:
            return NVML_ERROR_INVALID_ARGUMENT
        ctype.from_address(address).value = value
        return NVML_SUCCESS

    @staticmethod
    def _put_text(address: int | None, length: int, text: str) -> int:
        raw = text.encode() + b"\0"
        if not address:
            return NVML_ERROR_INVALID_ARGUMENT
        if len(raw) > length:
            return NVML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(address, raw, len(raw))
        return NVML_SUCCESS

    def _put_pci(self, address: int | None, bus_id: str, device_id: int) -> int:
        import pynvml

        if not address:
            return NVML_ERROR_INVALID_ARGUMENT
        info = pynvml.nvmlPciInfo_t.from_address(address)
        domain, bus, rest = bus_id.split(":")
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        info.pciDeviceId = device_id
        info.busId = bus_id.encode()
        info.busIdLegacy = bus_id[4:].encode()
        return NVML_SUCCESS

    # -- the library -------------------------------------------------------------------------
    def _define(self) -> None:  # noqa: C901 - one entry per C function, in nvml.h order of use
        import pynvml

        P = VOID
        ok = NVML_SUCCESS

        self._fn("nvmlInitWithFlags", (c_uint,), lambda flags: ok)
        self._fn("nvmlInit_v2", (), lambda: ok)
        self._fn("nvmlShutdown", (), lambda: ok)

        def error_string(code: int) -> int:
            buf = self._error_strings.get(code)
            if buf is None:
                buf = ctypes.create_string_buffer(f"stand-in NVML error {code}".encode())
                self._error_strings[code] = buf
            return ctypes.addressof(buf)

        self._fn("nvmlErrorString", (c_int,), error_string, restype=c_void_p)
        self._fn("nvmlSystemGetDriverVersion", (P, c_uint), lambda buf, n: self._put_text(buf, n, self.driver))
        self._fn("nvmlSystemGetNVMLVersion", (P, c_uint), lambda buf, n: self._put_text(buf, n, "12." + self.driver))
        self._fn("nvmlSystemGetCudaDriverVersion_v2", (P,), lambda out: self._put(c_int, out, 12080))
        self._fn("nvmlDeviceGetCount_v2", (P,), lambda out: self._put(c_uint, out, len(self.gpus)))

        def handle_by_index(index: int, out: int) -> int:
            if index >= len(self.gpus):
                return NVML_ERROR_INVALID_ARGUMENT
            return self._put(c_void_p, out, HANDLE_BASE + index)

        self._fn("nvmlDeviceGetHandleByIndex_v2", (c_uint, P), handle_by_index)

        g_ = self._per_gpu
        g_("nvmlDeviceGetUUID", (P, c_uint), lambda i, g, buf, n: self._put_text(buf, n, g.uuid))
        g_("nvmlDeviceGetName", (P, c_uint), lambda i, g, buf, n: self._put_text(buf, n, g.name))
        g_("nvmlDeviceGetSerial", (P, c_uint), lambda i, g, buf, n: self._put_text(buf, n, g.serial))
        g_("nvmlDeviceGetVbiosVersion", (P, c_uint), lambda i, g, buf, n: self._put_text(buf, n, g.vbios))
        g_("nvmlDeviceGetPciInfo_v3", (P,), lambda i, g, out: self._put_pci(out, g.bus_id, 0x233010DE))
        g_("nvmlDeviceGetNumaNodeId", (P,), lambda i, g, out: self._put(c_int, out, 0 if i < 4 else 1))

        def memory(i: int, g: AbiGpu, out: int) -> int:
            m = pynvml.c_nvmlMemory_t.from_address(out)
            m.total, m.used, m.free = 85520809984, 561774592, 85520809984 - 561774592
            return ok

        g_("nvmlDeviceGetMemoryInfo", (P,), memory)
        g_("nvmlDeviceGetPersistenceMode", (P,), lambda i, g, out: self._put(c_int, out, 1))

        def two(a: int, b: int) -> Callable[..., int]:
            def impl(i: int, g: AbiGpu, cur: int, pend: int) -> int:
                return self._put(c_uint, cur, a) or self._put(c_uint, pend, b)
            return impl

        g_("nvmlDeviceGetMigMode", (P, P), two(0, 0))
        g_("nvmlDeviceGetEccMode", (P, P), two(1, 1))

        def sram_status(i: int, g: AbiGpu, out: int) -> int:
            st = pynvml.c_nvmlEccSramErrorStatus_v1_t.from_address(out)
            if st.version != pynvml.nvmlEccSramErrorStatus_v1:
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            st.bThresholdExceeded = 0
            return ok

        g_("nvmlDeviceGetSramEccErrorStatus", (P,), sram_status)
        g_("nvmlDeviceGetTotalEccErrors", (ENUM, ENUM, P),
           lambda i, g, etype, ctype, out: self._put(c_ulonglong, out, 0))

        def retired_pages(i: int, g: AbiGpu, cause: int, count: int, addresses: int | None) -> int:
            return NVML_ERROR_NOT_SUPPORTED  # Hopper remaps rows instead of retiring pages

        g_("nvmlDeviceGetRetiredPages", (ENUM, P, P), retired_pages)

        def remapped(i: int, g: AbiGpu, corr: int, unc: int, pending: int, failure: int) -> int:
            for addr, v in ((corr, 0), (unc, 0), (pending, 0), (failure, 0)):
                if self._put(c_uint, addr, v):
                    return NVML_ERROR_INVALID_ARGUMENT
            return ok

        g_("nvmlDeviceGetRemappedRows", (P, P, P, P), remapped)
        g_("nvmlDeviceGetCurrentClocksEventReasons", (P,), lambda i, g, out: self._put(c_ulonglong, out, 1))
        g_("nvmlDeviceGetMaxMigDeviceCount", (P,), lambda i, g, out: self._put(c_uint, out, 0))

        def mig_handle(i: int, g: AbiGpu, slot: int, out: int) -> int:
            return NVML_ERROR_NOT_FOUND  # MIG is off on the stand-in GPUs: no instance in any slot

        g_("nvmlDeviceGetMigDeviceHandleByIndex", (c_uint, P), mig_handle)
        g_("nvmlDeviceGetTemperature", (ENUM, P), lambda i, g, sensor, out: self._put(c_uint, out, 33))
        g_("nvmlDeviceGetTemperatureThreshold", (ENUM, P),
           lambda i, g, kind, out: self._put(c_uint, out, {0: 92, 1: 89, 2: 95, 3: 87}[kind]) if kind < 4
           else NVML_ERROR_NOT_SUPPORTED)
        g_("nvmlDeviceGetPowerUsage", (P,), lambda i, g, out: self._put(c_uint, out, 71500))
        g_("nvmlDeviceGetEnforcedPowerLimit", (P,), lambda i, g, out: self._put(c_uint, out, 700000))
        g_("nvmlDeviceGetMaxClockInfo", (ENUM, P), lambda i, g, kind, out: self._put(c_uint, out, 1980))
        g_("nvmlDeviceGetApplicationsClock", (ENUM, P), lambda i, g, kind, out: self._put(c_uint, out, 1980))
        g_("nvmlDeviceGetCurrPcieLinkGeneration", (P,), lambda i, g, out: self._put(c_uint, out, 5))
        g_("nvmlDeviceGetMaxPcieLinkGeneration", (P,), lambda i, g, out: self._put(c_uint, out, 5))
        g_("nvmlDeviceGetGpuMaxPcieLinkGeneration", (P,), lambda i, g, out: self._put(c_uint, out, 5))
        g_("nvmlDeviceGetCurrPcieLinkWidth", (P,), lambda i, g, out: self._put(c_uint, out, 16))
        g_("nvmlDeviceGetMaxPcieLinkWidth", (P,), lambda i, g, out: self._put(c_uint, out, 16))
        g_("nvmlDeviceGetPcieReplayCounter", (P,), lambda i, g, out: self._put(c_uint, out, 0))

        def processes(i: int, g: AbiGpu, count: int, infos: int | None) -> int:
            have = c_uint.from_address(count).value
            c_uint.from_address(count).value = len(g.processes)
            if not g.processes:
                return ok  # none running: the count says so, the array is not touched
            if not infos or have < len(g.processes):
                return NVML_ERROR_INSUFFICIENT_SIZE  # the caller asks for the size first
            arr = (pynvml.c_nvmlProcessInfo_v3_t * len(g.processes)).from_address(infos)
            for slot, (pid, used) in zip(arr, g.processes):
                slot.pid = pid
                slot.usedGpuMemory = 0xFFFFFFFFFFFFFFFF if used is None else used  # NVML_VALUE_NOT_AVAILABLE
            return ok

        g_("nvmlDeviceGetComputeRunningProcesses_v3", (P, P), processes)

        def fabric(i: int, g: AbiGpu, out: int) -> int:
            info = pynvml.c_nvmlGpuFabricInfo_v2_t.from_address(out)
            if info.version != pynvml.nvmlGpuFabricInfo_v2:
                return NVML_ERROR_INVALID_ARGUMENT  # the driver checks the caller's layout version
            info.status, info.state, info.cliqueId = 0, g.fabric_state, 7
            info.healthMask = g.fabric_health_mask
            return ok

        g_("nvmlDeviceGetGpuFabricInfoV", (P,), fabric)

        def field_values(i: int, g: AbiGpu, count: int, values: int) -> int:
            if count <= 0 or not values:
                return NVML_ERROR_INVALID_ARGUMENT
            arr = (pynvml.c_nvmlFieldValue_t * count).from_address(values)
            for v in arr:
                if v.fieldId == 230:  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
                    v.nvmlReturn, v.valueType, v.value.uiVal = 0, 1, 0
                elif v.fieldId == 82:  # NVML_FI_DEV_MEMORY_TEMP
                    v.nvmlReturn, v.valueType, v.value.uiVal = 0, 1, 41
                elif v.fieldId in (138, 139):  # NVLink TX/RX throughput, per link (scopeId)
                    v.nvmlReturn, v.valueType = 0, 3
                    v.value.ullVal = 1000 * (v.fieldId - 137) + v.scopeId
                else:
                    v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            return ok

        g_("nvmlDeviceGetFieldValues", (c_int, P), field_values)

        def link_guard(impl: Callable[..., int]) -> Callable[..., int]:
            def checked(i: int, g: AbiGpu, link: int, *rest: Any) -> int:
                if link >= g.nvlinks:
                    return NVML_ERROR_INVALID_ARGUMENT
                return impl(i, g, link, *rest)
            return checked

        g_("nvmlDeviceGetNvLinkState", (c_uint, P), link_guard(lambda i, g, k, out: self._put(c_uint, out, 1)))
        g_("nvmlDeviceGetNvLinkVersion", (c_uint, P), link_guard(lambda i, g, k, out: self._put(c_uint, out, 6)))
        g_("nvmlDeviceGetNvLinkRemotePciInfo_v2", (c_uint, P),
           link_guard(lambda i, g, k, out: self._put_pci(out, f"00000000:{0x05 + k:02x}:00.0", 0x22A310DE)))
        g_("nvmlDeviceGetNvLinkRemoteDeviceType", (c_uint, P),
           link_guard(lambda i, g, k, out: self._put(c_int, out, 2)))  # NVML_NVLINK_DEVICE_TYPE_SWITCH
        g_("nvmlDeviceGetNvLinkErrorCounter", (c_uint, ENUM, P),
           link_guard(lambda i, g, k, counter, out: self._put(c_ulonglong, out, 0)))

        def p2p(i: int, g: AbiGpu, other: int, cap: int, out: int) -> int:
            try:
                self.gpu(other)
            except KeyError:
                return NVML_ERROR_INVALID_ARGUMENT
            return self._put(c_int, out, 0)  # NVML_P2P_STATUS_OK

        g_("nvmlDeviceGetP2PStatus", (VOID, ENUM, P), p2p)


class _Lib:
    """What pynvml holds in ``nvmlLib``: C functions as attributes (AttributeError when absent)."""

    def __init__(self, functions: dict[str, Any]):
        self.__dict__.update(functions)


def install(monkeypatch: Any, abi: NvmlAbi) -> Any:
    """Make the real pynvml module talk to ``abi`` (undone by ``monkeypatch``); returns pynvml."""
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlLib", _Lib(abi.functions))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return pynvml


def c_prototype_names() -> set[str]:
    """Every C function the stand-in implements."""
    return set(NvmlAbi([]).functions)


__all__ = ["AbiGpu", "NvmlAbi", "install", "POINTER", "c_char_p", "c_prototype_names"]
