"""Refuse one probe's observation when a value in it cannot be exported, before it reaches a cycle.

Why here and not only in the probes: the probes parse what they read and should already turn a bad
value into an error entry, but one that slips through (a string where a number belongs, an
infinite or NaN float, an integer too large for a float) would make rendering raise, and a
rendering that raises loses the whole cycle: every probe's data, readiness, everything new. The
daemon checks each observation here instead; an observation that fails is that one probe's
failure (``ccdiag_probe_success 0``, its last good data served stale), never the cycle's.

The walk follows dataclass fields, tuples, lists and dict values to a bounded depth and size, and
checks the fields whose declared type is numeric. Nothing is modified.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

#: the largest magnitude an exported integer may have (counters are at most 64-bit)
MAX_INT = 1 << 64
_MAX_DEPTH = 8
_MAX_ITEMS = 200_000


def _numeric_type(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = {p.strip() for p in text.replace("Optional[", "").replace("]", "").split("|")}
    return bool(parts & {"int", "float"}) and not parts & {"str", "Any", "bool"}


def _bad_number(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -MAX_INT <= value <= MAX_INT else "an integer beyond 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"a non-finite number ({value!r})"
    return f"not a number ({value!r:.40})"


def bad_value(obj: Any) -> str | None:
    """Where and why the first unexportable value of ``obj`` is, e.g. ``gpus[0].power_w: not a
    number ('abc')``; ``None`` when every value can be exported."""
    budget = [_MAX_ITEMS]

    def walk(o: Any, where: str, depth: int) -> str | None:
        budget[0] -= 1
        if budget[0] < 0 or depth > _MAX_DEPTH or o is None:
            return None
        if isinstance(o, float) and not math.isfinite(o):
            return f"{where or 'value'}: a non-finite number ({o!r})"
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            for f in dataclasses.fields(o):
                v = getattr(o, f.name, None)
                if v is None:
                    continue
                if _numeric_type(f.type) and not isinstance(v, (tuple, list, dict)):
                    why = _bad_number(v)
                    if why:
                        return f"{where}{'.' if where else ''}{f.name}: {why}"
                    continue
                found = walk(v, f"{where}{'.' if where else ''}{f.name}", depth + 1)
                if found:
                    return found
        elif isinstance(o, (tuple, list)):
            for i, v in enumerate(o):
                found = walk(v, f"{where}[{i}]", depth + 1)
                if found:
                    return found
        elif isinstance(o, dict):
            for k, v in o.items():
                found = walk(v, f"{where}[{k!r:.40}]", depth + 1)
                if found:
                    return found
        return None

    return walk(obj, "", 0)
