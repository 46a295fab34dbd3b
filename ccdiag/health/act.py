"""From a verdict to what the scheduler and the operator's hook should do: one decision, made the
same way for the Slurm health check, the idle-time loop and Kubernetes.

* a failure puts each failing root cause on its rung of the ladder (:mod:`ccdiag.health.ladder`);
  the node's rung is the highest. A node not yet out is taken out (drained, condition ``False``)
  only within the drain cap (:mod:`ccdiag.health.cap`), otherwise the decision is ``hold``: report
  and alert, leave it in service. A node already out for ccdiag's reason gets its reason refreshed
  (the rung may have climbed), and once it is out and idle the operator's command for its rung runs
  (:mod:`ccdiag.health.remedy`), once per root and rung. A node out for someone else's reason is
  left alone;
* a pass clears the open roots (their next failure climbs a rung) and puts back a node that was out
  for ccdiag's own reason;
* no verdict changes nothing.

Every decision and step is a log line and lands in the state (:mod:`ccdiag.health.state`), from which
the metrics are written (:mod:`ccdiag.health.metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ccdiag.core.actions import DRAIN
from ccdiag.health import ladder
from ccdiag.health.cap import CapDecision, FleetCount, decide as cap_decide
from ccdiag.health.config import HealthConfig
from ccdiag.health.remedy import HookResult, run_hook
from ccdiag.health.state import HealthState

DRAIN_VERB, RESUME, HOLD, KEEP, NOTHING = "drain", "resume", "hold", "keep", "none"
#: a reason's longest length (Slurm shows reasons in narrow columns)
REASON_MAX = 60


@dataclass
class Decision:
    verb: str
    reason: str | None = None  # the drain reason, under the caller's prefix
    rung: ladder.Rung | None = None
    roots: list[ladder.Root] = field(default_factory=list)
    cap: CapDecision | None = None
    hook: str | None = None  # the rung whose operator command is due now
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """``verb|reason-or-why``: what ``ccdiag health act`` prints for the Slurm scripts."""
        text = self.reason if self.verb == DRAIN_VERB else "; ".join(self.notes)
        return f"{self.verb}|{' '.join((text or '').split())}"


def reason_text(prefix: str, rung: ladder.Rung, others: int) -> str:
    text = f"{prefix} {rung.action} {rung.root.check} {rung.root.component}" + (f" (+{others})" if others else "")
    text = " ".join(text.replace('"', "").split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "~"


def _verdict_roots(report: dict[str, Any]) -> list[ladder.Root]:
    roots = ladder.roots_of_report(report)
    if roots:
        return roots
    verdict = report.get("verdict") or {}
    return [ladder.Root(key="check|node", check="check", component="node", action=str(verdict.get("action") or DRAIN),
                        summary=str(verdict.get("reason") or "the check failed"))]


def decide(report: dict[str, Any], st: HealthState, cfg: HealthConfig, *, prefix: str, node: str, out: bool,
           ours: bool, idle_out: bool, count: Callable[[], FleetCount] | None, now: float) -> Decision:
    """The decision for ``report`` (a ``ccdiag check`` JSON report). ``out``: the node is out of
    scheduling now; ``ours``: for ccdiag's reason under ``prefix``; ``idle_out``: out with no job
    left on it. ``count``: how to count the fleet for the cap (None: there is none to count, no cap).
    Updates ``st`` (ladder, cap)."""
    status = (report.get("verdict") or {}).get("status")
    if status == "fail":
        roots = _verdict_roots(report)
        rungs = ladder.record_failures(st.ladder, roots, now, cfg.ladder_window_s)
        top = rungs[0]
        dec = Decision(DRAIN_VERB, reason_text(prefix, top, len(rungs) - 1), top, roots)
        dec.notes.append(f"{top.root.check} {top.root.component}: {top.why}")
        if out and not ours:
            dec.verb = KEEP
            dec.notes.append(f"{node} is already out for another reason; left as it is")
        elif out:
            record = st.ladder.get(top.root.key)
            if idle_out and cfg.remediation.get(top.action) and ladder.hook_due(record, top.action):
                dec.hook = top.action
            elif cfg.remediation.get(top.action) and not idle_out:
                dec.notes.append(f"the {top.action} command waits until no job is left on {node}")
        else:
            dec.cap = _cap(cfg, count, node)
            if not dec.cap.allowed:
                dec.verb = HOLD
            if not dec.cap.allowed or dec.cap.count.source in ("none", "error"):
                dec.notes.append(dec.cap.why)
        st.cap = {**(dec.cap.to_json() if dec.cap else st.cap), "at": now, "held": dec.verb == HOLD,
                  "node_out": dec.verb in (DRAIN_VERB, KEEP) or out}
        return dec
    if status in ("pass", "warn", "skip"):
        cleared = ladder.record_pass(st.ladder, now, cfg.ladder_window_s)
        dec = Decision(RESUME if out and ours else NOTHING)
        if cleared:
            dec.notes.append(f"passed; cleared {', '.join(cleared)} (a new failure climbs a rung)")
        if out and not ours:
            dec.verb = KEEP
            dec.notes.append(f"passed; {node} stays out for another reason")
        st.cap = {**st.cap, "at": now, "held": False, "node_out": out and not ours}
        return dec
    return Decision(KEEP, notes=[f"no verdict ({status or 'none'}); {node} left as it is"])


def _cap(cfg: HealthConfig, count: Callable[[], FleetCount] | None, node: str) -> CapDecision:
    """The cap's answer. A fleet that cannot be counted (``count`` None: the caller has no scheduler
    to ask; or the count failed: slurmctld unreachable) cannot be held to the cap: the node is taken
    out as it was before there was a cap, and the decision says the cap was not kept."""
    if count is None:
        return CapDecision(True, cfg.cap.min_out_nodes, FleetCount(0, 0, source="none"),
                           "no fleet to count here: the drain cap does not apply")
    try:
        fleet = count()
    except Exception as exc:  # noqa: BLE001 - any failure to count is said in words, never raised
        return CapDecision(True, cfg.cap.min_out_nodes, FleetCount(0, 0, source="error"),
                           f"the drain cap could not be kept: the fleet could not be counted ({exc})")
    return cap_decide(cfg.cap, fleet, node, already_out=False)


def hook_values(dec: Decision, node: str) -> dict[str, str]:
    gpus = sorted({r.gpu for r in dec.roots if r.gpu is not None})
    return {"node": node, "gpus": ",".join(str(g) for g in gpus), "action": dec.rung.action if dec.rung else "",
            "reason": dec.reason or "", "root": dec.rung.root.key if dec.rung else ""}


def run_due_hook(dec: Decision, cfg: HealthConfig, st: HealthState, node: str, now: float,
                 timeout_s: float | None = None) -> HookResult | None:
    """Run the operator's command the decision says is due, and record it (ladder, steps)."""
    if dec.hook is None or dec.rung is None:
        return None
    result = run_hook(dec.hook, cfg.remediation[dec.hook], hook_values(dec, node),
                      timeout_s if timeout_s is not None else cfg.remediation_timeout_s)
    ladder.record_remedy(st.ladder, dec.rung.root.key, dec.hook, now, result.outcome == "ok")
    st.count_step(dec.hook, result.outcome, now)
    return result


__all__ = ["DRAIN_VERB", "Decision", "HOLD", "KEEP", "NOTHING", "RESUME", "decide", "hook_values", "reason_text",
           "run_due_hook"]
