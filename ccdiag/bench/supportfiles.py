"""NVIDIA's own outputs pasted into ``ccdiag bench import``: ``nvidia-smi -q`` and ``dcgmi diag``.

Users paste these into tickets far more often than they can run ccdiag on the broken node. They are
judged here with the rules ccdiag applies to a node, not with rules of their own:

* ``nvidia-smi -q`` (text or ``-x`` XML) becomes the NVML answers it printed
  (:mod:`ccdiag.nvfiles.smi_nvml`) and each GPU's own PCIe link; the NVML and PCIe probes read
  them through the replaying door and the GPU checks judge them (ECC, retired pages, remapped rows,
  clocks event reasons, temperature, recovery action, fabric state and health, lost GPUs) with the
  PCIe width and speed checks and the replay counter. What the output does not print is unknown.
* ``dcgmi diag`` (text or ``-j``): every test that failed or warned becomes a finding on the GPU it
  names, with DCGM's error code (from ``error_id``, or matched from the message text against DCGM's
  own message formats), DCGM's category mapped to the part of the node it points at, ccdiag's
  remedy for that part and DCGM's own next step (``ccdiag/data/dcgm_errors.json``).

Either way the result is a :class:`~ccdiag.bench.result.BenchResult` with findings and no
measurements, as ``bench import`` shows every file it judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ccdiag.bench.result import RAN, BenchResult
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.readings import normalize_bdf
from ccdiag.nvfiles import dcgmdiag
from ccdiag.nvfiles import smifields as sf
from ccdiag.nvfiles.smiq import SmiLog, looks_like_smi_q, normalize_smi_bus, parse_smi_q
from ccdiag.nvfiles.smixml import looks_like_smi_xml, parse_smi_xml

if TYPE_CHECKING:
    from ccdiag.inputs.policy import Policy

KIND_SMI = "nvidia-smi-q"
KIND_DCGM = "dcgmi-diag"
#: the checks a pasted nvidia-smi -q can feed: the GPU checks and the GPU's own PCIe link
SMI_CHECKS = ("gpu.", "pcie.link_width", "pcie.link_speed", "pcie.replay")
#: checks that would compare the output with itself (the PCI list here is made from the same output)
SMI_SKIPPED = ("gpu.count", "gpu.driver_unavailable")

#: DCGM error category -> (component kind, what it points at, ccdiag's remedy)
CATEGORY_REMEDY = {
    "hardware_memory": ("gpu", "GPU memory", "Drain the GPU. Reset it (nvidia-smi -r) or reboot to apply pending row "
                        "remaps or page retirements; if remapping failed or uncorrectable errors come back, RMA it. "
                        "`ccdiag check` reads its ECC, remapped-row and retired-page counters."),
    "hardware_thermal": ("gpu", "GPU cooling", "The GPU throttled on temperature: check airflow, fans, the heatsink and "
                         "its thermal interface and the inlet temperature; `ccdiag check` shows clocks event reasons "
                         "and temperatures against the GPU's own limits."),
    "hardware_power": ("gpu", "GPU power delivery", "Check the power limit (nvidia-smi -q -d POWER), the PSUs and the "
                       "GPU's power cabling; `ccdiag check` shows power brake and power cap events."),
    "hardware_pcie": ("pcie", "the GPU's PCIe link", "Reseat the GPU (and any riser or cable) and check the slot: "
                      "`ccdiag check` judges every hop's trained speed and width, AER and replay counters."),
    "hardware_nvlink": ("nvlink", "the GPU's NVLinks", "Check that nvidia-fabricmanager runs and the NVLink states "
                        "(nvidia-smi nvlink -s / -e); `ccdiag check` judges link states and error counters."),
    "hardware_nvswitch": ("nvswitch", "an NVSwitch", "Check the NVSwitch SXIDs in the kernel log and fabric manager; "
                          "`ccdiag check` judges NVSwitch links and SXIDs."),
    "hardware_other": ("gpu", "the GPU", "Drain the GPU and run the field diagnostic; RMA it if it fails again."),
    "software_xid": ("gpu", "the GPU (an XID)", "Read the XID in the kernel log: `ccdiag check` classifies it from "
                     "NVIDIA's XID catalogue."),
    "software_cuda": ("node", "the CUDA/driver setup", "Check the driver and CUDA installation and that no other "
                      "process holds the GPU in exclusive mode; reset the GPU and rerun."),
    "software_config": ("node", "the node's configuration", "Fix the configuration DCGM names (driver denylist, "
                        "persistence mode, environment) and rerun."),
    "software_library": ("node", "the driver libraries", "Reinstall the NVIDIA driver so NVML and CUDA match."),
    "software_eud": ("node", "the EUD test set-up", "Check the EUD package installation and permissions."),
    "software_other": ("node", "the node's software", "Follow DCGM's next step below and rerun the diagnostic."),
    "perf_threshold": ("gpu", "GPU performance", "The GPU ran below its expected performance: check clocks event "
                       "reasons, power and thermals (`ccdiag check`) and rerun."),
    "perf_violation": ("gpu", "GPU performance", "The GPU ran below its expected performance: check clocks event "
                       "reasons, power and thermals (`ccdiag check`) and rerun."),
    "internal_other": ("node", "DCGM itself", "A DCGM-internal error: check nv-hostengine's log and rerun."),
}
#: a test that failed without a message DCGM coded: what its plugin exercises
TEST_PARTS = {"memory": "hardware_memory", "memtest": "hardware_memory", "memory_bandwidth": "hardware_memory",
              "pcie": "hardware_pcie", "targeted_power": "hardware_power", "pulse_test": "hardware_power",
              "targeted_stress": "perf_threshold", "sm_stress": "perf_threshold", "diagnostic": "hardware_other",
              "context_create": "software_cuda", "nvbandwidth": "hardware_nvlink", "eud": "hardware_other",
              "software": "software_config"}
_STATUS = {"fail": FAIL, "warn": WARN}


def detect(text: str) -> str | None:
    """:data:`KIND_SMI` or :data:`KIND_DCGM` when ``text`` is one of them, else None (the hook
    ``bench import`` asks before its benchmark-output detection)."""
    if looks_like_smi_xml(text) or looks_like_smi_q(text):
        return KIND_SMI
    if dcgmdiag.looks_like_dcgm_diag(text) is not None:
        return KIND_DCGM
    return None


def judge_file(text: str, source: str, policy: Policy | None = None) -> BenchResult:
    kind = detect(text)
    if kind == KIND_SMI:
        return judge_smi(text, source, policy)
    if kind == KIND_DCGM:
        return judge_dcgm(dcgmdiag.parse_dcgm_diag(text), source)
    raise dcgmdiag.DcgmDiagError(f"{source}: neither an nvidia-smi -q nor a dcgmi diag output")


# -- nvidia-smi -q --------------------------------------------------------------------------------
def _gpu_links(log: SmiLog) -> list[tuple[str, dict[str, int | None]]]:
    out = []
    for gpu in log.gpus:
        bdf = normalize_bdf(normalize_smi_bus(gpu.bus_id)) if gpu.bus_id else None
        if bdf is None:
            continue
        v = {k: sf.value(gpu, f"pcie_{k}") for k in ("gen_current", "gen_max", "width_current", "width_max")}
        out.append((bdf, {k: x.integer if x.kind == "number" else None for k, x in v.items()}))
    return out


def smi_snapshot(log: SmiLog, source: str) -> Any:
    """The partial record a pasted ``nvidia-smi -q`` stands for: its NVML answers and each GPU's link."""
    from ccdiag.host.bugreport_tree import put_gpu_links
    from ccdiag.host.door import NOT_RECORDED_META, PARTIAL_RECORD_META
    from ccdiag.host.snapshot import SnapshotData, base_meta
    from ccdiag.nvfiles.smi_nvml import nvml_records

    snap = SnapshotData()
    snap.nvml = nvml_records(log, source=source)
    put_gpu_links(snap, _gpu_links(log))
    snap.meta = base_meta(source="nvidia-smi -q", environ_recorded=[])
    snap.meta[PARTIAL_RECORD_META] = source
    snap.meta[NOT_RECORDED_META] = {}
    snap.environ = {}
    return snap


def judge_smi(text: str, source: str, policy: Policy | None = None) -> BenchResult:
    from ccdiag.checks import CheckContext, run_checks
    from ccdiag.host.door import ReplayHost
    from ccdiag.probes.registry import run_probes
    from ccdiag.core.probenames import PROBE_NVML, PROBE_PCIE

    xml = looks_like_smi_xml(text)
    log = parse_smi_xml(text, source) if xml else parse_smi_q(text)
    what = "nvidia-smi -q -x" if xml else "nvidia-smi -q"
    res = BenchResult(f"import:{KIND_SMI}", RAN, params={"file": source, "tool": what, "judged_by_findings": True,
                                                         "driver": log.driver_version, "gpus": len(log.gpus)})
    if not log.gpus and not log.messages:
        res.findings.append(Finding("smi.unjudged", UNKNOWN, Component("node", what), f"{source}: no GPU in this output",
                                    remedy="Paste the whole `nvidia-smi -q` output (or `nvidia-smi -q -x`)."))
        return res
    host = ReplayHost(smi_snapshot(log, f"{what} output {source}"))
    runs = run_probes(host, [PROBE_NVML, PROBE_PCIE])
    ctx = CheckContext(runs=runs, meta=host.meta(), now=host.now())
    if policy is not None:
        ctx = CheckContext(runs=runs, policy=policy, meta=host.meta(), now=host.now())
    found = [f for f in run_checks(ctx, only=SMI_CHECKS)
             if not _gated_on_absent_probe(f) and not f.check.startswith(SMI_SKIPPED)]
    found = _fabric_from_the_gpus(found, runs.get(PROBE_NVML))
    shown = [f for f in found if not _not_printed(f)]
    res.findings = shown + _not_shown([f for f in found if _not_printed(f)], what, source) + _coverage(log, what, source)
    return res


def _not_printed(f: Finding) -> bool:
    """An unknown finding whose only cause is a value the pasted output does not print."""
    return f.status == UNKNOWN and any("not_recorded" in str(e.value) or "not recorded" in str(e.value)
                                       for e in f.evidence)


def _not_shown(findings: list[Finding], what: str, source: str) -> list[Finding]:
    """One finding for every check the output gave nothing to (a ``-d ECC`` paste, a cut output)."""
    if not findings:
        return []
    checks = sorted({f.check for f in findings})
    gpus = sorted({f.component.gpu for f in findings if f.component.gpu is not None})
    return [Finding("smi.not_shown", UNKNOWN, Component("node", what),
                    f"{len(checks)} check(s) not judged: the output does not print what they read "
                    f"({', '.join(checks)}" + (f"; GPUs {', '.join(map(str, gpus))}" if gpus else "") + ")",
                    evidence=(Evidence("file", source, "bench import"),),
                    remedy="Paste the whole `nvidia-smi -q` output (no -d filter) to judge these too.",
                    details={"checks": checks})]


def _fabric_from_the_gpus(found: list[Finding], nvml_run: Any) -> list[Finding]:
    """A pasted output shows no NVSwitch, so the fabric-manager check skips ("no NVSwitch"); but a GPU
    that reports a fabric state sits on an NVLink fabric. Its registration is judged here as that
    check judges it (its states and statuses), and the skip, wrong for such a GPU, is dropped."""
    from ccdiag.checks.common import gpu_component
    from ccdiag.checks.gpu import FABRIC_OK, FABRIC_STATUS_OK

    nvml = getattr(nvml_run, "data", None)
    gpus = [g for g in getattr(nvml, "gpus", ()) if g.fabric_state not in (None, "not_supported")]
    if not gpus:
        return found
    out = [f for f in found if not (f.check == "gpu.fabric_manager" and f.status == "skip")]
    bad = []
    for g in gpus:
        status_ok = g.fabric_status is None or g.fabric_status.strip().lower() in FABRIC_STATUS_OK
        if g.fabric_state in FABRIC_OK and status_ok:
            continue
        src = f"nvmlDeviceGetGpuFabricInfoV({g.index})"
        summary = (f"GPU{g.index}: fabric registration completed with error '{g.fabric_status}'."
                   if g.fabric_state in FABRIC_OK else f"GPU{g.index}: fabric registration is '{g.fabric_state}'.")
        bad.append(Finding("gpu.fabric_manager", FAIL, gpu_component(g), summary,
                           evidence=(Evidence("fabric state", g.fabric_state, src),
                                     Evidence("fabric status", g.fabric_status, src)),
                           expected="fabric state completed, status success",
                           expected_source="the GPU reports an NVLink fabric state",
                           remedy="Start or restart nvidia-fabricmanager (its version must equal the driver's) and "
                                  "check /var/log/fabricmanager.log; reboot if registration stays stuck."))
    if not bad:
        bad.append(Finding("gpu.fabric_manager", PASS, Component("node", "node"),
                           f"{len(gpus)} GPU(s) report their NVLink fabric registration completed.",
                           evidence=(Evidence("fabric states", sorted({g.fabric_state for g in gpus}),
                                              "nvmlDeviceGetGpuFabricInfoV"),)))
    return out + bad


def _gated_on_absent_probe(f: Finding) -> bool:
    """A check the pasted output cannot feed at all (no NVSwitch list, no fabric manager state)."""
    return f.status == "skip" and "was not run" in f.summary


def _coverage(log: SmiLog, what: str, source: str) -> list[Finding]:
    read = unread = 0
    for gpu in log.gpus:
        r, u = sf.read_paths(gpu)
        read, unread = read + len(r), unread + len(u)
    notes = [m for _, m in log.messages[:4]]
    return [Finding("smi.fields", PASS if read else UNKNOWN, Component("node", what),
                    f"{len(log.gpus)} GPU block(s) from driver {log.driver_version or '?'}: {read} printed field(s) "
                    f"judged, {unread} shown only" + (f"; nvidia-smi said: {'; '.join(notes)}" if notes else ""),
                    evidence=(Evidence("file", source, "bench import"),
                              Evidence("fields judged / printed", f"{read}/{read + unread}", "ccdiag/data/smi_fields.json")),
                    remedy=None if read else "Paste the whole `nvidia-smi -q` output.")]


# -- dcgmi diag ----------------------------------------------------------------------------------
def _component(part: str, gpu: int | None) -> Component:
    kind = CATEGORY_REMEDY.get(part, ("gpu", "the GPU", ""))[0]
    if gpu is None:
        return Component("node", "node")
    if kind == "pcie":
        return Component("pcie", f"GPU{gpu} PCIe link", gpu=gpu)
    if kind == "nvlink":
        return Component("nvlink", f"GPU{gpu} NVLinks", gpu=gpu)
    return Component("gpu", f"GPU{gpu}", gpu=gpu)


def _dcgm_finding(test: dcgmdiag.DiagTest, gpu: int | None, status: str, messages: list[dcgmdiag.DiagMessage],
                  source: str) -> Finding:
    codes = [m.error_id for m in messages if m.error_id is not None]
    entry = dcgmdiag.errors_by_code().get(codes[0]) if codes else None
    part = (entry or {}).get("category") or TEST_PARTS.get(test.plugin or "", "hardware_other")
    kind, pointed, remedy = CATEGORY_REMEDY.get(part, CATEGORY_REMEDY["hardware_other"])
    where = f"GPU{gpu}" if gpu is not None else "the node"
    said = messages[0].text if messages else "no message printed"
    name = (entry or {}).get("name")
    summary = (f"dcgmi diag {test.name}: {status.upper()} on {where}: {said}"
               + (f" ({name}: {pointed})" if name else f" ({pointed})"))
    evidence = [Evidence("test", f"{test.name} ({test.category or 'category not shown'})", source),
                Evidence("result", status, source)]
    for m in messages[:4]:
        evidence.append(Evidence(m.kind, m.text, source))
    if entry:
        evidence.append(Evidence("DCGM error", f"{entry['code']} {entry['name']} (severity {entry['severity']}, "
                                               f"category {entry['category']}); read from {messages[0].error_id_from}",
                                 "NVIDIA/DCGM dcgm_errors.h"))
    next_step = (entry or {}).get("next_steps")
    full = remedy + (f" DCGM's next step: {next_step}" if next_step and next_step != "N/A" else "")
    check_id = "dcgm." + (test.plugin or "".join(c if c.isalnum() else "_" for c in test.name.lower()).strip("_"))
    return Finding(check_id, _STATUS.get(status, WARN), _component(part, gpu), summary, evidence=tuple(evidence),
                   expected="the DCGM diagnostic passes", expected_source="dcgmi diag", remedy=full,
                   details={"dcgm_test": test.name, "dcgm_plugin": test.plugin, "dcgm_error": codes[0] if codes else None,
                            "dcgm_category": part})


def judge_dcgm(run: dcgmdiag.DiagRun, source: str) -> BenchResult:
    res = BenchResult(f"import:{KIND_DCGM}", RAN, params={"file": source, "tool": f"dcgmi diag ({run.form})",
                                                           "judged_by_findings": True,
                                                           "dcgm_version": run.dcgm_version,
                                                           "driver": run.driver_version})
    if run.runtime_error:
        res.findings.append(Finding("dcgm.runtime_error", UNKNOWN, Component("node", "dcgmi diag"),
                                    f"dcgmi diag did not complete: {run.runtime_error}",
                                    evidence=(Evidence("runtime error", run.runtime_error, source),),
                                    remedy="Check nv-hostengine and nvvs logs (/var/log/nvidia-dcgm) and rerun."))
    passed: list[str] = []
    skipped: list[str] = []
    for test in run.tests:
        by_gpu: dict[int | None, list[dcgmdiag.DiagMessage]] = {}
        for m in test.messages:
            if m.kind in ("warning", "error"):
                by_gpu.setdefault(m.gpu, []).append(m)
        bad: dict[int | None, str] = {g: s for g, s in test.results.items() if s in _STATUS}
        if not test.results and test.status in _STATUS:
            overall = test.status or "fail"
            bad = {g: overall for g in by_gpu} or {None: overall}
        if not test.results and test.status is None and by_gpu:
            bad = {g: "fail" for g in by_gpu}  # a message row alone (a DCGM 2.x "Error" row)
        for gpu, status in sorted(bad.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            msgs = by_gpu.get(gpu) or (by_gpu.get(None) or [])
            res.findings.append(_dcgm_finding(test, gpu, status, msgs, source))
        worst = test.worst
        if not bad and worst == "pass":
            passed.append(test.name)
        elif not bad and worst in ("skip", "not_run"):
            skipped.append(test.name)
    if passed:
        res.findings.append(Finding("dcgm.passed", PASS, Component("node", "dcgmi diag"),
                                    f"{len(passed)} DCGM test(s) passed: {', '.join(passed[:12])}",
                                    evidence=(Evidence("GPUs", run.gpus() or "not shown", source),)))
    if not any(f.status in (FAIL, WARN, PASS) for f in res.findings):
        res.findings.append(Finding("dcgm.unjudged", UNKNOWN, Component("node", "dcgmi diag"),
                                    "no DCGM test result could be judged"
                                    + (f" ({len(skipped)} skipped: {', '.join(skipped[:6])})" if skipped else ""),
                                    remedy="Paste the whole `dcgmi diag -r 2` (or `-j`) output."))
    return res
