"""PCIe health: link width and speed on every hop, AER and replay counters, ACS on GPU-NIC paths.

False alarms are the main risk here. An idle GPU lowers its PCIe link to 2.5 GT/s to save power,
and the switch port above it reports the same link, so a lower *speed* on a GPU path is judged only
when NVML shows the GPU busy. A lower *width* is never a power state: it is a lane that failed to
train. A device slower or narrower than the slot above it is "limited by" the slot, a design fact
that warns rather than fails. Counters are judged by their change over the window, never by the
lifetime totals a reboot-free year accumulates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, cast

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import (GpuId, counter_delta, gpu_activity, gpu_ids, nic_names, node_component,
                                  policy_source, second_sample, sysfs_path)
from ccdiag.core import actions as A
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.linkrates import pcie_gen as gen_of
from ccdiag.core.readings import normalize_bdf
from ccdiag.topology.pcie_tree import BRIDGE_KINDS, ENDPOINT_KINDS, PcieTree, common_hops, parent_bdf
from ccdiag.core.probenames import PROBE_NVML, PROBE_PCIE

#: Replays (and, by the same bit-error budget, correctable errors) per lane per minute that a
#: link at BER 1e-12 may show; above this the link is worse than spec. Gen1/Gen2 are not in the
#: source table and are extrapolated by halving. Source: NVIDIA/DCGM
#: modules/health/DcgmHealthWatch.cpp (GetExpectedPcieReplayRate).
REPLAY_BUDGET_PER_LANE_PER_MIN = {1: 0.12, 2: 0.24, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}

#: ACS features that redirect peer-to-peer requests or completions up to the root complex
ACS_REDIRECTING = ("ReqRedir", "CmpltRedir", "EgressCtrl")


def _speed(gts: float | None) -> str:
    if gts is None:
        return "?"
    gen = gen_of(gts)
    return f"{gts:g} GT/s (Gen{gen})" if gen else f"{gts:g} GT/s"


def pcie_tree(ctx: CheckContext, devices: Iterable[Any]) -> PcieTree:
    """The topology's tree of PCI functions, or one built from ``devices`` when the context has no
    topology (a check run on bare observations)."""
    tree = getattr(ctx.topology, "pcie_tree", None)
    if isinstance(tree, PcieTree) and tree.devices:
        return tree
    return PcieTree(devices)


class Names:
    """Labels and components for the PCI functions of one observation (the tree itself comes from
    the topology: :class:`ccdiag.topology.pcie_tree.PcieTree`)."""

    def __init__(self, ctx: CheckContext, devices: Iterable[Any]):
        self.tree = pcie_tree(ctx, devices)
        self.devices = self.tree.devices
        self.gpus = gpu_ids(ctx)
        self.nics = nic_names(ctx)
        self.served: dict[str, list[str]] = {}
        for d in self.endpoints():
            for hop in d.path:
                if hop != d.bdf:
                    self.served.setdefault(hop, []).append(self.label(d))

    @staticmethod
    def parent_bdf(d: Any) -> str | None:
        return parent_bdf(d)

    def parent(self, d: Any) -> Any:
        return self.tree.parent(d)

    def children(self, bdf: str) -> tuple[Any, ...]:
        return self.tree.children(bdf)

    def endpoints(self) -> list[Any]:
        return sorted(self.tree.endpoints(), key=self.sort_key)

    def sort_key(self, d: Any) -> tuple:
        g = self.gpus.get(d.bdf)
        return (ENDPOINT_KINDS.index(d.kind) if d.kind in ENDPOINT_KINDS else 9,
                g.index if g and g.index is not None else 1 << 20, d.bdf)

    def label(self, d: Any) -> str:
        if d.kind == "gpu":
            g = self.gpus.get(d.bdf)
            return g.label if g else f"GPU {d.bdf}"
        if d.kind == "nic":
            return self.nics.get(d.bdf) or f"NIC {d.bdf}"
        if d.kind == "nvswitch":
            return f"NVSwitch {d.bdf}"
        if d.kind == "root_port":
            return f"root port {d.bdf}"
        if d.kind == "bridge":
            return f"bridge {d.bdf}"
        return f"PCI {d.bdf}"

    def served_gpus(self, d: Any) -> list[GpuId]:
        """GPUs at or below ``d``."""
        if d.kind == "gpu":
            g = self.gpus.get(d.bdf)
            return [g] if g else []
        return [g for e in sorted(self.tree.endpoints_below(d.bdf), key=self.sort_key) if e.kind == "gpu"
                for g in [self.gpus.get(e.bdf)] if g]

    def is_gpu_own_link(self, d: Any) -> bool:
        """Whether the link read at ``d`` is a GPU's own link: the GPU itself, or the port directly
        above GPUs only (a root or downstream port reports the link below it). Only such a link
        slows down when its GPU idles; a switch uplink keeps its speed whatever the GPUs do."""
        if d.kind == "gpu":
            return True
        kids = self.tree.children(d.bdf)
        return d.kind in BRIDGE_KINDS and bool(kids) and all(k.kind == "gpu" for k in kids)

    def carried(self, d: Any) -> tuple[Any, ...]:
        """The endpoints whose traffic crosses the link read at ``d``."""
        if d.kind in ENDPOINT_KINDS:
            return (d,)
        return self.tree.endpoints_below(d.bdf)

    def component(self, d: Any) -> Component:
        label = self.label(d)
        if d.kind in ENDPOINT_KINDS:
            g = self.gpus.get(d.bdf) if d.kind == "gpu" else None
            return Component("pcie_link", f"{label} PCIe link", gpu=g.index if g else None,
                             uuid=g.uuid if g else None, bdf=d.bdf,
                             device=label if d.kind == "nic" else None, peer=self.parent_bdf(d))
        served = self.served.get(d.bdf) or []
        return Component("bridge", label, bdf=d.bdf, peer=", ".join(served) or None)


# ---------------------------------------------------------------- link width / speed

@dataclass
class _Attr:
    """How to read and print one link attribute (width or speed)."""

    name: str  # "width" | "speed"
    cur: Callable[[Any], Any]
    max: Callable[[Any], Any]
    fmt: Callable[[Any], str]
    cur_file: str
    max_file: str
    notes: dict[str, list[str]] = field(default_factory=dict)


WIDTH = _Attr("width", lambda d: d.current_link_width, lambda d: d.max_link_width, lambda v: f"x{v}",
              "current_link_width", "max_link_width")
SPEED = _Attr("speed", lambda d: d.current_link_speed_gts, lambda d: d.max_link_speed_gts, _speed,
              "current_link_speed", "max_link_speed")


def _valid(v: Any) -> bool:
    return v is not None and v > 0  # VMs report width 0 / "Unknown" speed on emulated ports


def _link_evidence(d: Any, a: _Attr) -> list[Evidence]:
    raw_cur = d.current_link_speed_raw if a is SPEED else None
    raw_max = d.max_link_speed_raw if a is SPEED else None
    return [Evidence(f"current link {a.name}", raw_cur or a.fmt(a.cur(d)), sysfs_path(d.bdf, a.cur_file)),
            Evidence(f"max link {a.name}", raw_max or a.fmt(a.max(d)), sysfs_path(d.bdf, a.max_file))]


def _judge_hop(ctx: CheckContext, names: Names, d: Any, a: _Attr,
               check_id: str) -> tuple[str, Finding | None, str | None]:
    """Judge one hop. Returns (verdict, finding, note): verdict "ok" | "note" | "problem" | "skip"."""
    cur, mx = a.cur(d), a.max(d)
    if not (_valid(cur) and _valid(mx)):
        return "skip", None, None
    if cur >= mx:
        return "ok", None, None
    kids = names.children(d.bdf)
    if any(_valid(a.max(c)) and a.max(c) <= cur for c in kids):
        return "ok", None, None  # the device below cannot go faster/wider: nothing wrong at this hop
    if any(a.cur(c) == cur and _valid(a.max(c)) and a.max(c) > a.cur(c) for c in kids):
        return "skip", None, None  # same link, reported at its lower end
    limited = _limited_by_parent(names, d, a, check_id)
    if limited is not None:
        return "problem", limited, None
    if a is SPEED and names.is_gpu_own_link(d):
        return _gpu_speed_hop(ctx, names, d, a, check_id)
    return "problem", _trained_low(names, d, a, check_id), None


def _limited_by_parent(names: Names, d: Any, a: _Attr, check_id: str) -> Finding | None:
    """A hop running at the most its slot or switch port above allows: a design fact, warned."""
    cur, mx = a.cur(d), a.max(d)
    parent = names.parent(d)
    if parent is None or not _valid(a.max(parent)) or a.max(parent) >= mx or cur < a.max(parent):
        return None
    ev = _link_evidence(d, a) + [Evidence(f"upstream max link {a.name}", a.fmt(a.max(parent)),
                                          sysfs_path(parent.bdf, a.max_file))]
    return Finding(
        check_id, WARN, names.component(d),
        f"{names.label(d)} can run at {a.fmt(mx)} but is limited by {names.label(parent)} "
        f"(max {a.fmt(a.max(parent))}); it runs at {a.fmt(cur)}",
        tuple(ev), expected=a.fmt(mx), expected_source=f"device capability ({a.max_file})",
        remedy=f"Not a fault: the slot or switch port above is the bottleneck. Move the device to a "
               f"port that supports {a.fmt(mx)}, or accept the lower host bandwidth.",
        details={"limited_by": parent.bdf})


def _gpu_speed_hop(ctx: CheckContext, names: Names, d: Any, a: _Attr,
                   check_id: str) -> tuple[str, Finding | None, str | None]:
    """A GPU's own link below its speed. Idle GPUs lower their link speed to save power, so it is
    judged only while the GPU works; under ccdiag's own host-to-device copies the link is known to
    be saturated, so a link still trained low fails, while a GPU merely reported busy by NVML warns
    (its workload may not be using the link)."""
    cur, mx = a.cur(d), a.max(d)
    gpus = names.served_gpus(d)
    loaded = set((ctx.meta.get("link_load") or {}).get("loaded") or ())
    acts = ["busy" if g.index in loaded else gpu_activity(g.gpu) for g in gpus]
    if "busy" not in acts:
        why = "idle" if acts and all(x == "idle" for x in acts) else "activity unknown"
        note = (f"{names.label(d)} link at {a.fmt(cur)} of {a.fmt(mx)}: GPU {why}; idle GPUs lower their "
                f"PCIe speed to save power, so speed is not judged here")
        return "note", None, note
    under_load = any(g.index in loaded for g in gpus)
    ev = _link_evidence(d, a) + [Evidence("GPU activity", "busy", "ccdiag's host-to-device copies (link load)"
                                          if under_load else "NVML clock event reasons / compute processes")]
    if under_load:
        return "problem", Finding(
            check_id, FAIL, names.component(d),
            f"{names.label(d)} PCIe link at {a.fmt(cur)} of {a.fmt(mx)} while ccdiag kept it busy with "
            "host-to-device copies: it trained low",
            tuple(ev), expected=a.fmt(mx), expected_source=f"device capability ({a.max_file})",
            remedy="Drain the node; reseat the GPU/riser and check the slot's BIOS link settings; a link that "
                   "keeps training low under load after a cold boot points at the riser, retimer or slot.",
            details={"gpus": [g.label for g in gpus], "under_load": True}, action=A.SERVICE), None
    return "problem", Finding(
        check_id, WARN, names.component(d),
        f"{names.label(d)} PCIe link at {a.fmt(cur)} of {a.fmt(mx)} while the GPU is busy",
        tuple(ev), expected=a.fmt(mx), expected_source=f"device capability ({a.max_file})",
        remedy="Re-check under load (`ccdiag check` on a live node loads the links itself); if the link stays "
               "below its capability under load, reseat the GPU/riser and check the slot's BIOS link settings.",
        details={"gpus": [g.label for g in gpus]}), None


def _trained_low(names: Names, d: Any, a: _Attr, check_id: str) -> Finding:
    cur, mx = a.cur(d), a.max(d)
    status = FAIL if a is WIDTH else _speed_severity(names.carried(d))
    if a is WIDTH:
        what = "a lane failed to train (a width downgrade is never a power-saving state)"
        remedy = ("Drain the node; reseat the card, riser or cable at this hop and check for damage or "
                  "debris; if it persists after a cold boot the slot, riser or device needs service.")
    else:
        what = "the link trained below its capability"
        remedy = ("Reseat the card/riser and check BIOS PCIe speed settings; a link that keeps training "
                  "slow points at signal integrity (riser, retimer, cable). Re-check after a cold boot.")
    peers = names.served.get(d.bdf)
    serving = f" (serves {', '.join(peers)})" if peers and d.kind in BRIDGE_KINDS else ""
    return Finding(
        check_id, status, names.component(d),
        f"{names.label(d)}{serving} PCIe link at {a.fmt(cur)} of {a.fmt(mx)}: {what}",
        tuple(_link_evidence(d, a)), expected=a.fmt(mx), expected_source=f"device capability ({a.max_file})",
        remedy=remedy, action=A.SERVICE if status == FAIL else None)


def _speed_severity(carried: tuple[Any, ...]) -> str:
    """A link trained below its speed fails when it carries a NIC's traffic (the node's network
    bandwidth) or several GPUs' (their host bandwidth together), wherever on the path it sits; a
    link carrying one GPU's traffic alone warns, as that GPU's own link does."""
    if any(e.kind == "nic" for e in carried) or sum(1 for e in carried if e.kind == "gpu") >= 2:
        return FAIL
    return WARN


def _policy_min(ctx: CheckContext, names: Names, d: Any, a: _Attr, check_id: str) -> Finding | None:
    """Fleet minimum (policy) against what the link can do at best: min(device max, slot max)."""
    pol = ctx.policy
    want = pol.min_pcie_width if a is WIDTH else pol.min_pcie_gen
    if want is None or d.kind != "gpu":  # a slow management NIC must not lower the fleet bar for GPUs
        return None
    caps = [d]
    parent = names.parent(d)
    if parent is not None:
        caps.append(parent)
    vals = [(x, a.max(x)) for x in caps if _valid(a.max(x))]
    if not vals:
        return None
    holder, best = min(vals, key=lambda t: t[1])
    have = best if a is WIDTH else gen_of(best)
    if have is None or have >= want:
        return None
    shown = f"x{want}" if a is WIDTH else f"Gen{want}"
    return Finding(check_id, FAIL, names.component(d),
                   f"{names.label(d)} PCIe link can do at most {a.fmt(best)}, below the fleet minimum {shown}"
                   + (f" (limited by {names.label(holder)})" if holder is not d else ""),
                   (Evidence(f"max link {a.name}", a.fmt(best), sysfs_path(holder.bdf, a.max_file)),),
                   expected=f"{shown} or better",
                   expected_source=policy_source(ctx, "min_pcie_width" if a is WIDTH else "min_pcie_gen"),
                   remedy="This node does not meet the fleet's PCIe standard: move the device to a "
                          "full-capability slot or correct the policy if this hardware is expected.")


def _judge_paths(ctx: CheckContext, names: Names, endpoints: list, a: _Attr,
                 check_id: str) -> dict[str, tuple[str, Finding | None, str | None]]:
    """Every hop on every endpoint's path judged once (a switch uplink serves several endpoints)."""
    judged: dict[str, tuple[str, Finding | None, str | None]] = {}
    for e in endpoints:
        for hop in list(e.path[:-1] if e.path and e.path[-1] == e.bdf else e.path) + [e.bdf]:
            dev = names.devices.get(hop)
            if dev is not None and hop not in judged:
                judged[hop] = _judge_hop(ctx, names, dev, a, check_id)
    return judged


def _endpoint_finding(names: Names, e: Any, a: _Attr, check_id: str, hops: list[str],
                      judged: dict) -> Finding:
    """The pass (or not-reported) finding of an endpoint whose path has no problem."""
    cur, mx = a.cur(e), a.max(e)
    if not (_valid(cur) and _valid(mx)):
        return Finding(check_id, UNKNOWN if e.errors else SKIP, names.component(e),
                       f"{names.label(e)} PCIe link {a.name} not reported",
                       tuple(Evidence("read error", err.message or err.kind, err.source) for err in e.errors))
    notes = [cast(str, judged[h][2]) for h in hops if judged.get(h, ("",))[0] == "note"]  # a note has its text
    if notes:
        summary = notes[0] if len(notes) == 1 else "; ".join(notes)
    else:
        summary = (f"{names.label(e)} PCIe link {a.fmt(cur)} of {a.fmt(mx)}"
                   + ("; every hop to the root port at its capability" if len(hops) > 1 else ""))
    return Finding(check_id, PASS, names.component(e), summary, tuple(_link_evidence(e, a)),
                   expected=a.fmt(mx), expected_source=f"device capability ({a.max_file})",
                   details={"notes": notes} if notes else {})


def _link_check(ctx: CheckContext, a: _Attr, check_id: str) -> list[Finding]:
    names = Names(ctx, ctx.data(PROBE_PCIE).devices)
    endpoints = names.endpoints()
    if not endpoints:
        return [Finding(check_id, SKIP, node_component(), "no GPU, NIC or NVSwitch PCIe functions found")]
    judged = _judge_paths(ctx, names, endpoints, a, check_id)
    findings: list[Finding] = [v[1] for v in judged.values() if v[1] is not None]
    nvml_limit = _nvml_gen_limits(ctx, names) if a is SPEED else {}
    for e in endpoints:
        hops = [h for h in (list(e.path) or [e.bdf]) if h in judged] or [e.bdf]
        if e.bdf not in hops:
            hops.append(e.bdf)
        pol = _policy_min(ctx, names, e, a, check_id)
        if pol:
            findings.append(pol)
        problem = any(judged.get(h, ("",))[0] == "problem" for h in hops)
        if e.bdf in nvml_limit and not problem:
            findings.append(nvml_limit[e.bdf])
        elif not problem and not pol:
            findings.append(_endpoint_finding(names, e, a, check_id, hops, judged))
    return findings


def _nvml_gen_limits(ctx: CheckContext, names: Names) -> dict[str, Finding]:
    """NVML knows the GPU's own max generation and the link's (host side included): a GPU whose
    link max is below its own max is limited by the host, which sysfs may not show (VMs)."""
    out: dict[str, Finding] = {}
    for bdf, g in names.gpus.items():
        gpu = g.gpu
        if gpu is None or gpu.pcie_gen_max is None or gpu.pcie_gen_device_max is None:
            continue
        if gpu.pcie_gen_max >= gpu.pcie_gen_device_max:
            continue
        dev = names.devices.get(bdf)
        comp = names.component(dev) if dev is not None else Component(
            "pcie_link", f"{g.label} PCIe link", gpu=g.index, uuid=g.uuid, bdf=bdf)
        out[bdf] = Finding(
            "pcie.link_speed", WARN, comp,
            f"{g.label} supports PCIe Gen{gpu.pcie_gen_device_max} but its link can do at most "
            f"Gen{gpu.pcie_gen_max}: limited by the host side",
            (Evidence("GPU max PCIe generation", gpu.pcie_gen_device_max, "NVML nvmlDeviceGetGpuMaxPcieLinkGeneration"),
             Evidence("link max PCIe generation", gpu.pcie_gen_max, "NVML nvmlDeviceGetMaxPcieLinkGeneration")),
            expected=f"Gen{gpu.pcie_gen_device_max}", expected_source="GPU max (NVML)",
            remedy="Not a fault: the slot, switch or CPU root port is the bottleneck. Move the GPU to a "
                   "faster port, or check the BIOS PCIe generation setting for this slot.")
    return out


@check("pcie.link_width", needs=(PROBE_PCIE,), what="PCIe link width")
def link_width(ctx: CheckContext) -> list[Finding]:
    """Every GPU/NIC/NVSwitch link and every bridge on its path at its full lane count."""
    return _link_check(ctx, WIDTH, "pcie.link_width")


@check("pcie.link_speed", needs=(PROBE_PCIE,), uses=(PROBE_NVML,), what="PCIe link speed")
def link_speed(ctx: CheckContext) -> list[Finding]:
    """Link speed at capability; GPU links judged only when the GPU is busy (idle GPUs downclock)."""
    return _link_check(ctx, SPEED, "pcie.link_speed")


@check("pcie.link_load")
def link_load(ctx: CheckContext) -> list[Finding]:
    """Whether the GPUs' links were kept busy while their speed was read (see ccdiag.host.busy_pcie_links)."""
    info = ctx.meta.get("link_load")
    if not info:
        return [Finding("pcie.link_load", SKIP, node_component(), "GPU links were not loaded while read (a replay, "
                        "or --no-load-links): speed is judged only on GPUs NVML shows busy")]
    if info.get("skipped"):
        return [Finding("pcie.link_load", SKIP, node_component(), f"GPU links not loaded: {info['skipped']}; speed "
                        "is judged only on GPUs NVML shows busy", details=info)]
    loaded = ", ".join(f"GPU{i}" for i in info.get("loaded", []))
    return [Finding("pcie.link_load", PASS, node_component("GPU PCIe links"),
                    f"links of {loaded} kept busy with host-to-device copies for {info.get('seconds', 0):g}s while "
                    "their speed was read", (Evidence("copies per GPU", info.get("copies"), "ccdiag link load (CuPy)"),),
                    details=info)]


# ---------------------------------------------------------------- AER

def _aer_increase(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int] | None:
    """Per-error-type increases (only the ones that grew). None when not comparable."""
    if before is None or after is None:
        return None
    keys = [k for k in after if k in before and not k.startswith("TOTAL_")]
    if not keys:
        keys = [k for k in after if k in before]
    grew: dict[str, int] = {}
    for k in keys:
        d = counter_delta(before[k], after[k])
        if d:
            grew[k] = d
    return grew


def _total(counts: dict[str, int] | None) -> int:
    if not counts:
        return 0
    parts = {k: v for k, v in counts.items() if not k.startswith("TOTAL_")}
    return sum((parts or counts).values())


def _budget(gen: int | None, width: int | None, window_s: float) -> float | None:
    if gen is None or not width or window_s <= 0:
        return None
    return REPLAY_BUDGET_PER_LANE_PER_MIN.get(gen, 0.0) * width * window_s / 60.0


def _aer_device(ctx: CheckContext, names: Names, d: Any, d2: Any) -> Finding | None:
    """One device's AER counters over the window: uncorrectable growth fails, correctable growth
    above the link's bit-error budget warns, within it passes; no growth is no finding."""
    grew = {kind: _aer_increase(getattr(d, f"aer_{kind}"), getattr(d2, f"aer_{kind}"))
            for kind in ("fatal", "nonfatal", "correctable")}
    ev = tuple(Evidence(f"AER {kind} increase", inc, sysfs_path(d.bdf, f"aer_dev_{kind}"))
               for kind, inc in grew.items() if inc)
    uncorrectable = {k: v for kind in ("fatal", "nonfatal") for k, v in (grew[kind] or {}).items()}
    comp = names.component(d)
    if uncorrectable:
        return Finding(
            "pcie.aer", FAIL, comp,
            f"{names.label(d)}: uncorrectable PCIe errors in the last {ctx.window_s:g}s "
            f"({', '.join(f'{k} +{v}' for k, v in uncorrectable.items())})",
            ev, expected="no increase", expected_source="Linux AER counters (sysfs aer_dev_*)",
            remedy="Drain the node. Read the kernel log's AER lines for this device; reseat or replace "
                   "the card, riser or cable. Errors counted at a root or switch port usually point at "
                   "the device below it (the link partner).")
    corr = sum((grew["correctable"] or {}).values())
    if not corr:
        return None
    gen = gen_of(d.current_link_speed_gts or d.max_link_speed_gts)
    budget = _budget(gen, d.current_link_width or d.max_link_width, ctx.window_s)
    if budget is not None and corr <= budget:
        return Finding("pcie.aer", PASS, comp,
                       f"{names.label(d)}: {corr} correctable errors in {ctx.window_s:g}s, within budget", ev)
    return Finding(
        "pcie.aer", WARN, comp,
        f"{names.label(d)}: {corr} correctable PCIe errors in {ctx.window_s:g}s"
        + (f", above the {budget:.1f} a healthy link may show" if budget is not None else ""),
        ev, expected=f"at most {budget:.1f} in {ctx.window_s:g}s" if budget is not None else "no increase",
        expected_source="BER 1e-12 budget per lane (DCGM PCIe replay rate rule)",
        remedy="A marginal link: watch the rate; reseat the card/riser if it keeps rising, and "
               "drain if uncorrectable errors follow.")


@check("pcie.aer", needs=(PROBE_PCIE,), what="PCIe AER counters")
def aer(ctx: CheckContext) -> list[Finding]:
    """AER counters on GPUs, NICs and every port above them, judged by their change over the window."""
    devices = ctx.data(PROBE_PCIE).devices  # needs=(PROBE_PCIE,): never None here
    names = Names(ctx, devices)
    with_aer = [d for d in devices if d.aer_fatal is not None or d.aer_nonfatal is not None
                or d.aer_correctable is not None]
    if not with_aer:
        return [Finding("pcie.aer", SKIP, node_component(), "no device exposes AER counters in sysfs")]
    lifetime = {d.bdf: {"fatal": _total(d.aer_fatal), "nonfatal": _total(d.aer_nonfatal),
                        "correctable": _total(d.aer_correctable)}
                for d in with_aer if _total(d.aer_fatal) or _total(d.aer_nonfatal) or _total(d.aer_correctable)}
    later, no_window = second_sample(ctx, PROBE_PCIE, "pcie.aer", "AER counters", lifetime)
    if no_window:
        return [no_window]
    after = {d.bdf: d for d in later.devices}
    findings = [f for d in sorted(with_aer, key=lambda x: x.bdf) if d.bdf in after
                for f in [_aer_device(ctx, names, d, after[d.bdf])] if f is not None]
    if not findings:
        findings.append(Finding("pcie.aer", PASS, node_component("PCIe devices"),
                                f"no AER counter increased on {len(with_aer)} devices over {ctx.window_s:g}s"))
    return findings


# ---------------------------------------------------------------- NVML replay counter

@check("pcie.replay", needs=(PROBE_NVML,), what="GPU PCIe replay counters")
def replay(ctx: CheckContext) -> list[Finding]:
    """PCIe replay counter of each GPU (NVML) against the bit-error budget of its link, over the window."""
    gpus = [g for g in ctx.data(PROBE_NVML).gpus if g.failed is None]  # needs=(PROBE_NVML,): never None here
    if not gpus:
        return [Finding("pcie.replay", SKIP, node_component(), "no GPU to read replay counters from")]
    later, no_window = second_sample(ctx, PROBE_NVML, "pcie.replay", "replay counters")
    if no_window:
        return [no_window]
    after = {g.index: g for g in later.gpus}
    out: list[Finding] = []
    for g in gpus:
        comp = Component("pcie_link", f"GPU{g.index} PCIe link", gpu=g.index, uuid=g.uuid,
                         bdf=normalize_bdf(g.bus_id))
        g2 = after.get(g.index)
        delta = counter_delta(g.pcie_replay_counter, g2.pcie_replay_counter if g2 else None)
        if delta is None or g2 is None:
            out.append(Finding("pcie.replay", SKIP, comp, f"GPU{g.index}: replay counter not comparable "
                               "across the window (not read, or reset)"))
            continue
        ev = (Evidence("PCIe replay counter", {"before": g.pcie_replay_counter, "after": g2.pcie_replay_counter},
                       "NVML nvmlDeviceGetPcieReplayCounter"),)
        gen = g.pcie_gen_current or g.pcie_gen_max
        budget = _budget(gen, g.pcie_width_current or g.pcie_width_max, ctx.window_s)
        if delta and (budget is None or delta > budget):
            out.append(Finding(
                "pcie.replay", WARN, comp,
                f"GPU{g.index}: {delta} PCIe replays in {ctx.window_s:g}s"
                + (f", above the {budget:.1f} a healthy Gen{gen} link may show" if budget is not None else ""),
                ev, expected=f"at most {budget:.1f}" if budget is not None else "no increase",
                expected_source="BER 1e-12 budget per lane (DCGM PCIe replay rate rule)",
                remedy="Replays are retransmissions after link errors: reseat the GPU or riser if the rate "
                       "persists; check pcie.aer for the same link."))
        else:
            out.append(Finding("pcie.replay", PASS, comp,
                               f"GPU{g.index}: {delta} PCIe replays in {ctx.window_s:g}s", ev,
                               expected=f"at most {budget:.1f}" if budget is not None else None,
                               expected_source="BER 1e-12 budget per lane (DCGM PCIe replay rate rule)"
                               if budget is not None else None))
    return out


# ---------------------------------------------------------------- ACS

#: ACS found on at least this many bridges is one platform setting (BIOS or kernel), not many faults
ACS_PLATFORM_MIN = 4


def _acs_platform(findings: list[Finding]) -> Finding | None:
    """One root finding for ACS on many bridges: the same BIOS option or kernel decision (the kernel
    enables ACS on every bridge when an IOMMU is on) set them all, so it is fixed once."""
    bridges = [f.component.bdf for f in findings if f.status in (FAIL, WARN) and f.component.bdf]
    if len(bridges) < ACS_PLATFORM_MIN:
        return None
    status = FAIL if any(f.status == FAIL for f in findings) else WARN
    return Finding(
        "pcie.acs", status, node_component("PCIe ACS (platform)"),
        f"ACS is enabled on {len(bridges)} bridges between GPUs and NICs: one platform setting, not {len(bridges)} "
        "faults", (Evidence("bridges with ACS", bridges, "/sys/bus/pci/devices/*/config (ACS extended capability)"),),
        expected="ACS redirection off on switch ports between GPUs and NICs",
        expected_source="NCCL troubleshooting guide (PCI Access Control Services)",
        remedy="Turn ACS off in the BIOS (an 'ACS' or 'PCIe ACS control' option) on nodes that are not "
               "virtualisation hosts; with the IOMMU in translation mode the kernel enables ACS itself (see "
               "platform.iommu). Until then, clear it at every boot on each listed bridge with setpci.",
        details={"root": "acs_platform", "bridges": bridges})


def _acs_unreadable(d: Any) -> bool:
    return d.acs_ctrl is None and any("acs" in (e.source + e.message).lower() or "config" in e.source.lower()
                                      for e in d.errors)


@check("pcie.acs", needs=(PROBE_PCIE,), what="PCIe ACS")
def acs(ctx: CheckContext) -> list[Finding]:
    """ACS redirection on bridges between GPUs and NICs forces GPUDirect traffic through the CPU."""
    names = Names(ctx, ctx.data(PROBE_PCIE).devices)  # needs=(PROBE_PCIE,): never None here
    gpus = [e for e in names.endpoints() if e.kind == "gpu"]
    nics = [e for e in names.endpoints() if e.kind == "nic"]
    if not gpus or not nics:
        return [Finding("pcie.acs", SKIP, node_component(),
                        "ACS matters for GPU-NIC peer-to-peer paths; this node lacks GPUs or NICs on PCIe")]
    pairs: dict[str, list[str]] = {}  # bridge -> "GPU3<->mlx5_3"
    for g in gpus:
        for n in nics:
            for hop in common_hops(g, n) or []:
                pairs.setdefault(hop, []).append(f"{names.label(g)}<->{names.label(n)}")
    if not pairs:
        return [Finding("pcie.acs", SKIP, node_component(),
                        "no GPU shares a PCIe switch with a NIC; their traffic crosses the CPU regardless of ACS")]
    findings: list[Finding] = []
    unreadable: list[str] = []
    for bdf in sorted(pairs):
        d = names.devices.get(bdf)
        if d is None:
            continue
        if _acs_unreadable(d):
            unreadable.append(bdf)
            continue
        if not d.acs_enabled:
            continue
        redirecting = [f for f in d.acs_enabled if f in ACS_REDIRECTING]
        status = FAIL if redirecting else WARN
        comp = names.component(d)
        sample = pairs[bdf][:4]
        findings.append(Finding(
            "pcie.acs", status, comp,
            f"{names.label(d)}: ACS {'/'.join(d.acs_enabled)} enabled on the path of "
            f"{', '.join(sample)}{' ...' if len(pairs[bdf]) > 4 else ''}"
            + ("; peer-to-peer requests are redirected to the root complex" if redirecting else ""),
            (Evidence("ACS control",
                      {"register": f"0x{d.acs_ctrl:04x}" if d.acs_ctrl is not None else None,
                       "enabled": list(d.acs_enabled)},
                      sysfs_path(bdf, "config") + " (ACS extended capability)"),),
            expected="ACS redirection off on switch ports between GPUs and NICs",
            expected_source="NCCL troubleshooting guide (PCI Access Control Services)",
            remedy=f"Disable ACS on this port: `setpci -s {bdf} ECAP_ACS+0x6.w=0000` (not persistent: run it "
                   "at boot, e.g. from a systemd unit), or turn ACS off in the BIOS. Otherwise GPUDirect RDMA "
                   "and PCIe P2P go through the CPU: lower bandwidth, and NCCL hangs have been traced to it.",
            details={"pairs": pairs[bdf], "redirecting": redirecting}))
    platform = _acs_platform(findings)
    if platform is not None:
        findings.append(platform)
    if unreadable and not findings:
        findings.append(Finding("pcie.acs", UNKNOWN, node_component(),
                                f"ACS control of {len(unreadable)} bridge(s) on GPU-NIC paths could not be read "
                                "(PCI config space beyond 64 bytes needs root)",
                                remedy="Run `ccdiag check` as root to read ACS.",
                                details={"bridges": unreadable}))
    elif not findings:
        findings.append(Finding("pcie.acs", PASS, node_component("GPU-NIC PCIe paths"),
                                f"no ACS redirection on the {len(pairs)} bridges between GPUs and NICs"))
    return findings
