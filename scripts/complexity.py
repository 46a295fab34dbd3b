#!/usr/bin/env python3
"""The complexity gate: no function or method of ccdiag/, probes/ or exporters/ above cyclomatic
complexity 30 (radon's grade D, its last grade before "alarming"), closures and methods of nested
classes included. Run by CI's lint stage with the radon pinned in scripts/lint-requirements.txt.

Usage::

    python3 scripts/complexity.py            # exit 0, or 1 listing every function above the limit

Functions still above the limit wait in ``scripts/complexity-allow.txt``, one a line:
``path qualified.name GRADE`` (``ccdiag/host/snapshot.py SnapshotData._fill E``). The list can only
shrink: an entry must name the function's grade as it is now, so the gate also fails when a listed
function grows to a worse grade, drops to a better one (lower the grade, or remove the entry once
it is D or better), or no longer exists. New entries are for nothing: refactor instead. Changes
nothing on the machine; reads the tree only.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
ROOTS = ("ccdiag", "probes", "exporters")
ALLOW = REPO / "scripts" / "complexity-allow.txt"
#: the most complex a function may be: the top of radon's grade D (21-30)
LIMIT = 30
GRADES = "ABCDEF"


def grade(score: int) -> str:
    """radon's grade of a cyclomatic complexity: A 1-5, B 6-10, C 11-20, D 21-30, E 31-40, F 41+."""
    for top, letter in ((5, "A"), (10, "B"), (20, "C"), (30, "D"), (40, "E")):
        if score <= top:
            return letter
    return "F"


@dataclass(frozen=True)
class Block:
    """One function, method or closure: the file it is in (relative to the tree), its name qualified
    by its class or enclosing function, its line and its complexity."""

    path: str
    name: str
    line: int
    score: int

    @property
    def key(self) -> tuple[str, str]:
        return self.path, self.name

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name} {grade(self.score)} ({self.score})"


def _qualified(found: list, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(qualified name, radon function block) of radon's blocks of one file: functions and methods
    (which radon lists beside their class), their closures, and the methods of nested classes (which
    radon's own listing leaves out unless asked)."""
    from radon.visitors import Function

    for b in found:
        if isinstance(b, Function):
            name = prefix + (f"{b.classname}.{b.name}" if b.is_method and b.classname else b.name)
            yield name, b
            yield from _qualified(b.closures, name + ".")
        else:  # a class: its own methods are blocks beside it; those of the classes inside it are not
            for inner in b.inner_classes:
                yield from _qualified([*inner.methods, inner], prefix + b.name + ".")


def blocks(root: pathlib.Path, roots: tuple[str, ...] = ROOTS) -> list[Block]:
    """Every function, method and closure under ``roots``, as radon measures them."""
    from radon.complexity import cc_visit

    out = []
    for top in roots:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            for name, b in _qualified(cc_visit(path.read_text(encoding="utf-8"))):
                out.append(Block(rel.as_posix(), name, b.lineno, b.complexity))
    return sorted(out, key=lambda b: (b.path, b.line, b.name))


def read_allow(text: str, source: str) -> dict[tuple[str, str], str]:
    """(path, name) -> grade from the allow-list's lines (``#`` comments and blank lines skipped)."""
    out: dict[tuple[str, str], str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or parts[2] not in GRADES:
            raise ValueError(f"{source}:{n}: expected 'path qualified.name GRADE', got {raw.strip()!r}")
        key = (parts[0], parts[1])
        if key in out:
            raise ValueError(f"{source}:{n}: {parts[0]} {parts[1]} is listed twice")
        out[key] = parts[2]
    return out


def problems(found: list[Block], allow: dict[tuple[str, str], str], limit: int = LIMIT) -> list[str]:
    """What fails the gate: each function above ``limit`` the allow-list does not name at its grade,
    and each entry of the allow-list that no longer matches (grade changed, function gone)."""
    worst: dict[tuple[str, str], Block] = {}
    for b in found:  # a name defined twice in one file (a property's setter): its worst definition
        if b.key not in worst or b.score > worst[b.key].score:
            worst[b.key] = b
    out = [f"{b}: above {limit}; split it into functions with one job each"
           for b in found if b.score > limit and b.key not in allow]
    for key, listed in sorted(allow.items()):
        b = worst.get(key)
        if b is None:
            out.append(f"{key[0]} {key[1]}: listed in the allow-list but not found; remove its entry")
        elif b.score <= limit:
            out.append(f"{b}: now within the limit; remove its entry from the allow-list")
        elif grade(b.score) != listed:
            verb = "grew from" if GRADES.index(grade(b.score)) > GRADES.index(listed) else "dropped from"
            fix = "refactor it" if verb == "grew from" else f"list it as {grade(b.score)}"
            out.append(f"{b}: {verb} the allow-list's grade {listed}; {fix}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allow", default=str(ALLOW), help="the allow-list (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        allow = read_allow(pathlib.Path(args.allow).read_text(encoding="utf-8"), args.allow)
    except (OSError, ValueError) as exc:
        print(f"complexity: {exc}", file=sys.stderr)
        return 2
    found = blocks(REPO)
    bad = problems(found, allow)
    for line in bad:
        print(f"complexity: {line}", file=sys.stderr)
    if bad:
        return 1
    waived = f" but the {len(allow)} the allow-list names" if allow else ""
    print(f"complexity: {len(found)} functions of {', '.join(ROOTS)}, none above {LIMIT}{waived}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
