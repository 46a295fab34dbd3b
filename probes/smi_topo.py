"""``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p`` text: parsed, rendered and compared.

Why a text parser when NVML exists: the matrix is what people paste into tickets, what the
topology graph is cross-checked against, and on some hosts the only view of NIC placement the
driver offers. So the parser must take the text as it arrives: straight from the tool (tab
separated), tabs expanded to spaces by a pager or a markdown renderer, indented, behind a shell
prompt, cut short, or damaged by a terminal. It refuses (:class:`TopoParseError`, naming the line)
rather than guess a cell; damage it can bound (lost affinity characters, missing rows) becomes a
warning and ``truncated``.

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
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

from ccdiag.errors import UserInputError
from ccdiag.model import ReadError
from ccdiag.probing import ProbeUnavailable, probe

NAME = "smi_topo"
TIMEOUT_S = 25.0

#: per-command deadline; a wedged GPU makes nvidia-smi hang, and each later call would hang too
COMMAND_TIMEOUT_S = 10.0
#: the ``topo -p2p`` capabilities collect() asks for: read, write, nvlink, atomics
P2P_MODES = ("r", "w", "n", "a")

#: the columns after the device columns, in the order the tool prints them
EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

# an NVLink count has at most 3 digits (18 on Hopper); more is noise, and int() of thousands of
# digits raises ValueError
_LEVEL_RE = re.compile(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV[0-9]{1,3})$")
_P2P_VALUES = frozenset({"X", "OK", "CNS", "GNS", "TNS", "NS", "U"})  # plus any legend key
_GPU_RE = re.compile(r"^GPU[0-9]+$")
_NIC_LABEL_RE = re.compile(r"^NIC[0-9]+$")
_LABEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
_CPU_LIST_RE = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
_EXTRA_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
_ELISION = frozenset({".", "...", ". . .", "\u2026"})
# the value is stripped after the match: a lazy ``(.*?)\s*$`` retries the trailing-space scan at
# every character, quadratic in a line of spaces
_LEGEND_ENTRY_RE = re.compile(r"^\s*([^\s=]+)\s*=(.*)$")
# a legend key line; ``[ \t]`` and not ``\s``: with re.M, ``^\s*`` runs across newlines, so a paste of
# many blank lines made every line start rescan all the blank lines after it (quadratic)
_P2P_LEGEND_KEY_RE = re.compile(r"^[ \t]*([A-Z]{1,4})[ \t]+=", re.M)
_GPU_NUMA_ID_RE = re.compile(r"^[0-9]{1,6}$")
_NIC_ENTRY_RE = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$")
# a shell prompt line ending in the command that printed the matrix
_P2P_PROMPT_RE = re.compile(r"nvidia-smi\s+topo\s+(?:-p2p|--p2p)\s*([rwnap])\s*$")
_PCI_ONLY_PROMPT_RE = re.compile(r"nvidia-smi\s+topo\s+(?:-mp|--matrix_pci)\s*$")


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


def _clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ending in "..." when it was cut."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _q(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A quoted fragment of the input for a message, never longer than about ``limit`` characters."""
    if isinstance(value, str):
        return repr(_clip(value, limit))
    if isinstance(value, (list, tuple)):
        shown = [_clip(v, limit) if isinstance(v, str) else v for v in value[:8]]
        return _clip(repr(shown), limit)
    return _clip(repr(value), limit)


class TopoParseError(UserInputError, ValueError):
    """Text that cannot be read as a topology matrix without guessing; names the line (and, when
    several rows are damaged, every one of them: ``others``)."""

    def __init__(self, message: str, line_no: int, line: str, others: tuple["TopoParseError", ...] = ()):
        self.message = message
        self.line_no = line_no
        self.line = line
        self.others = tuple(others)
        super().__init__(message)

    def __str__(self) -> str:
        first = f"line {self.line_no}: {self.message}: {_q(self.line, 2 * QUOTE_LIMIT)}"
        if not self.others:
            return first
        rest = "; ".join(f"line {e.line_no}: {e.message}" for e in self.others)
        return f"{len(self.others) + 1} damaged lines: {first}; {rest}"


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


# ---------------------------------------------------------------------------------------------
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
    #: every cell recovered from a damaged paste: "line 7: GPU1/NIC0 'PXBNODE' read as PXB, NODE"
    repairs: tuple[str, ...] = ()

    @property
    def repaired(self) -> bool:
        return bool(self.repairs)

    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if _GPU_RE.match(d))

    def nics(self) -> tuple[str, ...]:
        """Every non-GPU device: ``NICk`` labels or RDMA device names used as labels."""
        return tuple(d for d in self.devices if not _GPU_RE.match(d))

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


@dataclass(frozen=True)
class SmiTopoObservation:
    """What the probe read: the matrix (None when its command failed or its text was refused), the
    p2p matrices by mode letter, one line per command run, and what went wrong, per command."""

    matrix: TopoMatrix | None = None
    p2p: dict[str, P2PMatrix] = field(default_factory=dict)
    commands: tuple[str, ...] = ()
    errors: tuple[ReadError, ...] = ()


# ---------------------------------------------------------------------------------------------
# Reading the grid


#: a cell whose text was damaged in copying; filled from its mirror cell when that is readable
DAMAGED = "\x00damaged"
#: longest token tried for a split into several values (a merged pair or three is far shorter)
_MAX_MERGED = 48
#: the level words a mangled cell may have started as ("PH" for PHB, "PXQ" for PXB)
_LEVEL_WORDS = ("SYS", "SOC", "NODE", "PHB", "PXB", "PIX", "NV")


def _looks_like_a_level(text: str) -> bool:
    """A cell damaged in copying, not garbage: short and beginning like a level word."""
    t = text.strip().upper()
    return 0 < len(t) <= 6 and any(w.startswith(t[:2]) or t.startswith(w[:2]) for w in _LEVEL_WORDS if len(t) >= 2)


def _segmentations(token: str, valid_cell, limit: int = 2) -> list[list[str]]:
    """Ways to read ``token`` as several valid cells run together (``PXBNODE`` -> PXB, NODE), at most
    ``limit`` of them (two already means ambiguous). Linear in the token for a fixed vocabulary."""
    if len(token) > _MAX_MERGED:
        return []
    memo: dict[int, list[list[str]]] = {}

    def from_pos(i: int) -> list[list[str]]:
        if i == len(token):
            return [[]]
        if i in memo:
            return memo[i]
        out: list[list[str]] = []
        for j in range(i + 1, min(len(token), i + 8) + 1):
            part = token[i:j]
            if valid_cell(part) and not (part.startswith("NV") and j < len(token) and token[j].isdigit()):
                for rest in from_pos(j):
                    out.append([part] + rest)
                    if len(out) >= limit:
                        break
            if len(out) >= limit:
                break
        memo[i] = out
        return out

    return [s for s in from_pos(0) if len(s) > 1]


class _Vocabulary:
    """A cell validator that remembers its answers and its segmentations: a paste repeats the same
    few tokens (``SYS``, ``PXBNODE``) thousands of times, so each is judged once per parse."""

    def __init__(self, valid_cell):
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
            splits = self._splits[token] = _segmentations(token, self)
        return splits


def _repair_cells(tokens: list[str], want: int, valid_cell, label: str, line_no: int,
                  repairs: list[str]) -> list[str]:
    """``tokens`` (the row after its label) with merged cells split where the split is the only one
    possible, and a cell run into the affinity value (``PIX0-47``) cut apart; stops once ``want``
    cells are read, the rest is the row's tail. Each repair is listed in ``repairs``."""
    out: list[str] = []
    for k, tok in enumerate(tokens):
        if len(out) >= want or valid_cell(tok) or tok in _ELISION or tok == "":
            out.append(tok)
            continue
        seg = getattr(valid_cell, "segmentations", None)
        splits = seg(tok) if seg is not None else _segmentations(tok, valid_cell)
        if len(splits) == 1 and len(out) + len(splits[0]) <= want:
            out.extend(splits[0])
            repairs.append(f"line {line_no}: {_clip(label)}: {_q(tok)} read as {', '.join(splits[0])} (a tab lost)")
            continue
        m = re.match(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV[0-9]+|OK|NS|CNS|GNS|TNS|U)([0-9][0-9,\-]*)$", tok)
        if m and len(out) + 1 == want and valid_cell(m.group(1)) and _CPU_LIST_RE.match(m.group(2)):
            out.extend([m.group(1), m.group(2)])
            repairs.append(f"line {line_no}: {_clip(label)}: {_q(tok)} read as {m.group(1)} then affinity "
                           f"{m.group(2)} (a tab lost)")
            continue
        out.append(tok)
    return out


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


def _split_header(line: str, line_no: int) -> _Header:
    if "\t" in line:
        parts = [p.strip() for p in line.split("\t")]
        if parts and parts[0] == "":
            parts = parts[1:]
        while parts and parts[-1] == "":
            parts.pop()
        raw, extras = [], []
        for part in parts:
            if part in EXTRA_COLUMNS:
                extras.append(part)
            elif extras:
                raise TopoParseError(f"unknown column {_q(part)} after the affinity columns", line_no, line)
            elif part:
                raw.append(part)
        style, indent, damaged = "tabs", 0, False
    else:
        m = _EXTRA_RE.search(line)
        device_part = line[:m.start()] if m else line
        extras_part = line[m.start():] if m else ""
        extras = _EXTRA_RE.findall(extras_part)
        leftover = _EXTRA_RE.sub(" ", extras_part).strip()
        if leftover:
            raise TopoParseError(f"unknown column text {_q(leftover)} in the header", line_no, line)
        tokens = [(t.start(), t.group()) for t in re.finditer(r"\S+", device_part)]
        raw = [t for _, t in tokens]
        indent = tokens[0][0] - 8 if tokens else -1
        on_grid = indent >= 0 and all((pos - indent) % 8 == 0 for pos, _ in tokens)
        style = "grid" if on_grid else "collapsed"
        damaged = on_grid and any((e.start() - indent) % 8 != 0 for e in _EXTRA_RE.finditer(line))
        if not on_grid:
            indent = 0
    elided = tuple(i for i, t in enumerate(raw) if t in _ELISION)
    labels = [t for t in raw if t not in _ELISION]
    for label in labels:
        if not _LABEL_RE.match(label):
            raise TopoParseError(f"{_q(label)} is not a device label", line_no, line)
    if len(labels) > MAX_DEVICES:
        raise TopoParseError(f"{len(labels)} device labels in the header, more than the {MAX_DEVICES} "
                             "a matrix may have (MAX_DEVICES)", line_no, line)
    dup = {x for x, k in Counter(labels).items() if k > 1}  # one count, not one list scan per label
    if dup:
        raise TopoParseError(f"device label {_clip(sorted(dup)[0])} appears twice", line_no, line)
    if len(set(extras)) != len(extras):
        raise TopoParseError("an affinity column appears twice", line_no, line)
    return _Header(line_no, labels, extras, style, indent, elided, len(raw), damaged)


def _is_header(line: str, valid_cell) -> bool:
    tokens = line.split()
    if not tokens or not _GPU_RE.match(tokens[0]):
        return False
    return len(tokens) == 1 or not valid_cell(tokens[1])


@dataclass
class _Grid:
    """What the matrix and p2p parsers share: header, rows, legend sections, warnings."""

    header: _Header
    rows: list[tuple[int, str, list[str | None], list[str] | None]]  # line, label, cells, tail
    legend: dict[str, str]
    nic_legend: dict[str, str]
    has_legend: bool
    has_nic_legend: bool
    warnings: list[str]
    truncated: bool
    prompt: str
    lines: list[str]
    repairs: list[str] = field(default_factory=list)

    def text(self, line_no: int) -> str:
        return self.lines[line_no - 1] if 0 < line_no <= len(self.lines) else ""


def _read_grid(text: str, valid_cell, what: str) -> _Grid:
    valid_cell = _Vocabulary(valid_cell)
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    cut_last = not text.endswith("\n")
    if not cut_last:
        lines.pop()  # the empty string after the final newline
    last = len(lines) - 1
    warnings: list[str] = []
    truncated = False

    def cut(i: int) -> bool:
        return cut_last and i == last

    header_i = next((i for i, ln in enumerate(lines) if not cut(i) and _is_header(ln, valid_cell)), None)
    if header_i is None:
        shown = next((ln for ln in reversed(lines) if ln.strip()), "")
        raise TopoParseError(f"no {what} header (a line of device labels starting with GPU0) found",
                             max(len(lines), 1), shown)
    prompt = next((ln for ln in reversed(lines[:header_i]) if ln.strip()), "")
    header = _split_header(lines[header_i], header_i + 1)
    if header.extras_damaged:
        warnings.append(f"line {header_i + 1}: affinity column titles are off the tab stops "
                        "(characters lost in copying)")
    if header.elided_at:
        truncated = True
        warnings.append(f"line {header_i + 1}: columns elided with '. . .'; only the devices shown are known")

    ncols = len(header.labels)
    label_set = set(header.labels)
    rows: list[tuple[int, str, list[str | None], list[str] | None]] = []
    repairs: list[str] = []
    damaged: list[TopoParseError] = []
    i = header_i + 1
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped in ("Legend:", "NIC Legend:"):
            break
        tokens = stripped.split()
        if tokens[0] not in label_set and not (len(tokens) > 1 and valid_cell(tokens[1])):
            break  # text after the matrix (a prompt, a note): not a row
        if cut(i):
            truncated = True
            warnings.append(f"line {i + 1}: last line has no newline (cut short?); row {_clip(tokens[0])} not used")
            i += 1
            break
        if len(rows) + len(damaged) >= MAX_DEVICES:
            raise TopoParseError(f"more than {MAX_DEVICES} rows (MAX_DEVICES)", i + 1, line)
        try:
            rows.append(_split_row(line, i + 1, header, ncols, valid_cell, warnings, repairs))
        except TopoParseError as exc:
            damaged.append(exc)  # keep reading: a refusal names every damaged row at once
        i += 1
    if damaged:
        raise TopoParseError(damaged[0].message, damaged[0].line_no, damaged[0].line, tuple(damaged[1:]))
    if not rows:
        shown = lines[header_i + 1] if header_i + 1 < len(lines) else ""
        raise TopoParseError(f"{what} header without any row below it", header_i + 2, shown)

    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    has_legend = has_nic_legend = False
    section = None
    for j in range(i, len(lines)):
        stripped = lines[j].strip()
        if stripped == "Legend:":
            section, has_legend = "legend", True
            continue
        if stripped == "NIC Legend:":
            section, has_nic_legend = "nic", True
            continue
        if section == "legend":
            m = _LEGEND_ENTRY_RE.match(lines[j])
            if m:
                legend[m.group(1)] = m.group(2).strip()
        elif section == "nic":
            m = _NIC_ENTRY_RE.match(lines[j])
            if m and cut(j):
                truncated = True
                warnings.append(f"line {j + 1}: last line has no newline (cut short?); "
                                f"NIC legend entry {m.group(1)} not used")
            elif m:
                nic_legend[m.group(1)] = m.group(2)
                if len(nic_legend) > MAX_DEVICES:
                    raise TopoParseError(f"more than {MAX_DEVICES} NIC legend entries (MAX_DEVICES)", j + 1, lines[j])
    if not has_legend:
        truncated = True
        warnings.append("no 'Legend:' section after the matrix (output cut short?)")
    return _Grid(header, rows, legend, nic_legend, has_legend, has_nic_legend, warnings, truncated, prompt,
                 lines, repairs)


def _split_row(line: str, line_no: int, header: _Header, ncols: int, valid_cell,
               warnings: list[str], repairs: list[str] | None = None) -> tuple[int, str, list[str | None], list[str] | None]:
    """One matrix row: (line number, label, cells, tail fields or None when unreadable)."""
    tail: list[str] | None
    repairs = [] if repairs is None else repairs
    if "\t" in line:
        fields = [f.strip() for f in line.split("\t")]
        label = fields[0]
        fields = [label] + _repair_cells(fields[1:], header.raw_count, valid_cell, label, line_no, repairs)
        raw_cells = fields[1:1 + header.raw_count]
        tail = fields[1 + header.raw_count:]
    elif header.style == "grid":
        if line[:header.indent].strip():
            raise TopoParseError(f"row is not indented like the header ({header.indent} columns)", line_no, line)
        fields, bad = _untab(line[header.indent:])
        label = fields[0] if fields else ""
        if bad is not None and len(fields) < 1 + header.raw_count:
            raise TopoParseError(f"cell at column {bad + header.indent + 1} is off the tab stops "
                                 "(characters lost or shifted)", line_no, line)
        raw_cells = fields[1:1 + header.raw_count]
        if bad is not None:
            tail = None
            if not header.extras_damaged:
                warnings.append(f"line {line_no}: values after the {_clip(label)} cells are off the tab stops "
                                "(characters lost in copying); its affinity is not used")
        else:
            tail = fields[1 + header.raw_count:]
    else:
        tokens = line.split()
        label = tokens[0]
        tokens = [label] + _repair_cells(tokens[1:], header.raw_count, valid_cell, label, line_no, repairs)
        raw_cells = tokens[1:1 + header.raw_count]
        tail = tokens[1 + header.raw_count:]
        if tail and len(tail) != len(header.extras):
            raise TopoParseError(
                f"{len(tail)} values after the {_clip(label)} cells for {len(header.extras)} columns, and "
                "whitespace gives no column positions to place them", line_no, line)
    if len(raw_cells) != header.raw_count:
        raise TopoParseError(f"expected {ncols} cells for {_clip(label)}, found "
                             f"{len(raw_cells) - len(header.elided_at)}", line_no, line)
    marks = tuple(k for k, c in enumerate(raw_cells) if c in _ELISION)
    if marks != header.elided_at:
        raise TopoParseError(f"elision marks of {_clip(label)} are not under the header's", line_no, line)
    cells: list[str | None] = []
    for c in raw_cells:
        if c in _ELISION:
            continue
        if c == "":
            cells.append(None)
            continue
        if not valid_cell(c):
            if _CPU_LIST_RE.match(c) or c == "N/A":  # an affinity value: the row is short of cells
                raise TopoParseError(f"expected {ncols} cells for {_clip(label)}, found {len(cells)}", line_no, line)
            # characters lost inside a cell ("PH" for PHB): its mirror cell may still say what it was
            if _looks_like_a_level(c) or (c.strip("? ") == "X"):
                cells.append(DAMAGED + c)
                continue
            raise TopoParseError(f"{_q(c)} is not a known value (cell of {_clip(label)})", line_no, line)
        cells.append(c)
    if not _LABEL_RE.match(label):
        raise TopoParseError(f"{_q(label)} is not a device label", line_no, line)
    return line_no, label, cells, tail


def _mend_from_mirrors(grid: _Grid, cells: dict[tuple[str, str], str | None], symmetric: bool = True) -> None:
    """A cell whose characters were lost takes the value of its mirror (the matrix is symmetric:
    GPU1/NIC0 is NIC0/GPU1); every cell mended is listed, and a damaged cell whose mirror is
    damaged or absent is a refusal naming both."""
    problems: list[TopoParseError] = []
    line_of = {label: line_no for line_no, label, _c, _t in grid.rows}
    for (row, col), value in list(cells.items()):
        if not (isinstance(value, str) and value.startswith(DAMAGED)):
            continue
        mirror = cells.get((col, row)) if symmetric else None
        if isinstance(mirror, str) and not mirror.startswith(DAMAGED):
            cells[(row, col)] = mirror
            grid.repairs.append(f"line {line_of[row]}: {_clip(row)}/{_clip(col)} {_q(value[len(DAMAGED):])} "
                                f"read as {mirror} (from {_clip(col)}/{_clip(row)})")
        else:
            n = line_of[row]
            why = ", and its mirror cannot say" if symmetric else ""
            problems.append(TopoParseError(f"{_q(value[len(DAMAGED):])} is not a known value (cell of {_clip(row)}/"
                                           f"{_clip(col)}{why})", n, grid.text(n)))
    if problems:
        raise TopoParseError(problems[0].message, problems[0].line_no, problems[0].line, tuple(problems[1:]))


def _assemble(grid: _Grid, kind: str):
    """Devices, cells and the checks that hold for every matrix (X exactly on the diagonal)."""
    header = grid.header
    columns = header.labels
    devices = list(columns)
    device_set = set(devices)
    cells: dict[tuple[str, str], str | None] = {}
    seen: dict[str, None] = {}  # ordered, and a set for the lookups (lists made this quadratic)
    for line_no, label, row_cells, _tail in grid.rows:
        if label in seen:
            raise TopoParseError(f"second row for {_clip(label)}", line_no, grid.text(line_no))
        seen[label] = None
        if label not in device_set:
            devices.append(label)
            device_set.add(label)
        for col, value in zip(columns, row_cells):
            if value == "X" and col != label:
                raise TopoParseError(f"X (self) off the diagonal, at {_clip(label)}/{_clip(col)}", line_no, grid.text(line_no))
            if col == label and isinstance(value, str) and value.startswith(DAMAGED):
                grid.repairs.append(f"line {line_no}: {_clip(label)}/{_clip(col)} {_q(value[len(DAMAGED):])} "
                                    "read as X (the diagonal)")
                value = "X"
            if col == label and value not in ("X", None):
                raise TopoParseError(f"diagonal cell of {_clip(label)} is {_q(value)}, expected X", line_no,
                                     grid.text(line_no))
            cells[(label, col)] = value
    # a path level is the same both ways; a p2p capability need not be, so it is never mirrored
    _mend_from_mirrors(grid, cells, symmetric=(kind == "level"))
    for line_no, label, row_cells, _tail in grid.rows:
        blanks = [c for c, v in zip(columns, row_cells) if v is None]
        if blanks:  # the tool never prints a blank level: the value is unknown
            grid.truncated = True
            grid.warnings.append(f"line {line_no}: blank {kind} cells for {_clip(label)}: {_clip(', '.join(blanks), 2 * QUOTE_LIMIT)}")
    missing = [c for c in columns if c not in seen]
    if missing:
        grid.truncated = True
        grid.warnings.append(f"no row for {_clip(', '.join(missing), 2 * QUOTE_LIMIT)} (output cut short?)")
    column_set = set(columns)
    extra = [d for d in seen if d not in column_set]
    if extra:
        grid.truncated = True
        grid.warnings.append(f"rows without a column: {_clip(', '.join(extra), 2 * QUOTE_LIMIT)} (columns lost in copying?)")
    return tuple(devices), cells


# ---------------------------------------------------------------------------------------------
# Public parsers


def _affinity_value(column: str, value: str, label: str, line_no: int, warnings: list[str]) -> str | None:
    if value in ("", "N/A"):
        return None
    ok = _CPU_LIST_RE.match(value) if column != "GPU NUMA ID" else _GPU_NUMA_ID_RE.match(value)
    if not ok:
        warnings.append(f"line {line_no}: {column} of {_clip(label)} {_q(value)} is not a valid value; not used")
        return None
    return value


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` / ``topo --matrix`` (or ``-mp``) output, as the tool printed it
    or as it was pasted. Lines before the header (prompts, notes) are skipped."""
    check_bounds(text, "topology matrix")
    grid = _read_grid(text, lambda c: bool(_LEVEL_RE.match(c)), "topology matrix")
    devices, cells = _assemble(grid, "level")
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
    if _PCI_ONLY_PROMPT_RE.search(grid.prompt):
        warnings.append("PCI-only matrix (topo -mp): NVLink connections are not shown")
    legacy = any(v == "SOC" for v in cells.values()) or "SOC" in grid.legend
    if legacy:
        warnings.append("legacy SOC level (older driver): read as SYS")
    nic_labels = [d for d in devices if _NIC_LABEL_RE.match(d)]
    unnamed = [d for d in nic_labels if d not in grid.nic_legend]
    if unnamed:
        grid.truncated = True
        where = "no 'NIC Legend:' section" if not grid.has_nic_legend else "NIC legend incomplete"
        warnings.append(f"{where}: no RDMA device name for {_clip(', '.join(unnamed), 2 * QUOTE_LIMIT)}")
    stray = [k for k in grid.nic_legend if k not in devices]
    if stray:
        warnings.append(f"NIC legend names devices not in the matrix: {_clip(', '.join(stray), 2 * QUOTE_LIMIT)}")
    return TopoMatrix(
        devices=devices, cells=cells,
        cpu_affinity=affinity.get("CPU Affinity", {}),
        numa_affinity=affinity.get("NUMA Affinity", {}),
        gpu_numa_id=affinity.get("GPU NUMA ID", {}),
        nic_legend=dict(grid.nic_legend), legend=dict(grid.legend),
        warnings=tuple(warnings), truncated=grid.truncated, legacy_soc=legacy,
        extra_columns=tuple(extras), repairs=tuple(grid.repairs),
    )


def _place_by_position(grid: "_Grid", extras: list[str]) -> dict[str, list[str]] | None:
    """Each row's affinity values by their order on the row, or None when a row does not fit."""
    out: dict[str, list[str]] = {}
    for line_no, label, _cells, tail in grid.rows:
        if tail is None:
            if _GPU_RE.match(label):
                return None
            continue
        try:
            values = _place_tail(tail, extras, label, line_no, grid.text(line_no))
        except TopoParseError:
            return None
        for col, v in zip(extras, values or []):
            if v and v != "N/A" and not (_CPU_LIST_RE.match(v) if col != "GPU NUMA ID" else _GPU_NUMA_ID_RE.match(v)):
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
        raise TopoParseError(f"values after the last column for {_clip(label)}: {_q(tail[n:])}", line_no, line)
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
            raise TopoParseError(f"values after the {_clip(label)} cells: {_q(tail)}", line_no, grid.text(line_no))
    if grid.header.extras:
        raise TopoParseError("affinity columns in a p2p matrix", grid.header.line_no,
                             grid.text(grid.header.line_no))
    if mode is None:
        m = _P2P_PROMPT_RE.search(grid.prompt)
        mode = m.group(1) if m else None
    return P2PMatrix(mode=mode, devices=devices, cells=cells, legend=dict(grid.legend),
                     warnings=tuple(grid.warnings), truncated=grid.truncated, repairs=tuple(grid.repairs))


#: the longest CPU or GPU index ``topo -c`` output may carry
_MAX_INDEX_DIGITS = 7


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


# ---------------------------------------------------------------------------------------------
# Rendering and comparison

#: level meanings, for rendering a matrix that came without a legend (NCCL's path levels)
_DEFAULT_LEGEND = {
    "X": "Self",
    "SYS": "Path crosses PCIe and the inter-socket (SMP) link between NUMA nodes",
    "NODE": "Path crosses PCIe and the link between host bridges inside one NUMA node",
    "PHB": "Path crosses PCIe and one PCIe host bridge (the CPU)",
    "PXB": "Path crosses several PCIe switches, no host bridge",
    "PIX": "Path crosses at most one PCIe switch",
    "NV#": "Path is a bonded set of # NVLinks",
}


def _has_column(m: TopoMatrix, col: str) -> bool:
    data = {"CPU Affinity": m.cpu_affinity, "NUMA Affinity": m.numa_affinity, "GPU NUMA ID": m.gpu_numa_id}[col]
    return col in m.extra_columns or bool(data)


def rows_for_table(m: TopoMatrix) -> list[list[str]]:
    """The matrix as strings, header first: ``["", GPU0, ..., "CPU Affinity", ...]``, then one list
    per device. Unknown cells and absent values are ``""``."""
    extras = [c for c in EXTRA_COLUMNS if _has_column(m, c)]
    sources = {"CPU Affinity": m.cpu_affinity, "NUMA Affinity": m.numa_affinity, "GPU NUMA ID": m.gpu_numa_id}
    table = [["", *m.devices, *extras]]
    for a in m.devices:
        row = [a] + [m.raw_level(a, b) or "" for b in m.devices]
        for col in extras:
            value = sources[col].get(a)
            if col == "GPU NUMA ID" and value is None and _GPU_RE.match(a):
                value = "N/A"
            row.append(value or "")
        table.append(row)
    return table


def render_matrix(m: TopoMatrix) -> str:
    """The matrix laid out as nvidia-smi prints it (tab separated, `` X `` on the diagonal, the empty
    field before GPU NUMA ID), then the legend and, when NICk labels exist, the NIC legend."""
    table = rows_for_table(m)
    header, body = table[0], table[1:]
    extras = header[1 + len(m.devices):]
    out = ["\t".join(header)]
    for row in body:
        cells = [" X " if c == "X" else c for c in row[1:1 + len(m.devices)]]
        tail = row[1 + len(m.devices):]
        if extras and extras[-1] == "GPU NUMA ID":
            tail = tail[:-1] + [""] + tail[-1:]
        out.append("\t".join([row[0], *cells, *tail]))
    out += ["", "Legend:", ""]
    legend = m.legend or _DEFAULT_LEGEND
    width = max(len(k) for k in legend)
    out += [f"  {k:<{width}} = {v}" for k, v in legend.items()]
    nic_labels = [d for d in m.devices if _NIC_LABEL_RE.match(d)]
    if nic_labels:
        out += ["", "NIC Legend:", ""]
        out += [f"  {d}: {m.nic_legend[d]}" for d in nic_labels if d in m.nic_legend]
    return "\n".join(out) + "\n"


def cells_equal(a: TopoMatrix, b: TopoMatrix) -> list[str]:
    """Differences between two matrices as lines for a human; empty when they agree.

    Devices are matched by GPU label and by NIC *name* (``NIC0`` with legend ``mlx5_0`` equals a
    column labelled ``mlx5_0``). Levels compare after ``SOC`` -> ``SYS``; a pair unknown on either
    side (a cut-short matrix) is not a difference. Affinity is compared only where both have it.
    """
    names_a = {a.nic_name(d): d for d in a.devices}
    names_b = {b.nic_name(d): d for d in b.devices}
    diffs: list[str] = []
    only_a = [n for n in names_a if n not in names_b]
    only_b = [n for n in names_b if n not in names_a]
    if only_a:
        diffs.append(f"only in the first matrix: {', '.join(only_a)}")
    if only_b:
        diffs.append(f"only in the second matrix: {', '.join(only_b)}")
    common = [n for n in names_a if n in names_b]
    for i, x in enumerate(common):
        for y in common[i + 1:]:
            la, lb = a.level(names_a[x], names_a[y]), b.level(names_b[x], names_b[y])
            if la is not None and lb is not None and la != lb:
                diffs.append(f"{x} - {y}: {la} vs {lb}")
    for col, get in (("CPU Affinity", lambda m: m.cpu_affinity), ("NUMA Affinity", lambda m: m.numa_affinity),
                     ("GPU NUMA ID", lambda m: m.gpu_numa_id)):
        if not (_has_column(a, col) and _has_column(b, col)):
            continue
        for n in common:
            va, vb = get(a).get(names_a[n]), get(b).get(names_b[n])
            if va != vb:
                diffs.append(f"{n} {col}: {va or '(blank)'} vs {vb or '(blank)'}")
    return diffs


# ---------------------------------------------------------------------------------------------
# The probe


def _command_error(res, source: str) -> ReadError | None:
    if res.timed_out:
        return ReadError(source, "timeout", res.describe())
    if res.error is not None:
        return ReadError(source, "command", res.describe())
    if res.rc != 0:
        said = (res.stderr.strip() or res.stdout.strip()).splitlines()
        detail = f": {said[0]}" if said else ""
        return ReadError(source, "command", res.describe() + detail)
    return None


@probe(order=70, what="nvidia-smi topology")
def collect(host) -> SmiTopoObservation:
    """Run ``nvidia-smi topo -m`` and ``topo -p2p r|w|n|a`` and parse them.

    After a command times out the rest are not run (recorded as ``skipped``): a wedged GPU makes
    every nvidia-smi call hang, and four more hangs would outlast this probe's deadline.
    """
    commands: list[str] = []
    errors: list[ReadError] = []
    matrix: TopoMatrix | None = None
    p2p: dict[str, P2PMatrix] = {}
    started = time.monotonic()
    plan = [("m", ["nvidia-smi", "topo", "-m"])] + [(k, ["nvidia-smi", "topo", "-p2p", k]) for k in P2P_MODES]
    hung = False
    for key, argv in plan:
        source = " ".join(argv)
        if hung:
            errors.append(ReadError(source, "skipped", "not run: an earlier nvidia-smi command timed out"))
            continue
        remaining = TIMEOUT_S - 1.0 - (time.monotonic() - started) if host.live else COMMAND_TIMEOUT_S
        res = host.run(argv, timeout=max(1.0, min(COMMAND_TIMEOUT_S, remaining)))
        commands.append(res.describe())
        if res.error == "not found":
            raise ProbeUnavailable("nvidia-smi not found")
        err = _command_error(res, source)
        if err is not None:
            errors.append(err)
            hung = hung or res.timed_out
            continue
        try:
            if key == "m":
                matrix = parse_topo_matrix(res.stdout)
            else:
                p2p[key] = parse_topo_p2p(res.stdout, mode=key)
        except TopoParseError as exc:
            errors.append(ReadError(source, "parse", str(exc)))
    return SmiTopoObservation(matrix=matrix, p2p=p2p, commands=tuple(commands), errors=tuple(errors))
