"""Repairs of ``nvidia-smi topo`` text damaged in copying: cells fused when a tab was lost, an
affinity glued to the last cell, a cell whose characters were lost.

Why apart from the parser (:mod:`ccdiag.probes._smi_topo_parse`): reading a grid is exact, a repair
is a judgement, and each judgement here is made only where the text leaves one reading:

* the **level vocabulary** splits a fused cell when exactly one split into valid cells exists
  (``PXBNODE`` is PXB + NODE, ``SYSSYS`` is SYS + SYS; ``X NODE`` is the diagonal's `` X `` with the
  tab after it lost);
* the **column count** allows a split only when the row is short of exactly those cells, and cuts an
  affinity from the last cell only when that cell is the one missing (``PH0-115`` is a level that
  lost its last letter, then the CPU list ``0-115``);
* the **mirror cell** says what a cell that lost characters was (GPU1/NIC0 is NIC0/GPU1), and
  confirms every split: a split whose cell disagrees with its mirror is refused, naming both.

Every repair is listed, in the words a person would use to check it against the paste.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from ccdiag.probes._smi_topo_text import CPU_LIST_RE, ELISION, TopoParseError, clip, quote

#: a cell whose text was damaged in copying; filled from its mirror cell when that is readable
DAMAGED = "\x00damaged"
#: longest token tried for a split into several values (a merged pair or three is far shorter)
_MAX_MERGED = 48
#: the level words a mangled cell may have started as ("PH" for PHB, "PXQ" for PXB)
_LEVEL_WORDS = ("SYS", "SOC", "NODE", "PHB", "PXB", "PIX", "NV")
# a last cell run into the affinity value: a full level or capability, then the CPU list
_GLUED_RE = re.compile(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV[0-9]+|OK|NS|CNS|GNS|TNS|U)([0-9][0-9,\-]*)$")
# ... or a level that lost characters (letters only, so the split before the first digit is the only one;
# not NV, whose link count is digits too: "NV180-47" has no one reading)
_GLUED_DAMAGED_RE = re.compile(r"^(?![Nn][Vv])([A-Za-z]{2,4})([0-9][0-9,\-]*)$")

ValidCell = Callable[[str], bool]


def looks_like_a_level(text: str) -> bool:
    """A cell damaged in copying, not garbage: short and beginning like a level word."""
    t = text.strip().upper()
    return 0 < len(t) <= 6 and any(w.startswith(t[:2]) or t.startswith(w[:2]) for w in _LEVEL_WORDS if len(t) >= 2)


def segmentations(token: str, valid_cell: ValidCell, limit: int = 2) -> list[list[str]]:
    """Ways to read ``token`` as several valid cells run together (``PXBNODE`` -> PXB, NODE; ``X NODE``
    -> X, NODE), at most ``limit`` of them (two already means ambiguous). Whitespace inside the token
    is a boundary. Linear in the token for a fixed vocabulary."""
    if len(token) > _MAX_MERGED:
        return []
    words = token.split()
    if len(words) > 1:
        return _join_word_splits([_word_splits(w, valid_cell, limit) for w in words], limit)
    return [s for s in _word_splits(token, valid_cell, limit) if len(s) > 1]


def _join_word_splits(per_word: list[list[list[str]]], limit: int) -> list[list[str]]:
    """The splits of a whitespace-separated token: one per choice of split of each word; none when a
    word cannot be read."""
    out: list[list[str]] = [[]]
    for splits in per_word:
        if not splits:
            return []
        out = [a + b for a in out for b in splits][:limit]
    return out


def _word_splits(token: str, valid_cell: ValidCell, limit: int) -> list[list[str]]:
    """Every reading of ``token`` (no whitespace) as valid cells back to back, at most ``limit``."""
    memo: dict[int, list[list[str]]] = {}

    def from_pos(i: int) -> list[list[str]]:
        if i == len(token):
            return [[]]
        if i in memo:
            return memo[i]
        out: list[list[str]] = []
        for j in range(i + 1, min(len(token), i + 8) + 1):
            part = token[i:j]
            if not valid_cell(part) or (part.startswith("NV") and j < len(token) and token[j].isdigit()):
                continue
            out.extend([part] + rest for rest in from_pos(j))
            if len(out) >= limit:
                del out[limit:]
                break
        memo[i] = out
        return out

    return from_pos(0)


class Vocabulary:
    """A cell validator that remembers its answers and its segmentations: a paste repeats the same
    few tokens (``SYS``, ``PXBNODE``) thousands of times, so each is judged once per parse."""

    def __init__(self, valid_cell: ValidCell):
        self._valid = valid_cell
        self._known: dict[str, bool] = {}
        self._splits: dict[str, list[list[str]]] = {}

    def __call__(self, cell: str) -> bool:
        known = self._known.get(cell)
        if known is None:
            known = self._known[cell] = bool(self._valid(cell))
        return known

    def segmentations(self, token: str) -> list[list[str]]:
        splits = self._splits.get(token)
        if splits is None:
            splits = self._splits[token] = segmentations(token, self)
        return splits


def repair_cells(tokens: list[str], want: int, vocab: Vocabulary, label: str, line_no: int,
                 repairs: list[str]) -> list[str]:
    """``tokens`` (the row after its label) with fused cells split where the split is the only one
    possible and the row is short of those cells, and a last cell run into the affinity value
    (``PIX0-47``, ``PH0-115``) cut apart; stops once ``want`` cells are read, the rest is the row's
    tail. Each repair is listed in ``repairs``."""
    out: list[str] = []
    for tok in tokens:
        if len(out) >= want or vocab(tok) or tok in ELISION or tok == "":
            out.append(tok)
            continue
        out.extend(_repair_token(tok, want - len(out), vocab, f"line {line_no}: {clip(label)}", repairs))
    return out


def _repair_token(tok: str, room: int, vocab: Vocabulary, where: str, repairs: list[str]) -> list[str]:
    """One unreadable token as the cells it holds, when the text allows one reading; else itself."""
    splits = vocab.segmentations(tok)
    if len(splits) == 1 and len(splits[0]) <= room:
        repairs.append(f"{where}: {quote(tok)} read as {', '.join(splits[0])} (a tab lost)")
        return splits[0]
    if room != 1:
        return [tok]
    m = _GLUED_RE.match(tok)
    if m and vocab(m.group(1)) and CPU_LIST_RE.match(m.group(2)):
        repairs.append(f"{where}: {quote(tok)} read as {m.group(1)} then affinity {m.group(2)} (a tab lost)")
        return [m.group(1), m.group(2)]
    m = _GLUED_DAMAGED_RE.match(tok)
    if m and looks_like_a_level(m.group(1)) and CPU_LIST_RE.match(m.group(2)):
        repairs.append(f"{where}: {quote(tok)} read as {quote(m.group(1))} (characters lost) then affinity "
                       f"{m.group(2)} (a tab lost)")
        return [m.group(1), m.group(2)]
    return [tok]


def is_damaged(value: object) -> bool:
    return isinstance(value, str) and value.startswith(DAMAGED)


def mend_from_mirrors(cells: dict[tuple[str, str], str | None], line_of: dict[str, int], text_of: Callable[[int], str],
                      repairs: list[str], symmetric: bool = True) -> None:
    """A cell whose characters were lost takes the value of its mirror (the matrix is symmetric:
    GPU1/NIC0 is NIC0/GPU1); every cell mended is listed, and a damaged cell whose mirror is
    damaged or absent is a refusal naming both."""
    problems: list[TopoParseError] = []
    for (row, col), value in list(cells.items()):
        if not is_damaged(value):
            continue
        shown = quote(value[len(DAMAGED):]) if isinstance(value, str) else ""
        mirror = cells.get((col, row)) if symmetric else None
        if isinstance(mirror, str) and not is_damaged(mirror):
            cells[(row, col)] = mirror
            repairs.append(f"line {line_of[row]}: {clip(row)}/{clip(col)} {shown} "
                           f"read as {mirror} (from {clip(col)}/{clip(row)})")
        else:
            n = line_of[row]
            why = ", and its mirror cannot say" if symmetric else ""
            problems.append(TopoParseError(f"{shown} is not a known value (cell of {clip(row)}/"
                                           f"{clip(col)}{why})", n, text_of(n)))
    if problems:
        raise TopoParseError.of_all(problems)


def confirm_by_mirrors(cells: dict[tuple[str, str], str | None], rows: Iterable[str], columns: list[str],
                       line_of: dict[str, int], text_of: Callable[[int], str]) -> None:
    """Every cell of a row that was split must agree with its mirror where the mirror was read: a
    split that puts a value in the wrong column shows there, and is refused rather than kept.
    Linear in the cells of those rows."""
    problems: list[TopoParseError] = []
    for row in rows:
        for col in columns:
            value, mirror = cells.get((row, col)), cells.get((col, row))
            if row == col or value is None or mirror is None or is_damaged(value) or is_damaged(mirror):
                continue
            if mirror != value:
                n = line_of[row]
                problems.append(TopoParseError(
                    f"a repaired row disagrees with its mirror: {clip(row)}/{clip(col)} is {quote(value)} but "
                    f"{clip(col)}/{clip(row)} is {quote(mirror)}", n, text_of(n)))
    if problems:
        raise TopoParseError.of_all(problems)
