"""Which findings are consequences of another, so a verdict reads root cause first.

A GPU that fell off the bus makes every other GPU check on it "unknown" and the node's GPU count
fail; one NVSwitch down makes every GPU's link to it fail; a fabric manager that is down leaves
every GPU unregistered. Printed side by side, the consequences drown the cause, and each tells the
operator to reset or RMA a part that is fine. The rules live here as data, one :class:`CauseRule`
per "this explains that", applied once after the checks ran: a new cause is one entry in
:data:`RULES`. Chains are followed to their root (XID 79 -> GPU lost -> its other checks), so the
text report folds every consequence once, under the root it follows from; the JSON report links
them (``caused_by`` names the root's ``key``), and the Slurm drain reason names the root.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from ccdiag.core.actions import RANK, action_of, worst
from ccdiag.core.findings import FAIL, PASS, SKIP, STATUS_RANK, UNKNOWN, WARN, Finding

Match = Callable[[Finding, Finding], bool]
FALLEN_OFF_BUS = 79  # ccdiag.checks.xid.FALLEN_OFF_BUS
RM_INIT_FAILED = -1  # ccdiag.checks.xid.RM_INIT_FAILED: "RmInitAdapter failed!" has no XID number


def key(f: Finding) -> str:
    """A finding's key in one report: ``check|component name`` (``gpu.lost|GPU6``), and the subject
    where a check reports one component more than once (``xid.recent|GPU6|XID 79``)."""
    return f.key


# ------------------------------------------------------------------ how a cause meets its effect

def same_gpu(cause: Finding, effect: Finding) -> bool:
    """The same GPU, by index or (for a GPU NVML lost, named by its PCI address) by bus id."""
    c, e = cause.component, effect.component
    if c.gpu is not None and e.gpu == c.gpu:
        return True
    return c.bdf is not None and e.bdf == c.bdf and e.kind in ("gpu", "nvlink", "pcie_link")


def count_of(cause: Finding, effect: Finding) -> bool:
    """The node's GPU count, or its finding on the very GPU PCI sees and NVML does not."""
    e = effect.component
    return e.kind == "node" or (e.bdf is not None and e.bdf == cause.component.bdf)


def anything(cause: Finding, effect: Finding) -> bool:
    return True


def same_port(cause: Finding, effect: Finding) -> bool:
    c, e = cause.component, effect.component
    return c.device is not None and e.device == c.device and (e.port is None or e.port == c.port)


def nic_of_gpu_down(cause: Finding, effect: Finding) -> bool:
    """ib.gpudirect's "closer NIC has no active port": the closer NIC is the one that is down."""
    return effect.details.get("inactive_nic") == cause.component.device


def same_switch(cause: Finding, effect: Finding) -> bool:
    sw = cause.details.get("switch_bdf")
    return sw is not None and effect.details.get("switch_bdf") == sw


def link_behind_switch(cause: Finding, effect: Finding) -> bool:
    """An NVLink finding the switch finding lists: one link (``GPU3 NVLink 7``), or a GPU's links
    summarised (``GPU3 NVLinks``) when that GPU is among those that lost links to the switch."""
    name = effect.component.name
    if name in cause.details.get("links", ()):
        return True
    return name.endswith(" NVLinks") and effect.component.gpu in cause.details.get("gpus", ())


def acs_bridge(cause: Finding, effect: Finding) -> bool:
    return effect.component.kind == "bridge" and effect.component.bdf in cause.details.get("bridges", ())


def init_port(cause: Finding, effect: Finding) -> bool:
    return f"{effect.component.device}/{effect.component.port}" in cause.details.get("ports", ())


def gpu_without_nic(cause: Finding, effect: Finding) -> bool:
    return effect.component.name in cause.details.get("gpus_without_nic", ())


def is_xid(*codes: int) -> Match:
    return lambda cause, effect: effect.details.get("xid") in codes


def has_xid(*codes: int) -> Callable[[Finding], bool]:
    return lambda f: f.details.get("xid") in codes


def is_root_kind(*kinds: str) -> Callable[[Finding], bool]:
    return lambda f: f.details.get("root") in kinds


def always(f: Finding) -> bool:
    return True


def xid_on_same_gpu(*codes: int) -> Match:
    """An XID finding with one of ``codes`` on the cause's GPU (the other lines of one GPU event,
    passing ones too: an XID 45 "caused by previous Xid 149" belongs under it), or another
    check's problem on that GPU."""
    def match(cause: Finding, effect: Finding) -> bool:
        if effect.check == "xid.recent":
            return effect.details.get("xid") in codes and same_gpu(cause, effect)
        return effect.status != PASS and same_gpu(cause, effect)
    return match


#: XIDs NVIDIA's catalogue describes as following another on the same GPU: 45 (preemptive cleanup
#: "due to previous errors") and 154 (the recovery action changed, "seen in conjunction with other Xids")
FOLLOWERS = (45, 154)
#: an uncorrectable memory error (48, and 171/172 that say which memory it hit)
MEMORY_DBE = (48,)
#: what a memory error brings on the same GPU: remap event/failure (63/64), containment (94/95),
#: an unrecovered ECC escape (140), resource retirement (156/157), the DRAM/SRAM supplements
MEMORY_FOLLOW = FOLLOWERS + (63, 64, 92, 94, 95, 140, 156, 157, 171, 172)
#: the GPU's memory state that such an event leaves (counters, pending remap, the driver's action)
MEMORY_STATE = ("gpu.ecc", "gpu.remapped_rows", "gpu.recovery_action", "gpu.sram_ecc")
#: a GPU event folds its problems, and the passing XIDs that belong to it (45 after 149)
EVENT_STATUSES = (FAIL, UNKNOWN, WARN, PASS)
#: NVLink errors the GPU logs for one of its links (74; NVLink5: 144-150, 155; link training 136)
LINK_XIDS = (74, 136, 144, 145, 146, 147, 148, 149, 150, 155)


@dataclass(frozen=True)
class CauseRule:
    """``cause`` (a check id, with a status in ``cause_statuses`` and ``cause_when`` true) explains
    every finding whose check starts with one of ``effects``, whose status is in ``effect_statuses``
    and for which ``match(cause, effect)`` holds. ``why`` says it for the reader of this table."""

    name: str
    cause: str
    effects: tuple[str, ...]
    match: Match
    why: str
    cause_statuses: tuple[str, ...] = (FAIL,)
    effect_statuses: tuple[str, ...] = (FAIL, UNKNOWN, WARN)
    cause_when: Callable[[Finding], bool] = always


#: every "this explains that" ccdiag knows; earlier entries win when two rules claim one finding
RULES: tuple[CauseRule, ...] = (
    CauseRule("xid79-lost", "xid.recent", ("gpu.lost",), same_gpu,
              "XID 79 (or RmInitAdapter failing) in the kernel log is why NVML lost the GPU",
              cause_when=has_xid(FALLEN_OFF_BUS, RM_INIT_FAILED)),
    CauseRule("xid79-count", "xid.recent", ("gpu.count",), count_of,
              "a GPU that fell off the bus (or never initialised) is one GPU fewer",
              cause_when=has_xid(FALLEN_OFF_BUS, RM_INIT_FAILED)),
    CauseRule("lost-answers-nothing", "gpu.lost", ("gpu.", "nvlink.", "pcie.replay", "gpu.fabric"), same_gpu,
              "a lost GPU answers nothing: its other GPU, NVLink and PCIe-replay checks cannot be judged",
              effect_statuses=(UNKNOWN, WARN, FAIL, SKIP)),
    CauseRule("lost-count", "gpu.lost", ("gpu.count",), count_of,
              "the node has one usable GPU fewer than expected"),
    CauseRule("switch-sxid-links", "nvswitch.sxid", ("nvswitch.links_down",), same_switch,
              "a fatal SXid on an NVSwitch takes the GPU links behind it down"),
    CauseRule("switch-sxid-xid74", "nvswitch.sxid", ("xid.recent",), is_xid(74),
              "the Fabric Manager guide: a fatal SXid is propagated to the GPUs on that switch port as XID 74"),
    CauseRule("switch-links", "nvswitch.links_down", ("nvlink.down",), link_behind_switch,
              "GPUs lost their links to one NVSwitch: the switch, not the GPUs"),
    CauseRule("fm-down-fabric", "gpu.fabric_manager", ("gpu.fabric", "nvlink.down", "nvswitch.links_down"),
              anything, "a fabric manager that is not running registers no GPU with the NVSwitch fabric",
              cause_when=is_root_kind("fabric_manager_down")),
    CauseRule("port-down-flaps", "ib.port_state", ("ib.link_flaps", "ib.rate", "ib.counters"), same_port,
              "the link-down lines in the kernel log and the low rate are the port that is down"),
    CauseRule("port-down-gpudirect", "ib.port_state", ("ib.gpudirect",), nic_of_gpu_down,
              "a GPU's own NIC is down, so its nearest usable NIC is farther away"),
    CauseRule("rail-nic-gpudirect", "ib.rail_socket", ("ib.gpudirect",), gpu_without_nic,
              "a GPU whose rail NIC was put on the other socket reaches a NIC across the CPU"),
    CauseRule("no-sm-init", "ib.subnet_manager", ("ib.port_state", "ib.rate"), init_port,
              "ports with a physical link stay INIT until a subnet manager configures them"),
    CauseRule("iommu-acs", "platform.iommu", ("pcie.acs",), anything,
              "the kernel turns ACS redirection on for the IOMMU's isolation groups",
              cause_statuses=(FAIL, WARN), effect_statuses=(FAIL, WARN)),
    CauseRule("acs-platform", "pcie.acs", ("pcie.acs",), acs_bridge,
              "ACS on many bridges at once is one platform setting (BIOS or kernel), not many faults",
              cause_when=is_root_kind("acs_platform")),
    # -- one GPU event, one root: the event's first line explains what it leaves on that GPU
    CauseRule("dbe-event", "xid.recent", ("xid.recent",) + MEMORY_STATE, xid_on_same_gpu(*MEMORY_FOLLOW),
              "an uncorrectable memory error (XID 48) brings its remap (63/64), containment (94/95), cleanup "
              "(45), recovery action (154), ECC counters and pending remap on the same GPU: one event",
              cause_when=has_xid(*MEMORY_DBE),
              effect_statuses=EVENT_STATUSES),
    CauseRule("containment-event", "xid.recent", ("xid.recent",) + MEMORY_STATE,
              xid_on_same_gpu(*(FOLLOWERS + (63, 64, 156, 157))),
              "an uncontained memory error (XID 95, or 140) explains the GPU's ECC counters, pending remap, "
              "recovery action and the cleanup XIDs after it", cause_when=has_xid(95, 140),
              effect_statuses=EVENT_STATUSES),
    CauseRule("ecc-event", "gpu.ecc", ("gpu.remapped_rows", "gpu.recovery_action", "gpu.sram_ecc", "xid.recent"),
              xid_on_same_gpu(*(FOLLOWERS + (63, 64, 92, 156))),
              "uncorrected ECC errors since the last reset are why a row remap is pending and the driver asks "
              "for a reset",
              effect_statuses=EVENT_STATUSES),
    CauseRule("remap-event", "gpu.remapped_rows", ("gpu.recovery_action", "xid.recent"),
              xid_on_same_gpu(*(FOLLOWERS + (63, 64))),
              "a pending or failed row remap is why the driver asks for a reset",
              effect_statuses=EVENT_STATUSES),
    CauseRule("link-event", "xid.recent", ("nvlink.", "gpu.recovery_action", "xid.recent"),
              xid_on_same_gpu(*FOLLOWERS), "an NVLink error XID on a GPU explains its link findings and the "
              "recovery action that follows", cause_when=has_xid(*LINK_XIDS),
              effect_statuses=EVENT_STATUSES),
    CauseRule("link-down-event", "nvlink.down", ("nvlink.errors", "gpu.recovery_action", "xid.recent"),
              xid_on_same_gpu(*FOLLOWERS), "a GPU's link that went down explains its error counters and the "
              "recovery action",
              effect_statuses=EVENT_STATUSES),
    CauseRule("xid-follows", "xid.recent", ("gpu.recovery_action", "xid.recent"), xid_on_same_gpu(*FOLLOWERS),
              "XID 45 and 154 follow another XID on the same GPU (NVIDIA's catalogue), as does the driver's "
              "recovery action",
              effect_statuses=EVENT_STATUSES),
)


def _direct_cause(f: Finding, by_check: dict[str, list[Finding]]) -> Finding | None:
    for rule in RULES:
        if f.status not in rule.effect_statuses or not f.check.startswith(rule.effects):
            continue
        for c in by_check.get(rule.cause, ()):
            if c is f or c.status not in rule.cause_statuses or not rule.cause_when(c):
                continue
            if f.check == rule.cause and f.details.get("root"):
                continue  # a root finding is never folded under its own kind
            if rule.match(c, f):
                return c
    return None


def link_causes(findings: list[Finding]) -> list[Finding]:
    """The same findings, each consequence carrying ``caused_by`` = the key of its root cause
    (chains followed to the end; a cycle stops where it would repeat)."""
    by_check: dict[str, list[Finding]] = {}
    for f in findings:
        by_check.setdefault(f.check, []).append(f)
    direct = {id(f): _direct_cause(f, by_check) for f in findings}
    out = []
    for f in findings:
        cause, seen = direct[id(f)], {id(f)}
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            nxt = direct.get(id(cause))
            if nxt is None or id(nxt) in seen:
                break
            cause = nxt
        out.append(dataclasses.replace(f, caused_by=key(cause)) if cause is not None else f)
    return _one_action_per_root(out)


def _one_action_per_root(findings: list[Finding]) -> list[Finding]:
    """Each root takes the most disruptive action of its event (a failed row remap under an XID 48
    asks for service, not the reset the XID alone would), with that consequence's remedy: one event,
    one remedy. The consequences keep their own for the record."""
    by_root: dict[str, list[Finding]] = {}
    for f in findings:
        if f.caused_by and f.status in (FAIL, WARN, UNKNOWN):
            by_root.setdefault(f.caused_by, []).append(f)
    out = []
    for f in findings:
        effects = by_root.get(key(f)) if not f.caused_by else None
        if effects:
            top = max(effects, key=lambda e: RANK.get(action_of(e), 0))
            if RANK.get(action_of(top), 0) > RANK.get(action_of(f), 0) and top.remedy:
                f = dataclasses.replace(
                    f, action=action_of(top),
                    remedy=f"{top.remedy} ({top.check} on {top.component.name} follows from this and asks for "
                           f"{action_of(top).replace('_', ' ')}.)",
                    details={**f.details, "action_from": key(top)})
        out.append(f)
    return out


def drain_reason(findings: list[Finding], limit: int = 60) -> str | None:
    """``ccdiag: reboot gpu.lost GPU6 (+8)``: the node's action, the root-cause failure that asks for
    it (the first in report order) and how many other root failures there are, at most ``limit`` characters (Slurm shows reasons in narrow
    columns; the action comes first so a cut never loses it). None when nothing failed."""
    fails = [f for f in ordered_roots(findings) if f.status == FAIL]
    if not fails:
        return None
    action = node_action(findings)
    f = next((r for r in fails if action_of(r) == action), fails[0])  # the root that needs that action
    text = (f"ccdiag: {action} {f.check} {f.component.name}"
            + (f" (+{len(fails) - 1})" if len(fails) > 1 else ""))
    text = " ".join(text.replace('"', "").split())
    return text if len(text) <= limit else text[: limit - 1] + "~"


def node_action(findings: list[Finding]) -> str:
    """What the node needs: the most disruptive action among its root problems (a consequence's
    action is its root's business). See :mod:`ccdiag.core.actions`."""
    return worst(action_of(f) for f in roots(findings) if f.status in (FAIL, WARN, UNKNOWN))


def roots(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if not f.caused_by]


def ordered_roots(findings: list[Finding]) -> list[Finding]:
    """The root findings, worst first and, within a status, those that explain the most first (an
    XID 79 that explains a lost GPU and a short GPU count comes before a lone failure), then the most
    disruptive action."""
    explained = Counter(f.caused_by for f in findings if f.caused_by)
    return sorted(roots(findings), key=lambda f: (STATUS_RANK.get(f.status, 9), -explained.get(key(f), 0),
                                                  -RANK.get(action_of(f), 0)))


def effects_of(cause: Finding, findings: list[Finding]) -> list[Finding]:
    k = key(cause)
    return [f for f in findings if f.caused_by == k]
