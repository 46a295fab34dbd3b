"""What NCCL really chose, read from an ``NCCL_DEBUG=INFO`` log as users paste it.

Pasted logs are messy: several ranks interleaved, application timestamps or Ray/kubectl prefixes in
front of NCCL's own ``host:pid:tid [dev] NCCL INFO`` prefix, lines cut mid-token, other programs'
output in between. The reader therefore looks for NCCL's marker anywhere in a line, takes what it
can from each line on its own, and never needs the lines in order. It is linear in the input and
bounded (size and line length); it refuses a file with no NCCL line, naming what it saw instead.

Line formats (NCCL's ``INFO`` messages in ``src/init.cc``, ``src/transport/net_ib``,
``src/transport/net_socket.cc``, ``src/misc/param.cc``): ``NCCL version 2.27.5+cuda12.9``,
``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ... ; OOB eth0:10.0.0.1<0>``, ``NET/Socket : Using
[0]eth0:172.17.0.2<0>``, ``Using network IB``, ``NET/IB : GPU Direct RDMA Enabled for HCA 0
'mlx5_0'``, ``Channel 00/0 : 1[3000] -> 0[83000] via P2P/IPC``, ``... via NET/IB/0/GDRDMA``,
``NCCL_X set by environment to Y``, and ``NCCL WARN ...``.
"""

from __future__ import annotations

import re
from typing import Any
from dataclasses import dataclass, field

from ccdiag.errors import UserInputError

MAX_BYTES = 64 << 20
MAX_LINE = 64 << 10

_MARK = re.compile(r"NCCL (INFO|WARN) ")
_PREFIX = re.compile(r"([\w.\-]+):(\d+):(\d+) \[(\d+)\] ")
#: characters before the NCCL mark searched for the host:pid:tid [rank] prefix
_PREFIX_WINDOW = 320
_VERSION = re.compile(r"\b(R?CCL|NCCL) version (\d+\.\d+\.\d+)\S*")
_USING_NET = re.compile(r"Using network (\w+)")
_NET_DEVS = re.compile(r"NET/(IB|Socket) : Using (.*)")
_NET_DEV = re.compile(r"\[(\d+)\]([\w.\-]+)(?::(\d+))?(?:/(IB|RoCE))?")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([\w.\-]+)'")
_VIA = re.compile(r" via ((?:P2P|SHM|NET|NVLS|CollNet|COLLNET)[\w/().\-]*)")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S*?)\.?\s*$")
# counts of at most 9 digits: a longer one is no count NCCL prints (and int() refuses 4,300+ digits)
_CHANNEL = re.compile(r"\bChannel (\d{1,9})/(\d{1,9}) ")
_RANKS = re.compile(r"\bnRanks (\d{1,9}) nNodes (\d{1,9}) localRanks (\d{1,9})")
_REPEAT = re.compile(r"\s*[\[(]?(?:repeated|message repeated) \d+ times?[\])]?\s*$", re.IGNORECASE)


class LogError(UserInputError, ValueError):
    """Not an NCCL log (or past the bounds); the message names what was seen instead."""


@dataclass
class NcclLog:
    version: str | None = None
    flavour: str = "NCCL"  # "RCCL" for AMD's fork, which prints the same format
    network: str | None = None  # "IB" | "Socket" | a plugin's name
    net_devices: dict[str, str] = field(default_factory=dict)  # "mlx5_0:1" -> "IB" | "RoCE" | "Socket"
    gdr: dict[str, bool] = field(default_factory=dict)  # HCA -> GPUDirect RDMA enabled
    transports: dict[str, int] = field(default_factory=dict)  # "P2P/IPC" -> channel lines
    channels: int | None = None
    ranks: int | None = None
    nodes: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[tuple[int, str]] = field(default_factory=list)  # (line, text)
    hosts: set[str] = field(default_factory=set)
    nccl_lines: int = 0
    no_ib_device: bool = False

    def to_json(self) -> dict:
        return {"version": self.version, "flavour": self.flavour, "network": self.network,
                "net_devices": dict(self.net_devices), "gdr": dict(self.gdr), "transports": dict(self.transports),
                "channels": self.channels, "ranks": self.ranks, "nodes": self.nodes, "env": dict(self.env),
                "warnings": [{"line": n, "text": t} for n, t in self.warnings], "hosts": sorted(self.hosts),
                "nccl_lines": self.nccl_lines, "ib_no_device": self.no_ib_device}


#: the "message repeated N times" suffix is looked for in this many trailing characters only
_REPEAT_WINDOW = 80


def _without_repeat(body: str) -> str:
    """``body`` without syslog's repeat suffix. Searched in the tail only: the pattern starts with
    ``\\s*``, so over a whole line of 20,000 spaces a search is quadratic (seconds per line)."""
    tail_at = max(0, len(body) - _REPEAT_WINDOW)
    r = _REPEAT.search(body, tail_at)
    return body[:r.start()].rstrip() if r else body


def parse_nccl_log(text: str, source: str = "<log>") -> NcclLog:
    if len(text) > MAX_BYTES:
        raise LogError(f"{source}: larger than {MAX_BYTES >> 20} MiB; pass the part around the problem")
    log = NcclLog()
    first_other = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw[:MAX_LINE]
        if line.startswith("#"):
            continue  # a comment (or a fixture's source header); NCCL never starts a line with '#'
        v = _VERSION.search(line)
        if v:
            log.version = log.version or v.group(2)
            if v.group(1) == "RCCL":
                log.flavour = "RCCL"
        m = _MARK.search(line)
        if m is None:
            if first_other is None and line.strip() and not line.startswith("#"):
                first_other = (n, line.strip()[:80])
            continue
        log.nccl_lines += 1
        body = _without_repeat(line[m.end():].rstrip())
        # the prefix ends where the mark starts, and a host name is at most 253 characters: searching
        # only that window keeps a line of 50,000 '-' from costing a quadratic regex search
        p = _PREFIX.search(line[max(0, m.start() - _PREFIX_WINDOW):m.start()])
        if p:
            log.hosts.add(p.group(1))
        if m.group(1) == "WARN":
            log.warnings.append((n, body))
            continue
        for rx, handler in _HANDLERS:
            found = rx.search(body)
            if found:
                handler(log, found, body)
    if log.nccl_lines == 0 and log.version is None:
        what = f"line {first_other[0]}: {first_other[1]!r}" if first_other else "no text"
        hint = " (an NCCL topology XML, not a log)" if first_other and first_other[1].startswith("<") else ""
        raise LogError(f"{source}: no NCCL INFO/WARN line (NCCL_DEBUG=INFO output); first line read: {what}{hint}")
    return log


def _net(log: NcclLog, m: re.Match, body: str) -> None:
    log.network = m.group(1)


_SOCK_DEV = re.compile(r"\[(\d+)\]([\w.\-]+):[\w.:%\-]+<")


def _devs(log: NcclLog, m: re.Match, body: str) -> None:
    kind = m.group(1)
    if kind == "Socket":
        for d in _SOCK_DEV.finditer(m.group(2)):
            log.net_devices[d.group(2)] = "Socket"
        return
    for d in _NET_DEV.finditer(m.group(2).split(";")[0]):
        name = d.group(2) + (f":{d.group(3)}" if d.group(3) else "")
        log.net_devices[name] = d.group(4) or ("Socket" if kind == "Socket" else "IB")


def _gdr(log: NcclLog, m: re.Match, body: str) -> None:
    log.gdr[m.group(3)] = m.group(1) == "Enabled"


def _via(log: NcclLog, m: re.Match, body: str) -> None:
    kind = m.group(1)
    if kind.startswith("NET/"):
        parts = kind.split("/")
        label = "/".join(parts[:2]) + ("/GDRDMA" if "GDRDMA" in kind else "")
    else:
        label = kind
    log.transports[label] = log.transports.get(label, 0) + 1


def _env(log: NcclLog, m: re.Match, body: str) -> None:
    log.env[m.group(1)] = m.group(2)


def _channel(log: NcclLog, m: re.Match, body: str) -> None:
    total = int(m.group(2))
    if total:
        log.channels = max(log.channels or 0, total)


def _ranks(log: NcclLog, m: re.Match, body: str) -> None:
    log.ranks, log.nodes = int(m.group(1)), int(m.group(2))


def _no_dev(log: NcclLog, m: re.Match, body: str) -> None:
    log.no_ib_device = True


_HANDLERS = ((_USING_NET, _net), (_NET_DEVS, _devs), (_GDR, _gdr), (_VIA, _via), (_ENV, _env),
             (_CHANNEL, _channel), (_RANKS, _ranks), (re.compile(r"NET/IB : No device found"), _no_dev))


def _settings(rec: Any) -> dict[str, Any]:
    """The recommendation's settings by name, or none when ``rec`` has no ``settings()``."""
    fn = getattr(rec, "settings", None)
    return fn() if callable(fn) else {}


def compare(log: NcclLog, rec: Any | None) -> list[str]:
    """Differences between what NCCL chose and what the node's facts and the recommendation say."""
    out = []
    if log.network == "Socket":
        if rec is not None and _settings(rec).get("NCCL_IB_HCA"):
            out.append("NCCL used sockets although the node has RDMA rails "
                       f"({rec.settings()['NCCL_IB_HCA']}): check NCCL_IB_DISABLE, the rdma-core libraries in the "
                       "container, and /dev/infiniband")
        else:
            out.append("NCCL found no InfiniBand/RoCE device and sends between hosts over TCP sockets"
                       + (" (inside a container: /dev/infiniband not passed through?)" if log.no_ib_device else ""))
    for hca, on in sorted(log.gdr.items()):
        if not on:
            out.append(f"GPUDirect RDMA disabled for {hca}: nvidia_peermem (or dma-buf support) missing, or the "
                       "GPU is too far from the NIC")
    if rec is not None:
        want = _settings(rec).get("NCCL_IB_HCA")
        if want and log.net_devices:
            from ccdiag.nccl.lists import parse_nccl_list

            spec = parse_nccl_list(want)
            used = {d.split(":")[0] for d, kind in log.net_devices.items() if kind in ("IB", "RoCE")}
            extra = sorted(d for d in used if not spec.selects(d))
            if extra:
                out.append(f"NCCL used {', '.join(extra)}, which is not a compute rail of this node ({want})")
    from ccdiag.nccl.recommend import DEBUGGING

    for var, value in sorted(log.env.items()):
        if var in DEBUGGING:
            out.append(f"{var}={value} was set by the environment: a debugging variable that "
                       f"{DEBUGGING[var]}; remove it from production jobs")
    kinds = set(log.net_devices.values())
    if {"IB", "RoCE"} <= kinds:
        out.append("NCCL uses InfiniBand and RoCE ports together: " + ", ".join(sorted(log.net_devices)))
    for n, text in log.warnings:
        out.append(f"WARN (line {n}): {text[:160]}")
    return out
