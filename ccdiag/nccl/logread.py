"""What an ``NCCL_DEBUG=INFO`` log says: NCCL's choices and every failure, read as users paste it.

Pasted logs are messy: ranks interleaved, application timestamps, mpirun ``[1,3]<stdout>:``, pdsh
``host:``, srun ``0:``, Ray ``(RayWorkerWrapper pid=.., ip=..)``, kubectl, e-mail ``> `` and CloudWatch
prefixes in front of NCCL's own ``host:pid:tid [dev]`` prefix (or none: ``NCCL_DEBUG_FILE`` per rank),
Ray's ``[repeated 14x across cluster]`` suffixes, lines cut mid-token, other programs' output in
between, NCCL 2.2-era lines without the ``NCCL`` word (``[0] INFO ...``, ``include/socket.h:360 WARN
...``). The reader looks for NCCL's marker anywhere in a line and takes what it can from each line.

What it keeps: NCCL's choices (network, devices, interfaces, transports, GPUDirect RDMA, NVLS,
communicators, environment, versions per rank) and the **events** that decide a diagnosis: every WARN
(and the INFO lines NCCL prints for a failure or a fallback, such as ``Failed to open libibverbs``),
the error returns climbing after it on the same thread, the framework lines that wrap an NCCL failure
(PyTorch's ``NCCL error in:``, ``Last error:``, the ProcessGroupNCCL watchdog's timeouts and the
work each rank last completed), CUDA out-of-memory reports; each with its line, host, rank, time
stamp where the line has one, and its family in the catalogue (:mod:`ccdiag.nccl.catalogue`).

It streams in blocks and the work per line is done in C: the INFO bodies (the text after ``NCCL INFO``,
free of the host/pid prefix, so varying hosts and pids still repeat) are counted with a ``Counter``
and each distinct body is read once; only the lines whose host or order matters (bootstrap,
communicator and environment lines, WARNs, error returns, framework lines) are visited one by one.
Every fact kept is bounded, so memory stays flat on a log of any size.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ccdiag.core.errors import UserInputError

MAX_BYTES = 64 << 20  # for text handed over whole; files are streamed without a size limit
MAX_LINE = 64 << 10
MAX_KEPT = 64  # distinct warnings, communicators, interfaces kept
MAX_EVENTS = 256  # distinct events (family, text) kept
MAX_HOSTS = 4096
CHUNK = 4 << 20
#: the same WARN, error return or bootstrap/communicator/environment line is read in full this many times (from
#: as many processes: every set it feeds is bounded well below) and only counted after that
SATURATE = 64

_PREFIX = re.compile(r"(?<![\w.\-<>])([\w.\-<>]{1,253}):(\d{1,10}):(\d{1,10}) \[(\d{1,5})\] ")
_PREFIX_WINDOW = 320  # a host name is at most 253 characters: a long run before the mark is not searched
_WARN_FILE = re.compile(r"(?:^|\s)([\w/.\-<>~:]+?):(\d+)(?: \(([^)]{0,120})\))? $")
_DEV_ONLY = re.compile(r"(?:^|\s)\[(\d{1,5})\] ")
_TIME = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:[.,]\d+)?)|\b[EWIF]\d{4} (\d\d:\d\d:\d\d\.\d+)")
_VERSION = re.compile(r"\b(R?CCL|NCCL) version (\d+\.\d+\.\d+)\S*")
_REPEAT = re.compile(r"(?:\[repeated \d+x across cluster\]|[\[(]?(?:message )?repeated \d+ times?[\])]?)\s*$",
                     re.IGNORECASE)
_VIA = re.compile(r" via ((?:P2P|SHM|NVLS|CollNet|COLLNET)\b[\w/().\-]*|NET/[^/]+/\S*|NET/[\w ]+)")
_DEV = re.compile(r"\[(\d{1,9})\]\s?([\w.\-]+)(?::[\w.\-]+)??(?::(\d{1,9}))?(?::\d*)?(?::\d+)?/(IB|RoCE)\b")
_SOCK_DEV = re.compile(r"\[(\d{1,9})\]([\w.\-]+):([^<\s]*)<")
#: an interface and its address ("eth0:10.0.0.1<0>"); names and addresses bounded, so a long run is read once
_IFADDR = re.compile(r"(?<![\w.\-])([\w.\-]{1,64}):([^<\s]{0,128})(?:<\d{1,9}>|$)")
_GDR = re.compile(r"NET/IB ?: GPU Direct RDMA (Enabled|Disabled) for HCA (\d{1,9}) '([\w.\-]+)'(?: \(([^)]*)\))?")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (.*?)\.?\s*$")
_RANKS = re.compile(r"\bnRanks (\d{1,9}) nNodes (\d{1,9}) localRanks (\d{1,9})")
_COMM = re.compile(r"\bcomm (0x[0-9a-f]+) rank (\d{1,9}) nranks (\d{1,9})(?:.*?commId (0x[0-9a-f]+))?")
_FRAME = re.compile(r"^([\w/.\-]+\.(?:cc|cu|c|h|cpp)):\d+ -> (\d{1,9})")
_NVLS = re.compile(r"NVLS multicast support is (not )?available on dev (\d{1,9})")
_NET = re.compile(r"Using network (.+?)\s*$")
_OFI = re.compile(r"NET/OFI Selected [Pp]rovider is (\w+)(?: \(found (\d{1,9}) nics\))?")
_PLUGIN_PATH = re.compile(r"Plugin Path : (\S+)")
_LOADED_PLUGIN = re.compile(r"Loaded net plugin (.{1,120}?)(?: \(v\d+\))?\s*$")
_TORCH_RANK = re.compile(r"\[[Rr]ank ?(\d{1,7})\]|\[rank(\d{1,7})\]:|\[PG [^\]]*? Rank (\d{1,7})\]")
_SEQ = re.compile(r"SeqNum=(\d{1,12}), OpType=(\w+)")
_LAST_DONE = re.compile(r"last completed NCCL work: (\d{1,12})")
_RAN_FOR = re.compile(r"Timeout\(ms\)=(\d{1,12})\) ran for (\d{1,14}) milliseconds")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")

DOCKER_BRIDGE = ipaddress.IPv4Network("172.17.0.0/16")


class LogError(UserInputError, ValueError):
    """Not an NCCL log; the message names what was seen instead."""


@dataclass
class Event:
    """One distinct failure the log reports (first occurrence kept, later ones counted)."""

    kind: str  # "warn" | "info" | "returns" (error returns without their WARN) | "framework" | "oom" | "timeout"
    text: str
    line: int
    family: str
    host: str | None = None
    rank: str | None = None  # "host:pid" (a process), "[3]" (a CUDA device only) or "rank 4" (a framework rank)
    file: str | None = None  # the source file NCCL printed before WARN
    time: str | None = None
    source: str | None = None  # the log file it came from, when several are read as one job
    count: int = 1
    frames: int = 0
    last_frame: str | None = None
    ranks: set = field(default_factory=set)
    where: str | None = None  # the extracted format's place and releases

    @property
    def root(self) -> str:  # the name the chains had before events
        return self.text

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text, "line": self.line, "family": self.family, "host": self.host,
                "rank": self.rank, "file": self.file, "time": self.time, "source": self.source, "count": self.count,
                "frames": self.frames, "last_frame": self.last_frame, "ranks": sorted(self.ranks)[:16],
                "where": self.where}


@dataclass
class NcclLog:
    version: str | None = None
    flavour: str = "NCCL"  # "RCCL" for AMD's fork, which prints the same format
    versions: dict[str, set] = field(default_factory=dict)  # version -> hosts/files that print it
    network: str | None = None  # "IB" | "Socket" | a plugin's name ("Libfabric", "RDMA_Plugin")
    networks: set = field(default_factory=set)
    net_devices: dict[str, str] = field(default_factory=dict)  # "mlx5_0:1" -> "IB" | "RoCE" | "Socket"
    socket_addresses: dict[str, str] = field(default_factory=dict)  # socket device -> address ("" unknown)
    bootstrap: dict[str, set] = field(default_factory=dict)  # interface -> addresses
    bootstrap_by_host: dict[str, str] = field(default_factory=dict)  # host -> its first bootstrap interface
    oob: dict[str, set] = field(default_factory=dict)  # NET/IB's out-of-band interface -> addresses
    gdr: dict[str, bool] = field(default_factory=dict)  # HCA -> GPUDirect RDMA enabled
    gdr_why: dict[str, str] = field(default_factory=dict)  # HCA -> NCCL's reason ("no module")
    transports: dict[str, int] = field(default_factory=dict)  # "P2P/IPC" -> channel lines
    channels: int | None = None
    ranks: int | None = None
    nodes: int | None = None
    comms: dict[str, dict] = field(default_factory=dict)  # commId (or "nranks N") -> {nranks, ranks, hosts}
    env: dict[str, str] = field(default_factory=dict)
    env_by_host: dict[str, dict] = field(default_factory=dict)  # variable -> {value: hosts}
    ib_hca: str | None = None  # "NCCL_IB_HCA set to ..." as NCCL read it
    nvls: dict[int, bool] = field(default_factory=dict)  # CUDA device -> multicast available
    plugins: dict[str, str] = field(default_factory=dict)  # what -> detail
    net_plugin_by_host: dict[str, str] = field(default_factory=dict)  # host -> "internal" or the plugin it loaded
    warnings: list[tuple[int, str]] = field(default_factory=list)  # (line, text), distinct, at most MAX_KEPT
    warning_count: int = 0
    events: list[Event] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    processes: set[str] = field(default_factory=set)  # host:pid seen (bounded)
    torch_seq: dict[str, tuple[int, str]] = field(default_factory=dict)  # rank -> (SeqNum timed out, OpType)
    torch_done: dict[str, int] = field(default_factory=dict)  # rank -> last completed NCCL work
    sources: list[str] = field(default_factory=list)  # the files read, in order
    nccl_lines: int = 0
    lines: int = 0
    legacy: bool = False  # NCCL 2.2-era lines ("[0] INFO", "... WARN") without the NCCL word
    no_ib_device: bool = False
    ibverbs_missing: bool = False

    @property
    def failures(self) -> list[Event]:
        """WARN events and error returns without their WARN, in the order first seen."""
        return [e for e in self.events if e.kind in ("warn", "returns")]

    def to_json(self) -> dict:
        return {"version": self.version, "flavour": self.flavour,
                "versions": {k: sorted(v)[:16] for k, v in self.versions.items()}, "network": self.network,
                "net_devices": dict(self.net_devices), "socket_addresses": dict(self.socket_addresses),
                "bootstrap": {k: sorted(v) for k, v in self.bootstrap.items()},
                "oob": {k: sorted(v) for k, v in self.oob.items()},
                "gdr": dict(self.gdr), "gdr_why": dict(self.gdr_why), "transports": dict(self.transports),
                "channels": self.channels, "ranks": self.ranks, "nodes": self.nodes,
                "communicators": {k: {"nranks": v["nranks"], "ranks_seen": len(v["ranks"]), "hosts": sorted(v["hosts"])}
                                  for k, v in self.comms.items()},
                "env": dict(self.env), "ib_hca": self.ib_hca, "nvls": {str(k): v for k, v in self.nvls.items()},
                "plugins": dict(self.plugins),
                "warnings": [{"line": n, "text": t} for n, t in self.warnings], "warning_count": self.warning_count,
                "failures": [{"root": f.text, "line": f.line, "count": f.count, "frames": f.frames,
                              "last_frame": f.last_frame} for f in self.failures],
                "events": [e.to_json() for e in self.events],
                "hosts": sorted(self.hosts)[:256], "nccl_lines": self.nccl_lines, "ib_no_device": self.no_ib_device,
                "ibverbs_missing": self.ibverbs_missing, "legacy_format": self.legacy, "files": list(self.sources)}


def transport_label(via: str) -> str | None:
    """``NET/IB/0(8)/GDRDMA`` -> ``NET/IB/GDRDMA``; ``NET/AWS Libfabric/0`` -> ``NET/AWS Libfabric``;
    ``P2P/IPC/read`` and ``SHM/direct/direct`` kept as they are. None for a cut or unknown label."""
    if via.startswith("NET/"):
        parts = via.split("/")
        name = parts[1].strip()
        if not name:
            return None
        return f"NET/{name}" + ("/GDRDMA" if "GDRDMA" in via else "")
    if not via.startswith(("P2P", "SHM", "NVLS", "CollNet", "COLLNET")):
        return None
    return via.rstrip("/")


_VARYING = re.compile(r"0x[0-9a-fA-F]+|\bnccl-[\w-]+|\b(?=[a-f]*\d)[0-9a-f]{6,64}\b|\d+")


def _normalise(text: str) -> str:
    """A message without what differs between occurrences of it (ports, pointers, counts, addresses, hash-like
    identifiers, the random names of /dev/shm/nccl-* segments)."""
    return _VARYING.sub("#", text)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")


def _clean(body: str) -> str:
    """A message's text without CloudWatch's doubled copy, repeat suffixes and trailing blanks."""
    if " | " in body and "NCCL " in body:  # CloudWatch pastes the line twice, joined by " | "
        body = body[:body.index(" | ")]
    if "repeated" in body:
        body = _unrepeat(body)
    return body.strip().rstrip("*`").rstrip()  # markdown emphasis a paste wrapped around the line


def _unrepeat(text: str) -> str:
    """``text`` without a trailing repeat suffix; only the last 200 characters are searched (the pattern's
    ``\\s*$`` would go quadratic over a long run of blanks)."""
    head, tail = (text[:-200], text[-200:]) if len(text) > 200 else ("", text)
    m = _REPEAT.search(tail)
    return head + tail[:m.start()].rstrip() if m else text


# -- INFO handlers (keyed by the first word of the body; ``host`` only for the hosted ones) -----------------
def _add(d: dict, key: str, value: str) -> None:
    if key not in d and len(d) >= MAX_KEPT:
        return
    s = d.setdefault(key, set())
    if len(s) < MAX_KEPT:
        s.add(value)


def _h_using(r: _Reader, body: str, host: str | None) -> None:
    log = r.log
    if body.startswith("Using internal Network "):  # NCCL 2.2-era
        log.network = body.split()[-1]
        log.networks.add(log.network)
        return
    m = _NET.search(body)
    if m and body.startswith("Using network"):
        log.network = m.group(1)
        if len(log.networks) < MAX_KEPT:
            log.networks.add(m.group(1))
        return
    if body.startswith(("Bootstrap : Using", "Bootstrap: Using")):
        found = _IFADDR.findall(body.split("Using", 1)[1].replace("[0]", " ").strip())
        for name, addr in found:
            _add(log.bootstrap, name, addr)
        if found and host and (host in log.bootstrap_by_host or len(log.bootstrap_by_host) < MAX_HOSTS):
            log.bootstrap_by_host.setdefault(host, found[0][0])
        return
    if body.startswith(("NET/IB : Using", "NET/IB: Using")):
        head, _, oob = body.partition("; OOB ")
        for d in _DEV.finditer(head):
            log.net_devices[d.group(2) + (f":{d.group(3)}" if d.group(3) else "")] = d.group(4)
        for name, addr in _IFADDR.findall(oob):
            _add(log.oob, name, addr)
        return
    if body.startswith(("NET/Socket : Using", "NET : Using interface")):
        for d in _SOCK_DEV.finditer(body) if body.startswith("NET/Socket") else _IFADDR.finditer(body):
            name, addr = (d.group(2), d.group(3)) if body.startswith("NET/Socket") else (d.group(1), d.group(2))
            log.net_devices[name] = "Socket"
            log.socket_addresses[name] = addr


def _h_env(r: _Reader, body: str, host: str | None) -> None:
    m = _ENV.search(body)
    if m is None:
        return
    name, value = m.group(1), m.group(2).strip()
    log = r.log
    log.env.setdefault(name, value)
    if name == "NCCL_IB_HCA":
        log.ib_hca = value
    seen = log.env_by_host.setdefault(name, {}) if len(log.env_by_host) < MAX_KEPT or name in log.env_by_host else None
    if seen is not None and (value in seen or len(seen) < 16):
        hosts = seen.setdefault(value, set())
        if host and len(hosts) < MAX_KEPT:
            hosts.add(host)


def _h_ranks(r: _Reader, body: str, host: str | None) -> None:
    log = r.log
    m = _RANKS.search(body)
    if m:
        log.ranks, log.nodes = int(m.group(1)), int(m.group(2))
    c = _COMM.search(body)
    if c:
        key = c.group(4) or f"nranks {c.group(3)}"
        comm = log.comms.get(key)
        if comm is None:
            if len(log.comms) >= MAX_KEPT:
                return
            comm = log.comms[key] = {"nranks": int(c.group(3)), "ranks": set(), "hosts": set()}
        if len(comm["ranks"]) < 4096:
            comm["ranks"].add(int(c.group(2)))
        if host and len(comm["hosts"]) < MAX_KEPT:
            comm["hosts"].add(host)


def _h_version(r: _Reader, body: str, host: str | None) -> None:
    r.version(body, host)


def _h_net_ib(r: _Reader, body: str, host: str | None) -> None:
    if body.startswith("NET/IB: ["):
        d = _DEV.search(body)
        if d:
            r.log.net_devices[d.group(2) + (f":{d.group(3)}" if d.group(3) else "")] = d.group(4)
    elif "GPU Direct RDMA" in body:
        m = _GDR.search(body)  # NET/IB only: NET/Socket prints the same words for a socket "HCA" such as lo
        if m:
            r.log.gdr[m.group(3)] = m.group(1) == "Enabled"
            if m.group(4):
                r.log.gdr_why[m.group(3)] = m.group(4)
    elif "No device found" in body:
        r.log.no_ib_device = True
    elif "Using" in body:
        _h_using(r, body, host)


def _h_nvls(r: _Reader, body: str, host: str | None) -> None:
    m = _NVLS.search(body)
    if m and len(r.log.nvls) < 4096:
        r.log.nvls[int(m.group(2))] = m.group(1) is None


def _h_ofi(r: _Reader, body: str, host: str | None) -> None:
    m = _OFI.search(body)
    r.log.plugins.setdefault("aws-ofi-nccl", "NET/OFI")
    if m:
        r.log.plugins["aws-ofi-nccl"] = f"provider {m.group(1)}" + (f", {m.group(2)} NICs" if m.group(2) else "")


def _h_plugin(r: _Reader, body: str, host: str | None) -> None:
    m = _PLUGIN_PATH.search(body)
    if m:
        r.log.plugins["net plugin"] = m.group(1)
    elif body.startswith("P2P plugin "):
        r.log.plugins["net plugin"] = r.log.plugins.get("net plugin") or body.split()[-1]


def _h_plain(r: _Reader, body: str, host: str | None) -> None:
    if body.startswith("Using"):
        _h_using(r, body, host)
    elif "nranks" in body or "nRanks" in body:
        _h_ranks(r, body, host)


#: first word of an INFO body -> handler
_TOKENS = {"Bootstrap": _h_using, "Bootstrap:": _h_using, "NET/IB": _h_net_ib, "NET/IB:": _h_net_ib,
           "NET/Socket": _h_using, "NET": _h_using, "NET/OFI": _h_ofi, "Using": _h_plain, "comm": _h_ranks,
           "ncclCommInitRank": _h_ranks, "ncclCommInitRankConfig": _h_ranks, "ncclCommInitAll": _h_ranks,
           "[Rank": _h_plain, "NVLS": _h_nvls, "Plugin": _h_plugin, "P2P": _h_plugin, "NCCL": _h_version}
#: INFO bodies whose host matters (read line by line, with their prefix)
_HOSTED = (b"Bootstrap", b"comm 0x", b"ncclCommInitRank", b"NET/IB : Using", b"NET/IB: Using", b"NET/Socket : Using",
           b"NCCL_", b"NCCL version", b"Using network", b"NET : Using")

#: lines read one by one: WARNs, bare version lines, hosted INFO lines and error returns
_ORDERED = re.compile(rb"NCCL (?:(?P<warn>WARN )|(?P<ver>version )|INFO (?:(?P<hosted>Bootstrap|comm 0x|"
                      rb"ncclCommInitRank|NET/IB ?: Using|NET/Socket : Using|NET : Using|NCCL_[A-Z0-9_]+ set|"
                      rb"NCCL version|Using network)|(?P<frame>[\w/.\-]+\.(?:cc|cu|c|h|cpp):\d+ -> )))")
#: every NCCL line's text from its mark to the end of the line: one C-level pass per block gives the INFO bodies
#: (counted) and the tails of the lines read one by one (:data:`_ORDERED`)
_TAIL = re.compile(rb"NCCL (?:INFO |WARN |version )[^\n]*")
_INFO_BODY = re.compile(rb"NCCL INFO ([^\n]*)")
#: the INFO bodies among them that are read one by one (their host or order matters)
_ORDERED_INFO = re.compile(rb"(?:Bootstrap|comm 0x|ncclCommInitRank|NET/IB ?: Using|NET/Socket : Using|NET : Using|"
                           rb"NCCL_[A-Z0-9_]+ set|NCCL version|Using network|[\w/.\-]{1,200}\.(?:cc|cu|c|h|cpp):\d+ -> )")
#: markers of lines outside NCCL's own format that report a failure (framework wrappers, CUDA OOM)
_ANCHORS = (b"Watchdog caught", b"Last error", b"NCCL error", b"NCCL failure", b"CUDA failure", b"Cuda failure common",
            b"out of memory", b"OutOfMemoryError", b"ncclRemoteError", b"RCCL version", b"fi_getinfo",
            b"last completed NCCL work")
#: what is searched in a block: "rror" covers the four error markers and "failure " nccl-tests' three, one scan each
_FINDS = (b"rror", b"Watchdog caught", b"out of memory", b"failure ", b"RCCL version", b"fi_getinfo",
          b"last completed NCCL work")
#: NCCL 2.2-era lines: "host:pid:tid [0] INFO ...", "... [0] include/socket.h:360 WARN ...", and (NCCL_DEBUG=WARN
#: without the prefix) "include/socket.h:344 WARN ..."
_LEGACY = re.compile(rb"(\[\d{1,5}\] (?:[\w/.\-]{1,200}:\d{1,7} )?|(?<![\w/.\-])[\w/.\-]{1,200}\.(?:h|hpp|cc|cu|c|cpp):\d{1,7} )"
                     rb"(INFO|WARN) ")


def _key(tail: bytes, limit: int = 512) -> bytes:
    """A line's text as it is counted: CloudWatch's doubled copy (`` | `` and the line again) cut off, at most
    512 bytes (what varies beyond that is not read)."""
    if b" | " in tail:
        head, _, rest = tail.partition(b" | ")
        if b"NCCL " in rest:
            tail = head
    return tail[:limit]


def _tail_kind(tail: bytes) -> tuple[bytes | None, bytes | None, bool]:
    """(INFO body as counted or None, key of a line read one by one or None, counted as an NCCL line)."""
    if tail.startswith(b"NCCL INFO "):
        body = _key(tail[10:], MAX_LINE)
        return body, (_key(tail) if _ORDERED_INFO.match(body) else None), True
    if tail.startswith(b"NCCL WARN "):
        return None, _key(tail), True
    return None, _key(tail), False  # "NCCL version ..."


def _has_comment(data: bytes) -> bool:
    """Whether a line of the block starts with '#' (single-byte finds: '#' inside lines is rare)."""
    pos = data.find(b"#")
    while pos >= 0:
        if pos == 0 or data[pos - 1] == 10:
            return True
        pos = data.find(b"#", pos + 1)
    return False


def _uncomment(data: bytes) -> bytes:
    """Lines starting with '#' emptied (a fixture's source header, nccl-tests' own lines): NCCL never starts a
    line with '#'. Line numbers are kept."""
    return b"\n".join(b"" if l.startswith(b"#") else l for l in data.split(b"\n"))


def _transform(data: bytes, legacy: bool) -> bytes:
    """A block as it is scanned: comment lines emptied, NCCL 2.2-era lines given the NCCL word."""
    if _has_comment(data):
        data = _uncomment(data)
    if legacy:
        data = _LEGACY.sub(rb"\1NCCL \2 ", data)
    return data


def scan_block(data: bytes) -> tuple[dict[bytes, int], list[int]]:
    """The C-level passes over a prepared block, which keep no state: every NCCL line's tail with its count,
    and the start of each line holding a marker of a framework line."""
    starts: set[int] = set()
    for a in _FINDS:
        pos = data.find(a)
        while pos >= 0:
            starts.add(data.rfind(b"\n", 0, pos) + 1)
            nxt = data.find(b"\n", pos)
            pos = data.find(a, nxt) if nxt >= 0 else -1
    return dict(Counter(_TAIL.findall(data))), sorted(starts)


class _Lines:
    """Line numbers of increasing offsets in a block, counted incrementally (one pass over the block)."""

    def __init__(self, data: bytes, base: int) -> None:
        self.data, self.pos, self.no = data, 0, base + 1

    def at(self, pos: int) -> int:
        if pos < self.pos:  # never within one pass; recount from the start rather than go wrong
            self.no -= self.data.count(b"\n", pos, self.pos)
            self.pos = pos
            return self.no
        self.no += self.data.count(b"\n", self.pos, pos)
        self.pos = pos
        return self.no


def _line_at(data: bytes, pos: int) -> tuple[int, int]:
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    return start, (len(data) if end < 0 else end)


class _Reader:
    """Feeds blocks of whole lines into an :class:`NcclLog`; keeps only bounded state."""

    def __init__(self) -> None:
        self.log = NcclLog()
        self.source: str | None = None
        self.first_other: tuple[int, str] | None = None
        self.legacy_checked = False
        self.host_cache: dict[bytes, tuple[str | None, str | None, str | None]] = {}
        self.body_seen: set[bytes] = set()
        self.ordered_seen: dict[bytes, int] = {}  # body of a WARN, error return or hosted line -> times read
        self.warn_event: dict[bytes, Event] = {}
        self.anchor_seen: dict[bytes, int] = {}
        self.via_cache: dict[bytes, str | None] = {}
        self.tail_kind: dict[bytes, tuple] = {}
        self.event_by_key: dict[tuple[str, str], Event] = {}
        self.open_chains: dict[str, Event] = {}
        self.warning_texts: set[str] = set()
        self.pending_last_error: tuple[int, str | None, str | None] | None = None

    # -- prefixes ------------------------------------------------------------------------------------
    def who(self, prefix: bytes) -> tuple[str | None, str | None, str | None]:
        """(host, process "host:pid", thread "host:pid:tid") of a line prefix, cached."""
        got = self.host_cache.get(prefix)
        if got is not None:
            return got
        text = _decode(prefix[-_PREFIX_WINDOW:])
        p = _PREFIX.search(text)
        if p:
            got = (p.group(1), f"{p.group(1)}:{p.group(2)}", f"{p.group(1)}:{p.group(2)}:{p.group(3)}")
        else:
            d = _DEV_ONLY.search(text)
            got = (None, f"[{d.group(1)}]" if d else None, text.strip() or None)
        if len(self.host_cache) > 8192:
            self.host_cache.clear()
        self.host_cache[prefix] = got
        log = self.log
        if got[0] is not None and got[0] not in log.hosts:
            if len(log.hosts) < MAX_HOSTS:
                log.hosts.add(got[0])
        if got[1] is not None and got[1] not in log.processes and len(log.processes) < MAX_HOSTS:
            log.processes.add(got[1])
        return got

    def version(self, text: str, host: str | None) -> None:
        v = _VERSION.search(text)
        if not v:
            return
        log = self.log
        log.version = log.version or v.group(2)
        if v.group(1) == "RCCL":
            log.flavour = "RCCL"
        who = host or self.source
        holders = log.versions.setdefault(v.group(2), set()) if len(log.versions) < MAX_KEPT else None
        if holders is not None and who and len(holders) < MAX_KEPT:
            holders.add(who)

    # -- a block ---------------------------------------------------------------------------------------
    def block(self, data: bytes) -> None:
        data, nlines = self.prepare(data)
        self.apply(data, nlines, scan_block(data))

    def prepare(self, data: bytes) -> tuple[bytes, int]:
        """A block as it is scanned (comment lines emptied, NCCL 2.2-era lines given the NCCL word) and its line
        count; the only step before the scan that keeps state, so blocks are prepared in order."""
        log = self.log
        nlines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        if not self.legacy_checked and data.strip():
            if b"NCCL INFO " not in data and b"NCCL WARN " not in data and _LEGACY.search(data):
                log.legacy = True
            self.legacy_checked = bool(b"NCCL" in data) or log.legacy
        return _transform(data, log.legacy), nlines

    def apply(self, data: bytes, nlines: int, scan: tuple[dict[bytes, int], list[int]]) -> None:
        """A prepared block and its scan (:func:`scan_block`) read into the log, in order: the line numbers and
        which text came first depend on the blocks before it."""
        log = self.log
        base = log.lines
        tails, starts = scan
        infos, ordered = self.tails(tails)
        if infos:
            new = {b for b in infos if b not in self.body_seen and not b.startswith(_HOSTED)}
            first = self.first_lines(data, base, new) if new else {}
            for body, n in infos.items():
                self.info_body(body, n, data, first.get(body))
        if ordered:
            self.ordered(data, base, ordered)
        if starts:
            self.anchored(data, base, starts)
        log.lines = base + nlines
        if self.first_other is None and log.nccl_lines == 0:
            for n, raw in enumerate(data.split(b"\n", 64), base + 1):
                line = _decode(raw[:MAX_LINE]).strip()
                if line and not line.startswith("#"):
                    self.first_other = (n, line[:80])
                    break

    def tails(self, counted: dict[bytes, int]) -> tuple[dict[bytes, int], dict[bytes, int]]:
        """Every NCCL line's tail counted in the block (:func:`scan_block`), each distinct tail sorted once
        (cached): the INFO bodies with their counts, and the tails of the lines read one by one."""
        infos: dict[bytes, int] = {}
        ordered: dict[bytes, int] = {}
        kinds = self.tail_kind
        lines = 0
        for t, n in counted.items():
            kind = kinds.get(t)
            if kind is None:
                kind = _tail_kind(t)
                if len(t) <= 1024:  # a long line's tail is sorted again when it comes again, not kept
                    if len(kinds) >= 1 << 14:
                        kinds.clear()
                    kinds[t] = kind
            body, okey, counted = kind
            lines += n if counted else 0
            if body is not None:
                infos[body] = infos.get(body, 0) + n
            if okey is not None:
                ordered[okey] = ordered.get(okey, 0) + n
        self.log.nccl_lines += lines
        return infos, ordered

    def first_lines(self, data: bytes, base: int, bodies: set[bytes]) -> dict[bytes, tuple[int, int]]:
        """(offset, line number) of the first occurrence of each body in ``bodies``, in one pass."""
        found: dict[bytes, tuple[int, int]] = {}
        lines = _Lines(data, base)
        for m in _INFO_BODY.finditer(data):
            b = _key(m.group(1), MAX_LINE)
            if b in bodies and b not in found:
                start = data.rfind(b"\n", 0, m.start()) + 1
                found[b] = (m.start(), lines.at(start))
                if len(found) == len(bodies):
                    break
        return found

    def info_body(self, body: bytes, n: int, data: bytes, first: tuple[int, int] | None) -> None:
        """A distinct INFO body with its count in the block: channel lines counted, the rest read once."""
        log = self.log
        if body.startswith(_HOSTED):
            return  # read with its host, in order
        channel = body.startswith((b"Channel ", b"Ring "))
        if channel:
            self.channel(body, n)
        if body in self.body_seen:
            return
        if len(self.body_seen) >= 1 << 16:
            self.body_seen.clear()
        self.body_seen.add(body)
        host = None
        if first is not None:  # the host of its first occurrence
            host = self.who(data[data.rfind(b"\n", 0, first[0]) + 1:first[0]])[0]
        if channel:
            return
        text = _clean(_decode(body[:MAX_LINE]))
        if host is not None and text.startswith(("NET/Plugin", "Plugin Path")):
            self.net_plugin(text, host)
        sp = text.find(" ")
        handler = _TOKENS.get(text[:sp] if sp > 0 else text)
        if handler is not None:
            handler(self, text, None)
        if "libibverbs" in text and "ail" in text:
            log.ibverbs_missing = True
        if "tcpx" in text.lower() and "GPUDirect-TCPX" not in log.plugins:
            log.plugins["GPUDirect-TCPX"] = "tcpx messages"
        if first is not None:
            self.info_failure(text, data, first)

    def net_plugin(self, text: str, host: str) -> None:
        """Which network plugin a host ended up with: NCCL's internal one, or the plugin it loaded (its path or
        name). Ranks on different plugins use different networks and cannot connect."""
        log = self.log
        if "internal" in text:
            kind = "internal"
        else:
            m = _PLUGIN_PATH.search(text) or _LOADED_PLUGIN.search(text)
            if m is None:
                return
            kind = m.group(1)
        if host in log.net_plugin_by_host or len(log.net_plugin_by_host) < MAX_HOSTS:
            log.net_plugin_by_host.setdefault(host, kind[:200])

    def info_failure(self, text: str, data: bytes, first: tuple[int, int]) -> None:
        """An INFO line NCCL prints for a failure or a fallback (an extracted INFO format): an event."""
        from ccdiag.nccl.catalogue import explain
        from ccdiag.nccl.messages import index

        if _FRAME.match(text) or len(text) < 8:
            return
        msg = index().find(text)
        if msg is None or msg.level != "INFO":
            return
        pos, line = first
        start = data.rfind(b"\n", 0, pos) + 1
        host, proc, _ = self.who(data[start:pos])
        fam, _ = explain(text, None)
        self.event("info", text, line, fam.id, host, proc, None, None, msg.where)

    def channel(self, body: bytes, times: int) -> None:
        """``Channel 03/08 : 0 1 ...`` (the ring) or ``Channel 03/0 : 1[1] -> 0[0] via P2P/IPC``."""
        log = self.log
        slash = body.find(b"/", 8, 14)
        if slash > 0:
            sp = body.find(b" ", slash, slash + 8)
            total = body[slash + 1:sp] if sp > 0 else b""
            if total.isdigit() and int(total) > (log.channels or 0):
                log.channels = int(total)
        j = body.find(b" via ")
        if j < 0:
            return
        tail = body[j:j + 256]
        label = self.via_cache.get(tail, "")
        if label == "":
            text = _decode(tail)
            if "repeated" in text:
                text = _unrepeat(text)
            m = _VIA.match(text)
            label = transport_label(m.group(1)) if m else None
            if len(self.via_cache) > 4096:
                self.via_cache.clear()
            self.via_cache[tail] = label
        if label is not None:
            log.transports[label] = log.transports.get(label, 0) + times

    def ordered(self, data: bytes, base: int, tails: dict[bytes, int]) -> None:
        """WARNs, error returns, bare version lines and the INFO lines whose host matters, in order. A block
        whose every such line was already read :data:`SATURATE` times is only counted."""
        seen = self.ordered_seen
        if all(seen.get(t, 0) >= SATURATE for t in tails):
            for t, n in tails.items():
                if t.startswith(b"NCCL WARN "):
                    self.log.warning_count += n
                    ev = self.warn_event.get(t)
                    if ev is not None:
                        ev.count += n
            return
        lines = _Lines(data, base)
        done_to = -1
        for m in _ORDERED.finditer(data):
            pos = m.start()
            if pos <= done_to:
                continue
            start, end = _line_at(data, pos)
            done_to = end
            kind = m.lastgroup
            body = _key(data[pos:end])
            times = seen.get(body, 0)
            if times >= SATURATE:  # read enough times from enough processes: only counted from now on
                if kind == "warn":
                    self.log.warning_count += 1
                    ev = self.warn_event.get(body)
                    if ev is not None:
                        ev.count += 1
                continue
            if len(seen) >= 1 << 16:
                seen.clear()
            seen[body] = times + 1
            prefix = data[start:pos]
            if kind == "hosted":
                host = self.who(prefix)[0]
                raw = data[pos + 10:min(end, pos + MAX_LINE)]
                if end > pos + MAX_LINE and b" " in raw:
                    raw = raw[:raw.rfind(b" ")]  # a line longer than the cap: its cut last word is not read
                text = _clean(_decode(raw))
                sp = text.find(" ")
                token = text[:sp] if sp > 0 else text
                handler = _h_env if token.startswith("NCCL_") else _TOKENS.get(token)
                if handler is not None:
                    handler(self, text, host)
                continue
            if kind == "ver":
                self.version(_decode(data[pos:min(end, pos + 200)]), self.who(prefix)[0] if prefix.strip() else None)
                continue
            line = lines.at(start)
            if kind == "warn":
                ev = self.warn(prefix, _decode(data[m.end():min(end, m.end() + MAX_LINE)]), line)
                if ev is not None:
                    if len(self.warn_event) >= 1 << 14:
                        self.warn_event.clear()
                    self.warn_event[body] = ev
            else:
                f = _FRAME.match(_decode(data[pos + 10:min(end, pos + 400)]))
                if f:
                    self.frame(self.who(prefix)[2] or "?", f.group(1), f.group(2), line, prefix)

    def warn(self, prefix: bytes, body: str, line: int) -> Event | None:
        from ccdiag.nccl.catalogue import explain

        log = self.log
        log.warning_count += 1
        text = _clean(body)
        if len(log.warnings) < MAX_KEPT and text not in self.warning_texts:
            self.warning_texts.add(text)
            log.warnings.append((line, text))
        if "libibverbs" in text:
            log.ibverbs_missing = True
        ptext = _decode(prefix[-_PREFIX_WINDOW:])
        if "tcpx" in (ptext + text).lower():
            log.plugins.setdefault("GPUDirect-TCPX", "tcpx messages in WARN lines")
        host, proc, thread = self.who(prefix)
        f = _WARN_FILE.search(ptext.rstrip().rstrip("*`").rstrip() + " ")
        file = f.group(1) if f else None
        if file and ":" in file:  # "host:pid:tid" is not a file; a "file" of a plugin is its function name
            file = file.rsplit(":", 1)[-1] or None
        fam, msg = explain(text, file)
        ev = self.event("warn", text, line, fam.id, host, proc, file, _time(ptext), msg.where if msg else None)
        if ev is not None:
            key = thread
            if proc is None:  # no host:pid:tid: the error returns after it carry the same prefix without the file
                key = (ptext[:f.start()] if f else ptext).strip() or "?"
            self.open_chains[key or "?"] = ev
            if len(self.open_chains) > 4096:
                self.open_chains.clear()
        return ev

    def frame(self, thread: str, where: str, code: str, line: int, prefix: bytes) -> None:
        """An error return (``misc/socket.cc:564 -> 2``) climbing the chain its thread's WARN opened."""
        chain = self.open_chains.get(thread)
        if chain is None:
            host, proc, _ = self.who(prefix)
            chain = self.event("returns", f"error {code} returned from {where} (no WARN pasted before it)", line,
                               "nccl-error-wrapper", host, proc, where, None, None)
            if chain is None:
                return
            self.open_chains[thread] = chain
        chain.frames += 1
        chain.last_frame = where

    def event(self, kind: str, text: str, line: int, family: str, host: str | None, rank: str | None,
              file: str | None, time: str | None, where: str | None) -> Event | None:
        key = (family, _normalise(text[:400])[:300])
        ev = self.event_by_key.get(key)
        if ev is not None:
            ev.count += 1
            if rank and len(ev.ranks) < MAX_KEPT:
                ev.ranks.add(rank)
            if time and (ev.time is None or time < ev.time):
                ev.time, ev.host, ev.rank, ev.line = time, host, rank, line  # the earliest occurrence leads
            return ev
        if len(self.log.events) >= MAX_EVENTS:
            return None
        ev = Event(kind, text[:400], line, family, host, rank, file, time, self.source, where=where)
        if rank:
            ev.ranks.add(rank)
        self.event_by_key[key] = ev
        self.log.events.append(ev)
        return ev

    # -- framework lines ----------------------------------------------------------------------------------
    def anchored(self, data: bytes, base: int, starts: list[int]) -> None:
        """Lines outside NCCL's INFO format that report a failure (framework wrappers, CUDA out of memory):
        the lines a marker was found in (``starts``, in order), each read once per distinct text."""
        lines = _Lines(data, base)
        for start in starts:
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            raw = data[start:min(end, start + 4096)]
            anchor = self.new_anchor(raw)
            if anchor is None:
                continue
            text = _decode(raw)
            _ANCHOR_READERS[anchor](self, text, lines.at(start), _torch_rank(text), data, end)

    def new_anchor(self, raw: bytes) -> bytes | None:
        """The framework marker of a line still to be read, counted as read; None for a line to skip: one of
        NCCL's own INFO lines, one read SATURATE times already (a WARN line is known by its text, whatever its
        host prefix), or one without a framework marker (an error code in a WARN), which is not read again."""
        seen = self.anchor_seen
        mark = raw.find(b"NCCL WARN ")
        key = raw if mark < 0 else raw[mark:]
        times = seen.get(key, 0)
        if times >= SATURATE:
            return None
        if len(seen) >= 1 << 16:
            seen.clear()
        if b"NCCL INFO" in raw:
            return None
        anchor = next((a for a in _ANCHORS if a in raw), None)
        seen[key] = SATURATE if anchor is None else times + 1
        return anchor

    def rccl_version_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """RCCL prints its version outside NCCL's format."""
        self.version(text, None)

    def fi_getinfo_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """libfabric's empty provider list: the provider (EFA) found no device."""
        if "output empty list" in text:
            p = re.search(r"provider (\w+) output empty list", text)
            self.log.plugins["libfabric"] = f"provider {p.group(1) if p else '?'} found no device (empty list)"

    def last_error_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """PyTorch's ``Last error:`` with NCCL's message after it, or on the next line."""
        from ccdiag.nccl.catalogue import explain

        after = text.split("Last error", 1)[1].lstrip(":").strip()
        if after:
            fam, msg = explain(_strip_rank_prefix(after), None)
            self.event("warn", _strip_rank_prefix(after), line, fam.id, None, rank, None, _time(text),
                       msg.where if msg else None)
            return
        self.pending_last_error = (line, rank, _time(text))
        nxt = data.find(b"\n", end + 1)
        self.last_error_next(data[end + 1:(len(data) if nxt < 0 else nxt)] if end < len(data) else b"")

    def last_done_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """PyTorch's last completed NCCL work of a rank: which rank is behind in a watchdog timeout."""
        d = _LAST_DONE.search(text)
        if d and rank and len(self.log.torch_done) < MAX_HOSTS:
            self.log.torch_done[rank] = int(d.group(1))

    def watchdog_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """PyTorch's watchdog timeout: an event, and the rank's sequence number timed out."""
        s = _SEQ.search(text)
        if s and rank and len(self.log.torch_seq) < MAX_HOSTS:
            self.log.torch_seq[rank] = (int(s.group(1)), s.group(2))
        self.event("timeout", _torch_message(text), line, "watchdog-timeout", None,
                   f"rank {rank}" if rank else None, None, _time(text), None)

    def oom_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """CUDA out of memory as the framework reports it (NCCL's own WARN of it is read as a WARN)."""
        if _OOM.search(text) and "NCCL WARN" not in text:
            self.event("oom", _torch_message(text), line, "cuda-oom", None, f"rank {rank}" if rank else None,
                       None, _time(text), None)

    def remote_error_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """PyTorch's ncclRemoteError: a peer failed, the cause is in its log."""
        self.event("framework", _torch_message(text), line, "remote-error", None,
                   f"rank {rank}" if rank else None, None, _time(text), None)

    def framework_error_line(self, text: str, line: int, rank: str | None, data: bytes, end: int) -> None:
        """A framework's or a test's NCCL/CUDA error line, explained by its message (NCCL's own lines are read as
        NCCL's)."""
        from ccdiag.nccl.catalogue import explain

        if "NCCL WARN" in text or "NCCL INFO" in text:
            return
        self.version(text, None)
        fam, _ = explain(_torch_message(text), None)
        self.event("framework", _torch_message(text), line, fam.id, None, f"rank {rank}" if rank else None,
                   None, _time(text), None)

    def last_error_next(self, raw: bytes) -> None:
        """PyTorch prints ``Last error:`` and the NCCL message on the next line."""
        from ccdiag.nccl.catalogue import explain

        if self.pending_last_error is None:
            return
        text = _strip_rank_prefix(_decode(raw[:4096]).strip()).rstrip("`*").rstrip()  # markdown around a paste
        if not text:
            return
        line, rank, time = self.pending_last_error
        self.pending_last_error = None
        fam, msg = explain(text, None)
        self.event("warn", text, line + 1, fam.id, None, f"rank {rank}" if rank else None, None, time,
                   msg.where if msg else None)


#: how each framework marker's line is read (every marker of ``_ANCHORS``)
_ANCHOR_READERS: dict[bytes, Callable[[_Reader, str, int, str | None, bytes, int], None]] = {
    b"RCCL version": _Reader.rccl_version_line, b"fi_getinfo": _Reader.fi_getinfo_line,
    b"Last error": _Reader.last_error_line, b"last completed NCCL work": _Reader.last_done_line,
    b"Watchdog caught": _Reader.watchdog_line, b"out of memory": _Reader.oom_line,
    b"OutOfMemoryError": _Reader.oom_line, b"ncclRemoteError": _Reader.remote_error_line,
    **dict.fromkeys((b"NCCL error", b"NCCL failure", b"CUDA failure", b"Cuda failure common"),
                    _Reader.framework_error_line),
}


_RANK_PREFIX = re.compile(r"^(?:\[[^\]]{1,40}\]:?\s*|\w[\w\-]{0,40}\|\d+\]:\s*)+")


def _strip_rank_prefix(text: str) -> str:
    """``[rank0]: msg``, ``[trainer0|0]:msg`` -> ``msg``."""
    return _RANK_PREFIX.sub("", text).strip()


def _torch_rank(text: str) -> str | None:
    m = _TORCH_RANK.search(text[:400])
    if m:
        return next(g for g in m.groups() if g is not None)
    return None


def _torch_message(text: str) -> str:
    """The message of a framework line without its glog/rank prefix."""
    for marker in ("Watchdog caught", "NCCL error", "torch.", "RuntimeError", "ncclRemoteError", "Test NCCL failure",
                   "NCCL failure", "Test CUDA failure", "CUDA failure", "Cuda failure", "CUDA out of memory",
                   "OutOfMemoryError"):
        i = text.find(marker)
        if i >= 0:
            return text[i:i + 400].strip()
    return text.strip()[:400]


def _time(prefix: str) -> str | None:
    """A time stamp in a line's prefix, as sortable text ("2025-04-06 22:31:56" or glog's "02:07:08.408")."""
    m = _TIME.search(prefix[:200])
    if not m:
        return None
    if m.group(1):
        return f"{m.group(1)} {m.group(2).replace(',', '.')}"
    return m.group(3)


# -- entry points -------------------------------------------------------------------------------------------
def _finish(r: _Reader, source: str) -> NcclLog:
    log = r.log
    if log.nccl_lines == 0 and log.version is None and not log.events:
        first = r.first_other
        what = f"line {first[0]}: {first[1]!r}" if first else "no text"
        hint = " (an NCCL topology XML, not a log)" if first and first[1].startswith("<") else ""
        raise LogError(f"{source}: no NCCL INFO/WARN line (NCCL_DEBUG=INFO output); first line read: {what}{hint}")
    return log


def _text_blocks(text: str) -> Iterator[bytes]:
    data = text.encode("utf-8", "surrogateescape")
    pos = 0
    while pos < len(data):
        cut = data.rfind(b"\n", pos, pos + CHUNK) + 1 if len(data) - pos > CHUNK else len(data)
        if cut <= pos:
            cut = min(len(data), pos + CHUNK)
        yield data[pos:cut]
        pos = cut


def read_lines(lines: Iterable[str], source: str = "<log>") -> NcclLog:
    """An :class:`NcclLog` from lines (without their newline), read once, in order."""
    return parse_nccl_log("\n".join(l if len(l) <= MAX_LINE else l[:MAX_LINE] for l in lines), source)


def parse_nccl_log(text: str, source: str = "<log>") -> NcclLog:
    """The log in ``text`` (a paste held in memory)."""
    if len(text) > MAX_BYTES:
        raise LogError(f"{source}: larger than {MAX_BYTES >> 20} MiB held in memory; pass it as a file")
    r = _Reader()
    for block in _text_blocks(text):
        r.block(block)
    return _finish(r, source)


def _file_blocks(path: str, deadline: float | None = None) -> Iterator[bytes]:
    """The file as blocks of whole lines (UTF-8 never puts a newline byte inside a character). A line
    longer than a chunk keeps its head and the rest is skipped, so memory stays bounded."""
    import time

    carry = b""
    with open(path, "rb") as fh:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(path)
            raw = fh.read(CHUNK)
            data = carry + raw
            if not raw:
                if data:
                    yield data
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) > CHUNK:
                head = data[:MAX_LINE]
                sp = head.rfind(b" ")
                yield (head[:sp] if sp > 0 else head) + b"\n"  # whole words only: a cut token is not read
                carry = b""
                _skip_to_newline(fh)
                continue
            if cut:
                yield data[:cut]
            carry = data[cut:]


def _skip_to_newline(fh) -> None:
    while True:
        raw = fh.read(CHUNK)
        if not raw:
            return
        nl = raw.find(b"\n")
        if nl >= 0:
            fh.seek(nl + 1 - len(raw), 1)
            return


def _regular(path: str) -> None:
    import os
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise LogError(f"{path}: not a regular file")


def read_nccl_log(path: str, deadline: float | None = None) -> NcclLog:
    """Stream a log file: memory stays flat whatever its size. ``deadline`` (``time.monotonic()``):
    :class:`TimeoutError` when reading goes past it."""
    return read_nccl_logs([path], deadline)


def log_files(paths: Iterable[str]) -> list[str]:
    """The files to read: each path, a directory's regular files in name order (per-rank logs written
    with ``NCCL_DEBUG_FILE=...%h.%p``)."""
    import os

    out = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if not n.startswith("."))
            found = [os.path.join(p, n) for n in names if os.path.isfile(os.path.join(p, n))]
            if not found:
                raise LogError(f"{p}: a directory without log files")
            out += found
        else:
            out.append(p)
    return out


def read_nccl_logs(paths: Iterable[str], deadline: float | None = None) -> NcclLog:
    """Several logs (per-rank files, or a directory of them) read as one job: events keep the file they
    came from, versions and settings are compared across the files."""
    r = _Reader()
    files = log_files(paths)
    for path in files:
        _regular(path)
        r.source = path if len(files) > 1 else None
        r.legacy_checked = False
        r.open_chains.clear()
        r.log.sources.append(path)
        for block in _file_blocks(path, deadline):
            r.block(block)
    return _finish(r, ", ".join(files) if len(files) > 1 else files[0] if files else "<no file>")


__all__ = ["DOCKER_BRIDGE", "Event", "LogError", "NcclLog", "log_files", "parse_nccl_log", "read_lines",
           "read_nccl_log", "read_nccl_logs", "transport_label"]

