"""GPUs and NICs against their peers on the same node, with no policy needed.

An HGX-class node is built from identical parts wired the same way, so the node is its own
baseline: one H800 among seven H100s, one GPU capped at 350 W beside 700 W peers, one GPU idling at
PCIe Gen3 while its idle peers hold Gen5, or one GPU's rail NIC on the other CPU socket are each a
fault of that one part, even where nothing in a policy file says what to expect. Every rule needs
a clear majority (more than half of the comparable parts agree); a node split down the middle has
no odd one out and is not judged here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE, gpu_activity, gpu_component, nvml_gate
from ccdiag.core.findings import FAIL, PASS, SKIP, WARN, Component, Evidence, Finding
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NVML, PROBE_PCIE
from ccdiag.core.readings import normalize_bdf

PEERS = "the other GPUs of this node (no policy needed)"
#: a power limit this far below its same-model peers' is a cap someone set, not rounding
POWER_LIMIT_SHORT = 0.9


def _majority(values: list) -> tuple[Any, int] | None:
    """The value more than half of ``values`` share, with its count; None without one."""
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return None
    value, n = counts.most_common(1)[0]
    return (value, n) if n * 2 > sum(counts.values()) else None


def _usable(nvml: Any) -> list:
    return [g for g in sorted(nvml.gpus, key=lambda g: g.index) if not g.failed]


def _by_model(nvml: Any, keep: Callable[[Any], bool] = lambda g: True) -> list[tuple[str, list]]:
    """The usable GPUs that ``keep`` accepts, grouped by model name, in model order: peers are GPUs
    of one model."""
    groups: dict[str, list] = {}
    for g in _usable(nvml):
        if keep(g):
            groups.setdefault(g.name or "?", []).append(g)
    return sorted(groups.items())


@check("gpu.peer_model", needs=(PROBE_NVML,))
def peer_model(ctx: CheckContext) -> list[Finding]:
    """One GPU of another model than the rest of the node (an H800 among H100s): jobs sized for the
    node run at the slowest model's speed, and NCCL's tuning assumes one model."""
    cid = "gpu.peer_model"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    gpus = [g for g in _usable(nvml) if g.name]
    if len(gpus) < 2:
        return [Finding(cid, SKIP, NODE, "Fewer than two GPUs with a model name: nothing to compare.")]
    major = _majority([g.name for g in gpus])
    models = Counter(g.name for g in gpus)
    if len(models) == 1:
        return [Finding(cid, PASS, NODE, f"All {len(gpus)} GPUs are {gpus[0].name}.", expected_source=PEERS)]
    if major is None:
        return [Finding(cid, WARN, NODE, "Mixed GPU models with no majority: "
                        + ", ".join(f"{n}x {m}" for m, n in models.most_common()) + ".",
                        evidence=(Evidence("models", dict(models), "nvmlDeviceGetName"),),
                        remedy="Check that this node was meant to mix models; jobs run at the slowest one's pace.")]
    common = major[0]
    return [Finding(cid, FAIL, gpu_component(g),
                    f"GPU{g.index} is {g.name}; its {major[1]} peers are {common}.",
                    evidence=(Evidence("model", g.name, f"nvmlDeviceGetName({g.index})"),
                              Evidence("peers' model", common, "nvmlDeviceGetName")),
                    expected=common, expected_source=PEERS,
                    remedy="Replace the odd GPU with the node's model (or take it out of the job's GPU set); a "
                           "mixed node runs every collective at the slowest GPU's speed.",
                    details={"model": g.name, "peers": common})
            for g in gpus if g.name != common]


@check("gpu.peer_power", needs=(PROBE_NVML,))
def peer_power(ctx: CheckContext) -> list[Finding]:
    """A power limit below the same-model peers' (350 W beside 700 W): that GPU throttles first and
    holds back every collective the node runs."""
    cid = "gpu.peer_power"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    out: list[Finding] = []
    by_model = _by_model(nvml, lambda g: g.power_limit_w is not None)
    for model, gpus in by_model:
        major = _majority([round(g.power_limit_w) for g in gpus]) if len(gpus) >= 3 else None
        if major is None:
            continue
        want = major[0]
        for g in gpus:
            if g.power_limit_w < want * POWER_LIMIT_SHORT:
                out.append(Finding(
                    cid, FAIL, gpu_component(g),
                    f"GPU{g.index} power limit {g.power_limit_w:g} W; its {major[1]} {model} peers run at {want:g} W.",
                    evidence=(Evidence("enforced power limit W", g.power_limit_w,
                                       f"nvmlDeviceGetEnforcedPowerLimit({g.index})"),
                              Evidence("peers' power limit W", want, "nvmlDeviceGetEnforcedPowerLimit")),
                    expected=f"{want:g} W", expected_source=PEERS,
                    remedy=f"Restore the limit (nvidia-smi -i {g.index} -pl {want:g}); if it will not go up, check "
                           "the node's power capping (BMC or DCGM policy) and the GPU's power supply.",
                    details={"power_limit_w": g.power_limit_w, "peers_w": want}))
    if not out:
        n = sum(len(v) for _, v in by_model)
        if not n:
            return [Finding(cid, SKIP, NODE, "No GPU power limit was read.")]
        out.append(Finding(cid, PASS, NODE, f"{n} GPU power limit(s) consistent with their same-model peers.",
                           expected_source=PEERS))
    return out


#: an SM clock this far below its same-model peers' is a setting or a part, not measurement noise
CLOCK_SHORT = 0.95


def _clock_finding(cid: str, g: Any, what: str, fn: str, mhz: int, want: int, n: int, model: str) -> Finding:
    return Finding(
        cid, FAIL, gpu_component(g),
        f"GPU{g.index} {what} {mhz} MHz; its {n} {model} peers {want} MHz.",
        evidence=(Evidence(f"{what} MHz", mhz, f"{fn}({g.index}, NVML_CLOCK_SM)"),
                  Evidence(f"peers' {what} MHz", want, fn)),
        expected=f"{want} MHz", expected_source=PEERS,
        remedy=(f"Reset the clocks (nvidia-smi -i {g.index} -rac and -rgc) if someone set them; a GPU whose maximum "
                "clock is below its peers' is another SKU or VBIOS: replace it or take it out of the job's GPUs."),
        details={"clock": what, "mhz": mhz, "peers_mhz": want})


@check("gpu.peer_clocks", needs=(PROBE_NVML,))
def peer_clocks(ctx: CheckContext) -> list[Finding]:
    """A GPU whose SM clock is set (applications clock) or able (maximum clock) to run slower than
    its same-model peers': every collective then runs at that GPU's pace."""
    cid = "gpu.peer_clocks"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    out: list[Finding] = []
    judged = 0
    for model, gpus in _by_model(nvml):
        for attr, what, fn in (("clock_sm_max_mhz", "maximum SM clock", "nvmlDeviceGetMaxClockInfo"),
                               ("clock_sm_app_mhz", "applications SM clock", "nvmlDeviceGetApplicationsClock")):
            values = {g.index: getattr(g, attr) for g in gpus if getattr(g, attr)}
            major = _majority(list(values.values())) if len(values) >= 3 else None
            if major is None:
                continue
            judged += 1
            out += [_clock_finding(cid, g, what, fn, values[g.index], major[0], major[1], model)
                    for g in gpus if g.index in values and values[g.index] < major[0] * CLOCK_SHORT]
    if not out:
        if not judged:
            return [Finding(cid, SKIP, NODE, "Fewer than three GPUs of one model report SM clocks: nothing to compare.")]
        out.append(Finding(cid, PASS, NODE, "GPU SM clocks consistent with their same-model peers.",
                           expected_source=PEERS))
    return out


def _at_rest(g: Any) -> bool:
    """Idle by NVML's idle bit *and* running nothing. A GPU in a job raises the idle bit between
    kernels while its link still runs at its working speed: beside it, an unused GPU resting at
    Gen1 would look slow. Only GPUs at rest are each other's reference."""
    return gpu_activity(g) == "idle" and not getattr(g, "compute_processes", ())


def _idle_gens(gpus: list) -> dict[int, int]:
    return {g.index: g.pcie_gen_current for g in gpus if _at_rest(g) and g.pcie_gen_current is not None}


@check("pcie.peer_gen", needs=(PROBE_NVML,), what="idle PCIe generation against peers")
def peer_gen(ctx: CheckContext) -> list[Finding]:
    """An idle GPU whose PCIe link sits at a lower generation than its idle same-model peers'. Idle
    GPUs lower their link speed to save power, all alike; when the peers idle at Gen5 and one GPU
    at Gen3, that GPU's link no longer reaches what the platform gives the others."""
    cid = "pcie.peer_gen"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    out: list[Finding] = []
    judged = 0
    for model, gpus in _by_model(nvml):
        gens = _idle_gens(gpus)
        major = _majority(list(gens.values())) if len(gens) >= 3 else None
        if major is None:
            continue
        judged += len(gens)
        want = major[0]
        for g in gpus:
            got = gens.get(g.index)
            if got is None or got >= want:
                continue
            out.append(Finding(
                cid, FAIL if want - got >= 2 else WARN,
                Component("pcie_link", f"GPU{g.index} PCIe link", gpu=g.index, uuid=g.uuid,
                          bdf=normalize_bdf(g.bus_id)),
                f"GPU{g.index} idles at PCIe Gen{got} while its {major[1]} idle {model} peers idle at Gen{want}.",
                evidence=(Evidence("current PCIe generation", got, f"nvmlDeviceGetCurrPcieLinkGeneration({g.index})"),
                          Evidence("peers' idle generation", want, "nvmlDeviceGetCurrPcieLinkGeneration"),
                          Evidence("GPU state", "idle", f"nvmlDeviceGetCurrentClocksEventReasons({g.index})")),
                expected=f"Gen{want}, as its idle peers", expected_source=PEERS,
                remedy="Check the link under load (`ccdiag check` loads the links itself on a live node): a link "
                       "that stays low is a slot, riser or retimer fault; reseat the GPU or move it to another slot.",
                details={"gen": got, "peers_gen": want}))
    if not out:
        if not judged:
            return [Finding(cid, SKIP, NODE, "Fewer than three idle GPUs of one model: no idle link speed to compare.")]
        out.append(Finding(cid, PASS, NODE, f"{judged} idle GPU link(s) at their peers' generation.",
                           expected_source=PEERS))
    return out


# ------------------------------------------------------------------------------ rail NICs

def _rdma_nics(ctx: CheckContext) -> list:
    """The topology's NICs that the InfiniBand probe shows as RDMA devices (rail NICs); a
    management Ethernet port is no rail."""
    ib = ctx.data(PROBE_INFINIBAND)
    names = {d.name for d in getattr(ib, "devices", ()) or ()}
    topo = ctx.topology
    return [n for n in topo.nics() if n.label in names] if topo is not None else []


def _rail_nic_findings(topo: Any, ctx: CheckContext) -> list[Finding]:
    gpus = [g for g in topo.gpus() if getattr(g, "numa", None) is not None]
    nics = [n for n in _rdma_nics(ctx) if getattr(n, "numa", None) is not None]
    if len(gpus) < 2 or len(nics) < 2:
        return []
    gpu_sockets = Counter(g.numa for g in gpus)
    nic_sockets = Counter(n.numa for n in nics)
    # a socket with more NICs than GPUs holds a NIC that belongs with the GPUs of a socket that has fewer
    extra = {s for s, k in nic_sockets.items() if k > gpu_sockets.get(s, 0)}
    short = {s for s, k in gpu_sockets.items() if k > nic_sockets.get(s, 0)}
    if len(gpus) != len(nics) or not extra or not short:
        return []
    out = []
    for n in nics:
        if n.numa not in extra:
            continue
        if any(topo.level(g.label, n.label) in ("PIX", "PXB") for g in gpus):
            continue  # it has its own GPU here: not the misplaced one
        want = sorted(short)
        lonely = [g.label for g in gpus if g.numa in short and
                  not any(topo.level(g.label, m.label) in ("PIX", "PXB") for m in nics)]
        out.append(Finding(
            "ib.rail_socket", FAIL, Component("nic", n.label, bdf=n.bdf, device=n.label),
            f"{n.label} sits on NUMA node {n.numa}, which has {nic_sockets[n.numa]} NICs for "
            f"{gpu_sockets.get(n.numa, 0)} GPUs, while NUMA node {', '.join(map(str, want))} has "
            f"{', '.join(str(gpu_sockets[s]) for s in want)} GPUs for "
            f"{', '.join(str(nic_sockets.get(s, 0)) for s in want)} NICs" + (f" ({', '.join(lonely)} without a NIC of their own)" if lonely else "") + ".",
            evidence=(Evidence("NIC NUMA node", n.numa, f"/sys/bus/pci/devices/{n.bdf}/numa_node"),
                      Evidence("GPUs per NUMA node", dict(gpu_sockets), "topology"),
                      Evidence("NICs per NUMA node", dict(nic_sockets), "topology")),
            expected="one rail NIC beside each GPU, on the GPU's socket", expected_source=PEERS,
            remedy=f"Move {n.label} to the PCIe slot meant for the GPU without a NIC (its own switch on NUMA node "
                   f"{', '.join(map(str, want))}); until then that GPU's network traffic crosses the CPU "
                   "interconnect.",
            details={"numa": n.numa, "gpus_without_nic": lonely}))
    return out


@check("ib.rail_socket", uses=(PROBE_INFINIBAND, PROBE_PCIE))
def rail_socket(ctx: CheckContext) -> list[Finding]:
    """On a node with one rail NIC per GPU, each socket has as many NICs as GPUs; a NIC on the other
    socket is the misplaced part (the GPUs that then reach a NIC across the CPU follow from it)."""
    cid = "ib.rail_socket"
    topo = ctx.topology
    if topo is None or not topo.gpus() or not _rdma_nics(ctx):
        return [Finding(cid, SKIP, NODE, "No GPUs and NICs in the topology to compare.")]
    out = _rail_nic_findings(topo, ctx)
    if out:
        return out
    n_gpus, n_nics = len(topo.gpus()), len(_rdma_nics(ctx))
    if n_gpus != n_nics:
        return [Finding(cid, SKIP, NODE, f"{n_gpus} GPUs and {n_nics} RDMA NICs: not one rail NIC per GPU, so "
                        "sockets are not compared.")]
    return [Finding(cid, PASS, NODE, "Every socket has as many NICs as GPUs.", expected_source=PEERS)]
