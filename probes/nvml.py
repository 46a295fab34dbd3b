"""GPU inventory and health through NVML (driver/CUDA versions, per-GPU health, NVLinks, P2P).

Every value comes through ``host.nvml(fn, *args)``, GPUs named by index, so the same code reads a
live machine (through the deadline-guarded facade in :mod:`ccdiag.host.nvmlcall`) or a snapshot.

How errors are treated, by class (see :mod:`ccdiag.host.nvmlcall`):

* *not applicable* (``not_supported``, ``not_found``): the field is ``None`` and nothing else is
  said; older GPUs simply lack some counters.
* *unknown* (``no_permission``, ``invalid_argument``, ``not_recorded``, other): the field is
  ``None`` and a :class:`ReadError` names the call, so a check can say "could not tell".
* *GPU failed* (``gpu_lost``, ``unknown_error``, ``timeout``, ``hung``, ``reset_required``):
  ``Gpu.failed`` takes the class and that GPU is read no further (each further call could cost
  the facade's whole deadline); the other GPUs are still read.
* ``driver_missing`` on the first call: the probe raises :class:`ProbeUnavailable`.

Calls made, in order (``i``/``j`` GPU indices, ``k`` an NVLink index):

* ``nvmlSystemGetDriverVersion()``, ``nvmlSystemGetCudaDriverVersion_v2()``,
  ``nvmlSystemGetNVMLVersion()``, ``nvmlDeviceGetCount()``
* per GPU: ``nvmlDeviceGetUUID(i)``, ``nvmlDeviceGetName(i)``, ``nvmlDeviceGetSerial(i)``,
  ``nvmlDeviceGetVbiosVersion(i)``,
  ``nvmlDeviceGetPciInfo_v3(i)``, ``nvmlDeviceGetNumaNodeId(i)``, ``nvmlDeviceGetMemoryInfo(i)``,
  ``nvmlDeviceGetPersistenceMode(i)``, ``nvmlDeviceGetMigMode(i)``, ``nvmlDeviceGetEccMode(i)``,
  ``nvmlDeviceGetTotalEccErrors(i, e, c)`` for e in (corrected 0, uncorrected 1) x c in
  (volatile 0, aggregate 1), ``nvmlDeviceGetRetiredPages(i, 0)`` and, only when that one
  answered, ``nvmlDeviceGetRetiredPages(i, 1)`` and ``nvmlDeviceGetRetiredPagesPendingStatus(i)``,
  ``nvmlDeviceGetRemappedRows(i)``, ``nvmlDeviceGetCurrentClocksEventReasons(i)`` (and
  ``nvmlDeviceGetCurrentClocksThrottleReasons(i)`` only when that is not applicable),
  ``nvmlDeviceGetTemperature(i, 0)``, ``nvmlDeviceGetPowerUsage(i)``,
  ``nvmlDeviceGetEnforcedPowerLimit(i)``, ``nvmlDeviceGetCurrPcieLinkGeneration(i)``,
  ``nvmlDeviceGetMaxPcieLinkGeneration(i)``, ``nvmlDeviceGetGpuMaxPcieLinkGeneration(i)``,
  ``nvmlDeviceGetCurrPcieLinkWidth(i)``, ``nvmlDeviceGetMaxPcieLinkWidth(i)``,
  ``nvmlDeviceGetPcieReplayCounter(i)``, ``nvmlDeviceGetComputeRunningProcesses(i)``,
  ``nvmlDeviceGetGpuFabricInfoV(i)`` (and ``nvmlDeviceGetGpuFabricInfo(i)`` only when the
  installed NVML lacks the V form, code 13), ``nvmlDeviceGetFieldValues(i, [230])`` (230 is
  NVML_FI_DEV_GET_GPU_RECOVERY_ACTION);
* per NVLink, k = 0, 1, ... until ``nvmlDeviceGetNvLinkState(i, k)`` says not supported or
  invalid argument (at most NVML_NVLINK_MAX_LINKS = 36): ``nvmlDeviceGetNvLinkState(i, k)``,
  ``nvmlDeviceGetNvLinkVersion(i, k)``, ``nvmlDeviceGetNvLinkRemotePciInfo(i, k)`` (the
  binding's name for the C function nvmlDeviceGetNvLinkRemotePciInfo_v2),
  ``nvmlDeviceGetNvLinkRemoteDeviceType(i, k)``, ``nvmlDeviceGetNvLinkErrorCounter(i, k, c)`` for
  c in (CRC_FLIT 2, CRC_DATA 3, REPLAY 0, RECOVERY 1);
* per GPU with NVLinks, once the walk is done, one call for all its links' traffic counters:
  ``nvmlDeviceGetFieldValues(i, [[138, 0], [139, 0], [138, 1], [139, 1], ...])``, a
  ``[fieldId, scopeId]`` pair per link and direction (138/139 are
  NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/_RX; the scope is the link index, see
  :data:`FI_DEV_NVLINK_THROUGHPUT_DATA_TX`). Lists, not tuples, so the call is named the same
  live and after a snapshot's JSON round trip;
* per ordered pair i != j of GPUs that did not fail: ``nvmlDeviceGetP2PStatus(i, j, c)`` for c in
  (READ 0, WRITE 1, NVLINK 2, ATOMICS 3, PROP 4).

So an 8-GPU H100 node costs 8 x (28 + 18 x 8 + 1 + 1) + 56 x 5 = 1 672 calls, each a few
microseconds in the driver; a GPU that stops answering costs one facade deadline, not one per call.
On a live host each run of calls whose answers decide nothing about the next ones is told ahead
(``_Reader.ahead``), so it crosses to the facade's worker thread in one hand-off, not one per call:
three a GPU (its identity told with the previous GPU's NVLink counters; its remapped rows through
its fabric registration, unless an older form of the clocks-event reasons is needed; its NVLink
walk), about 27 for 8 GPUs instead of 1,700. The calls, their order and the answers are those of
the calls made one by one (tests/test_nvml_facade.py compares both).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ccdiag.core.readings import ReadError, normalize_bdf
from ccdiag.host.nvmlcall import (
    DRIVER_MISSING,
    GPU_FAILED_CLASSES,
    INVALID_ARGUMENT,
    NOT_APPLICABLE_CLASSES,
    NOT_RECORDED,
    NvmlCallError,
    call_name,
)
from ccdiag.probes.registry import PROBE_NVML, ProbeUnavailable, probe

if TYPE_CHECKING:
    from ccdiag.host.door import Host

NAME = PROBE_NVML
TIMEOUT_S = 15.0

# -- NVML constants (nvml.h values, as nvidia-ml-py exposes them; kept here so the probe never
#    imports the binding and replays identically wherever it runs) ---------------------------
MEMORY_ERROR_CORRECTED = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
AGGREGATE_ECC = 1
PAGE_RETIREMENT_MULTIPLE_SBE = 0
PAGE_RETIREMENT_DBE = 1
TEMPERATURE_GPU = 0
#: nvmlClockType_t NVML_CLOCK_SM
CLOCK_SM = 1
#: nvmlTemperatureThresholds_t: the GPU's own limits (nvml.h)
TEMP_THRESHOLD_SHUTDOWN, TEMP_THRESHOLD_SLOWDOWN, TEMP_THRESHOLD_MEM_MAX, TEMP_THRESHOLD_GPU_MAX = 0, 1, 2, 3
#: NVML_FI_DEV_MEMORY_TEMP: HBM temperature, where the GPU reports it (nvml.h field id)
FI_DEV_MEMORY_TEMP = 82
NVLINK_MAX_LINKS = 36
NVLINK_ERROR_DL_REPLAY = 0
NVLINK_ERROR_DL_RECOVERY = 1
NVLINK_ERROR_DL_CRC_FLIT = 2
NVLINK_ERROR_DL_CRC_DATA = 3
#: P2P capability indices. (nvidia-ml-py spells READ as the tuple ``(0,)`` by mistake; 0 it is.)
P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3), ("prop", 4))
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
#: NVLink data counters (payload only, no protocol overhead), lifetime totals in KiB. Per nvml.h the
#: link index goes in nvmlFieldValue_t.scopeId (scopeId UINT_MAX would sum all links); unlike the
#: CRC and bandwidth fields there are no per-link _L<n> ids for these.
FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVLINK_THROUGHPUT_FIELDS = (("tx_bytes", FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
                            ("rx_bytes", FI_DEV_NVLINK_THROUGHPUT_DATA_RX))
#: nvmlReturn_t codes inside a field value that mean "this field does not apply here" (invalid
#: argument: a driver that does not know the field id or scope; not supported; not found; function
#: not found): the value is absent and nothing else is said
FIELD_NOT_APPLICABLE = frozenset({2, 3, 6, 13})

#: nvmlClocksEventReason* / nvmlClocksThrottleReason* bits
CLOCK_EVENT_BITS = (
    (0x001, "idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
    (0x200, "board_limit"),  # throttle-reason API only
    (0x400, "reliability"),  # throttle-reason API only
)

#: the width of NVML's clocks-event mask (unsigned long long)
CLOCK_EVENT_MASK_64 = (1 << 64) - 1

#: nvmlGpuP2PStatus_t, in nvidia-smi's abbreviations
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}

#: nvmlGpuFabricState_t
FABRIC_STATE = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}

#: nvmlNvLinkDeviceType_t
NVLINK_DEVICE_TYPE = {0: "gpu", 1: "ibmnpu", 2: "switch"}

#: nvmlGpuRecoveryAction_t
RECOVERY_ACTION = {0: "none", 1: "reset", 2: "reboot", 3: "drain_p2p", 4: "drain_and_reset",
                   5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}

#: nvmlNvlinkVersion_t -> NVLink major version. nvmlDeviceGetNvLinkVersion returns this enum,
#: not the version itself (an A100 answers 5 for NVLink 3.1, an H100 6 for NVLink 4.0).
NVLINK_VERSION_MAJOR = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

#: nvmlReturn_t names, for statuses NVML hands back inside a result (fabric registration, fields)
NVML_RETURN = {
    0: "success", 1: "uninitialized", 2: "invalid_argument", 3: "not_supported", 4: "no_permission",
    5: "already_initialized", 6: "not_found", 7: "insufficient_size", 8: "insufficient_power",
    9: "driver_not_loaded", 10: "timeout", 11: "irq_issue", 12: "library_not_found",
    13: "function_not_found", 14: "corrupted_inforom", 15: "gpu_is_lost", 16: "reset_required",
    17: "operating_system", 18: "lib_rm_version_mismatch", 19: "in_use", 20: "memory",
    21: "no_data", 22: "vgpu_ecc_not_supported", 23: "insufficient_resources",
    24: "freq_not_supported", 25: "argument_version_mismatch", 26: "deprecated", 27: "not_ready",
    28: "gpu_not_found", 29: "invalid_state", 30: "reset_type_not_supported", 999: "unknown",
}


@dataclass(frozen=True)
class NvLink:
    """One NVLink of one GPU. Counters are lifetime totals; checks judge their change."""

    link: int
    active: bool | None
    version: int | None = None  # NVLink major version (4 on H100), decoded from version_raw
    remote_bus_id: str | None = None  # normalised BDF of the far end (a GPU or an NVSwitch)
    remote_device_type: str | None = None  # "gpu" | "switch" | "ibmnpu" | None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    errors: tuple[ReadError, ...] = ()
    version_raw: int | None = None  # nvmlNvlinkVersion_t value as NVML returned it
    # data bytes sent / received over the link's life (NVML counts KiB; converted to bytes here)
    tx_bytes: int | None = None
    rx_bytes: int | None = None


@dataclass(frozen=True)
class ComputeProcess:
    pid: int
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML sees it. ``failed`` is set (with the error class) when the GPU is lost or
    hung; the fields read before that stay filled."""

    index: int
    uuid: str | None = None
    name: str | None = None
    serial: str | None = None
    bus_id: str | None = None  # normalised BDF, e.g. "0000:18:00.0"
    # NVML's "GPU NUMA ID": set only where the GPU's memory is itself a NUMA node (Grace
    # Hopper/Blackwell); None on PCIe/SXM boards. The CPU-side NUMA node comes from sysfs (pcie).
    numa_node: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    persistence_mode: bool | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    ecc_mode_current: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    #: MIG instance slots whose remapped rows were read (NVML answers per instance in MIG mode)
    remapped_rows_mig: tuple[int, ...] | None = None
    clock_event_reasons: int | None = None  # raw bitmask
    clock_event_names: tuple[str, ...] = ()  # e.g. ("hw_slowdown", "sw_thermal_slowdown")
    temperature_c: float | None = None
    # the GPU's own temperature limits and its memory (HBM) temperature, degrees C (None: not reported)
    temp_slowdown_c: float | None = None
    temp_shutdown_c: float | None = None
    temp_gpu_max_c: float | None = None
    temp_mem_max_c: float | None = None
    memory_temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clock_sm_max_mhz: int | None = None  # nvmlDeviceGetMaxClockInfo(SM): what the GPU can run at
    clock_sm_app_mhz: int | None = None  # nvmlDeviceGetApplicationsClock(SM): what it is set to run at
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # of the link (GPU and host side together)
    pcie_gen_device_max: int | None = None  # of the GPU alone
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_counter: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    compute_processes: tuple[ComputeProcess, ...] = ()
    fabric_state: str | None = None  # "not_supported" | "not_started" | "in_progress" | "completed"
    fabric_status: str | None = None  # NVML return status of fabric registration, as text
    recovery_action: str | None = None  # "none" | "reset" | "reboot" | "drain_p2p" | "drain_and_reset"
    failed: str | None = None  # error class when the GPU is lost/hung (see ccdiag.host.nvmlcall)
    errors: tuple[ReadError, ...] = ()
    ecc_mode_pending: bool | None = None
    fabric_health_mask: int | None = None  # nvmlGpuFabricInfo_v2 healthMask, raw
    fabric_clique_id: int | None = None  # nvmlGpuFabricInfo cliqueId: GPUs of one NVLink domain share it
    fabric_cluster_uuid: str | None = None  # nvmlGpuFabricInfo clusterUuid (None when all zero)
    #: nvmlDeviceGetSramEccErrorStatus: the SRAM error threshold of field diagnostics exceeded
    #: (bThresholdExceeded; NVIDIA's XID 48 flow: RMA when set), and the uncorrectable SRAM counts
    #: (parity + SEC-DED) since the last reset and over the GPU's life
    sram_threshold_exceeded: bool | None = None
    sram_uncorrected_volatile: int | None = None
    sram_uncorrected_aggregate: int | None = None
    #: nvmlDeviceGetVbiosVersion ("96.00.89.00.01"): a fleet's known-good set names it per machine type
    vbios_version: str | None = None


@dataclass(frozen=True)
class P2PStatus:
    """One ordered GPU pair from nvmlDeviceGetP2PStatus: "OK", "NS" (not supported), "CNS",
    "GNS", "TNS", "DR" (disabled by registry), "U" (unknown)."""

    gpu_a: int
    gpu_b: int
    read: str | None = None
    write: str | None = None
    nvlink: str | None = None
    atomics: str | None = None
    prop: str | None = None


@dataclass(frozen=True)
class NvmlObservation:
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.8"
    nvml_version: str | None = None
    device_count: int | None = None
    gpus: tuple[Gpu, ...] = ()
    p2p: tuple[P2PStatus, ...] = ()
    errors: tuple[ReadError, ...] = ()


# ---------------------------------------------------------------------------------------------
# parsing: pure functions of the JSON values NVML calls return (tested from tables)
# ---------------------------------------------------------------------------------------------
class ParseError(ValueError):
    """A value of an unexpected shape (a snapshot edited by hand, a binding that changed)."""


#: what a parser may raise on a replayed value of the wrong shape (a list where an object belongs, a
#: huge or non-finite number): that call's parse error, never an exception that ends the probe
_PARSE_ERRORS = (ParseError, KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"expected an integer, got {value!r}")
    return value


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        raise ParseError(f"expected text, got {value!r}")
    value = value.strip()
    return value or None


def parse_cuda_version(value: Any) -> str:
    """NVML's CUDA driver version integer (12080) as "12.8"."""
    v = _int(value)
    return f"{v // 1000}.{(v % 1000) // 10}"


def parse_pci_bus_id(info: Any) -> str | None:
    """Normalised BDF from an nvmlPciInfo_t as JSON (``busId``, else ``busIdLegacy``)."""
    if not isinstance(info, dict):
        raise ParseError(f"expected a PCI info structure, got {info!r}")
    for key in ("busId", "busIdLegacy"):
        bdf = normalize_bdf(info.get(key) if isinstance(info.get(key), str) else None)
        if bdf:
            return bdf
    raise ParseError(f"no usable bus id in {info!r}")


def parse_bool_pair(value: Any) -> tuple[bool, bool]:
    """``[current, pending]`` (MIG mode, ECC mode) as booleans."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ParseError(f"expected [current, pending], got {value!r}")
    return bool(_int(value[0])), bool(_int(value[1]))


def parse_remapped_rows(value: Any) -> tuple[int, int, bool, bool]:
    """``[correctable, uncorrectable, pending, failure]`` from nvmlDeviceGetRemappedRows."""
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise ParseError(f"expected 4 remapped-row values, got {value!r}")
    corr, unc, pending, failure = (_int(v) for v in value)
    return corr, unc, bool(pending), bool(failure)


def clock_event_names(mask: int) -> tuple[str, ...]:
    """Names of the bits set in a clocks-event (throttle) reason mask; unknown bits by value.

    NVML's mask is an unsigned long long. A value outside it (a negative one from a binding that
    sign-extends, or a corrupt snapshot's huge one) is taken modulo 2**64 first: a negative Python
    int has infinitely many bits set, and walking them never ends.
    """
    mask &= CLOCK_EVENT_MASK_64
    names = [name for bit, name in CLOCK_EVENT_BITS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_BITS:
        known |= bit
    rest = mask & ~known
    while rest:
        bit = rest & -rest  # the lowest set bit: at most 64 turns
        names.append(f"unknown_0x{bit:x}")
        rest ^= bit
    return tuple(names)


def p2p_status_name(value: Any) -> str:
    v = _int(value)
    return P2P_STATUS.get(v, "U")


def nvml_return_name(code: Any) -> str:
    v = _int(code)
    return NVML_RETURN.get(v, f"nvml_error_{v}")


def parse_fabric_info(info: Any) -> tuple[str, str | None, int | None]:
    """(state, status, health mask) from an nvmlGpuFabricInfo(_v2)_t as JSON. The status only
    means something once registration has finished, so it is None before that."""
    if not isinstance(info, dict):
        raise ParseError(f"expected a fabric info structure, got {info!r}")
    state_v = _int(info.get("state"))
    state = FABRIC_STATE.get(state_v, f"unknown_{state_v}")
    status = nvml_return_name(info["status"]) if state == "completed" and "status" in info else None
    mask = info.get("healthMask")
    return state, status, (_int(mask) if mask is not None else None)


def parse_processes(value: Any) -> tuple[ComputeProcess, ...]:
    if not isinstance(value, list):
        raise ParseError(f"expected a list of processes, got {value!r}")
    out = []
    for proc in value:
        if not isinstance(proc, dict):
            raise ParseError(f"expected a process structure, got {proc!r}")
        used = proc.get("usedGpuMemory")
        out.append(ComputeProcess(_int(proc.get("pid")), _int(used) if used is not None else None))
    return tuple(out)


_VALUE_KEYS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_items(value: Any) -> list[tuple[int, int, int, Any]]:
    """``(fieldId, scopeId, nvmlReturn, value)`` per nvmlFieldValue_t; value None unless the
    field's own return is success (NVML leaves it undefined otherwise)."""
    if not isinstance(value, list):
        raise ParseError(f"expected a list of field values, got {value!r}")
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise ParseError(f"expected a field value structure, got {item!r}")
        ret = _int(item.get("nvmlReturn", 0))
        val = None
        if ret == 0:
            union = item.get("value")
            key = _VALUE_KEYS.get(_int(item.get("valueType", 1)))
            if not isinstance(union, dict) or key not in union:
                raise ParseError(f"field {item.get('fieldId')} has no {key} value: {item!r}")
            val = union[key]
        out.append((_int(item.get("fieldId")), _int(item.get("scopeId", 0)), ret, val))
    return out


def parse_field_values(value: Any) -> dict[int, tuple[int, Any]]:
    """``{fieldId: (nvmlReturn, value)}`` from nvmlDeviceGetFieldValues; value None unless the
    field's own return is success."""
    return {fid: (ret, val) for fid, _scope, ret, val in _field_items(value)}


def parse_scoped_field_values(value: Any) -> dict[tuple[int, int], tuple[int, Any]]:
    """``{(fieldId, scopeId): (nvmlReturn, value)}``: the same field asked for several scopes
    (one per NVLink) comes back once per scope, so the scope is part of the key."""
    return {(fid, scope): (ret, val) for fid, scope, ret, val in _field_items(value)}


def kib_counter_bytes(value: Any) -> int:
    """A KiB counter from a field value as bytes. Integral only: a counter is never fractional
    or negative, so anything else is a value of the wrong shape."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    v = _int(value)
    if v < 0:
        raise ParseError(f"negative counter {v}")
    return v * 1024


def recovery_action_name(value: Any) -> str:
    v = _int(value)
    return RECOVERY_ACTION.get(v, f"unknown_{v}")


def nvlink_version_major(raw: Any) -> int | None:
    return NVLINK_VERSION_MAJOR.get(_int(raw))


def nvlink_device_type(value: Any) -> str | None:
    return NVLINK_DEVICE_TYPE.get(_int(value))


def milliwatts(value: Any) -> float:
    return _int(value) / 1000.0


# ---------------------------------------------------------------------------------------------
def parse_fabric_identity(info: Any) -> tuple[int | None, str | None]:
    """(clique id, cluster UUID) of a registered GPU from an nvmlGpuFabricInfo(_v2)_t as JSON.
    Both mean something only once registration completed; an all-zero UUID is no cluster."""
    if not isinstance(info, dict) or FABRIC_STATE.get(_int(info.get("state"))) != "completed":
        return None, None
    clique = info.get("cliqueId")
    raw = info.get("clusterUuid")
    uuid = None
    if isinstance(raw, (list, tuple)) and len(raw) == 16:
        data = bytes(_int(b) & 0xFF for b in raw)
        if any(data):
            h = data.hex()
            uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    elif isinstance(raw, str) and raw.strip("0-"):
        uuid = raw.strip().lower()
    return (_int(clique) if clique is not None else None), uuid


#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*: field -> (shift, width mask, value meaning "unhealthy")
FABRIC_HEALTH_FIELDS = {
    "degraded_bandwidth": (0, 0x3, 1),  # DEGRADED_BW_TRUE
    "route_recovery": (2, 0x3, 1),  # ROUTE_RECOVERY_TRUE: a route is being recovered
    "route_unhealthy": (4, 0x3, 1),  # ROUTE_UNHEALTHY_TRUE
    "access_timeout_recovery": (6, 0x3, 1),  # ACCESS_TIMEOUT_RECOVERY_TRUE
}
#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* (shift 8, width 0xF): every value the
#: header defines (0 not supported and 1 none are no problem)
FABRIC_CONFIG = {0: None, 1: None, 2: "incorrect system GUID", 3: "incorrect chassis serial number",
                 4: "no partition", 5: "insufficient NVLinks", 6: "incompatible GPU firmware",
                 7: "invalid location", 8: "GPU state invalid"}
#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_* (shift 12, width 0x3) and
#: NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_* (shift 14, width 0x3): the value meaning a problem
FABRIC_STATE_FIELDS = {
    "no_partition_assigned": (12, 0x3, 2),  # PARTITION_ASSIGNED_FALSE: the GPU is in no NVLink partition
    "fabric_manager_disconnected": (14, 0x3, 2),  # GFM_STATE_DISCONNECTED: the global fabric manager is gone
}


def decode_fabric_health(mask: int | None) -> dict[str, Any]:
    """The problems a fabric health mask reports: ``{"degraded_bandwidth": True, ...,
    "incorrect_configuration": "insufficient NVLinks"}``; empty when healthy or unsupported. Every
    field of nvml.h's mask is read; a configuration value the header does not define yet is named by
    its number."""
    if not mask:
        return {}
    out: dict[str, Any] = {}
    for name, (shift, width, bad) in {**FABRIC_HEALTH_FIELDS, **FABRIC_STATE_FIELDS}.items():
        if (mask >> shift) & width == bad:
            out[name] = True
    config = (mask >> 8) & 0xF
    reason = FABRIC_CONFIG.get(config, f"configuration error {config} (not in this ccdiag's nvml.h)")
    if reason:
        out["incorrect_configuration"] = reason
    return out


#: the remote address NVML gives for a link with no far end it can name (down, or the far end is
#: outside this node, as on a GB200 NVL72 tray): not a device
def is_placeholder_bdf(bdf: str | None) -> bool:
    return bdf is None or bdf.startswith("ffffffff:") or bdf in ("0000:00:00.0", "ffff:ff:ff.0")


# reading
# ---------------------------------------------------------------------------------------------
class _GpuFailed(Exception):
    def __init__(self, exc: NvmlCallError):
        super().__init__(str(exc))
        self.exc = exc


_MISSING = object()


class _Reader:
    """Calls NVML for one scope (the system, one GPU, one link) and files what went wrong."""

    #: the next GPU's first calls, told together with this GPU's last one (one hand-off, not two);
    #: ``told_next`` says they were, and that GPU then tells them no more
    next_first: list[tuple[str, tuple]] = []
    told_next = False
    #: the GPU's calls from its remapped rows to its fabric registration were told in one batch
    #: (_read_ecc); reset where that batch ends early (an older form of a call asked), for the rest
    #: to be told again
    told_to_fabric = False

    def __init__(self, host: Host, stop_on_gpu_failure: bool = True, caller: Callable[..., Any] | None = None):
        self.host = host
        if caller is None:
            # bound once (the facade's own call on a live host): a collection makes about 1,700 calls
            bound = getattr(host, "nvml_caller", None)
            caller = bound() if bound is not None else host.nvml
        self._nvml = caller
        self.errors: list[ReadError] = []
        self.stop_on_gpu_failure = stop_on_gpu_failure

    def scoped(self) -> "_Reader":
        """A reader of a narrower scope (one link) with errors of its own, on the same bound caller
        (a collection makes about 300 of them)."""
        return _Reader(self.host, True, self._nvml)

    def ahead(self, groups: list[list[tuple[str, tuple]]], **how: Any) -> None:
        """Tell a live host the calls about to be made, in the order they will be made, so it makes
        them in one hand-off (:meth:`ccdiag.host.nvmlcall.NvmlFacade.prefetch`; a replay has no
        need). Only calls made unconditionally are told: what is read, and every answer, stays
        exactly what the calls one by one give."""
        prefetch = getattr(self.host, "nvml_prefetch", None)
        if prefetch is not None:
            prefetch(groups, **how)

    def raw(self, fn: str, *args: Any) -> tuple[Any, NvmlCallError | None]:
        try:
            return self._nvml(fn, *args), None
        except NvmlCallError as exc:
            return _MISSING, exc

    def note(self, fn: str, args: tuple, exc: NvmlCallError) -> None:
        """File an error by class: quiet for not-applicable, fatal for a failed GPU."""
        cls = exc.error_class
        if cls in NOT_APPLICABLE_CLASSES:
            return
        if self.stop_on_gpu_failure and cls in GPU_FAILED_CLASSES:
            raise _GpuFailed(exc)
        self.errors.append(ReadError(call_name(fn, args), cls, exc.message))

    def get(self, fn: str, *args: Any, parse: Callable[[Any], Any] | None = None) -> Any:
        # raw() and parse() written out: this is the probe's hot path
        try:
            value = self._nvml(fn, *args)
        except NvmlCallError as exc:
            self.note(fn, args, exc)
            return None
        if parse is None:
            return value
        try:
            return parse(value)
        except _PARSE_ERRORS as exc:
            self.errors.append(ReadError(call_name(fn, args), "parse", f"unexpected value: {exc}"))
            return None

    def parse(self, fn: str, args: tuple, value: Any, parse: Callable[[Any], Any] | None) -> Any:
        if parse is None:
            return value
        try:
            return parse(value)
        except _PARSE_ERRORS as exc:
            self.errors.append(ReadError(call_name(fn, args), "parse", f"unexpected value: {exc}"))
            return None


def _remote_bdf(info: Any) -> str | None:
    """The far end's address, None for NVML's placeholders (all zero, ``FFFFFFFF:FF:FF.0``)."""
    if isinstance(info, dict):
        ids = [v for v in (info.get("busId"), info.get("busIdLegacy")) if isinstance(v, str)]
        if not any(v.strip("0:.") for v in ids):
            return None  # an all-zero structure: no far end
    bdf = parse_pci_bus_id(info)
    return None if is_placeholder_bdf(bdf) else bdf


#: what :func:`_read_link` asks of link k, in its order (after the link's state)
def _link_calls(i: int, k: int) -> list[tuple[str, tuple]]:
    return [("nvmlDeviceGetNvLinkVersion", (i, k)), ("nvmlDeviceGetNvLinkRemotePciInfo", (i, k)),
            ("nvmlDeviceGetNvLinkRemoteDeviceType", (i, k))] + [
        ("nvmlDeviceGetNvLinkErrorCounter", (i, k, c)) for c in (NVLINK_ERROR_DL_CRC_FLIT, NVLINK_ERROR_DL_CRC_DATA,
                                                                  NVLINK_ERROR_DL_REPLAY, NVLINK_ERROR_DL_RECOVERY)]


def _read_link(r: _Reader, i: int, k: int, active: bool | None) -> NvLink:
    lr = r.scoped()
    raw_version = lr.get("nvmlDeviceGetNvLinkVersion", i, k, parse=_int)
    # an inactive link has no far end: what NVML answers about it is a state, not a read error
    far = lr if active is not False else r.scoped()
    remote = far.get("nvmlDeviceGetNvLinkRemotePciInfo", i, k, parse=_remote_bdf)
    rtype = far.get("nvmlDeviceGetNvLinkRemoteDeviceType", i, k, parse=nvlink_device_type)
    if active is False and far.errors:
        remote, rtype = None, None
    counters = {}
    for name, counter in (("crc_flit_errors", NVLINK_ERROR_DL_CRC_FLIT),
                          ("crc_data_errors", NVLINK_ERROR_DL_CRC_DATA),
                          ("replay_errors", NVLINK_ERROR_DL_REPLAY),
                          ("recovery_errors", NVLINK_ERROR_DL_RECOVERY)):
        counters[name] = lr.get("nvmlDeviceGetNvLinkErrorCounter", i, k, counter, parse=_int)
    return NvLink(k, active, nvlink_version_major(raw_version) if raw_version is not None else None,
                  remote, rtype, errors=tuple(lr.errors), version_raw=raw_version, **counters)


def _read_nvlinks(r: _Reader, i: int, links: list[NvLink]) -> None:
    """Walk links 0.. until NVML says there is no such link, appending to ``links`` (so the
    links read before a GPU failure are kept; the failure propagates)."""
    for k in range(NVLINK_MAX_LINKS):
        value, exc = r.raw("nvmlDeviceGetNvLinkState", i, k)
        if exc is not None:
            if exc.error_class in NOT_APPLICABLE_CLASSES or exc.error_class == INVALID_ARGUMENT:
                break  # link 0: the GPU has no NVLink; link k: it has k links
            if exc.error_class in GPU_FAILED_CLASSES:
                raise _GpuFailed(exc)
            # the state cannot be known, nor how many links follow: keep this one, stop walking
            links.append(NvLink(k, None, errors=(ReadError(call_name("nvmlDeviceGetNvLinkState", (i, k)),
                                                           exc.error_class, exc.message),)))
            break
        lr = r.scoped()
        active = lr.parse("nvmlDeviceGetNvLinkState", (i, k), value, lambda v: bool(_int(v)))
        link = _read_link(r, i, k, active)
        if lr.errors:
            link = dataclasses.replace(link, errors=tuple(lr.errors) + link.errors)
        links.append(link)


def _throughput_request(links: list[NvLink]) -> list[list[int]]:
    return [[fid, link.link] for link in links for _attr, fid in NVLINK_THROUGHPUT_FIELDS]


def _read_nvlink_throughput(r: _Reader, i: int, links: list[NvLink]) -> None:
    """One field-values call for every link's TX/RX data counters, filled into ``links`` in place.

    The call as a whole failing is filed on the GPU (a lost GPU stops the GPU, as for any call);
    each field carries its own nvmlReturn, and one link's counter failing is filed on that link
    while the other links keep theirs."""
    if not links:
        return
    request = _throughput_request(links)
    # told ahead with the next GPU's first calls (each its own group: one failing ends only itself)
    r.ahead([[("nvmlDeviceGetFieldValues", (i, request))]] + ([r.next_first] if r.next_first else []),
            stop_on_failure=False)
    r.told_next = bool(r.next_first)
    fields = r.get("nvmlDeviceGetFieldValues", i, request, parse=parse_scoped_field_values)
    if fields is None:
        return
    source = call_name("nvmlDeviceGetFieldValues", (i, request))
    for n, link in enumerate(links):
        values: dict[str, int | None] = {}
        errors: list[ReadError] = []
        for attr, fid in NVLINK_THROUGHPUT_FIELDS:
            what = f"link {link.link} {attr[:2]} data counter (field {fid})"
            entry = fields.get((fid, link.link))
            if entry is None:
                errors.append(ReadError(source, "parse", f"{what}: not in NVML's answer"))
                continue
            ret, val = entry
            if ret == 0:
                try:
                    values[attr] = kib_counter_bytes(val)
                except (ParseError, TypeError, ValueError, OverflowError) as exc:
                    errors.append(ReadError(source, "parse", f"{what}: unexpected value: {exc}"))
            elif ret not in FIELD_NOT_APPLICABLE:
                errors.append(ReadError(source, "field_error", f"{what}: {nvml_return_name(ret)}"))
        if values or errors:
            # built afresh, not dataclasses.replace: about 140 links a collection, and replace
            # costs several times the constructor
            links[n] = NvLink(**{**vars(link), "tx_bytes": values.get("tx_bytes", link.tx_bytes),
                                 "rx_bytes": values.get("rx_bytes", link.rx_bytes),
                                 "errors": link.errors + tuple(errors)})


def _mig_remapped_rows(r: "_Reader", i: int) -> tuple[tuple[int, int, bool, bool] | None, tuple[int, ...]]:
    """Remapped rows of a GPU in MIG mode, where NVML answers per MIG instance: the counts summed,
    pending or failed if any instance says so, and the slots read."""
    count = r.get("nvmlDeviceGetMaxMigDeviceCount", i, parse=_int)
    totals = [0, 0, False, False]
    slots: list[int] = []
    for k in range(min(count or 0, 16)):
        value, exc = r.raw("nvmlDeviceGetRemappedRows", f"{i}:mig{k}")
        if exc is not None:
            if exc.error_class in NOT_APPLICABLE_CLASSES or exc.error_class == INVALID_ARGUMENT:
                continue  # no instance in this slot
            r.note("nvmlDeviceGetRemappedRows", (f"{i}:mig{k}",), exc)
            continue
        rows = r.parse("nvmlDeviceGetRemappedRows", (f"{i}:mig{k}",), value, parse_remapped_rows)
        if rows is None:
            continue
        slots.append(k)
        totals = [totals[0] + rows[0], totals[1] + rows[1], totals[2] or rows[2], totals[3] or rows[3]]
    return (tuple(totals) if slots else None), tuple(slots)  # type: ignore[return-value]


# What is told ahead (_Reader.ahead) runs from one call whose answer decides what is asked next
# to the next such call; each list below is one such run, in the order the parts ask.


# The lists are the same for a GPU index every collection (a daemon collects every cycle): made
# once. Nothing changes them (callers join them into new lists).


@functools.lru_cache(maxsize=256)
def _memory_temperature_to_links(i: int) -> list[list[tuple[str, tuple]]]:
    """_read_memory_temperature's field, _read_recovery_action's, then the NVLink walk
    (_read_nvlinks), each link's state the gate of its group: the walk ends at the first state NVML
    does not answer."""
    return [[("nvmlDeviceGetFieldValues", (i, [FI_DEV_MEMORY_TEMP])),
             ("nvmlDeviceGetFieldValues", (i, [FI_DEV_GET_GPU_RECOVERY_ACTION]))],
            *[[("nvmlDeviceGetNvLinkState", (i, k)), *_link_calls(i, k)] for k in range(NVLINK_MAX_LINKS)]]


@functools.lru_cache(maxsize=256)
def _identity_to_retired_pages(i: int) -> list[tuple[str, tuple]]:
    """_read_identity's calls, then _read_ecc's up to the first retired-pages call."""
    return [(fn, (i,)) for fn in ("nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetSerial",
                                  "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMemoryInfo",
                                  "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetVbiosVersion",
                                  "nvmlDeviceGetEccMode", "nvmlDeviceGetSramEccErrorStatus")] + [
        ("nvmlDeviceGetTotalEccErrors", (i, e, c)) for e, c in _ECC_COUNTERS] + [
        ("nvmlDeviceGetRetiredPages", (i, PAGE_RETIREMENT_MULTIPLE_SBE))]


#: functions whose *not applicable* answer has the probe ask an older form of the call next: a batch
#: told past one ends there (NvmlFacade.prefetch ``ends``)
_OLDER_FORMS = frozenset({"nvmlDeviceGetCurrentClocksEventReasons"})


@functools.lru_cache(maxsize=256)
def _temperature_to_fabric(i: int) -> list[tuple[str, tuple]]:
    """After the clocks-event reasons: the temperatures, power, clocks and PCIe of
    _read_power_pcie, then _read_fabric's first call."""
    return [("nvmlDeviceGetTemperature", (i, TEMPERATURE_GPU))] + [
        ("nvmlDeviceGetTemperatureThreshold", (i, kind)) for _f, kind in _THRESHOLDS] + [
        ("nvmlDeviceGetPowerUsage", (i,)), ("nvmlDeviceGetEnforcedPowerLimit", (i,)),
        ("nvmlDeviceGetMaxClockInfo", (i, CLOCK_SM)), ("nvmlDeviceGetApplicationsClock", (i, CLOCK_SM))] + [
        (fn, (i,)) for fn in ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
                              "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
                              "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPcieReplayCounter",
                              "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGpuFabricInfoV")]


def _read_identity(r: _Reader, i: int, f: dict, told: bool = False) -> None:
    if not told:  # else the GPU before told them, with its last call
        r.ahead([_identity_to_retired_pages(i)])
    f["uuid"] = r.get("nvmlDeviceGetUUID", i, parse=_text)
    f["name"] = r.get("nvmlDeviceGetName", i, parse=_text)
    f["serial"] = r.get("nvmlDeviceGetSerial", i, parse=_text)
    f["bus_id"] = r.get("nvmlDeviceGetPciInfo_v3", i, parse=parse_pci_bus_id)
    numa = r.get("nvmlDeviceGetNumaNodeId", i, parse=_int)
    f["numa_node"] = numa if numa is not None and numa >= 0 else None
    mem = r.get("nvmlDeviceGetMemoryInfo", i, parse=lambda v: (_int(v["total"]), _int(v["used"])))
    if mem is not None:
        f["memory_total_bytes"], f["memory_used_bytes"] = mem
    pm = r.get("nvmlDeviceGetPersistenceMode", i, parse=_int)
    f["persistence_mode"] = bool(pm) if pm is not None else None
    mig = r.get("nvmlDeviceGetMigMode", i, parse=parse_bool_pair)
    if mig is not None:
        f["mig_mode_current"], f["mig_mode_pending"] = mig
    value, exc = r.raw("nvmlDeviceGetVbiosVersion", i)
    if exc is None:
        f["vbios_version"] = r.parse("nvmlDeviceGetVbiosVersion", (i,), value, _text)
    elif exc.error_class != NOT_RECORDED:  # absent from snapshots recorded before it was read
        r.note("nvmlDeviceGetVbiosVersion", (i,), exc)


#: (error type, counter type) of the four ECC totals, in the order they are read
_ECC_COUNTERS = ((MEMORY_ERROR_CORRECTED, VOLATILE_ECC), (MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC),
                 (MEMORY_ERROR_CORRECTED, AGGREGATE_ECC), (MEMORY_ERROR_UNCORRECTED, AGGREGATE_ECC))


def parse_sram_status(v: Any) -> tuple[bool, int, int]:
    """(threshold exceeded, volatile uncorrectable, aggregate uncorrectable) from an
    nvmlEccSramErrorStatus_v1_t as JSON."""
    if not isinstance(v, dict) or "bThresholdExceeded" not in v:
        raise ParseError(f"expected an SRAM ECC error status structure, got {v!r}")
    return (bool(_int(v["bThresholdExceeded"])),
            _int(v.get("volatileUncParity", 0)) + _int(v.get("volatileUncSecDed", 0)),
            _int(v.get("aggregateUncParity", 0)) + _int(v.get("aggregateUncSecDed", 0)))


def _read_ecc(r: _Reader, i: int, f: dict) -> None:
    ecc = r.get("nvmlDeviceGetEccMode", i, parse=parse_bool_pair)
    if ecc is not None:
        f["ecc_mode_current"], f["ecc_mode_pending"] = ecc
    sram = r.get("nvmlDeviceGetSramEccErrorStatus", i, parse=parse_sram_status)
    if sram is not None:
        f["sram_threshold_exceeded"], f["sram_uncorrected_volatile"], f["sram_uncorrected_aggregate"] = sram
    for field, etype, ctype in (("ecc_volatile_corrected", MEMORY_ERROR_CORRECTED, VOLATILE_ECC),
                                ("ecc_volatile_uncorrected", MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC),
                                ("ecc_aggregate_corrected", MEMORY_ERROR_CORRECTED, AGGREGATE_ECC),
                                ("ecc_aggregate_uncorrected", MEMORY_ERROR_UNCORRECTED, AGGREGATE_ECC)):
        f[field] = r.get("nvmlDeviceGetTotalEccErrors", i, etype, ctype, parse=_int)
    # page retirement is pre-Ampere; Ampere and later remap rows instead and say not supported
    value, exc = r.raw("nvmlDeviceGetRetiredPages", i, PAGE_RETIREMENT_MULTIPLE_SBE)
    if exc is not None:
        r.note("nvmlDeviceGetRetiredPages", (i, PAGE_RETIREMENT_MULTIPLE_SBE), exc)  # a lost GPU ends here
    # told ahead: the rest of the retired pages (only when that answered), the remapped rows, and
    # unless MIG instances may be read between, the calls up to the fabric registration
    # (_read_clocks_and_thermal ... _read_fabric), the batch ending where an older form of the
    # clocks-event reasons is asked instead (_OLDER_FORMS)
    rest = ([("nvmlDeviceGetRetiredPages", (i, PAGE_RETIREMENT_DBE)),
             ("nvmlDeviceGetRetiredPagesPendingStatus", (i,))] if exc is None else []) + [
        ("nvmlDeviceGetRemappedRows", (i,))]
    if f.get("mig_mode_current"):
        r.ahead([rest])
    else:
        r.ahead([rest + [("nvmlDeviceGetCurrentClocksEventReasons", (i,))] + _temperature_to_fabric(i)],
                ends=_OLDER_FORMS)
        r.told_to_fabric = True
    if exc is None:
        f["retired_pages_sbe"] = r.parse("nvmlDeviceGetRetiredPages", (i, 0), value, lambda v: len(list(v)))
        f["retired_pages_dbe"] = r.get("nvmlDeviceGetRetiredPages", i, PAGE_RETIREMENT_DBE,
                                       parse=lambda v: len(list(v)))
        pend = r.get("nvmlDeviceGetRetiredPagesPendingStatus", i, parse=_int)
        f["retired_pages_pending"] = bool(pend) if pend is not None else None
    rows = r.get("nvmlDeviceGetRemappedRows", i, parse=parse_remapped_rows)
    if rows is None and f.get("mig_mode_current"):
        rows, slots = _mig_remapped_rows(r, i)
        if slots:
            f["remapped_rows_mig"] = slots
    if rows is not None:
        (f["remapped_rows_correctable"], f["remapped_rows_uncorrectable"],
         f["remapped_rows_pending"], f["remapped_rows_failure"]) = rows


_THRESHOLDS = (("temp_slowdown_c", TEMP_THRESHOLD_SLOWDOWN), ("temp_shutdown_c", TEMP_THRESHOLD_SHUTDOWN),
               ("temp_gpu_max_c", TEMP_THRESHOLD_GPU_MAX), ("temp_mem_max_c", TEMP_THRESHOLD_MEM_MAX))


def _read_clocks_and_thermal(r: _Reader, i: int, f: dict) -> None:
    value, exc = r.raw("nvmlDeviceGetCurrentClocksEventReasons", i)
    if exc is not None and exc.error_class in NOT_APPLICABLE_CLASSES:
        r.told_to_fabric = False  # a batch told with it ended at it (_OLDER_FORMS)
        mask = r.get("nvmlDeviceGetCurrentClocksThrottleReasons", i, parse=_int)
    elif exc is not None:
        r.note("nvmlDeviceGetCurrentClocksEventReasons", (i,), exc)
        mask = None
    else:
        mask = r.parse("nvmlDeviceGetCurrentClocksEventReasons", (i,), value, _int)
    if mask is not None:
        mask &= CLOCK_EVENT_MASK_64  # an unsigned long long: -1 is 0xffffffffffffffff
        f["clock_event_reasons"] = mask
        f["clock_event_names"] = clock_event_names(mask)
    if not r.told_to_fabric:
        r.ahead([_temperature_to_fabric(i)])
    temp = r.get("nvmlDeviceGetTemperature", i, TEMPERATURE_GPU, parse=_int)
    f["temperature_c"] = float(temp) if temp is not None else None
    for field, kind in _THRESHOLDS:
        value, exc = r.raw("nvmlDeviceGetTemperatureThreshold", i, kind)
        if exc is None:
            limit = r.parse("nvmlDeviceGetTemperatureThreshold", (i, kind), value, _int)
            f[field] = float(limit) if limit else None  # 0: the GPU has no such limit
        elif exc.error_class != NOT_RECORDED:  # a snapshot from before these were read: absent
            r.note("nvmlDeviceGetTemperatureThreshold", (i, kind), exc)


def _read_power_pcie(r: _Reader, i: int, f: dict) -> None:
    f["power_w"] = r.get("nvmlDeviceGetPowerUsage", i, parse=milliwatts)
    f["power_limit_w"] = r.get("nvmlDeviceGetEnforcedPowerLimit", i, parse=milliwatts)
    for field, fn in (("clock_sm_max_mhz", "nvmlDeviceGetMaxClockInfo"),
                      ("clock_sm_app_mhz", "nvmlDeviceGetApplicationsClock")):
        value, exc = r.raw(fn, i, CLOCK_SM)
        if exc is None:
            f[field] = r.parse(fn, (i, CLOCK_SM), value, _int) or None  # 0: not reported
        elif exc.error_class != NOT_RECORDED:  # a snapshot from before these were read: absent
            r.note(fn, (i, CLOCK_SM), exc)
    f["pcie_gen_current"] = r.get("nvmlDeviceGetCurrPcieLinkGeneration", i, parse=_int)
    f["pcie_gen_max"] = r.get("nvmlDeviceGetMaxPcieLinkGeneration", i, parse=_int)
    f["pcie_gen_device_max"] = r.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", i, parse=_int)
    f["pcie_width_current"] = r.get("nvmlDeviceGetCurrPcieLinkWidth", i, parse=_int)
    f["pcie_width_max"] = r.get("nvmlDeviceGetMaxPcieLinkWidth", i, parse=_int)
    f["pcie_replay_counter"] = r.get("nvmlDeviceGetPcieReplayCounter", i, parse=_int)
    procs = r.get("nvmlDeviceGetComputeRunningProcesses", i, parse=parse_processes)
    f["compute_processes"] = procs or ()


def _read_fabric(r: _Reader, i: int, f: dict) -> None:
    """Fabric registration (state, status, health mask, clique id, cluster UUID), from the V form
    of the call where the installed NVML has it."""
    value, exc = r.raw("nvmlDeviceGetGpuFabricInfoV", i)
    fabric_fn = "nvmlDeviceGetGpuFabricInfoV"
    if exc is not None and exc.code == 13:  # the installed NVML predates the V form
        fabric_fn = "nvmlDeviceGetGpuFabricInfo"
        value, exc = r.raw(fabric_fn, i)
    if exc is not None:
        r.note(fabric_fn, (i,), exc)
        return
    fabric = r.parse(fabric_fn, (i,), value, parse_fabric_info)
    if fabric is not None:
        f["fabric_state"], f["fabric_status"], f["fabric_health_mask"] = fabric
        ident = r.parse(fabric_fn, (i,), value, parse_fabric_identity)
        if ident is not None:
            f["fabric_clique_id"], f["fabric_cluster_uuid"] = ident


def _read_memory_temperature(r: _Reader, i: int, f: dict) -> None:
    # told ahead: this field, the recovery action's (_read_recovery_action), then the NVLink walk
    # (_read_nvlinks), each link's state gating its group: the walk ends at the first state NVML
    # does not answer
    r.ahead(_memory_temperature_to_links(i), gated=1)
    mem_temp, exc = r.raw("nvmlDeviceGetFieldValues", i, [FI_DEV_MEMORY_TEMP])
    if exc is None:
        mt = r.parse("nvmlDeviceGetFieldValues", (i, [FI_DEV_MEMORY_TEMP]), mem_temp, parse_field_values)
        if mt and FI_DEV_MEMORY_TEMP in mt and mt[FI_DEV_MEMORY_TEMP][0] == 0 and mt[FI_DEV_MEMORY_TEMP][1]:
            f["memory_temperature_c"] = float(mt[FI_DEV_MEMORY_TEMP][1])
    elif exc.error_class != NOT_RECORDED:
        r.note("nvmlDeviceGetFieldValues", (i, [FI_DEV_MEMORY_TEMP]), exc)


def _read_recovery_action(r: _Reader, i: int, f: dict) -> None:
    fields = r.get("nvmlDeviceGetFieldValues", i, [FI_DEV_GET_GPU_RECOVERY_ACTION], parse=parse_field_values)
    if not fields or FI_DEV_GET_GPU_RECOVERY_ACTION not in fields:
        return
    ret, val = fields[FI_DEV_GET_GPU_RECOVERY_ACTION]
    if ret == 0:
        f["recovery_action"] = r.parse("nvmlDeviceGetFieldValues", (i, [FI_DEV_GET_GPU_RECOVERY_ACTION]),
                                       val, recovery_action_name)
    elif ret not in FIELD_NOT_APPLICABLE:
        # not supported / not found / a driver that does not know the field id: absent
        r.errors.append(ReadError(call_name("nvmlDeviceGetFieldValues", (i, [FI_DEV_GET_GPU_RECOVERY_ACTION])),
                                  "field_error", f"recovery action field: {nvml_return_name(ret)}"))


#: the parts of one GPU read in order after its identity; a lost GPU stops the walk where it was lost
_GPU_PARTS = (_read_ecc, _read_clocks_and_thermal, _read_power_pcie, _read_fabric,
              _read_memory_temperature, _read_recovery_action)


def _read_gpu(host: Host, i: int, told: bool = False, last: bool = True) -> tuple[Gpu, bool]:
    """GPU ``i`` read, and whether its last call was told ahead with GPU ``i + 1``'s first ones
    (``told``: GPU ``i - 1`` told this one's; ``last``: no GPU follows)."""
    r = _Reader(host)
    if not last:
        r.next_first = _identity_to_retired_pages(i + 1)
    f: dict[str, Any] = {"index": i}
    links: list[NvLink] = []
    try:
        _read_identity(r, i, f, told)
        for part in _GPU_PARTS:
            part(r, i, f)
        _read_nvlinks(r, i, links)
        _read_nvlink_throughput(r, i, links)
    except _GpuFailed as failed:
        exc = failed.exc
        f["failed"] = exc.error_class
        r.errors.append(ReadError(call_name(exc.fn, exc.args_), exc.error_class, exc.message))
    f["nvlinks"] = tuple(links)
    f["errors"] = tuple(r.errors)
    return Gpu(**f), r.told_next


def _read_p2p(host: Host, indices: list[int], errors: list[ReadError]) -> list[P2PStatus]:
    out = []
    r = _Reader(host, stop_on_gpu_failure=False)
    # every pair told ahead; a pair that stops answering ends its own caps only, as below
    r.ahead([[("nvmlDeviceGetP2PStatus", (a, b, cap)) for _n, cap in P2P_CAPS] for a in indices for b in indices
             if b != a], stop_on_failure=False)
    for a in indices:
        for b in indices:
            if a == b:
                continue
            caps: dict[str, str | None] = {}
            for name, cap in P2P_CAPS:
                value, exc = r.raw("nvmlDeviceGetP2PStatus", a, b, cap)
                if exc is not None:
                    r.note("nvmlDeviceGetP2PStatus", (a, b, cap), exc)
                    caps[name] = None
                    if exc.error_class in GPU_FAILED_CLASSES:
                        break  # this pair stopped answering; don't spend a deadline per cap
                    continue
                caps[name] = r.parse("nvmlDeviceGetP2PStatus", (a, b, cap), value, p2p_status_name)
            out.append(P2PStatus(a, b, **caps))
    errors.extend(r.errors)
    return out


def _unavailable(exc: NvmlCallError) -> None:
    if exc.error_class == DRIVER_MISSING:
        raise ProbeUnavailable(f"NVIDIA driver not loaded / NVML library not found: {exc.message}") from None


@probe(order=30, what="GPU state from NVML", counters=True)
def collect(host: Host) -> NvmlObservation:
    """Read everything listed in the module docstring. Raises ProbeUnavailable without a driver."""
    sysr = _Reader(host, stop_on_gpu_failure=False)
    sysr.ahead([[("nvmlSystemGetDriverVersion", ()), ("nvmlSystemGetCudaDriverVersion_v2", ()),
                 ("nvmlSystemGetNVMLVersion", ()), ("nvmlDeviceGetCount", ())]], stop_on_failure=False)
    value, exc = sysr.raw("nvmlSystemGetDriverVersion")
    driver = None
    if exc is not None:
        _unavailable(exc)
        first_exc = exc
        sysr.note("nvmlSystemGetDriverVersion", (), exc)
    else:
        first_exc = None
        driver = sysr.parse("nvmlSystemGetDriverVersion", (), value, _text)
    cuda = sysr.get("nvmlSystemGetCudaDriverVersion_v2", parse=parse_cuda_version)
    nvml_version = sysr.get("nvmlSystemGetNVMLVersion", parse=_text)
    value, exc = sysr.raw("nvmlDeviceGetCount")
    count = None
    if exc is not None:
        _unavailable(exc)
        if first_exc is not None and first_exc.error_class == NOT_RECORDED and exc.error_class == NOT_RECORDED:
            raise ProbeUnavailable("NVML was not recorded in this snapshot")
        sysr.note("nvmlDeviceGetCount", (), exc)
    else:
        count = sysr.parse("nvmlDeviceGetCount", (), value, _int)
    gpus: list[Gpu] = []
    told = False
    for i in range(count or 0):
        gpu, told = _read_gpu(host, i, told, last=i + 1 == count)
        gpus.append(gpu)
    errors = list(sysr.errors)
    p2p = _read_p2p(host, [g.index for g in gpus if g.failed is None], errors)
    sysr.ahead([])  # nothing told ahead outlives this collection (a later one reads afresh)
    return NvmlObservation(driver, cuda, nvml_version, count, tuple(gpus), tuple(p2p), tuple(errors))
