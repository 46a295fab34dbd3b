"""InfiniBand / RoCE health: port state, rate and width, error counters over the window, link flaps
from the kernel log, RoCE v2 GIDs, and whether GPUDirect RDMA can be used (peermem, GPU-NIC path).

Rules and thresholds: a port must be ACTIVE/LinkUp (Polling means no link partner); error counters
are judged by their increase over the window (symbol errors alone are noise unless link recoveries
rise with them; more than 10/s is "excessive" per linux-rdma/rdma-core infiniband-diags
IBswcountlimits.pm); repeated link-down events within the window mean a flapping link
(Azure/azurehpc-health-checks azure_ib_link_flapping.nhc fails at 5 in 24 h).
"""

from __future__ import annotations

from typing import Any, Iterable

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import counter_delta, gate, gpu_ids, node_component, policy_source, second_sample
from ccdiag.core.findings import FAIL, PASS, SKIP, STATUS_RANK, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.readings import normalize_bdf
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_KMSG, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE, PROBE_SYSTEM
from ccdiag.topology.levels import UNKNOWN as UNKNOWN_LEVEL
from ccdiag.topology.levels import gpudirect_capable, level_rank

IB_SYS = "/sys/class/infiniband"

#: rate above which an error counter is "excessive" (rdma-core infiniband-diags IBswcountlimits.pm)
EXCESSIVE_PER_S = 10.0
#: link-down events within the window that make a flap a failure (Azure azure_ib_link_flapping.nhc: 5 / 24 h)
FLAPS_FAIL = 5
#: modules that give the RDMA stack access to GPU memory
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def port_path(dev: str, port: int, attr: str) -> str:
    return f"{IB_SYS}/{dev}/ports/{port}/{attr}"


def port_component(dev: Any, port: Any) -> Component:
    return Component("ib_port", f"{dev.name} port {port.port}", bdf=normalize_bdf(dev.pci_bdf),
                     device=dev.name, port=port.port)


def all_ports(ib: Any) -> list[tuple[Any, Any]]:
    return [(d, p) for d in getattr(ib, "devices", ()) or () for p in d.ports]


def is_active(port: Any) -> bool:
    return (port.state or "").upper() == "ACTIVE"


def _worst(statuses: Iterable[str]) -> str:
    return min(statuses, key=lambda s: STATUS_RANK[s], default=PASS)


def _ib_or_skip(ctx: CheckContext, check_id: str, what: str) -> tuple[Any, Finding | None]:
    """The IB observation when it has ports (the framework already gated on the probe), else a skip."""
    ib = ctx.infiniband
    if not all_ports(ib):
        return None, Finding(check_id, SKIP, node_component(), f"{what}: no InfiniBand/RoCE ports")
    return ib, None


# ---------------------------------------------------------------- port state

_STATE_REMEDY = {
    "polling": "The port is enabled but finds no link partner: cable unplugged or faulty, transceiver not "
               "seated, or the switch/peer port is down. Check the cable at both ends and the switch port; "
               "replace the cable if the port stays Polling.",
    "disabled": "The port is administratively disabled (here or on the switch side). Enable it from the "
                "fabric manager/switch (`ibportstate` / UFM), or for RoCE bring the netdev up "
                "(`ip link set <netdev> up`).",
    "sleep": "The port is asleep: check the cable and the switch port configuration.",
    "portconfigurationtraining": "The link is stuck in training: reseat or replace the cable/transceiver.",
    "linkerrorrecovery": "The link is recovering from errors: reseat or replace the cable; check ib.counters.",
}
_NO_SM = ("The physical link is up but the port was not activated: no subnet manager configured it. "
          "Check that the subnet manager (opensm or UFM) is running and sees this port.")


def _worse_later(ctx: CheckContext, dev: Any, port: Any) -> Any:
    """The port as the window's second sample saw it when it went down there: a port that fails
    in any sample fails the check."""
    later = ctx.later_data(PROBE_INFINIBAND)
    for d in getattr(later, "devices", ()) or ():
        if d.name != dev.name:
            continue
        lp = next((x for x in d.ports if x.port == port.port), None)
        if lp is not None and is_active(port) and not is_active(lp) and lp.state is not None:
            return lp
    return port


@check("ib.port_state", needs=(PROBE_INFINIBAND,), what="IB port state")
def port_state(ctx: CheckContext) -> list[Finding]:
    """Every port ACTIVE with the physical link up; Polling/Disabled/INIT named with their cause."""
    ib, skip = _ib_or_skip(ctx, "ib.port_state", "IB port state")
    if skip:
        return [skip]
    out: list[Finding] = []
    active = 0
    for dev, p in all_ports(ib):
        p = _worse_later(ctx, dev, p)
        comp = port_component(dev, p)
        ev = (Evidence("state", f"{p.state_code}: {p.state}" if p.state_code is not None else p.state,
                       port_path(dev.name, p.port, "state")),
              Evidence("phys_state", f"{p.phys_state_code}: {p.phys_state}" if p.phys_state_code is not None
                       else p.phys_state, port_path(dev.name, p.port, "phys_state")))
        if p.state is None and p.phys_state is None:
            out.append(Finding("ib.port_state", UNKNOWN if p.errors else SKIP, comp,
                               f"{comp.name}: state not readable",
                               tuple(Evidence("read error", e.message or e.kind, e.source) for e in p.errors)))
            continue
        phys = (p.phys_state or "").replace(" ", "").lower()
        phys_up = phys in ("", "linkup") or p.phys_state_code == 5
        if is_active(p) and phys_up:
            active += 1
            out.append(Finding("ib.port_state", PASS, comp, f"{comp.name} ACTIVE, LinkUp ({p.link_layer or '?'})",
                               ev, expected="ACTIVE / LinkUp", expected_source="InfiniBand port state machine"))
            continue
        if phys == "linkup":
            remedy = _NO_SM if (p.link_layer or "InfiniBand") == "InfiniBand" else \
                "The link is up but the port is not ACTIVE: check the netdev and the RDMA driver state."
        else:
            remedy = _STATE_REMEDY.get(phys, "The port has no working link: check the cable, the transceiver "
                                             "and the switch port; `ibstat` shows the same state.")
        out.append(Finding("ib.port_state", FAIL, comp,
                           f"{comp.name} is {p.state or '?'} / {p.phys_state or '?'}"
                           + (f" ({', '.join(dev.netdevs)})" if dev.netdevs else ""),
                           ev, expected="ACTIVE / LinkUp", expected_source="InfiniBand port state machine",
                           remedy=remedy))
    want = ctx.policy.expected_ib_ports
    if want is not None and active < want:
        out.append(Finding("ib.port_state", FAIL, node_component("IB ports"),
                           f"{active} active IB/RoCE ports, the fleet expects {want}",
                           (Evidence("active ports", active, f"{IB_SYS}/*/ports/*/state"),),
                           expected=str(want), expected_source=policy_source(ctx, "expected_ib_ports"),
                           remedy="Bring the missing ports up (see the other ib.port_state findings) or "
                                  "check that every HCA is detected (`ibstat`, `lspci`)."))
    return out


# ---------------------------------------------------------------- rate / width

def _model(dev: Any, port: Any) -> tuple:
    return (dev.hca_type, dev.board_id, port.link_layer)


def _best_by_model(ports: list) -> tuple[dict[tuple, float], dict[tuple, int]]:
    """The best rate and width among the active ports of each HCA model (and link layer)."""
    best_rate: dict[tuple, float] = {}
    best_width: dict[tuple, int] = {}
    for d, p in ports:
        k = _model(d, p)
        if p.rate_gbit_s is not None:
            best_rate[k] = max(best_rate.get(k, 0.0), p.rate_gbit_s)
        if p.width is not None:
            best_width[k] = max(best_width.get(k, 0), p.width)
    return best_rate, best_width


def _rate_issues(ctx: CheckContext, d: Any, p: Any, best: tuple[dict, dict],
                 has_ib: bool) -> list[tuple[str, str, str, str]]:
    """(status, text, expected, expected_source) of what is wrong with one active port's rate."""
    best_rate, best_width = best
    k = _model(d, p)
    is_ib = (p.link_layer or "InfiniBand") == "InfiniBand"
    want = ctx.policy.ib_rate_gbit_s
    issues: list[tuple[str, str, str, str]] = []
    if is_ib and p.width is not None and p.width < 4:
        if best_width.get(k, 0) >= 4:
            issues.append((FAIL, f"trained at {p.width}X while other ports of this model run at "
                           f"{best_width[k]}X: lanes failed", f"{best_width[k]}X",
                           "other ports of the same HCA model"))
        else:
            issues.append((WARN, f"running at {p.width}X width (InfiniBand ports are 4X); a split "
                           "cable (HDR100/NDR200) does this on purpose, a failed lane does it by accident",
                           "4X", "InfiniBand port width"))
    if best_rate.get(k, 0.0) > p.rate_gbit_s:
        issues.append((FAIL if is_ib else WARN,
                       f"{p.rate_gbit_s:g} Gb/s while other ports of this model run at {best_rate[k]:g} Gb/s",
                       f"{best_rate[k]:g} Gb/s", "other ports of the same HCA model"))
    if want is not None and (is_ib or not has_ib) and p.rate_gbit_s < want:
        issues.append((FAIL, f"{p.rate_gbit_s:g} Gb/s is below the fleet minimum {want:g} Gb/s",
                       f"{want:g} Gb/s or more", policy_source(ctx, "ib_rate_gbit_s")))
    return issues


def _rate_finding(ctx: CheckContext, d: Any, p: Any, best: tuple[dict, dict], has_ib: bool) -> Finding:
    comp = port_component(d, p)
    ev = (Evidence("rate", p.rate_raw or (f"{p.rate_gbit_s:g} Gb/sec" if p.rate_gbit_s else None),
                   port_path(d.name, p.port, "rate")),)
    if p.rate_gbit_s is None:
        return Finding("ib.rate", UNKNOWN if p.errors else SKIP, comp, f"{comp.name}: rate not readable", ev)
    issues = _rate_issues(ctx, d, p, best, has_ib)
    if not issues:
        return Finding("ib.rate", PASS, comp, f"{comp.name} at {p.rate_raw or p.rate_gbit_s}", ev,
                       expected=f"{best[0].get(_model(d, p), p.rate_gbit_s):g} Gb/s",
                       expected_source="ports of the same HCA model")
    status = _worst(s for s, *_ in issues)
    first = next(i for i in issues if i[0] == status)
    return Finding(
        "ib.rate", status, comp, f"{comp.name}: " + "; ".join(t for _, t, *_ in issues), ev,
        expected=first[2], expected_source=first[3],
        remedy="Check the cable and transceiver (`mlxlink -d <dev> -m` shows lanes and errors); reseat or "
               "replace it. If the lower width/rate is intended (split cable), set ib_rate_gbit_s in the policy.",
        details={"width": p.width, "speed": p.speed_name})


@check("ib.rate", needs=(PROBE_INFINIBAND,), what="IB port rate")
def rate(ctx: CheckContext) -> list[Finding]:
    """Active ports at full width (4X on InfiniBand), at the rate of their siblings and the policy."""
    ib, skip = _ib_or_skip(ctx, "ib.rate", "IB port rate")
    if skip:
        return [skip]
    ports = [(d, p) for d, p in all_ports(ib) if is_active(p)]
    if not ports:
        return [Finding("ib.rate", SKIP, node_component(), "no active IB/RoCE port to judge the rate of")]
    best = _best_by_model(ports)
    has_ib = any((p.link_layer or "InfiniBand") == "InfiniBand" for _, p in ports)
    return [_rate_finding(ctx, d, p, best, has_ib) for d, p in ports]


# ---------------------------------------------------------------- error counters

#: counters judged over the window, with what their increase means (rdma-core IBswcountlimits.pm)
COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "excessive_buffer_overrun_errors", "local_link_integrity_errors")


def _judge_counters(grew: dict[str, int], window_s: float, min_warn: int) -> list[tuple[str, str]]:
    """(status, reason) for each counter increase; empty when nothing matters."""
    out: list[tuple[str, str]] = []
    per_s = {k: v / window_s if window_s > 0 else float(v) for k, v in grew.items()}
    if grew.get("link_downed", 0) > 0:
        out.append((FAIL, f"link went down {grew['link_downed']} time(s) during the window"))
    if grew.get("link_error_recovery", 0) > 0:
        if grew.get("symbol_error", 0) > 0:
            out.append((FAIL, "symbol errors with link recoveries: a bad link (cable/transceiver)"))
        else:
            out.append((WARN, f"{grew['link_error_recovery']} link error recoveries"))
    elif grew.get("symbol_error", 0) > 0 and per_s["symbol_error"] > EXCESSIVE_PER_S:
        out.append((WARN, f"symbol errors at {per_s['symbol_error']:.1f}/s (excessive above {EXCESSIVE_PER_S:g}/s)"))
    for name, what in (("port_rcv_errors", "received packets with errors: a bad link, check the cable"),
                       ("local_link_integrity_errors", "local link integrity errors: a bad link")):
        v = grew.get(name, 0)
        if v >= min_warn:
            out.append((FAIL if per_s[name] > EXCESSIVE_PER_S else WARN, f"{v} {what}"))
    v = grew.get("excessive_buffer_overrun_errors", 0)
    if v >= min_warn:
        out.append((WARN, f"{v} buffer overruns (flow-control errors, often caused by physical errors)"))
    return out


def _unreadable_counters(d: Any, p: Any, p2: Any) -> Finding | None:
    """``unknown`` when not one error counter could be read in both samples (every file refused,
    not provided, or garbage): a port whose counters say nothing must not pass. Names what failed."""
    if any(k in p.counters and k in p2.counters for k in COUNTERS):
        return None
    comp = port_component(d, p)
    failed = [e for e in (*p.errors, *p2.errors) if "/counters/" in e.source or e.source.endswith("/counters")]
    ev = tuple(Evidence(e.source.rsplit("/", 1)[-1], f"{e.kind}: {e.message}", e.source) for e in failed[:8])
    why = ", ".join(sorted({f"{e.source.rsplit('/', 1)[-1]} ({e.kind})" for e in failed})) or "no error counter files"
    return Finding("ib.counters", UNKNOWN, comp, f"{comp.name}: no error counter could be read: {why}", ev,
                   expected=f"readable {', '.join(COUNTERS)}",
                   remedy="Read the counters as root (`perfquery` or `cat /sys/class/infiniband/<dev>/ports/<n>/"
                          "counters/*`); 'N/A (no PMA)' means the port's management agent does not provide them.")


@check("ib.counters", needs=(PROBE_INFINIBAND,), what="IB error counters")
def counters(ctx: CheckContext) -> list[Finding]:
    """Port error counters by their increase over the window; lifetime totals are never a verdict."""
    ib, skip = _ib_or_skip(ctx, "ib.counters", "IB error counters")
    if skip:
        return [skip]
    nonzero = {f"{d.name}:{p.port}": {k: (p.counters or {}).get(k) for k in COUNTERS
                                       if (p.counters or {}).get(k)}
               for d, p in all_ports(ib) if any((p.counters or {}).get(k) for k in COUNTERS)}
    later, no_window = second_sample(ctx, PROBE_INFINIBAND, "ib.counters", "IB error counters", nonzero)
    if no_window:
        return [no_window]
    after = {(d.name, p.port): p for d, p in all_ports(later)}
    out: list[Finding] = []
    for d, p in all_ports(ib):
        comp = port_component(d, p)
        p2 = after.get((d.name, p.port))
        if p.counters is None or p2 is None or p2.counters is None:
            out.append(Finding("ib.counters", SKIP if not p.errors else UNKNOWN, comp,
                               f"{comp.name}: counters not readable in both samples"))
            continue
        unreadable = _unreadable_counters(d, p, p2)
        if unreadable is not None:
            out.append(unreadable)
            continue
        grew = {k: dv for k in COUNTERS
                for dv in [counter_delta(p.counters.get(k), p2.counters.get(k))] if dv}
        ev = tuple(Evidence(k, {"before": p.counters.get(k), "after": p2.counters.get(k)},
                            port_path(d.name, p.port, f"counters/{k}")) for k in grew)
        verdicts = _judge_counters(grew, ctx.window_s, max(1, ctx.policy.ib_error_rate_warn))
        if not verdicts:
            note = f" (counters that rose without meaning a fault: {', '.join(grew)})" if grew else ""
            out.append(Finding("ib.counters", PASS, comp,
                               f"{comp.name}: no error counter increase that matters in {ctx.window_s:g}s{note}", ev))
            continue
        status = _worst(s for s, _ in verdicts)
        out.append(Finding(
            "ib.counters", status, comp,
            f"{comp.name} in {ctx.window_s:g}s: " + "; ".join(r for _, r in verdicts), ev,
            expected="no increase", expected_source="rdma-core IBswcountlimits (counter meanings and 10/s rate)",
            remedy="Check and reseat/replace the cable and transceiver of this port (`mlxlink -d <dev> -c` shows "
                   "the physical counters); if the errors follow the switch port, involve the fabric team."))
    return out


# ---------------------------------------------------------------- link flaps (kernel log)

def _flap_target(ib: Any, netdev: Any, event: Any) -> tuple[Any, Any] | None:
    """The RDMA device (and port, when known) a link event belongs to, by device name, netdev or
    PCI address; None for links of other NICs (a management Ethernet port is not this check's)."""
    names = {i.name: i.ib_device for i in getattr(netdev, "interfaces", ()) or () if i.ib_device}
    dev = None
    for d in ib.devices:
        if event.device and (event.device == d.name or event.device in d.netdevs
                             or names.get(event.device) == d.name):
            dev = d
            break
        if event.bdf and normalize_bdf(d.pci_bdf) == event.bdf:
            dev = d
    if dev is None:
        return None
    port = None
    if event.port is not None and event.device == dev.name:  # "mlx5_core ... mlx5_4: Port: 1 Link DOWN"
        port = next((p for p in dev.ports if p.port == event.port), None)
    if port is None and len(dev.ports) == 1:
        port = dev.ports[0]
    return dev, port


@check("ib.link_flaps", needs=(PROBE_INFINIBAND,), uses=(PROBE_KMSG,), what="IB link flaps")
def link_flaps(ctx: CheckContext) -> list[Finding]:
    """Link-down events for RDMA ports in the kernel log within the policy window."""
    ib, skip = _ib_or_skip(ctx, "ib.link_flaps", "IB link flaps")
    if skip:
        return [skip]
    gated = gate(ctx, "ib.link_flaps", "IB link flaps (kernel log)", probes=(PROBE_KMSG,))
    if gated:
        return [gated]
    from ccdiag.checks.xid import kernel_log

    km, events, _arrived, uptime = kernel_log(ctx)  # both reads of a --window run: the whole window
    window = ctx.policy.xid_window_s
    recent = []
    for e in events:
        if e.kind != "ib_link_down":
            continue
        if uptime is not None and e.time_s is not None and uptime - e.time_s > window:
            continue
        recent.append(e)
    if not recent:
        return [Finding("ib.link_flaps", PASS, node_component("IB links"),
                        f"no IB/RoCE link-down events in the kernel log within {window / 3600:g} h",
                        expected="no link-down events", expected_source="policy xid_window_s")]
    netdev = ctx.data(PROBE_NETDEV)
    groups: dict[tuple[str, int | None], tuple[Component, list[Any]]] = {}
    for e in recent:
        target = _flap_target(ib, netdev, e)
        if target is None:
            continue
        d, p = target
        comp = port_component(d, p) if p is not None else Component(
            "ib_port", d.name, bdf=normalize_bdf(d.pci_bdf), device=d.name)
        groups.setdefault((d.name, comp.port), (comp, []))[1].append(e)
    if not groups:
        return [Finding("ib.link_flaps", PASS, node_component("IB links"),
                        f"no IB/RoCE link-down events in the kernel log within {window / 3600:g} h "
                        f"({len(recent)} on other interfaces)",
                        expected="no link-down events", expected_source="policy xid_window_s")]
    out: list[Finding] = []
    for _key, (comp, events) in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        n = len(events)
        out.append(Finding(
            "ib.link_flaps", FAIL if n >= FLAPS_FAIL else WARN, comp,
            f"{comp.name}: link went down {n} time(s) within {window / 3600:g} h",
            tuple(Evidence("kernel log", e.message, f"{km.source or 'kernel log'} @ {e.time_s}")
                  for e in events[:5]),
            expected="no link-down events",
            expected_source=f"{FLAPS_FAIL}+ in the window fail (Azure HPC health checks)",
            remedy="A flapping link drops NCCL/RDMA connections: check the cable/transceiver and the switch port "
                   "logs; replace the cable if flaps continue.",
            details={"count": n}))
    return out


# ---------------------------------------------------------------- RoCE GIDs

def _zero_gid(gid: str) -> bool:
    return not gid.replace(":", "").strip("0")


@check("ib.roce_gid", needs=(PROBE_INFINIBAND,), what="RoCE GIDs")
def roce_gid(ctx: CheckContext) -> list[Finding]:
    """Every active RoCE (Ethernet link layer) port has a routable RoCE v2 GID."""
    ib, skip = _ib_or_skip(ctx, "ib.roce_gid", "RoCE GIDs")
    if skip:
        return [skip]
    roce = [(d, p) for d, p in all_ports(ib) if (p.link_layer or "").lower() == "ethernet"]
    if not roce:
        return [Finding("ib.roce_gid", SKIP, node_component(), "no RoCE (Ethernet link layer) ports")]
    out: list[Finding] = []
    for d, p in roce:
        comp = port_component(d, p)
        if not is_active(p):
            out.append(Finding("ib.roce_gid", SKIP, comp, f"{comp.name} is not active (see ib.port_state)"))
            continue
        v2 = [g for g in p.gids if g.gid and not _zero_gid(g.gid) and "v2" in (g.type or "").lower()]
        routable = [g for g in v2 if not g.gid.lower().startswith("fe80")]
        src = port_path(d.name, p.port, "gid_attrs/types/*")
        if routable:
            out.append(Finding("ib.roce_gid", PASS, comp,
                               f"{comp.name}: RoCE v2 GID index {routable[0].index} ({routable[0].gid})",
                               (Evidence("RoCE v2 GIDs", [g.index for g in routable], src),)))
            continue
        if not p.gids:
            # no GID read at all (gids/ absent or refused): nothing to judge, never a missing RoCE v2 GID
            gid_dir = port_path(d.name, p.port, "gids")
            ev = tuple(Evidence("read error", e.message or e.kind, e.source) for e in p.errors) or \
                (Evidence("gids", "absent or empty", gid_dir),)
            out.append(Finding("ib.roce_gid", UNKNOWN, comp, f"{comp.name}: GID table not readable ({gid_dir})", ev,
                               remedy="Read the GID table on the node itself (`show_gids`); a container may not "
                                      "expose gids/ and gid_attrs/."))
            continue
        netdevs = ", ".join(d.netdevs) or "its netdev"
        if v2:
            out.append(Finding(
                "ib.roce_gid", WARN, comp,
                f"{comp.name}: only link-local RoCE v2 GIDs; no IP address on {netdevs}",
                (Evidence("RoCE v2 GIDs", [g.gid for g in v2], src),),
                expected="a RoCE v2 GID built from an IPv4/IPv6 address",
                expected_source="NCCL GID auto-selection (NCCL_IB_ADDR_FAMILY, default IPv4)",
                remedy=f"Assign the fabric IP address to {netdevs}; the kernel then adds a RoCE v2 GID for it."))
            continue
        out.append(Finding(
            "ib.roce_gid", FAIL, comp, f"{comp.name}: no RoCE v2 GID ({len(p.gids)} GIDs, none of type RoCE v2)",
            (Evidence("GID types", sorted({g.type or '?' for g in p.gids}), src),),
            expected="a RoCE v2 GID", expected_source="NCCL_IB_ROCE_VERSION_NUM default 2",
            remedy=f"Assign an IP address to {netdevs} and check the RoCE mode (`cma_roce_mode -d {d.name} "
                   f"-p {p.port}` should say RoCE v2); NCCL needs a RoCE v2 GID to connect."))
    return out


# ---------------------------------------------------------------- GPUDirect RDMA

def _gpu_count(ctx: CheckContext) -> int:
    nvml = ctx.data(PROBE_NVML)
    if nvml is not None and nvml.gpus:
        return len(nvml.gpus)
    pcie = ctx.data(PROBE_PCIE)
    return sum(1 for d in getattr(pcie, "devices", ()) or () if d.kind == "gpu")


def _rdma_nic_keys(ib: Any) -> set[str]:
    """Every name or BDF by which a NIC with an active RDMA port may appear in the topology."""
    keys: set[str] = set()
    for d in ib.devices:
        if any(is_active(p) for p in d.ports):
            keys.add(d.name)
            keys.update(d.netdevs)
            if d.pci_bdf:
                keys.add(normalize_bdf(d.pci_bdf) or d.pci_bdf)
    return keys


def _nic_name(nic: Any) -> str:
    return getattr(nic, "label", None) or str(nic)


def _affinity(ctx: CheckContext, ib: Any) -> list[Finding]:
    topo = ctx.topology
    if topo is None:
        return [Finding("ib.gpudirect", UNKNOWN, node_component(),
                        "GPU-to-NIC path levels not judged: no topology was built")]
    keys = _rdma_nic_keys(ib)
    ids = gpu_ids(ctx)
    out: list[Finding] = []
    for g in topo.gpus():
        label = getattr(g, "label", None) or f"GPU{getattr(g, 'index', '?')}"
        bdf = normalize_bdf(getattr(g, "bdf", None))
        gid = ids.get(bdf) if bdf else None
        uuid = getattr(g, "uuid", None) or (gid.uuid if gid else None)
        comp = Component("gpu", label, gpu=getattr(g, "index", None), uuid=uuid, bdf=bdf)
        every = list(topo.nearest_nics(label) or [])
        rdma = [(n, lv) for n, lv in every
                if _nic_name(n) in keys or normalize_bdf(getattr(n, "bdf", None)) in keys]
        near = rdma or every
        if not near:
            out.append(Finding("ib.gpudirect", SKIP, comp, f"{label}: no NIC in the topology"))
            continue
        nic, level = min(near, key=lambda t: level_rank(t[1]))
        closest, closest_level = min(every, key=lambda t: level_rank(t[1]))
        inactive, details = "", {"level": level}
        if rdma and level_rank(closest_level) < level_rank(level):
            inactive = f" (its closer NIC {_nic_name(closest)} at {closest_level} has no active RDMA port)"
            details["inactive_nic"] = _nic_name(closest)
        comp = Component(comp.kind, comp.name, gpu=comp.gpu, uuid=comp.uuid, bdf=comp.bdf, peer=_nic_name(nic))
        ev = (Evidence("nearest NIC", {"nic": _nic_name(nic), "level": level}, "topology (PCIe tree, NCCL levels)"),)
        if level_rank(level) >= level_rank(UNKNOWN_LEVEL):
            out.append(Finding("ib.gpudirect", UNKNOWN, comp,
                               f"{label}: unknown path level {level!r} to {_nic_name(nic)}", ev))
        elif gpudirect_capable(level):
            out.append(Finding("ib.gpudirect", PASS, comp,
                               f"{label} reaches {_nic_name(nic)} through PCIe switches only ({level})", ev,
                               expected="PIX or PXB", expected_source="NCCL GPUDirect RDMA default level (PXB)"))
        else:
            where = "through the CPU root complex" if level == "PHB" else \
                "across the CPU" + (" interconnect between sockets" if level == "SYS" else " (another root port)")
            out.append(Finding(
                "ib.gpudirect", WARN, comp,
                f"{label}'s nearest RDMA NIC {_nic_name(nic)} is {level}: GPUDirect RDMA goes {where}{inactive}", ev,
                expected="PIX or PXB", expected_source="NCCL GPUDirect RDMA default level (PXB)",
                remedy="NCCL uses GPUDirect RDMA only up to PXB by default, so this GPU's network traffic is "
                       "staged through host memory. Check that the NIC sits in the slot meant for this GPU; in "
                       "a VM, give NCCL the real PCI tree (NCCL_TOPO_FILE).",
                details=details))
    return out


@check("ib.gpudirect", needs=(PROBE_INFINIBAND,), uses=(PROBE_SYSTEM, PROBE_NVML), what="GPUDirect RDMA")
def gpudirect(ctx: CheckContext) -> list[Finding]:
    """GPUDirect RDMA prerequisites as NVIDIA documents them (nvidia_peermem loaded, or DMA-BUF:
    open kernel modules, Linux 5.12+, driver R515+, rdma-core with ibv_reg_dmabuf_mr), the path NCCL
    will take, and each GPU near an RDMA NIC."""
    ib, skip = _ib_or_skip(ctx, "ib.gpudirect", "GPUDirect RDMA")
    if skip:
        return [skip]
    if not any(is_active(p) for _, p in all_ports(ib)):
        return [Finding("ib.gpudirect", SKIP, node_component(), "no active RDMA port")]
    if _gpu_count(ctx) == 0:
        return [Finding("ib.gpudirect", SKIP, node_component(), "no GPU on this node")]
    out: list[Finding] = []
    if ctx.policy.require_peermem is False:
        out.append(Finding("ib.gpudirect", SKIP, Component("module", "nvidia_peermem", device="nvidia_peermem"),
                           "GPUDirect RDMA memory registration not required by the policy"))
    else:
        gated = gate(ctx, "ib.gpudirect", "kernel modules", probes=(PROBE_SYSTEM,))
        out.append(gated if gated else _registration(ctx))
    out.extend(_affinity(ctx, ib))
    return out


def _registration(ctx: CheckContext) -> Finding:
    """Can RDMA NICs reach GPU memory: through nvidia_peermem or DMA-BUF, and which NCCL takes."""
    from ccdiag.checks.gpudirect import GDR_OFF, SOURCE, gpudirect_paths

    paths = gpudirect_paths(ctx.data(PROBE_SYSTEM))
    strict_peermem = bool(ctx.policy.require_peermem)
    ev = [Evidence("peer-memory module", paths.peermem or "none loaded", "/proc/modules"),
          Evidence("NVIDIA kernel module", paths.facts["kernel module"], "/proc/driver/nvidia/version"),
          Evidence("kernel", paths.facts["kernel"], "/proc/sys/kernel/osrelease"),
          Evidence("driver", paths.facts["driver"], "/proc/driver/nvidia/version"),
          Evidence("rdma-core", paths.facts["rdma-core"], "libibverbs.so.1 (its versioned file name)")]
    for name, value in (("NCCL_DMABUF_ENABLE", paths.nccl_dmabuf_enable), ("NCCL_NET_GDR_LEVEL", paths.nccl_gdr_level)):
        if value is not None:
            ev.append(Evidence(name, value, paths.settings_source))
    details = {"peermem": paths.peermem, "dmabuf": paths.dmabuf, "nccl_path": paths.nccl_path,
               "dmabuf_missing": list(paths.dmabuf_missing), "dmabuf_unread": list(paths.dmabuf_unread)}
    comp = Component("module", paths.peermem or ("dma-buf" if paths.dmabuf else "nvidia_peermem"),
                     device=paths.peermem or ("dma-buf" if paths.dmabuf else "nvidia_peermem"))
    level = (paths.nccl_gdr_level or "").strip().upper()
    cap = ""
    if paths.nccl_gdr_level is not None:
        cap = (f"; NCCL_NET_GDR_LEVEL={paths.nccl_gdr_level} overrides NCCL's GPUDirect RDMA path choice "
               "(`ccdiag nccl` names it for removal)")
    expected = "nvidia_peermem loaded, or DMA-BUF available"
    if strict_peermem and not paths.peermem:
        return Finding("ib.gpudirect", FAIL, comp, "nvidia_peermem is not loaded and the policy requires it"
                       + (" (DMA-BUF is available)" if paths.dmabuf else ""), tuple(ev),
                       expected="nvidia_peermem (or nv_peer_mem) loaded",
                       expected_source=policy_source(ctx, "require_peermem"),
                       remedy="`modprobe nvidia_peermem` (it ships with the NVIDIA driver) and add it to "
                              "/etc/modules-load.d/; or drop require_peermem from the policy where DMA-BUF serves.",
                       details=details)
    if level in GDR_OFF:
        return Finding("ib.gpudirect", WARN, comp, f"NCCL_NET_GDR_LEVEL={paths.nccl_gdr_level}: NCCL will not use "
                       "GPUDirect RDMA on this node, whatever its memory registration", tuple(ev),
                       expected="NCCL free to choose its GPUDirect RDMA path", expected_source=paths.settings_source,
                       remedy="Remove NCCL_NET_GDR_LEVEL (a debugging variable; see `ccdiag nccl`) unless this "
                              "platform's documentation sets it.", details=details)
    if paths.nccl_path is not None:
        how = {"dmabuf": "DMA-BUF (open GPU kernel modules; no nvidia_peermem needed)",
               "peermem": f"{paths.peermem}"}[paths.nccl_path]
        also = f" ({'; '.join(paths.facts['assumed'])})" if paths.nccl_path == "dmabuf" and paths.facts["assumed"] \
            else ""
        if paths.nccl_path == "dmabuf" and paths.peermem:
            also = f"; {paths.peermem} is loaded too"
        elif paths.nccl_path == "peermem" and paths.dmabuf:
            also = "; DMA-BUF is available but NCCL_DMABUF_ENABLE=0 turns it off"
        return Finding("ib.gpudirect", PASS, comp, f"GPUDirect RDMA can reach GPU memory: NCCL will register it "
                       f"through {how}{also}{cap}", tuple(ev), expected=expected, expected_source=SOURCE,
                       details=details)
    if paths.dmabuf and (paths.nccl_dmabuf_enable or "").strip() == "0":
        return Finding("ib.gpudirect", FAIL, comp, "NCCL_DMABUF_ENABLE=0 turns off DMA-BUF and nvidia_peermem is "
                       "not loaded: NCCL has no way to reach GPU memory from the NICs (no GPUDirect RDMA)",
                       tuple(ev), expected=expected, expected_source=SOURCE,
                       remedy=f"Remove NCCL_DMABUF_ENABLE=0 ({paths.settings_source}), or load nvidia_peermem.",
                       details=details)
    if paths.dmabuf is None:
        return Finding("ib.gpudirect", UNKNOWN, comp, "nvidia_peermem is not loaded, and whether DMA-BUF can serve "
                       f"instead is not known: not read: {', '.join(paths.dmabuf_unread)}", tuple(ev),
                       expected=expected, expected_source=SOURCE,
                       remedy="Run as a user that can read /proc/driver/nvidia/version and /proc/sys/kernel/osrelease "
                              "(and with rdma-core's libibverbs installed), or load nvidia_peermem.",
                       details=details)
    return Finding("ib.gpudirect", FAIL, comp, "Neither GPUDirect RDMA path is available: nvidia_peermem is not "
                   f"loaded and DMA-BUF needs {'; '.join(paths.dmabuf_missing)}", tuple(ev),
                   expected=expected, expected_source=SOURCE,
                   remedy="`modprobe nvidia_peermem` (it ships with the NVIDIA driver) and add it to "
                          "/etc/modules-load.d/; or move to DMA-BUF (the open GPU kernel modules, Linux 5.12+, "
                          "rdma-core 34+).", details=details)
