"""``nvidia-smi topo -m`` and ``topo -p2p`` text read into matrices: header, rows, affinity, legends.

Why a text parser when NVML exists: the matrix is what people paste into tickets, what the
topology graph is cross-checked against, and on some hosts the only view of NIC placement the
driver offers. So the parser must take the text as it arrives: straight from the tool (tab
separated), tabs expanded to spaces by a pager or a markdown renderer, indented, behind a shell
prompt, cut short, or damaged by a terminal. It refuses (:class:`TopoParseError`, naming the line)
rather than guess a cell; damage it can bound (lost affinity characters, missing rows) becomes a
warning and ``truncated``; damage with one reading (a lost tab, a cell that lost characters but has
a readable mirror) is repaired by :mod:`ccdiag.probes._smi_topo_repair` and listed in ``repairs``.

How columns are found without guessing:

* a line with tabs is split on tabs (the tool separates every field with one tab, so blank fields
  such as an empty CPU affinity keep their place);
* a tab-expanded line is turned back into tab fields: each field starts on a tab stop (a multiple
  of 8 after the indentation), a blank field is a run of 8 spaces. A token *off* the stops means
  characters were lost or inserted there; cells before that point are still exact, values after
  it are not used;
* text whose whitespace was collapsed to single spaces has no positions left: it is read by order
  only where no cell can be blank (no affinity columns, or every affinity value present).

Facts about the format, as seen in the real outputs under ``tests/fixtures/corpus/topo-m``: rows
carry one more field than the header before ``GPU NUMA ID`` (an empty one); NIC rows carry empty
affinity fields or none; drivers before the NODE level printed ``SOC`` for what is now ``SYS``;
newer drivers name NICs ``NIC0..`` and map them in a ``NIC Legend``, older ones use the RDMA device
name (``mlx5_0``) as the label.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Optional

from ccdiag.probes._smi_topo_repair import (
    DAMAGED, Vocabulary, confirm_by_mirrors, is_damaged, looks_like_a_level, mend_from_mirrors, repair_cells,
)
from ccdiag.probes._smi_topo_text import (
    CPU_LIST_RE, ELISION, GPU_NUMA_ID_RE, GPU_RE, LABEL_RE, LEVEL_RE, MAX_DEVICES, NIC_LABEL_RE, QUOTE_LIMIT,
    TopoParseError, check_bounds, clip, quote,
)

#: the columns after the device columns, in the order the tool prints them
EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

_P2P_VALUES = frozenset({"X", "OK", "CNS", "GNS", "TNS", "NS", "U"})  # plus any legend key
_EXTRA_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
# the value is stripped after the match: a lazy ``(.*?)\s*$`` retries the trailing-space scan at
# every character, quadratic in a line of spaces
_LEGEND_ENTRY_RE = re.compile(r"^\s*([^\s=]+)\s*=(.*)$")
# a legend key line; ``[ \t]`` and not ``\s``: with re.M, ``^\s*`` runs across newlines, so a paste of
# many blank lines made every line start rescan all the blank lines after it (quadratic)
_P2P_LEGEND_KEY_RE = re.compile(r"^[ \t]*([A-Z]{1,4})[ \t]+=", re.M)
_NIC_ENTRY_RE = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$")
# a shell prompt line ending in the command that printed the matrix
_P2P_PROMPT_RE = re.compile(r"nvidia-smi\s+topo\s+(?:-p2p|--p2p)\s*([rwnap])\s*$")
_PCI_ONLY_PROMPT_RE = re.compile(r"nvidia-smi\s+topo\s+(?:-mp|--matrix_pci)\s*$")
#: the longest CPU or GPU index ``topo -c`` output may carry
_MAX_INDEX_DIGITS = 7

Row = tuple[int, str, list[Optional[str]], Optional[list[str]]]  # line, label, cells, tail


@dataclass(frozen=True)
class TopoMatrix:
    """One ``nvidia-smi topo -m`` matrix.

    ``devices`` are the labels as printed (column order, then any row that had no column);
    ``cells[(row, column)]`` is the level as printed (``X``, ``NV18``, ``PIX``, ``SOC``...) or None
    for a blank cell. Affinity values are None when blank, ``N/A`` or unreadable.
    ``extra_columns`` says which of :data:`EXTRA_COLUMNS` the output had, so "absent" and "blank"
    stay apart.
    """

    devices: tuple[str, ...] = ()
    cells: dict[tuple[str, str], str | None] = field(default_factory=dict)
    cpu_affinity: dict[str, str | None] = field(default_factory=dict)
    numa_affinity: dict[str, str | None] = field(default_factory=dict)
    gpu_numa_id: dict[str, str | None] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    truncated: bool = False
    legacy_soc: bool = False
    extra_columns: tuple[str, ...] = ()
    #: every cell recovered from a damaged paste: "line 7: GPU1: 'PXBNODE' read as PXB, NODE (a tab lost)"
    repairs: tuple[str, ...] = ()

    @property
    def repaired(self) -> bool:
        return bool(self.repairs)

    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if GPU_RE.match(d))

    def nics(self) -> tuple[str, ...]:
        """Every non-GPU device: ``NICk`` labels or RDMA device names used as labels."""
        return tuple(d for d in self.devices if not GPU_RE.match(d))

    def nic_name(self, label: str) -> str:
        """``NIC0`` -> ``mlx5_0`` through the NIC legend; any other label is its own name."""
        return self.nic_legend.get(label, label)

    @cached_property
    def _labels_by_name(self) -> dict[str, str]:
        """Label by label and by RDMA device name, built once: a per-call scan of the devices made
        rendering an n-device matrix cubic."""
        devices = set(self.devices)
        out: dict[str, str] = {}
        for label, nic in self.nic_legend.items():
            if label in devices:
                out.setdefault(nic, label)  # the first legend entry wins, as the scan did
        out.update({d: d for d in self.devices})
        return out

    def label_of(self, name: str) -> str | None:
        """The label for a device label or an RDMA device name (``mlx5_2`` -> ``NIC0``)."""
        return self._labels_by_name.get(name)

    def raw_level(self, a: str, b: str) -> str | None:
        """The cell as printed, from row ``a`` or, when that row is missing, from row ``b``
        (a path level is a property of the pair, so the mirror cell says the same)."""
        la, lb = self.label_of(a), self.label_of(b)
        if la is None or lb is None:
            return None
        value = self.cells.get((la, lb))
        if value is None:
            value = self.cells.get((lb, la))
        if value is None and la == lb:
            return "X"
        return value

    def level(self, a: str, b: str) -> str | None:
        """The path level between two devices, with legacy ``SOC`` read as ``SYS`` (the same
        meaning: across the inter-socket link); None when unknown."""
        value = self.raw_level(a, b)
        return "SYS" if value == "SOC" else value

    def nvlinks(self, a: str, b: str) -> int | None:
        """The NVLink count of an ``NV#`` level, else None."""
        value = self.level(a, b)
        if value and value.startswith("NV") and value[2:].isdigit():
            return int(value[2:])
        return None


@dataclass(frozen=True)
class P2PMatrix:
    """One ``nvidia-smi topo -p2p <mode>`` matrix: ``cells[(a, b)]`` is ``OK``, ``CNS``, ``NS``..."""

    mode: str | None = None  # r (read), w (write), n (nvlink), a (atomics), p (prop); None unknown
    devices: tuple[str, ...] = ()
    cells: dict[tuple[str, str], str | None] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    truncated: bool = False
    repairs: tuple[str, ...] = ()

    def status(self, a: str, b: str) -> str | None:
        return self.cells.get((a, b))


# ---------------------------------------------------------------------------------------------
# Reading the grid


def _untab(s: str) -> tuple[list[str], int | None]:
    """Turn one tab-expanded line back into its tab fields.

    Returns the fields read and None, or the fields read so far and the column where a token sits
    off the tab stops (the text there lost or gained characters).
    """
    fields: list[str] = []
    p, n = 0, len(s)
    text_end = len(s.rstrip())  # computed once: slicing the rest at every field was quadratic
    while p < n:
        if p >= text_end:
            break  # trailing padding; blank trailing fields are indistinguishable from absent ones
        if s[p] == " " and (p + 1 >= n or s[p + 1] == " "):
            chunk = s[p:p + 8]
            if chunk.strip():
                return fields, p + len(chunk) - len(chunk.lstrip())
            fields.append("")
            p += 8
            continue
        start = p + 1 if s[p] == " " else p
        end = s.find(" ", start)
        if end < 0:
            end = n
        fields.append(s[p:end].strip())
        nxt = (end // 8 + 1) * 8
        gap = s[end:nxt]
        if gap.strip():
            return fields, end + len(gap) - len(gap.lstrip())
        p = nxt
    return fields, None


@dataclass
class _Header:
    line_no: int
    labels: list[str]
    extras: list[str]
    style: str  # "tabs" | "grid" | "collapsed"
    indent: int
    elided_at: tuple[int, ...]  # positions in the raw token list holding elision marks
    raw_count: int  # device tokens including elision marks
    extras_damaged: bool


def _header_tab_fields(line: str, line_no: int) -> tuple[list[str], list[str]]:
    """A tab-separated header: its device tokens and its affinity titles, in order."""
    parts = [p.strip() for p in line.split("\t")]
    if parts and parts[0] == "":
        parts = parts[1:]
    while parts and parts[-1] == "":
        parts.pop()
    raw: list[str] = []
    extras: list[str] = []
    for part in parts:
        if part in EXTRA_COLUMNS:
            extras.append(part)
        elif extras:
            raise TopoParseError(f"unknown column {quote(part)} after the affinity columns", line_no, line)
        elif part:
            raw.append(part)
    return raw, extras


def _header_space_fields(line: str, line_no: int) -> tuple[list[str], list[str], str, int, bool]:
    """A space-separated header: device tokens, affinity titles, style ("grid" when every token is
    on a tab stop, else "collapsed"), indentation, and whether the titles moved off the stops."""
    m = _EXTRA_RE.search(line)
    device_part = line[:m.start()] if m else line
    extras_part = line[m.start():] if m else ""
    extras = _EXTRA_RE.findall(extras_part)
    leftover = _EXTRA_RE.sub(" ", extras_part).strip()
    if leftover:
        raise TopoParseError(f"unknown column text {quote(leftover)} in the header", line_no, line)
    tokens = [(t.start(), t.group()) for t in re.finditer(r"\S+", device_part)]
    raw = [t for _, t in tokens]
    indent = tokens[0][0] - 8 if tokens else -1
    on_grid = indent >= 0 and all((pos - indent) % 8 == 0 for pos, _ in tokens)
    if not on_grid:
        return raw, extras, "collapsed", 0, False
    damaged = any((e.start() - indent) % 8 != 0 for e in _EXTRA_RE.finditer(line))
    return raw, extras, "grid", indent, damaged


def _check_labels(labels: list[str], extras: list[str], line_no: int, line: str) -> None:
    for label in labels:
        if not LABEL_RE.match(label):
            raise TopoParseError(f"{quote(label)} is not a device label", line_no, line)
    if len(labels) > MAX_DEVICES:
        raise TopoParseError(f"{len(labels)} device labels in the header, more than the {MAX_DEVICES} "
                             "a matrix may have (MAX_DEVICES)", line_no, line)
    dup = {x for x, k in Counter(labels).items() if k > 1}  # one count, not one list scan per label
    if dup:
        raise TopoParseError(f"device label {clip(sorted(dup)[0])} appears twice", line_no, line)
    if len(set(extras)) != len(extras):
        raise TopoParseError("an affinity column appears twice", line_no, line)


def _split_header(line: str, line_no: int) -> _Header:
    if "\t" in line:
        raw, extras = _header_tab_fields(line, line_no)
        style, indent, damaged = "tabs", 0, False
    else:
        raw, extras, style, indent, damaged = _header_space_fields(line, line_no)
    elided = tuple(i for i, t in enumerate(raw) if t in ELISION)
    labels = [t for t in raw if t not in ELISION]
    _check_labels(labels, extras, line_no, line)
    return _Header(line_no, labels, extras, style, indent, elided, len(raw), damaged)


def _is_header(line: str, valid_cell: Callable[[str], bool]) -> bool:
    tokens = line.split()
    if not tokens or not GPU_RE.match(tokens[0]):
        return False
    return len(tokens) == 1 or not valid_cell(tokens[1])


@dataclass
class _Grid:
    """What the matrix and p2p parsers share: header, rows, legend sections, warnings."""

    header: _Header
    rows: list[Row]
    legend: dict[str, str]
    nic_legend: dict[str, str]
    has_legend: bool
    has_nic_legend: bool
    warnings: list[str]
    truncated: bool
    prompt: str
    lines: list[str]
    repairs: list[str] = field(default_factory=list)
    #: labels of the rows where a fused cell was split (their cells are checked against the mirrors)
    split_rows: list[str] = field(default_factory=list)

    def text(self, line_no: int) -> str:
        return self.lines[line_no - 1] if 0 < line_no <= len(self.lines) else ""


@dataclass
class _Lines:
    """The pasted lines, and whether the last one lost its newline (so may be cut short)."""

    lines: list[str]
    cut_last: bool

    @classmethod
    def of(cls, text: str) -> _Lines:
        lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
        cut_last = not text.endswith("\n")
        if not cut_last:
            lines.pop()  # the empty string after the final newline
        return cls(lines, cut_last)

    def cut(self, i: int) -> bool:
        return self.cut_last and i == len(self.lines) - 1


@dataclass
class _Reading:
    """What reading the rows and legends gathers besides them."""

    warnings: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    split_rows: list[str] = field(default_factory=list)
    truncated: bool = False

    def cut_short(self, message: str) -> None:
        self.truncated = True
        self.warnings.append(message)


def _find_header(src: _Lines, vocab: Vocabulary, what: str) -> int:
    lines = src.lines
    header_i = next((i for i, ln in enumerate(lines) if not src.cut(i) and _is_header(ln, vocab)), None)
    if header_i is None:
        shown = next((ln for ln in reversed(lines) if ln.strip()), "")
        raise TopoParseError(f"no {what} header (a line of device labels starting with GPU0) found",
                             max(len(lines), 1), shown)
    return header_i


def _read_rows(src: _Lines, header: _Header, vocab: Vocabulary, reading: _Reading) -> tuple[list[Row], int]:
    """The rows under the header, up to the first blank line or text that is not a row; returns them
    and the index of the line after them. Every damaged row is named in one refusal."""
    lines = src.lines
    label_set = set(header.labels)
    rows: list[Row] = []
    damaged: list[TopoParseError] = []
    i = header.line_no
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped in ("Legend:", "NIC Legend:"):
            break
        tokens = stripped.split()
        if tokens[0] not in label_set and not (len(tokens) > 1 and vocab(tokens[1])):
            break  # text after the matrix (a prompt, a note): not a row
        if src.cut(i):
            reading.cut_short(f"line {i + 1}: last line has no newline (cut short?); row {clip(tokens[0])} not used")
            return rows + _refuse_damaged(damaged), i + 1
        if len(rows) + len(damaged) >= MAX_DEVICES:
            raise TopoParseError(f"more than {MAX_DEVICES} rows (MAX_DEVICES)", i + 1, line)
        try:
            rows.append(_split_row(line, i + 1, header, vocab, reading))
        except TopoParseError as exc:
            damaged.append(exc)  # keep reading: a refusal names every damaged row at once
        i += 1
    return rows + _refuse_damaged(damaged), i


def _refuse_damaged(damaged: list[TopoParseError]) -> list[Row]:
    if damaged:
        raise TopoParseError.of_all(damaged)
    return []


def _read_legends(src: _Lines, start: int, reading: _Reading) -> tuple[dict[str, str], dict[str, str], bool, bool]:
    """The ``Legend:`` and ``NIC Legend:`` sections after the rows: (legend, NIC legend, whether
    each section was there)."""
    lines = src.lines
    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    seen = {"legend": False, "nic": False}
    section = None
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if stripped in ("Legend:", "NIC Legend:"):
            section = "legend" if stripped == "Legend:" else "nic"
            seen[section] = True
        elif section == "legend":
            m = _LEGEND_ENTRY_RE.match(lines[j])
            if m:
                legend[m.group(1)] = m.group(2).strip()
        elif section == "nic":
            _read_nic_entry(src, j, nic_legend, reading)
    return legend, nic_legend, seen["legend"], seen["nic"]


def _read_nic_entry(src: _Lines, j: int, nic_legend: dict[str, str], reading: _Reading) -> None:
    m = _NIC_ENTRY_RE.match(src.lines[j])
    if not m:
        return
    if src.cut(j):
        reading.cut_short(f"line {j + 1}: last line has no newline (cut short?); NIC legend entry {m.group(1)} not used")
        return
    nic_legend[m.group(1)] = m.group(2)
    if len(nic_legend) > MAX_DEVICES:
        raise TopoParseError(f"more than {MAX_DEVICES} NIC legend entries (MAX_DEVICES)", j + 1, src.lines[j])


def _read_grid(text: str, valid_cell: Callable[[str], bool], what: str) -> _Grid:
    vocab = Vocabulary(valid_cell)
    src = _Lines.of(text)
    header_i = _find_header(src, vocab, what)
    prompt = next((ln for ln in reversed(src.lines[:header_i]) if ln.strip()), "")
    header = _split_header(src.lines[header_i], header_i + 1)
    reading = _Reading()
    if header.extras_damaged:
        reading.warnings.append(f"line {header_i + 1}: affinity column titles are off the tab stops "
                                "(characters lost in copying)")
    if header.elided_at:
        reading.cut_short(f"line {header_i + 1}: columns elided with '. . .'; only the devices shown are known")
    rows, after = _read_rows(src, header, vocab, reading)
    if not rows:
        shown = src.lines[header_i + 1] if header_i + 1 < len(src.lines) else ""
        raise TopoParseError(f"{what} header without any row below it", header_i + 2, shown)
    legend, nic_legend, has_legend, has_nic_legend = _read_legends(src, after, reading)
    if not has_legend:
        reading.cut_short("no 'Legend:' section after the matrix (output cut short?)")
    return _Grid(header, rows, legend, nic_legend, has_legend, has_nic_legend, reading.warnings, reading.truncated,
                 prompt, src.lines, reading.repairs, reading.split_rows)


def _row_fields(line: str, line_no: int, header: _Header, vocab: Vocabulary,
                reading: _Reading) -> tuple[str, list[str], list[str] | None]:
    """The row's label, its raw cell tokens (elision marks included) and its tail (None when the
    tail is unreadable), fused cells split."""
    if "\t" in line:
        fields = [f.strip() for f in line.split("\t")]
        return _repaired_fields(fields[0], fields[1:], line_no, header, vocab, reading)
    if header.style == "grid":
        return _grid_fields(line, line_no, header, reading)
    tokens = line.split()
    label, raw_cells, tail = _repaired_fields(tokens[0], tokens[1:], line_no, header, vocab, reading)
    if tail and len(tail) != len(header.extras):
        raise TopoParseError(
            f"{len(tail)} values after the {clip(label)} cells for {len(header.extras)} columns, and "
            "whitespace gives no column positions to place them", line_no, line)
    return label, raw_cells, tail


def _repaired_fields(label: str, rest: list[str], line_no: int, header: _Header, vocab: Vocabulary,
                     reading: _Reading) -> tuple[str, list[str], list[str]]:
    before = len(reading.repairs)
    fields = repair_cells(rest, header.raw_count, vocab, label, line_no, reading.repairs)
    if len(reading.repairs) > before:
        reading.split_rows.append(label)
    return label, fields[:header.raw_count], fields[header.raw_count:]


def _grid_fields(line: str, line_no: int, header: _Header,
                 reading: _Reading) -> tuple[str, list[str], list[str] | None]:
    if line[:header.indent].strip():
        raise TopoParseError(f"row is not indented like the header ({header.indent} columns)", line_no, line)
    fields, bad = _untab(line[header.indent:])
    label = fields[0] if fields else ""
    if bad is None:
        return label, fields[1:1 + header.raw_count], fields[1 + header.raw_count:]
    if len(fields) < 1 + header.raw_count:
        raise TopoParseError(f"cell at column {bad + header.indent + 1} is off the tab stops "
                             "(characters lost or shifted)", line_no, line)
    if not header.extras_damaged:
        reading.warnings.append(f"line {line_no}: values after the {clip(label)} cells are off the tab stops "
                                "(characters lost in copying); its affinity is not used")
    return label, fields[1:1 + header.raw_count], None


def _split_row(line: str, line_no: int, header: _Header, vocab: Vocabulary, reading: _Reading) -> Row:
    """One matrix row: (line number, label, cells, tail fields or None when unreadable)."""
    label, raw_cells, tail = _row_fields(line, line_no, header, vocab, reading)
    ncols = len(header.labels)
    if len(raw_cells) != header.raw_count:
        raise TopoParseError(f"expected {ncols} cells for {clip(label)}, found "
                             f"{len(raw_cells) - len(header.elided_at)}", line_no, line)
    marks = tuple(k for k, c in enumerate(raw_cells) if c in ELISION)
    if marks != header.elided_at:
        raise TopoParseError(f"elision marks of {clip(label)} are not under the header's", line_no, line)
    cells: list[str | None] = []
    for c in raw_cells:
        if c not in ELISION:
            cells.append(_cell(c, label, ncols, len(cells), vocab, line_no, line))
    if not LABEL_RE.match(label):
        raise TopoParseError(f"{quote(label)} is not a device label", line_no, line)
    return line_no, label, cells, tail


def _cell(c: str, label: str, ncols: int, k: int, vocab: Vocabulary, line_no: int, line: str) -> str | None:
    """One cell: its value, None when blank, or marked damaged when characters were lost inside it
    ("PH" for PHB) so that its mirror cell may say what it was."""
    if c == "":
        return None
    if vocab(c):
        return c
    if CPU_LIST_RE.match(c) or c == "N/A":  # an affinity value: the row is short of cells
        raise TopoParseError(f"expected {ncols} cells for {clip(label)}, found {k}", line_no, line)
    if looks_like_a_level(c) or (c.strip("? ") == "X"):
        return DAMAGED + c
    raise TopoParseError(f"{quote(c)} is not a known value (cell of {clip(label)})", line_no, line)


def _assemble(grid: _Grid, kind: str) -> tuple[tuple[str, ...], dict[tuple[str, str], str | None]]:
    """Devices, cells and the checks that hold for every matrix (X exactly on the diagonal)."""
    columns = grid.header.labels
    devices = list(columns)
    device_set = set(devices)
    cells: dict[tuple[str, str], str | None] = {}
    seen: dict[str, None] = {}  # ordered, and a set for the lookups (lists made this quadratic)
    for line_no, label, row_cells, _tail in grid.rows:
        if label in seen:
            raise TopoParseError(f"second row for {clip(label)}", line_no, grid.text(line_no))
        seen[label] = None
        if label not in device_set:
            devices.append(label)
            device_set.add(label)
        for col, value in zip(columns, row_cells):
            cells[(label, col)] = _checked_cell(grid, line_no, label, col, value)
    line_of = {label: line_no for line_no, label, _c, _t in grid.rows}
    # a path level is the same both ways; a p2p capability need not be, so it is never mirrored
    mend_from_mirrors(cells, line_of, grid.text, grid.repairs, symmetric=(kind == "level"))
    if kind == "level" and grid.split_rows:
        confirm_by_mirrors(cells, grid.split_rows, columns, line_of, grid.text)
    _warn_incomplete(grid, kind, seen)
    return tuple(devices), cells


def _checked_cell(grid: _Grid, line_no: int, label: str, col: str, value: str | None) -> str | None:
    if value == "X" and col != label:
        raise TopoParseError(f"X (self) off the diagonal, at {clip(label)}/{clip(col)}", line_no, grid.text(line_no))
    if col == label and is_damaged(value):
        grid.repairs.append(f"line {line_no}: {clip(label)}/{clip(col)} {quote((value or '')[len(DAMAGED):])} "
                            "read as X (the diagonal)")
        return "X"
    if col == label and value not in ("X", None):
        raise TopoParseError(f"diagonal cell of {clip(label)} is {quote(value)}, expected X", line_no,
                             grid.text(line_no))
    return value


def _warn_incomplete(grid: _Grid, kind: str, seen: dict[str, None]) -> None:
    columns = grid.header.labels
    for line_no, label, row_cells, _tail in grid.rows:
        blanks = [c for c, v in zip(columns, row_cells) if v is None]
        if blanks:  # the tool never prints a blank level: the value is unknown
            grid.truncated = True
            grid.warnings.append(f"line {line_no}: blank {kind} cells for {clip(label)}: {clip(', '.join(blanks), 2 * QUOTE_LIMIT)}")
    missing = [c for c in columns if c not in seen]
    if missing:
        grid.truncated = True
        grid.warnings.append(f"no row for {clip(', '.join(missing), 2 * QUOTE_LIMIT)} (output cut short?)")
    column_set = set(columns)
    extra = [d for d in seen if d not in column_set]
    if extra:
        grid.truncated = True
        grid.warnings.append(f"rows without a column: {clip(', '.join(extra), 2 * QUOTE_LIMIT)} (columns lost in copying?)")


# ---------------------------------------------------------------------------------------------
# Public parsers


def _affinity_ok(column: str, value: str) -> bool:
    return bool(CPU_LIST_RE.match(value) if column != "GPU NUMA ID" else GPU_NUMA_ID_RE.match(value))


def _affinity_value(column: str, value: str, label: str, line_no: int, warnings: list[str]) -> str | None:
    if value in ("", "N/A"):
        return None
    if not _affinity_ok(column, value):
        warnings.append(f"line {line_no}: {column} of {clip(label)} {quote(value)} is not a valid value; not used")
        return None
    return value


def _affinity(grid: _Grid) -> tuple[list[str], dict[str, dict[str, str | None]]]:
    """The affinity columns read and their values by device."""
    header, warnings = grid.header, grid.warnings
    extras = header.extras
    placed = None
    if header.extras_damaged:
        # the titles moved, the values did not: rows keep them on their own tab stops, in column
        # order, so they are placed by their own positions when every row agrees with the columns
        placed = _place_by_position(grid, extras)
        if placed is None:
            warnings.append("affinity values ignored: the rows do not line up with the damaged titles")
            extras = []  # unknown, not blank
        else:
            warnings.append("affinity values placed by their own positions in each row")
    affinity: dict[str, dict[str, str | None]] = {col: {} for col in extras}
    for line_no, label, _cells, tail in grid.rows:
        if placed is not None:
            values = placed.get(label)
        else:
            values = _place_tail(tail, extras, label, line_no, grid.text(line_no))
        for k, col in enumerate(extras):
            raw = values[k] if values is not None else ""
            affinity[col][label] = _affinity_value(col, raw, label, line_no, warnings)
    return extras, affinity


def _warn_names(grid: _Grid, devices: tuple[str, ...], cells: dict[tuple[str, str], str | None]) -> bool:
    """Warnings about the prompt, legacy levels and the NIC legend; returns whether SOC was seen."""
    warnings = grid.warnings
    if _PCI_ONLY_PROMPT_RE.search(grid.prompt):
        warnings.append("PCI-only matrix (topo -mp): NVLink connections are not shown")
    legacy = any(v == "SOC" for v in cells.values()) or "SOC" in grid.legend
    if legacy:
        warnings.append("legacy SOC level (older driver): read as SYS")
    unnamed = [d for d in devices if NIC_LABEL_RE.match(d) and d not in grid.nic_legend]
    if unnamed:
        grid.truncated = True
        where = "no 'NIC Legend:' section" if not grid.has_nic_legend else "NIC legend incomplete"
        warnings.append(f"{where}: no RDMA device name for {clip(', '.join(unnamed), 2 * QUOTE_LIMIT)}")
    stray = [k for k in grid.nic_legend if k not in devices]
    if stray:
        warnings.append(f"NIC legend names devices not in the matrix: {clip(', '.join(stray), 2 * QUOTE_LIMIT)}")
    return legacy


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` / ``topo --matrix`` (or ``-mp``) output, as the tool printed it
    or as it was pasted. Lines before the header (prompts, notes) are skipped."""
    check_bounds(text, "topology matrix")
    grid = _read_grid(text, lambda c: bool(LEVEL_RE.match(c)), "topology matrix")
    devices, cells = _assemble(grid, "level")
    extras, affinity = _affinity(grid)
    legacy = _warn_names(grid, devices, cells)
    return TopoMatrix(
        devices=devices, cells=cells,
        cpu_affinity=affinity.get("CPU Affinity", {}),
        numa_affinity=affinity.get("NUMA Affinity", {}),
        gpu_numa_id=affinity.get("GPU NUMA ID", {}),
        nic_legend=dict(grid.nic_legend), legend=dict(grid.legend),
        warnings=tuple(grid.warnings), truncated=grid.truncated, legacy_soc=legacy,
        extra_columns=tuple(extras), repairs=tuple(grid.repairs),
    )


def _place_by_position(grid: _Grid, extras: list[str]) -> dict[str, list[str]] | None:
    """Each row's affinity values by their order on the row, or None when a row does not fit."""
    out: dict[str, list[str]] = {}
    for line_no, label, _cells, tail in grid.rows:
        if tail is None:
            if GPU_RE.match(label):
                return None
            continue
        try:
            values = _place_tail(tail, extras, label, line_no, grid.text(line_no))
        except TopoParseError:
            return None
        if any(v and v != "N/A" and not _affinity_ok(col, v) for col, v in zip(extras, values or [])):
            return None
        out[label] = values or []
    return out


def _place_tail(tail: list[str] | None, extras: list[str], label: str, line_no: int,
                line: str) -> list[str] | None:
    """Map the fields after the level cells onto the affinity columns."""
    if tail is None:
        return None
    tail = list(tail)
    n = len(extras)
    # the tool prints an empty field before GPU NUMA ID (rows have one more field than the header)
    if extras and extras[-1] == "GPU NUMA ID" and len(tail) > n and tail[n - 1] == "":
        del tail[n - 1]
    if any(v for v in tail[n:]):
        raise TopoParseError(f"values after the last column for {clip(label)}: {quote(tail[n:])}", line_no, line)
    return (tail + [""] * n)[:n]


def parse_topo_p2p(text: str, mode: str | None = None) -> P2PMatrix:
    """Parse ``nvidia-smi topo -p2p <r|w|n|a|p>`` output. ``mode`` is the letter asked for; when not
    given it is read from a preceding prompt line, else None."""
    check_bounds(text, "p2p matrix")
    legend_keys = {m.group(1) for m in _P2P_LEGEND_KEY_RE.finditer(text)}
    allowed = _P2P_VALUES | legend_keys
    grid = _read_grid(text, lambda c: c in allowed, "p2p matrix")
    devices, cells = _assemble(grid, "p2p")
    for line_no, label, _cells, tail in grid.rows:
        if tail and any(tail):
            raise TopoParseError(f"values after the {clip(label)} cells: {quote(tail)}", line_no, grid.text(line_no))
    if grid.header.extras:
        raise TopoParseError("affinity columns in a p2p matrix", grid.header.line_no,
                             grid.text(grid.header.line_no))
    if mode is None:
        m = _P2P_PROMPT_RE.search(grid.prompt)
        mode = m.group(1) if m else None
    return P2PMatrix(mode=mode, devices=devices, cells=cells, legend=dict(grid.legend),
                     warnings=tuple(grid.warnings), truncated=grid.truncated, repairs=tuple(grid.repairs))


def parse_topo_cpu_query(text: str) -> dict[int, tuple[int, ...]]:
    """``nvidia-smi topo -c N`` output (several may be concatenated): CPU -> GPU indices."""
    check_bounds(text, "CPU affinity query")
    out: dict[int, tuple[int, ...]] = {}
    lines = text.splitlines()
    for k, line in enumerate(lines):
        m = re.match(r"^\s*The GPUs that have an affinity with CPU ([0-9]+) are:\s*$", line)
        if not m:
            continue
        nxt = lines[k + 1] if k + 1 < len(lines) else ""
        if not re.match(r"^\s*[0-9]+(\s*,\s*[0-9]+)*\s*$", nxt):
            raise TopoParseError("expected a list of GPU indices", k + 2, nxt)
        # int() of thousands of digits raises a bare ValueError; no CPU or GPU index is that long
        if len(m.group(1)) > _MAX_INDEX_DIGITS:
            raise TopoParseError(f"CPU number of {len(m.group(1))} digits (at most {_MAX_INDEX_DIGITS})", k + 1, line)
        if any(len(x.strip()) > _MAX_INDEX_DIGITS for x in nxt.split(",")):
            raise TopoParseError(f"GPU index of more than {_MAX_INDEX_DIGITS} digits", k + 2, nxt)
        out[int(m.group(1))] = tuple(int(x) for x in nxt.split(","))
    return out
