"""perftest (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``, ``ib_*_lat``) client output, text or
``--out_json``, read into typed rows.

Why: ``ib_write_bw`` between two nodes (with ``--use_cuda`` for GPUDirect RDMA) is the standard
check of one rail; ccdiag reads the output users already have and judges it against the port's rate.

Text format (``linux-rdma/perftest`` ``src/perftest_parameters.c`` / ``.h``; seen in
``tests/fixtures/corpus/perftest``): a banner (``RDMA_Write BW Test``) and ``Key : value`` pairs, two to a
line separated by tabs or spaces (Dual-port, Device, Number of qps, Transport type, Connection type,
Using SRQ, PCIe relax order, ibv_wr* API, TX depth, CQ Moderation, Mtu ``4096[B]``, Link type, GID index,
Max inline data, rdma_cm QPs, Data ex. method); ``local address: LID ...`` / ``remote address: ...`` with
``GID: ...`` lines; then the table: bandwidth tests `` #bytes #iterations BW peak[MB/sec] BW
average[MB/sec] MsgRate[Mpps]`` (``[Gb/sec]`` with ``--report_gbits``; newer releases print
``[MiB/sec]``), latency tests `` #bytes #iterations t_min[usec] t_max[usec] t_typical[usec]
t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]`` (``t_avg[usec] tps average``
with ``-D``). ``--use_cuda`` adds CUDA set-up lines before the banner; ``Conflicting CPU frequency
values detected`` lines may precede every row (skipped, counted).

Units: perftest's ``MB/sec`` is **MiB/s** (2^20 bytes per second): ``src/perftest_parameters.c``
``print_report_bw`` divides by ``format_factor = (report_fmt == MBS) ? 0x100000 : 125000000``, and
commit 1d202bb (2024-03, "Display proper unit for MiB/sec results") relabelled the column ``MiB/sec``
for that reason. ``Gb/sec`` is 10^9 bits/s of payload (125,000,000 bytes/s). Both are converted to
``_gbyte_s`` (10^9 payload bytes/s) here; no field is left in the tool's unit.

Server side: latency tests print no results on the server (and bandwidth tests do only on some
versions); an output without result rows is refused, saying to import the client's.

JSON (``--out_json``, ``write_test_info_to_file`` and ``write_bw_report_to_file`` /
``write_report_lat_to_file``): ``{"test_info": {"test": "RDMA_Write_BW_Test", "Device", "Link_type",
"Mtu", "GID_index", ...}, "results": {"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}}``
(latency: ``t_min``, ``t_max``, ``t_typical``, ``t_avg``, ``t_stdev``, ``percentile_99``,
``percentile_99.9``). The file is rewritten per message size, so it holds the last size only, and it
does not record the bandwidth unit: pass ``json_bw_unit`` ("MiB/sec" or "Gb/sec", as the run's
``--report_gbits`` was); without it perftest's default (MiB/s) is assumed and ``bw_unit_assumed`` set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccdiag.benchparse import _text
from ccdiag.benchparse.errors import MAX_ROWS, BenchParseError, clip

_TITLE = re.compile(r"^((?:RDMA_Write|RDMA_Read|Send|Atomic|Raw Ethernet|RDMA_Write_Imm|Write|Read)"
                    r"[A-Za-z_ ]{0,40}?) (BW|Latency|Bidirectional BW|Post List BW)[A-Za-z_ ]{0,30}? Test\s*$")
_BW_HEADER = re.compile(r"BW peak\[(MB/sec|MiB/sec|Gb/sec)\]")
_ADDR = re.compile(r"^(local|remote) address: LID (\S{1,12})")
_GID = re.compile(r"^GID: (\S{1,80})\s*$")
_CUDA_NAME = re.compile(r"device name = \[(.{1,200})\]")
_CUDA_PICK = re.compile(r"^Picking device No\. ([0-9]{1,5})")
_USE_CUDA = re.compile(r"--use_cuda(?:=| )([0-9]{1,5})")
_CMD = re.compile(r"\b(ib_(?:write|read|send|atomic)_(?:bw|lat))\b")
_CPU_FREQ = "Conflicting CPU frequency values detected"
_BIDIR_FLAG = re.compile(r"(?:^|\s)(?:-b|--bidirectional)(?:\s|$)")
#: bytes/s per printed unit (see the module docstring for the source)
_BYTES_PER_S = {"MB/sec": float(1 << 20), "MiB/sec": float(1 << 20), "Gb/sec": 125_000_000.0}


@dataclass(frozen=True)
class PerftestBwRow:
    size_bytes: int
    iterations: int
    bw_peak_gbyte_s: float
    bw_average_gbyte_s: float
    msg_rate_mpps: float


@dataclass(frozen=True)
class PerftestLatRow:
    size_bytes: int
    iterations: int
    t_avg_us: float
    t_min_us: float | None = None
    t_max_us: float | None = None
    t_typical_us: float | None = None
    t_stdev_us: float | None = None
    p99_us: float | None = None
    p99_9_us: float | None = None
    tps_average: float | None = None  # transactions per second (-D duration mode)


@dataclass(frozen=True)
class PerftestResult:
    """``kind`` is ``"bw"`` or ``"lat"``; ``role`` ``"client"`` / ``"server"`` (None from JSON);
    ``bw_unit`` is the unit the tool printed (the rows are converted to GB/s whatever it was)."""

    format: str  # "text" | "json"
    test: str | None
    kind: str
    role: str | None = None
    command: str | None = None  # ib_write_bw, ... when the output names it
    device: str | None = None
    link_type: str | None = None
    transport_type: str | None = None
    connection_type: str | None = None
    mtu_bytes: int | None = None
    gid_index: int | None = None
    num_qps: int | None = None
    tx_depth: int | None = None
    max_inline_bytes: int | None = None
    rdma_cm: bool | None = None
    local_lid: str | None = None
    remote_lid: str | None = None
    local_gid: str | None = None
    remote_gid: str | None = None
    bidirectional: bool = False  # -b: each figure is both directions summed
    use_cuda: bool = False
    cuda_device: int | None = None
    cuda_device_name: str | None = None
    bw_unit: str | None = None
    bw_unit_assumed: bool = False
    bw_rows: tuple[PerftestBwRow, ...] = ()
    lat_rows: tuple[PerftestLatRow, ...] = ()
    header: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    cpu_freq_warnings: int = 0

    @property
    def peak_bw_average_gbyte_s(self) -> float | None:
        return max((r.bw_average_gbyte_s for r in self.bw_rows), default=None)


def _pairs(s: str) -> list[tuple[str, str]]:
    """``Key : value`` pairs of one banner line (two to a line, split by tabs or runs of spaces)."""
    chunks = [c.strip() for c in re.split(r"\t+| {2,}", s.strip()) if c.strip()]
    out: list[tuple[str, str]] = []
    pending: str | None = None
    for c in chunks:
        if c.startswith(":"):
            if pending is not None:
                out.append((pending, c[1:].strip()))
            pending = None
        elif ":" in c:
            k, _, v = c.partition(":")
            if v.strip():
                out.append((k.strip(), v.strip()))
                pending = None
            else:
                pending = k.strip()
        else:
            pending = c.strip()
    return out


def _bracket_int(v: str, what: str, n: int, line: str) -> int:
    return _text.to_int(v.split("[", 1)[0].strip(), what, n, line)


class _TextReader:
    """The state of one pass over a perftest text output: each line goes to the first handler that
    takes it (:data:`_HANDLERS`), so that each kind of line is read in one small place."""

    def __init__(self) -> None:
        self.title: str | None = None
        self.kind: str | None = None
        self.header: dict[str, str] = {}
        self.info: dict[str, object] = {}
        self.warnings: list[str] = []
        self.cpu_freq = 0
        self.role = "client"
        self.table: tuple[str, int, str] | None = None  # ("bw"|"lat"|"lat_dur", line_no, line)
        self.unit: str | None = None
        self.bw_rows: list[PerftestBwRow] = []
        self.lat_rows: list[PerftestLatRow] = []
        self.waiting_line: tuple[int, str] | None = None
        self.last_addr = "local"  # which address block a 'GID:' line belongs to

    def row(self, s: str, n: int, line: str) -> bool:
        if self.table is None:
            return False
        toks = s.split()
        if not _text.is_int_token(toks[0]):
            return False
        if len(self.bw_rows) + len(self.lat_rows) >= MAX_ROWS:
            raise BenchParseError(f"more than MAX_ROWS={MAX_ROWS} result rows", n, line, limit="MAX_ROWS")
        if self.table[0] == "bw":
            self.bw_rows.append(_bw_row(toks, self.unit or "MB/sec", n, line))
        else:
            self.lat_rows.append(_lat_row(toks, self.table[0], n, line))
        return True

    def table_header(self, s: str, n: int, line: str) -> bool:
        if not s.startswith("#bytes"):
            return False
        m = _BW_HEADER.search(s)
        if m:
            self.table, self.unit, self.kind = ("bw", n, line), m.group(1), "bw"
        elif "t_min[usec]" in s:
            self.table, self.kind = ("lat", n, line), "lat"
        elif "t_avg[usec]" in s and "tps" in s:
            self.table, self.kind = ("lat_dur", n, line), "lat"
        else:
            raise BenchParseError("result table header of an unknown layout", n, line)
        if "#sl" in s or "Port1" in s:
            raise BenchParseError("per-port and QoS result tables are not read", n, line)
        return True

    def waiting(self, s: str, n: int, line: str) -> bool:
        if "Waiting for client" not in s:
            return False
        self.role = "server"
        self.waiting_line = self.waiting_line or (n, line)
        return True

    def banner(self, s: str, n: int, line: str) -> bool:
        m = _TITLE.match(s)
        if not m:
            return False
        self.title = s
        self.kind = self.kind or ("lat" if m.group(2) == "Latency" else "bw")
        return True

    def address(self, s: str, n: int, line: str) -> bool:
        m = _ADDR.match(s)
        if m:
            self.info[f"{m.group(1)}_lid"] = m.group(2)
            self.last_addr = m.group(1)
            return True
        m = _GID.match(s)
        if m and f"{self.last_addr}_gid" not in self.info:
            self.info[f"{self.last_addr}_gid"] = m.group(1)
            return True
        return False

    def warning(self, s: str, n: int, line: str) -> bool:
        if not s.startswith("WARNING:"):
            return False
        self.warnings.append(clip(s, 200))
        return True

    def cuda(self, s: str, n: int, line: str) -> bool:
        m = _CUDA_PICK.match(s)
        if m:
            self.info["use_cuda"] = True
            self.info["cuda_device"] = int(m.group(1))
            return True
        m = _CUDA_NAME.search(s)
        if m:
            self.info["use_cuda"] = True
            self.info["cuda_device_name"] = m.group(1)
            return True
        return False

    def command(self, s: str, n: int, line: str) -> bool:
        m = _CMD.search(s)
        if not m or "command" in self.info or " : " in s:
            return False
        self.info["command"] = m.group(1)
        c = _USE_CUDA.search(s)
        if c:
            self.info["use_cuda"] = True
            self.info.setdefault("cuda_device", int(c.group(1)))
        if _BIDIR_FLAG.search(s):
            self.info["bidirectional"] = True
        return True

    def pairs(self, s: str, n: int, line: str) -> bool:
        if self.title is None or ":" not in s or len(s) > 200:
            return False
        for k, v in _pairs(s):
            if len(self.header) < 64:
                self.header[k] = v
        return True

    def result(self, numbered: list[tuple[int, str]]) -> PerftestResult:
        if self.title is None and self.table is None:
            n, line = _text.first_line(numbered)
            raise BenchParseError("not perftest output (no '... BW Test' / '... Latency Test' banner)", n, line)
        if not self.bw_rows and not self.lat_rows:
            if self.role == "server" or self.table is None:
                n, line = self.waiting_line or (numbered[-1] if numbered else (1, ""))
                raise BenchParseError("server-side perftest output has no result rows (latency tests report only "
                                      "on the client); import the client's output", n, line)
            raise BenchParseError("result table header without rows (output cut?)", self.table[1], self.table[2])
        info = dict(self.info)
        if self.title and "Bidirectional" in self.title:
            info["bidirectional"] = True
        return PerftestResult(
            format="text", test=self.title, kind=self.kind or "bw", role=self.role, header=self.header,
            warnings=tuple(self.warnings), cpu_freq_warnings=self.cpu_freq, bw_unit=self.unit,
            bw_rows=tuple(self.bw_rows), lat_rows=tuple(self.lat_rows), **_header_fields(self.header), **info)


#: line handlers in the order they are tried
_HANDLERS = (_TextReader.row, _TextReader.table_header, _TextReader.waiting, _TextReader.banner,
             _TextReader.address, _TextReader.warning, _TextReader.cuda, _TextReader.command, _TextReader.pairs)


def parse_perftest(text: str, json_bw_unit: str | None = None) -> PerftestResult:
    """perftest client output (text or ``--out_json``); refuses (:class:`BenchParseError`) a server-side
    output without results, and anything else that is not perftest's."""
    numbered = _text.lines(text)
    if _text.looks_like_json(numbered):
        return _parse_json(text, numbered, json_bw_unit)
    reader = _TextReader()
    for n, line in numbered:
        s = line.strip()
        if not s or s.startswith("---") or s.startswith("***"):
            continue
        if s.startswith(_CPU_FREQ):
            reader.cpu_freq += 1
            continue
        for handler in _HANDLERS:
            if handler(reader, s, n, line):
                break
    return reader.result(numbered)


def _header_fields(header: dict[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}

    def num(key: str) -> int | None:
        v = header.get(key)
        if v is None:
            return None
        head = v.split("[", 1)[0].strip()
        return int(head) if _text.is_int_token(head) else None

    out["device"] = header.get("Device")
    out["link_type"] = header.get("Link type")
    out["transport_type"] = header.get("Transport type")
    out["connection_type"] = header.get("Connection type")
    out["mtu_bytes"] = num("Mtu")
    out["gid_index"] = num("GID index")
    out["num_qps"] = num("Number of qps")
    out["tx_depth"] = num("TX depth")
    out["max_inline_bytes"] = num("Max inline data")
    cm = header.get("rdma_cm QPs")
    out["rdma_cm"] = None if cm is None else cm.upper() == "ON"
    return out


def _bw_row(toks: list[str], unit: str, n: int, line: str) -> PerftestBwRow:
    if len(toks) != 5:
        raise BenchParseError(f"bandwidth row has {len(toks)} fields, expected 5", n, line)
    scale = _BYTES_PER_S[unit] / 1e9
    f = _text.to_float
    return PerftestBwRow(_text.to_int(toks[0], "#bytes", n, line), _text.to_int(toks[1], "#iterations", n, line),
                         f(toks[2], "BW peak", n, line) * scale, f(toks[3], "BW average", n, line) * scale,
                         f(toks[4], "MsgRate", n, line))


def _lat_row(toks: list[str], layout: str, n: int, line: str) -> PerftestLatRow:
    f = _text.to_float
    want = 4 if layout == "lat_dur" else 9
    if len(toks) < want:
        raise BenchParseError(f"latency row has {len(toks)} of its {want} fields (output cut mid-row?)", n, line)
    size = _text.to_int(toks[0], "#bytes", n, line)
    iters = _text.to_int(toks[1], "#iterations", n, line)
    if layout == "lat_dur":
        if len(toks) != 4:
            raise BenchParseError(f"latency row has {len(toks)} fields, expected 4", n, line)
        return PerftestLatRow(size, iters, f(toks[2], "t_avg", n, line), tps_average=f(toks[3], "tps", n, line))
    if len(toks) != 9:
        raise BenchParseError(f"latency row has {len(toks)} fields, expected 9", n, line)
    v = [f(t, "latency", n, line) for t in toks[2:]]
    return PerftestLatRow(size, iters, t_avg_us=v[3], t_min_us=v[0], t_max_us=v[1], t_typical_us=v[2],
                          t_stdev_us=v[4], p99_us=v[5], p99_9_us=v[6])


def _parse_json(text: str, numbered: list[tuple[int, str]], json_bw_unit: str | None) -> PerftestResult:
    doc = _text.load_json(text, numbered)
    if not isinstance(doc, dict) or not isinstance(doc.get("test_info"), dict) or not isinstance(doc.get("results"), dict):
        raise BenchParseError("JSON without \"test_info\" and \"results\" objects (not perftest --out_json)",
                              *_text.first_line(numbered))
    if json_bw_unit not in (None, "MiB/sec", "MB/sec", "Gb/sec"):
        raise BenchParseError(f"json_bw_unit {clip(repr(json_bw_unit), 30)} is not MiB/sec or Gb/sec",
                              *_text.first_line(numbered))
    ti, res = doc["test_info"], doc["results"]
    where = _text.json_line(numbered, '"results"')

    def num(key: str, required: bool = True) -> float | None:
        v = res.get(key)
        if v is None and not required:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BenchParseError(f"results.{key} is missing or not a number", *_text.json_line(numbered, f'"{key}"'))
        return _text.to_float(repr(float(v)), key, *where)

    def count(key: str) -> int:
        v = res.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
            raise BenchParseError(f"results.{key} is missing or not an integer", *_text.json_line(numbered, f'"{key}"'))
        return v

    test = ti.get("test") if isinstance(ti.get("test"), str) else None
    kind = "lat" if test and "Latency" in test else "bw"

    def s(key: str) -> str | None:
        v = ti.get(key)
        return v[:200] if isinstance(v, str) else None

    def i(key: str) -> int | None:
        v = ti.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    common = dict(format="json", test=test, kind=kind, device=s("Device"), link_type=s("Link_type"),
                  transport_type=s("Transport_type"), connection_type=s("Connection_type"), mtu_bytes=i("Mtu"),
                  gid_index=i("GID_index"), num_qps=i("Number_of_qps"), tx_depth=i("TX_depth"),
                  max_inline_bytes=i("Max_inline_data"),
                  rdma_cm=None if s("rdma_cm_QPs") is None else s("rdma_cm_QPs").upper() == "ON",
                  use_cuda=i("cuda_device") is not None, cuda_device=i("cuda_device"))
    if kind == "lat":
        if "t_min" not in res:
            raise BenchParseError("latency results without t_min (the -o/--output summary form is not read)", *where)
        row = PerftestLatRow(count("MsgSize"), count("n_iterations"), t_avg_us=num("t_avg"), t_min_us=num("t_min"),
                             t_max_us=num("t_max"), t_typical_us=num("t_typical"), t_stdev_us=num("t_stdev"),
                             p99_us=num("percentile_99"), p99_9_us=num("percentile_99.9"))
        return PerftestResult(lat_rows=(row,), **common)
    if "BW_peak" not in res:
        raise BenchParseError("bandwidth results without BW_peak (the -o/--output summary form is not read)", *where)
    unit = json_bw_unit or "MiB/sec"
    scale = _BYTES_PER_S[unit] / 1e9
    row = PerftestBwRow(count("MsgSize"), count("n_iterations"), num("BW_peak") * scale, num("BW_average") * scale,
                        num("MsgRate"))
    return PerftestResult(bw_rows=(row,), bw_unit=unit, bw_unit_assumed=json_bw_unit is None, **common)
