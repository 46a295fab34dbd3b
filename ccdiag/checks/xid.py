"""XIDs from the kernel log, judged by NVIDIA's XID catalogue, by age and by what happened since.

Three habits of other tools make operators distrust XID alerts: treating every XID as a hardware
fault (13, 31, 43 ... are raised by an application's own bugs: the job's, not the node's), alerting
on XIDs from long ago until the log rotates, and alerting on XIDs the driver has since cleared by
initialising the GPU afresh. Here each XID is classified by NVIDIA's catalogue
(``ccdiag/data/xid_catalog.json``: every code NVIDIA documents with its resolution bucket, and the few
places ccdiag departs from it, each with its reason; ``xid_catalog.md``), the finding's action comes
from the bucket (:mod:`ccdiag.core.actions`), only XIDs younger than ``policy.xid_window_s`` count
(age = kernel uptime at read time minus the event's kernel timestamp), an XID older than the
driver's last load (its banner in the kernel log) no longer fails, ``policy.ignore_xids`` is
honoured, and the kernel log read at the end of a ``--window`` is judged too: an XID that arrived
during the window is not missed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE, gpu_by_bdf, gpu_component, nvml_gate, policy_source
from ccdiag.core import actions as A
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.readings import normalize_bdf
from ccdiag.core.probenames import PROBE_KMSG, PROBE_NVML

STATUSES = {"pass": PASS, "warn": WARN, "fail": FAIL}
FALLEN_OFF_BUS = 79  # the un-numbered "has fallen off the bus" message means the same as XID 79
#: "NVRM: RmInitAdapter failed!": the driver could not initialise the GPU; judged as the
#: catalogue's XID 79 entry would be only where the log gives no number, so it has a code of its own
RM_INIT_FAILED = -1
RECOVERY_CHANGED = 154
#: NVLink5 XIDs whose line carries the driver's own severity word; NVIDIA's decode sheet for them
#: resolves the non-fatal rows as IGNORE and the fatal ones as RESET_GPU
NVLINK5 = frozenset(range(144, 151))


@dataclass(frozen=True)
class XidEntry:
    code: int
    name: str
    action: str  # one of ccdiag.core.actions.ACTIONS
    status: str  # pass | warn | fail
    nvidia_action: str | None  # NVIDIA's resolution bucket (immediate action), as NVIDIA names it
    nvidia_investigatory: str | None = None
    mnemonic: str | None = None
    note: str | None = None  # why ccdiag departs from the bucket, or what else to know
    known: bool = True  # in NVIDIA's catalogue

    @property
    def scope(self) -> str:
        """"job" for the XIDs an application raises and a job restart clears; "node" otherwise."""
        return "job" if self.action == A.RESTART_JOB else "node"


def _raw() -> dict:
    return json.loads(resources.files("ccdiag").joinpath("data/xid_catalog.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def load_catalog() -> dict[int, XidEntry]:
    raw = _raw()
    status_of = raw["status_of_action"]
    decisions = raw.get("decisions", {})
    out = {}
    for key, e in raw["codes"].items():
        code = int(key)
        name = e.get("description") or e.get("mnemonic") or f"XID {code}"
        bucket = e.get("immediate")
        d = decisions.get(key)
        if d is not None:
            action, status, note = d["action"], d["status"], d["why"]
        elif e.get("unused"):
            action, status = A.NONE, "warn"
            note = ("NVIDIA lists this code as unused on Ampere and later GPUs; on an older GPU see NVIDIA's "
                    "archived XID list")
        else:
            action, note = A.from_bucket(bucket), None
            if action is None:
                action, note = A.NONE, "NVIDIA's catalogue names no resolution bucket for this code yet"
                status = "warn"
            else:
                status = status_of[action]
        if action not in A.RANK or status not in STATUSES:
            raise ValueError(f"xid_catalog.json: XID {code}: action {action!r} / status {status!r}")
        out[code] = XidEntry(code, name, action, STATUSES[status], bucket, e.get("investigatory"),
                             e.get("mnemonic"), note)
    return out


@lru_cache(maxsize=1)
def catalogue_version() -> str:
    """``NVIDIA XID catalogue 2025-10-29 (172 codes)``: what the report names as its source."""
    cat = _raw().get("catalogue", {})
    return f"NVIDIA XID catalogue {cat.get('version', '?')} ({cat.get('codes_documented', '?')} codes)"


#: the driver's own words for a GPU it could not initialise; not an XID number, so not in the catalogue
RM_INIT_ENTRY = XidEntry(RM_INIT_FAILED, "RmInitAdapter failed: the driver could not initialise the GPU", A.RESET_GPU,
                         FAIL, None, None, None,
                         "a GPU that keeps failing to initialise after a reset needs a cold boot (power off), "
                         "then service")


def code_label(code: int) -> str:
    return "RmInitAdapter failure" if code == RM_INIT_FAILED else f"XID {code}"


def classify(code: int) -> XidEntry:
    """The catalogue entry for ``code``; codes NVIDIA does not document warn, never pass or fail."""
    if code == RM_INIT_FAILED:
        return RM_INIT_ENTRY
    entry = load_catalog().get(code)
    if entry is not None:
        return entry
    return XidEntry(code, "not in NVIDIA's XID catalogue", A.NONE, WARN, None, None, None,
                    f"look the code up in NVIDIA's XID catalogue (docs.nvidia.com, 'Xid Errors'); ccdiag reads "
                    f"{catalogue_version()}", known=False)


#: XID 154's message: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
_RECOVERY_TO = re.compile(r"\bto\s+0x[0-9a-fA-F]{1,8}\s*\(([^)]{1,40})\)")
#: the words NVIDIA's catalogue lists for that message -> action
RECOVERY_WORDS = {"none": A.NONE, "drain p2p": A.DRAIN, "drain and reset": A.RESET_GPU,
                  "gpu reset required": A.RESET_GPU, "node reboot required": A.REBOOT}
_SEVERITY = re.compile(r"\b(Non-?fatal|Fatal)\b", re.IGNORECASE)


def refine(entry: XidEntry, message: str) -> XidEntry:
    """The entry as the line itself refines it: XID 154 names the recovery action it changed to;
    an NVLink5 XID (144-150) names its severity (non-fatal rows are IGNORE in NVIDIA's decode)."""
    import dataclasses

    if entry.code == RECOVERY_CHANGED:
        m = _RECOVERY_TO.search(message)
        action = RECOVERY_WORDS.get(m.group(1).strip().lower()) if m else None
        if action is not None:
            return dataclasses.replace(entry, action=action, status=PASS if action == A.NONE else FAIL,
                                       note=f"the driver now asks for: {m.group(1).strip()}")  # type: ignore[union-attr]
    if entry.code in NVLINK5:
        m = _SEVERITY.search(message.split("):", 1)[-1])
        if m and m.group(1).lower().startswith("non"):
            return dataclasses.replace(entry, action=A.NONE, status=WARN,
                                       note="the driver calls it non-fatal (NVIDIA's decode: IGNORE); watch the link")
    return entry


def human_age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def _key_bdf(bdf: str | None) -> str | None:
    return normalize_bdf(bdf) if bdf else None


#: what an operator does, per action (the GPU's reset command filled in)
def _remedy(entry: XidEntry, gpu_label: str, index: int | None) -> str:
    reset = f"nvidia-smi -r -i {index}" if index is not None else "nvidia-smi -r -i <gpu>"
    base = {
        A.NONE: "No action needed on the node." if entry.status == PASS else
                f"Not a reason to drain on its own; watch {gpu_label} for repeats and related errors.",
        A.RESTART_JOB: "Raised by or contained to an application: restart the job (see its logs); the node stays "
                       "in service.",
        A.DRAIN: f"Drain the node and have {gpu_label}'s software and firmware checked before returning it.",
        A.RESET_GPU: f"Drain the node and reset {gpu_label} when idle ({reset}); reboot if the reset fails or the "
                     "XID returns.",
        A.REBOOT: "Drain the node and reboot it; if the GPU does not come back, open an RMA.",
        A.SERVICE: f"Drain the node and have {gpu_label}'s hardware serviced (power and mechanics, field "
                   "diagnostics, RMA).",
    }[entry.action]
    bucket = f" NVIDIA's immediate action: {entry.nvidia_action}." if entry.nvidia_action else ""
    return f"{base}{bucket}" + (f" Note: {entry.note}." if entry.note else "")


def _xid_code(ev: Any) -> int | None:
    if ev.kind == "xid" and ev.code is not None:
        return ev.code
    if ev.kind == "fallen_off_bus":
        return FALLEN_OFF_BUS
    if ev.kind == "rm_init_failed":
        return RM_INIT_FAILED
    return None


@dataclass
class _Window:
    """The XID events of the kernel log sorted into the policy window: groups per (GPU, code),
    how many were older, how many the policy ignores, the UUIDs the log maps addresses to, the
    driver's last load and the events that arrived during a ``--window``."""

    groups: dict[tuple[str | None, int], list[tuple[Any, float | None]]]
    older: int
    ignored: dict[int, int]
    uuids: dict[str, str]
    driver_load: Any = None  # the latest "NVRM: loading NVIDIA UNIX ... Kernel Module" event
    arrived: frozenset = frozenset()  # ids of events first seen in the read at the window's end


def merged_events(kmsg: Any, later: Any) -> tuple[list, frozenset, float | None]:
    """The events of both reads of the kernel log, each once, in order; the ids of those only the
    later read saw (they arrived during the window); the uptime of the latest read."""
    from collections import Counter

    events = list(kmsg.events)
    if later is None or not getattr(later, "events", None):
        return events, frozenset(), kmsg.uptime_s
    seen = Counter((e.time_s, e.message) for e in events)
    arrived = []
    for e in later.events:
        k = (e.time_s, e.message)
        if seen[k]:
            seen[k] -= 1
            continue
        arrived.append(e)
    uptime = later.uptime_s if later.uptime_s is not None else kmsg.uptime_s
    return events + arrived, frozenset(id(e) for e in arrived), uptime


def _window(events: list, uptime_s: float | None, window_s: float, ignore: set[int],
            arrived: frozenset = frozenset()) -> _Window:
    w = _Window({}, 0, {}, {}, None, arrived)
    for ev in events:
        key = _key_bdf(ev.bdf)
        if ev.kind == "gpu_uuid" and key and ev.device:
            w.uuids[key] = ev.device
            continue
        if ev.kind == "driver_load":
            if w.driver_load is None or (ev.time_s or 0) >= (w.driver_load.time_s or 0):
                w.driver_load = ev
            continue
        code = _xid_code(ev)
        if code is None:
            continue
        age = uptime_s - ev.time_s if uptime_s is not None and ev.time_s is not None else None
        if age is not None and age > window_s:
            w.older += 1
        elif code in ignore:
            w.ignored[code] = w.ignored.get(code, 0) + 1
        else:
            w.groups.setdefault((_key_bdf(ev.bdf), code), []).append((ev, age))
    return w


def _xid_component(bdf: str | None, gpus: dict, uuids: dict) -> tuple[Component, str, int | None]:
    g = gpus.get(bdf) if bdf else None
    if g is not None:
        return gpu_component(g), f"GPU{g.index}", g.index
    if bdf:
        return Component("gpu", f"GPU at {bdf}", bdf=bdf, uuid=uuids.get(bdf)), f"the GPU at {bdf}", None
    return NODE, "the GPU named in the message", None


#: the driver prints its "loading" banner after probing the GPUs, so what a GPU logs while the
#: module loads (a GPU that fell off the bus in the probe routine, NVIDIA/NVSentinel#155) comes just
#: before the banner: only events this much older than the banner predate the load
DRIVER_LOAD_SPAN_S = 120.0


def _cleared_by(events: list, w: _Window) -> Any:
    """The driver load that came after every event of a group (the GPU was initialised afresh)."""
    load = w.driver_load
    if load is None or load.time_s is None:
        return None
    times = [e.time_s for e, _ in events]
    return load if all(t is not None and t < load.time_s - DRIVER_LOAD_SPAN_S for t in times) else None


def _xid_finding(cid: str, code: int, events: list, comp_label: tuple, source: str, window_s: float,
                 w: _Window) -> Finding:
    comp, label, index = comp_label
    numbered = [e for e, _ in events if e.kind == "xid"]
    last_ev = numbered[-1] if numbered else events[-1][0]  # the XID line says more than its echo
    entry = refine(classify(code), last_ev.message)
    ages = [a for _, a in events if a is not None]
    when = f"most recent {human_age(min(ages))} ago" if ages else "time unknown"
    n = len(events)
    new = sum(1 for e, _ in events if id(e) in w.arrived)
    cleared = _cleared_by(events, w)
    status, action = entry.status, entry.action
    verdict = entry.action.replace("_", " ") if entry.status != PASS or entry.action != A.NONE else "no action"
    if entry.scope == "job" and entry.status == PASS:
        verdict = "the job's fault, not the node's: restart the job"
    if cleared is not None and status in (FAIL, WARN):
        status, action = PASS, A.NONE
        verdict = (f"logged before the driver was loaded again ({human_age(cleared.time_s)} after boot): the GPU was "
                   "initialised afresh since")
    summary = (f"{code_label(code)} ({entry.name}) on {label}: {n} message(s) in the last {human_age(window_s)}"
               + (f", {new} during the window" if new else "") + f", {when}; {verdict}.")
    evidence = [Evidence("kernel message", last_ev.message, source),
                Evidence("count in window", n, source),
                Evidence("youngest age s", round(min(ages), 1) if ages else None,
                         "/proc/uptime minus kernel timestamp")]
    if entry.nvidia_action:
        evidence.append(Evidence("NVIDIA immediate action", entry.nvidia_action, catalogue_version()))
    if cleared is not None:
        evidence.append(Evidence("driver loaded after it", cleared.message, source))
    pids = sorted({e.pid for e, _ in events if e.pid is not None})
    if pids:
        evidence.append(Evidence("pids", pids, source))
    return Finding(cid, status, comp, summary, evidence=tuple(evidence), subject=code_label(code),
                   expected="no XID that needs action", expected_source=catalogue_version(),
                   remedy=None if cleared is not None else _remedy(entry, label, index), action=action,
                   details={"xid": code, "action": action, "scope": entry.scope, "count": n,
                            "nvidia_action": entry.nvidia_action, "catalogue": catalogue_version(),
                            "during_window": new, "cleared_by_driver_load": cleared is not None,
                            "times_s": sorted({e.time_s for e, _ in events if e.time_s is not None})})


def _no_xid(ctx: CheckContext, cid: str, scanned: int, w: _Window, source: str) -> Finding:
    window = ctx.policy.xid_window_s
    parts = [f"{w.older} older"] if w.older else []
    if w.ignored:
        parts.append("ignored by policy: " + ", ".join(f"XID {c} x{k}" for c, k in sorted(w.ignored.items())))
    return Finding(cid, PASS, NODE,
                   f"No XID in the last {human_age(window)}" + (f" ({'; '.join(parts)})." if parts else "."),
                   evidence=(Evidence("lines scanned", scanned, source),
                             Evidence("XIDs older than the window", w.older, source),
                             Evidence("ignored XIDs", sorted(w.ignored), policy_source(ctx))),
                   expected=f"no XID needing action within {human_age(window)}",
                   expected_source=policy_source(ctx), details={"catalogue": catalogue_version()})


def _kmsg_unusable(ctx: CheckContext, cid: str) -> Finding:
    run = ctx.runs.get(PROBE_KMSG)
    if run is None:
        return Finding(cid, SKIP, NODE, "Not evaluated: the kmsg probe was not run.")
    why = f"{run.status}: {run.error or ''}".strip()
    return Finding(cid, UNKNOWN, NODE, f"Kernel log not readable ({why}); XIDs not judged.",
                   evidence=(Evidence("kmsg probe", why, "/dev/kmsg"),),
                   remedy="Run as root, or allow reading the kernel log (sysctl kernel.dmesg_restrict=0).")


def kernel_log(ctx: CheckContext) -> tuple[Any, list, frozenset, float | None]:
    """(the first read, every event of both reads once, the ids that arrived during the window, the
    latest uptime): the kernel log as the checks judge it, whole window included."""
    kmsg = ctx.data(PROBE_KMSG)
    if kmsg is None:
        return None, [], frozenset(), None
    later = ctx.later_data(PROBE_KMSG) if ctx.later else None
    events, arrived, uptime = merged_events(kmsg, later)
    return kmsg, events, arrived, uptime


@check("xid.recent", uses=(PROBE_KMSG, PROBE_NVML))
def check_xids(ctx: CheckContext) -> list[Finding]:
    """XIDs in the kernel log within the policy window (both reads of a ``--window`` run), one
    finding per GPU and XID code."""
    cid = "xid.recent"
    nvml, gated = nvml_gate(ctx, cid)
    kmsg, events, arrived, uptime = kernel_log(ctx)
    no_xids = kmsg is None or not any(_xid_code(e) is not None for e in events)
    if gated and gated[0].status == SKIP and no_xids:
        return gated  # no GPU here and nothing in the log that says otherwise
    if kmsg is None:
        return [_kmsg_unusable(ctx, cid)]
    source = kmsg.source or "/dev/kmsg"
    w = _window(events, uptime, ctx.policy.xid_window_s, set(ctx.policy.ignore_xids), arrived)
    gpus = gpu_by_bdf(nvml) if nvml is not None else {}
    out = [_xid_finding(cid, code, evs, _xid_component(bdf, gpus, w.uuids), source, ctx.policy.xid_window_s, w)
           for (bdf, code), evs in sorted(w.groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))]
    return out or [_no_xid(ctx, cid, kmsg.lines_scanned, w, source)]
