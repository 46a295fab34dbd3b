"""nccl-tests output (``all_reduce_perf`` and every other collective; text, or the ``-J`` JSON) read
into typed rows.

Why: nccl-tests is how a cluster's interconnect is accepted, and its table is what users bring when
"the busbw looks low". ccdiag reads it as they have it: an mpirun/Slurm log with the command line in
front, NCCL_DEBUG=INFO lines and other programs' warnings interleaved with the table (ranks print
while rank 0 prints rows), several tests concatenated.

Text format (``NVIDIA/nccl-tests`` ``src/util.cu``; seen in ``tests/fixtures/corpus/nccl-tests``):
optional ``# nccl-tests version ...`` and ``# Collective test starting: <name>``; ``# nThread N nGpus
N minBytes N maxBytes N step: N(factor|bytes) warmup iters: N iters: N agg iters: N validation: N
graph: N``; ``#  Rank  0 Group  0 Pid 305376 on HOST device  0 [0x0f] NAME`` (newer: ``[0000:0f:00]``);
``NCCL version 2.27.5+cuda12.8``; the header ``#  size count type redop root time algbw busbw #wrong
time algbw busbw #wrong`` (per-iteration runs add ``i_min i_max i_p99 i_cv%`` after each ``#wrong``,
``-S`` a timestamp; old versions lack ``root`` and print ``error``); rows; ``# Out of bounds values :
0 OK``, ``# Avg bus bandwidth : 476.572 [OK|FAILED]``, ``# Collective test concluded: <name>``.
``#wrong`` is ``N/A`` where the test does not check (alltoall in-place). The time column is in us,
algbw/busbw in GB/s (10^9 bytes/s: ``doc/PERFORMANCE.md``, algbw = S / t).

JSON (``-J file.json``, ``src/util.cu``, file version 3): ``{"version", "args": [argv...], "nccl_version":
22705, "config": {"nthreads", "ngpus", "minimum_bytes", ..., "devices": [{"rank", "group", "pid",
"hostname", "device", "device_hex", "device_info"}]}, "results": [{"size", "count", "type", "redop",
"root": "    -1", "out_of_place": {"time", "alg_bw", "bus_bw", "nwrong"} | null, "in_place": {...}}],
"out_of_bounds": {"count", "okay"}, "average_bus_bandwidth": {"bandwidth", "okay"}}``; a NaN is
written as the string ``"nan"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from ccdiag.benchparse import _text
from ccdiag.benchparse.errors import MAX_LABELS, MAX_ROWS, BenchParseError, clip

_STARTING = re.compile(r"^#\s*Collective test starting: (\S{1,200})")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded: (\S{1,200})")
_NTHREAD = re.compile(r"^#\s*nThread ([0-9]{1,9}) nGpus ([0-9]{1,9}) minBytes ([0-9]{1,20}) maxBytes ([0-9]{1,20})")
_RANK = re.compile(r"^#\s*Rank +([0-9]{1,9})(?: Group +([0-9]{1,9}))?(?: Pid +([0-9]{1,12}))? on +(\S{1,300}) "
                   r"device +([0-9]{1,5}) \[([0-9a-fA-Fx:]{1,20})\] (.{0,300}?)\s*$")
_VERSION = re.compile(r"NCCL version ([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4}\S{0,60})")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (\S{1,60})")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*: (\S{1,60})(?:\s+(OK|FAILED))?\s*$")
_OOB = re.compile(r"^#\s*Out of bounds values\s*: ([0-9]{1,12}) (OK|FAILED)\s*$")
_PERF_NAME = re.compile(r"\b([a-z][a-z0-9_]{1,60}_perf)(?:_mpi)?\b")
_RANKS_NODES = re.compile(r"\bnRanks ([0-9]{1,9}) nNodes ([0-9]{1,9})\b")
#: an NCCL log line's prefix "host:pid:tid [cudaDev] NCCL INFO", and "nranks N" of its comm lines
_NCCL_PREFIX = re.compile(r"^(\S{1,200}):[0-9]{1,10}:[0-9]{1,10} \[[0-9]{1,4}\] NCCL (?:INFO|WARN)")
_NRANKS = re.compile(r"\bnranks ([0-9]{1,9})\b")
_DIGITS = re.compile(r"[0-9]+")  # a table row starts with two numbers (size, count); log lines do not
_TIME_COLS = ("time", "cputime")
_DELTA = re.compile(r"[0-9]{1,3}(?:\.[0-9]{0,9})?e[+-][0-9]{2,3}")
_GROUP = ("time", "algbw", "busbw", "#wrong")
_ITER = ("i_min", "i_max", "i_p99", "i_cv%")


@dataclass(frozen=True)
class NcclTestsDevice:
    rank: int
    group: int
    pid: int
    host: str
    device: int
    bus_id: str  # as printed: "0x0f" (older) or "0000:0f:00"
    name: str


@dataclass(frozen=True)
class NcclTestsMeasure:
    """One side (out-of-place or in-place) of a row. ``wrong`` is None where the tool printed N/A."""

    time_us: float
    algbw_gbyte_s: float
    busbw_gbyte_s: float
    wrong: int | None
    iter_min_us: float | None = None
    iter_max_us: float | None = None
    iter_p99_us: float | None = None
    iter_cv_pct: float | None = None
    max_delta: float | None = None  # v1.0-v2.12 "error" column (in place of #wrong)


@dataclass(frozen=True)
class NcclTestsRow:
    size_bytes: int
    count_elements: int
    type: str
    redop: str
    root: int | None  # -1 (no root) as printed; None where the header has no root column
    out_of_place: NcclTestsMeasure | None
    in_place: NcclTestsMeasure | None
    line_no: int | None = None

    @property
    def wrong(self) -> bool:
        """True when either side reported wrong elements (#wrong > 0)."""
        return any(m is not None and m.wrong is not None and m.wrong > 0 for m in (self.out_of_place, self.in_place))


@dataclass(frozen=True)
class NcclTestsRun:
    collective: str | None  # "all_reduce_perf", ... when the output names it
    rows: tuple[NcclTestsRow, ...] = ()
    devices: tuple[NcclTestsDevice, ...] = ()
    nccl_version: str | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    avg_bus_bandwidth_gbyte_s: float | None = None
    avg_bus_bandwidth_ok: bool | None = None  # None: unchecked
    out_of_bounds: int | None = None
    n_ranks: int | None = None
    n_nodes: int | None = None
    complete: bool = False  # the '# Avg bus bandwidth' line was read
    format_ids: tuple[str, ...] = ()
    header_inferred: str | None = None  # how the columns of a header-less tail were read

    @property
    def wrong_rows(self) -> tuple[NcclTestsRow, ...]:
        return tuple(r for r in self.rows if r.wrong)

    def row(self, size_bytes: int) -> NcclTestsRow | None:
        for r in self.rows:
            if r.size_bytes == size_bytes:
                return r
        return None


@dataclass(frozen=True)
class NcclTestsResult:
    format: str  # "text" | "json"
    runs: tuple[NcclTestsRun, ...] = field(default_factory=tuple)
    nccl_tests_version: str | None = None

    @property
    def run(self) -> NcclTestsRun:
        """The first (usually only) run."""
        return self.runs[0]

    @property
    def wrong_rows(self) -> tuple[NcclTestsRow, ...]:
        return tuple(r for run in self.runs for r in run.wrong_rows)

    @property
    def format_ids(self) -> tuple[str, ...]:
        out: list[str] = ["nccl-tests.json"] if self.format == "json" else []
        for run in self.runs:
            out += [f for f in run.format_ids if f not in out]
        return tuple(out)


def _nccl_version_from_code(code: int) -> str:
    if code >= 10000:  # 2.9 and later: major*10000 + minor*100 + patch
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


#: the names the columns before the first time column have had: v1.0 "bytes N type op", v2.x "size
#: count type redop root" (v2.0-v2.12 leave redop and root out where the collective has none)
_PRE_NAMES = (("size", "bytes"), ("count", "N"), ("type",), ("redop", "op"), ("root",))
_WRONG_NAMES = ("#wrong", "error", "res")


class _Layout:
    """Where each value sits in a row, read from the header line (or, for a header-less tail, from the
    first row: :meth:`infer`)."""

    def __init__(self, cols: list[str], n: int, line: str):
        try:
            t = next(i for i, c in enumerate(cols) if c in _TIME_COLS)
        except StopIteration:
            raise BenchParseError("table header without a time column", n, line) from None
        self.pre = cols[:t]
        if len(self.pre) < 3 or self.pre[0] not in _PRE_NAMES[0] or self.pre[1] not in _PRE_NAMES[1] \
                or self.pre[2] != "type":
            raise BenchParseError("table header does not start 'size count type [redop] [root]'", n, line)
        self.has_redop = len(self.pre) > 3 and self.pre[3] in _PRE_NAMES[3]
        self.has_root = self.pre[-1] == "root"
        if len(self.pre) != 3 + self.has_redop + self.has_root:
            raise BenchParseError("table header does not start 'size count type [redop] [root]'", n, line)
        self.version = "v1" if self.pre[0] == "bytes" else None
        rest = cols[t:]
        self.timestamp = bool(rest) and rest[-1] == "timestamp"
        if self.timestamp:
            rest = rest[:-1]
        self.cputime = rest[0] == "cputime"
        self.group = 8 if _ITER[0] in rest else 4
        if len(rest) not in (self.group, 2 * self.group):
            raise BenchParseError(f"table header has {len(rest)} measure columns, expected {2 * self.group}", n, line)
        self.sides = len(rest) // self.group  # v1.0 broadcast prints out-of-place only
        for k, c in enumerate(rest):
            want = (_GROUP + _ITER)[k % self.group]
            ok = c == want or (k % self.group == 0 and c in _TIME_COLS) or (want == "#wrong" and c in _WRONG_NAMES)
            if not ok:
                raise BenchParseError(f"unexpected table header column {clip(c, 20)!r}", n, line)
        self.wrong_name = rest[3]
        self.inferred: str | None = None

    @classmethod
    def infer(cls, toks: list[str], n: int, line: str) -> _Layout | None:
        """The layout a header-less row has, from its fixed columns: size and count (integers), the type
        (a word), the reduction op (a word, absent in some collectives), the root (an integer, absent in
        v2.0-v2.12 collectives without one), then 4 (or 8, per-iteration) values per side."""
        if len(toks) < 7 or not (_DIGITS.fullmatch(toks[0]) and _DIGITS.fullmatch(toks[1])) \
                or not toks[2][:1].isalpha():
            return None
        redop = toks[3][:1].isalpha() and toks[3] != "N/A"
        left = len(toks) - 3 - redop
        shapes = {16: (False, 8, 2), 17: (True, 8, 2), 8: (False, 4, 2), 9: (True, 4, 2), 4: (False, 4, 1),
                  5: (True, 4, 1)}
        if left not in shapes:
            return None
        root, group, sides = shapes[left]
        cols = ["size", "count", "type"] + (["redop"] if redop else []) + (["root"] if root else [])
        cols += (list(_GROUP + (_ITER if group == 8 else ())) * sides)
        first_wrong = toks[3 + redop + root + 3]
        if _DELTA.fullmatch(first_wrong):  # "0e+00": v2.0-v2.12's max-delta "error" column
            cols = ["error" if c == "#wrong" else c for c in cols]
        lay = cls(cols, n, line)
        lay.inferred = (f"no table header: columns read as {' '.join(cols[:3 + redop + root])}, then "
                        f"{'time algbw busbw #wrong' + (' i_min i_max i_p99 i_cv%' if group == 8 else '')} "
                        f"{'per side (out-of-place, in-place)' if sides == 2 else 'for one side'}, "
                        "from the row's fixed columns (the time as printed: us since v2.0, ms in v1.0)")
        return lay

    def parse(self, toks: list[str], n: int, line: str) -> NcclTestsRow:
        npre, g = len(self.pre), self.group
        full = npre + self.sides * g
        extra = 2 if self.timestamp and len(toks) in (full + 2, npre + g + 2) else 0
        body = toks[npre:len(toks) - extra]
        if len(body) == 2 * g and self.sides == 2:
            oop: list[str] | None = body[:g]
            inp: list[str] | None = body[g:]
        elif len(body) == g and self.sides == 1:
            oop, inp = body, None
        elif len(body) == g:  # out-of-place printed blank (trace replay): in-place only
            oop, inp = None, body
        else:
            raise BenchParseError(f"table row has {len(toks)} fields, expected {full}", n, line)
        if not toks[2][:1].isalpha():
            raise BenchParseError(f"table row type {clip(toks[2], 20)!r} is not a type name", n, line)
        ms = 1000.0 if self.version == "v1" else 1.0  # v1.0 printed the time in ms
        return NcclTestsRow(
            size_bytes=_text.to_int(toks[0], "size", n, line),
            count_elements=_text.to_int(toks[1], "count", n, line),
            type=toks[2], redop=toks[3] if self.has_redop else "none",
            root=_text.to_int(toks[npre - 1], "root", n, line) if self.has_root else None,
            out_of_place=None if oop is None else _measure(oop, n, line, ms, self.wrong_name != "#wrong"),
            in_place=None if inp is None else _measure(inp, n, line, ms, self.wrong_name != "#wrong"), line_no=n)


def _wrong(token: str, n: int, line: str) -> int | None:
    """#wrong (v2.13+); None for N/A (not checked: -c 0, or in-place alltoall)."""
    if token == "N/A":
        return None
    value = _text.to_float(token, "#wrong", n, line)  # printed with %g: "1e+06" is possible
    if value < 0:
        raise BenchParseError("#wrong is negative", n, line)
    return int(value)


def _measure(t: list[str], n: int, line: str, time_scale: float = 1.0, delta: bool = False) -> NcclTestsMeasure:
    """One side of a row. ``delta``: the fourth column is v1.0-v2.12's "error"/"res", the largest
    difference from the expected values (a tolerance the tool checks itself and counts under "Out of
    bounds values"), not a count of wrong elements."""
    f = _text.to_float
    it: list[float | None] = [f(x, "per-iteration value", n, line) for x in t[4:8]] if len(t) == 8 else [None] * 4
    per_iter = dict(iter_min_us=it[0], iter_max_us=it[1], iter_p99_us=it[2], iter_cv_pct=it[3])
    if delta:
        d = None if t[3] == "N/A" else f(t[3], "error", n, line)
        return NcclTestsMeasure(f(t[0], "time", n, line) * time_scale, f(t[1], "algbw", n, line),
                                f(t[2], "busbw", n, line), None, max_delta=d, **per_iter)
    return NcclTestsMeasure(f(t[0], "time", n, line) * time_scale, f(t[1], "algbw", n, line),
                            f(t[2], "busbw", n, line), _wrong(t[3], n, line), **per_iter)


class _RunBuilder:
    """One run (one collective's table) while it is read."""

    def __init__(self, collective: str | None):
        self.collective = collective
        self.rows: list[NcclTestsRow] = []
        self.devices: list[NcclTestsDevice] = []
        self.layout: _Layout | None = None
        self.started = False
        self.nccl_version: str | None = None
        self.threads: tuple[int, int, int, int] | None = None  # nthreads, ngpus, min_bytes, max_bytes
        self.avg: tuple[float, bool | None] | None = None
        self.out_of_bounds: int | None = None
        self.marks: list[str] = []  # format ids seen on this run's own lines

    def build(self) -> NcclTestsRun:
        ranks, hosts = {d.rank for d in self.devices}, {d.host for d in self.devices}
        th = self.threads or (None, None, None, None)
        return NcclTestsRun(
            collective=self.collective, rows=tuple(self.rows), devices=tuple(self.devices),
            nccl_version=self.nccl_version, nthreads=th[0], ngpus=th[1], min_bytes=th[2], max_bytes=th[3],
            avg_bus_bandwidth_gbyte_s=self.avg[0] if self.avg else None,
            avg_bus_bandwidth_ok=self.avg[1] if self.avg else None, out_of_bounds=self.out_of_bounds,
            n_ranks=len(ranks) if self.devices else None, n_nodes=len(hosts) if self.devices else None,
            complete=self.avg is not None, format_ids=self.format_ids(),
            header_inferred=self.layout.inferred if self.layout is not None else None)

    def format_ids(self) -> tuple[str, ...]:
        lay = self.layout
        ids: list[str] = []
        if lay is not None:
            if lay.version == "v1" or "nccl-tests.v1" in self.marks:
                ids.append("nccl-tests.v1")
            elif lay.wrong_name != "#wrong":
                ids.append("nccl-tests.v2.0")
            elif "nccl-tests.v2.17" in self.marks:
                ids.append("nccl-tests.v2.17")
            else:
                ids.append("nccl-tests.v2.13")
            if lay.inferred:
                ids.append("nccl-tests.headerless")
            if lay.cputime:
                ids.append("nccl-tests.cputime")
            if lay.timestamp:
                ids.append("nccl-tests.timestamp")
            if lay.group == 8:
                ids.append("nccl-tests.per_iter")
        if self.rows and all(m.wrong is None and m.max_delta is None for r in self.rows
                             for m in (r.out_of_place, r.in_place) if m is not None) \
                and not (self.collective or "").startswith("alltoall"):
            ids.append("nccl-tests.nocheck")
        if len({(d.host, d.pid) for d in self.devices}) > 1:
            ids.append("nccl-tests.mpi")
        if any(r.out_of_place is None and r.in_place is not None for r in self.rows):
            ids.append("nccl-tests.inplace_only")
        return tuple(ids)


class _TextReader:
    """One pass over nccl-tests text output. Comment lines (``#``) carry the run's header, table
    header and summary; other lines are table rows or log (NCCL INFO, warnings, the command line).
    v1.0 printed its summary and nThread lines without the ``#``; they are read the same way."""

    def __init__(self) -> None:
        self.runs: list[NcclTestsRun] = []
        self.cur: _RunBuilder | None = None
        self.last_name: str | None = None
        self.tests_version: str | None = None
        self.version: str | None = None
        self.ranks_nodes: tuple[int, int] | None = None
        self.total_rows = 0
        self.v217 = False  # "# nccl-tests version" / "# Collective test starting" lines seen
        self.log_hosts: set[str] = set()  # hosts of NCCL log lines (a paste without '# Rank' lines)
        self.log_nranks: int | None = None

    def new_run(self) -> _RunBuilder:
        if self.cur is not None and (self.cur.rows or self.cur.layout is not None):
            self.runs.append(self.cur.build())
            self.cur = None
        if self.cur is None:
            self.cur = _RunBuilder(self.last_name)
            if self.v217:
                self.cur.marks.append("nccl-tests.v2.17")
        return self.cur

    # -- comment lines ----------------------------------------------------------------------------
    def starting(self, s: str, n: int, line: str) -> bool:
        m = _STARTING.match(s)
        if not m:
            return False
        self.last_name = m.group(1)
        self.v217 = True
        run = self.new_run()
        run.collective = run.collective or self.last_name
        run.started = True
        if "nccl-tests.v2.17" not in run.marks:
            run.marks.append("nccl-tests.v2.17")
        return True

    def nthread(self, s: str, n: int, line: str) -> bool:
        m = _NTHREAD.match(s)
        if not m:
            return False
        cur = self.cur
        run = cur if cur is not None and cur.started and not cur.rows and cur.layout is None else self.new_run()
        run.started = False
        run.threads = (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))
        return True

    def rank(self, s: str, n: int, line: str) -> bool:
        m = _RANK.match(s)
        if not m:
            return False
        run = self.cur or self.new_run()
        if len(run.devices) >= MAX_LABELS * 16:
            raise BenchParseError("too many '# Rank' lines", n, line, limit="MAX_LABELS")
        run.devices.append(NcclTestsDevice(int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0), m.group(4),
                                           int(m.group(5)), m.group(6), m.group(7)))
        return True

    def table_header(self, s: str, n: int, line: str) -> bool:
        toks = s[1:].split()
        if toks[:2] not in (["size", "count"], ["bytes", "N"]):
            return False
        run = self.cur if self.cur is not None and not self.cur.rows else self.new_run()
        run.layout = _Layout(toks, n, line)
        if self.version and run.nccl_version is None:
            run.nccl_version = self.version
        return True

    def summary(self, s: str, n: int, line: str) -> bool:
        m = _AVG.match(s)
        if m and self.cur is not None:
            value = _text.to_float(m.group(1), "Avg bus bandwidth", n, line)
            self.cur.avg = (value, None if m.group(2) is None else m.group(2) == "OK")
            return True
        m = _OOB.match(s)
        if m and self.cur is not None:
            self.cur.out_of_bounds = int(m.group(1))
            return True
        return False

    def versions(self, s: str, n: int, line: str) -> bool:
        m = _TESTS_VERSION.match(s)
        if m:
            self.tests_version = m.group(1)
            self.v217 = True
            if self.cur is not None and "nccl-tests.v2.17" not in self.cur.marks:
                self.cur.marks.append("nccl-tests.v2.17")
            return True
        if _CONCLUDED.match(s):
            return True
        m = _VERSION.search(s)
        if m:
            self.version = self.version or m.group(1)
        return True  # any other comment line is read and left

    # -- other lines ------------------------------------------------------------------------------
    def row(self, s: str, n: int, line: str) -> bool:
        toks = s.split()
        if len(toks) < 3 or not _DIGITS.fullmatch(toks[0]) or not _DIGITS.fullmatch(toks[1]):
            return False
        cur = self.cur
        if cur is None or cur.layout is None:
            layout = _Layout.infer(toks, n, line)
            if layout is None:
                return False
            cur = cur if cur is not None and not cur.rows else self.new_run()
            cur.layout = layout
        if self.total_rows >= MAX_ROWS:
            raise BenchParseError(f"more than MAX_ROWS={MAX_ROWS} table rows", n, line, limit="MAX_ROWS")
        cur.rows.append(cur.layout.parse(toks, n, line))
        self.total_rows += 1
        return True

    def bare(self, s: str, n: int, line: str) -> bool:
        """v1.0's summary and nThread lines, printed without the ``#``."""
        if s.startswith(("Out of bounds values", "Avg bus bandwidth")):
            if self.cur is not None and "nccl-tests.v1" not in self.cur.marks:
                self.cur.marks.append("nccl-tests.v1")
            return self.summary("# " + s, n, line)
        if s.startswith("nThread "):
            return self.nthread("# " + s, n, line)
        return False

    def log(self, s: str, n: int, line: str) -> bool:
        """NCCL INFO lines, UCX/HCOLL warnings, the command line, a prompt: versions and names only."""
        m = _VERSION.search(s)
        if m:
            self.version = self.version or m.group(1)
            if self.cur is not None and self.cur.layout is None and self.cur.nccl_version is None:
                self.cur.nccl_version = m.group(1)
        m = _RANKS_NODES.search(s)
        if m:
            self.ranks_nodes = (int(m.group(1)), int(m.group(2)))
        m = _NCCL_PREFIX.match(s)
        if m:
            if len(self.log_hosts) < MAX_LABELS:
                self.log_hosts.add(m.group(1))
            r = _NRANKS.search(s)
            if r:
                self.log_nranks = int(r.group(1))
        if "NCCL INFO" not in s and "NCCL WARN" not in s:
            m = _PERF_NAME.search(s)
            if m:
                self.last_name = m.group(1)
                if self.cur is not None and self.cur.collective is None and not self.cur.rows:
                    self.cur.collective = self.last_name
        return True

    def result(self, numbered: list[tuple[int, str]]) -> NcclTestsResult:
        if self.cur is not None and (self.cur.rows or self.cur.layout is not None):
            self.runs.append(self.cur.build())
        if not self.runs:
            n, line = _text.first_line(numbered)
            raise BenchParseError("not nccl-tests output (no '#  size  count  type ...' table header, and no row "
                                  "of its fixed columns)", n, line)
        return NcclTestsResult("text", tuple(self._finish(run) for run in self.runs), self.tests_version)

    def _finish(self, run: NcclTestsRun) -> NcclTestsRun:
        if run.nccl_version is None and self.version is not None:
            run = replace(run, nccl_version=self.version)
        rn = self.ranks_nodes
        if rn is None and self.log_nranks and self.log_hosts:
            rn = (self.log_nranks, len(self.log_hosts))
        if rn is not None and not run.devices:
            run = replace(run, n_ranks=rn[0], n_nodes=rn[1])
        elif rn is not None and run.n_ranks == rn[0]:
            run = replace(run, n_nodes=rn[1])
        return run


_COMMENT_HANDLERS = (_TextReader.starting, _TextReader.nthread, _TextReader.rank, _TextReader.table_header,
                     _TextReader.summary, _TextReader.versions)
_LINE_HANDLERS = (_TextReader.row, _TextReader.bare, _TextReader.log)


def has_table_row(numbered: list[tuple[int, str]]) -> bool:
    """Whether a line of ``numbered`` is an nccl-tests table row by its fixed columns (a pasted tail
    without the header); linear, one split per line."""
    for n, line in numbered:
        toks = line.split()
        if len(toks) >= 7 and _DIGITS.fullmatch(toks[0]) and _Layout.infer(toks, n, line) is not None:
            return True
    return False


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """nccl-tests text or ``-J`` JSON output; refuses (:class:`BenchParseError`) anything else, and any
    table row it cannot read exactly (naming the line)."""
    numbered = _text.lines(text)
    if _text.looks_like_json(numbered):
        return _parse_json(text, numbered)
    reader = _TextReader()
    for n, line in numbered:
        s = line.strip()
        if not s:
            continue
        for handler in (_COMMENT_HANDLERS if s.startswith("#") else _LINE_HANDLERS):
            if handler(reader, s, n, line):
                break
    return reader.result(numbered)


def _num(v: object, what: str, where: tuple[int, str]) -> float | None:
    if v is None or v == "nan":
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BenchParseError(f"{what} {clip(repr(v), 30)} is not a number", *where)
    return _text.to_float(repr(float(v)), what, *where)


def _int(v: object, what: str, where: tuple[int, str]) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < -(1 << 63) or v >= 1 << 64:
        raise BenchParseError(f"{what} {clip(repr(v), 30)} is not an integer", *where)
    return v


def _json_measure(obj: object, where: tuple[int, str]) -> NcclTestsMeasure | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise BenchParseError("out_of_place/in_place is not an object", *where)
    t = obj.get("time", obj.get("cpu_time"))
    time_us, alg, bus = _num(t, "time", where), _num(obj.get("alg_bw"), "alg_bw", where), \
        _num(obj.get("bus_bw"), "bus_bw", where)
    if time_us is None or alg is None or bus is None:
        raise BenchParseError("a result without time, alg_bw or bus_bw", *where)
    wrong = _num(obj.get("nwrong"), "nwrong", where)
    return NcclTestsMeasure(time_us, alg, bus, None if wrong is None else int(wrong))


def _json_collective(doc: dict) -> str | None:
    args = doc.get("args")
    if not (isinstance(args, list) and args and isinstance(args[0], str)):
        return None
    m = _PERF_NAME.search(args[0].rsplit("/", 1)[-1])
    return m.group(1) if m else args[0].rsplit("/", 1)[-1][:200] or None


def _json_devices(doc: dict, config: dict, numbered: list[tuple[int, str]]) -> list[NcclTestsDevice]:
    dev_list = config.get("devices", doc.get("devices", []))
    where = _text.json_line(numbered, '"devices"')
    if not isinstance(dev_list, list) or len(dev_list) > MAX_LABELS * 16:
        raise BenchParseError("\"devices\" is not a list (or too long)", *where, limit="MAX_LABELS")
    out = []
    for d in dev_list:
        if not isinstance(d, dict):
            raise BenchParseError("a device entry is not an object", *where)
        out.append(NcclTestsDevice(
            _int(d.get("rank"), "rank", where), _int(d.get("group", 0), "group", where),
            _int(d.get("pid", 0), "pid", where), str(d.get("hostname", ""))[:300],
            _int(d.get("device"), "device", where), str(d.get("device_hex", ""))[:20],
            str(d.get("device_info", ""))[:300]))
    return out


def _json_row(r: object, where: tuple[int, str]) -> NcclTestsRow:
    if not isinstance(r, dict):
        raise BenchParseError("a results entry is not an object", *where)
    root = r.get("root")
    if isinstance(root, str) and _text.is_int_token(root.strip()):
        root = int(root.strip())
    elif root is not None:
        root = _int(root, "root", where)
    t, op = r.get("type"), r.get("redop")
    if not isinstance(t, str) or not isinstance(op, str):
        raise BenchParseError("a result without type or redop", *where)
    return NcclTestsRow(_int(r.get("size"), "size", where), _int(r.get("count"), "count", where),
                        t[:40], op[:40], root, _json_measure(r.get("out_of_place"), where),
                        _json_measure(r.get("in_place"), where))


def _json_info(doc: dict, config: dict, devices: list[NcclTestsDevice],
               numbered: list[tuple[int, str]]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        info["avg_bus_bandwidth_gbyte_s"] = _num(avg.get("bandwidth"), "bandwidth",
                                                 _text.json_line(numbered, '"average_bus_bandwidth"'))
        ok = avg.get("okay")
        info["avg_bus_bandwidth_ok"] = ok if isinstance(ok, bool) else None
        info["complete"] = True
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int) and not isinstance(oob.get("count"), bool):
        info["out_of_bounds"] = oob["count"]
    for key, name in (("nthreads", "nthreads"), ("ngpus", "ngpus"), ("minimum_bytes", "min_bytes"),
                      ("maximum_bytes", "max_bytes")):
        v = config.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            info[name] = v
    if devices:
        info["n_ranks"] = len({d.rank for d in devices})
        info["n_nodes"] = len({d.host for d in devices})
    return info


def _parse_json(text: str, numbered: list[tuple[int, str]]) -> NcclTestsResult:
    doc = _text.load_json(text, numbered)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise BenchParseError("JSON without a \"results\" list (not nccl-tests -J output)", *_text.first_line(numbered))
    results = doc["results"]
    if len(results) > MAX_ROWS:
        raise BenchParseError(f"more than MAX_ROWS={MAX_ROWS} results", *_text.json_line(numbered, '"results"'),
                              limit="MAX_ROWS")
    code = doc.get("nccl_version")
    version = _nccl_version_from_code(code) if isinstance(code, int) and not isinstance(code, bool) else None
    config_v = doc.get("config")
    config: dict = config_v if isinstance(config_v, dict) else {}
    devices = _json_devices(doc, config, numbered)
    where = _text.json_line(numbered, '"results"')
    rows = [_json_row(r, where) for r in results]
    run = NcclTestsRun(collective=_json_collective(doc), rows=tuple(rows), devices=tuple(devices),
                       nccl_version=version, **_json_info(doc, config, devices, numbered))
    return NcclTestsResult("json", (run,))
