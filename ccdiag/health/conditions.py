"""The ``CcdiagHealthy`` node condition and the optional taint, as the health loop writes them.

The condition follows node-problem-detector's conventions for a condition it owns: a type of its
own, a status of ``True``/``False``/``Unknown``, a one-word CamelCase ``reason`` a controller can
match, the root cause in words as ``message``, ``lastHeartbeatTime`` renewed on every write and
``lastTransitionTime`` kept until the status changes. The type says "healthy", so ``True`` is good
(as ``Ready``), and a consumer gating pods on it (a scheduler extension, NVSentinel-style
remediation, Cluster API's MachineHealthCheck) keys on ``status: "False"``.

* a pass: ``True``, reason ``ChecksPassed``, the message says until when the pass holds;
* a failure within the drain cap: ``False``, the ladder's rung as reason (``RebootRequired``), the
  root cause as message; with ``taint = true`` also the taint ``<taint_key>=<rung>:NoSchedule``;
* a failure above the cap: ``Unknown``, reason ``DrainCapReached``: ccdiag will not take the node out
  (``False`` would let a controller do it), yet does not call it healthy;
* no verdict (a probe timed out): ``Unknown``, reason ``NoVerdict``;
* a pass whose validity window ran out with no check since (the node stayed busy): ``Unknown``,
  reason ``VerdictExpired``. A failure never expires: only a pass clears it.
"""

from __future__ import annotations

import time
from typing import Any

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
#: longest message written (a condition message is shown in one column of ``kubectl describe node``)
MESSAGE_MAX = 1024
RUNG_REASONS = {"drain": "DrainRequired", "reset_gpu": "GpuResetRequired", "reboot": "RebootRequired",
                "service": "ServiceRequired"}


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _message(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "~"


def condition(kind: str, status: str, reason: str, message: str, now: float,
              previous: dict[str, Any] | None) -> dict[str, Any]:
    """One condition of type ``kind``; ``lastTransitionTime`` stays the previous one's while the status holds."""
    same = previous is not None and previous.get("status") == status and previous.get("lastTransitionTime")
    return {"type": kind, "status": status, "reason": reason, "message": _message(message),
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": previous["lastTransitionTime"] if same else rfc3339(now)}  # type: ignore[index]


def passed(kind: str, now: float, valid_until: float, mode: str, previous: dict | None) -> dict[str, Any]:
    return condition(kind, TRUE, "ChecksPassed",
                     f"ccdiag {mode} passed at {rfc3339(now)}; the pass holds until {rfc3339(valid_until)}",
                     now, previous)


def failed(kind: str, rung: str, root: str, summary: str, others: int, why: str, now: float,
           previous: dict | None) -> dict[str, Any]:
    more = f" (+{others} other root cause{'s' if others != 1 else ''})" if others else ""
    return condition(kind, FALSE, RUNG_REASONS.get(rung, "DrainRequired"),
                     f"{root}: {summary}{more}; action {rung}: {why}", now, previous)


def held(kind: str, rung: str, root: str, summary: str, cap_why: str, now: float, previous: dict | None) -> dict:
    return condition(kind, UNKNOWN, "DrainCapReached",
                     f"would be False ({rung}): {root}: {summary}; {cap_why}", now, previous)


def no_verdict(kind: str, detail: str, now: float, previous: dict | None) -> dict[str, Any]:
    return condition(kind, UNKNOWN, "NoVerdict", f"ccdiag check gave no verdict: {detail}", now, previous)


def expired(kind: str, last_pass: float, valid_until: float, now: float, previous: dict | None) -> dict[str, Any]:
    return condition(kind, UNKNOWN, "VerdictExpired",
                     f"the last pass ({rfc3339(last_pass)}) ran out at {rfc3339(valid_until)} and no check has "
                     f"run since (the node stayed busy)", now, previous)


def find(node: dict, kind: str) -> dict[str, Any] | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def with_taint(taints: list[dict], key: str, value: str) -> list[dict]:
    """``taints`` with ccdiag's taint set to ``value`` (NoSchedule), every other taint untouched."""
    kept = [t for t in taints if t.get("key") != key]
    return kept + [{"key": key, "value": value, "effect": "NoSchedule"}]


def without_taint(taints: list[dict], key: str) -> list[dict]:
    return [t for t in taints if t.get("key") != key]


__all__ = ["FALSE", "TRUE", "UNKNOWN", "condition", "expired", "failed", "find", "held", "no_verdict", "passed",
           "rfc3339", "with_taint", "without_taint"]
