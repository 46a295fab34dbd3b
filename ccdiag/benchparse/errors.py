"""The one error every benchmark-output parser raises, and the bounds they share.

Why one class: ``ccdiag bench import FILE`` takes any of the tools' outputs, and a caller must be able
to tell "this file is not readable as benchmark output" (exit 2, with the line named) from a bug in
ccdiag. So every parser turns every refusal into :class:`BenchParseError`, and no ``ValueError``,
``IndexError``, ``KeyError`` or ``RecursionError`` of its own ever escapes.

Why bounds: users paste these files into tickets and scripts collect them from thousands of nodes; a
parser must finish in time linear in its input whatever it is given, and refuse (naming the limit)
rather than spend memory on a file that cannot be one run's output.
"""

from __future__ import annotations

from ccdiag.core.errors import UserInputError

#: the largest input a parser reads; the biggest real outputs (nvbandwidth -a on a 72-GPU NVL72 rack,
#: an NCCL_DEBUG=INFO nccl-tests log of a few hundred ranks) are a few MiB
MAX_BYTES = 16 << 20
#: the longest line: real lines are under 1 KiB (an mpirun command line with an NCCL_IB_HCA list);
#: an NCCL INFO line can carry a long environment, hence the margin
MAX_LINE = 64 << 10
#: rows of one result table (nccl-tests sizes, perftest message sizes)
MAX_ROWS = 100_000
#: labels of one matrix axis (GPUs), devices/ranks listed in one run, testcases in one file
MAX_LABELS = 4096
#: the longest fragment of the input a message quotes
QUOTE_LIMIT = 80


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ending in "..." when it was cut."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class BenchParseError(UserInputError, ValueError):
    """Text that cannot be read as the tool's output without guessing, or past a bound.

    ``line_no`` is 1-based and always set (a refusal of the whole input names the line where the
    problem shows: the line that crosses a bound, or the first line read); ``line`` is that line,
    quoted clipped; ``limit`` names the bound crossed, when one was.
    """

    def __init__(self, message: str, line_no: int, line: str = "", limit: str | None = None):
        self.message = message
        self.line_no = line_no
        self.line = line
        self.limit = limit
        super().__init__(message)

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.message}: {clip(self.line)!r}"
