"""XIDs from the kernel log, judged by a catalogue and by age.

Two habits of other tools make operators distrust XID alerts: treating every XID as a hardware
fault (13, 31, 43 ... are raised by an application's own bugs) and alerting on XIDs from long ago
until the log rotates. Here each XID is classified by ``ccdiag/data/xid_catalog.json`` (sources in
``xid_catalog.md``), only those younger than ``policy.xid_window_s`` count (age = kernel uptime at
read time minus the event's kernel timestamp), and ``policy.ignore_xids`` is honoured. Application
errors are reported as pass, never warn or fail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE, gpu_by_bdf, gpu_component, nvml_gate, policy_source
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.readings import normalize_bdf
from ccdiag.core.probenames import PROBE_KMSG, PROBE_NVML

CATALOGUE_SOURCE = ("ccdiag XID catalogue (ccdiag/data/xid_catalog.json, from NVIDIA's XID catalogue, DCGM, "
                    "k8s-device-plugin)")

ACTION_STATUS = {"ignore": PASS, "app_error": PASS, "monitor": WARN, "reset": FAIL, "reboot": FAIL, "drain": FAIL}
FALLEN_OFF_BUS = 79  # the un-numbered "has fallen off the bus" message means the same as XID 79
#: "NVRM: RmInitAdapter failed!": the driver could not initialise the GPU; judged as the
#: catalogue's XID 79 entry would be only where the log gives no number, so it has a code of its own
RM_INIT_FAILED = -1


@dataclass(frozen=True)
class XidEntry:
    code: int
    name: str
    action: str  # one of ACTION_STATUS
    nvidia_action: str | None
    sources: tuple[str, ...]
    note: str | None = None

    @property
    def status(self) -> str:
        return ACTION_STATUS[self.action]


@lru_cache(maxsize=1)
def load_catalog() -> dict[int, XidEntry]:
    text = resources.files("ccdiag").joinpath("data/xid_catalog.json").read_text(encoding="utf-8")
    raw = json.loads(text)["codes"]
    out = {}
    for code, e in raw.items():
        if e["action"] not in ACTION_STATUS:
            raise ValueError(f"xid_catalog.json: XID {code} has unknown action {e['action']!r}")
        out[int(code)] = XidEntry(int(code), e["name"], e["action"], e.get("nvidia_action"),
                                  tuple(e.get("sources", ())), e.get("note"))
    return out


#: the driver's own words for a GPU it could not initialise; not an XID number, so not in the catalogue
RM_INIT_ENTRY = XidEntry(RM_INIT_FAILED, "RmInitAdapter failed: the driver could not initialise the GPU", "reset",
                         None, ("NVIDIA driver kernel message 'NVRM: GPU <bdf>: RmInitAdapter failed!'",),
                         "a GPU that keeps failing to initialise after a reset needs a cold boot (power off), "
                         "then service")


def code_label(code: int) -> str:
    return "RmInitAdapter failure" if code == RM_INIT_FAILED else f"XID {code}"


def classify(code: int) -> XidEntry:
    """The catalogue entry for ``code``; codes not in it are 'monitor' (warn), never pass or fail."""
    if code == RM_INIT_FAILED:
        return RM_INIT_ENTRY
    entry = load_catalog().get(code)
    if entry is not None:
        return entry
    return XidEntry(code, "not in ccdiag's catalogue", "monitor", None, (),
                    "look the code up in NVIDIA's XID catalogue (docs.nvidia.com, 'Xid Errors')")


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


def _remedy(entry: XidEntry, gpu_label: str, index: int | None) -> str:
    reset = f"nvidia-smi -r -i {index}" if index is not None else "nvidia-smi -r -i <gpu>"
    base = {
        "ignore": "No action needed.",
        "app_error": "Raised by an application (its own fault); the node stays in service. See the job's logs.",
        "monitor": f"Not a reason to drain on its own; watch {gpu_label} for repeats and related errors.",
        "reset": f"Drain the node and reset {gpu_label} when idle ({reset}); reboot if the reset fails.",
        "reboot": "Drain the node and reboot it; if the GPU does not come back, open an RMA.",
        "drain": f"Drain the node and investigate {gpu_label}'s hardware before returning it to service.",
    }[entry.action]
    return f"{base} Note: {entry.note}." if entry.note else base


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
    how many were older, how many the policy ignores, and the UUIDs the log maps addresses to."""

    groups: dict[tuple[str | None, int], list[tuple[Any, float | None]]]
    older: int
    ignored: dict[int, int]
    uuids: dict[str, str]


def _window(kmsg: Any, window_s: float, ignore: set[int]) -> _Window:
    w = _Window({}, 0, {}, {})
    for ev in kmsg.events:
        key = _key_bdf(ev.bdf)
        if ev.kind == "gpu_uuid" and key and ev.device:
            w.uuids[key] = ev.device
            continue
        code = _xid_code(ev)
        if code is None:
            continue
        age = kmsg.uptime_s - ev.time_s if kmsg.uptime_s is not None and ev.time_s is not None else None
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


def _xid_finding(cid: str, code: int, events: list, comp_label: tuple, source: str, window_s: float) -> Finding:
    comp, label, index = comp_label
    entry = classify(code)
    ages = [a for _, a in events if a is not None]
    numbered = [e for e, _ in events if e.kind == "xid"]
    last_ev = numbered[-1] if numbered else events[-1][0]  # the XID line says more than its echo
    when = f"most recent {human_age(min(ages))} ago" if ages else "time unknown"
    n = len(events)
    summary = (f"{code_label(code)} ({entry.name}) on {label}: {n} message(s) in the last {human_age(window_s)}, {when}; "
               f"{entry.action.replace('_', ' ')}.")
    evidence = [Evidence("kernel message", last_ev.message, source),
                Evidence("count in window", n, source),
                Evidence("youngest age s", round(min(ages), 1) if ages else None,
                         "/proc/uptime minus kernel timestamp")]
    if entry.nvidia_action:
        evidence.append(Evidence("NVIDIA immediate action", entry.nvidia_action, "NVIDIA XID catalogue"))
    pids = sorted({e.pid for e, _ in events if e.pid is not None})
    if pids:
        evidence.append(Evidence("pids", pids, source))
    return Finding(cid, entry.status, comp, summary, evidence=tuple(evidence),
                   expected="no XID that needs action", expected_source=CATALOGUE_SOURCE,
                   remedy=_remedy(entry, label, index),
                   details={"xid": code, "action": entry.action, "count": n, "sources": list(entry.sources)})


def _no_xid(ctx: CheckContext, cid: str, kmsg: Any, w: _Window, source: str) -> Finding:
    window = ctx.policy.xid_window_s
    parts = [f"{w.older} older"] if w.older else []
    if w.ignored:
        parts.append("ignored by policy: " + ", ".join(f"XID {c} x{k}" for c, k in sorted(w.ignored.items())))
    return Finding(cid, PASS, NODE,
                   f"No XID in the last {human_age(window)}" + (f" ({'; '.join(parts)})." if parts else "."),
                   evidence=(Evidence("lines scanned", kmsg.lines_scanned, source),
                             Evidence("XIDs older than the window", w.older, source),
                             Evidence("ignored XIDs", sorted(w.ignored), policy_source(ctx))),
                   expected=f"no XID needing action within {human_age(window)}",
                   expected_source=policy_source(ctx))


def _kmsg_unusable(ctx: CheckContext, cid: str) -> Finding:
    run = ctx.runs.get(PROBE_KMSG)
    if run is None:
        return Finding(cid, SKIP, NODE, "Not evaluated: the kmsg probe was not run.")
    why = f"{run.status}: {run.error or ''}".strip()
    return Finding(cid, UNKNOWN, NODE, f"Kernel log not readable ({why}); XIDs not judged.",
                   evidence=(Evidence("kmsg probe", why, "/dev/kmsg"),),
                   remedy="Run as root, or allow reading the kernel log (sysctl kernel.dmesg_restrict=0).")


@check("xid.recent", uses=(PROBE_KMSG, PROBE_NVML))
def check_xids(ctx: CheckContext) -> list[Finding]:
    """XIDs in the kernel log within the policy window, one finding per GPU and XID code."""
    cid = "xid.recent"
    nvml, gated = nvml_gate(ctx, cid)
    kmsg = ctx.data(PROBE_KMSG)
    no_xids = kmsg is None or not any(_xid_code(e) is not None for e in kmsg.events)
    if gated and gated[0].status == SKIP and no_xids:
        return gated  # no GPU here and nothing in the log that says otherwise
    if kmsg is None:
        return [_kmsg_unusable(ctx, cid)]
    source = kmsg.source or "/dev/kmsg"
    w = _window(kmsg, ctx.policy.xid_window_s, set(ctx.policy.ignore_xids))
    gpus = gpu_by_bdf(nvml) if nvml is not None else {}
    out = [_xid_finding(cid, code, events, _xid_component(bdf, gpus, w.uuids), source, ctx.policy.xid_window_s)
           for (bdf, code), events in sorted(w.groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))]
    return out or [_no_xid(ctx, cid, kmsg, w, source)]
