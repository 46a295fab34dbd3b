"""NVLink state and error counters, judged against what the node should have.

Two false alarms are common in other tools and avoided here: calling NVLinks "down" on GPUs that
have none (or on bridged PCIe cards whose unused links are legitimately inactive), and failing
healthy GPUs for lifetime CRC totals. So a link is only "down" when the topology (or, on an
NVSwitch baseboard, the other GPUs of the same model) says it should be up, and error counters are
judged only by their change between the two samples of a ``--window`` run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import (NODE, gpu_by_bdf, gpu_component, nvml_gate, nvswitches_on_pci, policy_source,
                                  second_sample)
from ccdiag.core import actions as A
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.readings import normalize_bdf
from ccdiag.core.probenames import PROBE_NVML

#: DCGM common/DcgmGPUHardwareLimits.h: DCGM_LIMIT_MAX_NVLINK_ERROR (replay/recovery per window)
RECOVERY_FAIL_DELTA = 1
#: same file: DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, "CRC errors only matter at rates of 100+ per second"
CRC_FAIL_PER_S = 100.0
DCGM = "DCGM health (DcgmHealthWatch.cpp, DcgmGPUHardwareLimits.h)"

#: NvLink field -> nvmlNvLinkErrorCounter_t value (DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3)
COUNTERS = (
    ("crc_flit_errors", 2),
    ("crc_data_errors", 3),
    ("replay_errors", 0),
    ("recovery_errors", 1),
)


def link_component(g: Any, link: Any, peers: dict[str, Any]) -> Component:
    return Component("nvlink", f"GPU{g.index} NVLink {link.link}", gpu=g.index, uuid=g.uuid,
                     bdf=normalize_bdf(g.bus_id), link=link.link, peer=peer_label(link, peers))


def peer_label(link: Any, peers: dict[str, Any]) -> str | None:
    """The far end as an operator names it: "GPU5", "NVSwitch 0000:05:00.0", or its PCI address."""
    bdf = normalize_bdf(link.remote_bus_id)
    if bdf and bdf in peers:
        return f"GPU{peers[bdf].index}"
    if bdf and link.remote_device_type == "switch":
        return f"NVSwitch {bdf}"
    return bdf


def node_has_nvswitch(ctx: CheckContext, nvml: Any) -> bool:
    return bool(nvswitches_on_pci(ctx)) or any(
        lk.remote_device_type == "switch" for g in nvml.gpus for lk in g.nvlinks)


def expected_links(ctx: CheckContext, g: Any, nvml: Any, has_switch: bool) -> tuple[int | None, str | None]:
    """How many NVLinks of ``g`` should be active, and who says so.

    The topology's count comes first. On an NVSwitch baseboard every GPU of a model is wired the
    same way, so the most links any GPU of that model has active is also a floor for the others;
    it catches a single dead link even where the topology only knows what NVML showed. Listed but
    inactive links are not counted as expected (some SKUs list more links than they wire)."""
    topo_exp = None
    topo = ctx.topology
    if topo is not None and topo.has_device(f"GPU{g.index}"):
        topo_exp = topo.expected_nvlinks(f"GPU{g.index}")
    peer_exp = None
    if has_switch and g.nvlinks:
        same = [sum(1 for lk in o.nvlinks if lk.active) for o in nvml.gpus if o.name == g.name and not o.failed]
        peer_exp = max(same, default=0) or None
    if topo_exp is not None and (peer_exp is None or int(topo_exp) >= peer_exp):
        return int(topo_exp), "topology"
    if peer_exp is not None:
        return peer_exp, f"NVSwitch baseboard: the most active links on any {g.name or 'GPU'} of this node"
    return None, None


def with_later_link_losses(ctx: CheckContext, g: Any) -> Any:
    """``g`` with the links the window's second sample saw inactive marked inactive: a link that
    drops during the window is down, whichever sample saw it (expectations stay those of the first)."""
    later = ctx.later_data(PROBE_NVML)
    lg = next((x for x in getattr(later, "gpus", ()) or () if x.index == g.index
               and (not x.uuid or not g.uuid or x.uuid == g.uuid)), None)
    if lg is None or lg.failed:
        return g
    lost = {lk.link for lk in lg.nvlinks if lk.active is False}
    if not lost & {lk.link for lk in g.nvlinks if lk.active}:
        return g
    return dataclasses.replace(g, nvlinks=tuple(dataclasses.replace(lk, active=False) if lk.link in lost else lk
                                                for lk in g.nvlinks))


@check("nvlink.down", needs=(PROBE_NVML,))
def check_down(ctx: CheckContext) -> list[Finding]:
    """NVLinks that should be up but are not: NCCL then routes over fewer links or over PCIe."""
    cid = "nvlink.down"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    peers = gpu_by_bdf(nvml)
    has_switch = node_has_nvswitch(ctx, nvml)
    plans = [(with_later_link_losses(ctx, g), *expected_links(ctx, g, nvml, has_switch))
             for g in sorted(nvml.gpus, key=lambda g: g.index)]
    if not any(g.nvlinks for g, _, _ in plans) and not any(exp for _, exp, _ in plans):
        return [Finding(cid, SKIP, NODE, "No NVLink on this node (and none expected).")]
    out: list[Finding] = []
    for g, exp, exp_src in plans:
        out.extend(_judge_gpu_links(cid, g, exp, exp_src, peers))
    return out


def _judge_gpu_links(cid: str, g: Any, exp: int | None, exp_src: str | None, peers: dict) -> list[Finding]:
    comp = gpu_component(g)
    src = f"nvmlDeviceGetNvLinkState({g.index}, link)"
    active = [lk for lk in g.nvlinks if lk.active is True]
    inactive = [lk for lk in g.nvlinks if lk.active is False]
    unread = [lk for lk in g.nvlinks if lk.active is None]
    ev = (Evidence("active links", [lk.link for lk in active], src),
          Evidence("inactive links", [lk.link for lk in inactive], src))
    if g.failed:
        return [Finding(cid, UNKNOWN, comp, f"GPU{g.index}: NVLink state not read; the GPU failed ({g.failed}).",
                        remedy="See gpu.lost for this GPU.")]
    if exp is None:
        if not g.nvlinks:
            return [Finding(cid, SKIP, comp, f"GPU{g.index}: no NVLink.")]
        return [Finding(cid, PASS, comp, f"GPU{g.index}: {len(active)} NVLink(s) active; no expected count known "
                        "(inactive links may be unused).", evidence=ev)]
    if len(active) >= exp:
        if exp == 0 and not g.nvlinks:
            return [Finding(cid, SKIP, comp, f"GPU{g.index}: no NVLink expected.", expected="0",
                            expected_source=exp_src)]
        return [Finding(cid, PASS, comp, f"GPU{g.index}: {len(active)}/{exp} NVLinks active.", evidence=ev,
                        expected=f"{exp} active", expected_source=exp_src)]
    remedy = (f"Drain the node; reset GPU{g.index} (nvidia-smi -r -i {g.index}) and, on NVSwitch systems, restart "
              "nvidia-fabricmanager; if the link stays down, reboot, then reseat/RMA (GPU, baseboard or bridge).")
    missing = exp - len(active)
    if len(active) + len(unread) >= exp and not inactive:
        return [Finding(cid, UNKNOWN, comp, f"GPU{g.index}: {len(active)}/{exp} NVLinks read as active; "
                        f"{len(unread)} link state(s) could not be read.", evidence=ev,
                        expected=f"{exp} active", expected_source=exp_src)]
    if inactive and len(g.nvlinks) <= exp:
        return [Finding(cid, FAIL, link_component(g, lk, peers),
                        f"GPU{g.index} NVLink {lk.link} is down ({len(active)}/{exp} links active).",
                        evidence=(Evidence("link state", "inactive", f"nvmlDeviceGetNvLinkState({g.index}, {lk.link})"),
                                  Evidence("active links on this GPU", len(active), src)),
                        expected="active", expected_source=exp_src, remedy=remedy, action=A.RESET_GPU)
                for lk in inactive]
    return [Finding(cid, FAIL, Component("nvlink", f"GPU{g.index} NVLinks", gpu=g.index, uuid=g.uuid,
                                         bdf=normalize_bdf(g.bus_id)),
                    f"GPU{g.index}: {len(active)}/{exp} NVLinks active ({missing} missing"
                    + (f"; inactive: {', '.join(str(lk.link) for lk in inactive)})." if inactive else ")."),
                    evidence=ev, expected=f"{exp} active", expected_source=exp_src, remedy=remedy, action=A.RESET_GPU)]


@check("nvlink.asymmetric", needs=(PROBE_NVML,))
def check_asymmetric(ctx: CheckContext) -> list[Finding]:
    """Two GPUs wired to each other must see the same number of active links from both ends."""
    cid = "nvlink.asymmetric"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    peers = gpu_by_bdf(nvml)
    counts: dict[tuple[int, int], int] = {}
    for g in nvml.gpus:
        for lk in g.nvlinks:
            p = peers.get(normalize_bdf(lk.remote_bus_id) or "")
            if lk.active and p is not None and p.index != g.index:
                counts[(g.index, p.index)] = counts.get((g.index, p.index), 0) + 1
    if not counts:
        return [Finding(cid, SKIP, NODE, "No direct GPU-to-GPU NVLinks (none, or all through NVSwitches).")]
    by_index = {g.index: g for g in nvml.gpus}
    out = []
    for a, b in sorted({tuple(sorted(k)) for k in counts}):
        ab, ba = counts.get((a, b), 0), counts.get((b, a), 0)
        if ab == ba:
            continue
        ga = by_index[a]
        out.append(Finding(cid, WARN, Component("gpu_pair", f"GPU{a}-GPU{b}", gpu=a, uuid=ga.uuid,
                                                bdf=normalize_bdf(ga.bus_id), peer=f"GPU{b}"),
                           f"GPU{a} sees {ab} active NVLink(s) to GPU{b}, GPU{b} sees {ba} back.",
                           evidence=(Evidence(f"GPU{a}->GPU{b}", ab, f"nvmlDeviceGetNvLinkRemotePciInfo({a}, link)"),
                                     Evidence(f"GPU{b}->GPU{a}", ba, f"nvmlDeviceGetNvLinkRemotePciInfo({b}, link)")),
                           expected="equal counts from both ends",
                           remedy="A link is training on one side only: reset both GPUs or reboot; reseat the "
                                  "bridge if it persists."))
    if not out:
        pairs = sorted({tuple(sorted(k)) for k in counts})
        out.append(Finding(cid, PASS, NODE, f"{len(pairs)} directly linked GPU pair(s), symmetric.",
                           evidence=tuple(Evidence(f"GPU{a}<->GPU{b}", counts.get((a, b), 0),
                                                   "nvmlDeviceGetNvLinkRemotePciInfo") for a, b in pairs)))
    return out


@check("nvlink.errors", needs=(PROBE_NVML,))
def check_errors(ctx: CheckContext) -> list[Finding]:
    """NVLink error counters judged by their increase over the sampling window, never by totals."""
    cid = "nvlink.errors"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    if not any(g.nvlinks for g in nvml.gpus):
        return [Finding(cid, SKIP, NODE, "No NVLink on this node.")]
    later, no_window = second_sample(ctx, PROBE_NVML, cid, "NVLink error counters")
    if no_window:
        return [no_window]
    window = ctx.window_s
    later_by_gpu = {(g.index, g.uuid): g for g in later.gpus}
    peers = gpu_by_bdf(nvml)
    warn_at = max(1, int(ctx.policy.nvlink_error_rate_warn))
    out: list[Finding] = []
    for g in sorted(nvml.gpus, key=lambda g: g.index):
        if not g.nvlinks:
            continue
        lg = later_by_gpu.get((g.index, g.uuid))
        if lg is None:
            out.append(Finding(cid, UNKNOWN, gpu_component(g), f"GPU{g.index} missing from the second sample."))
            continue
        later_links = {lk.link: lk for lk in lg.nvlinks}
        judged = 0
        bad: list[Finding] = []
        for lk in g.nvlinks:
            l2 = later_links.get(lk.link)
            if l2 is None:
                continue
            f, n = _judge_link(cid, g, lk, l2, window, warn_at, peers, ctx)
            judged += n
            if f is not None:
                bad.append(f)
        out.extend(bad)
        if not bad:
            if judged:
                out.append(Finding(cid, PASS, gpu_component(g),
                                   f"GPU{g.index}: no NVLink error counter rose over {window:g}s ({judged} counters).",
                                   expected=f"increase < {warn_at} per window", expected_source=policy_source(ctx)))
            else:
                out.append(Finding(cid, SKIP, gpu_component(g), f"GPU{g.index}: NVLink error counters not readable.",
                                   evidence=(Evidence("counters", None,
                                                      f"nvmlDeviceGetNvLinkErrorCounter({g.index}, link, *)"),)))
    return out


def _judge_link(cid: str, g: Any, lk: Any, l2: Any, window: float, warn_at: int, peers: dict,
                ctx: CheckContext) -> tuple[Finding | None, int]:
    """One link's verdict from its two samples (None when fine) and how many counters were judged."""
    deltas: dict[str, int] = {}
    ev = []
    backwards = []
    for attr, counter in COUNTERS:
        a, b = getattr(lk, attr), getattr(l2, attr)
        if a is None or b is None:
            continue
        src = f"nvmlDeviceGetNvLinkErrorCounter({g.index}, {lk.link}, {counter})"
        ev.append(Evidence(f"{attr} before -> after {window:g}s", (a, b), src))
        if b < a:
            backwards.append(attr)
        else:
            deltas[attr] = b - a
    comp = link_component(g, lk, peers)
    if backwards:
        return Finding(cid, UNKNOWN, comp, f"GPU{g.index} NVLink {lk.link}: {', '.join(backwards)} went backwards "
                       "during the window (counters reset?); not judged.", evidence=tuple(ev)), len(deltas)
    rec = deltas.get("recovery_errors", 0)
    crc = deltas.get("crc_flit_errors", 0) + deltas.get("crc_data_errors", 0)
    replay = deltas.get("replay_errors", 0)
    crc_rate = crc / window if window > 0 else 0.0
    remedy = (f"Drain the node; reset GPU{g.index} and its peer, then re-run with --window; if errors keep rising, "
              "reseat or RMA the GPU/baseboard (a recovery means the link retrained).")
    if rec >= RECOVERY_FAIL_DELTA or crc_rate >= CRC_FAIL_PER_S:
        why = (f"{rec} link recovery(s)" if rec >= RECOVERY_FAIL_DELTA else f"CRC errors at {crc_rate:.0f}/s")
        return Finding(cid, FAIL, comp, f"GPU{g.index} NVLink {lk.link}: {why} in {window:g}s.", evidence=tuple(ev),
                       expected=f"recovery increase < {RECOVERY_FAIL_DELTA}, CRC < {CRC_FAIL_PER_S:g}/s",
                       expected_source=DCGM, remedy=remedy, details={"deltas": deltas}, action=A.RESET_GPU), len(deltas)
    if crc >= warn_at or replay >= warn_at:
        return Finding(cid, WARN, comp,
                       f"GPU{g.index} NVLink {lk.link}: +{crc} CRC, +{replay} replay error(s) in {window:g}s.",
                       evidence=tuple(ev), expected=f"increase < {warn_at} per window",
                       expected_source=f"{policy_source(ctx)} (nvlink_error_rate_warn); {DCGM}",
                       remedy="Corrected by retransmission, so not fatal; watch the rate, and reseat/RMA if it grows.",
                       details={"deltas": deltas}), len(deltas)
    return None, len(deltas)
