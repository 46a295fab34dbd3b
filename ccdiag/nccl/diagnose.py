"""An NCCL log judged: the root failure first, explained, its consequences folded beneath it; then
what NCCL chose that differs from the node's facts.

Why: a failing job prints many WARNs on many ranks, most of them the echo of one failure (a rank
ran out of GPU memory, and every rank connected to it reports a closed connection). The reader
(:mod:`ccdiag.nccl.logread`) gives the events with their family in the catalogue
(:mod:`ccdiag.nccl.catalogue`: meaning, part at fault, root cause or consequence). Here the root is
chosen: a family that is a cause outranks one that is a consequence; among causes, the stronger
kind (GPU memory, /dev/shm, NVLS and rank configuration before a refused connection), then the
earliest time stamp, then the earliest line; a message of an "either" family that comes after a
cause in the same process is folded under it, as is every consequence. When a log holds only
consequences, the finding says so and names where the cause must be (the peer, another rank's log)
and which ``NCCL_DEBUG_SUBSYS`` shows it.

Decisions about hosts come from the log itself: the ranks and nodes NCCL counted, the hosts in the
line prefixes, the bootstrap addresses. Nothing here says "between hosts" of a single-host job.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ccdiag.nccl import netif
from ccdiag.nccl.catalogue import Family, by_id
from ccdiag.nccl.logread import DOCKER_BRIDGE, Event, NcclLog

FAIL, WARN, INFO = "fail", "warn", "info"
_BENIGN_INFO = ("plugin-internal", "net-plugin-load", "sysfs-missing", "collnet", "gdrcopy", "unknown-warn")
#: families after which NCCL carries on, on a slower path (no RDMA, no GPUDirect, sockets): notes, not failures
FALLBACK = ("ibverbs-missing", "sysfs-missing", "gdr-disabled", "collnet", "gdrcopy", "ofi-no-efa", "shm-cleanup")


@dataclass
class LogFinding:
    """One thing the log shows, explained."""

    severity: str  # fail | warn | info
    title: str
    text: str  # what the log says (the message, where, how often)
    meaning: str = ""
    remedy: str = ""
    component: str | None = None
    family: str | None = None
    line: int | None = None
    consequences: list[str] = field(default_factory=list)
    debug_subsys: str | None = None
    refs: tuple[str, ...] = ()
    cause: bool = False  # a setting of the job that can by itself make it fail (shown before mere consequences)

    def render(self) -> str:
        out = f"{self.title}: {self.text}"
        if self.meaning:
            out += f" — {self.meaning}"
        if self.remedy:
            out += f". Remedy: {self.remedy}"
        if self.consequences:
            out += ". Follow-on (consequences of this): " + "; ".join(self.consequences)
        return out

    def to_json(self) -> dict:
        return {"severity": self.severity, "title": self.title, "text": self.text, "meaning": self.meaning,
                "remedy": self.remedy, "component": self.component, "family": self.family, "line": self.line,
                "consequences": list(self.consequences), "debug_subsys": self.debug_subsys, "refs": list(self.refs)}


# -- hosts ----------------------------------------------------------------------------------------------
def host_count(log: NcclLog) -> int | None:
    """How many hosts the job ran on, as the log shows it; None when it does not say. One host only on
    proof (NCCL's own nNodes, or a communicator whose every rank was seen on one host without network
    channels): an excerpt of one rank of a multi-node job shows one host name too."""
    if log.nodes is not None:
        return log.nodes
    addrs = {a for addrs in log.bootstrap.values() for a in addrs if a and _ip(a) is not None}
    if len(log.hosts) > 1 or len(addrs) > 1:
        return max(len(log.hosts), len(addrs))
    net = sum(n for k, n in log.transports.items() if k.startswith("NET/"))
    intra_off = any(log.env.get(v, "0").strip() not in ("0", "") for v in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"))
    if net and not intra_off:
        return 2  # ranks talk over the network: at least two hosts
    if len(log.hosts) == 1 and len(log.processes) > 1 and len(addrs) == 1 and not _talks_to_peers(log):
        only = _ip(next(iter(addrs)))
        if only is not None and netif.routable(str(only)) and only not in DOCKER_BRIDGE:
            return 1  # several processes bootstrapping from one routable address no other host can have
    whole = [c for c in log.comms.values() if c["nranks"] > 1 and len(c["ranks"]) == c["nranks"]]
    if whole and all(len(c["hosts"]) == 1 for c in whole) and len(log.hosts) == 1 and not _talks_to_peers(log):
        return 1
    return None


def _talks_to_peers(log: NcclLog) -> bool:
    """A failure that names a connection to another address or peer: no proof of a single host."""
    return any("onnect to " in e.text or "remote peer" in e.text for e in log.events)


# -- failures -------------------------------------------------------------------------------------------
def _fam(ev: Event) -> Family:
    return by_id().get(ev.family) or by_id()["unknown-warn"]


def _is_cause(ev: Event) -> bool:
    """A failure that can be the root: not an INFO line, not an error return, not a fallback NCCL carried on
    from, not a consequence."""
    fam = _fam(ev)
    if ev.kind in ("info", "returns") or _carried_on(ev):
        return False
    return fam.role in ("root", "either")


def _carried_on(ev: Event) -> bool:
    """A message of a fallback family after which NCCL carried on: no error return climbed from it (a sysfs path
    NCCL could not resolve is harmless for a virtual NIC, fatal for a GPU, whose error returns say so)."""
    return _fam(ev).id in FALLBACK and not ev.frames


def _order(ev: Event) -> tuple:
    fam = _fam(ev)
    weak = fam.role == "either" or fam.generic or ev.kind == "info"
    return (weak, fam.priority, ev.time or "~", ev.source or "", ev.line)


def _where(ev: Event) -> str:
    bits = [f"line {ev.line}"]
    if ev.source:
        bits.append(ev.source)
    if ev.host:
        bits.append(f"host {ev.host}")
    elif ev.rank:
        bits.append(ev.rank)
    if ev.time:
        bits.append(ev.time)
    if ev.count > 1:
        bits.append(f"x{ev.count}" + (f" on {len(ev.ranks)} processes" if len(ev.ranks) > 1 else ""))
    if ev.frames:
        bits.append(f"returned through {ev.frames} frames up to {ev.last_frame}")
    return ", ".join(bits)


def _short(ev: Event) -> str:
    return f"{ev.text[:160]} ({_where(ev)})"


def _failure_finding(root: Event, folded: list[Event], severity: str = FAIL) -> LogFinding:
    fam = _fam(root)
    kind = {"warn": "WARN", "info": "INFO", "oom": "CUDA", "timeout": "timeout", "framework": "framework"}.get(root.kind,
                                                                                                            root.kind)
    text = f"{kind} {root.text[:300]} ({_where(root)})"
    if root.where:
        text += f" [format: {root.where}]"
    cons = [_short(e) for e in folded[:12]]
    if len(folded) > 12:
        cons.append(f"{len(folded) - 12} more")
    return LogFinding(severity, fam.title, text, fam.meaning, fam.remedy, fam.component, fam.id, root.line, cons,
                      fam.subsys, fam.refs)


def _returns_note(returns: list[Event], rooted: bool) -> list[str]:
    if not returns:
        return []
    n = sum(e.frames for e in returns)
    if rooted:
        return [f"{n} further error returns without their WARN in the paste (the same failure climbing other "
                "threads)"]
    first = returns[0]
    return [f"error returns without a WARN in the paste (first at line {first.line}: {first.text[:100]}); the cause "
            "is in the lines before the paste began"]


def _straggler(log: NcclLog) -> str | None:
    """The rank behind the others in a watchdog timeout (lowest sequence number timed out or completed)."""
    seqs = {r: s for r, (s, _) in log.torch_seq.items()}
    done = log.torch_done
    source = done if len(set(done.values())) > 1 else seqs if len(set(seqs.values())) > 1 else None
    if not source:
        return None
    low = min(source.values())
    behind = sorted((r for r, v in source.items() if v == low), key=lambda x: int(x) if x.isdigit() else 0)
    if len(behind) == len(source):
        return None
    what = "last completed NCCL work" if source is done else "collective sequence number timed out"
    return (f"rank {', '.join(behind)} is behind the others ({what} {low} against up to {max(source.values())}): "
            "read that rank's log first; it stopped calling collectives or took another code path")


def _independent_causes(events: list[Event]) -> list[Event]:
    """The cause events that are not an echo: an "either" message after a cause in the same process is that
    cause's echo, so only the first one of a process stays (root families and lines of no process always stay)."""
    causes = [e for e in events if _is_cause(e)]
    first_cause_by_proc: dict[str, Event] = {}
    for e in sorted(causes, key=lambda e: (e.source or "", e.line)):
        key = (e.source or "") + (e.rank or e.host or "")
        if key and key in first_cause_by_proc and _fam(e).role == "either":
            continue
        first_cause_by_proc.setdefault(key, e)
    return [e for e in causes if _fam(e).role == "root" or e in first_cause_by_proc.values()
            or not (e.rank or e.host)]


def _rooted(causes: list[Event], consequences: list[Event], returns: list[Event]) -> list[LogFinding]:
    """The findings of a log that holds its cause: the root first with every consequence folded under it,
    then one finding per further family of causes (a warning when it may be an echo or NCCL carried on)."""
    ordered = sorted(causes, key=_order)
    root = ordered[0]
    folded = [e for e in consequences] + [e for e in ordered[1:] if _fam(e).id == root.family]
    f = _failure_finding(root, folded)
    f.consequences += _returns_note(returns, True)
    out = [f]
    seen = {root.family}
    for e in ordered[1:]:
        if e.family in seen:
            continue
        seen.add(e.family)
        sev = WARN if _fam(e).role == "either" or e.kind == "info" else FAIL
        out.append(_failure_finding(e, [x for x in ordered if x is not e and x.family == e.family], sev))
    return out


def _unrooted(log: NcclLog, consequences: list[Event], returns: list[Event]) -> LogFinding:
    """The finding of a log that holds only consequences: the strongest of them, with where the cause must be
    (the peer that closed the connection, or the other ranks' logs), the rank behind the others, and how to
    make NCCL print the cause."""
    ordered = sorted(consequences, key=lambda e: (_fam(e).priority, e.time or "~", e.line))
    root = ordered[0]
    f = _failure_finding(root, ordered[1:])
    f.title += " (the cause is not in this log)"
    peer = re.search(r"remote peer ([\w.\-:]+?)(?:<\d+>|$)", root.text)
    where = f"the log of {peer.group(1)} (the peer that closed the connection)" if peer else \
        "the logs of the other ranks"
    behind = _straggler(log)
    f.consequences += ([behind] if behind else []) + _returns_note(returns, False)
    f.remedy = (f"read {where} for the first failure; {f.remedy}" if f.remedy else f"read {where}")
    f.remedy += (f". To see it, rerun every rank with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={f.debug_subsys} "
                 "(NCCL_DEBUG_FILE=nccl.%h.%p keeps one file per process) and pass them all to --log")
    return f


def _returns_only(returns: list[Event]) -> LogFinding:
    """The finding of a paste that holds error returns and no WARN: the WARN that says why came before it."""
    return LogFinding(WARN, "error returns without their WARN", _returns_note(returns, False)[0],
                      "NCCL returned an error through these frames; the WARN that says why was printed "
                      "before the excerpt begins", "paste the log from its beginning, or rerun with "
                      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET", "nccl", "nccl-error-wrapper", returns[0].line,
                      debug_subsys="INIT,NET")


def failures(log: NcclLog) -> list[LogFinding]:
    """The failure findings, the first one the root with its consequences folded."""
    events = [e for e in log.events if e.kind != "returns"]
    returns = [e for e in log.events if e.kind == "returns"]
    causes = _independent_causes(events)
    consequences = [e for e in events if e not in causes and e.kind != "info" and not _carried_on(e)]
    if causes:
        return _rooted(causes, consequences, returns)
    if consequences:
        return [_unrooted(log, consequences, returns)]
    return [_returns_only(returns)] if returns else []


def notes(log: NcclLog) -> list[LogFinding]:
    """What NCCL fell back from and carried on (a WARN of a fallback family, an INFO line that reports a
    failure or a fallback): explained, after the failures."""
    out, seen = [], set()
    for e in log.events:
        fam = _fam(e)
        fallback = _carried_on(e) and e.kind != "returns"
        if not (fallback or e.kind == "info") or fam.generic or fam.id in seen:
            continue
        if e.kind == "info" and fam.id in _BENIGN_INFO:
            continue
        seen.add(fam.id)
        kind = "INFO" if e.kind == "info" else "WARN"
        out.append(LogFinding(WARN if fallback else INFO, f"{fam.title} ({kind}: NCCL carried on)",
                              f"{kind} {e.text[:200]} ({_where(e)})", fam.meaning, fam.remedy, fam.component, fam.id,
                              e.line, debug_subsys=fam.subsys, refs=fam.refs))
    return out[:8]


# -- what NCCL chose against the node ----------------------------------------------------------------------
def _rails_of(rec: object | None) -> str | None:
    settings = getattr(rec, "settings", None)
    return settings().get("NCCL_IB_HCA") if settings is not None else None


def _s(sev: str, title: str, text: str, remedy: str = "", component: str | None = None,
       cause: bool = False, family: str | None = None) -> LogFinding:
    """A finding on what NCCL chose; with ``family`` (a catalogue family, most of them derived ones) it carries
    that family's meaning, references and debug subsystems, and its remedy where none is given."""
    if family is None:
        return LogFinding(sev, title, text, remedy=remedy, component=component, cause=cause)
    fam = by_id()[family]
    return LogFinding(sev, title, text, fam.meaning, remedy or fam.remedy, component or fam.component, fam.id,
                      debug_subsys=fam.subsys, refs=fam.refs, cause=cause)


def _d_sockets(log: NcclLog, rec: object | None) -> list[LogFinding]:
    channel_lines = sum(n for k, n in log.transports.items() if k.startswith("NET/Socket"))
    rdma = any(k in ("IB", "RoCE") for k in log.net_devices.values())
    inferred = (log.network is None and not rdma and "Socket" in log.net_devices.values()
                and (log.no_ib_device or log.ibverbs_missing))
    if log.network != "Socket" and not channel_lines and not inferred:
        return []
    hosts = host_count(log)
    why = []
    if log.env.get("NCCL_IB_DISABLE", "0").strip() not in ("0", ""):
        why.append(f"NCCL_IB_DISABLE={log.env['NCCL_IB_DISABLE']} was set by the environment")
    if log.ibverbs_missing:
        why.append("libibverbs could not be opened (rdma-core missing, e.g. in the container)")
    if log.no_ib_device:
        why.append("NET/IB found no device" + (" (inside a container: /dev/infiniband not passed through?)"
                                              if not why else ""))
    seen = f" ({channel_lines} channel lines via NET/Socket)" if channel_lines else ""
    if hosts == 1:
        if not channel_lines:
            return [_s(INFO, "network between hosts: none needed", "all ranks run on one host: the socket network NCCL "
                       "selected carries no traffic here (ranks talk over NVLink, PCIe P2P or shared memory)")]
        off = [v for v in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE") if log.env.get(v, "0").strip() not in ("0", "")]
        return [_s(WARN, "ranks of one host talk over TCP sockets", f"all ranks run on one host, yet{seen} go over "
                   "NCCL's socket transport" + (f" because {' and '.join(off)} turned off the intra-node paths" if off
                                                else ""),
                   "on one host NVLink/PCIe P2P or shared memory carry the traffic; if a P2P problem made you turn "
                   "them off, fix the platform (ACS, IOMMU, driver) rather than keep sockets", "rank-config")]
    rails = _rails_of(rec)
    between = "between hosts" if hosts and hosts > 1 else "for traffic between hosts (the log does not show how many "\
        "hosts took part)"
    if rails:
        return [_s(WARN, "sockets although the node has RDMA rails", f"NCCL used sockets although the node has RDMA "
                   f"rails ({rails}){seen}: " + ("; ".join(why) if why else "check NCCL_IB_DISABLE, the rdma-core "
                                                 "libraries in the container, and /dev/infiniband"),
                   component="container", cause=True, family="sockets-between-hosts")]
    return [_s(WARN if hosts and hosts > 1 else INFO, "TCP sockets between hosts",
               f"NCCL sends {between} over TCP sockets{seen}" + (": " + "; ".join(why) if why else ""),
               family="sockets-between-hosts")]


def _d_plugin(log: NcclLog, rec: object | None) -> list[LogFinding]:
    out = []
    if log.network and log.network not in ("IB", "Socket"):
        out.append(_s(INFO, "network plugin", f"NCCL used the network plugin '{log.network}'" +
                      (f" ({', '.join(f'{k}: {v}' for k, v in log.plugins.items())})" if log.plugins else "")))
    elif log.plugins:
        out.append(_s(INFO, "network plugin present", ", ".join(f"{k}: {v}" for k, v in log.plugins.items())))
    if "found no device" in log.plugins.get("libfabric", ""):
        out.append(_s(WARN, "no EFA device", f"libfabric {log.plugins['libfabric']}: no EFA device reachable from this "
                      "process (in a container, pass the EFA devices /dev/infiniband/uverbs*), so aws-ofi-nccl cannot "
                      "carry NCCL's traffic", component="container", cause=True, family="ofi-no-efa"))
    return out


def _d_gdr(log: NcclLog, rec: object | None) -> list[LogFinding]:
    out = []
    plain = sum(n for k, n in log.transports.items() if k.startswith("NET/") and not k.endswith("/GDRDMA")
                and not k.startswith("NET/Socket"))
    if plain:
        out.append(_s(WARN, "no GPUDirect RDMA", f"{plain} inter-node channel lines run without GPUDirect RDMA (no "
                      "/GDRDMA): the NIC reads and writes host memory and each transfer is staged through it",
                      family="gdr-disabled"))
    for hca, on in sorted(log.gdr.items()):
        if not on:
            why = log.gdr_why.get(hca)
            out.append(_s(WARN, "GPUDirect RDMA disabled", f"GPUDirect RDMA disabled for {hca}" +
                          (f" ({why})" if why else "") + ": nvidia_peermem (or dma-buf support) missing, or the GPU "
                          "is too far from the NIC", family="gdr-disabled"))
    return out


def _ip(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return None  # empty, masked ("X.X.X.X") or cut


_CONTAINER_ID = re.compile(r"[0-9a-f]{12}")


def _docker_bridge(name: str, addr: str, log: NcclLog) -> bool:
    """An address on Docker's default bridge: in 172.17.0.0/16 on a container-side interface, with a sign of a
    container (Docker's hex host name, or the first addresses Docker hands out). An IPoIB or bonded interface,
    or a data-centre network that happens to use 172.17/16, is not one."""
    ip = _ip(addr)
    if ip is None or ip not in DOCKER_BRIDGE:
        return False
    if name.startswith(("ib", "bond", "team", "en", "mlx", "roce", "hsn")) and not name.startswith("eth"):
        return False
    containerish = any(_CONTAINER_ID.fullmatch(h) for h in log.hosts)
    return containerish or name == "docker0" or ip in ipaddress.IPv4Network("172.17.0.0/24")


def _iface_problems(kind: str, ifaces: dict, log: NcclLog) -> list[LogFinding]:
    """Interfaces that carry nothing between hosts: a warning when the log shows several hosts, a conditional
    note when it does not say (an excerpt of one host)."""
    several = (host_count(log) or 0) > 1
    sev = WARN if several else INFO
    cond = "" if several else "if the job spans several hosts, "
    out = []
    for name, addrs in sorted(ifaces.items()):
        addrs = [addrs] if isinstance(addrs, str) else sorted(addrs)
        why = netif.name_problem(name)
        bad = [a for a in addrs if _ip(a) is not None and not netif.routable(a)]
        chosen = _chosen_by_env(name, log)
        if why:
            out.append(_s(sev, f"{kind} interface not for traffic between hosts", f"{cond}{kind} interface {name}"
                          f"{chosen} is a {why}: it carries no traffic between hosts", cause=True,
                          family="iface-unreachable" if why == netif.LOOPBACK else "iface-virtual"))
        elif bad:
            out.append(_s(sev, f"{kind} interface without a routable address", f"{cond}{kind} interface {name}"
                          f"{chosen} has only a loopback or link-local address ({', '.join(bad)}): other hosts cannot "
                          "reach it", cause=True, family="iface-unreachable"))
        docker = [a for a in addrs if _docker_bridge(name, a, log)]
        if docker:
            out.append(_s(sev, f"{kind} address on Docker's bridge", f"{cond}{kind} address {', '.join(docker)} on "
                          f"{name} is in Docker's default bridge network (172.17.0.0/16): other hosts reach a container "
                          "on a bridge only through NAT (and every host's first container has the same address)",
                          cause=True, family="docker-bridge"))
    return out


def _chosen_by_env(name: str, log: NcclLog) -> str:
    """`` (NCCL_SOCKET_IFNAME=lo, set by the environment)`` when the job's own setting selected the interface."""
    from ccdiag.nccl.lists import parse_nccl_list

    value = log.env.get("NCCL_SOCKET_IFNAME")
    if not value:
        return ""
    spec = parse_nccl_list(value)
    return f" (NCCL_SOCKET_IFNAME={value}, set by the environment)" if spec.selects(name) else ""


def _d_interfaces(log: NcclLog, rec: object | None) -> list[LogFinding]:
    out = []
    if log.bootstrap:
        shown = "; ".join(f"{k} {', '.join(sorted(v)) or '?'}" for k, v in sorted(log.bootstrap.items()))
        out.append(_s(INFO, "bootstrap", f"bootstrap over {shown}"))
        firsts = sorted(set(log.bootstrap_by_host.values()))
        if len(firsts) > 1:
            per = ", ".join(f"{h}: {i}" for h, i in sorted(log.bootstrap_by_host.items())[:8])
            out.append(_s(WARN, "hosts bootstrap over different interfaces", f"hosts bootstrap over different "
                          f"interfaces ({per}): every host must reach the others' bootstrap addresses",
                          cause=True, family="bootstrap-iface-mismatch"))
    if host_count(log) == 1:
        return out  # on one host no interface carries traffic between hosts
    out += _iface_problems("bootstrap", log.bootstrap, log)
    socks = {n: a for n, a in log.socket_addresses.items() if n not in log.bootstrap}
    out += _iface_problems("socket", socks, log)
    return out


def _d_ib_hca(log: NcclLog, rec: object | None) -> list[LogFinding]:
    from ccdiag.nccl.lists import parse_nccl_list

    out = []
    if log.ib_hca:
        spec = parse_nccl_list(log.ib_hca)
        if not spec.exact:
            names = ", ".join(e.name for e in spec.entries)
            caught = _caught_by_prefix(spec, _node_nics(rec))
            here = (f"; on this node: {'; '.join(caught)}" if caught else " (mlx5_1 selects mlx5_10..mlx5_19)")
            out.append(_s(INFO, "NCCL_IB_HCA prefixes", f"NCCL_IB_HCA={log.ib_hca}: entries are prefixes ({names}): "
                          f"each also selects every HCA whose name starts with it{here}",
                          "write the list with '=' for exact names (unless the provider documents the prefix)"))
    soft = sorted(d.split(":")[0] for d in log.net_devices if d.startswith(("rxe", "siw")))
    if soft:
        out.append(_s(WARN, "software RDMA", f"{', '.join(soft)}: software RDMA (soft-RoCE/iWARP in the kernel, no NIC "
                      "offload, no GPUDirect RDMA): slower than sockets on most hosts",
                      "use the hardware HCA or sockets", "nic", family="soft-rdma-device"))
    rails = _rails_of(rec)
    used = {d.split(":")[0] for d, kind in log.net_devices.items() if kind in ("IB", "RoCE")}
    if rails and used:
        spec = parse_nccl_list(rails)
        extra = sorted(d for d in used if not spec.selects(d))
        if extra:
            out.append(_s(WARN, "NIC outside the compute rails", f"NCCL used {', '.join(extra)}, which is not a compute "
                          f"rail of this node ({rails})", component="rank-config"))
        unused = sorted({e.name for e in spec.entries} - used)
        if unused:
            out.append(_s(WARN, "rails unused", f"rails present on the node but unused by NCCL: {', '.join(unused)} "
                          "(NCCL_IB_HCA in the job, or ports down when the job started)", component="nic"))
    kinds = set(log.net_devices.values())
    if {"IB", "RoCE"} <= kinds:
        out.append(_s(WARN, "InfiniBand and RoCE together", "NCCL uses InfiniBand and RoCE ports together: " +
                      ", ".join(sorted(log.net_devices)), "restrict NCCL_IB_HCA to one link layer", "rank-config",
                      family="ib-incompatible-devices"))
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


#: workarounds users set to get past a platform problem: never advised away while the problem stands
WORKAROUNDS = {"NCCL_P2P_DISABLE": "GPU peer-to-peer does not work on this platform (ACS or the IOMMU sending P2P "
                                   "through the CPU, consumer GPUs, a driver bug)",
               "NCCL_SHM_DISABLE": "the shared-memory transport fails (/dev/shm too small in a container)",
               "NCCL_NVLS_ENABLE": "NVLink SHARP setup fails (Fabric Manager / NVSwitch state)",
               "NCCL_CUMEM_ENABLE": "cuMem memory sharing fails (containers, older drivers)",
               "NCCL_CUMEM_HOST_ENABLE": "cuMem host memory sharing fails (GPUs without P2P, no NUMA support)",
               "NCCL_IB_DISABLE": "InfiniBand/RoCE does not work (or is not wanted) for this job"}


def _d_env(log: NcclLog, rec: object | None) -> list[LogFinding]:
    from ccdiag.nccl.recommend import debugging_reason

    out = []
    for var, value in sorted(log.env.items()):
        off = value.strip() in ("1", "0") and var in WORKAROUNDS and (
            value.strip() == "1" if var.endswith("DISABLE") else value.strip() == "0")
        if off:
            out.append(_s(INFO, "workaround set", f"{var}={value} was set by the environment: a workaround for "
                          f"{WORKAROUNDS[var]}", "keep it while the job needs it; fix the cause (`ccdiag check` on the "
                          "node) and only then remove it, checking the job no longer hangs or fails", "rank-config"))
            continue
        why = debugging_reason(var) if var != "NCCL_IB_DISABLE" else None
        if why:
            out.append(_s(INFO, "debugging variable set", f"{var}={value} was set by the environment: a debugging "
                          f"variable ({why})", "remove it from production jobs unless the provider documents it for "
                          "this instance type (`ccdiag nccl` on the node says)", "rank-config"))
    return out


def _d_agree(log: NcclLog, rec: object | None) -> list[LogFinding]:
    """Versions or settings that differ between the ranks (several files, or several hosts in one)."""
    out = []
    if len(log.versions) > 1:
        per = "; ".join(f"{v}: {', '.join(sorted(h)[:4]) or '?'}" for v, h in sorted(log.versions.items()))
        out.append(_s(FAIL, "NCCL versions differ between ranks", f"ranks run different NCCL versions ({per})",
                      "run one NCCL version on every rank (one image, one LD_LIBRARY_PATH)", "rank-config", cause=True,
                      family="version-mismatch"))
    plugins: dict[str, set] = {}
    for host, kind in log.net_plugin_by_host.items():
        plugins.setdefault(kind, set()).add(host)
    if len(plugins) > 1:
        per = "; ".join(f"{'the internal one' if k == 'internal' else k} on {', '.join(sorted(h)[:4])}"
                        for k, h in sorted(plugins.items()))
        out.append(_s(WARN, "network plugin differs between hosts", f"hosts load different network plugins ({per}): "
                      "ranks on different plugins use different networks and cannot connect",
                      "install the same NCCL network plugin on every host (or none), or point NCCL_NET_PLUGIN at the "
                      "same one everywhere", cause=True, family="setting-mismatch"))
    for var, values in sorted(log.env_by_host.items()):
        if len(values) > 1:
            per = "; ".join(f"{val!r} on {', '.join(sorted(h)[:4]) or '?'}" for val, h in sorted(values.items()))
            out.append(_s(WARN, "setting differs between ranks", f"{var} differs between ranks: {per}",
                          "set NCCL variables identically on every rank (collective mismatches and hangs follow "
                          "from differing NCCL_PROTO/NCCL_ALGO/NCCL_IB_* settings)", "rank-config", cause=True,
                          family="setting-mismatch"))
    return out


def _d_comms_nvls(log: NcclLog, rec: object | None) -> list[LogFinding]:
    out = []
    if len(log.comms) > 1:
        out.append(_s(INFO, "communicators", f"{len(log.comms)} communicators in this log, read apart: " + "; ".join(
            f"{k}: {v['nranks']} ranks ({len(v['ranks'])} seen)" for k, v in list(log.comms.items())[:8])))
    off = sorted(d for d, on in log.nvls.items() if not on)
    if off:
        out.append(_s(INFO, "NVLS not available", f"NVLink SHARP (NVLS) multicast not available on CUDA devices "
                      f"{', '.join(map(str, off))}: no NVSwitch multicast (not an NVSwitch system, or Fabric "
                      "Manager/IMEX not ready)"))
    return out


_CONNECT_TO = re.compile(r"[Cc]onnect to ([0-9A-Fa-f:.%\w\-]+?)<\d+>")


def _d_targets(log: NcclLog, rec: object | None) -> list[LogFinding]:
    """A failed connect whose target no other host can reach (link-local, loopback)."""
    out = []
    for e in log.failures:
        m = _CONNECT_TO.search(e.text)
        if m and _ip(m.group(1)) is not None and not netif.routable(m.group(1)):
            out.append(_s(WARN, "connection to an unreachable address", f"the failed connection went to {m.group(1)}, "
                          "a link-local or loopback address: the interface NCCL picked has no address other hosts can "
                          "reach", cause=True, family="iface-unreachable"))
    return out


def _d_subsys(log: NcclLog, rec: object | None, found: list[LogFinding]) -> list[LogFinding]:
    """When the log lacks the lines that would decide the failure, which NCCL_DEBUG_SUBSYS shows them."""
    fails = [f for f in found if f.severity == FAIL and f.family]
    if not fails:
        return []
    has_init = bool(log.bootstrap or log.net_devices or log.network or log.comms)
    if has_init and log.version:
        return []
    want = fails[0].debug_subsys or "INIT,NET"
    missing = [w for w, ok in (("the NCCL version", log.version), ("the init lines (network, bootstrap, devices)",
                                                                   has_init)) if not ok]
    return [_s(INFO, "lines missing to decide", f"this log lacks {' and '.join(missing)}",
               f"rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={want} (and NCCL_DEBUG_FILE=nccl.%h.%p for one file per "
               "process; pass them all, or their directory, to --log)")]


_DIFFS = (_d_sockets, _d_plugin, _d_gdr, _d_interfaces, _d_ib_hca, _d_env, _d_agree, _d_comms_nvls, _d_targets)


def diagnose(log: NcclLog, rec: object | None = None) -> list[LogFinding]:
    """The root failure first, explained, its consequences folded beneath; when the log holds no cause but
    a setting of the job that can make it fail (a loopback or container bootstrap interface, hosts on
    different interfaces, versions or settings that differ between ranks), that setting comes before the
    consequences; then what NCCL fell back from, then what it chose against the node's facts (``rec``)."""
    fails = failures(log)
    config: list[LogFinding] = []
    for rule in _DIFFS:
        config += rule(log, rec)
    rooted = any(f.family and f.severity == FAIL and "not in this log" not in f.title for f in fails)
    causing = [f for f in config if f.cause and f.severity in (WARN, FAIL)]
    if rooted and fails[0].family in _CONNECTING:
        fails, causing = _fold_under_interface(fails, causing)
    elif fails and not rooted and fails[0].family == "nccl-error-wrapper":
        # error returns whose WARN is not in the paste explain nothing: a setting the log shows comes first,
        # even one that matters only if the job spans several hosts
        causing += [f for f in config if f.cause and f.severity == INFO]
    placed = {id(f) for f in fails + causing}
    rest = [f for f in config if id(f) not in placed]
    found = (fails + causing if rooted else causing + fails) + notes(log) + rest
    found += _d_subsys(log, rec, found)
    return found


#: failures of a connection between ranks: the consequence of an interface no other host reaches, when there is one
_CONNECTING = ("connect-failed", "connection-closed", "socket-internal")
_INTERFACE = ("iface-unreachable", "iface-virtual", "docker-bridge", "bootstrap-iface-mismatch")


def _fold_under_interface(fails: list[LogFinding], causing: list[LogFinding]) -> tuple[list, list]:
    """A refused or aborted connection on a log that also shows an interface other hosts cannot reach: the
    interface is the cause and the failed connection its consequence (folded beneath it, as NCCL's own echoes
    are folded under their root)."""
    iface = next((f for f in causing if f.family in _INTERFACE), None)
    if iface is None:
        return fails, causing
    first = fails[0]
    iface.severity = FAIL
    iface.consequences = [f"{first.title}: {first.text[:300]}"] + first.consequences + iface.consequences
    return [iface] + fails[1:], [f for f in causing if f is not iface]


def compare(log: NcclLog, rec: object | None) -> list[str]:
    """Each finding as one line of text (failures first)."""
    return [f.render() for f in diagnose(log, rec)]


__all__ = ["LogFinding", "compare", "diagnose", "failures", "host_count"]
