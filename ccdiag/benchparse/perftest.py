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
from typing import Any

from ccdiag.benchparse import _text
from ccdiag.benchparse.errors import MAX_ROWS, BenchParseError, clip

_TITLE = re.compile(r"^((?:RDMA_Write|RDMA_Read|Send|Atomic|Raw Ethernet|RDMA_Write_Imm|Write|Read)"
                    r"[A-Za-z_ ]{0,40}?) (BW|Latency|Bidirectional BW|Post List BW)[A-Za-z_ ]{0,30}? Test\s*$")
_ADDR = re.compile(r"^(local|remote) address: LID (\S{1,12})")
_GID = re.compile(r"^GID: (\S{1,80})\s*$")
_CUDA_NAME = re.compile(r"device name = \[(.{1,200})\]")
_CUDA_PICK = re.compile(r"^Picking (?:device No\.|GPU number) ([0-9]{1,5})")
_CUDA_BUS = re.compile(r"^Finding PCIe BUS (\S{1,40})")
_CUDA_LIST = re.compile(r"^CUDA device ([0-9]{1,5}): PCIe address is ([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_CUDA_OLD = re.compile(r"^There (?:are [0-9]{1,5} devices|is 1 device) supporting CUDA")
_DMABUF = "using DMA-BUF for GPU buffer"
_USE_CUDA = re.compile(r"--use_cuda(?:=| )([0-9]{1,5})")
_CMD = re.compile(r"\b(ib_(?:write|read|send|atomic)_(?:bw|lat))\b")
_CPU_FREQ = "Conflicting CPU frequency values detected"
_NO_PEAK = "BW peak won't be measured in this run"
_BIDIR_FLAG = re.compile(r"(?:^|\s)(?:-b|--bidirectional)(?:\s|$)")
#: bytes/s per printed unit (see the module docstring for the source)
_BYTES_PER_S = {"MB/sec": float(1 << 20), "MiB/sec": float(1 << 20), "Gb/sec": 125_000_000.0}
#: the columns perftest's RESULT_FMT* headers print (src/perftest_parameters.h), longest first so that
#: "MsgRate Port1[Mpps]" is not read as "MsgRate[...]"
_COLUMN = re.compile(r"#bytes|#sl|#iterations|#flows|BW peak\[(?:MB|MiB|Gb)/sec\]|BW average\[(?:MB|MiB|Gb)/sec\]"
                     r"|BW min\[(?:MB|MiB|Gb)/sec\]|BW Port[12]\[(?:MB|MiB|Gb)/sec\]|MsgRate Port[12]\[Mpps\]"
                     r"|MsgRate\[Mpps\]|CPU_Util\[%\]|t_min\[usec\]|t_max\[usec\]|t_typical\[usec\]|t_avg\[usec\]"
                     r"|t_stdev\[usec\]|99% percentile\[usec\]|99\.9% percentile\[usec\]|tps average"
                     r"|fs_\w{1,20}\[usec\]|fps\[flow per sec\]")
_UNIT = re.compile(r"\[((?:MB|MiB|Gb)/sec)\]")


@dataclass(frozen=True)
class PerftestBwRow:
    size_bytes: int
    iterations: int
    bw_peak_gbyte_s: float | None  # None where perftest did not measure it (-D, -N, --run_infinitely)
    bw_average_gbyte_s: float
    msg_rate_mpps: float
    bw_min_gbyte_s: float | None = None  # --report-min-bw (the sixth column some builds print)
    cpu_util_pct: float | None = None  # --cpu_util
    port_bw_gbyte_s: tuple[float, ...] = ()  # --report-per-port: BW Port1, BW Port2


@dataclass(frozen=True)
class PerftestLatRow:
    size_bytes: int
    iterations: int
    t_avg_us: float | None
    t_min_us: float | None = None
    t_max_us: float | None = None
    t_typical_us: float | None = None
    t_stdev_us: float | None = None
    p99_us: float | None = None
    p99_9_us: float | None = None
    tps_average: float | None = None  # transactions per second (-D duration mode)
    cpu_util_pct: float | None = None


@dataclass(frozen=True)
class PerftestResult:
    """``kind`` is ``"bw"`` or ``"lat"``; ``role`` ``"client"`` / ``"server"`` (None from JSON);
    ``bw_unit`` is the unit the tool printed (the rows are converted to GB/s whatever it was);
    ``format_ids`` names the formats of ``formats.json`` the output was read as, the table's first."""

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
    cuda_bus_id: str | None = None  # --use_cuda_bus_id, or the listed address of the picked device
    no_peak: bool = False  # perftest said it would not measure the peak (its column prints 0.00)
    bw_unit: str | None = None
    bw_unit_assumed: bool = False
    bw_rows: tuple[PerftestBwRow, ...] = ()
    lat_rows: tuple[PerftestLatRow, ...] = ()
    header: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    cpu_freq_warnings: int = 0
    format_ids: tuple[str, ...] = ()


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


class _Table:
    """The columns of one result table, read from its header line (RESULT_FMT* and RESULT_EXT*)."""

    def __init__(self, s: str, n: int, line: str):
        self.cols = _COLUMN.findall(s)
        self.n, self.line = n, line
        if "#flows" in self.cols:
            raise BenchParseError("flow-steering rate table (raw_ethernet_fs_rate): no bandwidth or latency to judge",
                                  n, line)
        if self.cols[:1] != ["#bytes"] or "#iterations" not in self.cols:
            raise BenchParseError("result table header of an unknown layout", n, line)
        rest = s
        for c in self.cols:
            rest = rest.replace(c, " ", 1)
        if rest.strip():
            raise BenchParseError(f"result table header with an unknown column {clip(rest.strip(), 30)!r}", n, line)
        units = set(_UNIT.findall(s))
        if len(units) > 1:
            raise BenchParseError("result table header mixes bandwidth units", n, line)
        self.unit = units.pop() if units else None
        self.kind = "bw" if any(c.startswith("BW average") for c in self.cols) else "lat"
        if self.kind == "lat" and "t_avg[usec]" not in self.cols and "t_min[usec]" not in self.cols:
            raise BenchParseError("latency table header without t_min or t_avg", n, line)

    def format_ids(self) -> list[str]:
        if self.kind == "bw":
            ids = [{"MB/sec": "perftest.bw.mb", "MiB/sec": "perftest.bw.mib", "Gb/sec": "perftest.bw.gbit"}
                   [self.unit or "MB/sec"]]
            ids += [fid for col, fid in (("BW Port1", "perftest.bw.per_port"), ("#sl", "perftest.bw.qos"),
                                         ("CPU_Util", "perftest.bw.cpu_util")) if any(c.startswith(col) for c in self.cols)]
            if any(c.startswith("BW min") for c in self.cols):
                ids.insert(0, "perftest.bw.min")  # the narrowest version range: said first
            return ids
        if "tps average" in self.cols:
            ids = ["perftest.lat.duration"]
        elif "t_avg[usec]" in self.cols and "t_min[usec]" not in self.cols:
            ids = ["perftest.lat.duration.v1"]
        elif "t_avg[usec]" not in self.cols:
            ids = ["perftest.lat.v1"]
        else:
            ids = ["perftest.lat"]
        return ids + (["perftest.lat.cpu_util"] if "CPU_Util[%]" in self.cols else [])

    def row(self, toks: list[str], n: int, line: str, no_peak: bool) -> PerftestBwRow | PerftestLatRow:
        if len(toks) != len(self.cols):
            cut = " (output cut mid-row?)" if len(toks) < len(self.cols) else ""
            raise BenchParseError(f"{'bandwidth' if self.kind == 'bw' else 'latency'} row has {len(toks)} fields, "
                                  f"expected {len(self.cols)} as its header (line {self.n}) says{cut}", n, line)
        v: dict[str, float] = {}
        size = iters = 0
        for c, t in zip(self.cols, toks):
            if c == "#bytes":
                size = _text.to_int(t, "#bytes", n, line)
            elif c == "#iterations":
                iters = _text.to_int(t, "#iterations", n, line)
            elif c == "#sl":
                _text.to_int(t, "#sl", n, line)
            else:
                v[c.split("[")[0]] = _text.to_float(t, c.split("[")[0], n, line)
        if self.kind == "lat":
            return PerftestLatRow(size, iters, t_avg_us=v.get("t_avg"), t_min_us=v.get("t_min"),
                                  t_max_us=v.get("t_max"), t_typical_us=v.get("t_typical"),
                                  t_stdev_us=v.get("t_stdev"), p99_us=v.get("99% percentile"),
                                  p99_9_us=v.get("99.9% percentile"), tps_average=v.get("tps average"),
                                  cpu_util_pct=v.get("CPU_Util"))
        scale = _BYTES_PER_S[self.unit or "MB/sec"] / 1e9
        peak = v["BW peak"] * scale
        ports = tuple(v[p] * scale for p in ("BW Port1", "BW Port2") if p in v)
        return PerftestBwRow(size, iters, None if no_peak and peak == 0 else peak, v["BW average"] * scale,
                             v["MsgRate"], bw_min_gbyte_s=v["BW min"] * scale if "BW min" in v else None,
                             cpu_util_pct=v.get("CPU_Util"), port_bw_gbyte_s=ports)


class _TextReader:
    """The state of one pass over a perftest text output: each line goes to the first handler that
    takes it (:data:`_HANDLERS`), so that each kind of line is read in one small place."""

    def __init__(self) -> None:
        self.title: str | None = None
        self.kind: str | None = None
        self.header: dict[str, str] = {}
        self.info: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.cpu_freq = 0
        self.role = "client"
        self.table: _Table | None = None
        self.bw_rows: list[PerftestBwRow] = []
        self.lat_rows: list[PerftestLatRow] = []
        self.waiting_line: tuple[int, str] | None = None
        self.last_addr = "local"  # which address block a 'GID:' line belongs to
        self.no_peak = False
        self.cuda_ids: list[str] = []
        self.listed: dict[int, str] = {}

    def row(self, s: str, n: int, line: str) -> bool:
        if self.table is None:
            return False
        toks = s.split()
        if not _text.is_int_token(toks[0]):
            return False
        if len(self.bw_rows) + len(self.lat_rows) >= MAX_ROWS:
            raise BenchParseError(f"more than MAX_ROWS={MAX_ROWS} result rows", n, line, limit="MAX_ROWS")
        r = self.table.row(toks, n, line, self.no_peak)
        if isinstance(r, PerftestBwRow):
            self.bw_rows.append(r)
        else:
            self.lat_rows.append(r)
        return True

    def table_header(self, s: str, n: int, line: str) -> bool:
        if not s.startswith("#bytes") and not s.startswith("#flows"):
            return False
        table = _Table(s, n, line)
        if self.table is not None and (self.bw_rows or self.lat_rows) and table.cols != self.table.cols:
            raise BenchParseError("a second result table with other columns (two runs concatenated?): import them "
                                  "as two files", n, line)
        self.table, self.kind = table, table.kind
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
        if _NO_PEAK in s:
            self.no_peak = True
        self.warnings.append(clip(s, 200))
        return True

    def cuda(self, s: str, n: int, line: str) -> bool:
        m = _CUDA_PICK.match(s)
        if m:
            self.info["use_cuda"] = True
            self.info["cuda_device"] = int(m.group(1))
            self._cuda_id("perftest.cuda.bus_id" if s.startswith("Picking GPU number") else "perftest.cuda")
            return True
        m = _CUDA_LIST.match(s)
        if m:
            self.listed[int(m.group(1))] = m.group(2)
            return True
        m = _CUDA_BUS.match(s)
        if m:
            self.info["use_cuda"] = True
            self.info["cuda_bus_id"] = m.group(1)
            self._cuda_id("perftest.cuda.bus_id")
            return True
        m = _CUDA_NAME.search(s)
        if m:
            self.info["use_cuda"] = True
            self.info["cuda_device_name"] = m.group(1)
            return True
        if _CUDA_OLD.match(s):
            self.info["use_cuda"] = True
            self._cuda_id("perftest.cuda.v1")
            return True
        if s.startswith(_DMABUF):
            self._cuda_id("perftest.cuda.dmabuf")
            return True
        return False

    def _cuda_id(self, fid: str) -> None:
        if fid not in self.cuda_ids:
            self.cuda_ids.append(fid)

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

    def format_ids(self) -> tuple[str, ...]:
        ids = self.table.format_ids() if self.table is not None else []
        if self.kind == "bw" and (self.info.get("bidirectional") or (self.title and "Bidirectional" in self.title)):
            ids.append("perftest.bw.bidir")
        if self.kind == "bw" and self.no_peak:
            sizes = [r.size_bytes for r in self.bw_rows]
            ids.append("perftest.bw.run_infinitely" if len(sizes) > len(set(sizes)) else "perftest.bw.duration")
        if self.role == "server" and self.kind == "bw":
            ids.append("perftest.bw.server")
        return tuple(ids + self.cuda_ids)

    def result(self, numbered: list[tuple[int, str]]) -> PerftestResult:
        if self.title is None and self.table is None and self.role != "server":
            n, line = _text.first_line(numbered)
            raise BenchParseError("not perftest output (no '... BW Test' / '... Latency Test' banner)", n, line)
        if not self.bw_rows and not self.lat_rows:
            if self.role == "server" or self.table is None:
                n, line = self.waiting_line or (numbered[-1] if numbered else (1, ""))
                raise BenchParseError("server-side perftest output has no result rows (latency tests report only "
                                      "on the client); import the client's output", n, line)
            raise BenchParseError("result table header without rows (output cut?)", self.table.n, self.table.line)
        info = dict(self.info)
        if self.title and "Bidirectional" in self.title:
            info["bidirectional"] = True
        dev = info.get("cuda_device")
        if "cuda_bus_id" not in info and isinstance(dev, int) and dev in self.listed:
            info["cuda_bus_id"] = self.listed[dev]
        return PerftestResult(
            format="text", test=self.title, kind=self.kind or "bw", role=self.role, header=self.header,
            warnings=tuple(self.warnings), cpu_freq_warnings=self.cpu_freq,
            bw_unit=self.table.unit if self.table is not None else None, no_peak=self.no_peak,
            bw_rows=tuple(self.bw_rows), lat_rows=tuple(self.lat_rows), format_ids=self.format_ids(),
            **_header_fields(self.header), **info)


#: line handlers in the order they are tried
_HANDLERS = (_TextReader.row, _TextReader.table_header, _TextReader.waiting, _TextReader.banner,
             _TextReader.address, _TextReader.warning, _TextReader.cuda, _TextReader.command, _TextReader.pairs)


def parse_perftest(text: str, json_bw_unit: str | None = None) -> PerftestResult:
    """perftest client output (text or ``--out_json``); refuses (:class:`BenchParseError`) a server-side
    output without results, and anything else that is not perftest's."""
    numbered = _text.lines(text)
    if _text.first_line(numbered)[1].strip() == "{":
        second = next((l for _, l in numbered[1:] if l.strip()), "")
        if second.strip().startswith("test_info:"):
            return _parse_bare_json(numbered, json_bw_unit)
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


def _header_fields(header: dict[str, str]) -> dict[str, Any]:
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


def _check_unit(json_bw_unit: str | None, numbered: list[tuple[int, str]]) -> None:
    if json_bw_unit not in (None, "MiB/sec", "MB/sec", "Gb/sec"):
        raise BenchParseError(f"json_bw_unit {clip(repr(json_bw_unit), 30)} is not MiB/sec or Gb/sec",
                              *_text.first_line(numbered))


def _parse_json(text: str, numbered: list[tuple[int, str]], json_bw_unit: str | None) -> PerftestResult:
    doc = _text.load_json(text, numbered)
    if not isinstance(doc, dict) or not isinstance(doc.get("test_info"), dict) or not isinstance(doc.get("results"), dict):
        raise BenchParseError("JSON without \"test_info\" and \"results\" objects (not perftest --out_json)",
                              *_text.first_line(numbered))
    _check_unit(json_bw_unit, numbered)
    return _json_result(doc["test_info"], doc["results"], numbered, json_bw_unit, "json", '"')


def _json_result(ti: dict[str, Any], res: dict[str, Any], numbered: list[tuple[int, str]], json_bw_unit: str | None,
                 fmt: str, quote: str) -> PerftestResult:
    """The result from --out_json's two objects (``quote``: how the keys were written, to name the line)."""
    where = _text.json_line(numbered, f"{quote}results{quote}")

    def line_of(key: str) -> tuple[int, str]:
        return _text.json_line(numbered, f"{quote}{key}{quote}")

    def num(key: str) -> float:
        v = res.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BenchParseError(f"results.{key} is missing or not a number", *line_of(key))
        return _text.to_float(repr(float(v)), key, *where)

    def opt(key: str) -> float | None:
        return num(key) if key in res else None

    def count(key: str) -> int:
        v = res.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
            raise BenchParseError(f"results.{key} is missing or not an integer", *line_of(key))
        return v

    test_v = ti.get("test")
    test = test_v[:200] if isinstance(test_v, str) else None
    kind = "lat" if test and "Latency" in test else "bw"

    def s(key: str) -> str | None:
        v = ti.get(key)
        return v[:200] if isinstance(v, str) else None

    def i(key: str) -> int | None:
        v = ti.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    cm = s("rdma_cm_QPs")
    json_id = "perftest.json.v1" if fmt == "bare-json" else "perftest.json"
    common: dict[str, Any] = dict(
        format="json", test=test, kind=kind, device=s("Device"), link_type=s("Link_type"),
        transport_type=s("Transport_type"), connection_type=s("Connection_type"), mtu_bytes=i("Mtu"),
        gid_index=i("GID_index"), num_qps=i("Number_of_qps"), tx_depth=i("TX_depth"),
        max_inline_bytes=i("Max_inline_data"), rdma_cm=None if cm is None else cm.upper() == "ON",
        use_cuda=i("cuda_device") is not None, cuda_device=i("cuda_device"),
        bidirectional=bool(test and "Bidirectional" in test))
    if kind == "lat":
        if "t_min" in res:
            lat_row = PerftestLatRow(count("MsgSize"), count("n_iterations"), t_avg_us=num("t_avg"),
                                     t_min_us=num("t_min"), t_max_us=num("t_max"), t_typical_us=num("t_typical"),
                                     t_stdev_us=num("t_stdev"), p99_us=num("percentile_99"),
                                     p99_9_us=num("percentile_99.9"))
            ids: tuple[str, ...] = (json_id, "perftest.json.lat")
        elif "tps_average" in res:
            lat_row = PerftestLatRow(count("MsgSize"), count("n_iterations"), t_avg_us=num("t_avg"),
                                     tps_average=num("tps_average"))
            ids = (json_id, "perftest.json.lat_dur")
        else:
            raise BenchParseError("latency results without t_min or tps_average (the -o/--output summary form is "
                                  "not read)", *where)
        return PerftestResult(lat_rows=(lat_row,), format_ids=ids, **common)
    if "BW_peak" not in res:
        raise BenchParseError("bandwidth results without BW_peak (the -o/--output summary form is not read)", *where)
    unit = json_bw_unit or "MiB/sec"
    scale = _BYTES_PER_S[unit] / 1e9
    bw_min = opt("BW_min")
    row = PerftestBwRow(count("MsgSize"), count("n_iterations"), num("BW_peak") * scale, num("BW_average") * scale,
                        num("MsgRate"), bw_min_gbyte_s=None if bw_min is None else bw_min * scale)
    ids = (json_id,) + (("perftest.json.bw_min",) if bw_min is not None else ())
    return PerftestResult(bw_rows=(row,), bw_unit=unit, bw_unit_assumed=json_bw_unit is None, format_ids=ids, **common)


_BARE_KV = re.compile(r'^"?([A-Za-z_][A-Za-z0-9_ .]{0,40}?)"?\s*:\s*(.{0,200}?),?\s*$')


def _bare_value(v: str) -> object:
    v = v.strip()
    if v.startswith('"') and v.endswith('"') and len(v) >= 2:
        return v[1:-1]
    if _text.is_int_token(v):
        return int(v)
    try:
        return _text.to_float(v, "value", 0, "")
    except BenchParseError:
        return v


def _parse_bare_json(numbered: list[tuple[int, str]], json_bw_unit: str | None) -> PerftestResult:
    """--out_json of perftest v4.5-0.11 to 23.10: the same two objects, but keys written without quotes
    (``MsgSize: 65536,``), so not JSON; read line by line."""
    _check_unit(json_bw_unit, numbered)
    sections: dict[str, dict[str, Any]] = {"test_info": {}, "results": {}}
    current: dict[str, Any] | None = None
    for n, line in numbered:
        s = line.strip()
        if s in ("{", "}", "},", ""):
            if s.startswith("}"):
                current = None
            continue
        m = _BARE_KV.match(s)
        if not m:
            raise BenchParseError("not a 'key: value' line of perftest's --out_json", n, line)
        key, value = m.group(1).strip(), m.group(2).strip()
        if value == "{":
            if key not in sections:
                raise BenchParseError(f"unknown --out_json section {clip(key, 30)!r}", n, line)
            current = sections[key]
            continue
        if current is None:
            raise BenchParseError("a 'key: value' line outside test_info and results", n, line)
        if len(current) < 64:
            current[key] = _bare_value(value)
    if not sections["results"]:
        raise BenchParseError("--out_json without a results section", *_text.first_line(numbered))
    return _json_result(sections["test_info"], sections["results"], numbered, json_bw_unit, "bare-json", "")
