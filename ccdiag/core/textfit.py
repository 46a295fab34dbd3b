"""Text that fits the reader's width: how wide, how prose wraps, how a wide matrix splits.

Every command's text output goes through these three answers, so ``bench list``, ``compare``,
``bench import`` and ``check`` agree on them:

* :func:`text_width`: the terminal's columns; piped, ``$COLUMNS`` when set, else 80.
* :func:`wrap`: prose wrapped between words, where a span in backticks (a command to copy, such as
  ``setpci -s 0000:00:01.0 ECAP_ACS+0x6.w=0000``) counts as one word. A word or span longer than the
  line stands unbroken on a line of its own: a command that is split is a command that breaks when
  pasted, and a PCI address or path cut in two is no longer found by ``grep``.
* :func:`column_blocks`: a matrix too wide for the line split into blocks of whole columns, the row
  labels repeated in each (as ``ccdiag topo`` prints 16 NICs on 80 columns).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Sequence

#: the width of piped output when $COLUMNS does not say (a log, a ticket, a terminal of the 1980s)
PIPED_WIDTH = 80
#: no line is wrapped narrower than this: below it, hanging indents would leave no room for words
MIN_WIDTH = 40

# a word: a run of non-blank characters in which a backtick span, blanks included, is one piece;
# a span never crosses a line. An unmatched backtick is an ordinary character. Each failed span
# attempt stops at the next backtick, which then opens its own attempt, so the scan stays linear.
_WORD_RE = re.compile(r"(?:`[^`\n]*`|[^\s`]|`)+")
_BLANKS_RE = re.compile(r"\s")


def text_width(piped: int = PIPED_WIDTH) -> int:
    """Columns to fit on stdout: ``$COLUMNS`` when set (a terminal or a pipe alike), the terminal's
    own width on a terminal, and ``piped`` otherwise; never under :data:`MIN_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return max(MIN_WIDTH, shutil.get_terminal_size((PIPED_WIDTH, 24)).columns)
    return max(MIN_WIDTH, piped)


def words(text: str) -> list[str]:
    """The words of ``text`` as :func:`wrap` sees them (backtick spans whole)."""
    return _WORD_RE.findall(text)


def wrap(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` columns, each word (and backtick span) whole.

    ``first`` prefixes the first line (default ``indent``), ``indent`` every other; blanks at the
    start of ``text`` are dropped (say them in ``first``). Blanks between two words on one line stay
    as written; at a break they go. A word that does not fit on any line stands alone on its own
    line, unbroken, past the width. An empty text is one line holding the prefix."""
    head = indent if first is None else first
    lines: list[str] = []
    line = head
    has_word = False
    end = 0
    for m in _WORD_RE.finditer(text):
        gap = _BLANKS_RE.sub(" ", text[end:m.start()]) or " "
        end = m.end()
        word = m.group()
        if has_word and len(line) + len(gap) + len(word) > width:
            lines.append(line)
            line, has_word = indent, False
        line = line + gap + word if has_word else line + word
        has_word = True
    lines.append(line if has_word else line.rstrip())
    return lines


def wrap_lines(lines: Sequence[str], width: int, hang: int = 4) -> list[str]:
    """Each line of ``lines`` wrapped to ``width``, continuations indented ``hang`` columns deeper
    than the line's own indent; lines that fit stay as they are."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out.extend(wrap(line.strip(" "), width, indent=lead + " " * hang, first=lead))
    return out


def fits(line: str, width: int) -> bool:
    """Whether ``line`` keeps the width rule: at most ``width`` columns, or one word (a path, an
    address, a backtick span, a command on its own line) that nothing could shorten.

    A test can hold any output to this: every line fits, and a line that does not is a single
    unbreakable unit standing alone."""
    if len(line) <= width:
        return True
    return len(words(line)) == 1


def column_blocks(label_width: int, cell_widths: Sequence[int], width: int, gap: int = 2,
                  margin: int = 0) -> list[range]:
    """Runs of consecutive column indices whose cells fit ``width`` beside the row labels.

    ``label_width``: the label column (repeated in every block); ``cell_widths``: each column's
    width; ``gap``: blanks before each cell; ``margin``: columns the layout adds (a table's edges,
    an indent). Every block holds at least one column, so a column wider than the line still shows,
    alone, rather than vanish. One block when everything fits."""
    room = width - margin - label_width
    blocks: list[range] = []
    start, used = 0, 0
    for k, w in enumerate(cell_widths):
        need = gap + w
        if k > start and used + need > room:
            blocks.append(range(start, k))
            start, used = k, 0
        used += need
    if len(cell_widths) > start:
        blocks.append(range(start, len(cell_widths)))
    return blocks


def matrix_text(row_labels: Sequence[str], col_labels: Sequence[str], cells: Sequence[Sequence[str]],
                width: int, indent: str = "", gap: int = 2, title: str | None = None) -> list[str]:
    """A labelled matrix as right-aligned text, in column blocks that fit ``width``.

    ``cells[i][j]`` is row ``i``, column ``j``. Each block repeats the row labels; a block that
    holds only part of the columns is headed by the range it holds (``columns GPU0-GPU4 of 8``),
    so a reader knows the matrix continues."""
    label_w = max((len(s) for s in row_labels), default=0)
    cell_w = [max([len(c)] + [len(row[j]) for row in cells]) for j, c in enumerate(col_labels)]
    blocks = column_blocks(label_w, cell_w, width, gap=gap, margin=len(indent))
    out: list[str] = []
    for n, block in enumerate(blocks):
        if n:
            out.append("")
        if title is not None:
            head = title
            if len(blocks) > 1:
                span = (col_labels[block[0]] if len(block) == 1
                        else f"{col_labels[block[0]]}-{col_labels[block[-1]]}")
                head += f" (column{'s' if len(block) > 1 else ''} {span} of {len(col_labels)})"
            out.extend(wrap(head, width, indent=indent + "  ", first=indent))
        sep = " " * gap
        out.append((indent + " " * label_w + "".join(sep + col_labels[j].rjust(cell_w[j]) for j in block)).rstrip())
        for i, label in enumerate(row_labels):
            out.append((indent + label.ljust(label_w) + "".join(sep + cells[i][j].rjust(cell_w[j])
                                                                  for j in block)).rstrip())
    return out
