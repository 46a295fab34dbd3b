"""Shared pieces of the benchmark-output parsers: bounded line splitting and strict number reading.

Numbers are read by anchored, quantifier-bounded patterns (no nested quantifiers, so no pattern can
backtrack catastrophically), then checked finite: a value the tool could not have printed (``inf``,
a 400-digit "size") is a refusal naming the line, never a float('inf') in a result.
"""

from __future__ import annotations

import json
import math
import re

from ccdiag.benchparse.errors import MAX_BYTES, MAX_LINE, BenchParseError, clip

#: lines a ccdiag fixture carries in front of a captured output (source, hardware, notes)
FIXTURE_PREFIX = "#ccdiag-"

_INT_RE = re.compile(r"[+-]?[0-9]{1,20}")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][+-]?[0-9]{1,3})?")


def check_size(text: object) -> str:
    """``text`` itself, once known to be a ``str`` within :data:`MAX_BYTES` (UTF-8)."""
    if not isinstance(text, str):
        raise BenchParseError(f"expected text (str), got {type(text).__name__}", 1, "")
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        cut = text[:MAX_BYTES]
        line_no = cut.count("\n") + 1
        start = cut.rfind("\n") + 1
        raise BenchParseError(f"input is {size} bytes, over the limit MAX_BYTES={MAX_BYTES}", line_no,
                              text[start:start + 200].split("\n", 1)[0], limit="MAX_BYTES")
    return text


def lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` for every line of ``text`` that is not a fixture header, ``\\r`` dropped.

    Refuses a line longer than :data:`MAX_LINE`. Line numbers count every line of the input.
    """
    check_size(text)
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE:
            raise BenchParseError(f"line is {len(line)} characters, over the limit MAX_LINE={MAX_LINE}", n,
                                  line, limit="MAX_LINE")
        if line.endswith("\r"):
            line = line[:-1]
        if line.startswith(FIXTURE_PREFIX):
            continue
        out.append((n, line))
    return out


def first_line(numbered: list[tuple[int, str]]) -> tuple[int, str]:
    """The first non-blank line (for a refusal of the whole input), or line 1 of an empty one."""
    for n, line in numbered:
        if line.strip():
            return n, line
    return (numbered[0][0] if numbered else 1), ""


def to_int(token: str, what: str, n: int, line: str) -> int:
    if not _INT_RE.fullmatch(token):
        raise BenchParseError(f"{what} {clip(token, 30)!r} is not an integer", n, line)
    return int(token)


def to_float(token: str, what: str, n: int, line: str) -> float:
    if not _FLOAT_RE.fullmatch(token):
        raise BenchParseError(f"{what} {clip(token, 30)!r} is not a number", n, line)
    value = float(token)
    if not math.isfinite(value):
        raise BenchParseError(f"{what} {clip(token, 30)!r} is out of range", n, line)
    return value


def is_int_token(token: str) -> bool:
    return _INT_RE.fullmatch(token) is not None


def looks_like_json(numbered: list[tuple[int, str]]) -> bool:
    n, line = first_line(numbered)
    return line.lstrip().startswith("{")


def _reject_constant(name: str) -> None:
    raise ValueError(f"bare {name} is not JSON")


def load_json(text: str, numbered: list[tuple[int, str]]) -> object:
    """The JSON document in ``text`` (fixture header lines blanked, so line numbers stay true).

    Decoding errors, bare ``NaN``/``Infinity`` and nesting too deep for the decoder become
    :class:`BenchParseError` naming the line.
    """
    by_no = dict(numbered)
    body = "\n".join(by_no.get(i, "") for i in range(1, (numbered[-1][0] if numbered else 0) + 1))
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise BenchParseError(f"not valid JSON ({e.msg})", e.lineno, by_no.get(e.lineno, "")) from None
    except RecursionError:
        n, line = first_line(numbered)
        raise BenchParseError("JSON nested too deeply", n, line, limit="recursion") from None
    except ValueError as e:  # parse_constant, or an integer with too many digits
        n, line = first_line(numbered)
        raise BenchParseError(f"not valid JSON ({clip(str(e), 60)})", n, line) from None


def json_line(numbered: list[tuple[int, str]], needle: str) -> tuple[int, str]:
    """The first line holding ``needle`` (a JSON key, quoted), to name where a JSON refusal points."""
    for n, line in numbered:
        if needle in line:
            return n, line
    return first_line(numbered)
