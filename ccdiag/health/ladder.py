"""The escalation ladder: which rung a failing root cause is on, and when it climbs.

Every root finding names an action (:mod:`ccdiag.core.actions`); a failure takes the node out of
scheduling at least (``drain``). The ladder's rungs are ``drain``, ``reset_gpu``, ``reboot`` and
``service``, in that order. A root starts on its own action's rung. It climbs one rung when it fails
again after the step of its rung was taken - the operator's remediation command for that rung ran,
or the node went back into service after a passing check - within ``window_s`` of its last failure:
a GPU reset that did not hold asks for a reboot, a reboot that did not hold asks for service. A root
never goes below its own action, ``service`` is the top, and a root not seen failing for a window
starts again from its own action.

Pure functions of the state's ladder records (``HealthState.ladder``: root key -> record), so the
same rules hold for the Slurm health check, the idle-time loop and Kubernetes, and are tested from
tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ccdiag.core.actions import DRAIN, RANK, REBOOT, RESET_GPU, SERVICE

#: the rungs, least disruptive first
LADDER: tuple[str, ...] = (DRAIN, RESET_GPU, REBOOT, SERVICE)
#: steps kept per root (the oldest are dropped)
MAX_STEPS = 20


@dataclass(frozen=True)
class Root:
    """A failing root cause as the JSON report names it."""

    key: str  # "xid.recent|GPU6|XID 79"
    check: str
    component: str
    action: str
    gpu: int | None = None
    summary: str = ""


@dataclass(frozen=True)
class Rung:
    root: Root
    action: str  # the rung it is on now
    why: str  # how it got there, in words
    climbed: bool = False


def floor(action: str) -> str:
    """A failure's rung: its own action, at least ``drain`` (a failure always takes the node out)."""
    return action if RANK.get(action, 0) >= RANK[DRAIN] else DRAIN


def above(action: str) -> str:
    """The rung above ``action`` (``service`` stays ``service``)."""
    rung = floor(action)
    i = LADDER.index(rung)
    return LADDER[min(i + 1, len(LADDER) - 1)]


def _higher(a: str, b: str) -> str:
    return a if RANK.get(a, 0) >= RANK.get(b, 0) else b


def stepped_since_failure(record: dict[str, Any]) -> str | None:
    """What put the node back after the record's last failure, if anything: its rung's remediation
    ran, or a check passed. None when the root has been failing without a break."""
    last = record.get("last_failed")
    if not isinstance(last, (int, float)):
        return None
    remedied = record.get("remedied")
    cleared = record.get("cleared")
    if isinstance(remedied, (int, float)) and remedied >= last:
        return f"its {record.get('action', DRAIN)} step ran"
    if isinstance(cleared, (int, float)) and cleared >= last:
        return "the node passed and went back into service"
    return None


def _cleared_since_failure(record: dict[str, Any]) -> bool:
    last, cleared = record.get("last_failed"), record.get("cleared")
    return isinstance(last, (int, float)) and isinstance(cleared, (int, float)) and cleared >= last


def rung_for(root: Root, record: dict[str, Any] | None, now: float, window_s: float) -> Rung:
    """The rung ``root`` is on at ``now`` given its ladder record (None: never seen)."""
    base = floor(root.action)
    if not record:
        return Rung(root, base, f"first failure: {base}, the action of {root.check}")
    last = record.get("last_failed")
    current: str = str(record.get("action")) if record.get("action") in LADDER else base
    if not isinstance(last, (int, float)) or now - last > window_s:
        return Rung(root, base, f"{base}, the action of {root.check} (its last failure is older than the ladder window)")
    step = stepped_since_failure(record)
    if step is not None:
        climbed = _higher(base, above(current))
        if climbed != current:
            return Rung(root, climbed, f"failed again after {step}: {current} did not hold, so {climbed}", True)
        return Rung(root, climbed, f"failed again after {step}; {current} is the top of the ladder")
    return Rung(root, _higher(base, current), f"still failing since {current}")


def record_failures(ladder: dict[str, dict[str, Any]], roots: Iterable[Root], now: float,
                    window_s: float) -> list[Rung]:
    """Put each failing root on its rung and write it into ``ladder``; returns the rungs, most
    disruptive first."""
    rungs = []
    for root in roots:
        record = ladder.get(root.key)
        rung = rung_for(root, record, now, window_s)
        new = dict(record or {})
        steps = list(new.get("steps") or [])
        if not record or rung.action != record.get("action") or rung.climbed or stepped_since_failure(record):
            steps.append({"action": rung.action, "at": now, "why": rung.why})
            new["since"] = now
        new.update(action=rung.action, last_failed=now, check=root.check, component=root.component,
                   steps=steps[-MAX_STEPS:])
        if rung.climbed or (record and _cleared_since_failure(record)):
            # a new rung, or a new incident after the node was back in service: its commands are due again
            new.pop("hooks", None)
        new.pop("remedied", None)
        new.pop("cleared", None)
        ladder[root.key] = new
        rungs.append(rung)
    rungs.sort(key=lambda r: -RANK.get(r.action, 0))
    return rungs


def record_pass(ladder: dict[str, dict[str, Any]], now: float, window_s: float) -> list[str]:
    """A passing check clears every open root (the node is back in service); roots not seen for two
    windows are forgotten. Returns the keys cleared now."""
    cleared = []
    for key in list(ladder):
        record = ladder[key]
        last = record.get("last_failed")
        if not isinstance(last, (int, float)) or now - last > 2 * window_s:
            del ladder[key]
            continue
        if stepped_since_failure(record) is None:
            record["cleared"] = now
            cleared.append(key)
    return cleared


def record_remedy(ladder: dict[str, dict[str, Any]], key: str, action: str, now: float, ok: bool) -> None:
    """The operator's command for ``action`` ran on root ``key`` (``ok``: it said it succeeded)."""
    record = ladder.setdefault(key, {"action": action})
    hooks = dict(record.get("hooks") or {})
    hooks[action] = {"at": now, "ok": ok}
    record["hooks"] = hooks
    if ok:
        record["remedied"] = now
    steps = list(record.get("steps") or [])
    steps.append({"action": action, "at": now, "why": "remediation command " + ("succeeded" if ok else "failed")})
    record["steps"] = steps[-MAX_STEPS:]


def hook_due(record: dict[str, Any] | None, action: str) -> bool:
    """Whether the operator's command for ``action`` has not run yet on this rung of this root."""
    if not record:
        return True
    return action not in (record.get("hooks") or {})


def roots_of_report(report: dict[str, Any]) -> list[Root]:
    """The failing root causes of a ``ccdiag check`` JSON report, in report order."""
    out = []
    for f in report.get("findings") or ():
        if not isinstance(f, dict) or f.get("status") != "fail" or f.get("caused_by"):
            continue
        comp: dict = f["component"] if isinstance(f.get("component"), dict) else {}
        gpu = comp.get("gpu")
        out.append(Root(key=str(f.get("key") or f"{f.get('check')}|{comp.get('name')}"), check=str(f.get("check")),
                        component=str(comp.get("name") or ""), action=str(f.get("action") or DRAIN),
                        gpu=gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None,
                        summary=str(f.get("summary") or "")))
    return out


__all__ = ["LADDER", "Root", "Rung", "above", "floor", "hook_due", "record_failures", "record_pass", "record_remedy",
           "roots_of_report", "rung_for"]

