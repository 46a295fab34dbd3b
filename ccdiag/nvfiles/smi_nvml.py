"""NVML answers derived from what ``nvidia-smi -q`` printed, as a snapshot records NVML calls.

``nvidia-smi -q`` is NVML read out and printed: each value it shows is the answer of one NVML call
(``ECC Errors/Volatile/DRAM Uncorrectable`` is part of ``nvmlDeviceGetTotalEccErrors(i, 1, 0)``).
Turned back into call records (``{"call": [fn, *args], "ok": value}`` or ``{"call": ..., "error":
class}``), a bug report or a pasted output answers the NVML probe through the replaying door exactly
as a recorded node would, and every check reads it unchanged. The calls and their arguments are
those the NVML probe makes (its module docstring lists them); GPUs are numbered in the order
nvidia-smi prints them, which is NVML's index order.

What is derived, and how:

* printed ``N/A``/``Not Supported`` -> error class ``not_supported``; ``Unknown Error``/``GPU is
  lost``/``[GPU requires reset]`` -> that error class (the probe then marks the GPU failed);
* ECC totals are the sums NVML returns: SRAM + DRAM (SRAM uncorrectable = Parity + SEC-DED where
  the driver splits it), or the ``Single Bit``/``Double Bit`` ``Total`` of older drivers;
* retired pages: nvidia-smi prints their count, NVML a list of addresses: the answer is a list of
  that many zero addresses (the probe counts them);
* clocks event reasons: the mask of the reasons printed ``Active`` (nvml.h bit values);
* fabric: state and status names back to nvmlGpuFabricState_t / nvmlReturn_t values, the health
  fields to the nvml.h health-mask encoding (TRUE 1, FALSE 2, not supported 0);
* recovery action: ``GPU Recovery Action`` (R570+); before it, ``Reset Required: Yes`` reads as
  reset and ``Drain and Reset Recommended: Yes`` as drain-and-reset;
* a GPU nvidia-smi could not open (``Unable to determine the device handle for GPU0000:3B:00.0:
  GPU is lost``) is placed in bus order and answers every call with that error;
* NVLink state and error counters from ``nvidia-smi nvlink --status`` / ``--errorcounters`` when
  the report has them (CRC Errors read as the flit CRC counter).

Anything nvidia-smi does not print (P2P status, NUMA id, NVLink remote ends, the NVML version) gets
no record: the replaying door answers it ``not_recorded`` and the probe reports it unknown.
"""

from __future__ import annotations

import re
from typing import Any

from ccdiag.nvfiles import smifields as sf
from ccdiag.nvfiles.nvlinktext import GpuLinks
from ccdiag.nvfiles.smiq import SmiGpu, SmiLog, normalize_smi_bus

#: nvmlGpuFabricState_t by the word nvidia-smi prints
FABRIC_STATE = {"not supported": 0, "not started": 1, "in progress": 2, "completed": 3}
#: nvmlReturn_t by the words nvidia-smi prints for a fabric status
NVML_RETURN_WORDS = {"success": 0, "uninitialized": 1, "invalid argument": 2, "not supported": 3,
                     "insufficient permissions": 4, "no permission": 4, "not found": 6, "insufficient size": 7,
                     "insufficient power": 8, "timeout": 10, "irq issue": 11, "corrupted inforom": 14,
                     "gpu is lost": 15, "reset required": 16, "in use": 19, "memory": 20, "no data": 21,
                     "insufficient resources": 23, "not ready": 27, "unknown error": 999}
#: nvmlGpuRecoveryAction_t by the words nvidia-smi prints
RECOVERY_WORDS = {"none": 0, "reset": 1, "gpu reset": 1, "reboot": 2, "node reboot": 2, "drain p2p": 3,
                  "drain and reset": 4}
#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_* shifts of the fields nvidia-smi prints
HEALTH_SHIFTS = {"fabric_health_bandwidth": 0, "fabric_health_route_recovery": 2,
                 "fabric_health_route_unhealthy": 4, "fabric_health_access_timeout": 6}
_HEALTH_TRUE = {"true", "yes", "degraded", "in progress"}
_HEALTH_FALSE = {"false", "no", "full"}
FI_DEV_MEMORY_TEMP = 82
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
CLOCK_SM = 1
MEMORY_ERROR_CORRECTED, MEMORY_ERROR_UNCORRECTED = 0, 1
VOLATILE_ECC, AGGREGATE_ECC = 0, 1
NVLINK_ERROR_COUNTERS = (("replay", 0), ("recovery", 1), ("crc", 2))
#: nvmlTemperatureThresholds_t by key
THRESHOLDS = (("temperature_shutdown", 0), ("temperature_slowdown", 1), ("temperature_memory_max", 2),
              ("temperature_gpu_max", 3))
_CODES = {"not_supported": 3, "no_permission": 4, "gpu_lost": 15, "reset_required": 16, "unknown_error": 999}


class _Calls:
    def __init__(self, source: str) -> None:
        self.records: list[dict] = []
        self.source = source

    def ok(self, fn: str, *args: Any, value: Any) -> None:
        self.records.append({"epoch": 0, "call": [fn, *args], "ok": value})

    def error(self, fn: str, *args: Any, error_class: str, said: str | None = None) -> None:
        message = f"{self.source} printed {said!r}" if said else f"{self.source}: {error_class}"
        self.records.append({"epoch": 0, "call": [fn, *args], "error": error_class,
                             "code": _CODES.get(error_class), "message": message})

    def value(self, fn: str, args: tuple, v: sf.Value, convert: Any) -> None:
        """Record ``convert(v)`` for a number/text, the error class for N/A or an error; nothing
        when the output does not print it (the door answers not recorded)."""
        if v.kind == "absent":
            return
        if v.kind == "not_applicable":
            self.error(fn, *args, error_class="not_supported", said=v.text)
            return
        if v.kind == "error":
            self.error(fn, *args, error_class=v.error_class or "unknown_error", said=v.text)
            return
        got = convert(v)
        if got is not None:
            self.ok(fn, *args, value=got)


def _int(v: sf.Value) -> int | None:
    return v.integer if v.kind == "number" else None


def _milliwatts(v: sf.Value) -> int | None:
    return int(round(v.number * 1000)) if v.kind == "number" and v.number is not None else None


def _bool01(v: sf.Value) -> int | None:
    f = sf.flag(v)
    return None if f is None else int(f)


def cuda_version_int(text: str | None) -> int | None:
    """``12.2`` -> 12020 (NVML's CUDA driver version integer)."""
    try:
        major, minor = (text or "").strip().split(".")[:2]
        return int(major) * 1000 + int(minor) * 10
    except ValueError:
        return None


def _sum(values: list[sf.Value]) -> sf.Value:
    """The sum of counters that are all printed as numbers; else the first not-number among them
    (N/A or an error), or absent when none is printed."""
    printed = [v for v in values if v.kind != "absent"]
    if not printed:
        return sf.Value("absent")
    for v in printed:
        if v.kind != "number":
            return v
    return sf.Value("number", sum(v.number or 0 for v in printed), None, path="+".join(v.path or "" for v in printed))


def _ecc_total(gpu: SmiGpu, scope: str, uncorrected: bool) -> sf.Value:
    g = lambda k: sf.value(gpu, f"ecc_{scope}_{k}")  # noqa: E731
    if uncorrected:
        sram = g("sram_uncorrectable")
        if sram.kind == "absent":
            sram = _sum([g("sram_uncorrectable_parity"), g("sram_uncorrectable_secded")])
        split = _sum([sram, g("dram_uncorrectable")])
        return split if split.kind != "absent" else g("double_bit_total")
    split = _sum([g("sram_correctable"), g("dram_correctable")])
    return split if split.kind != "absent" else g("single_bit_total")


def _clock_mask(gpu: SmiGpu) -> sf.Value:
    mask, printed, last = 0, False, sf.Value("absent")
    for f in sf.fields():
        if f.bit is None:
            continue
        v = sf.value(gpu, f.key)
        if v.kind == "absent":
            continue
        last = v
        flag = sf.flag(v)
        if flag is None:
            continue
        printed = True
        if flag:
            mask |= f.bit
    if printed:
        return sf.Value("number", float(mask), path="clocks event reasons")
    return last  # N/A throughout (or absent)


def _fabric(gpu: SmiGpu) -> tuple[sf.Value, dict | None]:
    state = sf.value(gpu, "fabric_state")
    if state.kind != "text":
        return state, None
    code = FABRIC_STATE.get((state.text or "").lower())
    if code is None:
        return sf.Value("absent"), None
    info: dict[str, Any] = {"state": code}
    status = sf.value(gpu, "fabric_status")
    if status.kind == "text" and (status.text or "").lower() in NVML_RETURN_WORDS:
        info["status"] = NVML_RETURN_WORDS[(status.text or "").lower()]
    elif code == 3:
        info["status"] = 0 if status.kind in ("absent", "not_applicable") else 999
    mask, any_health = 0, False
    for key, shift in HEALTH_SHIFTS.items():
        v = sf.value(gpu, key)
        word = (v.text or "").lower() if v.kind == "text" else ""
        if word in _HEALTH_TRUE:
            mask |= 1 << shift
            any_health = True
        elif word in _HEALTH_FALSE:
            mask |= 2 << shift
            any_health = True
    if any_health:
        info["healthMask"] = mask
    clique = sf.value(gpu, "fabric_clique_id")
    if clique.kind == "number":
        info["cliqueId"] = clique.integer
    cluster = sf.value(gpu, "fabric_cluster_uuid")
    if cluster.kind == "text" and cluster.text and cluster.text.strip("0-"):
        info["clusterUuid"] = cluster.text.lower()
    return state, info


def _recovery(gpu: SmiGpu) -> int | None:
    v = sf.value(gpu, "recovery_action")
    if v.kind == "text":
        return RECOVERY_WORDS.get((v.text or "").lower())
    if sf.flag(sf.value(gpu, "drain_and_reset")):
        return RECOVERY_WORDS["drain and reset"]
    if sf.flag(sf.value(gpu, "reset_required")):
        return RECOVERY_WORDS["reset"]
    if sf.flag(sf.value(gpu, "reset_required")) is False:
        return RECOVERY_WORDS["none"]
    return None


def _field_value(field_id: int, value: int) -> list[dict]:
    return [{"fieldId": field_id, "scopeId": 0, "nvmlReturn": 0, "valueType": 1, "value": {"uiVal": int(value)}}]


def _processes(gpu: SmiGpu) -> list[dict] | None:
    printed = gpu.fields.get("Processes")
    if not gpu.processes:
        return [] if printed is not None and printed.strip().lower() == "none" else None
    out = []
    for p in gpu.processes:
        if "C" not in (p.get("Type") or "C"):
            continue  # graphics-only processes are not compute processes
        try:
            pid = int(p.get("Process ID") or "")
        except ValueError:
            continue
        used = sf.classify(p.get("Used GPU Memory"))
        out.append({"pid": pid, "usedGpuMemory": used.bytes() if used.kind == "number" else None})
    return out


def _identity(c: _Calls, i: int, gpu: SmiGpu) -> None:
    c.value("nvmlDeviceGetUUID", (i,), sf.value(gpu, "uuid"), lambda v: v.text)
    c.value("nvmlDeviceGetName", (i,), sf.value(gpu, "product_name"), lambda v: v.text)
    c.value("nvmlDeviceGetSerial", (i,), sf.value(gpu, "serial"), lambda v: v.text or (str(v.integer)))
    bus = sf.value(gpu, "bus_id")
    bus_text = bus.text if bus.kind == "text" else gpu.bus_id
    if bus_text:
        info: dict[str, Any] = {"busId": bus_text, "busIdLegacy": bus_text}
        dev = sf.value(gpu, "pci_device_id")
        if dev.kind == "text" and re.fullmatch(r"0[xX][0-9a-fA-F]{1,8}", dev.text or ""):
            info["pciDeviceId"] = int(dev.text or "0", 16)
        c.ok("nvmlDeviceGetPciInfo_v3", i, value=info)
    total, used = sf.value(gpu, "fb_total"), sf.value(gpu, "fb_used")
    if total.kind == "number" and used.kind == "number":
        c.ok("nvmlDeviceGetMemoryInfo", i, value={"total": total.bytes(), "used": used.bytes(),
                                                   "free": (total.bytes() or 0) - (used.bytes() or 0)})
    c.value("nvmlDeviceGetPersistenceMode", (i,), sf.value(gpu, "persistence_mode"), _bool01)
    cur, pend = sf.value(gpu, "mig_current"), sf.value(gpu, "mig_pending")
    if cur.kind == "text" and sf.flag(cur) is not None:
        c.ok("nvmlDeviceGetMigMode", i, value=[int(bool(sf.flag(cur))), int(bool(sf.flag(pend)))])
    else:
        c.value("nvmlDeviceGetMigMode", (i,), cur, lambda v: None)


def _ecc(c: _Calls, i: int, gpu: SmiGpu) -> None:
    cur, pend = sf.value(gpu, "ecc_current"), sf.value(gpu, "ecc_pending")
    if cur.kind == "text" and sf.flag(cur) is not None:
        c.ok("nvmlDeviceGetEccMode", i, value=[int(bool(sf.flag(cur))), int(bool(sf.flag(pend)))])
    else:
        c.value("nvmlDeviceGetEccMode", (i,), cur, lambda v: None)
    for scope, ctype in (("volatile", VOLATILE_ECC), ("aggregate", AGGREGATE_ECC)):
        for uncorrected, etype in ((False, MEMORY_ERROR_CORRECTED), (True, MEMORY_ERROR_UNCORRECTED)):
            c.value("nvmlDeviceGetTotalEccErrors", (i, etype, ctype), _ecc_total(gpu, scope, uncorrected), _int)
    _sram_status(c, i, gpu)
    for key, cause in (("retired_pages_sbe", 0), ("retired_pages_dbe", 1)):
        c.value("nvmlDeviceGetRetiredPages", (i, cause), sf.value(gpu, key),
                lambda v: [0] * max(0, min(v.integer or 0, 1 << 16)) if v.kind == "number" else None)
    c.value("nvmlDeviceGetRetiredPagesPendingStatus", (i,), sf.value(gpu, "retired_pages_pending"), _bool01)
    whole = sf.value(gpu, "remapped_rows")
    if whole.kind in ("not_applicable", "error"):
        c.value("nvmlDeviceGetRemappedRows", (i,), whole, lambda v: None)
        return
    parts = [sf.value(gpu, k) for k in ("remapped_rows_correctable", "remapped_rows_uncorrectable",
                                         "remapped_rows_pending", "remapped_rows_failure")]
    bad = next((v for v in parts if v.kind in ("not_applicable", "error")), None)
    if bad is not None:
        c.value("nvmlDeviceGetRemappedRows", (i,), bad, lambda v: None)
    elif parts[0].kind == "number" and parts[1].kind == "number" and sf.flag(parts[2]) is not None:
        c.ok("nvmlDeviceGetRemappedRows", i,
             value=[parts[0].integer, parts[1].integer, int(bool(sf.flag(parts[2]))), int(bool(sf.flag(parts[3])))])


def _sram_status(c: _Calls, i: int, gpu: SmiGpu) -> None:
    """nvmlDeviceGetSramEccErrorStatus from ``SRAM Threshold Exceeded`` and the uncorrectable SRAM
    counts beside it; left unrecorded when the threshold is printed but a count is not a number."""
    exceeded = sf.value(gpu, "ecc_sram_threshold_exceeded")
    if exceeded.kind != "text" or sf.flag(exceeded) is None:
        c.value("nvmlDeviceGetSramEccErrorStatus", (i,), exceeded, lambda v: None)
        return
    counts = {}
    for scope in ("volatile", "aggregate"):
        g = lambda k: sf.value(gpu, f"ecc_{scope}_{k}")  # noqa: E731, B023
        parity, secded, whole = g("sram_uncorrectable_parity"), g("sram_uncorrectable_secded"), g("sram_uncorrectable")
        if parity.kind == "number" and secded.kind == "number":
            counts[scope] = (parity.integer or 0, secded.integer or 0)
        elif whole.kind == "number":
            counts[scope] = (0, whole.integer or 0)
        else:
            return
    c.ok("nvmlDeviceGetSramEccErrorStatus", i, value={
        "volatileUncParity": counts["volatile"][0], "volatileUncSecDed": counts["volatile"][1],
        "aggregateUncParity": counts["aggregate"][0], "aggregateUncSecDed": counts["aggregate"][1],
        "bThresholdExceeded": int(bool(sf.flag(exceeded)))})


def _clocks_thermal_power(c: _Calls, i: int, gpu: SmiGpu) -> None:
    c.value("nvmlDeviceGetCurrentClocksEventReasons", (i,), _clock_mask(gpu), _int)
    c.value("nvmlDeviceGetTemperature", (i, 0), sf.value(gpu, "temperature_gpu"), _int)
    for key, kind in THRESHOLDS:
        c.value("nvmlDeviceGetTemperatureThreshold", (i, kind), sf.value(gpu, key), _int)
    mem = sf.value(gpu, "temperature_memory")
    c.value("nvmlDeviceGetFieldValues", (i, [FI_DEV_MEMORY_TEMP]), mem,
            lambda v: _field_value(FI_DEV_MEMORY_TEMP, v.integer) if v.kind == "number" else None)
    c.value("nvmlDeviceGetPowerUsage", (i,), sf.value(gpu, "power_draw"), _milliwatts)
    c.value("nvmlDeviceGetEnforcedPowerLimit", (i,), sf.value(gpu, "power_limit"), _milliwatts)
    c.value("nvmlDeviceGetMaxClockInfo", (i, CLOCK_SM), sf.value(gpu, "clock_sm_max"), _int)


def _pcie(c: _Calls, i: int, gpu: SmiGpu) -> None:
    for key, fn in (("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                    ("pcie_gen_device_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
                    ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                    ("pcie_replays", "nvmlDeviceGetPcieReplayCounter")):
        c.value(fn, (i,), sf.value(gpu, key), _int)
    procs = _processes(gpu)
    if procs is not None:
        c.ok("nvmlDeviceGetComputeRunningProcesses", i, value=procs)


def _fabric_and_recovery(c: _Calls, i: int, gpu: SmiGpu) -> None:
    state, info = _fabric(gpu)
    if info is not None:
        c.ok("nvmlDeviceGetGpuFabricInfoV", i, value=info)
    else:
        c.value("nvmlDeviceGetGpuFabricInfoV", (i,), state, lambda v: None)
    action = _recovery(gpu)
    if action is not None:
        c.ok("nvmlDeviceGetFieldValues", i, [FI_DEV_GET_GPU_RECOVERY_ACTION],
             value=_field_value(FI_DEV_GET_GPU_RECOVERY_ACTION, action))


def _nvlinks(c: _Calls, i: int, links: GpuLinks | None) -> None:
    if links is None:
        return
    if links.none or not links.active:
        c.error("nvmlDeviceGetNvLinkState", i, 0, error_class="not_supported",
                said="no NVLink (all links inactive)" if links.none else "no NVLink listed")
        return
    n = max(links.active) + 1
    for k in range(n):
        if k not in links.active:
            c.error("nvmlDeviceGetNvLinkState", i, k, error_class="not_supported", said="link not listed")
            return
        c.ok("nvmlDeviceGetNvLinkState", i, k, value=int(links.active[k]))
        counters = links.counters.get(k, {})
        for name, code in NVLINK_ERROR_COUNTERS:
            if name in counters:
                c.ok("nvmlDeviceGetNvLinkErrorCounter", i, k, code, value=counters[name])
    c.error("nvmlDeviceGetNvLinkState", i, n, error_class="not_supported", said=f"{n} links listed")


def _failed_gpu(c: _Calls, i: int, message: str) -> None:
    low = message.lower()
    cls = ("gpu_lost" if "lost" in low else "reset_required" if "reset" in low
           else "no_permission" if "permission" in low else "unknown_error")
    c.error("nvmlDeviceGetUUID", i, error_class=cls, said=message)


def ordered_gpus(log: SmiLog) -> list[tuple[str | None, SmiGpu | None, str | None]]:
    """(bus id, GPU block or None, failure message or None) in NVML index order: the printed blocks
    in their order, with the GPUs nvidia-smi could not open placed by bus id."""
    failed = log.failed_bus_ids()
    printed: list[tuple[str | None, SmiGpu | None, str | None]] = [
        (normalize_smi_bus(g.bus_id) if g.bus_id else None, g, None) for g in log.gpus]
    have = {b for b, _, _ in printed if b}
    extra: list[tuple[str | None, SmiGpu | None, str | None]] = [
        (b, None, msg) for b, msg in failed.items() if b not in have]
    if not extra:
        return printed
    if any(b is None for b, _, _ in printed):
        return printed + extra
    return sorted(printed + extra, key=lambda t: t[0] or "")


def nvml_records(log: SmiLog, links: dict[int, GpuLinks] | None = None,
                 source: str = "nvidia-smi -q") -> list[dict]:
    """The NVML call records ``log`` answers (see the module docstring), nvmlInit first."""
    c = _Calls(source)
    c.records.append({"epoch": 0, "call": ["nvmlInit"], "ok": None})
    no_devices = any("no devices were found" in m.lower() for _, m in log.messages)
    driver_failed = next((m for _, m in log.messages if "failed" in m.lower() and "driver" in m.lower()), None)
    if driver_failed and not log.gpus:
        c.records[0] = {"epoch": 0, "call": ["nvmlInit"], "error": "driver_missing", "code": 9,
                        "message": f"{source} printed {driver_failed!r}"}
        return c.records
    if log.driver_version:
        c.ok("nvmlSystemGetDriverVersion", value=log.driver_version)
    cuda = cuda_version_int(log.cuda_version)
    if cuda is not None:
        c.ok("nvmlSystemGetCudaDriverVersion_v2", value=cuda)
    gpus = ordered_gpus(log)
    if gpus or no_devices or log.banner:
        c.ok("nvmlDeviceGetCount", value=len(gpus))
    for i, (_, gpu, failure) in enumerate(gpus):
        if gpu is None:
            _failed_gpu(c, i, failure or "GPU not printed")
            continue
        _identity(c, i, gpu)
        _ecc(c, i, gpu)
        _clocks_thermal_power(c, i, gpu)
        _pcie(c, i, gpu)
        _fabric_and_recovery(c, i, gpu)
        _nvlinks(c, i, (links or {}).get(i))
    return c.records
