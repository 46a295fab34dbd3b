"""GPU health rules over the NVML observation (with PCI and the system probe as cross-checks).

Every rule names the GPU by index, UUID and PCI address, says which NVML call the value came from,
and separates three outcomes operators confuse at their cost: the GPU is fine (pass), the value does
not exist on this GPU (skip: "not supported" is a fact, e.g. no row remapper before Ampere), and
the value could not be read (unknown: no permission, a hung call). Lifetime totals are shown as
evidence but only state that needs action (pending remaps, volatile uncorrected ECC, a recovery
action) fails a node; idle clocks, software power capping and historic counts never do.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import (NODE, NVML, gpu_by_bdf, gpu_component, node_component, not_read, nvidia_pci_gpus,
                                  nvml_gate, nvswitches_on_pci, per_gpu, policy_source, read_error)
from ccdiag.core import actions as A
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.probes.nvml import decode_fabric_health
from ccdiag.topology.catalogue import gpu_by_name
from ccdiag.core.readings import normalize_bdf
from ccdiag.probes.nvml import clock_event_names
from ccdiag.core.probenames import PROBE_NVML, PROBE_PCIE, PROBE_SYSTEM
from ccdiag.probes.registry import TIMEOUT, UNAVAILABLE

# ----------------------------------------------------------------------------- presence / driver

@check("gpu.driver_unavailable", uses=(PROBE_NVML, PROBE_PCIE))
def check_driver(ctx: CheckContext) -> list[Finding]:
    """NVML must answer when the bus shows NVIDIA GPUs: a missing or hung driver makes every GPU unusable."""
    cid = "gpu.driver_unavailable"
    run = ctx.runs.get(PROBE_NVML)
    pci = nvidia_pci_gpus(ctx)
    expected = ctx.policy.expected_gpu_count
    if run is not None and run.usable:
        version = run.data.driver_version
        return [Finding(cid, PASS, NODE, f"NVML answered (driver {version}).",
                        evidence=(Evidence("driver version", version, "nvmlSystemGetDriverVersion()"),))]
    if run is None:
        return [Finding(cid, SKIP, NODE, "Not evaluated: the nvml probe was not run.")]
    status = run.status
    ev = [Evidence("nvml probe", f"{status}: {run.error}", NVML)]
    if pci:
        ev.append(Evidence("NVIDIA GPUs on PCI", [d.bdf for d in pci], "/sys/bus/pci/devices"))
    remedy = ("Check that the nvidia kernel module is loaded (lsmod | grep nvidia, dmesg | grep NVRM), that "
              "the user-space driver matches it (no 'Driver/library version mismatch'), then reload the "
              "driver or reboot. Drain the node until NVML answers.")
    if status == TIMEOUT and (pci or expected or pci is None):
        return [Finding(cid, FAIL, NODE, "NVML did not answer before its deadline: the driver is probably hung.",
                        evidence=tuple(ev), remedy="Drain the node; do not kill NVML clients in a loop. "
                        "Look for XID 119/79 in the kernel log; a GPU reset or reboot is usually needed.")]
    if status == UNAVAILABLE or status == TIMEOUT:
        if pci:
            return [Finding(cid, FAIL, NODE,
                            f"PCI shows {len(pci)} NVIDIA GPU(s) but NVML is unavailable.",
                            evidence=tuple(ev), expected=f"NVML answers for {len(pci)} GPU(s)",
                            expected_source="PCI enumeration", remedy=remedy)]
        if expected:
            return [Finding(cid, FAIL, NODE, f"NVML is unavailable; the policy expects {expected} GPU(s).",
                            evidence=tuple(ev), expected=f"{expected} GPUs", expected_source=policy_source(ctx),
                            remedy=remedy)]
        if pci is not None:
            return [Finding(cid, SKIP, NODE, "No NVIDIA GPU on this node (NVML absent, none on PCI).",
                            evidence=tuple(ev))]
    return [Finding(cid, UNKNOWN, NODE, "Could not tell whether the NVIDIA driver works "
                    f"(nvml probe {status}; PCI {'unusable' if pci is None else 'shows no GPU'}).",
                    evidence=tuple(ev))]


def _container_restricted(ctx: CheckContext) -> str | None:
    """NVIDIA_VISIBLE_DEVICES limits what NVML shows inside a container while sysfs still lists
    every GPU on the host; comparing the two there would be a false alarm."""
    env = dict(ctx.env)
    sysobs = ctx.data(PROBE_SYSTEM)
    if sysobs is not None and sysobs.environ:
        env = {**sysobs.environ, **env}
    val = env.get("NVIDIA_VISIBLE_DEVICES")
    if val is not None and val.strip().lower() not in ("all", ""):
        return val
    return None


def _not_in_nvml(cid: str, bdf: str | None, dev: Any, by_bdf: dict) -> Finding:
    """An NVIDIA GPU on the PCI bus that NVML does not list: bound to another driver (a warning:
    often intended, as vfio-pci passthrough), else lost to the driver (a failure)."""
    ev = (Evidence("PCI device", f"{bdf} vendor {dev.vendor_id} device {dev.device_id}",
                   f"/sys/bus/pci/devices/{bdf}"),
          Evidence("bound driver", dev.driver, f"/sys/bus/pci/devices/{bdf}/driver"),
          Evidence("NVML bus ids", sorted(by_bdf), "nvmlDeviceGetPciInfo"))
    comp = Component("gpu", f"GPU at {bdf}", bdf=bdf)
    if dev.driver not in (None, "nvidia"):
        return Finding(cid, WARN, comp,
                       f"NVIDIA GPU {bdf} is bound to {dev.driver}, not nvidia; NVML does not see it.",
                       evidence=ev, expected="bound to nvidia", expected_source="PCI enumeration",
                       remedy="Intended (e.g. vfio-pci passthrough)? Then ignore it. Otherwise bind it "
                              "to nvidia or reboot.")
    return Finding(cid, FAIL, comp, f"PCI sees NVIDIA GPU {bdf} but NVML does not.",
                   evidence=ev, expected="every NVIDIA GPU on PCI visible to NVML",
                   expected_source="PCI enumeration",
                   remedy="Drain the node. Check the kernel log for 'fallen off the bus'/XID 79 and "
                          "for NVRM init errors on this address; reset the GPU or reboot; RMA if it "
                          "stays gone.")


def _nvml_against_pci(cid: str, pci: list, by_bdf: dict) -> list[Finding]:
    """The GPUs PCI lists and NVML does not, then those NVML lists and PCI does not."""
    pci_bdfs = {normalize_bdf(d.bdf): d for d in pci}
    out = [_not_in_nvml(cid, bdf, dev, by_bdf) for bdf, dev in sorted(pci_bdfs.items()) if bdf not in by_bdf]
    for bdf, g in sorted(by_bdf.items()):
        if bdf not in pci_bdfs:
            out.append(Finding(cid, FAIL, gpu_component(g),
                               f"NVML reports GPU{g.index} at {bdf}, which PCI does not list.",
                               evidence=(Evidence("NVML bus id", bdf, f"nvmlDeviceGetPciInfo({g.index})"),
                                         Evidence("NVIDIA GPUs on PCI", sorted(pci_bdfs), "/sys/bus/pci/devices")),
                               expected="NVML and PCI list the same GPUs", expected_source="PCI enumeration",
                               remedy="Re-run; if it persists, compare `lspci -d 10de:` with `nvidia-smi -L` "
                                      "and reboot."))
    return out


def _usable_count(ctx: CheckContext, cid: str, nvml: Any, pci: list | None) -> Finding | None:
    """The GPUs a job can use (a lost GPU still counts in nvmlDeviceGetCount) against the policy's
    count, or against all of them without one; None when nothing is short."""
    n = len(nvml.gpus)
    expected = ctx.policy.expected_gpu_count
    failed = [g for g in sorted(nvml.gpus, key=lambda g: g.index) if g.failed]
    usable = n - len(failed)
    failed_txt = ", ".join(f"GPU{g.index} {g.failed}" for g in failed)
    count_ev = (Evidence("GPU count", n, "nvmlDeviceGetCount()"),
                Evidence("failed GPUs", [f"GPU{g.index}" for g in failed], "NVML (see gpu.lost)"))
    if expected is not None and (usable < expected or n > expected):
        short = usable < expected
        summary = (f"{usable} usable GPU(s)" + (f" ({failed_txt})" if failed else "") + f", policy expects {expected}."
                   if short else f"{n} GPU(s) visible, policy expects {expected}.")
        return Finding(cid, FAIL if short else WARN, NODE, summary, evidence=count_ev,
                       expected=f"{expected} GPUs", expected_source=policy_source(ctx),
                       remedy="Fewer: find the missing or failed GPU (findings above, kernel log) and drain. "
                              "More: the policy is for another node type.")
    if failed:
        # a lost GPU still counts in nvmlDeviceGetCount but is not a GPU a job can use
        return Finding(cid, FAIL, NODE, f"{usable} of {n} GPU(s) usable ({failed_txt}).", evidence=count_ev,
                       expected=f"{n} usable GPUs",
                       expected_source="PCI enumeration" if pci is not None else "nvmlDeviceGetCount()",
                       remedy="See gpu.lost: drain the node, then reset or reboot.")
    return None


def _count_pass(ctx: CheckContext, cid: str, n: int, pci: list | None, restricted: str | None) -> Finding:
    seen: list[Evidence] = [Evidence("GPU count", n, "nvmlDeviceGetCount()")]
    if pci is not None:
        seen.append(Evidence("NVIDIA GPUs on PCI", len(pci), "/sys/bus/pci/devices"))
    summary = f"{n} GPU(s) visible to NVML"
    if restricted is not None:
        summary += f" (container restricted to NVIDIA_VISIBLE_DEVICES={restricted}; PCI not compared)"
    elif pci is not None:
        summary += ", matching PCI"
    expected = ctx.policy.expected_gpu_count
    return Finding(cid, PASS, NODE, summary + ".", evidence=tuple(seen),
                   expected=f"{expected} GPUs" if expected is not None else None,
                   expected_source=policy_source(ctx) if expected is not None else None)


@check("gpu.count", needs=(PROBE_NVML,), uses=(PROBE_PCIE,))
def check_count(ctx: CheckContext) -> list[Finding]:
    """The GPUs NVML sees, the GPUs on the PCI bus and the policy's count must agree; a GPU can
    drop out of the driver without any XID (seen in the field), and only PCI still shows it."""
    cid = "gpu.count"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    out: list[Finding] = []
    pci = nvidia_pci_gpus(ctx)
    restricted = _container_restricted(ctx)
    if pci is not None and restricted is None:
        out += _nvml_against_pci(cid, pci, gpu_by_bdf(nvml))
    n = len(nvml.gpus)
    if nvml.device_count is not None and nvml.device_count != n:
        out.append(Finding(cid, FAIL, NODE,
                           f"nvmlDeviceGetCount says {nvml.device_count} but only {n} GPU(s) could be opened.",
                           evidence=(Evidence("device count", nvml.device_count, "nvmlDeviceGetCount()"),
                                     Evidence("GPUs opened", n, "nvmlDeviceGetHandleByIndex")),
                           remedy="Drain the node; a GPU that cannot be opened needs a reset or reboot."))
    usable = _usable_count(ctx, cid, nvml, pci)
    if usable is not None:
        out.append(usable)
    return out or [_count_pass(ctx, cid, n, pci, restricted)]


FAILED_STATES = {
    "gpu_lost": "lost (NVML: GPU is lost; it fell off the bus or stopped answering)",
    "hung": "hung (an NVML call did not return)",
    "timeout": "hung (NVML calls time out)",
    "unknown_error": "in an error state (NVML: unknown error)",
    "reset_required": "waiting for a reset (NVML: reset required)",
}


@check("gpu.lost", needs=(PROBE_NVML,))
def check_lost(ctx: CheckContext) -> list[Finding]:
    """A GPU whose NVML calls fail with GPU_IS_LOST / unknown error / timeout is unusable until reset."""
    cid = "gpu.lost"

    def judge(g, _nvml):
        later = _later_same_gpu(ctx, g)
        when = ""
        if not g.failed and later is not None and later.failed:
            g, when = dataclasses.replace(later, index=g.index, uuid=g.uuid or later.uuid,
                                          bus_id=g.bus_id or later.bus_id), " (lost during the counter window)"
        if not g.failed:
            seen = " in both samples" if later is not None else ""
            return [Finding(cid, PASS, gpu_component(g), f"GPU{g.index} answers NVML{seen}.")]
        errs = [e for e in g.errors if e.kind == g.failed][:3]
        ev = tuple(Evidence("NVML error", f"{e.kind}: {e.message}", e.source) for e in errs) or (
            Evidence("GPU state", g.failed, NVML),)
        inferred = [e for e in g.errors if e.kind == "inferred"]
        if inferred:
            ev += (Evidence("bus id", g.bus_id, inferred[0].message),)
        reboot = g.failed in ("gpu_lost",)
        state = FAILED_STATES.get(g.failed, f"failed ({g.failed})")
        return [Finding(cid, FAIL, gpu_component(g), f"GPU{g.index} is {state}{when}.",
                        evidence=ev, expected="GPU answers NVML",
                        remedy=("Drain the node, then reboot it (a GPU lost from the bus rarely comes back with a "
                                "reset)."
                                if reboot else
                                f"Drain the node, then reset the GPU when idle (nvidia-smi -r -i {g.index}); "
                                "reboot if the reset fails."), action=A.REBOOT if reboot else A.RESET_GPU)]

    return per_gpu(ctx, cid, judge)


def _norm_version(v: str | None) -> str | None:
    return v.strip() if v and v.strip() else None


@check("gpu.driver_version", needs=(PROBE_NVML,), uses=(PROBE_SYSTEM,))
def check_driver_version(ctx: CheckContext) -> list[Finding]:
    """The user-space driver (NVML) and the loaded kernel module must be the same release; a
    mismatch is what an upgrade without reboot or a container with foreign libraries leaves."""
    cid = "gpu.driver_version"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    sysobs = ctx.data(PROBE_SYSTEM)
    user = _norm_version(nvml.driver_version)
    kernel = _norm_version(sysobs.nvidia_driver_version) if sysobs is not None else None
    ev = (Evidence("NVML driver version", user, "nvmlSystemGetDriverVersion()"),
          Evidence("kernel module version", kernel, "/proc/driver/nvidia/version"))
    if user is None or kernel is None:
        return [Finding(cid, SKIP, NODE, "Driver versions not compared (one side not read).", evidence=ev)]
    if user != kernel:
        return [Finding(cid, FAIL, NODE, f"NVML reports driver {user} but the loaded kernel module is {kernel}.",
                        evidence=ev, expected=f"NVML driver == kernel module ({kernel})",
                        expected_source="/proc/driver/nvidia/version",
                        remedy="Reboot after a driver upgrade (or reload the nvidia modules); in containers, use "
                               "the host's driver libraries (NVIDIA container toolkit).")]
    return [Finding(cid, PASS, NODE, f"Driver {user} in both NVML and the kernel module.", evidence=ev)]


# ----------------------------------------------------------------------------- memory health

ECC_FN = ("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetMemoryErrorCounter")


@check("gpu.ecc", needs=(PROBE_NVML,))
def check_ecc(ctx: CheckContext) -> list[Finding]:
    """Volatile (since last reset) uncorrectable ECC errors mean corrupted results are possible
    now; aggregate (lifetime) ones are history that the row remapper should have dealt with."""
    cid = "gpu.ecc"

    def judge(g, _nvml):
        comp = gpu_component(g)
        if g.ecc_volatile_uncorrected is None and g.ecc_aggregate_uncorrected is None:
            if g.ecc_mode_current is False:
                return [_ecc_disabled(cid, g)]
            return [not_read(cid, g, "ECC error counts", ECC_FN)]
        # nvmlDeviceGetTotalEccErrors(i, error type, counter type): uncorrected 1 / corrected 0,
        # volatile 0 / aggregate 1
        fn = "nvmlDeviceGetTotalEccErrors"
        ev = (Evidence("volatile uncorrected ECC", g.ecc_volatile_uncorrected, f"{fn}({g.index}, 1, 0)"),
              Evidence("aggregate uncorrected ECC", g.ecc_aggregate_uncorrected, f"{fn}({g.index}, 1, 1)"),
              Evidence("volatile corrected ECC", g.ecc_volatile_corrected, f"{fn}({g.index}, 0, 0)"))
        later = _later_gpu(ctx, g)
        if later is not None and g.ecc_volatile_uncorrected is not None and later.ecc_volatile_uncorrected is not None:
            ev += (Evidence(f"volatile uncorrected after {ctx.window_s:g}s", later.ecc_volatile_uncorrected,
                            f"nvmlDeviceGetTotalEccErrors({g.index}, 1, 0)"),)
        vol = max(g.ecc_volatile_uncorrected or 0, (later.ecc_volatile_uncorrected or 0) if later else 0)
        if vol > 0:
            return [Finding(cid, FAIL, comp, f"GPU{g.index} has {vol} uncorrected ECC error(s) since its last reset.",
                            evidence=ev, expected="0 volatile uncorrected ECC errors",
                            expected_source="DCGM health (volatile DBE); imbue cluster-health",
                            remedy=f"Drain the node and reset GPU{g.index} when idle (nvidia-smi -r -i {g.index}); "
                                   "check gpu.remapped_rows afterwards; RMA if errors return.", action=A.RESET_GPU)]
        out = []
        if g.ecc_mode_current is False:
            out.append(_ecc_disabled(cid, g))
        if (g.ecc_aggregate_uncorrected or 0) > 0:
            out.append(_ecc_lifetime(cid, g, comp, ev))
        if not out:
            out.append(Finding(cid, PASS, comp, f"GPU{g.index}: no uncorrected ECC errors.", evidence=ev))
        return out

    return per_gpu(ctx, cid, judge)


def _ecc_lifetime(cid: str, g: Any, comp: Component, ev: tuple) -> Finding:
    """Uncorrected ECC errors in the GPU's life, none since its last reset. With no remap or page
    retirement pending either, the memory was already repaired: history, so a pass with a note (a
    warning here would fail ``--strict`` for the rest of the GPU's life). A repair still pending
    keeps it a warning (gpu.remapped_rows fails it)."""
    pending = [what for what, v in (("row remap pending", g.remapped_rows_pending),
                                    ("row remap failed", g.remapped_rows_failure),
                                    ("page retirement pending", g.retired_pages_pending)) if v]
    ev = ev + (Evidence("repair pending", ", ".join(pending) or "none",
                        f"nvmlDeviceGetRemappedRows({g.index}) / nvmlDeviceGetRetiredPagesPendingStatus"),)
    n = g.ecc_aggregate_uncorrected
    if pending:
        return Finding(cid, WARN, comp, f"GPU{g.index} had {n} uncorrected ECC error(s) in its lifetime and its "
                       f"repair is not done ({', '.join(pending)}).", evidence=ev,
                       expected="no pending memory repair", expected_source="NVIDIA GPU memory error management",
                       remedy="See gpu.remapped_rows: reset the GPU when idle so the pending repair takes effect.")
    return Finding(cid, PASS, comp, f"GPU{g.index}: no uncorrected ECC error since its last reset (note: {n} in its "
                   "lifetime, repaired: no remap or retirement pending).", evidence=ev,
                   expected="0 volatile uncorrected ECC errors, no repair pending",
                   expected_source="NVIDIA GPU memory error management (row remapping repairs lifetime errors)",
                   details={"lifetime_uncorrected": n})


def _ecc_disabled(cid: str, g: Any) -> Finding:
    return Finding(cid, WARN, gpu_component(g), f"GPU{g.index}: ECC is disabled.",
                   evidence=(Evidence("ECC mode", False, f"nvmlDeviceGetEccMode({g.index})"),),
                   expected="ECC enabled", expected_source="imbue cluster-health (ECC mode must be Enabled)",
                   remedy=f"nvidia-smi -i {g.index} -e 1, then reset the GPU or reboot.")


def _later_same_gpu(ctx: CheckContext, g: Any) -> Any:
    """GPU ``g`` in the window's second sample, by index and, when both have one, the same UUID or
    bus id (a lost GPU answers neither its UUID nor always its bus id)."""
    later = ctx.later_data(PROBE_NVML)
    for lg in getattr(later, "gpus", ()) or ():
        if lg.index != g.index:
            continue
        if lg.uuid and g.uuid and lg.uuid != g.uuid:
            return None
        return lg
    return None


def _later_gpu(ctx: CheckContext, g: Any) -> Any:
    later = ctx.later_data(PROBE_NVML)
    if later is None:
        return None
    for lg in later.gpus:
        if lg.index == g.index and lg.uuid == g.uuid:
            return lg
    return None


# DCGM common/DcgmGPUHardwareLimits.h
MAX_RETIRED_PAGES = 63
RETIRED_DBE_SOFT_LIMIT = 15
ROW_REMAP_UNCORRECTABLE_WARN = 512
# Azure azure_gpu_ecc.nhc: retired pages >= 62 with a pending retirement = retirement table full
RETIRED_TABLE_FULL = 62


@check("gpu.sram_ecc", needs=(PROBE_NVML,))
def check_sram_ecc(ctx: CheckContext) -> list[Finding]:
    """Uncorrectable errors in the GPU's on-chip SRAM (L2, SM, PCIe, microcontrollers). Row remapping
    cannot repair SRAM: NVIDIA's XID 48 flow says to check the SRAM error threshold and follow the
    RMA flow when it is exceeded (``nvmlDeviceGetSramEccErrorStatus`` ``bThresholdExceeded``)."""
    cid = "gpu.sram_ecc"
    fn = "nvmlDeviceGetSramEccErrorStatus"

    def judge(g, _nvml):
        if g.sram_threshold_exceeded is None:
            err = read_error(g, fn)
            if err is not None and err.kind == "not_recorded" and not g.failed:
                return [Finding(cid, SKIP, gpu_component(g), f"GPU{g.index}: SRAM ECC status is not in this record "
                                "(the ccdiag or nvidia-smi that recorded it did not read it).", evidence=(Evidence(
                                    "SRAM ECC error status", "not recorded", f"{fn}({g.index})"),))]
            return [not_read(cid, g, "SRAM ECC error status", (fn,))]
        src = f"{fn}({g.index})"
        ev = (Evidence("SRAM error threshold exceeded", g.sram_threshold_exceeded, src),
              Evidence("uncorrectable SRAM errors since the last reset", g.sram_uncorrected_volatile, src),
              Evidence("uncorrectable SRAM errors, lifetime", g.sram_uncorrected_aggregate, src))
        if g.sram_threshold_exceeded:
            return [Finding(cid, FAIL, gpu_component(g), f"GPU{g.index}: its SRAM uncorrectable-error threshold is "
                            f"exceeded ({g.sram_uncorrected_aggregate} in its life): the on-chip memory cannot be "
                            "repaired.", evidence=ev, expected="threshold not exceeded",
                            expected_source="NVIDIA XID catalogue, XID 48 (SRAM: RMA when the threshold is exceeded)",
                            remedy="Drain the node, run NVIDIA's field diagnostics on this GPU and open an RMA "
                                   "(serial in nvidia-smi -q).", action=A.SERVICE)]
        if g.sram_uncorrected_volatile:
            return [Finding(cid, WARN, gpu_component(g), f"GPU{g.index}: {g.sram_uncorrected_volatile} uncorrectable "
                            "SRAM error(s) since its last reset, below NVIDIA's threshold.", evidence=ev,
                            expected="no uncorrectable SRAM error",
                            expected_source="NVIDIA XID catalogue, XID 48 (SRAM)",
                            remedy=f"Reset GPU{g.index} when idle (nvidia-smi -r -i {g.index}); watch the count: "
                                   "NVIDIA's threshold flag asks for an RMA once set.", action=A.RESET_GPU)]
        return [Finding(cid, PASS, gpu_component(g), f"GPU{g.index}: SRAM below its error threshold "
                        f"({g.sram_uncorrected_aggregate or 0} uncorrectable in its life).", evidence=ev)]

    return per_gpu(ctx, cid, judge)


@check("gpu.remapped_rows", needs=(PROBE_NVML,))
def check_remapped_rows(ctx: CheckContext) -> list[Finding]:
    """Row remapping (Ampere+) and page retirement (earlier GPUs) take bad memory out of service,
    but only after a GPU reset; a pending remap or retirement means the bad memory is still in use."""
    cid = "gpu.remapped_rows"

    def judge(g, _nvml):
        comp = gpu_component(g)
        if g.remapped_rows_pending is not None or g.remapped_rows_failure is not None:
            return [_judge_remap(cid, g, comp)]
        if g.retired_pages_pending is not None or g.retired_pages_dbe is not None or g.retired_pages_sbe is not None:
            return [_judge_retired(cid, g, comp)]
        return [not_read(cid, g, "row remapping / page retirement state",
                         ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPages"))]

    return per_gpu(ctx, cid, judge)


def _judge_remap(cid: str, g: Any, comp: Component) -> Finding:
    src = f"nvmlDeviceGetRemappedRows({g.index})"
    if getattr(g, "remapped_rows_mig", None):
        # MIG mode: NVML answers per GPU instance; the GPU's verdict combines them
        src = "nvmlDeviceGetRemappedRows(" + ", ".join(f"'{g.index}:mig{k}'" for k in g.remapped_rows_mig) + \
            ") (MIG instances)"
    ev = (Evidence("pending", g.remapped_rows_pending, src), Evidence("failure occurred", g.remapped_rows_failure, src),
          Evidence("rows remapped (uncorrectable)", g.remapped_rows_uncorrectable, src),
          Evidence("rows remapped (correctable)", g.remapped_rows_correctable, src))
    if g.remapped_rows_failure:
        return Finding(cid, FAIL, comp, f"GPU{g.index}: a row remapping failed; the bad memory cannot be retired.",
                       evidence=ev, expected="no remap failure", expected_source="DCGM health; Azure azure_gpu_ecc.nhc",
                       remedy="Drain the node and open an RMA for this GPU (serial in nvidia-smi -q).", action=A.SERVICE)
    if g.remapped_rows_pending:
        return Finding(cid, FAIL, comp,
                       f"GPU{g.index}: a row remap is pending; it takes effect only after a GPU reset.",
                       evidence=ev, expected="no pending remap",
                       expected_source="Azure azure_gpu_ecc.nhc (fail); Meta GCM (critical); "
                                       "NVIDIA: reset at next opportunity",
                       remedy=f"Drain the node and reset GPU{g.index} when idle (nvidia-smi -r -i {g.index}) or "
                              "reboot; re-run ccdiag check.", action=A.RESET_GPU)
    if (g.remapped_rows_uncorrectable or 0) >= ROW_REMAP_UNCORRECTABLE_WARN:
        return Finding(cid, WARN, comp,
                       f"GPU{g.index}: {g.remapped_rows_uncorrectable} rows remapped for uncorrectable errors.",
                       evidence=ev, expected=f"< {ROW_REMAP_UNCORRECTABLE_WARN} uncorrectable remaps",
                       expected_source="DCGM DcgmGPUHardwareLimits.h",
                       remedy="Plan an RMA; the remapper is running out of spare rows.")
    return Finding(cid, PASS, comp, f"GPU{g.index}: no pending or failed row remap.", evidence=ev)


def _judge_retired(cid: str, g: Any, comp: Component) -> Finding:
    src = f"nvmlDeviceGetRetiredPages({g.index}, 0|1)"  # multiple single-bit / double-bit
    total = (g.retired_pages_sbe or 0) + (g.retired_pages_dbe or 0)
    ev = (Evidence("retired pages (single-bit)", g.retired_pages_sbe, src),
          Evidence("retired pages (double-bit)", g.retired_pages_dbe, src),
          Evidence("retirement pending", g.retired_pages_pending, f"nvmlDeviceGetRetiredPagesPendingStatus({g.index})"))
    if total >= MAX_RETIRED_PAGES or (g.retired_pages_pending and total >= RETIRED_TABLE_FULL):
        return Finding(cid, FAIL, comp, f"GPU{g.index}: {total} retired pages; the retirement table is (nearly) full.",
                       evidence=ev, expected=f"< {MAX_RETIRED_PAGES} retired pages",
                       expected_source="DCGM DcgmGPUHardwareLimits.h; Azure azure_gpu_ecc.nhc",
                       remedy="Drain the node and open an RMA for this GPU.", action=A.SERVICE)
    if g.retired_pages_pending:
        return Finding(cid, FAIL, comp,
                       f"GPU{g.index}: a page retirement is pending; it takes effect only after a reset.",
                       evidence=ev, expected="no pending retirement",
                       expected_source="DCGM health (pending retirement); NVIDIA memory error management",
                       remedy=f"Drain the node and reset GPU{g.index} when idle (nvidia-smi -r -i {g.index}) "
                              "or reboot.", action=A.RESET_GPU)
    if (g.retired_pages_dbe or 0) > RETIRED_DBE_SOFT_LIMIT:
        return Finding(cid, WARN, comp, f"GPU{g.index}: {g.retired_pages_dbe} pages retired for double-bit errors.",
                       evidence=ev, expected=f"<= {RETIRED_DBE_SOFT_LIMIT} DBE-retired pages",
                       expected_source="DCGM DcgmGPUHardwareLimits.h (soft limit)",
                       remedy="Watch the count; DCGM fails the GPU when it keeps growing.")
    return Finding(cid, PASS, comp, f"GPU{g.index}: {total} retired page(s), none pending.", evidence=ev)


@check("gpu.recovery_action", needs=(PROBE_NVML,))
def check_recovery_action(ctx: CheckContext) -> list[Finding]:
    """The driver's own verdict on what the GPU needs (reset, reboot, drain); DCGM once reported
    healthy while this said reset, so it is read directly."""
    cid = "gpu.recovery_action"
    remedies = {
        "reset": "Drain the node and reset the GPU (nvidia-smi -r -i {i}).",
        "gpu_reset": "Drain the node and reset the GPU (nvidia-smi -r -i {i}).",
        "reboot": "Drain the node and reboot it.",
        "node_reboot": "Drain the node and reboot it.",
        "system_reboot": "Drain the node and reboot it.",
        "drain_p2p": "Stop scheduling peer-to-peer work on this GPU (drain), then reset it.",
        "drain_and_reset": "Drain the node, then reset the GPU (nvidia-smi -r -i {i}).",
        "bus_reset": "Drain the node; a PCIe bus reset (or reboot) is needed.",
        "recover_imex_domain": "Drain the node and recover its IMEX domain (restart nvidia-imex on the "
                               "domain's nodes).",
    }

    def judge(g, _nvml):
        src = f"nvmlDeviceGetFieldValues({g.index}, [230])"  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        if g.recovery_action is None:
            return [not_read(cid, g, "recovery action", ("nvmlDeviceGetFieldValues",))]
        ev = (Evidence("recovery action", g.recovery_action, src),)
        if g.recovery_action == "none":
            return [Finding(cid, PASS, gpu_component(g), f"GPU{g.index}: no recovery action pending.", evidence=ev)]
        return [Finding(cid, FAIL, gpu_component(g),
                        f"GPU{g.index}: the driver asks for recovery action '{g.recovery_action}'.",
                        evidence=ev, expected="none", expected_source="NVML recovery action (driver)",
                        remedy=remedies.get(g.recovery_action, "Drain the node and follow the driver's recovery action "
                                            "(NVIDIA 'Error Recovery and Response Flags').").format(i=g.index),
                        action=A.NVML_RECOVERY.get(g.recovery_action, A.DRAIN))]

    return per_gpu(ctx, cid, judge)


# ----------------------------------------------------------------------------- clocks / thermal

def clock_reasons(g: Any) -> set[str]:
    """Active clock event reasons by name (decoded from the raw mask when only that was kept)."""
    if g.clock_event_names:
        return set(g.clock_event_names)
    if g.clock_event_reasons is not None:
        return set(clock_event_names(g.clock_event_reasons))
    return set()


def is_fault_reason(name: str) -> bool:
    """Hardware slowdowns (thermal, power brake, external) and the thermal software limit mean the
    cooling or power delivery is short; idle, power capping, sync boost and application clocks are
    normal operation."""
    return name.startswith("hw_") or name.startswith("sw_thermal")


@check("gpu.clocks", needs=(PROBE_NVML,))
def check_clocks(ctx: CheckContext) -> list[Finding]:
    """Clocks held down by hardware (thermal, power brake) slow every collective the GPU joins."""
    cid = "gpu.clocks"
    fn = "nvmlDeviceGetCurrentClocksEventReasons"

    def judge(g, _nvml):
        if g.clock_event_reasons is None and not g.clock_event_names:
            return [not_read(cid, g, "clock event reasons", (fn, "nvmlDeviceGetCurrentClocksThrottleReasons"))]
        reasons = clock_reasons(g)
        faults = sorted(r for r in reasons if is_fault_reason(r))
        ev = [Evidence("clock event reasons", sorted(reasons), f"{fn}({g.index})")]
        if g.clock_event_reasons is not None:
            ev.append(Evidence("raw mask", hex(g.clock_event_reasons), f"{fn}({g.index})"))
        if g.temperature_c is not None:
            ev.append(Evidence("temperature C", g.temperature_c, f"nvmlDeviceGetTemperature({g.index}, 0)"))
        if g.power_w is not None:
            ev.append(Evidence("power W / limit W", (g.power_w, g.power_limit_w),
                               f"nvmlDeviceGetPowerUsage({g.index})"))
        if not faults:
            return [Finding(cid, PASS, gpu_component(g),
                            f"GPU{g.index}: no hardware clock slowdown"
                            + (f" (active: {', '.join(sorted(reasons))})." if reasons else "."), evidence=tuple(ev))]
        later = _later_gpu(ctx, g)
        persistent = None
        if later is not None and (later.clock_event_reasons is not None or later.clock_event_names):
            persistent = sorted(r for r in clock_reasons(later) if is_fault_reason(r))
            ev.append(Evidence(f"slowdowns after {ctx.window_s:g}s", persistent, f"{fn}({g.index})"))
        summary = f"GPU{g.index}: clocks held down by {', '.join(faults)}"
        summary += " (still active at the end of the window)." if persistent else "."
        return [Finding(cid, WARN, gpu_component(g), summary, evidence=tuple(ev),
                        expected="no hardware or thermal slowdown",
                        expected_source="DCGM health (thermal/power violations warn)",
                        remedy="Check cooling (fans, inlet temperature, airflow) and power delivery (PSUs, power "
                               "brake signal); compare with the other GPUs' temperatures.")]

    return per_gpu(ctx, cid, judge)


#: degrees below the GPU's own slowdown limit at which a warning starts (time to act before clocks drop)
SLOWDOWN_MARGIN_C = 5.0


def _with_thermal_limits(g: Any) -> tuple[Any, str]:
    """``g`` with known limits where NVML reported none at all, and who says so. The hardware
    catalogue is the one place such limits live (a GPU model is added there once, with its sources);
    a model it has no limits for keeps the GPU's own (none), and the policy's limit speaks."""
    own = "the GPU's own limits (NVML temperature thresholds)"
    if g.temp_slowdown_c is not None or g.temp_shutdown_c is not None or g.temp_gpu_max_c is not None:
        return g, own
    model = gpu_by_name(g.name)
    if model is None or model.thermal("slowdown") is None or model.thermal("shutdown") is None:
        return g, own
    g = dataclasses.replace(g, temp_slowdown_c=model.thermal("slowdown"), temp_shutdown_c=model.thermal("shutdown"),
                            temp_gpu_max_c=model.thermal("max_operating"),
                            temp_mem_max_c=g.temp_mem_max_c or model.thermal("memory_max_operating"))
    return g, f"hardware catalogue ({model.key}: {'; '.join(model.sources)})"


@check("gpu.temperature", needs=(PROBE_NVML,))
def check_temperature(ctx: CheckContext) -> list[Finding]:
    """Temperature against the GPU's own limits (NVML thresholds: slowdown, shutdown, maximum operating,
    memory maximum), GPU and HBM; the policy's limit only where the GPU reports none."""
    cid = "gpu.temperature"
    policy_limit = ctx.policy.temperature_warn_c

    def judge(g, _nvml):
        src = f"nvmlDeviceGetTemperature({g.index}, 0)"  # NVML_TEMPERATURE_GPU
        if g.temperature_c is None:
            return [not_read(cid, g, "temperature", ("nvmlDeviceGetTemperature",))]
        g, own = _with_thermal_limits(g)
        t = g.temperature_c
        ev = [Evidence("temperature C", t, src)]
        thr = f"nvmlDeviceGetTemperatureThreshold({g.index}, ...)"
        if not own.startswith("the GPU's own"):
            thr = own
        for what, value in (("slowdown C", g.temp_slowdown_c), ("shutdown C", g.temp_shutdown_c),
                            ("max operating C", g.temp_gpu_max_c)):
            if value is not None:
                ev.append(Evidence(what, value, thr))
        mem = g.memory_temperature_c
        if mem is not None:
            ev.append(Evidence("memory (HBM) temperature C", mem, f"nvmlDeviceGetFieldValues({g.index}, [82])"))
            if g.temp_mem_max_c is not None:
                ev.append(Evidence("memory max operating C", g.temp_mem_max_c, thr))
        comp, ev = gpu_component(g), tuple(ev)
        cooling = "Check the node's cooling: fans, airflow, inlet temperature and blanking panels; see gpu.clocks."
        if g.temp_shutdown_c is not None and t >= g.temp_shutdown_c - 1:
            return [Finding(cid, FAIL, comp, f"GPU{g.index} at {t:g} C is at its shutdown limit "
                            f"({g.temp_shutdown_c:g} C).", evidence=ev, expected=f"< {g.temp_slowdown_c or g.temp_shutdown_c:g} C",
                            expected_source=own, remedy="Drain the node now. " + cooling)]
        if g.temp_slowdown_c is not None and t >= g.temp_slowdown_c:
            return [Finding(cid, FAIL, comp, f"GPU{g.index} at {t:g} C has reached its slowdown limit "
                            f"({g.temp_slowdown_c:g} C): its clocks are cut.", evidence=ev,
                            expected=f"< {g.temp_slowdown_c:g} C", expected_source=own,
                            remedy="Drain the node. " + cooling)]
        if mem is not None and g.temp_mem_max_c is not None and mem >= g.temp_mem_max_c:
            return [Finding(cid, FAIL, comp, f"GPU{g.index} memory at {mem:g} C has reached its limit "
                            f"({g.temp_mem_max_c:g} C).", evidence=ev, expected=f"< {g.temp_mem_max_c:g} C",
                            expected_source=own, remedy="Drain the node. " + cooling)]
        near = None
        if g.temp_slowdown_c is not None and t >= g.temp_slowdown_c - SLOWDOWN_MARGIN_C:
            near = f"within {SLOWDOWN_MARGIN_C:g} C of its slowdown limit ({g.temp_slowdown_c:g} C)"
        elif g.temp_gpu_max_c is not None and t > g.temp_gpu_max_c:
            near = f"above its maximum operating temperature ({g.temp_gpu_max_c:g} C)"
        elif g.temp_slowdown_c is None and g.temp_gpu_max_c is None and t > policy_limit:
            near = f"above the policy limit ({policy_limit:g} C; the GPU reports no limits of its own)"
        if near:
            return [Finding(cid, WARN, comp, f"GPU{g.index} at {t:g} C is {near}.", evidence=ev,
                            expected=f"<= {(g.temp_gpu_max_c or policy_limit):g} C",
                            expected_source=own if (g.temp_slowdown_c or g.temp_gpu_max_c) else policy_source(ctx),
                            remedy=cooling)]
        limit_text = f"slowdown at {g.temp_slowdown_c:g} C" if g.temp_slowdown_c is not None else \
            f"policy limit {policy_limit:g} C"
        return [Finding(cid, PASS, comp, f"GPU{g.index} at {t:g} C ({limit_text}).", evidence=ev,
                        expected=f"< {(g.temp_slowdown_c or policy_limit):g} C",
                        expected_source=own if g.temp_slowdown_c is not None else policy_source(ctx))]

    return per_gpu(ctx, cid, judge)


# ----------------------------------------------------------------------------- configuration

@check("gpu.persistence_mode", needs=(PROBE_NVML,))
def check_persistence(ctx: CheckContext) -> list[Finding]:
    """Without persistence mode the driver tears the GPUs down between clients; every job start
    then pays driver initialisation and NVML queries are slow."""
    cid = "gpu.persistence_mode"

    def judge(g, _nvml):
        src = f"nvmlDeviceGetPersistenceMode({g.index})"
        if g.persistence_mode is None:
            return [not_read(cid, g, "persistence mode", ("nvmlDeviceGetPersistenceMode",))]
        ev = (Evidence("persistence mode", g.persistence_mode, src),)
        if g.persistence_mode:
            return [Finding(cid, PASS, gpu_component(g), f"GPU{g.index}: persistence mode on.", evidence=ev)]
        if not ctx.policy.require_persistence_mode:
            return [Finding(cid, PASS, gpu_component(g),
                            f"GPU{g.index}: persistence mode off (not required by policy).",
                            evidence=ev, expected_source=policy_source(ctx))]
        return [Finding(cid, WARN, gpu_component(g), f"GPU{g.index}: persistence mode is off.", evidence=ev,
                        expected="on", expected_source=policy_source(ctx),
                        remedy="Enable nvidia-persistenced (systemctl enable --now nvidia-persistenced) or "
                               "nvidia-smi -pm 1.")]

    return per_gpu(ctx, cid, judge)


def _mig_mode(cid: str, g: Any) -> Finding:
    """One GPU's MIG mode: a change pending a reset warns."""
    src = f"nvmlDeviceGetMigMode({g.index})"
    ev = (Evidence("current", g.mig_mode_current, src), Evidence("pending", g.mig_mode_pending, src))
    if g.mig_mode_pending is not None and g.mig_mode_pending != g.mig_mode_current:
        return Finding(cid, WARN, gpu_component(g),
                       f"GPU{g.index}: MIG mode change to {'on' if g.mig_mode_pending else 'off'} is "
                       "pending a GPU reset.",
                       evidence=ev, expected="pending == current",
                       remedy=f"Reset GPU{g.index} when idle (nvidia-smi -r -i {g.index}) or revert the change "
                              f"(nvidia-smi -i {g.index} -mig {int(g.mig_mode_current)}).")
    return Finding(cid, PASS, gpu_component(g), f"GPU{g.index}: MIG {'on' if g.mig_mode_current else 'off'}.",
                   evidence=ev)


def _mig_mixed(cid: str, nvml: Any, modes: dict[int, bool], out: list[Finding]) -> list[Finding]:
    """``out`` with a node mixing MIG and full GPUs named: each GPU whose mode differs from most of
    the node's (its pass dropped), or the node itself when neither mode has the majority."""
    on = sorted(i for i, m in modes.items() if m)
    off = sorted(i for i, m in modes.items() if not m)
    odd = on if len(on) < len(off) else off if len(off) < len(on) else []
    by_index = {g.index: g for g in nvml.gpus}
    for i in odd:  # the GPUs whose mode differs from most of the node's: named one by one
        mine = modes[i]
        peers = len(off) if mine else len(on)
        out = [f for f in out if f.component.gpu != i or f.status != PASS]
        out.append(Finding(cid, WARN, gpu_component(by_index[i]),
                           f"GPU{i}: MIG {'on' if mine else 'off'} while its {peers} peers have MIG "
                           f"{'off' if mine else 'on'}.",
                           evidence=(Evidence("current", mine, f"nvmlDeviceGetMigMode({i})"),
                                     Evidence("peers' MIG mode", not mine, "nvmlDeviceGetMigMode")),
                           expected=f"MIG {'off' if mine else 'on'}, as the other GPUs",
                           remedy=f"Set GPU{i} like the others (nvidia-smi -i {i} -mig {int(not mine)}, then reset "
                                  "it), unless the scheduler is set up for mixed MIG.",
                           details={"mig": mine, "peers_mig": not mine}))
    if not odd:
        out.append(Finding(cid, WARN, NODE, f"MIG is on for GPU(s) {on} and off for GPU(s) {off}.",
                           evidence=tuple(Evidence(f"GPU{i} MIG", m, f"nvmlDeviceGetMigMode({i})")
                                          for i, m in sorted(modes.items())),
                           expected="the same MIG mode on every GPU",
                           remedy="Use one mode per node unless the scheduler is set up for mixed MIG."))
    return out


@check("gpu.mig", needs=(PROBE_NVML,))
def check_mig(ctx: CheckContext) -> list[Finding]:
    """A pending MIG mode change applies only after a reset, and a node mixing MIG and full GPUs
    breaks schedulers and NCCL jobs that assume identical devices."""
    cid = "gpu.mig"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    out: list[Finding] = []
    modes: dict[int, bool] = {}
    for g in sorted(nvml.gpus, key=lambda g: g.index):
        if g.failed:
            out.append(not_read(cid, g, "MIG mode", ("nvmlDeviceGetMigMode",)))
        elif g.mig_mode_current is not None:  # None: no MIG on this GPU
            modes[g.index] = g.mig_mode_current
            out.append(_mig_mode(cid, g))
    if not modes:
        return out + [Finding(cid, SKIP, NODE, "No GPU on this node supports MIG.")]
    if len(set(modes.values())) > 1:
        out = _mig_mixed(cid, nvml, modes, out)
    return out


@check("gpu.processes", needs=(PROBE_NVML,))
def check_processes(ctx: CheckContext) -> list[Finding]:
    """Compute processes on a GPU. During a job they are the job: information, never a warning
    printed before a real problem. A job prolog that wants empty GPUs says so in the policy
    (``require_idle_gpus``): there a leftover process holds memory and SMs the next job expects to
    own, and fails."""
    cid = "gpu.processes"
    strict = ctx.policy.require_idle_gpus

    def judge(g, _nvml):
        src = f"nvmlDeviceGetComputeRunningProcesses({g.index})"
        if g.failed:
            return [not_read(cid, g, "compute processes", ("nvmlDeviceGetComputeRunningProcesses",))]
        if g.compute_processes:
            procs = [(p.pid, p.used_memory_bytes) for p in g.compute_processes]
            pids = ", ".join(str(p) for p, _ in procs)
            if not strict:
                return [Finding(cid, PASS, gpu_component(g),
                                f"GPU{g.index}: in use by {len(procs)} compute process(es) (pids {pids}).",
                                evidence=(Evidence("processes (pid, used bytes)", procs, src),),
                                expected="information (the policy does not ask for idle GPUs)",
                                expected_source=policy_source(ctx, "require_idle_gpus"),
                                details={"in_use": True, "pids": [p for p, _ in procs]})]
            return [Finding(cid, FAIL, gpu_component(g),
                            f"GPU{g.index}: {len(procs)} compute process(es) running (pids {pids}).",
                            evidence=(Evidence("processes (pid, used bytes)", procs, src),),
                            expected="no compute process before a job",
                            expected_source=policy_source(ctx, "require_idle_gpus"),
                            remedy="Kill the stray processes (leftovers of a previous job) before the next job "
                                   "starts, or drain the node if they do not exit.",
                            details={"pids": [p for p, _ in procs]})]
        if read_error(g, "nvmlDeviceGetComputeRunningProcesses") is not None:
            return [not_read(cid, g, "compute processes", ("nvmlDeviceGetComputeRunningProcesses",))]
        return [Finding(cid, PASS, gpu_component(g), f"GPU{g.index}: no compute process.",
                        evidence=(Evidence("processes", 0, src),))]

    return per_gpu(ctx, cid, judge)


@check("gpu.model", needs=(PROBE_NVML,))
def check_model(ctx: CheckContext) -> list[Finding]:
    """A node with the wrong GPU model (or a mixed one) breaks fleet-wide expectations."""
    cid = "gpu.model"
    want = ctx.policy.gpu_model
    if want is None:
        nvml, gated = nvml_gate(ctx, cid)
        if gated:
            return gated
        names = sorted({g.name for g in nvml.gpus if g.name})
        return [Finding(cid, SKIP, NODE, "No GPU model in the policy; not compared.",
                        evidence=(Evidence("models", names, "nvmlDeviceGetName"),))]

    def judge(g, _nvml):
        src = f"nvmlDeviceGetName({g.index})"
        if g.name is None:
            return [not_read(cid, g, "model name", ("nvmlDeviceGetName",))]
        ev = (Evidence("model", g.name, src),)
        if want.lower() in g.name.lower():
            return [Finding(cid, PASS, gpu_component(g), f"GPU{g.index}: {g.name}.", evidence=ev,
                            expected=want, expected_source=policy_source(ctx))]
        return [Finding(cid, FAIL, gpu_component(g), f"GPU{g.index} is a {g.name}, policy expects {want}.", evidence=ev,
                        expected=want, expected_source=policy_source(ctx),
                        remedy="Wrong node type for this policy, or a GPU swapped for another model.")]

    return per_gpu(ctx, cid, judge)


# ----------------------------------------------------------------------------- NVSwitch fabric

FABRIC_OK = ("completed",)
FABRIC_STATUS_OK = ("success", "ok", "nvml_success")
#: systemctl is-active states of a service on its way up, not down
FM_STARTING = ("activating", "reloading")


def _fabric_registration(cid: str, g: Any, ev_fm: Evidence) -> Finding | None:
    """A failure for a GPU whose fabric registration has not completed, or completed with an error;
    None when it completed cleanly."""
    src = f"nvmlDeviceGetGpuFabricInfoV({g.index})"
    ev = (Evidence("fabric state", g.fabric_state, src), Evidence("fabric status", g.fabric_status, src), ev_fm)
    status_ok = g.fabric_status is None or g.fabric_status.strip().lower() in FABRIC_STATUS_OK
    if g.fabric_state in FABRIC_OK and status_ok:
        return None
    if g.fabric_state in FABRIC_OK:
        summary = f"GPU{g.index}: fabric registration completed with error '{g.fabric_status}'."
    else:
        summary = f"GPU{g.index}: fabric registration is '{g.fabric_state}'."
    return Finding(cid, FAIL, gpu_component(g), summary, evidence=ev,
                   expected="fabric state completed, status success",
                   expected_source="NVSwitch present",
                   remedy="Start or restart nvidia-fabricmanager (its version must equal the driver's) and "
                          "check /var/log/fabricmanager.log; reboot if registration stays stuck.")


def _fabric_states(ctx: CheckContext, cid: str, nvml: Any, ev_fm: Evidence) -> tuple[dict[int, str], list[Finding]]:
    """GPU index -> fabric registration state, for the GPUs that report one (the later sample's, when
    registration finished during the counter window), and a failure per GPU not registered."""
    states: dict[int, str] = {}
    out: list[Finding] = []
    for g in sorted(nvml.gpus, key=lambda g: g.index):
        later = _later_same_gpu(ctx, g)
        if later is not None and later.fabric_state not in (None, "not_supported") and not later.failed:
            g = later  # registration that finished during the window counts as finished
        if g.fabric_state is None or g.fabric_state == "not_supported":
            continue
        states[g.index] = g.fabric_state
        f = _fabric_registration(cid, g, ev_fm)
        if f is not None:
            out.append(f)
    return states, out


def _fabric_service(cid: str, fm: str | None, states: dict[int, str], ev_sw: Evidence,
                    ev_fm: Evidence) -> Finding | None:
    """The fabric manager service's state (``systemctl is-active``) against the GPUs' registration:
    starting (warn), not active with GPUs not registered (fail), not active though every GPU is
    registered (warn: likely a container), unreadable with nothing else to judge by (unknown)."""
    completed = bool(states) and all(s in FABRIC_OK for s in states.values())
    if fm in FM_STARTING and not completed:
        return Finding(cid, WARN, node_component("nvidia-fabricmanager"),
                       f"The fabric manager is '{fm}': the GPUs join the NVLink fabric once it has started.",
                       evidence=(ev_sw, ev_fm), expected="active", expected_source="NVSwitch present",
                       remedy="Check again in a minute; if it stays there, see `journalctl -u nvidia-fabricmanager` "
                              "and /var/log/fabricmanager.log.")
    if fm == "active":
        return None
    if fm is None:
        # unreadable here (e.g. a container): every GPU registered, or those that are not are named
        # by their own findings; only with no registration state at all is the fabric unjudged
        if states:
            return None
        return Finding(cid, UNKNOWN, NODE, "NVSwitch present; the fabric manager's state could not be read "
                       "and no GPU reports a fabric registration state (this driver or GPU does not report "
                       "it).", evidence=(ev_sw, ev_fm),
                       remedy="Check `systemctl status nvidia-fabricmanager` on the host.")
    if completed:
        return Finding(cid, WARN, NODE, f"Fabric manager service is '{fm}' here, yet every GPU reports fabric "
                       "registration completed.", evidence=(ev_sw, ev_fm), expected="active",
                       expected_source="NVSwitch present",
                       remedy="If ccdiag runs in a container the service runs on the host; otherwise restart "
                              "nvidia-fabricmanager before the GPUs are reset.")
    return Finding(cid, FAIL, node_component("nvidia-fabricmanager"),
                   f"NVSwitch present but the fabric manager is '{fm}': no GPU can join the NVLink "
                   "fabric until it runs.",
                   evidence=(ev_sw, ev_fm), expected="active", expected_source="NVSwitch present",
                   remedy="systemctl enable --now nvidia-fabricmanager (same version as the driver); check "
                          "/var/log/fabricmanager.log.",
                   details={"root": "fabric_manager_down"})


@check("gpu.fabric_manager", needs=(PROBE_NVML,), uses=(PROBE_SYSTEM, PROBE_PCIE))
def check_fabric_manager(ctx: CheckContext) -> list[Finding]:
    """On NVSwitch systems the fabric manager must have registered every GPU with the fabric;
    until then CUDA cannot use NVLink peers (jobs fail or fall back to PCIe)."""
    cid = "gpu.fabric_manager"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    switches = nvswitches_on_pci(ctx)
    switch_links = [(g.index, lk.link) for g in nvml.gpus for lk in g.nvlinks if lk.remote_device_type == "switch"]
    if not switches and not switch_links:
        return [Finding(cid, SKIP, NODE, "No NVSwitch on this node; fabric manager not needed.")]
    ev_sw = Evidence("NVSwitches", [d.bdf for d in switches] or f"{len(switch_links)} GPU links to a switch",
                     "/sys/bus/pci/devices" if switches else "nvmlDeviceGetNvLinkRemoteDeviceType")
    sysobs = ctx.data(PROBE_SYSTEM)
    fm = sysobs.fabric_manager if sysobs is not None else None
    ev_fm = Evidence("nvidia-fabricmanager", fm, "systemctl is-active nvidia-fabricmanager")
    states, out = _fabric_states(ctx, cid, nvml, ev_fm)
    service = _fabric_service(cid, fm, states, ev_sw, ev_fm)
    if service is not None:
        out.append(service)
    if not out:
        completed = bool(states) and all(s in FABRIC_OK for s in states.values())
        out.append(Finding(cid, PASS, NODE, "NVSwitch present; fabric manager "
                           + (f"{fm}" if fm else "state not readable here") +
                           (f"; every GPU ({len(states)}) reports its fabric registration completed." if completed
                            else "."),
                           evidence=(ev_sw, ev_fm)))
    return out


# ----------------------------------------------------------------------------- fabric health (GB200/GH200)

#: decode_fabric_health keys that say the fabric is working around a fault right now (warn) rather
#: than running without part of it (fail)
FABRIC_RECOVERING = ("route_recovery", "access_timeout_recovery")
FABRIC_HEALTH_TEXT = {"degraded_bandwidth": "NVLink bandwidth degraded", "route_unhealthy": "a route is unhealthy",
                      "route_recovery": "a route is being recovered",
                      "access_timeout_recovery": "recovering from an access timeout",
                      "no_partition_assigned": "no NVLink partition assigned",
                      "fabric_manager_disconnected": "the global fabric manager is disconnected"}
FABRIC_SOURCE = "nvml.h NVML_GPU_FABRIC_HEALTH_MASK_* (nvmlGpuFabricInfo_v2 healthMask)"


def _fabric_odd_one(gpus: list, attr: str) -> dict[int, tuple[Any, Any]]:
    """GPU index -> (its value, the value most of its peers share) for GPUs that differ."""
    values = Counter(getattr(g, attr) for g in gpus if getattr(g, attr) is not None)
    if len(values) < 2:
        return {}
    common, n = values.most_common(1)[0]
    if n * 2 <= sum(values.values()):
        return {}  # no majority: the node is split, not one GPU odd
    return {g.index: (getattr(g, attr), common) for g in gpus
            if getattr(g, attr) is not None and getattr(g, attr) != common}


def _fabric_health_findings(cid: str, g: Any, problems: dict, odd: dict) -> Finding | None:
    src = f"nvmlDeviceGetGpuFabricInfoV({g.index})"
    parts = [FABRIC_HEALTH_TEXT.get(k, k) for k in problems if k != "incorrect_configuration"]
    if problems.get("incorrect_configuration"):
        parts.append(f"configuration: {problems['incorrect_configuration']}")
    for what, (mine, peers) in odd.items():
        parts.append(f"{what} {mine} while its peers are in {what} {peers}")
    if not parts:
        return None
    only_recovering = not odd and all(k in FABRIC_RECOVERING for k in problems)
    ev = (Evidence("fabric health mask", f"0x{g.fabric_health_mask:x}" if g.fabric_health_mask is not None else None,
                   src), Evidence("clique id", g.fabric_clique_id, src),
          Evidence("cluster UUID", g.fabric_cluster_uuid, src))
    return Finding(cid, WARN if only_recovering else FAIL, gpu_component(g),
                   f"GPU{g.index} NVLink fabric: " + "; ".join(parts) + ".", evidence=ev,
                   expected="healthy fabric, same clique and cluster as the other GPUs",
                   expected_source=FABRIC_SOURCE,
                   remedy="Drain the node; check the NVLink switch trays and the fabric manager / NMX logs for this "
                          "GPU's links and partition, then reset the GPU (or reboot) once the fabric is repaired. A "
                          "GPU in another clique or cluster than its peers cannot join their NVLink domain.",
                   details={"problems": problems, "odd": {k: list(v) for k, v in odd.items()}})


@check("gpu.fabric_health", needs=(PROBE_NVML,))
def check_fabric_health(ctx: CheckContext) -> list[Finding]:
    """On NVLink-domain systems (GB200/GH200 NVL) each registered GPU reports a fabric health mask,
    a clique id and a cluster UUID: a GPU with degraded bandwidth, an unhealthy route or too few
    NVLinks, or one whose clique or cluster differs from its peers', is named."""
    cid = "gpu.fabric_health"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    registered = [g for g in sorted(nvml.gpus, key=lambda g: g.index)
                  if not g.failed and g.fabric_state == "completed"]
    if not registered:
        return [Finding(cid, SKIP, NODE, "No GPU reports a completed NVLink fabric registration (no fabric, or "
                        "see gpu.fabric_manager).")]
    cliques = _fabric_odd_one(registered, "fabric_clique_id")
    clusters = _fabric_odd_one(registered, "fabric_cluster_uuid")
    out = []
    for g in registered:
        odd = {}
        if g.index in cliques:
            odd["clique"] = cliques[g.index]
        if g.index in clusters:
            odd["cluster"] = clusters[g.index]
        f = _fabric_health_findings(cid, g, decode_fabric_health(g.fabric_health_mask), odd)
        if f is not None:
            out.append(f)
    if not out:
        ids = sorted({g.fabric_clique_id for g in registered if g.fabric_clique_id is not None})
        out.append(Finding(cid, PASS, NODE, f"{len(registered)} GPU(s) registered with a healthy fabric"
                           + (f", clique {ids[0]}" if len(ids) == 1 else "") + ".",
                           expected="healthy fabric", expected_source=FABRIC_SOURCE))
    return out
