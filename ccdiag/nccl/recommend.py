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
from ccdiag.nccl.lists import exact_list
from ccdiag.topology.levels import UNKNOWN, gpudirect_capable, level_rank
from ccdiag.topology.model import natural_key

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: interface name prefixes that never carry NCCL traffic between hosts (containers, bridges, tunnels)
NOT_FABRIC = ("lo", "docker", "br-", "virbr", "veth", "cni", "flannel", "cali", "vxlan", "tun", "tap", "lxc",
              "kube", "weave", "genev", "wg", "tailscale", "cilium", "podman", "vnet", "nerdctl")
#: virtual interfaces that are real fabric (bonds, teams, VLANs on top of a NIC)
VIRTUAL_BUT_FABRIC = ("bond", "team")
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
              policy: Any = None, env: Mapping[str, str] | None = None,
              env_source: str = "environment") -> Recommendation:
    """Settings for the node described by ``topology`` and the probe runs/observations it was built
    from. ``results``: measured facts (``{"reachable_ifaces": [...]}`` from cluster runs) narrowing
    the interface choice. ``env``: settings already present, judged and named for removal."""
    layout = layout_from_topology(topology, observations)
    xml = None
    if layout.flattened:
        from ccdiag.nccl.topo_xml import topology_xml

        xml = topology_xml(topology, observations)
    return _recommend(layout, env or {}, env_source, results or {}, xml)


def recommend_from_matrix(matrix: Any, where: str, env: Mapping[str, str] | None = None,
                          env_source: str = "environment") -> Recommendation:
    """What a pasted ``nvidia-smi topo -m`` alone supports (rails and ring order), and what needs the node."""
    return _recommend(layout_from_matrix(matrix, where), env or {}, env_source, {}, None)


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


def _ib_hca(layout: Layout, env: Mapping[str, str], env_source: str) -> tuple[Knob, list[tuple[str, int | None]]]:
    served, per_gpu = _rails(layout)
    var = "NCCL_IB_HCA"
    if not layout.nics:
        why = ("no RDMA NIC on this node: NCCL talks to other hosts over sockets (NCCL_SOCKET_IFNAME)"
               if layout.source == "node" else "the pasted matrix shows no NIC")
        return Knob(var, DEFAULT, None, why, (Fact("RDMA NICs", [], layout.where),)), []
    rails = sorted(served, key=natural_key)
    others = [n for n in layout.nics if n not in served]
    ev = [Fact(f"{g} nearest NIC", {"nics": near, "level": lv}, layout.where) for g, (near, lv) in per_gpu.items()]
    left_out: dict[str, str] = {n: "nearest to no GPU (storage or management)" for n in others}
    chosen: list[tuple[str, int | None]] = []
    if layout.ports is None:
        unnamed = [n for n in rails if n.startswith("NIC") and n[3:].isdigit()]
        if unnamed:
            return Knob(var, DEFAULT, None, f"the rails are {', '.join(rails)}, but the paste has no NIC legend naming "
                        f"{', '.join(unnamed)}: run `ccdiag nccl` on the node, or paste the whole output",
                        tuple(ev), LOW, {"rails": {n: served[n] for n in rails}, "left_out": left_out}), []
        chosen = [(n, None) for n in rails]
        reason = (f"the NICs nearest to a GPU, from the matrix ({', '.join(rails)}); exact names so no prefix "
                  "catches more. Port numbers and states need the node (`ccdiag nccl` there adds them).")
        return Knob(var, SET, exact_list(chosen), reason, tuple(ev), MEDIUM,
                    {"rails": {n: served[n] for n in rails}, "left_out": left_out}), chosen
    ports = [p for n in rails for p in layout.ports.get(n, ())]
    layers = [p.link_layer for p in ports if p.active and p.link_layer]
    majority = max(set(layers), key=lambda x: (layers.count(x), x == "InfiniBand")) if layers else None
    any_v2 = any(p.v2_gids for p in ports if p.active and p.roce)
    for p in ports:
        key = f"{p.nic}:{p.port}"
        ev.append(Fact(f"{key} port", {"state": p.state, "link_layer": p.link_layer, "rate_gbit_s": p.rate_gbit_s,
                                       "roce_v2_gids": list(p.v2_gids)},
                       f"/sys/class/infiniband/{p.nic}/ports/{p.port}"))
        if not p.active:
            left_out[key] = f"port is {p.state or 'not active'}"
        elif majority and p.link_layer and p.link_layer != majority:
            left_out[key] = f"{p.link_layer} link layer while the other rails are {majority} (they cannot talk)"
        elif p.roce and any_v2 and not p.v2_gids:
            left_out[key] = (f"RoCE port without a RoCEv2 GID (no IP address on {p.netdev or 'its netdev'}?), "
                             "while the other rails use RoCEv2")
        else:
            chosen.append((p.nic, p.port))
    down_gpus = {g: near for g, (near, _) in per_gpu.items() if near and not any(c[0] in near for c in chosen)}
    reason = "the ports of the NICs nearest to each GPU (the compute rails), exact names with ports"
    if left_out:
        reason += "; left out: " + "; ".join(f"{k}: {v}" for k, v in sorted(left_out.items(), key=lambda kv: natural_key(kv[0])))
    if down_gpus:
        names = sorted(down_gpus, key=natural_key)
        reason += "; " + ", ".join(names) + (" loses its" if len(names) == 1 else " lose their") + \
            " own rail and sends through another NIC until it is fixed"
    if not chosen:
        return Knob(var, DEFAULT, None, "no usable RDMA port: " + reason, tuple(ev), HIGH,
                    {"left_out": left_out}), []
    previous = env.get(var)
    if previous is not None and previous.strip() != exact_list(chosen):
        reason += f" (replaces {var}={previous} from {env_source})"
    conf = HIGH if not down_gpus else MEDIUM
    return Knob(var, SET, exact_list(chosen), reason, tuple(ev), conf,
                {"rails": {n: served[n] for n in rails}, "left_out": left_out,
                 "gpus_without_own_rail": sorted(down_gpus, key=natural_key)}), chosen


# ---------------------------------------------------------------- sockets

def _iface_problem(i: Any) -> str | None:
    name = i.name
    if name == "lo" or (name.startswith(NOT_FABRIC) and not name.startswith(VIRTUAL_BUT_FABRIC)):
        return "loopback, container, bridge or tunnel interface"
    if i.virtual and not name.startswith(VIRTUAL_BUT_FABRIC) and "." not in name:
        return "virtual interface"
    if (i.operstate or ("up" if i.up else "down")).lower() not in ("up", "unknown") or i.up is False:
        return "down"
    if not any(a.family in ("inet", "inet6") and not str(a.address).lower().startswith("fe80")
               for a in i.addresses):
        return "no IP address"
    return None


def _socket_ifname(layout: Layout, env: Mapping[str, str], env_source: str, results: Mapping[str, Any]) -> Knob:
    var = "NCCL_SOCKET_IFNAME"
    if layout.interfaces is None:
        return Knob(var, DEFAULT, None, "needs the node: a pasted matrix does not show network interfaces",
                    confidence=LOW)
    ev = []
    good = []
    reachable = results.get("reachable_ifaces")
    for i in sorted(layout.interfaces, key=lambda i: natural_key(i.name)):
        problem = _iface_problem(i)
        if problem is None and reachable is not None and i.name not in reachable:
            problem = "not reachable from the peers (cluster run)"
        ev.append(Fact(i.name, {"state": i.operstate, "speed_mbps": i.speed_mbps, "virtual": i.virtual,
                                "addresses": [a.address for a in i.addresses if a.family in ("inet", "inet6")],
                                "left_out": problem}, f"/sys/class/net/{i.name}"))
        if problem is None:
            good.append(i)
    if not good:
        return Knob(var, DEFAULT, None, "no interface is up with an address outside loopback/containers: "
                    "fix the network first", tuple(ev), HIGH)
    best = max((i.speed_mbps or 0) for i in good)
    top = [i for i in good if (i.speed_mbps or 0) == best]
    value = exact_list((i.name, None) for i in top)
    reason = (f"the fastest interface(s) that are up and addressed ({best / 1000:g} Gb/s)" if best else
              "the interface(s) up and addressed (speed not reported)")
    reason += "; exact names, so docker0, bridges and look-alike prefixes are never picked"
    previous = env.get(var)
    if previous is not None and previous.strip() != value:
        reason += f" (replaces {var}={previous} from {env_source})"
    return Knob(var, SET, value, reason, tuple(ev), HIGH if len(top) == 1 or reachable is not None else MEDIUM,
                {"candidates": [i.name for i in good]})


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
                     f"every rail here has it at index {k}. Pin NCCL_IB_GID_INDEX={k} only if every host shows the "
                     "same index (compare `ccdiag nccl --json` of the hosts): the index differs between hosts on some "
                     "fabrics", ev, HIGH, {"index_on_this_host": k})]
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


def _topo_file(layout: Layout, env: Mapping[str, str], xml: str | None) -> tuple[Knob, dict[str, str]]:
    var = "NCCL_TOPO_FILE"
    if layout.flattened:
        files = {TOPO_FILE_PATH: xml} if xml else {}
        return Knob(var, SET, TOPO_FILE_PATH if xml else None,
                    layout.flattened + ". Give NCCL the host's real layout: the generated file groups GPUs and NICs "
                    "by NUMA node as seen here; replace it with the host's (cloud providers publish one per VM "
                    "size) where the PCIe switches are known",
                    (Fact("PCI tree", "no switch, all GPU-NIC paths PHB", layout.where),), LOW), files
    if env.get(var):
        return Knob(var, REMOVE, None, f"{var}={env[var]} is set but this node's PCI tree is visible to NCCL: a stale "
                    "topology file causes spurious failures (Azure/azurehpc-health-checks#142)", confidence=MEDIUM), {}
    return Knob(var, DEFAULT, None, "NCCL reads this node's real PCI tree (PCIe switches and NUMA affinity are "
                "visible), so no topology file is needed"), {}


def _ring_order(layout: Layout) -> Knob | None:
    if len(layout.gpus) < 3:
        return None
    if layout.nvlink():
        return Knob("GPU ring order", INFO, None, "GPUs are joined by NVLink: rank order inside the node does not "
                    "change the ring's bottleneck", confidence=HIGH)
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
    worst = max(hops, key=level_rank)
    reason = (f"PCIe-only GPUs: ring neighbours {'in index order' if same else 'in this order'} share the "
              f"nearest bridges (hops {', '.join(hops)}; the slowest is {worst})")
    if not same:
        reason += f"; index order would hop {', '.join(index_hops)}"
    digits = [g[3:] for g in order]
    return Knob("GPU ring order", INFO, ",".join(order), reason + ". Use it as the rank order on this node "
                f"(e.g. CUDA_VISIBLE_DEVICES={','.join(digits)} with one rank per GPU)",
                (Fact("GPU-GPU levels", {f"{a}-{b}": layout.level(a, b) for a, b in zip(order, order[1:])},
                      layout.where),), MEDIUM, {"order": order, "changed": not same})


def _experiments(layout: Layout, chosen: list) -> list[Knob]:
    out = []
    if chosen and not layout.flattened:  # a flattened tree's PHB is the VM's, fixed by NCCL_TOPO_FILE
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


def _existing(env: Mapping[str, str], env_source: str, rails_present: bool) -> list[Knob]:
    out = []
    for var in sorted(env):
        if var in DEBUGGING:
            out.append(Knob(var, REMOVE, None, f"{var}={env[var]} (from {env_source}): a debugging variable, "
                            f"{DEBUGGING[var]}; NCCL's guide says these should not be set in production"))
        elif var == "NCCL_IB_DISABLE" and rails_present and env[var].strip() not in ("0", ""):
            out.append(Knob(var, REMOVE, None, f"{var}={env[var]} (from {env_source}) turns off InfiniBand/RoCE on a "
                            "node with RDMA rails: traffic falls back to TCP sockets"))
    return out


def _recommend(layout: Layout, env: Mapping[str, str], env_source: str, results: Mapping[str, Any],
               xml: str | None) -> Recommendation:
    env = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    hca, chosen = _ib_hca(layout, env, env_source)
    knobs = [hca, _socket_ifname(layout, env, env_source, results)]
    knobs += _gid(layout, chosen)
    knobs.append(_cross_nic(layout, chosen))
    topo, files = _topo_file(layout, env, xml)
    knobs.append(topo)
    ring = _ring_order(layout)
    if ring:
        knobs.append(ring)
    knobs += _experiments(layout, chosen)
    knobs += _existing(env, env_source, bool(chosen))
    notes = []
    if layout.source == "smi":
        notes.append("from a pasted nvidia-smi topo -m alone: port numbers and states, link layers, GIDs and network "
                     "interfaces need the node (run `ccdiag nccl` there, or on its snapshot)")
    return Recommendation(tuple(knobs), layout.source, tuple(notes), files)


__all__ = ["recommend", "recommend_from_matrix", "PortFacts", "TOPO_FILE_PATH", "DEBUGGING"]
