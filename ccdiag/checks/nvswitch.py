"""NVSwitches as components: their own errors (SXids) and the GPU links behind each of them.

On an HGX baseboard every GPU reaches every NVSwitch, so one switch that goes down takes one or
more links of *every* GPU with it. Judged GPU by GPU that reads as dozens of "GPUk NVLink n is
down, reset or RMA the GPU", while the part to act on is the switch. Here the switches are
components of their own, found from PCI (sysfs), from NVML (the far end of each active link) and
from the kernel log (the address an SXid names), each with the GPU links behind it:

* ``nvswitch.sxid`` judges SXids (the NVSwitch driver's error lines) from the catalogue in
  ``ccdiag/data/sxid_catalog.json`` (the Fabric Manager user guide's non-fatal, fatal and always
  fatal codes; sources in ``sxid_catalog.md``), within the same window as XIDs;
* ``nvswitch.links_down`` names a switch that GPUs lost their links to: every GPU with links
  down towards it makes one root finding on the switch, and the per-link ``nvlink.down`` findings
  are folded under it (:mod:`ccdiag.checks.causes`).

Which switch an inactive link led to: NVML gives no far end for a link that is down (an all-zero
or ``FFFFFFFF:FF:FF.0`` placeholder address), so it is read from the same link index on the GPUs
whose link is up (HGX wiring is the same for every GPU of a baseboard), and a switch that no active
link reaches at all is the one every unmapped inactive link led to.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE, nvml_gate, nvswitches_on_pci
from ccdiag.checks.xid import human_age
from ccdiag.core import actions as A
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.probenames import PROBE_KMSG, PROBE_NVML, PROBE_PCIE
from ccdiag.core.readings import normalize_bdf

CATALOGUE_SOURCE = ("ccdiag SXid catalogue (ccdiag/data/sxid_catalog.json, from NVIDIA's Fabric Manager user guide, "
                    "'NVSwitch SXid Errors')")
ACTION_STATUS = {"monitor": WARN, "reset_fabric": FAIL, "reboot": FAIL}
#: the catalogue's actions in ccdiag's vocabulary (ccdiag.core.actions): a fatal SXid needs the GPUs
#: and NVSwitches behind the port reset, an always-fatal one the whole host rebooted
SXID_ACTION = {"monitor": A.NONE, "reset_fabric": A.RESET_GPU, "reboot": A.REBOOT}
#: the addresses NVML gives for the far end of a link that has none (link down, nothing there)
PLACEHOLDER_BDFS = ("ffffffff:ff:ff.0", "0000:00:00.0", "ffff:ff:ff.0")


@dataclass(frozen=True)
class SxidEntry:
    code: int
    name: str
    cls: str  # non_fatal | fatal | always_fatal
    action: str  # key of ACTION_STATUS
    section: str | None = None

    @property
    def status(self) -> str:
        return ACTION_STATUS[self.action]


@lru_cache(maxsize=1)
def load_catalog() -> dict[int, SxidEntry]:
    raw = json.loads(resources.files("ccdiag").joinpath("data/sxid_catalog.json").read_text(encoding="utf-8"))
    out = {}
    for code, e in raw["codes"].items():
        if e["action"] not in ACTION_STATUS:
            raise ValueError(f"sxid_catalog.json: SXid {code} has unknown action {e['action']!r}")
        out[int(code)] = SxidEntry(int(code), e["name"], e["class"], e["action"], e.get("section"))
    return out


def classify(code: int, severity: str | None = None) -> SxidEntry:
    """The catalogue's entry; a code it lacks is judged by the driver's own word (Fatal fails)."""
    entry = load_catalog().get(code)
    if entry is not None:
        return entry
    fatal = (severity or "").lower() == "fatal"
    return SxidEntry(code, "not in ccdiag's catalogue", "fatal" if fatal else "non_fatal",
                     "reset_fabric" if fatal else "monitor")


def is_placeholder(bdf: str | None) -> bool:
    return bdf is None or bdf.lower() in PLACEHOLDER_BDFS or bdf.lower().startswith("ffffffff:")


def switch_component(bdf: str, device: str | None = None) -> Component:
    return Component("nvswitch", f"NVSwitch {bdf}", bdf=bdf, device=device)


_REMEDY = {
    "monitor": "Not a reason to drain on its own; watch the switch for repeats and for fatal SXids.",
    "reset_fabric": ("Drain the node; stop the jobs using the GPUs behind this switch, then reset the GPUs and "
                     "NVSwitches (or reboot the node) and restart nvidia-fabricmanager. If the SXid returns on the "
                     "same switch port, the baseboard needs service."),
    "reboot": "Drain the node and reboot it: an always-fatal SXid leaves the whole NVSwitch fabric unusable until "
              "every GPU and NVSwitch is reset.",
}


def _sxid_events(ctx: CheckContext) -> tuple[dict[tuple[str, int], list], int, Any]:
    from ccdiag.checks.xid import kernel_log

    km, events, _arrived, uptime = kernel_log(ctx)  # both reads of a --window run: the whole window
    groups: dict[tuple[str, int], list] = {}
    older = 0
    if km is None:
        return groups, older, None
    window = ctx.policy.xid_window_s
    for ev in events:
        if ev.kind != "sxid" or ev.code is None or not ev.bdf:
            continue
        age = uptime - ev.time_s if uptime is not None and ev.time_s is not None else None
        if age is not None and age > window:
            older += 1
            continue
        groups.setdefault((ev.bdf, ev.code), []).append((ev, age))
    return groups, older, km


def _sxid_finding(bdf: str, code: int, events: list, source: str, window_s: float) -> Finding:
    severity = next((e.severity for e, _ in events if e.severity), None)
    entry = classify(code, severity)
    device = next((e.device for e, _ in events if e.device), None)
    links = sorted({e.link for e, _ in events if e.link is not None})
    ages = [a for _, a in events if a is not None]
    head = next((e for e, _ in events if e.severity), events[-1][0])  # the line with the severity and link
    when = f"most recent {human_age(min(ages))} ago" if ages else "time unknown"
    word = {"non_fatal": "non-fatal", "fatal": "fatal", "always_fatal": "always fatal"}[entry.cls]
    summary = (f"NVSwitch {bdf}: SXid {code} ({entry.name}, {word})"
               + (f" on switch port(s) {', '.join(str(k) for k in links)}" if links else "")
               + f": {len(events)} line(s) in the last {human_age(window_s)}, {when}.")
    evidence = [Evidence("kernel message", head.message, source), Evidence("lines in window", len(events), source)]
    if severity:
        evidence.append(Evidence("driver severity", severity, source))
    if entry.section:
        evidence.append(Evidence("catalogue class", f"{entry.cls} ({entry.section})", CATALOGUE_SOURCE))
    return Finding("nvswitch.sxid", entry.status, switch_component(bdf, device), summary, evidence=tuple(evidence),
                   subject=f"SXid {code}",
                   expected="no SXid that needs action", expected_source=CATALOGUE_SOURCE,
                   remedy=_REMEDY[entry.action], action=SXID_ACTION[entry.action],
                   details={"sxid": code, "class": entry.cls, "action": entry.action, "switch_bdf": bdf,
                            "switch_ports": links, "count": len(events)})


@check("nvswitch.sxid", uses=(PROBE_KMSG, PROBE_PCIE, PROBE_NVML))
def check_sxid(ctx: CheckContext) -> list[Finding]:
    """NVSwitch errors (SXids) in the kernel log within the policy window, one finding per switch
    and code, judged by the Fabric Manager user guide's class of the code."""
    cid = "nvswitch.sxid"
    groups, older, km = _sxid_events(ctx)
    switches = known_switches(ctx)
    if km is None:
        if not switches:
            return [Finding(cid, SKIP, NODE, "No NVSwitch on this node and no kernel log read.")]
        run = ctx.runs.get(PROBE_KMSG)
        why = f"{run.status}: {run.error or ''}".strip() if run is not None else "the kmsg probe was not run"
        return [Finding(cid, UNKNOWN, NODE, f"NVSwitch present but the kernel log was not read ({why}); SXids not "
                        "judged.", remedy="Run as root, or allow reading the kernel log "
                        "(sysctl kernel.dmesg_restrict=0).")]
    if not groups:
        if not switches:
            return [Finding(cid, SKIP, NODE, "No NVSwitch on this node.")]
        return [Finding(cid, PASS, NODE, f"No SXid from the {len(switches)} NVSwitch(es) in the last "
                        f"{human_age(ctx.policy.xid_window_s)}" + (f" ({older} older)." if older else "."),
                        evidence=(Evidence("NVSwitches", sorted(switches), "PCI, NVML link far ends"),
                                  Evidence("SXids older than the window", older, km.source or "/dev/kmsg")),
                        expected="no SXid that needs action", expected_source=CATALOGUE_SOURCE)]
    source = km.source or "/dev/kmsg"
    return [_sxid_finding(bdf, code, events, source, ctx.policy.xid_window_s)
            for (bdf, code), events in sorted(groups.items())]


# ------------------------------------------------------------------------------ links behind a switch

def known_switches(ctx: CheckContext) -> set[str]:
    """Every NVSwitch address the node shows: PCI, the far end of active GPU links, SXid lines."""
    out = {normalize_bdf(d.bdf) for d in nvswitches_on_pci(ctx)}
    nvml = ctx.data(PROBE_NVML)
    for g in getattr(nvml, "gpus", ()) or ():
        for lk in g.nvlinks:
            if lk.active and lk.remote_device_type == "switch" and not is_placeholder(lk.remote_bus_id):
                out.add(normalize_bdf(lk.remote_bus_id))
    km = ctx.data(PROBE_KMSG)
    for ev in getattr(km, "events", ()) or ():
        if ev.kind == "sxid" and ev.bdf and not is_placeholder(ev.bdf):
            out.add(ev.bdf)
    return {s for s in out if s}


def link_map(gpus: list) -> dict[int, str]:
    """Link index -> the switch that link index reaches on the GPUs whose link is up (majority)."""
    votes: dict[int, Counter] = {}
    for g in gpus:
        for lk in g.nvlinks:
            if lk.active and lk.remote_device_type == "switch" and not is_placeholder(lk.remote_bus_id):
                votes.setdefault(lk.link, Counter())[normalize_bdf(lk.remote_bus_id)] += 1
    return {k: c.most_common(1)[0][0] for k, c in votes.items()}


def links_behind(gpus: list, switches: set[str]) -> tuple[dict[str, list], dict[str, int]]:
    """Per switch: the inactive GPU links that led to it (``(gpu, link)``), and how many active
    links reach it. Inactive links whose switch no GPU shows go to the switches no active link
    reaches, when there is exactly one such switch."""
    mapping = link_map(gpus)
    active: Counter[str] = Counter(bdf for g in gpus for lk in g.nvlinks
                                   if lk.active and lk.remote_device_type == "switch"
                                   and not is_placeholder(lk.remote_bus_id)
                                   for bdf in [normalize_bdf(lk.remote_bus_id)] if bdf)
    silent = sorted(s for s in switches if active.get(s, 0) == 0)
    down: dict[str, list] = {}
    for g in gpus:
        for lk in g.nvlinks:
            if lk.active is not False:
                continue
            sw = mapping.get(lk.link)
            if sw is None and len(silent) == 1:
                sw = silent[0]
            if sw is not None:
                down.setdefault(sw, []).append((g, lk))
    return down, dict(active)


@check("nvswitch.links_down", needs=(PROBE_NVML,), uses=(PROBE_PCIE, PROBE_KMSG), what="NVSwitch links")
def check_links_down(ctx: CheckContext) -> list[Finding]:
    """An NVSwitch that two or more GPUs lost links to is the component to act on; one GPU with
    links down towards a switch the others still reach is that GPU's fault (``nvlink.down``)."""
    cid = "nvswitch.links_down"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    switches = known_switches(ctx)
    if not switches:
        return [Finding(cid, SKIP, NODE, "No NVSwitch on this node.")]
    gpus = [g for g in sorted(nvml.gpus, key=lambda g: g.index) if not g.failed and g.nvlinks]
    if not gpus:
        return [Finding(cid, UNKNOWN, NODE, "NVSwitch present but no GPU's NVLink state was read.")]
    down, active = links_behind(gpus, switches)
    out = []
    for sw in sorted(switches):
        lost = down.get(sw, [])
        gpus_hit = sorted({g.index for g, _ in lost})
        comp = switch_component(sw)
        ev = (Evidence("active GPU links to it", active.get(sw, 0), "nvmlDeviceGetNvLinkRemotePciInfo (active links)"),
              Evidence("GPU links down towards it", [f"GPU{g.index} NVLink {lk.link}" for g, lk in lost],
                       "nvmlDeviceGetNvLinkState (same link index on the other GPUs leads to this switch)"))
        if len(gpus_hit) >= 2:
            every = len(gpus_hit) == len(gpus)
            out.append(Finding(
                cid, FAIL, comp,
                f"NVSwitch {sw}: {len(lost)} GPU link(s) down towards it from "
                + ("every GPU" if every else f"{len(gpus_hit)} of {len(gpus)} GPUs")
                + f" ({active.get(sw, 0)} still active): the switch or its baseboard side, not the GPUs.",
                evidence=ev, expected="every GPU's links to the switch active", expected_source="NVSwitch baseboard",
                remedy="Drain the node; check this switch's SXids (nvswitch.sxid) and /var/log/fabricmanager.log, "
                       "reset the GPUs and NVSwitches (or reboot) and restart nvidia-fabricmanager; if the switch "
                       "stays down, the baseboard needs service. The GPUs themselves need no RMA for this.",
                details={"switch_bdf": sw, "gpus": gpus_hit,
                         "links": [f"GPU{g.index} NVLink {lk.link}" for g, lk in lost]}))
        else:
            out.append(Finding(cid, PASS, comp, f"NVSwitch {sw}: {active.get(sw, 0)} GPU link(s) active"
                               + (f"; {len(lost)} down from one GPU only (see nvlink.down)." if lost else "."),
                               evidence=ev))
    return out
