"""The probe's NVML reading of a GPU beside ``nvidia-smi -q``'s, field by field: the independent
reading of the same GPU by NVIDIA's own tool.

Why: the NVML probe has never read a real GPU. On the first node the evidence script records both
readings a few seconds apart and compares them *before* anything is redacted: static fields (name,
serial, UUID, PCI address, memory size, modes, limits, maximum clocks, link capability, error
counters) must be equal; sampled ones (temperature, power, the clocks-event reasons, the link's
current speed) within the tolerances below, since the two reads are not simultaneous. Utilisation
is listed as not read by the probe (it reads none).

Two readers of nvidia-smi's output, pure functions of text, into one dictionary per GPU keyed by
PCI address: :func:`read_xml` for ``nvidia-smi -q -x`` (what the node records; tag names as the
driver-510 and -535 outputs in tests/fixtures/corpus/smi-q-x use them) and :func:`read_text` for
``nvidia-smi -q`` (the field names of the driver-525/535/555 outputs in tests/fixtures/corpus/smi-q).
Lines starting ``#ccdiag-`` (the corpus's source headers) are skipped. Both are linear in the input.

Units: temperatures in degrees C, power in W, clocks in MHz, memory in MiB (nvidia-smi's unit; the
probe's bytes are compared as whole MiB).
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Callable

#: nvidia-smi's words for the clocks-event (throttle) reasons -> the probe's names
#: (ccdiag.probes.nvml.CLOCK_EVENT_BITS)
REASON_WORDS = {
    "idle": "idle", "gpu_idle": "idle", "applications clocks setting": "applications_clocks_setting",
    "applications_clocks_setting": "applications_clocks_setting", "sw power cap": "sw_power_cap",
    "sw_power_cap": "sw_power_cap", "hw slowdown": "hw_slowdown", "hw_slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown", "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown", "hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost", "sync_boost": "sync_boost", "sw thermal slowdown": "sw_thermal_slowdown",
    "sw_thermal_slowdown": "sw_thermal_slowdown", "display clock setting": "display_clocks_setting",
    "display_clocks_setting": "display_clocks_setting",
}

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def _num(text: str | None) -> float | None:
    """"81559 MiB" -> 81559.0, "16x" -> 16.0, "N/A" -> None."""
    m = _NUMBER.match(text or "")
    return float(m.group(1)) if m else None


def _int(text: str | None) -> int | None:
    v = _num(text)
    return int(v) if v is not None else None


def _flag(text: str | None) -> bool | None:
    """Enabled/Disabled, Yes/No, Active/Not Active -> bool; N/A -> None."""
    t = (text or "").strip().lower()
    if t in ("enabled", "yes", "active"):
        return True
    if t in ("disabled", "no", "not active"):
        return False
    return None


def _bdf(text: str | None) -> str | None:
    """"00000000:18:00.0" -> "0000:18:00.0" (the probe's form: four-digit domain, lower case)."""
    m = re.match(r"^\s*([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])\s*$", text or "")
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _text(text: str | None) -> str | None:
    t = (text or "").strip()
    return None if not t or t in ("N/A", "[N/A]", "Unknown Error") else t


def _strip_headers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#ccdiag-"))


# -- nvidia-smi -q -x ------------------------------------------------------------------------------


def read_xml(text: str) -> dict:
    """``{"driver_version", "cuda_version", "gpus": {bdf: fields}}`` from ``nvidia-smi -q -x``;
    raises ValueError when the text is not that document."""
    try:
        root = ET.fromstring(_strip_headers(text).strip())
    except ET.ParseError as exc:
        raise ValueError(f"not an nvidia-smi -q -x document: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not an nvidia-smi -q -x document (root element <{root.tag}>)")
    out: dict = {"driver_version": _text(root.findtext("driver_version")),
                 "cuda_version": _text(root.findtext("cuda_version")), "gpus": {}}
    for g in root.findall("gpu"):
        f = _xml_gpu(g)
        if f.get("bus_id"):
            out["gpus"][f["bus_id"]] = f
    return out


def _x(g: ET.Element, path: str) -> str | None:
    return _text(g.findtext(path))


def _xml_gpu(g: ET.Element) -> dict:
    f: dict[str, Any] = {
        "name": _x(g, "product_name"), "serial": _x(g, "serial"), "uuid": _x(g, "uuid"),
        "bus_id": _bdf(_x(g, "pci/pci_bus_id") or g.get("id")),
        "memory_total_mib": _int(_x(g, "fb_memory_usage/total")),
        "persistence_mode": _flag(_x(g, "persistence_mode")),
        "mig_mode_current": _flag(_x(g, "mig_mode/current_mig")),
        "mig_mode_pending": _flag(_x(g, "mig_mode/pending_mig")),
        "ecc_mode_current": _flag(_x(g, "ecc_mode/current_ecc")),
        "ecc_mode_pending": _flag(_x(g, "ecc_mode/pending_ecc")),
        "temperature_c": _num(_x(g, "temperature/gpu_temp")),
        "temp_shutdown_c": _num(_x(g, "temperature/gpu_temp_max_threshold")),
        "temp_slowdown_c": _num(_x(g, "temperature/gpu_temp_slow_threshold")),
        "temp_gpu_max_c": _num(_x(g, "temperature/gpu_temp_max_gpu_threshold")),
        "memory_temperature_c": _num(_x(g, "temperature/memory_temp")),
        "temp_mem_max_c": _num(_x(g, "temperature/gpu_temp_max_mem_threshold")),
        "clock_sm_max_mhz": _int(_x(g, "max_clocks/sm_clock")),
        "clock_sm_app_mhz": _int(_x(g, "applications_clocks/graphics_clock")),
        "pcie_gen_current": _int(_x(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        "pcie_gen_max": _int(_x(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
        "pcie_gen_device_max": _int(_x(g, "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen")),
        "pcie_width_current": _int(_x(g, "pci/pci_gpu_link_info/link_widths/current_link_width")),
        "pcie_width_max": _int(_x(g, "pci/pci_gpu_link_info/link_widths/max_link_width")),
        "pcie_replay_counter": _int(_x(g, "pci/replay_counter")),
        "remapped_rows_correctable": _int(_x(g, "remapped_rows/remapped_row_corr")),
        "remapped_rows_uncorrectable": _int(_x(g, "remapped_rows/remapped_row_unc")),
        "remapped_rows_pending": _flag(_x(g, "remapped_rows/remapped_row_pending")),
        "remapped_rows_failure": _flag(_x(g, "remapped_rows/remapped_row_failure")),
        "retired_pages_sbe": _int(_x(g, "retired_pages/multiple_single_bit_retirement/retired_count")),
        "retired_pages_dbe": _int(_x(g, "retired_pages/double_bit_retirement/retired_count")),
        "fabric_state": (_x(g, "fabric/state") or "").lower().replace(" ", "_") or None,
        "utilization_gpu_pct": _num(_x(g, "utilization/gpu_util")),
    }
    # the power readings moved: <power_readings> (before 530) or <gpu_power_readings>
    power = g.find("gpu_power_readings")
    if power is None:
        power = g.find("power_readings")
    if power is not None:
        f["power_w"] = _num(_text(power.findtext("power_draw")) or _text(power.findtext("instant_power_draw")))
        f["power_limit_w"] = _num(_text(power.findtext("enforced_power_limit"))
                                  or _text(power.findtext("current_power_limit")))
    reasons = g.find("clocks_event_reasons")
    if reasons is None:
        reasons = g.find("clocks_throttle_reasons")
    if reasons is not None:
        active = []
        for child in reasons:
            word = re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag)
            if _flag(child.text) and word in REASON_WORDS:
                active.append(REASON_WORDS[word])
        f["clock_event_names"] = tuple(sorted(set(active)))
    for scope in ("volatile", "aggregate"):
        f.update(_ecc_sums(scope, [(c.tag, c.text) for c in g.findall(f"ecc_errors/{scope}/*")]))
    return f


def _ecc_sums(scope: str, items: list[tuple[str, str | None]]) -> dict:
    """Corrected and uncorrected ECC totals of one scope from its per-memory counters (SRAM/DRAM,
    parity/SEC-DED on newer drivers); None when every counter is N/A."""
    corr = unc = None
    for key, value in items:
        k = key.lower().replace(" ", "_")
        v = _int(value)
        if v is None or "threshold" in k:
            continue
        if "uncorrectable" in k:
            unc = (unc or 0) + v
        elif "correctable" in k:
            corr = (corr or 0) + v
    return {f"ecc_{scope}_corrected": corr, f"ecc_{scope}_uncorrected": unc}


# -- nvidia-smi -q ---------------------------------------------------------------------------------

_GPU_LINE = re.compile(r"^\s*GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KV = re.compile(r"^(\s*)(\S[^:]*?)\s*:\s?(.*)$")


def read_text(text: str) -> dict:
    """The same dictionary from ``nvidia-smi -q`` (all of it or one ``-d`` section): keys nested by
    indentation, each GPU's block from its ``GPU <address>`` line to the next."""
    out: dict = {"driver_version": None, "cuda_version": None, "gpus": {}}
    tree: dict[tuple[str, ...], str] | None = None
    bdf = None
    stack: list[tuple[int, str]] = []
    for line in _strip_headers(text).splitlines():
        if not line.strip():
            continue
        m = _GPU_LINE.match(line)
        if m:
            if tree is not None and bdf:
                out["gpus"][bdf] = _text_gpu(tree, bdf)
            bdf, tree, stack = _bdf(m.group(1)), {}, [(len(line) - len(line.lstrip()), "GPU")]
            continue
        kv = _KV.match(line)
        indent = len(line) - len(line.lstrip())
        key = (kv.group(2) if kv else line.strip()).strip()
        value = kv.group(3).strip() if kv else ""
        if tree is None:
            if key == "Driver Version":
                out["driver_version"] = _text(value)
            elif key == "CUDA Version":
                out["cuda_version"] = _text(value)
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:  # back at the top level: the GPU block ended
            out["gpus"][bdf or ""] = _text_gpu(tree, bdf)
            tree, bdf = None, None
            continue
        path = tuple(k for _, k in stack[1:]) + (key,)
        if kv and value:
            tree[path] = value
        stack.append((indent, key))
    if tree is not None and bdf:
        out["gpus"][bdf] = _text_gpu(tree, bdf)
    out["gpus"].pop("", None)
    return out


def _text_gpu(t: dict[tuple[str, ...], str], bdf: str | None) -> dict:
    def get(*paths: tuple[str, ...]) -> str | None:
        for p in paths:
            for key, value in t.items():
                if tuple(k.lower() for k in key) == tuple(k.lower() for k in p):
                    return _text(value)
        return None

    link = ("PCI", "GPU Link Info")
    f: dict[str, Any] = {
        "name": get(("Product Name",)), "serial": get(("Serial Number",)), "uuid": get(("GPU UUID",)),
        "bus_id": _bdf(get(("PCI", "Bus Id"))) or bdf,
        "memory_total_mib": _int(get(("FB Memory Usage", "Total"))),
        "persistence_mode": _flag(get(("Persistence Mode",))),
        "mig_mode_current": _flag(get(("MIG Mode", "Current"))),
        "mig_mode_pending": _flag(get(("MIG Mode", "Pending"))),
        "ecc_mode_current": _flag(get(("ECC Mode", "Current"))),
        "ecc_mode_pending": _flag(get(("ECC Mode", "Pending"))),
        "temperature_c": _num(get(("Temperature", "GPU Current Temp"))),
        "temp_shutdown_c": _num(get(("Temperature", "GPU Shutdown Temp"))),
        "temp_slowdown_c": _num(get(("Temperature", "GPU Slowdown Temp"))),
        "temp_gpu_max_c": _num(get(("Temperature", "GPU Max Operating Temp"))),
        "memory_temperature_c": _num(get(("Temperature", "Memory Current Temp"))),
        "temp_mem_max_c": _num(get(("Temperature", "Memory Max Operating Temp"))),
        "power_w": _num(get(("GPU Power Readings", "Power Draw"), ("Power Readings", "Power Draw"))),
        "power_limit_w": _num(get(("Power Readings", "Enforced Power Limit"), ("GPU Power Readings", "Current Power Limit"),
                                  ("Power Readings", "Power Limit"))),
        "clock_sm_max_mhz": _int(get(("Max Clocks", "SM"))),
        "clock_sm_app_mhz": _int(get(("Applications Clocks", "Graphics"))),
        "pcie_gen_current": _int(get(link + ("PCIe Generation", "Current"))),
        "pcie_gen_max": _int(get(link + ("PCIe Generation", "Max"))),
        "pcie_gen_device_max": _int(get(link + ("PCIe Generation", "Device Max"))),
        "pcie_width_current": _int(get(link + ("Link Width", "Current"))),
        "pcie_width_max": _int(get(link + ("Link Width", "Max"))),
        "pcie_replay_counter": _int(get(("PCI", "Replays Since Reset"))),
        "remapped_rows_correctable": _int(get(("Remapped Rows", "Correctable Error"))),
        "remapped_rows_uncorrectable": _int(get(("Remapped Rows", "Uncorrectable Error"))),
        "remapped_rows_pending": _flag(get(("Remapped Rows", "Pending"))),
        "remapped_rows_failure": _flag(get(("Remapped Rows", "Remapping Failure Occurred"))),
        "retired_pages_sbe": _int(get(("Retired Pages", "Single Bit ECC"))),
        "retired_pages_dbe": _int(get(("Retired Pages", "Double Bit ECC"))),
        "fabric_state": ((get(("Fabric", "State")) or "").lower().replace(" ", "_") or None),
        "utilization_gpu_pct": _num(get(("Utilization", "Gpu"))),
    }
    for section in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
        items = [(k[-1], v) for k, v in t.items() if k[0].lower() == section.lower() and len(k) > 1]
        if items:
            f["clock_event_names"] = tuple(sorted({REASON_WORDS[w.lower()] for w, v in items
                                                   if _flag(v) and w.lower() in REASON_WORDS}))
            break
    for scope in ("Volatile", "Aggregate"):
        items = [(k[-1], v) for k, v in t.items() if len(k) == 3 and k[0].lower() == "ecc errors" and k[1] == scope]
        f.update(_ecc_sums(scope.lower(), items))
    return f


# -- the comparison ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One compared field: the probe's attribute, static or sampled, and the rule that judges it."""

    name: str
    kind: str  # "static" | "sampled"
    tolerance: str
    agrees: Callable[[Any, Any], bool]


def _equal(a: Any, b: Any) -> bool:
    return a == b


def _within(abs_tol: float, rel_tol: float = 0.0) -> Callable[[Any, Any], bool]:
    def agrees(a: Any, b: Any) -> bool:
        return abs(float(a) - float(b)) <= max(abs_tol, rel_tol * max(abs(float(a)), abs(float(b))))
    return agrees


def _reasons(a: Any, b: Any) -> bool:
    """The same clocks-event reasons, but for ``idle``: a GPU leaves idle whenever anything touches it."""
    return set(a or ()) - {"idle"} == set(b or ()) - {"idle"}


def _mib(a: Any, b: Any) -> bool:
    """The probe's bytes against nvidia-smi's MiB: the same whole MiB."""
    return int(a) >> 20 == int(b)


#: static: must be equal. sampled: read a few seconds apart, so within the stated tolerance.
FIELDS: tuple[Field, ...] = (
    Field("name", "static", "equal", _equal),
    Field("serial", "static", "equal", _equal),
    Field("uuid", "static", "equal", _equal),
    Field("bus_id", "static", "equal", _equal),
    Field("memory_total_bytes", "static", "the same whole MiB", _mib),
    Field("persistence_mode", "static", "equal", _equal),
    Field("mig_mode_current", "static", "equal", _equal),
    Field("mig_mode_pending", "static", "equal", _equal),
    Field("ecc_mode_current", "static", "equal", _equal),
    Field("ecc_mode_pending", "static", "equal", _equal),
    Field("ecc_volatile_corrected", "static", "equal (a counter: equal unless errors arrived between the reads)", _equal),
    Field("ecc_volatile_uncorrected", "static", "equal", _equal),
    Field("ecc_aggregate_corrected", "static", "equal", _equal),
    Field("ecc_aggregate_uncorrected", "static", "equal", _equal),
    Field("retired_pages_sbe", "static", "equal", _equal),
    Field("retired_pages_dbe", "static", "equal", _equal),
    Field("remapped_rows_correctable", "static", "equal", _equal),
    Field("remapped_rows_uncorrectable", "static", "equal", _equal),
    Field("remapped_rows_pending", "static", "equal", _equal),
    Field("remapped_rows_failure", "static", "equal", _equal),
    Field("temp_shutdown_c", "static", "equal", _equal),
    Field("temp_slowdown_c", "static", "equal", _equal),
    Field("temp_gpu_max_c", "static", "equal", _equal),
    Field("temp_mem_max_c", "static", "equal", _equal),
    Field("power_limit_w", "static", "within 0.5 W (NVML's milliwatts, nvidia-smi's two decimals)", _within(0.5)),
    Field("clock_sm_max_mhz", "static", "equal", _equal),
    Field("clock_sm_app_mhz", "static", "equal (nvidia-smi prints the graphics applications clock)", _equal),
    Field("pcie_gen_max", "static", "equal", _equal),
    Field("pcie_gen_device_max", "static", "equal", _equal),
    Field("pcie_width_max", "static", "equal", _equal),
    Field("pcie_replay_counter", "static", "equal (a counter)", _equal),
    Field("fabric_state", "static", "equal", _equal),
    Field("temperature_c", "sampled", "within 5 C", _within(5.0)),
    Field("memory_temperature_c", "sampled", "within 5 C", _within(5.0)),
    Field("power_w", "sampled", "within 15 W or 10 %", _within(15.0, 0.10)),
    Field("clock_event_names", "sampled", "the same reasons but for idle", _reasons),
    Field("pcie_gen_current", "sampled", "equal (a link may change speed with load)", _equal),
    Field("pcie_width_current", "sampled", "equal", _equal),
)

#: what nvidia-smi -q shows that the probe does not read (listed, never compared)
NOT_READ_BY_PROBE = ("utilization_gpu_pct",)


def _probe_value(gpu: Any, name: str) -> Any:
    v = getattr(gpu, name, None)
    if name == "bus_id":
        return (v or "").lower() or None
    if name == "clock_event_names":
        return tuple(sorted(v)) if getattr(gpu, "clock_event_reasons", None) is not None else None
    return v


def _smi_value(fields: dict, name: str) -> Any:
    if name == "memory_total_bytes":
        return fields.get("memory_total_mib")
    return fields.get(name)


def compare(observation: Any, smi: dict) -> dict:
    """The probe's :class:`~ccdiag.probes.nvml.NvmlObservation` beside a reading of
    :func:`read_xml`/:func:`read_text`: every field of every GPU (matched by PCI address) with both
    values, its tolerance and whether it agrees (None where one side has no value), and counts."""
    rows = []
    counts = {"static_equal": 0, "static_differ": 0, "sampled_within": 0, "sampled_outside": 0, "one_side_absent": 0}
    gpus_probe = {(g.bus_id or "").lower(): g for g in getattr(observation, "gpus", ()) if g.bus_id}
    top = [("driver_version", getattr(observation, "driver_version", None), smi.get("driver_version")),
           ("cuda_driver_version", getattr(observation, "cuda_driver_version", None), smi.get("cuda_version"))]
    for name, a, b in top:
        agree = None if a is None or b is None else a == b
        rows.append({"gpu": None, "field": name, "kind": "static", "probe": a, "smi": b, "tolerance": "equal",
                     "agrees": agree})
        _count(counts, "static", agree)
    missing = sorted(set(smi.get("gpus") or {}) ^ set(gpus_probe))
    for bdf in sorted(set(smi.get("gpus") or {}) & set(gpus_probe)):
        g, s = gpus_probe[bdf], smi["gpus"][bdf]
        for fld in FIELDS:
            a, b = _probe_value(g, fld.name), _smi_value(s, fld.name)
            agree = None if a is None or b is None else bool(fld.agrees(a, b))
            rows.append({"gpu": bdf, "field": fld.name, "kind": fld.kind, "probe": _plain(a), "smi": _plain(b),
                         "tolerance": fld.tolerance, "agrees": agree})
            _count(counts, fld.kind, agree)
        for name in NOT_READ_BY_PROBE:
            rows.append({"gpu": bdf, "field": name, "kind": "not read by the probe", "probe": None,
                         "smi": s.get(name), "tolerance": None, "agrees": None})
    return {"rows": rows, "counts": counts, "gpus_in_one_reading_only": missing,
            "agree": counts["static_differ"] == 0 and counts["sampled_outside"] == 0 and not missing}


def _count(counts: dict, kind: str, agree: bool | None) -> None:
    if agree is None:
        counts["one_side_absent"] += 1
    elif kind == "static":
        counts["static_equal" if agree else "static_differ"] += 1
    else:
        counts["sampled_within" if agree else "sampled_outside"] += 1


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    if dataclasses.is_dataclass(v):
        return str(v)
    return v
