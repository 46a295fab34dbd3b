"""Judgement that needs no topology: what a benchmark file says about itself.

Why: a pasted file can be judged even when nothing says what its links should carry, because its
own figures contradict each other when something is wrong:

* **Peer-relative.** In a matrix of pair copies, one pair or one GPU far below the others
  (:mod:`ccdiag.core.outliers`, the peer-median rule) is named, pair or member.
* **P2P enabled slower than P2P disabled.** A direct peer copy must beat one staged through host
  memory; when it does not, peer writes are being sent up to the CPU root complex: PCIe ACS
  redirecting peer requests, or the IOMMU translating them (NVIDIA/nccl#814: 9.9 GB/s enabled vs
  22 GB/s disabled on 6 PCIe GPUs; NVIDIA/caffe#10 on ACS).
* **Bidirectional below unidirectional.** Both directions together carrying less than one alone
  means the path does not run full duplex (staged copies, a switch port or root complex that
  serialises, a link trained down on one side).

Each rule returns findings and may give a measurement without an expected value a status of its
own (judged against its peers), which then counts as judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from ccdiag.bench.result import Measurement
from ccdiag.bench.thresholds import PEER_FAIL_BELOW
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.core.outliers import classify

#: a direct copy below this fraction of the staged one is "slower than staged"
ENABLED_BELOW_DISABLED = 0.8
#: both directions together below this fraction of one direction
BIDIR_BELOW_UNI = 0.9
#: a pair or member below this fraction of its peers fails (between it and PEER_FAIL_BELOW: warns)
PEER_FAIL_HARD = 0.5

#: what tells ACS from IOMMU translation apart (both send peer traffic up to the root complex)
ACS_OR_IOMMU = (
    "Two causes send peer writes up to the CPU root complex, and these facts tell them apart: "
    "ACS — `sudo lspci -vvv | grep -i ACSCtl` on the PCIe switch downstream ports and root ports shows "
    "SrcValid+ ReqRedir+ CmpltRedir+ (disable ACS in the BIOS, or clear it with setpci at boot); "
    "IOMMU translation — `cat /proc/cmdline` has intel_iommu=on or amd_iommu=on without iommu=pt, and "
    "`dmesg | grep -i -e DMAR -e IOMMU` shows DMA remapping enabled (boot with iommu=pt). "
    "In a VM, the hypervisor's IOMMU does this unless the GPUs are passed through with P2P support. "
    "`ccdiag check` on the node reads ACS and the IOMMU mode.")

Rule = Callable[[list[Measurement], str], list[Finding]]


def _gpu_index(label: str) -> int | None:
    return int(label[3:]) if label.startswith("GPU") and label[3:].isdigit() else None


def _fig(m: Measurement) -> float:
    return float(m.gbyte_s or 0.0)  # pairs are taken with a figure only (_pairs)


def _pairs(ms: list[Measurement]) -> list[Measurement]:
    return [m for m in ms if m.bench == "p2p" and m.src != m.dst and m.gbyte_s is not None]


def _groups(ms: list[Measurement]) -> dict[tuple, list[Measurement]]:
    """Matrices: one per engine, operation, direction, peer access and path level (when known)."""
    out: dict[tuple, list[Measurement]] = {}
    for m in _pairs(ms):
        if m.extra.get("peer_uniform") is False:
            continue  # the file's GPUs mix path kinds the catalogue cannot tell apart
        if m.extra.get("p2p_disabled") and m.extra.get("peer_access", True):
            continue  # staged copies between peers: their shape follows the PCIe switches (NVIDIA/nccl#1309)
        level = m.expected.level if m.expected is not None else None
        key = (m.engine, m.op, m.direction, m.extra.get("peer_access", True), level)
        out.setdefault(key, []).append(m)
    return out


#: with the GPU model unknown, slow pairs above this share of a matrix are its shape (NVLink and
#: PCIe pairs mixed, two sockets), not outliers
STRUCTURAL_SHARE = 0.25


def _structural(c: Any, group: list[Measurement]) -> bool:
    if any(m.extra.get("peer_uniform") is not None for m in group):
        return False
    # a slow member explains its own row and column; slow pairs left over in numbers are the shape
    return len(c.slow_pairs) > STRUCTURAL_SHARE * len(c.ratios)


def _peer_status(ratio: float) -> str:
    return FAIL if ratio < PEER_FAIL_HARD else WARN if ratio < PEER_FAIL_BELOW else PASS


def peer_relative(ms: list[Measurement], source: str) -> list[Finding]:
    """One GPU slow with every peer, or one pair slow, against the matrix's peer median."""
    out: list[Finding] = []
    for (engine, op, direction, _, level), group in _groups(ms).items():
        figs = {(m.src, m.dst): _fig(m) for m in group}
        c = classify(figs, fraction=PEER_FAIL_BELOW)
        if not c.judged:
            continue
        if _structural(c, group):
            continue
        ref = c.reference or 0.0
        for m in group:
            if m.status == UNKNOWN and (m.expected is None or not m.expected.gbyte_s):
                ratio = _fig(m) / ref
                m.status = _peer_status(ratio)
                m.typical = f">= {PEER_FAIL_BELOW:.0%} of the matrix's peer median"
                m.threshold_source = f"peer median of {len(c.member_medians)} GPUs in this matrix ({ref:.1f} GB/s)"
                m.extra["peer_ratio"] = round(ratio, 3)
        what = f"{op} {direction}" + (f", level {level}" if level else "")
        if not c.slow_members and not c.slow_pairs:
            lo, hi = min(c.ratios.values()), max(c.ratios.values())
            out.append(Finding(
                "bench.p2p.peers", PASS, Component("node", "p2p"),
                f"{len(group)} pair(s) ({what}) agree with each other: {lo:.0%}-{hi:.0%} of the peer median "
                f"{ref:.1f} GB/s", evidence=(Evidence("peer median", f"{ref:.2f} GB/s", source),),
                expected=f">= {PEER_FAIL_BELOW:.0%} of the peer median", expected_source="peer median of this matrix"))
            continue
        for g in c.slow_members:
            med = c.member_medians[g]
            if all(m.status in (WARN, FAIL) and m.expected is not None and m.expected.gbyte_s
                   for m in group if g in (m.src, m.dst)):
                continue  # the path judgement already named each of its pairs
            out.append(Finding(
                "bench.p2p.peer_gpu", _peer_status(med / ref), Component("gpu", g, gpu=_gpu_index(g)),
                f"{g} is slow with every peer ({what}): its median {med:.1f} GB/s is {med / ref:.0%} of the "
                f"matrix's peer median {ref:.1f} GB/s",
                evidence=tuple(Evidence(f"{m.label} ({m.op}, {m.direction})", f"{m.gbyte_s:.2f} GB/s", source)
                               for m in group if g in (m.src, m.dst))[:8],
                expected=f">= {PEER_FAIL_BELOW:.0%} of {ref:.1f} GB/s", expected_source="peer median of this matrix",
                remedy=(f"{g}'s own links are at fault: check its PCIe link (`lspci -vv` LnkSta: speed and width) "
                        f"and NVLinks (`nvidia-smi nvlink -s -i {_gpu_index(g)}`), and which socket it sits on "
                        "(`nvidia-smi topo -m`)."),
                details={"median_gbyte_s": round(med, 3), "reference_gbyte_s": round(ref, 3)}))
        for a, b in c.slow_pairs:
            v = figs[(a, b)]
            out.append(Finding(
                "bench.p2p.peer_pair", _peer_status(v / ref), Component("gpu_pair", f"{a}-{b}", gpu=_gpu_index(a), peer=b),
                f"{a}->{b} ({what}) {v:.1f} GB/s is {v / ref:.0%} of the matrix's peer median {ref:.1f} GB/s",
                evidence=(Evidence(f"{a}->{b}", f"{v:.2f} GB/s", source),),
                expected=f">= {PEER_FAIL_BELOW:.0%} of {ref:.1f} GB/s", expected_source="peer median of this matrix",
                remedy="Only this pair is slow: compare its path with the others' in `nvidia-smi topo -m` "
                       "(a SYS hop across sockets, a bridge missing) and re-run to confirm."))
    return out


def _by_pair(ms: list[Measurement], pred: Callable[[Measurement], bool]) -> dict[tuple[str, str], Measurement]:
    return {(m.src, m.dst): m for m in _pairs(ms) if pred(m)}


def enabled_below_disabled(ms: list[Measurement], source: str) -> list[Finding]:
    """P2P enabled slower than P2P disabled (p2pBandwidthLatencyTest): ACS or IOMMU redirect."""
    enabled = _by_pair(ms, lambda m: m.op in ("write", "read") and m.direction == "uni"
                       and bool(m.extra.get("peer_access", True)))
    staged = _by_pair(ms, lambda m: m.op == "staged" and m.direction == "uni" and bool(m.extra.get("p2p_disabled")))
    slow = [(enabled[k], staged[k]) for k in enabled if k in staged
            and _fig(enabled[k]) < ENABLED_BELOW_DISABLED * _fig(staged[k])]
    if not slow:
        return []
    for e, _ in slow:
        e.status = FAIL
        e.note = (e.note + "; " if e.note else "") + "slower with P2P enabled than staged through host memory"
    med_e = statistics.median(_fig(e) for e, _ in slow)
    med_s = statistics.median(_fig(s) for _, s in slow)
    return [Finding(
        "bench.p2p.redirected", FAIL, Component("node", "p2p"),
        f"P2P enabled is slower than P2P disabled on {len(slow)} of {len(enabled)} pairs (median {med_e:.1f} vs "
        f"{med_s:.1f} GB/s): peer writes are redirected through the CPU root complex — PCIe ACS or IOMMU "
        "translation",
        evidence=tuple(Evidence(f"{e.label} enabled vs disabled", f"{e.gbyte_s:.2f} vs {s.gbyte_s:.2f} GB/s", source)
                       for e, s in slow[:8]),
        expected="a direct peer copy faster than one staged through host memory",
        expected_source="p2pBandwidthLatencyTest: P2P=Enabled vs P2P=Disabled matrices of the same run",
        remedy=ACS_OR_IOMMU, details={"pairs": [e.label for e, _ in slow]})]


def bidir_below_uni(ms: list[Measurement], source: str) -> list[Finding]:
    """Both directions together below one direction alone: the path is not full duplex."""
    uni = _by_pair(ms, lambda m: m.direction == "uni")
    slow = []
    for m in _pairs(ms):
        if m.direction != "bidir" or m.extra.get("bidir_total_gbyte_s") is None:
            continue
        u = uni.get((m.src, m.dst)) or uni.get((m.dst, m.src))
        if u is not None and u.op == m.op and m.extra["bidir_total_gbyte_s"] < BIDIR_BELOW_UNI * _fig(u):
            slow.append((m, u))
    if not slow:
        return []
    for m, _ in slow:
        if m.status in (PASS, UNKNOWN):
            m.status = WARN
    return [Finding(
        "bench.p2p.bidir_below_uni", WARN, Component("node", "p2p"),
        f"bidirectional copies carry less in both directions together than one direction alone on {len(slow)} "
        f"pair(s) (e.g. {slow[0][0].label} {slow[0][0].extra['bidir_total_gbyte_s']:.1f} GB/s both ways vs "
        f"{slow[0][1].gbyte_s:.1f} GB/s one way): the path does not run full duplex",
        evidence=tuple(Evidence(f"{m.label} both ways vs one way",
                                f"{m.extra['bidir_total_gbyte_s']:.2f} vs {u.gbyte_s:.2f} GB/s", source)
                       for m, u in slow[:8]),
        expected="both directions together above one direction", expected_source="the same run's matrices",
        remedy=("Copies that do not overlap in the two directions cross a shared hop: staged through host memory "
                "(no peer access), a PCIe switch uplink or root complex that serialises, or a link trained down. "
                "Compare `nvidia-smi topo -m` and `lspci -vv` LnkSta for the pair's path."))]


def no_peer_access(ms: list[Measurement], source: str) -> list[Finding]:
    """Pairs the file says cannot access each other: their copies were staged through host memory,
    and the reason is named (the driver on GeForce boards, else ACS, an IOMMU or a VM)."""
    blocked = [m for m in _pairs(ms) if m.extra.get("no_peer_reason") and m.direction == "uni"]
    if not blocked:
        return []
    why = blocked[0].extra["no_peer_reason"]
    figs = ", ".join(f"{m.label} {m.gbyte_s:.1f} GB/s" for m in blocked[:4])
    geforce = "driver offers no peer access" in why
    unnamed = "could be any that fits" in why  # the file names its GPUs only generically
    return [Finding(
        "bench.p2p.no_peer_access", WARN, Component("node", "p2p"),
        f"{len(blocked)} GPU pair(s) have no peer access, so their copies are staged through host memory "
        f"({figs}): {why}",
        evidence=tuple(Evidence(m.label, f"{m.gbyte_s:.2f} GB/s", source) for m in blocked[:8]),
        expected="peer access between GPUs that NCCL and CUDA copies use directly",
        expected_source="p2pBandwidthLatencyTest 'CANNOT Access Peer' lines / P2P connectivity matrix",
        remedy=("Name the GPU first: `lspci -nn -d 10de:` gives its PCI device id (pass it as --gpu-pci-id). On a "
                "GeForce board no peer access over PCIe is expected (NCCL falls back to SHM); on any other, check "
                "`nvidia-smi topo -p2p r` on the node; " + ACS_OR_IOMMU if unnamed else
                "Expected on GeForce boards: the driver offers peer access only over an NVLink bridge; NCCL falls "
                "back to SHM. Use a bridge where the board has one, or data-center GPUs for peer traffic."
                if geforce else
                "Check `nvidia-smi topo -p2p r` on the node; " + ACS_OR_IOMMU))]


#: the rules, applied in this order to every imported file
RULES: tuple[Rule, ...] = (no_peer_access, enabled_below_disabled, bidir_below_uni, peer_relative)


def apply(ms: list[Measurement], source: str) -> list[Finding]:
    out: list[Finding] = []
    for rule in RULES:
        out += rule(ms, source)
    return out


def judged(ms: list[Measurement], findings: list[Any]) -> int:
    """How many figures got a verdict (from their path, their peers, or a rule)."""
    return sum(1 for m in ms if m.status in (PASS, WARN, FAIL))
