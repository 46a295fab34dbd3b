"""The policy's waivers applied to a check run's findings, after judging and root-cause folding.

A waiver (:mod:`ccdiag.inputs.waivers`) excuses one check on one component until a date. It is
applied once the checks have judged and :func:`ccdiag.checks.causes.link_causes` has folded each
consequence under its root, because what a waiver may hide depends on that folding:

1. A problem (fail, warn, unknown) whose check and component the waiver names becomes ``waived``:
   it keeps the status it was judged with in ``Finding.waived``, with the waiver's until, by and
   reason, and asks for no action.
2. A problem that follows from a waived finding (``caused_by`` is its key) **on the same
   component** is waived with it (``waived.with`` names the root): it is the same fault seen by
   another check, as a port that is down also shows link-down lines in the kernel log.
3. A problem that follows from a waived finding **on another component** is not waived: it
   becomes a root of its own (``caused_by`` cleared, ``details.follows_waived`` names the waived
   root), so it counts, fails the node when it fails, and names its own action. A waiver never
   hides another component: the GPU whose nearest NIC is the unplugged one still reads its
   GPUDirect detour, and a node that lost a GPU still fails its GPU count unless that is waived too
   (or the policy expects one GPU fewer).
4. Passing and skipped findings are never changed; a check the waiver does not name is never
   touched, even on the same component.

A waiver whose date has passed covers nothing: the problem counts again, and a ``policy.waiver``
warning on that component says the waiver lapsed (and whether the problem is still there), so
the lapse is loud without failing a node whose problem was fixed. One that lapses within the
policy's ``waiver_warn_days`` still covers, and the report says when it lapses (a notice, not a
warning: a warning would fail a node under ``--strict`` before the date the waiver names). Time is
the observation's (the recording time of a replayed snapshot), so a replay reaches the verdict the
live run reached.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Iterable

from ccdiag.core.actions import action_of
from ccdiag.core.findings import FAIL, UNKNOWN, WAIVED, WARN, Component, Evidence, Finding, worst
from ccdiag.inputs.waivers import Waiver

#: the statuses a waiver can excuse
PROBLEMS = (FAIL, WARN, UNKNOWN)
#: a waiver in force, one in force that lapses within the policy's lead, one whose date has passed
IN_FORCE, LAPSING, LAPSED = "in_force", "lapsing", "lapsed"
#: the check id of the finding a lapsed waiver raises
LAPSED_CHECK = "policy.waiver"


@dataclass(frozen=True)
class WaiverOutcome:
    """What one waiver did in one run: ``state`` (in force, lapsing soon, lapsed), the keys of the
    findings it waived, how many findings of its check on its component the run had (0 with its
    check run: the waiver names nothing that exists, likely a typo), and seconds until it lapses."""

    waiver: Waiver
    state: str
    waived: tuple[str, ...]
    matched: int
    check_ran: bool
    lapses_in_s: float

    def to_json(self) -> dict:
        return {**self.waiver.to_json(), "state": self.state, "waived": list(self.waived), "matched": self.matched,
                "check_ran": self.check_ran, "lapses_in_s": round(self.lapses_in_s, 1)}


def _waive(f: Finding, w: Waiver, now: float, warn_s: float, with_root: str | None) -> Finding:
    return dataclasses.replace(f, status=WAIVED, action=None, waived={
        "status": f.status, "action": action_of(f), "check": w.check, "component": w.component,
        "subject": w.subject, "until": w.until, "lapses_at": w.lapses_at, "by": w.by, "reason": w.reason,
        "line": w.line, "lapses_in_s": round(w.lapses_at - now, 1), "lapsing": w.lapses_at - now <= warn_s,
        "with": with_root})


def _lapsed_finding(w: Waiver, matches: list[Finding], now: float, source: str | None) -> Finding:
    where = f"policy {source or '<policy>'}" + (f":{w.line}" if w.line else "")
    problems = [f for f in matches if f.status in PROBLEMS]
    if problems:
        verb = {FAIL: "fails", WARN: "warns"}.get(worst(problems), "is unknown")
        state = f"{w.check} {verb} there again and counts"
    elif matches:
        state = f"{w.check} passes there now: the waiver can go"
    else:
        state = f"this run has no {w.check} finding on {w.component}"
    days = (now - w.lapses_at) / 86400.0
    ago = "today" if days < 1 else f"{days:.0f} day{'s' if round(days) != 1 else ''} ago"
    component = matches[0].component if matches else Component("waiver", w.component)
    return Finding(
        check=LAPSED_CHECK, status=WARN, component=component,
        subject=w.check + (f" {w.subject}" if w.subject else ""),
        summary=f"the waiver of {w.names()} lapsed {ago} (until {w.until}; by {w.by}: {w.reason}); {state}",
        evidence=(Evidence("until", w.until, where), Evidence("waived by", w.by, where)),
        expected="every waiver in the policy in force (its date not passed)", expected_source=where,
        remedy=("Fix what the waiver covered, then remove it from the policy; if the problem is known and still "
                "accepted, move its `until` to a new date (with who and why)."),
        details={"waiver": w.to_json()})


#: finding (by ``id``) -> the waiver that covers it and, for one waived with its root, the root's key
_Hits = dict[int, tuple[Waiver, str | None]]


def _named_hits(findings: list[Finding], in_force: list[Waiver]) -> _Hits:
    """The problems a waiver in force names itself (rule 1): the first waiver that covers each."""
    hit: _Hits = {}
    for f in findings:
        if f.status in PROBLEMS:
            w = next((w for w in in_force if w.covers(f.check, f.component, f.subject)), None)
            if w is not None:
                hit[id(f)] = (w, None)
    return hit


def _waived_with_root(findings: list[Finding], hit: _Hits, roots: dict[str, tuple[Waiver, Finding]]) -> None:
    """Adds to ``hit`` the problems that follow from a waived root on the same component (rule 2)."""
    for f in findings:
        root = roots.get(f.caused_by) if f.caused_by else None
        if id(f) not in hit and root is not None and f.status in PROBLEMS and f.component.name == root[1].component.name:
            hit[id(f)] = (root[0], f.caused_by)


def _applied(f: Finding, hit: _Hits, roots: dict[str, tuple[Waiver, Finding]], now: float, warn_s: float) -> Finding:
    """One finding after the waivers: waived (rules 1 and 2), a root of its own when it follows a
    waived root on another component (rule 3), else unchanged (rule 4)."""
    if id(f) in hit:
        w, with_root = hit[id(f)]
        return _waive(f, w, now, warn_s, with_root)
    if f.caused_by in roots and f.status in PROBLEMS:
        # another component: never hidden; a root of its own, saying what it follows from
        return dataclasses.replace(f, caused_by=None, details={**f.details, "follows_waived": f.caused_by})
    return f


def _outcome(w: Waiver, findings: list[Finding], hit: _Hits, matches: list[Finding], ran: set[str], now: float,
             warn_s: float) -> WaiverOutcome:
    """What waiver ``w`` did: its state at ``now``, the findings it waived, how many it names."""
    state = LAPSED if now >= w.lapses_at else LAPSING if w.lapses_at - now <= warn_s else IN_FORCE
    keys = tuple(f.key for f in findings if id(f) in hit and hit[id(f)][0] is w)
    return WaiverOutcome(w, state, keys, len(matches), w.check in ran, w.lapses_at - now)


def apply_waivers(findings: list[Finding], waivers: Iterable[Waiver], now: float | None = None,
                  warn_s: float = 3 * 86400.0, only: Iterable[str] | None = None,
                  source: str | None = None, lapse_findings: bool = True) -> tuple[list[Finding], list[WaiverOutcome]]:
    """The findings with the waivers applied (rule in this module's docstring), sorted, and what each
    waiver did. ``now``: the observation's time. ``warn_s``: how long before its date a waiver is
    said to be lapsing. ``only``: the run's check-id prefixes (a lapsed waiver of a check that did
    not run raises nothing). ``lapse_findings``: add a ``policy.waiver`` warning per lapsed waiver
    (off for a second batch of findings of the same run, such as ``check --bench``'s)."""
    waivers = list(waivers)
    if not waivers:
        return findings, []
    now = time.time() if now is None else now
    prefixes = tuple(only) if only else None
    hit = _named_hits(findings, [w for w in waivers if now < w.lapses_at])
    roots = {f.key: (hit[id(f)][0], f) for f in findings if id(f) in hit}
    _waived_with_root(findings, hit, roots)
    out = [_applied(f, hit, roots, now, warn_s) for f in findings]
    outcomes = []
    ran = {f.check for f in findings}
    for w in waivers:
        matches = [f for f in findings if w.covers(f.check, f.component, f.subject)]
        outcome = _outcome(w, findings, hit, matches, ran, now, warn_s)
        outcomes.append(outcome)
        selected = prefixes is None or w.check.startswith(prefixes)
        if outcome.state == LAPSED and lapse_findings and selected:
            out.append(_lapsed_finding(w, matches, now, source))
    out.sort(key=Finding.sort_key)
    return out, outcomes


def waived_roots(findings: Iterable[Finding]) -> list[Finding]:
    """The waived findings a waiver names itself (not those waived with their root)."""
    return [f for f in findings if f.status == WAIVED and not (f.waived or {}).get("with")]


__all__ = ["IN_FORCE", "LAPSED", "LAPSED_CHECK", "LAPSING", "PROBLEMS", "WaiverOutcome", "apply_waivers",
           "waived_roots"]
