"""Slurm as the health loop sees it: this node's state and reason, the fleet's drains, and the
two changes it makes (drain with a reason, resume), through ``sinfo`` and ``scontrol``.

Each call is bounded (slurmctld may be slow or gone); a call that fails is an error string for the
log, never an exception that ends the loop. ``SLURM_CONF`` passes through the environment, as for
the Slurm scripts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from ccdiag.health.cap import FleetCount, slurm_count

#: seconds a sinfo/scontrol call may take
CALL_TIMEOUT_S = 15.0
#: node states in which a job holds or is about to hold the node (scontrol's State= words)
BUSY_STATES = ("ALLOCATED", "MIXED", "COMPLETING", "PLANNED")
#: a drain reason Slurm accepts and shows: one line, no double quote, at most this long
REASON_MAX = 60


class SlurmError(RuntimeError):
    """A Slurm command that could not be run or failed; the message says which and why."""


@dataclass(frozen=True)
class NodeState:
    state: str  # sinfo's %T, lower case: idle, mixed, allocated, draining, drained, down ...
    reason: str

    @property
    def drained(self) -> bool:
        return "drain" in self.state

    @property
    def idle_drained(self) -> bool:
        """Drained with no job left on it (``drained``, not ``draining``)."""
        return self.state.startswith("drained")


def _run(argv: list[str], timeout_s: float = CALL_TIMEOUT_S) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmError(f"{argv[0]} not found on PATH")
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv[:3])} did not answer within {timeout_s:g}s") from None
    except OSError as exc:
        raise SlurmError(f"{argv[0]}: {exc.strerror or exc}") from None
    if res.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:3])} exited {res.returncode}: {(res.stderr or res.stdout).strip()[:200]}")
    return res.stdout


def node_state(node: str) -> NodeState:
    out = _run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"]).strip().splitlines()
    if not out:
        raise SlurmError(f"sinfo does not know node {node}")
    state, _, reason = out[0].partition("|")
    return NodeState(state.strip().lower(), reason.strip())


def fleet_count() -> FleetCount:
    return slurm_count(_run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"]).splitlines())


def allocated(node: str) -> str | None:
    """Why ``node`` is busy in Slurm's eyes (``State=MIXED``), or None when no job holds it."""
    text = _run(["scontrol", "show", "node", node, "--oneliner"])
    m = re.search(r"\bState=(\S+)", text)
    if not m:
        raise SlurmError(f"scontrol show node {node}: no State= in its answer")
    words = set(m.group(1).upper().replace("*", "").split("+"))
    busy = sorted(words & set(BUSY_STATES))
    return f"Slurm node state {m.group(1)}" if busy else None


def clean_reason(text: str) -> str:
    text = " ".join(text.replace('"', "").split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "~"


def drain(node: str, reason: str) -> None:
    _run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={clean_reason(reason)}"])


def resume(node: str) -> None:
    _run(["scontrol", "update", f"nodename={node}", "state=resume"])


__all__ = ["BUSY_STATES", "NodeState", "SlurmError", "allocated", "clean_reason", "drain", "fleet_count", "node_state",
           "resume"]
