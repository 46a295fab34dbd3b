"""What the ``nvidia-smi topo`` parser and its repairs share: the refusal, the bounds on a paste,
the quoting of pasted text in messages, and the vocabulary of cells and labels.

Why a module of its own: the parser (:mod:`ccdiag.probes._smi_topo_parse`) and the repairs of pasted
damage (:mod:`ccdiag.probes._smi_topo_repair`) both refuse with :class:`TopoParseError` and both
judge cells against the same patterns; keeping them here lets each of the two import the other's
half without a cycle.
"""

from __future__ import annotations

import re

from ccdiag.core.errors import UserInputError

# an NVLink count has at most 3 digits (18 on Hopper); more is noise, and int() of thousands of
# digits raises ValueError
LEVEL_RE = re.compile(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV[0-9]{1,3})$")
GPU_RE = re.compile(r"^GPU[0-9]+$")
NIC_LABEL_RE = re.compile(r"^NIC[0-9]+$")
LABEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
CPU_LIST_RE = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
GPU_NUMA_ID_RE = re.compile(r"^[0-9]{1,6}$")
#: the marks a document converter or a person leaves where columns were dropped
ELISION = frozenset({".", "...", ". . .", "\u2026"})

#: the longest piece of pasted text a message quotes: a refusal must stay one readable line even
#: when the pasted "cell" is a whole file without a separator
QUOTE_LIMIT = 60

# Bounds on what a paste may be. Real outputs are far inside them (the largest node in the corpus
# has 8 GPUs and 18 NICs, lines under 300 characters); beyond them the text is refused, naming the
# limit, so that every parse stays linear and well under a second whatever a stranger pastes.
#: the most text one parser call reads (a 512-device matrix with tabs expanded is about 2.2 MB)
MAX_TEXT_BYTES = 4 << 20
#: the longest line (512 cells of 8 columns, label and affinity values fit four times over)
MAX_LINE_CHARS = 16384
#: the most lines (a 512-device matrix with both legends is about 1,100; the rest is room for the
#: prompt and notes around it)
MAX_LINES = 65536
#: the most devices a header may name, and the most rows and NIC legend entries
MAX_DEVICES = 512


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ending in "..." when it was cut."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A quoted fragment of the input for a message, never longer than about ``limit`` characters."""
    if isinstance(value, str):
        return repr(clip(value, limit))
    if isinstance(value, (list, tuple)):
        shown = [clip(v, limit) if isinstance(v, str) else v for v in value[:8]]
        return clip(repr(shown), limit)
    return clip(repr(value), limit)


class TopoParseError(UserInputError, ValueError):
    """Text that cannot be read as a topology matrix without guessing; names the line (and, when
    several rows are damaged, every one of them: ``others``)."""

    def __init__(self, message: str, line_no: int, line: str, others: tuple[TopoParseError, ...] = ()):
        self.message = message
        self.line_no = line_no
        self.line = line
        self.others = tuple(others)
        super().__init__(message)

    def __str__(self) -> str:
        first = f"line {self.line_no}: {self.message}: {quote(self.line, 2 * QUOTE_LIMIT)}"
        if not self.others:
            return first
        rest = "; ".join(f"line {e.line_no}: {e.message}" for e in self.others)
        return f"{len(self.others) + 1} damaged lines: {first}; {rest}"

    @classmethod
    def of_all(cls, problems: list[TopoParseError]) -> TopoParseError:
        """One refusal naming every damaged line, the first in full."""
        first = problems[0]
        return cls(first.message, first.line_no, first.line, tuple(problems[1:]))


def check_bounds(text: str, what: str) -> None:
    """Refuse text beyond :data:`MAX_TEXT_BYTES`, :data:`MAX_LINES` or with a line beyond
    :data:`MAX_LINE_CHARS` (linear: one split of the text), naming the limit."""
    if not isinstance(text, str):
        raise TopoParseError(f"{what}: expected text, got {type(text).__name__}", 1, "")
    if len(text) > MAX_TEXT_BYTES:
        raise TopoParseError(f"{what} of {len(text)} characters is more than the {MAX_TEXT_BYTES} "
                             "this parser reads (MAX_TEXT_BYTES)", 1,
                             text[:2 * QUOTE_LIMIT + 1])
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise TopoParseError(f"{what} of {len(lines)} lines is more than the {MAX_LINES} this parser reads "
                             "(MAX_LINES)", MAX_LINES + 1, lines[MAX_LINES])
    longest = max(lines, key=len)
    if len(longest) > MAX_LINE_CHARS:
        line_no = next(k for k, ln in enumerate(lines, 1) if len(ln) > MAX_LINE_CHARS)
        raise TopoParseError(f"line of {len(lines[line_no - 1])} characters is longer than the {MAX_LINE_CHARS} "
                             "a topology line may be (MAX_LINE_CHARS)", line_no, lines[line_no - 1][:2 * QUOTE_LIMIT + 1])
