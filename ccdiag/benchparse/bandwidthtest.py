"""The CUDA sample ``bandwidthTest`` output (host to device, device to host, device to device copies)
read into typed runs.

Why: it is the output people paste most when "the GPU is slow to load data": one figure per copy
direction that says nothing about whether it is normal. ccdiag reads it and holds each figure to the
GPU's PCIe link (:mod:`ccdiag.bench.imports`).

Format (``NVIDIA/cuda-samples`` ``Samples/1_Utilities/bandwidthTest/bandwidthTest.cu``, v10.1 to v12.8,
removed in v13.0; the list of formats is ``formats.json``): ``[CUDA Bandwidth Test] - Starting...``,
``Running on...``, `` Device N: NAME`` (one per device with ``--device=all``), `` Quick Mode`` /
`` Range Mode`` / `` Shmoo Mode``; per copy kind `` Host to Device Bandwidth, N Device(s)``, `` PINNED
Memory Transfers`` (or ``PAGEABLE``; ``--wc`` appends `` Write-Combined Memory Writes are Enabled``
without a line break, so the column header follows on the same line), ``   Transfer Size
(Bytes)\\tBandwidth(GB/s)``, rows ``   %u\\t\\t\\t%.1f``; ``Result = PASS``. ``--csv`` prints instead
``bandwidthTest-H2D-Pinned, Bandwidth = %.1f GB/s, Time = %.5f s, Size = %u bytes, NumDevsUsed = %d``.
The shmoo mode prints a row of dots while it runs.

Units: since v10.1 the figure is GB/s, 10^9 bytes per second (``bandwidthInGBs = memSize * iterations
/ 1e9 / seconds``). The toolkit samples of CUDA 10.0 and before (not in the repository's history;
their ``bandwidthTest.cu`` survives in copies in public repositories) printed ``Bandwidth(MB/s)``
computed as ``(1 << 10) * memSize * iterations / (ms * (1 << 20))``: MiB/s (2^20 bytes per second),
converted here. Device-to-device figures count each byte twice (read and write), as the sample says.

A paste often holds several runs (one per ``numactl`` binding, per device): each run starts at its
``Bandwidth Test] - Starting...`` line, and the shell command before it is kept (its ``numactl
--membind``/``--cpunodebind`` nodes say where host memory was).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccdiag.benchparse import _text
from ccdiag.benchparse.errors import MAX_LABELS, MAX_ROWS, BenchParseError

_START = "Bandwidth Test] - Starting..."
_DEVICE = re.compile(r"^Device ([0-9]{1,5}): (.{1,200}?)\s*$")
_MODE = re.compile(r"^(Quick|Range|Shmoo) Mode\s*$")
_KIND = re.compile(r"^(Host to Device|Device to Host|Device to Device) Bandwidth, ([0-9]{1,5}) Device\(s\)\s*$")
_MEMORY = re.compile(r"^(PINNED|PAGEABLE) Memory Transfers\s*$")
_WC = "Write-Combined Memory Writes are Enabled"
_HEADER = re.compile(r"Transfer Size \(Bytes\)\s+Bandwidth\((GB|MB)/s\)\s*$")
_CSV = re.compile(r"^bandwidthTest-(H2D|D2H|D2D)(-Paged|-Pinned)?(-WriteCombined)?, Bandwidth = (\S{1,30}) (GB|MB)/s, "
                  r"Time = (\S{1,30}) s, Size = ([0-9]{1,20}) bytes, NumDevsUsed = ([0-9]{1,5})\s*$")
_RESULT = re.compile(r"^Result = (PASS|FAIL)\s*$")
_NUMACTL = re.compile(r"\bnumactl\b(.{0,200})")
_MEMBIND = re.compile(r"(?:-m|--membind(?:=|\s))\s*([0-9]{1,4})\b")
_CPUBIND = re.compile(r"(?:-N|--cpunodebind(?:=|\s))\s*([0-9]{1,4})\b")
_KINDS = {"Host to Device": "h2d", "Device to Host": "d2h", "Device to Device": "d2d", "H2D": "h2d", "D2H": "d2h",
          "D2D": "d2d"}
#: bytes/s per printed unit: GB/s since v10.1; MB/s before, computed with 2^20 (see the docstring)
_BYTES_PER_S = {"GB": 1e9, "MB": float(1 << 20)}


@dataclass(frozen=True)
class BwtRow:
    size_bytes: int
    gbyte_s: float


@dataclass(frozen=True)
class BwtCopy:
    """One copy kind of one run: ``kind`` ``"h2d"``, ``"d2h"`` or ``"d2d"``; ``memory`` ``"pinned"`` or
    ``"pageable"`` (None for d2d in CSV form); ``devices``: how many GPUs the figure adds up (``--device=all``
    prints their cumulative bandwidth)."""

    kind: str
    memory: str | None
    write_combined: bool
    devices: int
    rows: tuple[BwtRow, ...]
    unit: str  # "GB/s" | "MB/s" (MiB/s)
    line_no: int

    @property
    def largest(self) -> BwtRow:
        """The row of the largest transfer (the figure least affected by per-copy overhead)."""
        return max(self.rows, key=lambda r: r.size_bytes)


@dataclass(frozen=True)
class BwtRun:
    devices: dict[int, str] = field(default_factory=dict)
    mode: str | None = None  # "quick" | "range" | "shmoo"
    copies: tuple[BwtCopy, ...] = ()
    result: str | None = None  # "PASS" | "FAIL"
    command: str | None = None  # the shell command line before the run, when pasted
    membind: int | None = None  # numactl's memory node for this run
    cpubind: int | None = None


@dataclass(frozen=True)
class BandwidthTestResult:
    runs: tuple[BwtRun, ...]
    format_ids: tuple[str, ...] = ()


class _Run:
    def __init__(self, command: str | None) -> None:
        self.devices: dict[int, str] = {}
        self.mode: str | None = None
        self.copies: list[BwtCopy] = []
        self.result: str | None = None
        self.command = command
        self.kind: tuple[str, int, int] | None = None  # (kind, devices, line)
        self.memory: str | None = None
        self.wc = False
        self.unit: str | None = None
        self.rows: list[BwtRow] = []

    def close_copy(self) -> None:
        if self.kind is not None and self.unit is not None and self.rows:
            self.copies.append(BwtCopy(self.kind[0], self.memory, self.wc, self.kind[1], tuple(self.rows),
                                       self.unit, self.kind[2]))
        self.kind, self.memory, self.wc, self.unit, self.rows = None, None, False, None, []

    def build(self) -> BwtRun:
        self.close_copy()
        mem = cpu = None
        if self.command:
            m = _NUMACTL.search(self.command)
            if m:
                mb, cb = _MEMBIND.search(m.group(1)), _CPUBIND.search(m.group(1))
                mem = int(mb.group(1)) if mb else None
                cpu = int(cb.group(1)) if cb else None
        return BwtRun(dict(self.devices), self.mode, tuple(self.copies), self.result, self.command, mem, cpu)


class _Reader:
    def __init__(self) -> None:
        self.runs: list[BwtRun] = []
        self.cur: _Run | None = None
        self.last_command: str | None = None
        self.total_rows = 0
        self.ids: list[str] = []
        self.seen = False

    def mark(self, fid: str) -> None:
        if fid not in self.ids:
            self.ids.append(fid)

    def run(self) -> _Run:
        if self.cur is None:
            self.cur = _Run(self.last_command)
        return self.cur

    def line(self, n: int, line: str) -> None:
        s = line.strip()
        cur = self.cur
        if cur is not None and cur.unit is not None:
            toks = s.split()
            if len(toks) == 2 and _text.is_int_token(toks[0]):
                self.row(cur, toks, n, line)
                return
            cur.close_copy()
        if not s or set(s) == {"."}:  # the shmoo mode's progress dots
            if s:
                self.mark("bandwidthTest.shmoo")
            return
        if _START in s:
            self.seen = True
            if self.cur is not None:
                self.runs.append(self.cur.build())
            self.cur = _Run(self.last_command)
            self.last_command = None
            return
        if self.header(s, n, line) or self.csv(s, n, line):
            return
        m = _DEVICE.match(s)
        if m:
            run = self.run()
            if len(run.devices) >= MAX_LABELS:
                raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} devices", n, line, limit="MAX_LABELS")
            run.devices[int(m.group(1))] = m.group(2)
            return
        m = _MODE.match(s)
        if m:
            self.run().mode = m.group(1).lower()
            if m.group(1) != "Quick":
                self.mark(f"bandwidthTest.{m.group(1).lower()}")
            return
        m = _KIND.match(s)
        if m:
            self.seen = True
            run = self.run()
            run.close_copy()
            run.kind = (_KINDS[m.group(1)], int(m.group(2)), n)
            if int(m.group(2)) > 1:
                self.mark("bandwidthTest.all_devices")
            return
        m = _MEMORY.match(s)
        if m and self.cur is not None and self.cur.kind is not None:
            self.cur.memory = m.group(1).lower()
            if m.group(1) == "PAGEABLE":
                self.mark("bandwidthTest.pageable")
            return
        m = _RESULT.match(s)
        if m and self.cur is not None:
            self.cur.result = m.group(1)
            return
        if s.startswith(("$", "#", ">")) or "bandwidthTest" in s:
            self.last_command = s[:400]

    def header(self, s: str, n: int, line: str) -> bool:
        m = _HEADER.search(s)
        if not m:
            return False
        run = self.cur
        if run is None or run.kind is None:
            raise BenchParseError("a bandwidth table header without its ' ... Bandwidth, N Device(s)' line", n, line)
        if s.startswith(_WC):
            run.wc = True
            self.mark("bandwidthTest.wc")
        run.unit = m.group(1) + "/s"
        self.mark("bandwidthTest.gbs" if m.group(1) == "GB" else "bandwidthTest.mbs")
        return True

    def row(self, run: _Run, toks: list[str], n: int, line: str) -> None:
        if self.total_rows >= MAX_ROWS:
            raise BenchParseError(f"more than MAX_ROWS={MAX_ROWS} rows", n, line, limit="MAX_ROWS")
        size = _text.to_int(toks[0], "transfer size", n, line)
        value = _text.to_float(toks[1], "bandwidth", n, line)
        run.rows.append(BwtRow(size, value * _BYTES_PER_S[(run.unit or "GB/s")[:2]] / 1e9))
        self.total_rows += 1

    def csv(self, s: str, n: int, line: str) -> bool:
        m = _CSV.match(s)
        if not m:
            return False
        self.seen = True
        self.mark("bandwidthTest.csv")
        run = self.run()
        if self.total_rows >= MAX_ROWS:
            raise BenchParseError(f"more than MAX_ROWS={MAX_ROWS} rows", n, line, limit="MAX_ROWS")
        kind = _KINDS[m.group(1)]
        memory = {"-Paged": "pageable", "-Pinned": "pinned"}.get(m.group(2) or "")
        unit = m.group(5)
        value = _text.to_float(m.group(4), "Bandwidth", n, line) * _BYTES_PER_S[unit] / 1e9
        row = BwtRow(_text.to_int(m.group(7), "Size", n, line), value)
        devices = _text.to_int(m.group(8), "NumDevsUsed", n, line)
        self.total_rows += 1
        last = run.copies[-1] if run.copies else None
        if last is not None and (last.kind, last.memory, last.devices) == (kind, memory, devices):
            run.copies[-1] = BwtCopy(kind, memory, bool(m.group(3)), devices, last.rows + (row,), unit + "/s",
                                     last.line_no)
        else:
            run.copies.append(BwtCopy(kind, memory, bool(m.group(3)), devices, (row,), unit + "/s", n))
        return True

    def result(self, numbered: list[tuple[int, str]]) -> BandwidthTestResult:
        if self.cur is not None:
            self.runs.append(self.cur.build())
        runs = [r for r in self.runs if r.copies]
        if not self.seen or not runs:
            n, line = _text.first_line(numbered)
            why = ("no bandwidth table (output cut before its first result?)" if self.seen else
                   "not bandwidthTest output (no '[CUDA Bandwidth Test] - Starting...' line or bandwidth table)")
            raise BenchParseError(why, n, line)
        ids = [i for i in self.ids if i in ("bandwidthTest.gbs", "bandwidthTest.mbs")]
        if not ids and "bandwidthTest.csv" in self.ids:
            units = {c.unit for r in runs for c in r.copies}
            ids = ["bandwidthTest.gbs" if units == {"GB/s"} else "bandwidthTest.mbs"]
        return BandwidthTestResult(tuple(runs), tuple(ids + [i for i in self.ids if i not in ids]))


def parse_bandwidth_test(text: str) -> BandwidthTestResult:
    """``bandwidthTest`` output (readable or ``--csv``), one or more runs; refuses
    (:class:`BenchParseError`) anything else, naming the line."""
    numbered = _text.lines(text)
    reader = _Reader()
    for n, line in numbered:
        reader.line(n, line)
    return reader.result(numbered)
