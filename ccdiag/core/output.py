"""Terminal and JSON output, kept in one place so every command behaves the same.

* With ``--json`` stdout carries exactly one JSON document; nothing else is printed there.
* Tables are rich tables on a terminal and plain, borderless, uncoloured text when piped.
* Logs and progress go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
from typing import Any, Iterable

log = logging.getLogger("ccdiag")


def setup_logging(verbose: int = 0) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(stream=sys.stderr, level=level, format="ccdiag: %(levelname)s: %(message)s")


def stdout_is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def silence_stdout() -> None:
    """The reader of stdout went away (``ccdiag check | head -1``): send the rest to /dev/null.

    The command still finishes and still exits with its verdict; a closed pipe must never turn a
    failing node into exit 0, nor a healthy one into exit 1.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


# C0 controls but tab, DEL, and C1 controls (0x9b is an 8-bit CSI): shown escaped, never sent to the
# terminal. Text from a snapshot (host name, device names, command output) reaches the report, and
# "\x1b]0;...\x07" would retitle the window, "\x1b[2J" clear it, "\r" overwrite a verdict.
_CONTROL_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """``text`` with terminal control characters shown as ``\\xNN`` (one line stays one line)."""
    if not isinstance(text, str):
        text = str(text)
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# the same, but newline and tab kept: for whole texts (an env file, a TOML policy, a rendered matrix)
_CONTROL_TEXT_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize_text(text: str) -> str:
    """Multi-line ``text`` with control characters but newline and tab shown as ``\\xNN``.

    For output written whole (``click.echo`` of a rendered file, a file written with ``-o``): lines
    stay lines, while a host or device name from a snapshot or paste cannot move the cursor, clear
    the screen or retitle the window of whoever prints or ``cat``s it. JSON needs none of this
    (``json.dumps`` escapes every control character)."""
    if not isinstance(text, str):
        text = str(text)
    return _CONTROL_TEXT_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def console(stderr: bool = False):
    """A rich Console: colour and boxes on a TTY, plain text otherwise."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's default exits with status 1
            self.quiet = True
            silence_stdout()

        def print(self, *objects: Any, **kw: Any) -> None:  # noqa: A003 - rich's name
            """Strings and Text printed with control characters escaped (see :func:`sanitize`)."""
            from rich.text import Text

            if any(getattr(obj, "uncropped", False) for obj in objects):
                kw["crop"] = False  # fit_table's lines: a word longer than the line stands whole
            clean = []
            for obj in objects:
                if isinstance(obj, str):
                    obj = sanitize(obj)
                elif isinstance(obj, Text) and _CONTROL_RE.search(obj.plain):
                    obj = Text(sanitize(obj.plain), style=obj.style)
                clean.append(obj)
            super().print(*clean, **kw)

    tty = sys.stderr.isatty() if stderr else stdout_is_tty()
    # piped output keeps long lines whole (grep-able) unless $COLUMNS asks for a width; text from
    # the machine is never read as rich markup or emoji codes (bus "ab" must not become an emoji)
    columns = os.environ.get("COLUMNS", "")
    width = None if tty else (int(columns) if columns.isdigit() and int(columns) > 0 else 200)
    return _Console(stderr=stderr, no_color=not tty or bool(os.environ.get("NO_COLOR")),
                   highlight=False, soft_wrap=not tty and width == 200, width=width,
                   force_terminal=None if tty else False, emoji=False, markup=False)


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]], **kw: Any):
    """A rich Table with borders on a TTY and none when piped (so ``grep``/``awk`` work)."""
    from rich import box
    from rich.table import Table

    tty = stdout_is_tty()
    t = Table(title=sanitize(title) if title is not None else None, box=box.SIMPLE_HEAD if tty else None, show_edge=tty, pad_edge=False,
              title_justify="left", **kw)
    for col in columns:
        t.add_column(sanitize(str(col)), overflow="fold")
    for row in rows:
        t.add_row(*["" if v is None else sanitize(str(v)) for v in row])
    return t


def _longest_token(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _column_widths(cols: list[tuple[str, ...]], least: list[int], width: int) -> list[int]:
    """Each column at least its longest word; the room left goes first to the columns whose typical
    cell (the 75th percentile) would wrap, then to those whose longest would."""
    widths = list(least)
    room = width - sum(widths) - 2 * (len(widths) - 1)
    for target in ([sorted(len(v) for v in col)[(3 * len(col)) // 4] for col in cols],
                   [max(len(v) for v in col) for col in cols]):
        while room > 0:
            k = max(range(len(widths)), key=lambda i: target[i] - widths[i])
            if target[k] <= widths[k]:
                break
            widths[k] += 1
            room -= 1
    return widths


def _wrapped(text: str, width: int, indent: str = "") -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


def _kept_columns(head: list[str], least: list[int], width: int, to_rows: Iterable[str]) -> list[int]:
    """The columns that stay in the table: those named in ``to_rows``, then others from the right,
    move out until every column left fits at its longest word."""
    keep = list(range(len(head)))
    order = [head.index(n) for n in to_rows if n in head] + list(range(len(head) - 1, 0, -1))
    for k in order:
        if sum(least[i] for i in keep) + 2 * (len(keep) - 1) <= width or len(keep) == 1:
            break
        if k in keep:
            keep.remove(k)
    return keep


def _fitted_lines(head: list[str], body: list[list[str]], keep: list[int], widths: list[int],
                  width: int) -> list[str]:
    lines = []
    pad = " " * (widths[0] + 2)
    for r, row in enumerate([head, *body]):
        cells = [_wrapped(row[i], w) for i, w in zip(keep, widths)]
        for j in range(max(len(c) for c in cells)):
            lines.append("  ".join((c[j] if j < len(c) else "").ljust(w) for c, w in zip(cells, widths)).rstrip())
        moved = [i for i in range(len(head)) if r and i not in keep and row[i]]
        for i in moved:
            lines.extend(_wrapped(f"{pad}{head[i]}: {row[i]}", width, pad + "  "))
    return lines


def fit_table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]], width: int,
              to_rows: Iterable[str] = ()):
    """A table that fits ``width`` columns without ever splitting a word, a PCI address or a UUID.

    When the table fits as it is, it is :func:`table`'s. Otherwise each column is given at least its
    longest word and cells wrap between words; if even that is too wide, the columns named in
    ``to_rows`` (then others, from the right) move out of the table into a line of their own under
    each row (``UUID: GPU-...``). Nothing is dropped or cut.
    """
    from rich.console import Group
    from rich.text import Text

    columns, rows = list(columns), [list(r) for r in rows]
    head = [sanitize(str(c)) for c in columns]
    body = [["" if v is None else sanitize(str(v)) for v in row] for row in rows]
    cols = list(zip(head, *body)) if body else [(h,) for h in head]
    natural = [max(len(v) for v in col) for col in cols]
    edges = 2 if stdout_is_tty() else 0  # a rich table on a terminal has a blank column on each side
    if sum(natural) + 2 * (len(head) - 1) + edges <= width:
        return table(title, columns, rows)
    least = [max(_longest_token(v) for v in col) for col in cols]
    keep = _kept_columns(head, least, width, to_rows)
    widths = _column_widths([cols[i][1:] or cols[i] for i in keep], [least[i] for i in keep], width)
    lines = (_wrapped(sanitize(title), width) if title else []) + _fitted_lines(head, body, keep, widths, width)
    group = Group(*(Text(line, no_wrap=True, overflow="ignore") for line in lines))
    group.uncropped = True  # type: ignore[attr-defined]  # read by console().print
    return group


#: above this many cells a table is printed as plain aligned text: rich measures and renders every
#: cell several times (~30 us each), so a pasted 512-device matrix (262,000 cells) took 8 s
PLAIN_TABLE_CELLS = 5000


def plain_table(title: str | None, columns: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """The layout :func:`table` has when piped (left-aligned, two spaces between columns, no
    borders), built in one pass over the cells; control characters escaped like :func:`sanitize`."""
    head = [sanitize("" if c is None else str(c)) for c in columns]
    body = [[sanitize("" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(c) for c in head]
    for row in body:
        for k, v in enumerate(row):
            if k >= len(widths):
                widths.append(len(v))
            elif len(v) > widths[k]:
                widths[k] = len(v)
    lines = [sanitize(title)] if title is not None else []
    for row in [head, *body]:
        lines.append("  ".join(v.ljust(widths[k]) for k, v in enumerate(row)).rstrip())
    return "\n".join(lines) + "\n"


def current_umask() -> int:
    """This process's umask, read without changing it (``os.umask`` can only be read by setting it,
    which races with every other thread creating a file)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


#: what every temporary file of :func:`write_atomic` is named after
TEMP_PREFIX = ".ccdiag-"


def _host_token() -> str:
    """This host's name as it may stand in a file name (letters, digits, dashes)."""
    import re
    import socket

    return re.sub(r"[^A-Za-z0-9-]", "", socket.gethostname().split(".")[0])[:32] or "host"


def write_atomic(path: str, text: str | bytes, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, synced, then
    renamed over it: a reader never sees half a file, and a full disk or a kill leaves the old
    file as it was (and no temporary one). ``mode`` defaults to what ``open()`` would give, 0666
    less the caller's umask; the temporary file has it before the first byte is written."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if mode is None:
        mode = 0o666 & ~current_umask()
    directory = os.path.dirname(os.path.abspath(path)) or "."
    # the writer's host and pid in the name: a temporary left by a writer killed with SIGKILL is
    # known stale on the next write (ccdiag.host.snapshot.sweep_stale_temporaries)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{_host_token()}-{os.getpid()}-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


#: documents larger than this (compact) are written compact: indenting runs json's pure-Python
#: encoder, about 6 times slower than its C one, and a 3,000-NIC node's report is tens of MB
PRETTY_MAX_BYTES = 2 << 20


def json_text(doc: Any) -> str:
    """``doc`` as JSON text ending in a newline: indented for a person to read, or compact when
    larger than :data:`PRETTY_MAX_BYTES` (the same document either way, for a program)."""
    compact = json.dumps(doc, sort_keys=True, default=str)
    if len(compact) > PRETTY_MAX_BYTES:
        return compact + "\n"
    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"


def emit_json(doc: Any, output: str | None = None) -> None:
    """Print one JSON document on stdout (and/or write it to ``output``)."""
    text = json_text(doc)
    if output:
        try:
            write_atomic(output, text)
        except OSError as exc:
            from ccdiag.core.errors import InputError

            raise InputError(f"cannot write {output}: {exc.strerror or exc}") from None
    else:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            silence_stdout()
