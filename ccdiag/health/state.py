"""What the health loop remembers between runs: one JSON file per node (``<state_dir>/health.json``).

The loop is a series of short processes (a timer's runs, the Slurm health check's calls), so what
links them lives here: when the node last passed and until when that pass holds (the validity
window the pre-job check may reuse), the outcome of every run, each root cause's rung on the
escalation ladder with the steps taken for it, and what the drain cap counted. Writers take an
exclusive lock on ``health.json.lock`` around read-modify-write, so the timer and the Slurm health
check never lose each other's updates; the file itself is replaced atomically, so a reader (the
pre-job check, ``ccdiag health status``) never sees half of it. A file that cannot be read is
started afresh and said so: losing the history must never stop a check.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

from ccdiag.core.output import write_atomic

STATE_VERSION = 1
#: run outcomes, as ccdiag_health_runs_total labels them
OUTCOMES = ("pass", "fail", "unknown", "error", "yielded", "busy", "not_due")


@dataclass
class HealthState:
    """The decoded state file; :meth:`to_json` writes it back."""

    last_run: dict[str, Any] = field(default_factory=dict)
    last_pass: float | None = None
    last_pass_mode: str | None = None
    valid_until: float | None = None
    digest: str | None = None  # what the pass was judged under (check arguments and policy contents)
    verdict: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    ladder: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: dict[str, dict[str, int]] = field(default_factory=dict)
    last_step: dict[str, float] = field(default_factory=dict)
    cap: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    problem: str | None = None  # why the file on disk was not used (corrupt, another version)

    @classmethod
    def from_json(cls, doc: Any) -> "HealthState":
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            return cls(problem=f"not a version {STATE_VERSION} health state")
        st = cls()
        for name in ("last_run", "verdict", "ladder", "cap"):
            value = doc.get(name)
            setattr(st, name, value if isinstance(value, dict) else {})
        for name in ("last_pass", "valid_until"):
            value = doc.get(name)
            setattr(st, name, float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
        for name in ("last_pass_mode", "digest"):
            value = doc.get(name)
            setattr(st, name, value if isinstance(value, str) else None)
        runs = doc.get("runs")
        st.runs = {k: v for k, v in runs.items() if isinstance(v, int)} if isinstance(runs, dict) else {}
        steps = doc.get("steps")
        if isinstance(steps, dict):
            st.steps = {a: {o: n for o, n in by.items() if isinstance(n, int)} for a, by in steps.items()
                        if isinstance(by, dict)}
        last_step = doc.get("last_step")
        if isinstance(last_step, dict):
            st.last_step = {a: float(t) for a, t in last_step.items() if isinstance(t, (int, float))}
        evidence = doc.get("evidence")
        st.evidence = [p for p in evidence if isinstance(p, str)] if isinstance(evidence, list) else []
        return st

    def to_json(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "last_run": self.last_run, "last_pass": self.last_pass,
                "last_pass_mode": self.last_pass_mode, "valid_until": self.valid_until, "digest": self.digest,
                "verdict": self.verdict, "runs": self.runs, "ladder": self.ladder, "steps": self.steps,
                "last_step": self.last_step, "cap": self.cap, "evidence": self.evidence}

    # -- updates ------------------------------------------------------------------------------------
    def count_run(self, outcome: str) -> None:
        self.runs[outcome] = self.runs.get(outcome, 0) + 1

    def count_step(self, action: str, outcome: str, at: float) -> None:
        by = self.steps.setdefault(action, {})
        by[outcome] = by.get(outcome, 0) + 1
        self.last_step[action] = at

    def record_pass(self, at: float, validity_s: float, mode: str, digest: str | None) -> None:
        self.last_pass = at
        self.last_pass_mode = mode
        self.valid_until = at + validity_s
        self.digest = digest

    def invalidate(self, at: float) -> None:
        """A failure (or no verdict) ends the window of the last pass now."""
        if self.valid_until is None or self.valid_until > at:
            self.valid_until = at

    def valid_pass(self, now: float, digest: str | None) -> tuple[bool, str]:
        """(whether a pass holds at ``now`` for a check judged under ``digest``, why in words)."""
        if self.last_pass is None or self.valid_until is None:
            return False, "no active check has passed on this node yet"
        if now >= self.valid_until:
            return False, f"the last pass ran out at {_iso(self.valid_until)}"
        if now < self.last_pass:
            return False, "the last pass is dated in the future (the clock moved back)"
        if digest is not None and self.digest != digest:
            return False, "the last pass was judged under other check arguments or another policy"
        return True, (f"the idle-time check passed at {_iso(self.last_pass)} ({self.last_pass_mode or 'check'}), "
                      f"valid until {_iso(self.valid_until)}")


def _iso(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def load_state(path: str) -> HealthState:
    """The state in ``path``; an empty one when there is none or it cannot be read (``problem`` says so)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(16 << 20)
    except FileNotFoundError:
        return HealthState()
    except OSError as exc:
        return HealthState(problem=f"{path}: {exc.strerror or exc}")
    try:
        st = HealthState.from_json(json.loads(data))
    except ValueError as exc:
        return HealthState(problem=f"{path}: not JSON ({exc})")
    if st.problem:
        st.problem = f"{path}: {st.problem}"
    return st


def save_state(path: str, st: HealthState) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, json.dumps(st.to_json(), indent=1, sort_keys=True) + "\n", mode=0o644)


@contextlib.contextmanager
def locked_state(path: str) -> Iterator[HealthState]:
    """The state under an exclusive lock; written back when the block ends without an exception."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        st = load_state(path)
        yield st
        save_state(path, st)
    finally:
        os.close(fd)


def check_digest(check_args: tuple[str, ...] | list[str]) -> str:
    """What a verdict was judged under: the contents of the policy and environment files the check's
    arguments name, and whether warnings fail (``--strict``). A pass judged under yesterday's policy
    is no pass under today's; the bounds (``--timeout``, ``--window``) and the output options are
    not part of the judgement."""
    h = hashlib.sha256()
    args = list(check_args)
    h.update(b"strict" if "--strict" in args else b"lenient")
    for option in ("--policy", "--env-file"):
        for i, arg in enumerate(args):
            path = args[i + 1] if arg == option and i + 1 < len(args) else \
                arg.split("=", 1)[1] if arg.startswith(option + "=") else None
            if not path:
                continue
            h.update(f"\0{option}\0".encode())
            try:
                with open(path, "rb") as fh:
                    h.update(fh.read(1 << 20))
            except OSError:
                h.update(b"unreadable")
    return "sha256:" + h.hexdigest()[:32]


__all__ = ["HealthState", "OUTCOMES", "check_digest", "load_state", "locked_state", "save_state"]
