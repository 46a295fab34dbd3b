"""Slurm's hostlist expressions (``tux[0-3,12,18-20]``, ``node[01-18]``, ``s[0-2],gpu7``) to names.

Why our own: topology.conf names every switch's children this way, and the tool that expands them
(``scontrol show hostnames``) runs only where Slurm is installed, while a layout file is often read
on a laptop. The grammar is Slurm's as its man pages describe it (topology.conf(5): "Slurm's
hostlist expression parser is used, so the node and switch names need not be consecutive"): entries
separated by commas outside brackets, each a prefix with bracketed lists of numbers or ranges; a
range keeps the zero padding of its first number (``[01-18]`` gives ``01`` ... ``18``). Several
bracket groups in one entry (``r[1-2]n[1-4]``) expand as their product.

One pass over the text, and a bound on the names it may produce: ``n[0-999999999]`` is a one-line
error, never a billion strings.
"""

from __future__ import annotations

#: the most names one expression (or one file, through ``budget``) may expand to
MAX_NAMES = 1_000_000


class HostlistError(ValueError):
    """A malformed expression: the message says what and where, for the caller's one-line error."""


def _split_top(text: str) -> list[str]:
    """Entries separated by commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise HostlistError(f"nested '[' at character {i + 1}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"']' without '[' at character {i + 1}")
            depth = 0
        elif ch == "," and not depth:
            out.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError("'[' is never closed")
    out.append(text[start:])
    return out


def _numbers(body: str, entry: str) -> list[str]:
    """``0-3,12`` -> ['0', '1', '2', '3', '12'] with the padding of each range's first number."""
    out: list[str] = []
    for part in body.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"{entry!r}: {part!r} is not a number or a range of numbers")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"{entry!r}: range {part!r} goes down")
        if b - a + 1 > MAX_NAMES:
            raise HostlistError(f"{entry!r}: range {part!r} names more than {MAX_NAMES} hosts")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(k).zfill(width) for k in range(a, b + 1))
    return out


def _entry(entry: str, budget: list[int]) -> list[str]:
    parts: list[list[str]] = []
    i = 0
    while i < len(entry):
        j = entry.find("[", i)
        if j < 0:
            parts.append([entry[i:]])
            break
        k = entry.index("]", j)
        if j > i:
            parts.append([entry[i:j]])
        parts.append(_numbers(entry[j + 1:k], entry))
        i = k + 1
    total = 1
    for p in parts:
        total *= len(p)
    budget[0] -= total
    if budget[0] < 0:
        raise HostlistError(f"{entry!r}: more than {MAX_NAMES} host names in all")
    names = [""]
    for p in parts:
        names = [n + s for n in names for s in p]
    return names


def expand(text: str, budget: list[int] | None = None) -> list[str]:
    """The names of ``text`` in order (duplicates kept as written). ``budget``: a one-element list
    holding how many names may still be produced, shared by the expressions of one file."""
    budget = budget if budget is not None else [MAX_NAMES]
    text = text.strip()
    if not text:
        return []
    out: list[str] = []
    for entry in _split_top(text):
        entry = entry.strip()
        if not entry:
            raise HostlistError(f"empty entry in {text!r}")
        out.extend(_entry(entry, budget))
    return out
