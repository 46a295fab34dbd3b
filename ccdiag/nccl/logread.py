"""What NCCL really chose, read from an ``NCCL_DEBUG=INFO`` log as users paste it.

Pasted logs are messy: several ranks interleaved, application timestamps, mpirun ``[1,3]<stdout>:``,
Ray ``(RayWorkerWrapper pid=.., ip=..)``, kubectl/terminal and CloudWatch prefixes in front of NCCL's
own ``host:pid:tid [dev] NCCL INFO`` prefix, Ray's ``[repeated 14x across cluster]`` suffixes, lines
cut mid-token, other programs' output in between. The reader therefore looks for NCCL's marker
anywhere in a line, takes what it can from each line on its own, and never needs the lines in order.

It streams: a file is read line by line (each line bounded), every fact kept is bounded (counters,
small maps, at most :data:`MAX_KEPT` distinct warnings and failure roots), so memory stays flat on
a log of any size. Lines of no interest cost one substring search.

Line formats (NCCL's ``INFO``/``WARN`` messages: ``src/init.cc``, ``src/bootstrap.cc``,
``src/misc/socket.cc``, ``src/transport/net_ib/init.cc``, ``src/transport/net_socket.cc``,
``src/transport/net.cc``, ``src/transport/nvls.cc``): ``NCCL version 2.27.5+cuda12.9``, ``Bootstrap :
Using eth0:10.0.0.1<0>`` (``Bootstrap: Using`` in current releases), ``NET/IB : Using [0]mlx5_0:1/IB
[1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>``, the per-device ``NET/IB: [0] mlx5_0:uverbs0:1/IB
provider=...`` lines of current NCCL, ``NET/Socket : Using [0]eth0:172.17.0.2<0>``, ``Using network
IB``, ``NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)``, ``Channel 00/0 : 1[3000]
-> 0[83000] via P2P/IPC``, ``... [send] via NET/IB/0/GDRDMA``, ``via NET/AWS Libfabric/0`` (a
plugin's name with a space), ``NCCL_X set by environment to Y``, ``NCCL_IB_HCA set to Y``, ``comm
0x.. rank 3 nranks 16 ... commId 0x.. - Init START``, ``NVLS multicast support is (not) available on
dev 3``, error returns ``misc/socket.cc:564 -> 2`` climbing after a ``NCCL WARN``.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from ccdiag.core.errors import UserInputError

MAX_BYTES = 64 << 20  # for text handed over whole; files are streamed without a size limit
MAX_LINE = 64 << 10
MAX_KEPT = 64  # distinct warnings, failure roots, communicators, hosts kept

_PREFIX = re.compile(r"([\w.\-<>]+):(\d+):(\d+) \[(\d+)\] ")
#: the characters before the NCCL mark searched for the host:pid:tid [rank] prefix (a host name is at
#: most 253 characters): a line of 50,000 '-' before the mark must not cost a quadratic search
_PREFIX_WINDOW = 320
_VERSION = re.compile(r"\b(R?CCL|NCCL) version (\d+\.\d+\.\d+)\S*")
_REPEAT = re.compile(r"\s*(?:\[repeated \d+x across cluster\]|[\[(]?(?:message )?repeated \d+ times?[\])]?)\s*$",
                     re.IGNORECASE)
_VIA = re.compile(r" via ((?:P2P|SHM|NVLS|CollNet|COLLNET)\b[\w/().\-]*|NET/[^/]+/\S*|NET/[\w ]+)")
_DEV = re.compile(r"\[(\d{1,9})\]\s?([\w.\-]+)(?::[\w.\-]+)??(?::(\d{1,9}))?(?::\d*)?(?::\d+)?/(IB|RoCE)\b")
_SOCK_DEV = re.compile(r"\[(\d{1,9})\]([\w.\-]+):([^<\s]*)<")
_IFADDR = re.compile(r"([\w.\-]+):([^<\s]*)(?:<\d+>|$)")
_GDR = re.compile(r"NET/IB ?: GPU Direct RDMA (Enabled|Disabled) for HCA (\d{1,9}) '([\w.\-]+)'(?: \(([^)]*)\))?")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (.*?)\.?\s*$")
_CHANNEL = re.compile(r"Channel (\d{1,9})/(\d{1,9}) ")
_RANKS = re.compile(r"\bnRanks (\d{1,9}) nNodes (\d{1,9}) localRanks (\d{1,9})")
_COMM = re.compile(r"\bcomm (0x[0-9a-f]+) rank (\d{1,9}) nranks (\d{1,9})(?:.*?commId (0x[0-9a-f]+))?")
_FRAME = re.compile(r"^([\w/.\-]+\.(?:cc|cu|c|h|cpp)):\d+ -> (\d{1,9})")
_NVLS = re.compile(r"NVLS multicast support is (not )?available on dev (\d{1,9})")
_NET = re.compile(r"Using network (\S+)")
_OFI = re.compile(r"NET/OFI Selected [Pp]rovider is (\w+)(?: \(found (\d{1,9}) nics\))?")
_PLUGIN_PATH = re.compile(r"Plugin Path : (\S+)")

DOCKER_BRIDGE = ipaddress.IPv4Network("172.17.0.0/16")


class _Unseen(enum.Enum):
    """A prefix not read before (an Enum member, so a type checker tells it from a cached ``None``)."""
    UNSEEN = 0


_UNSEEN = _Unseen.UNSEEN
_V = TypeVar("_V")


class LogError(UserInputError, ValueError):
    """Not an NCCL log; the message names what was seen instead."""


@dataclass
class Failure:
    root: str  # the WARN that started the chain (or the first frame when no WARN was pasted)
    line: int
    count: int = 1
    frames: int = 0
    last_frame: str | None = None


@dataclass
class NcclLog:
    version: str | None = None
    flavour: str = "NCCL"  # "RCCL" for AMD's fork, which prints the same format
    network: str | None = None  # "IB" | "Socket" | a plugin's name ("Libfabric", "RDMA_Plugin")
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
    ib_hca: str | None = None  # "NCCL_IB_HCA set to ..." as NCCL read it
    nvls: dict[int, bool] = field(default_factory=dict)  # CUDA device -> multicast available
    plugins: dict[str, str] = field(default_factory=dict)  # what -> detail
    warnings: list[tuple[int, str]] = field(default_factory=list)  # (line, text), distinct, at most MAX_KEPT
    warning_count: int = 0
    failures: list[Failure] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    nccl_lines: int = 0
    lines: int = 0
    no_ib_device: bool = False
    ibverbs_missing: bool = False

    def to_json(self) -> dict:
        return {"version": self.version, "flavour": self.flavour, "network": self.network,
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
                "failures": [{"root": f.root, "line": f.line, "count": f.count, "frames": f.frames,
                              "last_frame": f.last_frame} for f in self.failures],
                "hosts": sorted(self.hosts), "nccl_lines": self.nccl_lines, "ib_no_device": self.no_ib_device,
                "ibverbs_missing": self.ibverbs_missing}


class _Reader:
    """Feeds lines one at a time into an :class:`NcclLog`; keeps only bounded state."""

    def __init__(self) -> None:
        self.log = NcclLog()
        self.first_other: tuple[int, str] | None = None
        self.open_chains: dict[str, Failure] = {}
        self.prefix_host: dict[str, str | None] = {}
        # keyed by the text after " via ": str on the line path, bytes on the block path (never equal)
        self.via_cache: dict[str | bytes, str | None] = {}
        self.failure_by_root: dict[str, Failure] = {}
        self.seen: set[tuple[str, str | None]] = set()  # bounded; cleared when full
        self.norm_cache: dict[str, str] = {}
        self.warning_texts: set[str] = set()
        self.warn_cache: dict[bytes, tuple[str, Failure]] = {}
        self.frame_cache: dict[bytes, tuple[str, str, str]] = {}
        self.last_warn: tuple[str, Failure] | None = None
        self.last_frame: tuple[str, str, str] | None = None
        self.seen_raw: set[bytes] = set()  # INFO lines already read (bounded; cleared when full)
        self.prefix_host_raw: dict[bytes, str | None] = {}

    def feed(self, line: str) -> None:
        """One line, counted (the line-by-line path)."""
        log = self.log
        log.lines += 1
        if "NCCL INFO " in line or "NCCL WARN " in line:
            log.nccl_lines += 1
        self.line(line)

    def line(self, line: str) -> None:
        """One line's facts; counting is the caller's (a block scan counts markers at C speed)."""
        i = line.find("NCCL INFO ")
        if i < 0:
            self._not_info(line)
            return
        prefix = line[:i]
        host = self.prefix_host.get(prefix, _UNSEEN)
        if host is _UNSEEN:
            host = self._host(prefix)
        body = line[i + 10:]
        sp = body.find(" ")
        token = body[:sp] if sp > 0 else body
        if token == "Channel" or token == "Ring":
            self._channel(body)
            return
        handler = _TOKENS.get(token)
        if handler is None:
            if token.startswith("NCCL_"):
                handler = _h_env
            elif " -> " in body:
                f = _FRAME.match(body)
                if f:
                    self._frame(f, prefix)
                return
            else:
                return
        key = (body, host)
        if key in self.seen:
            return  # INFO handlers are idempotent: the same text from the same host adds nothing
        if len(self.seen) >= 1 << 16:
            self.seen.clear()
        self.seen.add(key)
        if " | " in body and "NCCL " in body:  # CloudWatch pastes the line twice, joined by " | "
            body = body[:body.index(" | ")]
        if "repeated" in body:
            body = _REPEAT.sub("", body)
        handler(self, body.rstrip(), host)

    def _not_info(self, line: str) -> None:
        if line.startswith("#"):
            return  # a comment (or a fixture's source header); NCCL never starts a line with '#'
        i = line.find("NCCL WARN ")
        if i < 0:
            self._other(line)
            return
        body = line[i + 10:]
        if " | " in body and "NCCL " in body:
            body = body[:body.index(" | ")]
        if "repeated" in body:
            body = _REPEAT.sub("", body)
        self._warn(body.rstrip(), self._host(line[:i]), line[:i])

    def _channel(self, body: str) -> None:
        """``Channel 03/08 : 0 1 ...`` (the ring) or ``Channel 03/0 : 1[1] -> 0[0] via P2P/IPC/read``."""
        log = self.log
        slash = body.find("/", 8, 14)
        if slash > 0:
            end = body.find(" ", slash)
            total = body[slash + 1:end]
            if total.isdigit() and int(total) > (log.channels or 0):
                log.channels = int(total)
        j = body.find(" via ")
        if j < 0:
            return
        tail = body[j:]
        label = self.via_cache.get(tail, "")
        if label == "":
            m = _VIA.match(_REPEAT.sub("", tail) if "repeated" in tail else tail)
            label = transport_label(m.group(1)) if m else None
            if len(self.via_cache) > 4096:
                self.via_cache.clear()
            self.via_cache[tail] = label
        if label is not None:
            t = log.transports
            t[label] = t.get(label, 0) + 1

    # -- per kind of line -------------------------------------------------------------------------
    def _other(self, line: str) -> None:
        if "CCL version" in line:
            self._version(line)
        elif "fi_getinfo" in line and "output empty list" in line:
            m = re.search(r"provider (\w+) output empty list", line)
            self.log.plugins["libfabric"] = f"provider {m.group(1) if m else '?'} found no device (empty list)"
        elif self.first_other is None and line.strip():
            self.first_other = (self.log.lines, line.strip()[:80])

    def _version(self, text: str) -> None:
        v = _VERSION.search(text)
        if v:
            self.log.version = self.log.version or v.group(2)
            if v.group(1) == "RCCL":
                self.log.flavour = "RCCL"

    def _host(self, prefix: str) -> str | None:
        """The host name in a line prefix not seen before (cached: a prefix is one rank's thread)."""
        host = self.prefix_host.get(prefix, _UNSEEN)
        if host is not _UNSEEN:
            return host
        p = _PREFIX.search(prefix[-_PREFIX_WINDOW:])
        host = p.group(1) if p else None
        if len(self.prefix_host) > 4096:
            self.prefix_host.clear()
        self.prefix_host[prefix] = host
        if host is not None and len(self.log.hosts) < MAX_KEPT * 16:
            self.log.hosts.add(host)
        return host

    def _warn(self, body: str, host: str | None, prefix: str) -> None:
        log = self.log
        log.warning_count += 1
        text = body.strip()
        if len(log.warnings) < MAX_KEPT and text not in self.warning_texts:
            self.warning_texts.add(text)
            log.warnings.append((log.lines, text))
        if "libibverbs" in text:
            log.ibverbs_missing = True
        if "tcpx" in (prefix + text).lower():
            log.plugins.setdefault("GPUDirect-TCPX", "tcpx messages in WARN lines")
        key = _thread_key(prefix)
        self.open_chains[key] = failure = self._failure(text, None)
        self.last_warn = (key, failure)
        if len(self.open_chains) > 4096:
            self.open_chains.clear()

    def warn_again(self, key: str, failure: Failure) -> None:
        """The same WARN line as one already read: count it, reopen its chain."""
        self.log.warning_count += 1
        failure.count += 1
        self.open_chains[key] = failure

    def _failure(self, root: str, frame: str | None) -> Failure:
        norm = self.norm_cache.get(root)
        if norm is None:
            norm = _normalise(root)
            if len(self.norm_cache) > 4096:
                self.norm_cache.clear()
            self.norm_cache[root] = norm
        f = self.failure_by_root.get(norm)
        if f is not None:
            f.count += 1
            return f
        f = Failure(root, self.log.lines, count=1)
        if len(self.log.failures) < MAX_KEPT:
            self.log.failures.append(f)
            self.failure_by_root[norm] = f
        return f

    def _frame(self, m: re.Match, prefix: str) -> None:
        self.last_frame = (_thread_key(prefix), m.group(1), m.group(2))
        self.frame(*self.last_frame)

    def frame(self, key: str, where: str, code: str) -> None:
        """An error return (``misc/socket.cc:564 -> 2``) climbing the chain its thread's WARN opened."""
        chain = self.open_chains.get(key)
        if chain is None:
            chain = self._failure(f"error {code} returned from {where} (no WARN pasted before it)", None)
            self.open_chains[key] = chain
            if len(self.open_chains) > 4096:
                self.open_chains.clear()
        chain.frames += 1
        chain.last_frame = where


def _thread_key(prefix: str) -> str:
    p = _PREFIX.search(prefix[-_PREFIX_WINDOW:])
    return ":".join(p.group(1, 2, 3)) if p else prefix.strip()


def _normalise(text: str) -> str:
    """A warning's text without the numbers that differ between occurrences (ports, pointers, counts)."""
    return re.sub(r"0x[0-9a-f]+|\d+", "#", text)


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


# -- INFO handlers (keyed by the dispatch word that found them) ---------------------------------------
def _h_using(r: _Reader, body: str, host: str | None) -> None:
    log = r.log
    m = _NET.search(body)
    if m:
        log.network = m.group(1)
        return
    if body.startswith(("Bootstrap : Using", "Bootstrap: Using")):
        found = _IFADDR.findall(body.split("Using", 1)[1].replace("[0]", " ").strip())
        for name, addr in found:
            _add(log.bootstrap, name, addr)
        if found and host and (host in log.bootstrap_by_host or len(log.bootstrap_by_host) < MAX_KEPT * 16):
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


def _h_per_device(r: _Reader, body: str, host: str | None) -> None:
    """``NET/IB: [0] mlx5_0:uverbs0:1/IB provider=...`` (current NCCL: one line per device)."""
    d = _DEV.search(body)
    if d and body.startswith("NET/IB: ["):
        r.log.net_devices[d.group(2) + (f":{d.group(3)}" if d.group(3) else "")] = d.group(4)


def _h_env(r: _Reader, body: str, host: str | None) -> None:
    m = _ENV.search(body)
    if m is None:
        return
    name, value = m.group(1), m.group(2).strip()
    r.log.env.setdefault(name, value)
    if name == "NCCL_IB_HCA":
        r.log.ib_hca = value


def _h_gdr(r: _Reader, body: str, host: str | None) -> None:
    m = _GDR.search(body)  # NET/IB only: NET/Socket prints the same words for a socket "HCA" such as lo
    if m:
        r.log.gdr[m.group(3)] = m.group(1) == "Enabled"
        if m.group(4):
            r.log.gdr_why[m.group(3)] = m.group(4)


def _h_ranks(r: _Reader, body: str, host: str | None) -> None:
    m = _RANKS.search(body)
    if m:
        r.log.ranks, r.log.nodes = int(m.group(1)), int(m.group(2))
    c = _COMM.search(body)
    if c:
        key = c.group(4) or f"nranks {c.group(3)}"
        comm = r.log.comms.get(key)
        if comm is None:
            if len(r.log.comms) >= MAX_KEPT:
                return
            comm = r.log.comms[key] = {"nranks": int(c.group(3)), "ranks": set(), "hosts": set()}
        if len(comm["ranks"]) < 4096:
            comm["ranks"].add(int(c.group(2)))
        if host and len(comm["hosts"]) < MAX_KEPT:
            comm["hosts"].add(host)


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


def _add(d: dict, key: str, value: str) -> None:
    if key not in d and len(d) >= MAX_KEPT:
        return
    s = d.setdefault(key, set())
    if len(s) < MAX_KEPT:
        s.add(value)


def _h_net_ib(r: _Reader, body: str, host: str | None) -> None:
    if body.startswith("NET/IB: ["):
        _h_per_device(r, body, host)
    elif "GPU Direct RDMA" in body:
        _h_gdr(r, body, host)
    elif "No device found" in body:
        r.log.no_ib_device = True
    elif "Using" in body:
        _h_using(r, body, host)


def _h_nccl(r: _Reader, body: str, host: str | None) -> None:
    if "version" in body:
        r._version(body)


def _h_plain(r: _Reader, body: str, host: str | None) -> None:
    """A line whose first word says nothing alone: a ``Using network X`` or a comm/ranks line."""
    if body.startswith("Using"):
        _h_using(r, body, host)
    elif "nranks" in body or "nRanks" in body:
        _h_ranks(r, body, host)


#: the first word of an INFO line's text -> its handler; any other first word is of no interest
_TOKENS = {"Bootstrap": _h_using, "Bootstrap:": _h_using, "NET/IB": _h_net_ib, "NET/IB:": _h_net_ib,
           "NET/Socket": _h_using, "NET": _h_using, "NET/OFI": _h_ofi, "Using": _h_plain, "comm": _h_ranks,
           "ncclCommInitRank": _h_ranks, "ncclCommInitRankConfig": _h_ranks, "ncclCommInitAll": _h_ranks,
           "[Rank": _h_plain, "NVLS": _h_nvls, "Plugin": _h_plugin, "P2P": _h_plugin, "NCCL": _h_nccl}


# -- entry points -------------------------------------------------------------------------------------------
#: what makes a line worth reading in Python: an INFO line whose first word has a handler (see
#: ``_TOKENS``), any WARN line, a version line, libfabric's provider report. Every other line is only
#: counted, at C speed, by :func:`_scan`.
_INTEREST = re.compile(rb"NCCL (?:(?P<warn>WARN )|version|INFO (?:(?P<ch>Channel|Ring) |Bootstrap|NET(?:/IB|/Socket|/OFI| :)|"
                       rb"Using network|comm|ncclComm|\[Rank|NVLS|Plugin Path|P2P plugin|NCCL_|"
                       rb"(?P<frame>[\w/.\-]+\.(?:cc|cu|c|h|cpp):\d+ -> )))")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")


def _scan(r: _Reader, data: bytes) -> None:
    """A block of whole lines (``data`` ends at a line end or at the end of input), as bytes.

    Two passes, both driven from C: the block's distinct lines with their multiplicity (a channel
    line counts as often as it occurs; an INFO line's handler is idempotent, so it runs once), then
    the lines whose order matters (a ``WARN`` and the error returns climbing after it), in order and
    with their line numbers, in blocks that have any. Only lines of interest are decoded."""
    log = r.log
    base = log.lines
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    ordered = False
    for raw, n in Counter(lines).items():
        if b"NCCL INFO " in raw or b"NCCL WARN " in raw:
            log.nccl_lines += n
        ordered = _distinct_line(r, raw, n) or ordered
    if ordered:  # only a block with a WARN or an error return needs the ordered pass
        _ordered_lines(r, data, base)
    log.lines = base + len(lines)
    if r.first_other is None and log.nccl_lines == 0:
        _first_other(r, data, base)


def _distinct_line(r: _Reader, raw: bytes, n: int) -> bool:
    """Read one distinct line; True when it must be read in order instead (a WARN, an error return)."""
    m = _INTEREST.search(raw)
    if m is None:
        if b"RCCL version" in raw or b"fi_getinfo" in raw:
            r._other(_decode(raw[:MAX_LINE]))
        return False
    kind = m.lastgroup
    if kind == "ch":
        _channel_bytes(r, raw, 0, m.start(), m.end(), len(raw), n)
    elif kind is None and raw not in r.seen_raw:
        if len(r.seen_raw) >= 1 << 16:
            r.seen_raw.clear()
        r.seen_raw.add(raw)
        r.line(_decode(raw[:MAX_LINE]))
    return kind in ("warn", "frame")


_ORDERED = re.compile(rb"NCCL (?:(?P<warn>WARN )|INFO (?P<frame>[\w/.\-]+\.(?:cc|cu|c|h|cpp):\d+ -> ))")


def _ordered_lines(r: _Reader, data: bytes, base: int) -> None:
    """WARN lines and error returns, in order: a chain is the WARN of a thread and the returns after it."""
    log = r.log
    last_start, last_no, done_to = 0, base + 1, -1
    find, rfind, count = data.find, data.rfind, data.count
    for m in _ORDERED.finditer(data):
        pos = m.start()
        if pos <= done_to:
            continue  # a second marker on a line already read
        start = rfind(b"\n", 0, pos) + 1
        end = find(b"\n", pos)
        if end < 0:
            end = len(data)
        done_to = end
        raw = data[start:end] if end - start <= MAX_LINE else data[start:start + MAX_LINE]
        kind = m.lastgroup
        if kind == "warn" and raw in r.warn_cache:
            r.warn_again(*r.warn_cache[raw])
            continue
        if kind == "frame" and raw in r.frame_cache:
            r.frame(*r.frame_cache[raw])
            continue
        last_no += count(b"\n", last_start, start)
        last_start = start
        log.lines = last_no
        r.last_warn = r.last_frame = None
        r.line(_decode(raw))
        _remember(r, kind, raw)


def _remember(r: _Reader, kind: str | None, raw: bytes) -> None:
    """Keep what a WARN or error-return line did, so the same line again costs a lookup (bounded)."""
    if kind is None:
        return
    if kind == "warn":
        if r.last_warn is not None:
            _bounded_put(r.warn_cache, raw, r.last_warn)
    elif r.last_frame is not None:
        _bounded_put(r.frame_cache, raw, r.last_frame)


def _bounded_put(cache: dict[bytes, _V], raw: bytes, done: _V) -> None:
    if len(cache) >= 4096:
        cache.clear()
    cache[raw] = done


def _channel_bytes(r: _Reader, data: bytes, start: int, pos: int, after: int, end: int, times: int = 1) -> None:
    """A ``Channel``/``Ring`` line read straight from the bytes: the transport after `` via `` (cached by
    its text, which repeats across ranks and channels), the channel count, the host of its prefix."""
    log = r.log
    prefix = data[start:pos]
    if prefix not in r.prefix_host_raw:
        if len(r.prefix_host_raw) > 4096:
            r.prefix_host_raw.clear()
        r.prefix_host_raw[prefix] = r._host(_decode(prefix))
    slash = data.find(b"/", after, after + 6)
    if slash > 0:
        sp = data.find(b" ", slash, slash + 8)
        total = data[slash + 1:sp] if sp > 0 else b""
        if total.isdigit() and int(total) > (log.channels or 0):
            log.channels = int(total)
    j = data.find(b" via ", after, end)
    if j < 0:
        return
    tail = data[j:min(end, j + 256)]
    label = r.via_cache.get(tail, "")
    if label == "":
        text = _decode(tail)
        if "repeated" in text:
            text = _REPEAT.sub("", text)
        m = _VIA.match(text)
        label = transport_label(m.group(1)) if m else None
        if len(r.via_cache) > 4096:
            r.via_cache.clear()
        r.via_cache[tail] = label
    if label is not None:
        log.transports[label] = log.transports.get(label, 0) + times


def _first_other(r: _Reader, data: bytes, base: int) -> None:
    for n, raw in enumerate(data.split(b"\n", 64), base + 1):
        line = _decode(raw[:MAX_LINE])
        if line.strip() and not line.startswith("#"):
            r.first_other = (n, line.strip()[:80])
            return


def _finish(r: _Reader, source: str) -> NcclLog:
    log = r.log
    if log.nccl_lines == 0 and log.version is None:
        first = r.first_other
        what = f"line {first[0]}: {first[1]!r}" if first else "no text"
        hint = " (an NCCL topology XML, not a log)" if first and first[1].startswith("<") else ""
        raise LogError(f"{source}: no NCCL INFO/WARN line (NCCL_DEBUG=INFO output); first line read: {what}{hint}")
    return log


def read_lines(lines: Iterable[str], source: str = "<log>") -> NcclLog:
    """An :class:`NcclLog` from lines (without their newline), read once, in order."""
    r = _Reader()
    feed = r.feed
    for raw in lines:
        feed(raw if len(raw) <= MAX_LINE else raw[:MAX_LINE])
    return _finish(r, source)


def parse_nccl_log(text: str, source: str = "<log>") -> NcclLog:
    """The log in ``text`` (a paste held in memory)."""
    if len(text) > MAX_BYTES:
        raise LogError(f"{source}: larger than {MAX_BYTES >> 20} MiB held in memory; pass it as a file")
    r = _Reader()
    _scan(r, text.encode("utf-8", "surrogateescape"))
    return _finish(r, source)


CHUNK = 4 << 20


def _file_blocks(path: str) -> Iterator[bytes]:
    """The file as blocks of whole lines, read in chunks (UTF-8 never puts a newline byte inside a
    character, so a block boundary never cuts one). A line longer than a chunk is cut at
    :data:`MAX_LINE` and its rest skipped, so memory stays bounded."""
    carry = b""
    with open(path, "rb") as fh:
        while True:
            raw = fh.read(CHUNK)
            data = carry + raw
            if not raw:
                if data:
                    yield data
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) > CHUNK:
                yield data[:MAX_LINE] + b"\n"  # one line longer than a chunk: keep its head
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


def read_nccl_log(path: str) -> NcclLog:
    """Stream a log file: memory stays flat whatever its size."""
    import os
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise LogError(f"{path}: not a regular file")
    r = _Reader()
    for block in _file_blocks(path):
        _scan(r, block)
    return _finish(r, path)


# -- what differs from the node's facts -------------------------------------------------------------------
def _rails_of(rec: object | None) -> str | None:
    settings = getattr(rec, "settings", None)  # None for no record, or one without settings
    return settings().get("NCCL_IB_HCA") if settings is not None else None


def _d_sockets(log: NcclLog, rec: object | None) -> list[str]:
    channel_lines = sum(n for k, n in log.transports.items() if k.startswith("NET/Socket"))
    rdma = any(k in ("IB", "RoCE") for k in log.net_devices.values())
    inferred = (log.network is None and not rdma and "Socket" in log.net_devices.values()
                and (log.no_ib_device or log.ibverbs_missing))
    if log.network != "Socket" and not channel_lines and not inferred:
        return []
    seen = f" ({channel_lines} inter-node channel lines via NET/Socket)" if channel_lines else ""
    why = []
    if log.env.get("NCCL_IB_DISABLE", "0").strip() not in ("0", ""):
        why.append(f"NCCL_IB_DISABLE={log.env['NCCL_IB_DISABLE']} was set by the environment")
    if log.ibverbs_missing:
        why.append("libibverbs could not be opened (rdma-core missing, e.g. in the container)")
    if log.no_ib_device:
        why.append("NET/IB found no device" + (" (inside a container: /dev/infiniband not passed through?)"
                                              if not why else ""))
    rails = _rails_of(rec)
    if rails:
        return [f"NCCL used sockets although the node has RDMA rails ({rails}){seen}: "
                + ("; ".join(why) if why else "check NCCL_IB_DISABLE, the rdma-core libraries in the container, "
                   "and /dev/infiniband")]
    return [f"NCCL sends between hosts over TCP sockets{seen}" + (": " + "; ".join(why) if why else "")]


def _d_plugin(log: NcclLog, rec: object | None) -> list[str]:
    out = []
    if log.network and log.network not in ("IB", "Socket"):
        out.append(f"NCCL used the network plugin '{log.network}'" +
                   (f" ({', '.join(f'{k}: {v}' for k, v in log.plugins.items())})" if log.plugins else ""))
    elif log.plugins:
        out.append("network plugin present: " + ", ".join(f"{k}: {v}" for k, v in log.plugins.items()))
    if "found no device" in log.plugins.get("libfabric", ""):
        out.append(f"libfabric {log.plugins['libfabric']}: no EFA device reachable from this process (in a container, "
                   "pass the EFA devices /dev/infiniband/uverbs*), so aws-ofi-nccl cannot carry NCCL's traffic")
    return out


def _d_gdr(log: NcclLog, rec: object | None) -> list[str]:
    out = []
    plain = sum(n for k, n in log.transports.items() if k.startswith("NET/") and not k.endswith("/GDRDMA")
                and not k.startswith("NET/Socket"))
    if plain:
        out.append(f"{plain} inter-node channel lines run without GPUDirect RDMA (no /GDRDMA): the NIC reads and "
                   "writes host memory and each transfer is staged through it")
    for hca, on in sorted(log.gdr.items()):
        if not on:
            why = log.gdr_why.get(hca)
            out.append(f"GPUDirect RDMA disabled for {hca}" + (f" ({why})" if why else "") +
                       ": nvidia_peermem (or dma-buf support) missing, or the GPU is too far from the NIC")
    return out


def _iface_problems(kind: str, ifaces: dict) -> list[str]:
    from ccdiag.nccl import netif

    out = []
    for name, addrs in sorted(ifaces.items()):
        addrs = [addrs] if isinstance(addrs, str) else sorted(addrs)
        why = netif.name_problem(name)
        bad = [a for a in addrs if _is_ip(a) and not netif.routable(a)]
        if why:
            out.append(f"{kind} interface {name} is a {why}: it carries no traffic between hosts")
        elif bad:
            out.append(f"{kind} interface {name} has only a loopback or link-local address ({', '.join(bad)}): "
                       "other hosts cannot reach it")
        docker = [a for a in addrs if _in(a, DOCKER_BRIDGE)]
        if docker:
            out.append(f"{kind} address {', '.join(docker)} on {name} is in Docker's default bridge network "
                       "(172.17.0.0/16): other hosts reach a container on a bridge only through NAT; use host "
                       "networking (docker --network host, hostNetwork: true in Kubernetes)")
    return out


def _is_ip(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return False  # empty, masked ("X.X.X.X") or cut
    return True


def _in(addr: str, net: ipaddress.IPv4Network) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]) in net
    except ValueError:
        return False


def _d_interfaces(log: NcclLog, rec: object | None) -> list[str]:
    out = []
    if log.bootstrap:
        shown = "; ".join(f"{k} {', '.join(sorted(v)) or '?'}" for k, v in sorted(log.bootstrap.items()))
        out.append(f"bootstrap over {shown}")
        firsts = sorted(set(log.bootstrap_by_host.values()))
        if len(firsts) > 1:
            per = ", ".join(f"{h}: {i}" for h, i in sorted(log.bootstrap_by_host.items())[:8])
            out.append(f"hosts bootstrap over different interfaces ({per}): every host must reach the others' "
                       "bootstrap addresses; set NCCL_SOCKET_IFNAME to one network present on every host")
    out += _iface_problems("bootstrap", log.bootstrap)
    socks = {n: a for n, a in log.socket_addresses.items() if n not in log.bootstrap}
    out += _iface_problems("socket", socks)
    return out


def _d_ib_hca(log: NcclLog, rec: object | None) -> list[str]:
    out = []
    if log.ib_hca:
        from ccdiag.nccl.lists import parse_nccl_list

        spec = parse_nccl_list(log.ib_hca)
        if not spec.exact:
            names = ", ".join(e.name for e in spec.entries)
            caught = _caught_by_prefix(spec, _node_nics(rec))
            here = (f"; on this node: {'; '.join(caught)}" if caught else
                    " (mlx5_1 selects mlx5_10..mlx5_19)")
            out.append(f"NCCL_IB_HCA={log.ib_hca}: entries are prefixes ({names}): each also selects every HCA "
                       f"whose name starts with it{here}; write the list with '=' for exact names")
    soft = sorted(d.split(":")[0] for d in log.net_devices if d.startswith(("rxe", "siw")))
    if soft:
        out.append(f"{', '.join(soft)}: software RDMA (soft-RoCE/iWARP in the kernel, no NIC offload, no GPUDirect "
                   "RDMA): slower than sockets on most hosts; use the hardware HCA or sockets")
    rails = _rails_of(rec)
    used = {d.split(":")[0] for d, kind in log.net_devices.items() if kind in ("IB", "RoCE")}
    if rails and used:
        from ccdiag.nccl.lists import parse_nccl_list

        spec = parse_nccl_list(rails)
        extra = sorted(d for d in used if not spec.selects(d))
        if extra:
            out.append(f"NCCL used {', '.join(extra)}, which is not a compute rail of this node ({rails})")
        unused = sorted({e.name for e in spec.entries} - used)
        if unused:
            out.append(f"rails present on the node but unused by NCCL: {', '.join(unused)} (NCCL_IB_HCA in the job, "
                       "or ports down when the job started)")
    kinds = set(log.net_devices.values())
    if {"IB", "RoCE"} <= kinds:
        out.append("NCCL uses InfiniBand and RoCE ports together: " + ", ".join(sorted(log.net_devices)))
    return out


def _node_nics(rec: object | None) -> list[str]:
    k = rec.get("NCCL_IB_HCA") if rec is not None and hasattr(rec, "get") else None
    if k is None:
        return []
    details = k.details or {}
    names = set(details.get("rails") or {}) | {x.split(":")[0] for x in details.get("left_out") or {}}
    return sorted(names)


def _caught_by_prefix(spec: object, nics: list[str]) -> list[str]:
    out = []
    for e in getattr(spec, "entries", ()):
        extra = [n for n in nics if n != e.name and n.startswith(e.name)]
        if extra:
            out.append(f"{e.name} also selects {', '.join(extra)}")
    return out


def _d_env(log: NcclLog, rec: object | None) -> list[str]:
    from ccdiag.nccl.recommend import debugging_reason

    out = []
    for var, value in sorted(log.env.items()):
        why = debugging_reason(var) if var != "NCCL_IB_DISABLE" or value.strip() not in ("0", "") else None
        if why:
            out.append(f"{var}={value} was set by the environment: a debugging variable ({why}); remove it "
                       "from production jobs")
    return out


def _d_comms_nvls(log: NcclLog, rec: object | None) -> list[str]:
    out = []
    if len(log.comms) > 1:
        out.append(f"{len(log.comms)} communicators in this log, read apart: " + "; ".join(
            f"{k}: {v['nranks']} ranks ({len(v['ranks'])} seen)" for k, v in list(log.comms.items())[:8]))
    off = sorted(d for d, on in log.nvls.items() if not on)
    if off:
        out.append(f"NVLink SHARP (NVLS) multicast not available on CUDA devices {', '.join(map(str, off))}: no "
                   "NVSwitch multicast (not an NVSwitch system, or Fabric Manager/IMEX not ready)")
    return out


_CONNECT_TO = re.compile(r"[Cc]onnect to ([0-9A-Fa-f:.%\w\-]+?)<\d+>")


def _unreachable_targets(failures: list[Failure]) -> list[str]:
    """A failed connect whose target address no other host can reach (link-local, loopback)."""
    from ccdiag.nccl import netif

    out = []
    for f in failures:
        m = _CONNECT_TO.search(f.root)
        if m and _is_ip(m.group(1)) and not netif.routable(m.group(1)):
            out.append(f"the failed connection went to {m.group(1)}, a link-local or loopback address: the interface "
                       "NCCL picked has no address other hosts can reach; set NCCL_SOCKET_IFNAME to the fabric network")
    return out


def _d_failures(log: NcclLog, rec: object | None) -> list[str]:
    out = []
    rooted = [f for f in log.failures if "no WARN pasted" not in f.root]
    bare = [f for f in log.failures if "no WARN pasted" in f.root]
    for f in rooted:
        times = f" (x{f.count})" if f.count > 1 else ""
        climb = f", returned through {f.frames} frames up to {f.last_frame}" if f.frames else ""
        out.append(f"WARN (line {f.line}){times}: {f.root[:200]}{climb}")
    out += _unreachable_targets(rooted)
    if bare and rooted:
        out.append(f"{sum(f.frames for f in bare)} further error returns without their WARN in the paste: the same "
                   f"failure climbing other threads (first cause above: {rooted[0].root[:120]})")
    elif bare:
        f = bare[0]
        out.append(f"error returns without a WARN in the paste (first at line {f.line}: {f.root[:120]}); the cause is "
                   "in the lines before the paste began")
    return out


_DIFFS = (_d_sockets, _d_plugin, _d_gdr, _d_interfaces, _d_ib_hca, _d_env, _d_comms_nvls, _d_failures)


def compare(log: NcclLog, rec: object | None) -> list[str]:
    """Each difference between what NCCL chose and the node's facts (and the recommendation), named."""
    return [d for rule in _DIFFS for d in rule(log, rec)]
