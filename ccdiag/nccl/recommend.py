"""The NCCL settings an expert would write for a node, each with its evidence; a pure function.

Which NICs: NCCL gives each GPU the NIC nearest to it on the PCIe tree (GPUDirect RDMA by default
only up to PXB). The *compute rails* are therefore the NICs nearest to some GPU; a NIC nearest to no
GPU is a storage or management port and stays out of ``NCCL_IB_HCA``, as do ports that are down,
RoCE ports without a RoCEv2 GID when the other rails have one, and a link layer the other rails do
not share. Lists are written with ``=`` and ports (a bare ``mlx5_1`` also selects ``mlx5_10``..``19``).

What NCCL's user guide calls system configuration (``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``, the RoCE
GID selection, ``NCCL_CROSS_NIC``, ``NCCL_TOPO_FILE``) is recommended; its debugging variables
(``NCCL_NET_GDR_LEVEL``, ``NCCL_P2P_LEVEL``, ``NCCL_ALGO``) appear only as labelled experiments, and a
debugging variable found set is recommended for removal. Source for the syntax and defaults: the
NCCL user guide (``docs/userguide/source/env.rst``) and NCCL's ``src/misc/socket.cc``,
``src/transport/net_ib``, ``src/graph/paths.cc``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ccdiag.nccl.knobs import DEFAULT, EXPERIMENT, HIGH, INFO, LOW, MEDIUM, REMOVE, SET, Fact, Knob, Recommendation
from ccdiag.nccl.layout import Layout, PortFacts, layout_from_matrix, layout_from_topology
from ccdiag.nccl import netif, platforms
from ccdiag.nccl.lists import exact_list
from ccdiag.topology.levels import UNKNOWN, gpudirect_capable, level_rank
from ccdiag.topology.model import natural_key

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: the guide's Debugging section: not for production; recommend removal when set
DEBUGGING = {
    "NCCL_P2P_DISABLE": "disables NVLink/PCIe peer-to-peer: the usual fix is ACS or the topology, not this",
    "NCCL_P2P_LEVEL": "overrides NCCL's own peer-to-peer path choice",
    "NCCL_NET_GDR_LEVEL": "overrides NCCL's GPUDirect RDMA path choice",
    "NCCL_IB_GDR_LEVEL": "old name of NCCL_NET_GDR_LEVEL",
    "NCCL_ALGO": "pins collective algorithms; unknown tokens are errors in NCCL 2.24+",
    "NCCL_PROTO": "pins protocols",
    "NCCL_GRAPH_FILE": "forces a saved channel graph; NCCL's maintainers call it an experiment, and a stale one "
                       "breaks jobs (NVIDIA/nccl#1008)",
    "NCCL_SHM_DISABLE": "disables the shared-memory transport",
}
TOPO_FILE_PATH = "/etc/nccl/ccdiag-topology.xml"


def recommend(topology: Topology, observations: Mapping[str, Any] | None = None, results: Mapping[str, Any] | None = None,
              env: Mapping[str, str] | None = None,
              env_source: str = "environment", env_unread: tuple[str, ...] = (),
              platform: str | None = None) -> Recommendation:
    """Settings for the node described by ``topology`` and the probe runs/observations it was built
    from. ``results``: measured facts (``{"reachable_ifaces": [...]}`` from cluster runs) narrowing
    the interface choice. ``env``: settings already present, judged and named for removal.
    ``env_unread``: prefixes of variables whose absence from ``env`` says nothing (the door did not
    read them: a snapshot older than their recording, a copied tree): a vendor-required one of them
    is judged unknown, never "not set". ``platform``: a key of the platform table naming the platform where the
    node cannot say (:func:`ccdiag.nccl.platforms.identify`)."""
    layout = layout_from_topology(topology, observations)
    xml = None
    if layout.flattened:
        from ccdiag.nccl.topo_xml import topology_xml

        xml = topology_xml(topology, observations)
    return _recommend(layout, env or {}, env_source, results or {}, xml, env_unread, platform)


def recommend_from_matrix(matrix: Any, where: str, env: Mapping[str, str] | None = None,
                          env_source: str = "environment", platform: str | None = None) -> Recommendation:
    """What a pasted ``nvidia-smi topo -m`` alone supports (rails and ring order), and what needs the node."""
    return _recommend(layout_from_matrix(matrix, where), env or {}, env_source, {}, None, platform=platform)


# ---------------------------------------------------------------- rails

def _rails(layout: Layout) -> tuple[dict[str, list[str]], dict[str, tuple[list[str], str | None]]]:
    """(NIC -> GPUs it is nearest to, GPU -> (nearest NICs, level))."""
    served: dict[str, list[str]] = {}
    per_gpu = {}
    for g in layout.gpus:
        near, lv = layout.nearest(g)
        per_gpu[g] = (near, lv)
        for n in near:
            served.setdefault(n, []).append(g)
    return served, per_gpu


def _hca_from_matrix(layout: Layout, served: dict, ev: list, left_out: dict) -> tuple[Knob, list]:
    """A pasted matrix names the rails but not their ports or states."""
    var, rails = "NCCL_IB_HCA", sorted(served, key=natural_key)
    details = {"rails": {n: served[n] for n in rails}, "left_out": left_out}
    unnamed = [n for n in rails if n.startswith("NIC") and n[3:].isdigit()]
    if unnamed:
        return Knob(var, DEFAULT, None, f"the rails are {', '.join(rails)}, but the paste has no NIC legend naming "
                    f"{', '.join(unnamed)}: run `ccdiag nccl` on the node, or paste the whole output",
                    tuple(ev), LOW, details), []
    chosen = [(n, None) for n in rails]
    reason = (f"the NICs nearest to a GPU, from the matrix ({', '.join(rails)}); exact names so no prefix "
              "catches more. Port numbers and states need the node (`ccdiag nccl` there adds them).")
    return Knob(var, SET, exact_list(chosen), reason, tuple(ev), MEDIUM, details), chosen


def _port_left_out(p: PortFacts, majority: str | None, any_v2: bool) -> str | None:
    """Why a rail's port stays out of NCCL_IB_HCA, or None."""
    if not p.active:
        return f"port is {p.state or 'not active'}"
    if majority and p.link_layer and p.link_layer != majority:
        return f"{p.link_layer} link layer while the other rails are {majority} (they cannot talk)"
    if p.roce and any_v2 and not p.v2_gids:
        return (f"RoCE port without a RoCEv2 GID (no IP address on {p.netdev or 'its netdev'}?), "
                "while the other rails use RoCEv2")
    return None


def _port_fact(p: PortFacts) -> Fact:
    return Fact(f"{p.nic}:{p.port} port", {"state": p.state, "link_layer": p.link_layer, "rate_gbit_s": p.rate_gbit_s,
                                          "roce_v2_gids": list(p.v2_gids)},
                f"/sys/class/infiniband/{p.nic}/ports/{p.port}")


def _majority_layer(ports: list[PortFacts]) -> str | None:
    layers = [p.link_layer for p in ports if p.active and p.link_layer]
    return max(set(layers), key=lambda x: (layers.count(x), x == "InfiniBand")) if layers else None


def _hca_reason(left_out: dict[str, str], down_gpus: dict) -> str:
    reason = "the ports of the NICs nearest to each GPU (the compute rails), exact names with ports"
    if left_out:
        reason += "; left out: " + "; ".join(f"{k}: {v}" for k, v in sorted(left_out.items(),
                                                                         key=lambda kv: natural_key(kv[0])))
    if down_gpus:
        names = sorted(down_gpus, key=natural_key)
        reason += "; " + ", ".join(names) + (" loses its" if len(names) == 1 else " lose their") + \
            " own rail and sends through another NIC until it is fixed"
    return reason


def _ib_hca(layout: Layout, env: Mapping[str, str], env_source: str) -> tuple[Knob, list[tuple[str, int | None]]]:
    served, per_gpu = _rails(layout)
    var = "NCCL_IB_HCA"
    if not layout.nics:
        why = ("no RDMA NIC on this node: NCCL talks to other hosts over sockets (NCCL_SOCKET_IFNAME)"
               if layout.source == "node" else "the pasted matrix shows no NIC")
        return Knob(var, DEFAULT, None, why, (Fact("RDMA NICs", [], layout.where),)), []
    rails = sorted(served, key=natural_key)
    ev = [Fact(f"{g} nearest NIC", {"nics": near, "level": lv}, layout.where) for g, (near, lv) in per_gpu.items()]
    left_out: dict[str, str] = {n: "nearest to no GPU (storage or management)" for n in layout.nics if n not in served}
    if layout.ports is None:
        return _hca_from_matrix(layout, served, ev, left_out)
    ports = [p for n in rails for p in layout.ports.get(n, ())]
    majority = _majority_layer(ports)
    any_v2 = any(p.v2_gids for p in ports if p.active and p.roce)
    chosen: list[tuple[str, int | None]] = []
    faults: dict[str, str] = {}
    for p in ports:
        ev.append(_port_fact(p))
        drop = _port_left_out(p, majority, any_v2)
        if drop and not p.active:
            faults[f"{p.nic}:{p.port}"] = drop  # this node's fault: the shared list keeps the rail
            chosen.append((p.nic, p.port))
        elif drop:
            left_out[f"{p.nic}:{p.port}"] = drop
        else:
            chosen.append((p.nic, p.port))
    up = [c for c in chosen if f"{c[0]}:{c[1]}" not in faults]
    down_gpus = {g: near for g, (near, _) in per_gpu.items() if near and not any(c[0] in near for c in up)}
    reason = _hca_reason(left_out, {})
    if faults:
        reason += ("; kept although down on this node: " + ", ".join(sorted(faults, key=natural_key)) +
                   " (NCCL skips an inactive port by itself, and these settings are meant for every node of this kind)")
    if not up:
        return Knob(var, DEFAULT, None, "no usable RDMA port: " + reason, tuple(ev), HIGH,
                    {"left_out": left_out, "node_faults": faults}), []
    previous = env.get(var)
    if previous is not None and previous.strip() != exact_list(chosen):
        reason += f" (replaces {var}={previous} from {env_source})"
    return Knob(var, SET, exact_list(chosen), reason, tuple(ev), HIGH,
                {"rails": {n: served[n] for n in rails}, "left_out": left_out, "node_faults": faults,
                 "gpus_without_own_rail": sorted(down_gpus, key=natural_key)}), up


def node_faults(hca: Knob) -> list[Knob]:
    """A rail down on this node is a finding for this node (drain it), never an edit of the shared settings."""
    faults = hca.details.get("node_faults") or {}
    if not faults:
        return []
    gpus = hca.details.get("gpus_without_own_rail") or []
    lose = (f"; {', '.join(gpus)} " + ("loses its" if len(gpus) == 1 else "lose their") + " own rail and send "
            "through another NIC until then") if gpus else ""
    return [Knob("node fault", INFO, ", ".join(sorted(faults, key=natural_key)),
                 f"{'; '.join(f'{k}: {v}' for k, v in sorted(faults.items()))} on this node: drain it until the rail is "
                 f"fixed (the shared NCCL_IB_HCA keeps the rail; NCCL skips an inactive port){lose}",
                 confidence=HIGH, details={"drain": True, "ports": sorted(faults, key=natural_key)})]


# ---------------------------------------------------------------- sockets

def _iface_fact(i: Any, problem: str | None) -> Fact:
    return Fact(i.name, {"state": i.operstate, "speed_mbps": i.speed_mbps, "virtual": i.virtual,
                         "addresses": [a.address for a in i.addresses if a.family in ("inet", "inet6")],
                         "left_out": problem}, f"/sys/class/net/{i.name}")


def _previous_socket(var: str, previous: str | None, value: str, ifaces: list, env_source: str) -> str:
    """What the recommendation says of a value already set: the same verdict the environment check gives."""
    if previous is None or previous.strip() == value:
        return ""
    verdict = netif.judge_list(previous, ifaces)
    why = "; ".join(verdict.problems) if verdict.problems else f"selects {', '.join(verdict.chosen)}"
    return f" (replaces {var}={previous} from {env_source}: {why})"


def _socket_ifname(layout: Layout, env: Mapping[str, str], env_source: str, results: Mapping[str, Any]) -> Knob:
    """The fastest usable interface(s), by the one usable-interface rule (:mod:`ccdiag.nccl.netif`)."""
    var = "NCCL_SOCKET_IFNAME"
    if layout.interfaces is None:
        return Knob(var, DEFAULT, None, "needs the node: a pasted matrix does not show network interfaces",
                    confidence=LOW)
    reachable = results.get("reachable_ifaces")
    ifaces = sorted(layout.interfaces, key=lambda i: natural_key(i.name))
    facts = [netif.from_netdev(i) for i in ifaces]
    problems = [netif.problem(f) for f in facts]
    if reachable is not None:
        problems = [p or (None if i.name in reachable else "not reachable from the peers (cluster run)")
                    for i, p in zip(ifaces, problems)]
    ev = tuple(_iface_fact(i, p) for i, p in zip(ifaces, problems))
    good = [i for i, p in zip(ifaces, problems) if p is None]
    if not good:
        return Knob(var, DEFAULT, None, "no interface is up with an address outside loopback/containers: "
                    "fix the network first", ev, HIGH)
    best = max((i.speed_mbps or 0) for i in good)
    top = [i for i in good if (i.speed_mbps or 0) == best]
    down_rails = _down_rail_ifaces(layout, ifaces, problems, top)
    value = exact_list((i.name, None) for i in sorted(top + down_rails, key=lambda i: natural_key(i.name)))
    reason = (f"the fastest interface(s) that are up and addressed ({best / 1000:g} Gb/s)" if best else
              "the interface(s) up and addressed (speed not reported)")
    reason += "; exact names, so docker0, bridges and look-alike prefixes are never picked"
    if down_rails:
        reason += (f"; kept although down on this node: {', '.join(i.name for i in down_rails)} (NCCL skips an "
                   "interface that is not running, and these settings are meant for every node of this kind)")
    reason += _previous_socket(var, env.get(var), value, facts, env_source)
    return Knob(var, SET, value, reason, ev, HIGH if len(top) == 1 or reachable is not None else MEDIUM,
                {"candidates": [i.name for i in good], "node_faults": {i.name: netif.DOWN for i in down_rails}})


def _down_rail_ifaces(layout: Layout, ifaces: list, problems: list, top: list) -> list:
    """IPoIB/RoCE interfaces of this node's rail NICs that are down here while their siblings were chosen:
    a node fault, so the shared list keeps them (the same choice as NCCL_IB_HCA makes for their ports)."""
    if not top or not all(getattr(i, "ib_device", None) in layout.nics for i in top):
        return []
    return [i for i, p in zip(ifaces, problems) if p == netif.DOWN and getattr(i, "ib_device", None) in layout.nics]


# ---------------------------------------------------------------- RoCE GIDs

def _gid(layout: Layout, chosen: list[tuple[str, int | None]]) -> list[Knob]:
    if layout.ports is None:
        return [Knob("NCCL_IB_GID_INDEX", DEFAULT, None, "needs the node: GIDs are not in a pasted matrix", confidence=LOW)]
    ports = [p for n, port in chosen for p in layout.ports.get(n, ()) if p.port == port and p.roce]
    if not ports:
        return [Knob("NCCL_IB_GID_INDEX", DEFAULT, None,
                     "no RoCE rail: InfiniBand ports are addressed by LID, GID selection does not apply")]
    ev = tuple(Fact(f"{p.nic}:{p.port} GIDs", {"roce_v2_ipv4": list(p.v2_ipv4_gids), "roce_v1": list(p.v1_gids)},
                    f"/sys/class/infiniband/{p.nic}/ports/{p.port}/gid_attrs/types") for p in ports)
    if not any(p.v2_gids for p in ports):
        return [Knob("NCCL_IB_ROCE_VERSION_NUM", SET, "1",
                     "no rail port has a RoCEv2 GID, only RoCE v1: tell NCCL (default 2) to use v1, or give the "
                     "ports IP addresses for RoCEv2", ev, MEDIUM)]
    indices = {p.v2_ipv4_gids[0] for p in ports if p.v2_ipv4_gids}
    if len(indices) == 1 and all(p.v2_ipv4_gids for p in ports):
        k = indices.pop()
        return [Knob("NCCL_IB_GID_INDEX", DEFAULT, None,
                     f"NCCL (2.21+) selects the RoCEv2 IPv4 GID itself (NCCL_IB_ADDR_FAMILY=AF_INET is its default); "
                     f"every rail here has it at index {k}. Before NCCL 2.21 the default index is 0 (NCCL_PARAM "
                     f"IB_GID_INDEX, 0 in 2.20), usually a RoCE v1 or link-local GID: with an older NCCL set "
                     f"NCCL_IB_GID_INDEX={k}, and only if every host shows the same index (compare `ccdiag nccl --json` "
                     "of the hosts)", ev, HIGH, {"index_on_this_host": k, "set_for_nccl_before_2_21": k})]
    return [Knob("NCCL_IB_GID_INDEX", DEFAULT, None,
                 "the RoCEv2 IPv4 GID sits at different indices on this host's rails: leave the index to NCCL's "
                 "per-port selection (never pin one index)", ev, HIGH, {"indices": sorted(indices)})]


# ---------------------------------------------------------------- the rest

def _cross_nic(layout: Layout, chosen: list) -> Knob:
    if len({n for n, _ in chosen}) < 2:
        return Knob("NCCL_CROSS_NIC", DEFAULT, None, "fewer than two rails: nothing to cross")
    return Knob("NCCL_CROSS_NIC", DEFAULT, None,
                "NCCL's default (2: prefer the same NIC on both ends, allow another) suits most fabrics; set 0 only "
                "on a rail-optimised fabric whose rails are not interconnected, a fact of the switches that one "
                "node cannot read", confidence=MEDIUM)


def _provider_topo(layout: Layout, path: str | None = None) -> Any:
    """The provider topology file the platform probe read (``path``, else the first the provider ships)."""
    files = getattr(layout.platform, "topo_files", ()) or ()
    if path is not None:
        return next((f for f in files if f.path == path), None)
    return next((f for f in files if f.named_by == "provider directory" and f.text), None)


def _check_topo(layout: Layout, f: Any) -> tuple[str, str]:
    """(what the check found, confidence) for a topology file against this node."""
    bdfs = layout.bdfs or {}
    nearest = None
    if not layout.flattened and layout.ports is not None:
        nearest = {g: tuple(layout.nearest(g)[0]) for g in layout.gpus}
    res = platforms.check_topo_file(f.path, f.text, {g: bdfs.get(g) for g in layout.gpus},
                                    {n: bdfs.get(n) for n in layout.nics}, nearest)
    if not res.readable:
        return f"{f.path} could not be read or parsed here, so it was not checked against the node", LOW
    problems = []
    if res.gpus_missing:
        problems.append(f"GPUs {', '.join(res.gpus_missing)} are not in it")
    if res.nics_missing:
        problems.append(f"NICs {', '.join(res.nics_missing)} are not in it")
    if res.disagree:
        problems.append(f"its GPU-NIC pairing contradicts the node's own tree for {', '.join(res.disagree)}")
    if problems:
        return (f"{f.path} does not match this node ({'; '.join(problems)}): install the provider's file for this "
                "VM size rather than deleting it"), LOW
    how = "pairing agrees with the node's own tree" if nearest else "pairing cannot be confirmed from the VM's tree"
    return f"{f.path} names every GPU and NIC bus id of this node; {how}", HIGH


def _topo_file(layout: Layout, env: Mapping[str, str], xml: str | None,
               ident: platforms.Identity | None = None) -> tuple[Knob, dict[str, str]]:
    var = "NCCL_TOPO_FILE"
    set_now = env.get(var)
    plat = ident.platform if ident is not None else None
    provider = _provider_topo(layout, set_now) if set_now else _provider_topo(layout)
    # the platform that requires the file, held as a Platform (not Optional) for what names it below
    vendor = plat if plat is not None and platforms.required_here(plat, var) else None
    if set_now and (provider is not None or vendor is not None):
        found, conf = _check_topo(layout, provider) if provider is not None else (
            f"{set_now} was not readable through ccdiag's view of the node, so it was not checked", MEDIUM)
        label = f"vendor-required on {vendor.title} ({vendor.source}); " if vendor is not None else ""
        if vendor is not None and not vendor.documents(var, set_now):
            label += f"the provider documents {vendor.settings[var]}, {set_now} is set: compare; "
        return Knob(var, SET, set_now, f"{label}kept: {found}", (Fact(var, set_now, "settings present"),), conf,
                    {"vendor_required": vendor.key if vendor is not None else None}), {}
    if set_now and (ident is None or ident.kind != "bare-metal"):
        return Knob(var, SET, set_now, f"{var}={set_now} is set; kept: the platform was not identified as bare metal "
                    f"({ident.how if ident else 'no platform reading'}), and a provider may require its topology "
                    "file; name the platform with --platform, or run on the node, to judge it", confidence=LOW,
                    details={"kept_because": "platform not identified"}), {}
    if layout.flattened and provider is not None:
        found, conf = _check_topo(layout, provider)
        return Knob(var, SET, provider.path, layout.flattened + f". The provider ships {provider.path}: {found}",
                    (Fact("PCI tree", "no switch, all GPU-NIC paths PHB", layout.where),), conf), {}
    if layout.flattened:
        files = {TOPO_FILE_PATH: xml} if xml else {}
        why = ("the generated file groups each GPU with its nearest NIC under a synthetic PCI switch, the pairing "
               "the VM's tree hides" if xml else "no pairing could be derived (NUMA affinity unknown), so no file is "
               "written: use the provider's file for this VM size")
        return Knob(var, SET if xml else DEFAULT, TOPO_FILE_PATH if xml else None, f"{layout.flattened}. {why}",
                    (Fact("PCI tree", "no switch, all GPU-NIC paths PHB", layout.where),), LOW), files
    if set_now:
        return Knob(var, REMOVE, None, f"{var}={set_now} is set but this node's PCI tree is visible to NCCL "
                    f"({ident.how if ident else 'no platform reading'}): a stale topology file causes spurious failures (Azure/azurehpc-health-checks#142)",
                    confidence=MEDIUM), {}
    return Knob(var, DEFAULT, None, "NCCL reads this node's real PCI tree (PCIe switches and NUMA affinity are "
                "visible), so no topology file is needed"), {}


# ---------------------------------------------------------------- vendor-required settings

def _vendor(knobs: list[Knob], plat: platforms.Platform | None, env: Mapping[str, str],
            unread: tuple[str, ...] = ()) -> list[Knob]:
    """Vendor-required settings are kept (the value set, else the documented one) and labelled; a
    recommendation that would change or remove one gives way to it. ``unread``: prefixes of variables
    the door did not read (their absence from ``env`` proves nothing)."""
    if plat is None:
        return knobs
    out, done = [], set()
    for k in knobs:
        if k.name in plat.required and k.name != "NCCL_TOPO_FILE":
            out.append(_vendor_knob(k.name, plat, env, k, unread))
            done.add(k.name)
        else:
            out.append(k)
    for name in plat.required:
        if name not in done and name != "NCCL_TOPO_FILE" and (name in env or plat.required[name] is not None):
            out.append(_vendor_knob(name, plat, env, None, unread))
    return out


def _unread_knob(name: str, plat: platforms.Platform, documented: str | None) -> Knob:
    """A vendor-required variable whose presence was not read: unknown, with what would settle it."""
    why = (f"vendor-required on {plat.title} ({plat.source}); UNKNOWN whether it is set here: the environment "
           f"that was read does not include {name} (a snapshot recorded before ccdiag kept libfabric variables, "
           "or a copied tree, whose environment is not this process's). Judge it with --env-file, or record a new "
           "snapshot on the node")
    if documented is not None:
        why += f"; the vendor documents {name}={documented}, written here so the shared settings carry it"
    return Knob(name, SET if documented is not None else INFO, documented, why, (Fact(name, None, "not read"),), LOW,
                {"vendor_required": plat.key, "documented": documented, "present": "unknown"})


def _vendor_knob(name: str, plat: platforms.Platform, env: Mapping[str, str], instead: Knob | None,
                 unread: tuple[str, ...] = ()) -> Knob:
    present, documented = env.get(name), plat.required[name]
    if present is None and unread and name.startswith(unread):
        return _unread_knob(name, plat, documented)
    value = present if present is not None else documented
    why = f"vendor-required on {plat.title} ({plat.source})"
    if present is None:
        why += f"; not set here: set {name}={documented}"
    elif documented is not None and not plat.documents(name, present):
        others = [p.title for p in platforms.documented_elsewhere(name, plat) if p.settings.get(name) == present]
        why += (f"; the vendor documents {documented} for this instance type, {present} is set" +
                (f" (the value documented for {', '.join(others[:3])})" if others else "") +
                ": kept as set, compare with the vendor's profile")
    else:
        why += "; kept as set"
    if instead is not None and (instead.action != SET or instead.value != value):
        why += f" (ccdiag alone would have said: {instead.action} {instead.value or ''})".rstrip()
    return Knob(name, SET if value is not None else INFO, value, why, (Fact(name, present, "settings present"),),
                HIGH if present is not None else MEDIUM, {"vendor_required": plat.key, "documented": documented})


def _ring_cost(hops: list[str]) -> tuple[int, int]:
    """(rank of the slowest hop, how many hops are that slow): lower is better."""
    worst = max(level_rank(h) for h in hops)
    return worst, sum(1 for h in hops if level_rank(h) == worst)


def _ring_order(layout: Layout) -> Knob | None:
    if len(layout.gpus) < 3:
        return None
    if layout.nvlink():
        return None  # NVLink: NCCL searches its own rings over NVLink and the rank order changes nothing
    order = [layout.gpus[0]]
    left = list(layout.gpus[1:])
    while left:
        here = order[-1]
        nxt = min(left, key=lambda g: (level_rank(layout.level(here, g)), natural_key(g)))
        order.append(nxt)
        left.remove(nxt)
    hops = [layout.level(a, b) for a, b in zip(order, order[1:] + order[:1])]
    index_hops = [layout.level(a, b) for a, b in zip(layout.gpus, layout.gpus[1:] + layout.gpus[:1])]
    same = order == list(layout.gpus)
    if same or _ring_cost(hops) >= _ring_cost(index_hops):
        return None  # advice only where it changes the slowest hop or how many hops cross it
    worst = max(hops, key=level_rank)
    reason = (f"PCIe-only GPUs: ring neighbours in this order share the nearest bridges (hops {', '.join(hops)}; "
              f"the slowest is {worst}); index order would hop {', '.join(index_hops)}")
    digits = [g[3:] for g in order]
    return Knob("GPU ring order", INFO, ",".join(order), reason + ". Use it as the rank order on this node "
                f"(e.g. CUDA_VISIBLE_DEVICES={','.join(digits)} with one rank per GPU)",
                (Fact("GPU-GPU levels", {f"{a}-{b}": layout.level(a, b) for a, b in zip(order, order[1:])},
                      layout.where),), MEDIUM, {"order": order, "changed": not same})


def _experiments(layout: Layout, chosen: list) -> list[Knob]:
    out = []
    if chosen and not layout.flattened and not layout.nvlink():
        # a flattened tree's PHB is the VM's (fixed by NCCL_TOPO_FILE); on NVLink/NVSwitch nodes NCCL relays a far
        # GPU's network traffic over NVLink to a GPU beside the NIC (PXN, NCCL_P2P_PXN_LEVEL default 2 since 2.12)
        # instead of staging it in host memory, so there is nothing to measure here
        _, per_gpu = _rails(layout)
        far = {g: lv for g, (near, lv) in per_gpu.items() if lv and lv != UNKNOWN and not gpudirect_capable(lv)}
        if far:
            worst = max(far.values(), key=level_rank)
            out.append(Knob("NCCL_NET_GDR_LEVEL", EXPERIMENT, worst,
                            f"experiment only: {', '.join(sorted(far, key=natural_key))} reach their nearest NIC at "
                            f"{worst}, beyond NCCL's GPUDirect default (PXB), so their network traffic is staged in host "
                            "memory. Measure with this set; the fix is placement (a NIC under the GPU's switch)",
                            confidence=LOW))
    if not layout.nvlink() and len(layout.gpus) >= 2:
        pairs = [layout.level(a, b) for i, a in enumerate(layout.gpus) for b in layout.gpus[i + 1:]]
        if any(level_rank(lv) > level_rank("PXB") for lv in pairs if lv != UNKNOWN):
            out.append(Knob("NCCL_P2P_LEVEL", EXPERIMENT, "SYS",
                            "experiment only: some GPU pairs are beyond PXB, where NCCL may not use PCIe P2P; measure "
                            "P2P through the CPU against staging in host memory", confidence=LOW))
    out.append(Knob("NCCL_ALGO", EXPERIMENT, "Ring", "experiment only, for benchmarks: with Ring, nccl-tests' busbw "
                    "is comparable to the bottleneck link rate (NVLS/tree results are not)", confidence=LOW))
    return out


def debugging_reason(var: str) -> str | None:
    """Why a variable of the guide's Debugging section should not stay set, with its version facts."""
    from ccdiag.nccl.debugvars import is_debugging, version_note

    if not is_debugging(var) and var not in DEBUGGING:
        return None
    why = DEBUGGING.get(var, "listed in the NCCL guide's Debugging section")
    note = version_note(var)
    return f"{why}" + (f" ({note})" if note else "")


def _existing(env: Mapping[str, str], env_source: str, rails_present: bool,
              ident: platforms.Identity | None = None) -> list[Knob]:
    out = []
    plat = ident.platform if ident is not None else None
    for var in sorted(env):
        if plat is not None and var in plat.plugin_sets:
            out.append(Knob(var, SET, env[var], f"{var}={env[var]} (from {env_source}): {plat.plugin} sets it by itself "
                            f"on {plat.title} ({plat.plugin_sets[var]}); kept as set", (Fact(var, env[var], env_source),),
                            MEDIUM, {"plugin_sets": plat.plugin}))
            continue
        if ident is not None and ident.kind != "bare-metal" and (var == "NCCL_IB_DISABLE" or debugging_reason(var)):
            what = "unidentified platform" if ident.kind == "unknown" else ident.label
            out.append(Knob(var, INFO, env[var], f"{var}={env[var]} (from {env_source}) kept: on this {what} "
                            f"({ident.how}) a provider may document it; ccdiag advises no removal it cannot justify"
                            + ("" if ident.kind == "unknown" else f" (not in the table for {ident.label})"),
                            (Fact(var, env[var], env_source),), LOW, {"kept_because": ident.kind}))
            continue
        if var == "NCCL_IB_DISABLE":
            if rails_present and env[var].strip() not in ("0", ""):
                out.append(Knob(var, REMOVE, None, f"{var}={env[var]} (from {env_source}) turns off InfiniBand/RoCE "
                                "on a node with RDMA rails: traffic falls back to TCP sockets"))
            continue
        why = debugging_reason(var)
        if why:
            out.append(Knob(var, REMOVE, None, f"{var}={env[var]} (from {env_source}): a debugging variable, "
                            f"{why}; NCCL's guide says these should not be set in production"))
    return out


def _instance_note(obs: Any) -> str:
    """The instance type and where it was read (DMI or the cloud's metadata service), or why it is unknown."""
    kind = getattr(obs, "instance_type", None)
    if kind:
        return f" ({kind}, from {getattr(obs, 'instance_type_source', 'dmi')})"
    why = getattr(obs, "instance_type_error", None)
    return f" (instance type unknown: {why})" if why else ""


def _expanded(knobs: list[Knob], env: Mapping[str, str]) -> list[Knob]:
    """Values that refer to a variable the settings read define but the recommendation does not write
    (``${NCCL_LIB_DIR}/...`` in a provider's profile) with that reference expanded, as the profile's shell
    would; a reference to a variable the recommendation writes stays, and the env file sets it first."""
    from ccdiag.nccl.render import expand_refs

    written = {k.name for k in knobs if k.action == SET}
    out = []
    for k in knobs:
        value = expand_refs(k.value, env, keep=written) if k.value and "$" in k.value else k.value
        out.append(k if value == k.value else Knob(k.name, k.action, value, k.reason + f" (as the settings read expand "
                                                   f"{k.value})", k.evidence, k.confidence, k.details))
    return out


def _platform_notes(ident: platforms.Identity | None, layout: Layout) -> list[str]:
    if ident is None:
        return []
    plat = ident.platform
    if plat is not None:
        out = [f"platform: {plat.title}{_instance_note(layout.platform)}, identified by {ident.how}; its vendor-required "
               f"settings are kept ({plat.source})"]
        if plat.plugin_sets:
            out.append(f"{plat.plugin} sets by itself here: " + "; ".join(f"{k}={v}" for k, v in plat.plugin_sets.items()))
        if plat.notes:
            out.append(f"{plat.title}: {plat.notes}")
        return out
    if ident.kind == "cloud":
        return [f"platform: {ident.label} ({ident.how}): no entry in the platform table, so its documented settings "
                "are not known here; settings already present are kept, none is advised away"]
    if ident.kind == "unknown":
        return [f"platform not identified ({ident.how}): settings already present are kept and none is advised away; "
                "name the platform with --platform KEY (ccdiag/data/nccl_platforms.json) to judge them"]
    return [f"platform: bare metal ({ident.how})"]


def _foreign(knobs: list[Knob], ident: platforms.Identity | None, env: Mapping[str, str], env_source: str) -> list[Knob]:
    """Settings harmful on this instance type, and settings a provider documents only for other instance
    types of its own (or only another provider documents), flagged where they are set."""
    plat = ident.platform if ident is not None else None
    if plat is None:
        return knobs
    by_name = {k.name: k for k in knobs}
    out = list(knobs)
    for var in sorted(env):
        value = env[var]
        if var in plat.harmful:
            out = [k for k in out if k.name != var]
            out.append(Knob(var, REMOVE, None, f"{var}={value} (from {env_source}) on {plat.title}: {plat.harmful[var]}",
                            (Fact(var, value, env_source),), HIGH, {"harmful_on": plat.key}))
            continue
        if var in plat.settings or var in plat.plugin_sets:
            continue
        others = platforms.documented_elsewhere(var, plat)
        mine = [p for p in others if p.provider == plat.provider]
        if not others or (not mine and not var.startswith(("FI_", "NCCL_FASTRAK_", "NCCL_GPUDIRECTTCPX_"))
                          and var != "NCCL_NET"):
            continue
        names = ", ".join(p.title for p in (mine or others)[:3])
        reason = (f"{var}={value} (from {env_source}) is documented for {names}, not for {plat.title}: a setting copied "
                  "from another instance type; check it belongs here")
        details = {"documented_for": [p.key for p in (mine or others)]}
        old = by_name.get(var)
        if old is not None:
            if old.action != REMOVE:
                merged = Knob(old.name, old.action, old.value, f"{old.reason}; {reason}", old.evidence, old.confidence,
                              {**old.details, **details})
                out = [merged if k is old else k for k in out]
            continue
        out.append(Knob(var, INFO, value, reason, (Fact(var, value, env_source),), MEDIUM, details))
    return out


def _recommend(layout: Layout, env: Mapping[str, str], env_source: str, results: Mapping[str, Any],
               xml: str | None, env_unread: tuple[str, ...] = (), platform: str | None = None) -> Recommendation:
    if layout.platform is not None or platform:
        ident = platforms.identify(layout.platform, env, bool(layout.flattened), platform)
    elif layout.source == "smi":
        ident = platforms.Identity("unknown", "a pasted nvidia-smi topo -m names no platform")
    else:
        ident = None
    plat = ident.platform if ident is not None else None
    vendor_env = dict(env)
    env = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    hca, chosen = _ib_hca(layout, env, env_source)
    knobs = [hca, *node_faults(hca), _socket_ifname(layout, env, env_source, results)]
    knobs += _gid(layout, chosen)
    knobs.append(_cross_nic(layout, chosen))
    topo, files = _topo_file(layout, env, xml, ident)
    knobs.append(topo)
    ring = _ring_order(layout)
    if ring:
        knobs.append(ring)
    knobs += _experiments(layout, chosen)
    knobs += _existing(env, env_source, bool(chosen), ident)
    knobs = _vendor(knobs, plat, vendor_env, env_unread)
    knobs = _foreign(knobs, ident, vendor_env, env_source)
    knobs = _expanded(knobs, vendor_env)
    notes = _platform_notes(ident, layout)
    if layout.source == "smi":
        notes.append("from a pasted nvidia-smi topo -m alone: port numbers and states, link layers, GIDs and network "
                     "interfaces need the node (run `ccdiag nccl` there, or on its snapshot)")
    return Recommendation(tuple(knobs), layout.source, tuple(notes), files)


__all__ = ["recommend", "recommend_from_matrix", "PortFacts", "TOPO_FILE_PATH", "DEBUGGING"]
