"""Typed reading of the fields ``cluster check`` and ``compare`` take from a host's JSON report.

Why: ``compare`` reads reports users hand it, and the published schema checks the large sections
(probes, topology) by their type only, since their full schema costs more than reading them. So
every field read from a report goes through these accessors: an object where an object belongs, a
list where a list belongs, a number that is a number. A field of the wrong type raises
:class:`FieldError` naming its path (``probes/infiniband/data/devices/0/ports: not a list``), which
``compare`` reports as one unreadable file; never an AttributeError deep inside (exit 4).

Numbers: JSON allows any number, Python's float does not (``1e400`` and a 400-digit integer are
beyond it). :func:`loads` reads such a number as :class:`OutOfRange`, which keeps its literal text,
so it is compared and reported (a temperature of ``1e400`` is an outlier) and never becomes an
infinity or a NaN in a median or on the screen.
"""

from __future__ import annotations

import json
import math
from typing import Any


class FieldError(ValueError):
    """A field of a report with the wrong type; the message names its path."""


class OutOfRange(str):
    """A JSON number beyond what a float holds, kept as its literal text."""

    def __repr__(self) -> str:
        return str(self)


#: an integer literal longer than this is read as text (Python refuses to convert very long ones,
#: and none of a report's counts comes near)
MAX_INT_DIGITS = 300


def _float(text: str) -> float | OutOfRange:
    value = float(text)
    return value if math.isfinite(value) else OutOfRange(text)


def _int(text: str) -> int | OutOfRange:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return OutOfRange(text)
    value = int(text)
    return value if abs(value) <= 1.7e308 else OutOfRange(text)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str | bytes) -> Any:
    """``json.loads`` for reports: every JSON number is read (finite, or :class:`OutOfRange`);
    ``NaN`` and ``Infinity``, which are not JSON, are a ValueError."""
    return json.loads(text, parse_float=_float, parse_int=_int, parse_constant=_no_constant)


def is_number(value: Any) -> bool:
    """A comparable number: int or float, never a bool, finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def obj(value: Any, path: str, optional: bool = True) -> dict:
    """``value`` as an object ({} for an absent or null one when ``optional``)."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise FieldError(f"{path}: not an object")
    return value


def arr(value: Any, path: str, optional: bool = True) -> list:
    """``value`` as a list ([] for an absent or null one when ``optional``)."""
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise FieldError(f"{path}: not a list")
    return value


def objs(value: Any, path: str) -> list[dict]:
    """A list of objects (``devices``, ``ports``, ``links``)."""
    items = arr(value, path)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise FieldError(f"{path}/{i}: not an object")
    return items


def text(value: Any, path: str) -> str | None:
    """A scalar shown as text (a name, a version): None stays None; a string as it is; a number as
    its text; an object or list is the wrong type."""
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise FieldError(f"{path}: not a text value")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def number(value: Any, path: str) -> int | float | OutOfRange | None:
    """A number (or an out-of-range one, kept as text); None stays None; anything else is wrong."""
    if value is None or isinstance(value, OutOfRange):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(f"{path}: not a number")
    return value
