"""Small shared value types: per-device read errors and conversion of observations to JSON.

Probes return frozen dataclasses; the report, the exporters and the tests all need them as plain
JSON, so the conversion lives here once.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReadError:
    """One thing that could not be read, kept beside the data it would have filled.

    ``source`` names what was read (a path, a command, an NVML function with its arguments);
    ``kind`` is a short class (``missing``, ``permission``, ``invalid``, ``io``, ``timeout``,
    ``not_supported``, ``no_permission``, ``gpu_lost``, ``driver_missing``, ``parse`` ...);
    ``message`` is for humans.
    """

    source: str
    kind: str
    message: str = ""


_PLAIN = (str, int, bool, type(None))
_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _dataclass_fields(cls: type) -> tuple[str, ...] | None:
    """Field names of the dataclass ``cls`` (None for any other type), found once per class: a
    3,000-device report converts about a million values."""
    try:
        return _FIELDS[cls]
    except KeyError:
        pass
    names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
    _FIELDS[cls] = names
    return names


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, tuples, enums and dicts with non-string keys to JSON-safe values."""
    cls = type(obj)
    if cls in _PLAIN:
        return obj
    names = _dataclass_fields(cls)
    if names is not None:
        return {name: to_jsonable(getattr(obj, name)) for name in names}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        # tuple keys (a matrix cell keyed by (row, column)) become "row/column"
        return {("/".join(map(str, k)) if isinstance(k, tuple) else str(k)): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [to_jsonable(v) for v in obj]
        return sorted(items, key=repr) if isinstance(obj, (set, frozenset)) else items
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return obj


def normalize_bdf(bus_id: str | None) -> str | None:
    """Turn any PCI address spelling into sysfs form ``dddd:bb:dd.f`` (lower case).

    NVML says ``00000000:18:00.0``, nvidia-smi ``00000000:18:00.0`` or ``18:00.0``, sysfs
    ``0000:18:00.0``; NCCL ``18000``. All of them name the same function.
    """
    if not bus_id:
        return None
    s = bus_id.strip().lower()
    if not s:
        return None
    parts = s.split(":")
    try:
        if len(parts) == 3:
            dom, bus, devfn = parts
        elif len(parts) == 2:
            dom, (bus, devfn) = "0", parts
        else:
            return None
        dev, _, fn = devfn.partition(".")
        return f"{int(dom, 16) & 0xFFFF:04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn or '0', 16):x}"
    except ValueError:
        return None
