"""Whether a pre-job check may lean on the idle-time loop's last pass (``check --reuse-pass STATE``).

A prolog has a budget (Slurm's ``PrologEpilogTimeout``, a job waiting to start). The idle-time
loop already ran the expensive parts on this node: every link kept busy while its speed was read,
error counters judged over a window, perhaps a quick benchmark. While that pass holds (its
validity window, and the same policy and environment file, ``--strict`` or not) the pre-job check
skips those parts and still runs every probe once, so what broke since (a GPU fallen off the bus,
an XID, a port down) still fails the job's node. It says which pass it leaned on, on stderr and in
the JSON report (``reused_pass``); without a valid pass it runs in full and says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ccdiag.health.state import check_digest, load_state


@dataclass(frozen=True)
class Reuse:
    ok: bool
    why: str
    state: str
    last_pass: float | None = None
    valid_until: float | None = None
    mode: str | None = None

    def line(self) -> str:
        if self.ok:
            return (f"reusing the health loop's pass: {self.why}; link loading, the counter window and "
                    f"benchmarks skipped, every probe still read")
        return f"no pass to reuse ({self.why}); checking in full"

    def to_json(self) -> dict:
        return {"reused": self.ok, "why": self.why, "state": self.state, "last_pass": self.last_pass,
                "valid_until": self.valid_until, "mode": self.mode}


def reusable_pass(state_path: str, policy_file: str | None, env_file: str | None, strict: bool,
                  now: float | None = None) -> Reuse:
    st = load_state(state_path)
    if st.problem:
        return Reuse(False, st.problem, state_path)
    args = [*(["--policy", policy_file] if policy_file else []), *(["--env-file", env_file] if env_file else []),
            *(["--strict"] if strict else [])]
    ok, why = st.valid_pass(time.time() if now is None else now, check_digest(args))
    return Reuse(ok, why, state_path, st.last_pass, st.valid_until, st.last_pass_mode)


__all__ = ["Reuse", "reusable_pass"]
