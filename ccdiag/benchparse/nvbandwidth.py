"""nvbandwidth output (text, or the ``-j`` JSON) read into typed matrices.

Why: users already run nvbandwidth (it ships with DCGM's diag and Azure's health checks) and paste
its output; ccdiag judges those numbers against the topology's expected bandwidths instead of
asking for a rerun.

Text format (``NVIDIA/nvbandwidth`` ``output.cpp``, ``inline_common.h``; seen in
``tests/fixtures/corpus/nvbandwidth``): version lines (``nvbandwidth Version: v0.4``, ``Built from Git
version: ...``), ``CUDA Runtime Version: N``, ``CUDA Driver Version: N``, ``Driver Version: X``,
``Device N: NAME``, then per testcase ``Running <name>.``, a description line ending in the unit
(``memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)``; latency cases end in ``(ns)``), a column
header, one row per row label with a value or ``N/A`` per column, a blank line, and ``SUM <name>
<value>`` (``&&&& PERF <name> <value> +GB/s`` with ``--perfFormatter``). A testcase that did not run
prints ``Waived: ...`` / ``Error: ...`` instead. Bidirectional cases print several matrices (Read1,
Read2, Total), each with its own SUM.

JSON (``json_output.cpp``): ``{"nvbandwidth": {"version", "git_version", "CUDA Runtime Version",
"Driver Version", "GPU Device list": ["0: NAME ...: (host)"], "testcases": [{"name", "status",
"bandwidth_description", "bandwidth_matrix": [["370.9", "N/A", ...]], "sum"}], "error"}}``; matrix
cells are strings. The JSON keeps only the last matrix of a bidirectional case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccdiag.benchparse import _text
from ccdiag.benchparse.errors import MAX_LABELS, BenchParseError, clip

_RUNNING = re.compile(r"^Running ([A-Za-z0-9_]{1,200})\.\s*$")
_WAIVING = re.compile(r"^Waiving ([A-Za-z0-9_]{1,200})\.\s*$")  # v0.2: a testcase that cannot run here
_STATUS = re.compile(r"^(Waived|Error|ERROR|Not Found)\s?:\s?(.*)$")
#: a CUDA driver error the tool prints when a call fails (error_handling.h): "[CUDA_ERROR_...] ..."
_CUDA_ERROR = re.compile(r"^\[(CUDA_ERROR_[A-Z_]{1,60})\] ?(.{0,400})$")
_SUM = re.compile(r"^SUM ([A-Za-z0-9_]{1,200}) (\S{1,60})\s*$")
_PERF = re.compile(r"^&&&& PERF ([A-Za-z0-9_]{1,200}) (\S{1,60}) ([+-](?:GB/s|ns))\s*$")
_DESC_UNIT = re.compile(r"\((GB/s|ns)\)\s*$")
_AXES = re.compile(r"(CPU|GPU)\(row\) (<->|->|<-) (CPU|GPU)\(column\)")
_VERSION_PAREN = re.compile(r"[0-9]{1,4}\.[0-9]{1,4} \(([0-9]{1,12})\)")
_DEVICE = re.compile(r"^Device ([0-9]{1,5}): (.{1,300})$")
#: a multi-node build's device lines (v0.7+, output.cpp printGPUsMultinode): one per MPI process
_PROCESS = re.compile(r"^Process +([0-9]{1,6}) \((.{1,300})\): device ([0-9]{1,5}): (.{1,300})$")
_CV = re.compile(r"^COEFFICIENT_OF_VARIATION ([A-Za-z0-9_]{1,200}) (\S{1,60})\s*$")
#: the multi-node bisect testcase prints a matrix without a unit in its description, rows "0->1"
_BISECT = "Bisect benchmarking"
_PAIR_LABEL = re.compile(r"[0-9]{1,6}->[0-9]{1,6}")
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_KV = {
    "nvbandwidth Version:": "version",
    "Built from Git version:": "git_version",
    "CUDA Runtime Version:": "cuda_runtime_version",
    "CUDA Driver Version:": "cuda_driver_version",
    "CUDA Driver Version (API):": "cuda_driver_version",
    "Driver Version:": "driver_version",
    "MPI version:": "mpi_version",
}


@dataclass(frozen=True)
class NvbMatrix:
    """One printed matrix. Exactly one of ``bandwidth_gbyte_s`` / ``latency_us`` is set, by the
    unit in the description; cells are None where the tool printed ``N/A`` (a pair it did not
    measure, such as a GPU with itself).

    ``row_device`` / ``column_device`` say what the row and column labels index (``"CPU"`` or
    ``"GPU"``, None when the description names neither, as in ``All Gpus -> GPU(column)``);
    ``direction`` says which way data moved: ``"row_to_column"`` (row is the source),
    ``"column_to_row"``, ``"both"`` (bidirectional), or None.
    """

    description: str
    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    bandwidth_gbyte_s: tuple[tuple[float | None, ...], ...] | None = None
    latency_us: tuple[tuple[float | None, ...], ...] | None = None
    sum_gbyte_s: float | None = None
    sum_latency_us: float | None = None
    row_device: str | None = None
    column_device: str | None = None
    direction: str | None = None

    def cell(self, row: int, column: int) -> float | None:
        values = self.bandwidth_gbyte_s if self.bandwidth_gbyte_s is not None else self.latency_us
        return values[row][column] if values is not None else None


@dataclass(frozen=True)
class NvbTestcase:
    name: str
    status: str  # "Passed" | "Waived" | "Error" | "Not Found" | "Running" (cut before its result)
    matrices: tuple[NvbMatrix, ...] = ()
    message: str | None = None

    @property
    def matrix(self) -> NvbMatrix | None:
        """The testcase's matrix (the last, "Total", one of a bidirectional case)."""
        return self.matrices[-1] if self.matrices else None

    @property
    def sum_gbyte_s(self) -> float | None:
        return self.matrix.sum_gbyte_s if self.matrix else None


@dataclass(frozen=True)
class NvbProcess:
    """One MPI process of a multi-node run: the host it ran on, its CUDA device there, and the device's
    name as printed (with the PCI address in parentheses on v0.5 and later)."""

    index: int
    host: str
    device: int
    name: str


@dataclass(frozen=True)
class NvbResult:
    """``devices`` maps the labels the matrices use to the GPU names printed: CUDA ordinals of a
    single-node run, process indices of a multi-node one (``processes`` then says where each ran)."""

    format: str  # "text" | "json"
    version: str | None = None
    git_version: str | None = None
    cuda_runtime_version: int | None = None
    cuda_driver_version: int | None = None
    driver_version: str | None = None
    mpi_version: str | None = None
    devices: dict[int, str] = field(default_factory=dict)
    processes: dict[int, NvbProcess] = field(default_factory=dict)
    testcases: dict[str, NvbTestcase] = field(default_factory=dict)
    error: str | None = None
    format_ids: tuple[str, ...] = ()

    @property
    def multinode(self) -> bool:
        return bool(self.processes)


def _axes(description: str) -> tuple[str | None, str | None, str | None]:
    m = _AXES.search(description)
    if not m:
        return None, None, None
    direction = {"->": "row_to_column", "<-": "column_to_row", "<->": "both"}[m.group(2)]
    return m.group(1), m.group(3), direction


def _cell(token: str, n: int, line: str) -> float | None:
    if token == "N/A":
        return None
    return _text.to_float(token, "matrix value", n, line)


def _matrix(description: str, rows: list[tuple[float | None, ...]], row_labels: list[str],
            column_labels: tuple[str, ...], total: float | None) -> NvbMatrix:
    row_device, column_device, direction = _axes(description)
    m = _DESC_UNIT.search(description)
    unit = m.group(1) if m else "GB/s"  # the bisect testcase's description names no unit; it is GB/s
    values = tuple(rows)
    if unit == "ns":
        us = tuple(tuple(None if v is None else v / 1000.0 for v in r) for r in values)
        return NvbMatrix(description, tuple(row_labels), column_labels, latency_us=us,
                         sum_latency_us=None if total is None else total / 1000.0,
                         row_device=row_device, column_device=column_device, direction=direction)
    return NvbMatrix(description, tuple(row_labels), column_labels, bandwidth_gbyte_s=values, sum_gbyte_s=total,
                     row_device=row_device, column_device=column_device, direction=direction)


def _label(token: str, what: str, n: int, line: str) -> str:
    """A row or column label: nvbandwidth prints device (or process) indices, short integers; the
    multi-node bisect testcase labels its rows with the pair, ``0->1``."""
    if _PAIR_LABEL.fullmatch(token) and what == "row label":
        return token
    if not _text.is_int_token(token) or token.startswith(("+", "-")):
        raise BenchParseError(f"{what} {clip(token, 30)!r} is not a device index", n, line)
    return token


class _TextReader:
    """One pass over nvbandwidth's text output. A matrix is read in three states: its description
    (``desc``), its column header (``columns``), its rows until a blank line, a SUM line or another
    kind of line closes it."""

    def __init__(self) -> None:
        self.info: dict[str, object] = {}
        self.devices: dict[int, str] = {}
        self.order: list[str] = []
        self.cases: dict[str, dict] = {}
        self.current: dict | None = None
        self.seen_tool = False
        self.processes: dict[int, NvbProcess] = {}
        self.marks: set[str] = set()
        self.hostname: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.desc: tuple[int, str] | None = None
        self.columns: tuple[str, ...] | None = None
        self.rows: list[tuple[float | None, ...]] = []
        self.labels: list[str] = []
        self.ended = False  # the blank line after the rows was read

    def close(self, total: float | None, n: int, line: str, name: str | None = None) -> None:
        if self.desc is not None:
            if self.current is None and name is not None:
                # a paste that elided the 'Running <testcase>.' line: the SUM line names the testcase
                self.running(f"Running {name}.", n, line)
            if self.current is None:
                raise BenchParseError("a result matrix outside any 'Running <testcase>.' block", *self.desc)
            if self.columns is None or not self.rows:
                raise BenchParseError("matrix without rows", n, line)
            self.current["matrices"].append(_matrix(self.desc[1].strip(), self.rows, self.labels, self.columns, total))
            self.current["status"] = "Passed"
        self._reset()

    def in_matrix(self, s: str, n: int, line: str) -> bool:
        """A line that belongs to the open matrix (header, row, the blank line after the rows)."""
        if self.desc is None:
            return False
        if self.columns is None:
            if s:
                toks = s.split()
                if len(toks) > MAX_LABELS:
                    raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} columns", n, line, limit="MAX_LABELS")
                self.columns = tuple(_label(t, "column label", n, line) for t in toks)
            return True
        if s and not self.ended and not s.startswith(("SUM ", "&&&& ")):
            self._row(s, n, line)
            return True
        if not s:
            self.ended = self.ended or bool(self.rows)  # a blank line ends the rows; SUM follows
            return True
        return False

    def _row(self, s: str, n: int, line: str) -> None:
        toks = s.split()
        assert self.columns is not None
        if len(toks) != len(self.columns) + 1:
            raise BenchParseError(f"matrix row has {len(toks) - 1} values for {len(self.columns)} columns", n, line)
        if len(self.rows) >= MAX_LABELS:
            raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} matrix rows", n, line, limit="MAX_LABELS")
        self.labels.append(_label(toks[0], "row label", n, line))
        self.rows.append(tuple(_cell(t, n, line) for t in toks[1:]))

    def sum_line(self, s: str, n: int, line: str) -> bool:
        m = _SUM.match(s) or _PERF.match(s)
        if not m:
            return False
        if s.startswith("&&&&"):
            self.marks.add("perf")
        total = _text.to_float(m.group(2), "SUM", n, line)
        if self.desc is None:
            raise BenchParseError("SUM line without a matrix before it", n, line)
        self.close(total, n, line, m.group(1))
        return True

    def end_open_matrix(self, n: int, line: str) -> None:
        """Another kind of line: a matrix still open ends here (cut, or a pager dropped its SUM)."""
        if self.desc is None:
            return
        if not self.rows:
            raise BenchParseError("matrix header without rows", n, line)
        self.close(None, n, line)

    def running(self, s: str, n: int, line: str) -> bool:
        m = _RUNNING.match(s)
        if not m:
            return False
        self.seen_tool = True
        name = m.group(1)
        if name not in self.cases:
            if len(self.cases) >= MAX_LABELS:
                raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} testcases", n, line, limit="MAX_LABELS")
            self.order.append(name)
        self.current = self.cases[name] = {"name": name, "status": "Running", "matrices": [], "message": None}
        return True

    def waiving(self, s: str, n: int, line: str) -> bool:
        m = _WAIVING.match(s)
        if not m:
            return False
        self.running(f"Running {m.group(1)}.", n, line)
        assert self.current is not None
        self.current["status"] = "Waived"
        return True

    def description(self, s: str, n: int, line: str) -> bool:
        if (_DESC_UNIT.search(s) and ("(row)" in s or "(column)" in s)) or s.startswith(_BISECT):
            self.desc = (n, s)
            return True
        return False

    def status(self, s: str, n: int, line: str) -> bool:
        e = _CUDA_ERROR.match(s)
        if e and self.current is not None:
            self.current["status"] = "Error"
            self.current["message"] = f"[{e.group(1)}] {e.group(2)}".strip()
            return True
        m = _STATUS.match(s)
        if not m or self.current is None:
            return False
        self.current["status"] = "Error" if m.group(1) == "ERROR" else m.group(1)
        self.current["message"] = m.group(2).strip() or None
        return True

    def key_value(self, s: str, n: int, line: str) -> bool:
        for prefix, key in _KV.items():
            if s.startswith(prefix):
                self.seen_tool = self.seen_tool or key == "version"
                value = s[len(prefix):].strip()
                if key in ("cuda_runtime_version", "cuda_driver_version"):
                    # v0.10 prints "13.3 (13030)": the integer is the one in parentheses
                    m = _VERSION_PAREN.fullmatch(value)
                    if m:
                        self.marks.add("paren")
                    self.info[key] = _text.to_int(m.group(1) if m else value, prefix.rstrip(":"), n, line)
                else:
                    self.info[key] = value
                return True
        return False

    def process(self, s: str, n: int, line: str) -> bool:
        m = _PROCESS.match(s)
        if not m:
            return False
        if len(self.processes) >= MAX_LABELS:
            raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} processes", n, line, limit="MAX_LABELS")
        idx = int(m.group(1))
        self.processes[idx] = NvbProcess(idx, m.group(2).strip(), int(m.group(3)), m.group(4).strip())
        self.devices[idx] = m.group(4).strip()
        return True

    def extra(self, s: str, n: int, line: str) -> bool:
        """Lines that mark a version: the coefficient-of-variation line (v0.9 and later) and the host
        name v0.7 and later print before the device list."""
        if _CV.match(s):
            self.marks.add("cv")
            return True
        if _HOSTNAME.fullmatch(s) and not self.devices and self.current is None and "version" in self.info:
            self.hostname = s
            return True
        return False

    def device(self, s: str, n: int, line: str) -> bool:
        m = _DEVICE.match(s)
        if not m:
            return False
        if len(self.devices) >= MAX_LABELS:
            raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} devices", n, line, limit="MAX_LABELS")
        self.devices[int(m.group(1))] = m.group(2).strip()
        return True

    def result(self, numbered: list[tuple[int, str]]) -> NvbResult:
        if self.desc is not None:
            last_n, last = numbered[-1] if numbered else (1, "")
            if not self.rows:
                raise BenchParseError("input ends inside a matrix header", last_n, last)
            self.close(None, last_n, last)
        if not self.seen_tool:
            n, line = _text.first_line(numbered)
            raise BenchParseError("not nvbandwidth output (no 'nvbandwidth Version:' or 'Running <testcase>.' line)",
                                  n, line)
        testcases = {k: NvbTestcase(k, self.cases[k]["status"], tuple(self.cases[k]["matrices"]),
                                    self.cases[k]["message"]) for k in self.order}
        info = self.info
        return NvbResult("text", version=_opt_str(info.get("version")), git_version=_opt_str(info.get("git_version")),
                         cuda_runtime_version=_opt_int(info.get("cuda_runtime_version")),
                         cuda_driver_version=_opt_int(info.get("cuda_driver_version")),
                         driver_version=_opt_str(info.get("driver_version")),
                         mpi_version=_opt_str(info.get("mpi_version")), devices=self.devices,
                         processes=self.processes, testcases=testcases,
                         format_ids=self._format_ids(testcases))

    def _format_ids(self, testcases: dict[str, NvbTestcase]) -> tuple[str, ...]:
        ids = [_version_format(_opt_str(self.info.get("version")), self.marks, testcases,
                               self.hostname is not None, "13.3 (" in str(self.info.get("raw_runtime", "")))]
        if self.processes or self.info.get("mpi_version"):
            ids.append("nvbandwidth.multinode")
        if any(m.description.startswith(_BISECT) for case in testcases.values() for m in case.matrices):
            ids.append("nvbandwidth.multinode.bisect")
        if "perf" in self.marks:
            ids.append("nvbandwidth.perf")
        return tuple(ids)


#: handlers of a line outside an open matrix, in the order they are tried
_HANDLERS = (_TextReader.running, _TextReader.waiving, _TextReader.description, _TextReader.status, _TextReader.key_value,
             _TextReader.process, _TextReader.device, _TextReader.extra)


def _opt_str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _opt_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_VERSION_NUM = re.compile(r"v?([0-9]{1,3})\.([0-9]{1,3})")


def _version_format(version: str | None, marks: set[str], testcases: dict[str, NvbTestcase], hostname: bool,
                    _: bool = False) -> str:
    """The format id of the release that printed the file: from its version line when it has one, else
    from the lines only some releases print (``Waiving``: v0.4 and before; Read1/Read2/Total matrices:
    v0.6 and later; latency matrices: v0.5 and later; the host name line: v0.7 and later)."""
    m = _VERSION_NUM.match(version or "")
    if m:
        minor = int(m.group(1)) * 100 + int(m.group(2))
        if minor <= 1:
            return "nvbandwidth.v0.1"
        if minor <= 4:
            return "nvbandwidth.v0.2"
        if minor == 5:
            return "nvbandwidth.v0.5"
        if minor == 6:
            return "nvbandwidth.v0.6"
        if minor <= 8:
            return "nvbandwidth.v0.7"
        return "nvbandwidth.v0.10"
    mats = [mat for case in testcases.values() for mat in case.matrices]
    if "paren" in marks or "cv" in marks:
        return "nvbandwidth.v0.10"
    if hostname:
        return "nvbandwidth.v0.7"
    if any(" Read1 " in mat.description or " Write1 " in mat.description for mat in mats):
        return "nvbandwidth.v0.6"
    if any(mat.latency_us is not None for mat in mats):
        return "nvbandwidth.v0.5"
    if mats and all(None not in row for mat in mats if mat.bandwidth_gbyte_s is not None
                    for row in mat.bandwidth_gbyte_s):
        return "nvbandwidth.v0.1"  # no N/A cell anywhere: v0.1 printed the diagonal as 0.00
    return "nvbandwidth.v0.2"


def parse_nvbandwidth(text: str) -> NvbResult:
    """nvbandwidth's text or ``-j`` JSON output; refuses (:class:`BenchParseError`) anything else."""
    numbered = _text.lines(text)
    if _text.looks_like_json(numbered):
        return _parse_json(text, numbered)
    reader = _TextReader()
    for n, line in numbered:
        s = line.strip()
        if reader.in_matrix(s, n, line) or reader.sum_line(s, n, line):
            continue
        reader.end_open_matrix(n, line)
        for handler in _HANDLERS:
            if handler(reader, s, n, line):
                break
    return reader.result(numbered)


def _json_matrix(rows: object, where: tuple[int, str]) -> list[tuple[float | None, ...]]:
    if not isinstance(rows, list) or len(rows) > MAX_LABELS:
        raise BenchParseError("bandwidth_matrix is not a list of rows (or over MAX_LABELS)", *where)
    out: list[tuple[float | None, ...]] = []
    width = None
    for row in rows:
        if not isinstance(row, list) or len(row) > MAX_LABELS:
            raise BenchParseError("bandwidth_matrix row is not a list (or over MAX_LABELS)", *where)
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise BenchParseError("bandwidth_matrix rows differ in length", *where)
        cells: list[float | None] = []
        for v in row:
            if v == "N/A" or v is None:
                cells.append(None)
            elif isinstance(v, str):
                cells.append(_text.to_float(v.strip(), "bandwidth_matrix value", *where))
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                cells.append(_text.to_float(repr(float(v)), "bandwidth_matrix value", *where))
            else:
                raise BenchParseError(f"bandwidth_matrix value {clip(repr(v), 30)} is not a number", *where)
        out.append(tuple(cells))
    return out


def _parse_json(text: str, numbered: list[tuple[int, str]]) -> NvbResult:
    doc = _text.load_json(text, numbered)
    root = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        raise BenchParseError("JSON without a top-level \"nvbandwidth\" object", *_text.first_line(numbered))

    def opt_str(key: str) -> str | None:
        v = root.get(key)
        return v if isinstance(v, str) else None

    def opt_int(key: str) -> int | None:
        v = root.get(key)
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and _text.is_int_token(v.strip()):
            return int(v.strip())
        return None

    devices: dict[int, str] = {}
    hosts: dict[int, str] = {}
    dev_list = root.get("GPU Device list")
    if isinstance(dev_list, list):
        for i, entry in enumerate(dev_list[:MAX_LABELS]):
            if isinstance(entry, str):
                idx_s, _, name = entry.partition(": ")
                idx = int(idx_s.strip()) if _text.is_int_token(idx_s.strip()) else i
                name = name.strip()
                if name.endswith(")") and "): (" in name:  # "NAME (bdf): (host)"
                    name, _, host = name.rpartition(": (")
                    hosts[idx] = host[:-1]
                devices[idx] = name
    processes: dict[int, NvbProcess] = {}
    if len(set(hosts.values())) > 1:
        local: dict[str, int] = {}
        for idx in sorted(hosts):
            processes[idx] = NvbProcess(idx, hosts[idx], local.get(hosts[idx], 0), devices[idx])
            local[hosts[idx]] = local.get(hosts[idx], 0) + 1
    cases_raw = root.get("testcases", [])
    if not isinstance(cases_raw, list) or len(cases_raw) > MAX_LABELS:
        raise BenchParseError("\"testcases\" is not a list (or over MAX_LABELS)", *_text.json_line(numbered, '"testcases"'))
    testcases: dict[str, NvbTestcase] = {}
    for case in cases_raw:
        if not isinstance(case, dict) or not isinstance(case.get("name"), str):
            raise BenchParseError("a testcase without a name", *_text.json_line(numbered, '"testcases"'))
        name = case["name"]
        where = _text.json_line(numbered, f'"{name}"')
        status_v = case.get("status")
        status = status_v if isinstance(status_v, str) else "Running"
        matrices: tuple[NvbMatrix, ...] = ()
        if "bandwidth_matrix" in case:
            desc = case.get("bandwidth_description")
            if not isinstance(desc, str) or not _DESC_UNIT.search(desc):
                raise BenchParseError("testcase matrix without a description naming its unit", *where)
            rows = _json_matrix(case["bandwidth_matrix"], where)
            total = case.get("sum")
            if isinstance(total, (int, float)) and not isinstance(total, bool):
                total = _text.to_float(repr(float(total)), "sum", *where)
            else:
                total = None
            width = len(rows[0]) if rows else 0
            matrices = (_matrix(desc.strip(), rows, [str(i) for i in range(len(rows))],
                                tuple(str(i) for i in range(width)), total),)
        message = case.get("error") if isinstance(case.get("error"), str) else None
        testcases[name] = NvbTestcase(name, status, matrices, message)
    return NvbResult("json", version=opt_str("version"), git_version=opt_str("git_version"),
                     cuda_runtime_version=opt_int("CUDA Runtime Version"),
                     cuda_driver_version=opt_int("CUDA Driver Version"), driver_version=opt_str("Driver Version"),
                     devices=devices, processes=processes, testcases=testcases, error=opt_str("error"),
                     format_ids=("nvbandwidth.json",) + (("nvbandwidth.multinode",) if processes else ()))
