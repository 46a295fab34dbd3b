"""Which ``nvidia-smi -q`` fields mean which value, across driver versions and the text and XML forms.

``ccdiag/data/smi_fields.json`` lists, per value ccdiag reads (``ecc_volatile_dram_uncorrectable``,
``pcie_gen_current``, ``clocks_event_hw_power_brake_slowdown`` ...), the text paths and XML element
paths that print it, in the order they are tried, and the NVML function whose answer it stands for.
The list was drawn from real outputs of R440 to R580 (their sources in ``smi_fields.md``);
``scripts/extract_smi_fields.py`` lists the paths of any output and whether a key reads them.

Printed values are classified once here: a number (with its unit: ``16x``, ``81559 MiB``,
``67.74 W``, ``29 C``, ``1980 MHz``), *not applicable* (``N/A``, ``[N/A]``, ``Not Supported``), or an
*error* (``Unknown Error``, ``GPU is lost``, ``[GPU requires reset]``, ``ERR!``) with the NVML error
class it stands for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ccdiag.nvfiles.smiq import SmiGpu

NOT_APPLICABLE = frozenset({"n/a", "[n/a]", "not supported", "[not supported]", "not available", "none"})
#: printed error values -> NVML error class (ccdiag.host.nvmlcall's names)
ERROR_VALUES = {"unknown error": "unknown_error", "[unknown error]": "unknown_error", "err!": "unknown_error",
                "gpu is lost": "gpu_lost", "[gpu is lost]": "gpu_lost", "[gpu requires reset]": "reset_required",
                "gpu requires reset": "reset_required", "[insufficient permissions]": "no_permission",
                "insufficient permissions": "no_permission", "[unknown]": "unknown_error"}
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(x|%|MiB|KiB|GiB|KB/s|MB/s|W|C|MHz|mV|bank\(s\)|us)?\s*$")
_UNIT_BYTES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@dataclass(frozen=True)
class Field:
    key: str
    text: tuple[str, ...]
    xml: tuple[str, ...]
    nvml: str
    bit: int | None = None
    note: str | None = None


@lru_cache(maxsize=1)
def fields() -> tuple[Field, ...]:
    raw = json.loads(resources.files("ccdiag").joinpath("data/smi_fields.json").read_text(encoding="utf-8"))
    return tuple(Field(f["key"], tuple(f["text"]), tuple(f["xml"]), f["nvml"], f.get("bit"), f.get("note"))
                 for f in raw["fields"])


@lru_cache(maxsize=1)
def by_key() -> dict[str, Field]:
    return {f.key: f for f in fields()}


@lru_cache(maxsize=1)
def known_paths() -> frozenset[str]:
    """Every text and XML path some key reads (for coverage)."""
    return frozenset(p for f in fields() for p in (*f.text, *f.xml))


def raw(gpu: SmiGpu, key: str) -> tuple[str | None, str | None]:
    """(the value as printed, the path it was read from) of ``key``; (None, None) when the output
    does not print it."""
    f = by_key()[key]
    for path in (*f.text, *f.xml):
        value = gpu.fields.get(path)
        if value is not None:
            return value, path
    return None, None


@dataclass(frozen=True)
class Value:
    """A printed value, classified. ``kind``: ``number``, ``text``, ``not_applicable``, ``error``,
    ``absent`` (the output does not print it)."""

    kind: str
    number: float | None = None
    unit: str | None = None
    text: str | None = None
    error_class: str | None = None
    path: str | None = None

    @property
    def integer(self) -> int | None:
        return int(self.number) if self.number is not None else None

    def bytes(self) -> int | None:
        if self.number is None:
            return None
        return int(self.number * _UNIT_BYTES.get(self.unit or "", 1))


def classify(text: str | None, path: str | None = None) -> Value:
    if text is None:
        return Value("absent")
    low = text.strip().lower()
    if low in NOT_APPLICABLE or low.startswith("requested functionality has been deprecated"):
        return Value("not_applicable", text=text, path=path)
    if low in ERROR_VALUES:
        return Value("error", text=text, error_class=ERROR_VALUES[low], path=path)
    m = _NUMBER.match(text)
    if m:
        return Value("number", float(m.group(1)), m.group(2), text, path=path)
    return Value("text", text=text.strip(), path=path)


def value(gpu: SmiGpu, key: str) -> Value:
    text, path = raw(gpu, key)
    return classify(text, path)


_YES = {"yes", "enabled", "active", "true"}
_NO = {"no", "disabled", "not active", "false"}


def flag(v: Value) -> bool | None:
    """Enabled/Active/Yes -> True, Disabled/Not Active/No -> False, anything else None."""
    if v.kind != "text" or v.text is None:
        return None
    low = v.text.lower()
    return True if low in _YES else False if low in _NO else None


def read_paths(gpu: SmiGpu) -> tuple[set[str], set[str]]:
    """(paths of this GPU some key reads, paths no key reads), repeated-path suffixes dropped."""
    known = known_paths()
    read: set[str] = set()
    unread: set[str] = set()
    for path in gpu.fields:
        base = path.split("#", 1)[0]
        (read if base in known else unread).add(base)
    return read, unread
