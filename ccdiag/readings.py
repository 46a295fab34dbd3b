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


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, tuples, enums and dicts with non-string keys to JSON-safe values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
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
