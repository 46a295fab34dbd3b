"""Which findings are consequences of another, so a verdict reads root cause first.

A GPU that fell off the bus makes every other GPU check on it "unknown" and the node's GPU count
fail; printed side by side, the consequences drown the cause. The rules are declarative (a table
of which check is caused by which, and how their components must match) and applied once after
the checks ran, so the text report folds consequences under their cause, the JSON report links
them (``caused_by`` names the cause's ``key``), and the Slurm drain reason names the root.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ccdiag.findings import FAIL, UNKNOWN, Finding


def key(f: Finding) -> str:
    """A finding's key in one report: ``check|component name`` (``gpu.lost|GPU6``)."""
    return f"{f.check}|{f.component.name}"


def _same_gpu(cause: Finding, effect: Finding) -> bool:
    return cause.component.gpu is not None and effect.component.gpu == cause.component.gpu


def _count_explained(cause: Finding, effect: Finding) -> bool:
    return effect.component.kind == "node"


#: (cause check, cause status, effect statuses, effect check prefixes or "*" for any, match rule)
RULES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], Callable[[Finding, Finding], bool]], ...] = (
    # a lost GPU answers nothing: its other GPU, NVLink and PCIe-replay checks cannot be judged
    ("gpu.lost", FAIL, (UNKNOWN,), ("gpu.", "nvlink.", "pcie.replay"), _same_gpu),
    # ... and the node has one usable GPU fewer than expected
    ("gpu.lost", FAIL, (FAIL, UNKNOWN), ("gpu.count",), _count_explained),
)


def link_causes(findings: list[Finding]) -> list[Finding]:
    """The same findings, each consequence carrying ``caused_by`` = its cause's key."""
    causes = {rule[0]: [f for f in findings if f.check == rule[0] and f.status == rule[1]] for rule in RULES}
    out = []
    for f in findings:
        linked = None
        for cause_id, _status, effect_statuses, prefixes, match in RULES:
            if f.check == cause_id or f.status not in effect_statuses or not f.check.startswith(prefixes):
                continue
            cause = next((c for c in causes[cause_id] if match(c, f)), None)
            if cause is not None:
                linked = key(cause)
                break
        out.append(dataclasses.replace(f, caused_by=linked) if linked else f)
    return out


def drain_reason(findings: list[Finding], limit: int = 60) -> str | None:
    """``ccdiag: gpu.lost GPU6 (+8)``: the first root-cause failure and how many other root
    failures there are, at most ``limit`` characters (Slurm shows reasons in narrow columns).
    None when nothing failed."""
    fails = [f for f in findings if f.status == FAIL and not f.caused_by]
    if not fails:
        return None
    f = fails[0]
    text = f"ccdiag: {f.check} {f.component.name}" + (f" (+{len(fails) - 1})" if len(fails) > 1 else "")
    text = " ".join(text.replace('"', "").split())
    return text if len(text) <= limit else text[: limit - 1] + "~"


def roots(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if not f.caused_by]


def effects_of(cause: Finding, findings: list[Finding]) -> list[Finding]:
    k = key(cause)
    return [f for f in findings if f.caused_by == k]
