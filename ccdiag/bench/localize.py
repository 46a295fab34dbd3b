"""From many judged measurements, name the component at fault.

Every measurement crossed a path of links the topology knows. Slow figures are explained in this
order, each step taking the measurements it explains out of the pool:

1. **A link that trained down.** The figure is low against the path's capability but normal
   against the links as they trained: the trained-down bottleneck (a GPU at x8, NVLinks down) is
   the cause, named once for every measurement it slows.
2. **One GPU slow with every peer.** In a peer matrix, a GPU whose every pair is slow while some
   pair without it is fine: that GPU's own links (or the GPU) are at fault (the slow member vs
   slow pair rule of :mod:`ccdiag.core.outliers`).
3. **A link shared by the slow paths.** The link crossed by the most slow measurements and by no
   healthy one (a PCIe switch's uplink under two slow GPUs, one root port): path tomography by
   greedy cover, so two faults are named as two links.
4. What is left is named by its own pair or device.

A healthy run gives one ``pass`` finding per benchmark with the range of ratios seen. Each step
is one small rule (:data:`RULES`): it takes the slow measurements still unexplained and returns
its findings and what it left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from ccdiag.bench.result import Measurement
from ccdiag.core.findings import FAIL, PASS, WARN, Component, Evidence, Finding
from ccdiag.core.outliers import classify_flags

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

BAD = (FAIL, WARN)
#: a figure within this fraction of the trained links' expectation is "explained" by them
EXPLAINED_BY_TRAINED = 0.67


def _worst(ms: Iterable[Measurement]) -> str:
    return FAIL if any(m.status == FAIL for m in ms) else WARN


def _fmt(m: Measurement) -> str:
    exp = m.expected
    ratio = f" = {m.ratio:.0%} of {exp.gbyte_s:.1f} GB/s" if m.ratio is not None and exp and exp.gbyte_s else ""
    return f"{m.label} {m.op} {m.gbyte_s:.1f} GB/s{ratio}"


def _evidence(ms: list[Measurement], limit: int = 8) -> tuple[Evidence, ...]:
    ms = sorted(ms, key=lambda m: (m.ratio if m.ratio is not None else 9.0))
    out = [Evidence(f"{m.bench} {m.label} ({m.op}, {m.direction})", f"{m.gbyte_s:.1f} GB/s"
                    + (f" = {m.ratio:.0%} of {m.expected.gbyte_s:.1f} GB/s" if m.ratio is not None and m.expected else ""),
                    m.engine or "ccdiag bench") for m in ms[:limit]]
    if len(ms) > limit:
        out.append(Evidence("more slow measurements", f"{len(ms) - limit} more", "ccdiag bench"))
    return tuple(out)


def _link_component(topology: Topology | None, name: str) -> Component:
    link = None
    if topology is not None:
        link = next((l for l in topology.links() if l.name == name), None)
    if link is None:
        return Component("link", name)
    if link.kind == "nvlink":
        gpu = name.split()[0]
        return Component("nvlink", name, gpu=_gpu_index(gpu), peer=link.b)
    if link.kind in ("ib", "roce"):
        dev, _, port = name.partition(" port ")
        return Component("ib_port", name, device=dev, port=int(port) if port.isdigit() else None)
    if link.kind == "pcie":
        end = name.split(" <- ")[0]
        kind = "bridge" if end.startswith(("switch", "NVSwitch")) else "pcie_link"
        bdf = link.b.split(":", 1)[1] if ":" in link.b else None
        return Component(kind, name, gpu=_gpu_index(end), bdf=bdf, peer=name.split(" <- ")[-1])
    return Component("link", name)


def _gpu_index(label: str) -> int | None:
    return int(label[3:]) if label.startswith("GPU") and label[3:].isdigit() else None


def _remedy_for_link(comp: Component, trained: bool) -> str:
    if comp.kind == "nvlink":
        return ("NVLinks are down on this GPU: run `nvidia-smi nvlink -s -i <gpu>` to see which, reseat or "
                "replace the GPU baseboard part named there, and reset the GPU (`nvidia-smi -r`) once idle.")
    if comp.kind == "ib_port":
        return "Check the port's cable and switch port (`ibstat`, `mlxlink`); replace the cable or transceiver."
    if comp.kind == "bridge":
        return ("A PCIe switch uplink carries this traffic below its rate: reseat the riser/baseboard cable "
                "of that switch, check `lspci -vv` LnkSta on its upstream port, update the BIOS/switch firmware.")
    if trained:
        return ("This PCIe link trained below its capability: reseat the card or its riser, check "
                "`lspci -vv` LnkSta (speed and width) and the BIOS slot setting; if it persists, replace the riser.")
    return ("Copies over this link run below the link's rate although it trained at full speed: check for "
            "PCIe errors (AER counters), ACS/IOMMU settings, and the slot's BIOS settings.")


@dataclass(frozen=True)
class Scene:
    """What every rule may read: the benchmark's check id, its judged and healthy measurements, the topology."""

    check: str
    judged: tuple[Measurement, ...]
    good: tuple[Measurement, ...]
    topology: Topology | None


Rule = Callable[[Scene, list[Measurement]], tuple[list[Finding], list[Measurement]]]


def _min_ratio(ms: list[Measurement]) -> Measurement:
    return min(ms, key=lambda m: m.ratio or 0)


def rule_trained_down(scene: Scene, pool: list[Measurement]) -> tuple[list[Finding], list[Measurement]]:
    """1. A figure normal against the links as they trained: the trained-down link is the cause."""
    left: list[Measurement] = []
    by_trained: dict[str, list[Measurement]] = {}
    for m in pool:
        e = m.expected
        if e is not None and e.degraded and e.current_bottleneck and m.ratio_current is not None \
                and m.ratio_current >= EXPLAINED_BY_TRAINED:
            by_trained.setdefault(e.current_bottleneck, []).append(m)
        else:
            left.append(m)
    out = []
    for name, group in by_trained.items():
        e = group[0].expected
        assert e is not None  # grouped above only when it has an expected value
        comp = _link_component(scene.topology, name)
        out.append(Finding(
            f"{scene.check}.slow_link", _worst(group), comp,
            f"{name} runs at {e.current_desc or '?'} (capable of {e.bottleneck_desc or '?'}): {_fmt(_min_ratio(group))}",
            evidence=_evidence(group), expected=f"{e.gbyte_s:.1f} GB/s at {e.bottleneck_desc}",
            expected_source=e.source, remedy=_remedy_for_link(comp, True),
            details={"measurements": [m.label for m in group], "trained_gbyte_s": e.current_gbyte_s}))
    return out, left


def _is_pair(m: Measurement) -> bool:
    return m.src.startswith("GPU") and m.dst.startswith("GPU") and m.src != m.dst


def rule_slow_gpu(scene: Scene, pool: list[Measurement]) -> tuple[list[Finding], list[Measurement]]:
    """2. One GPU slow with every peer while some pair without it is fine (peer matrices only)."""
    pairs = [m for m in scene.judged if _is_pair(m)]
    if not pairs:
        return [], pool
    slow = {(m.src, m.dst, m.op, m.direction): False for m in pairs}
    for m in pool:
        if _is_pair(m):
            slow[(m.src, m.dst, m.op, m.direction)] = True
    # one figure per ordered pair: slow when any of its measurements is
    flags: dict[tuple[str, str], bool] = {}
    for (a, b, _, _), bad in slow.items():
        flags[(a, b)] = flags.get((a, b), False) or bad
    verdict = classify_flags(flags)
    out = []
    for g in sorted(verdict.slow_members, key=lambda g: _gpu_index(g) or 0):
        mine = [m for m in pairs if g in (m.src, m.dst)]
        mine_bad = [m for m in mine if m in pool]
        out.append(Finding(
            f"{scene.check}.gpu", _worst(mine_bad), Component("gpu", g, gpu=_gpu_index(g)),
            f"{g} is slow with every peer ({len(mine_bad)} of {len(mine)} pairs) while pairs "
            f"without it are normal: {_fmt(_min_ratio(mine_bad))}",
            evidence=_evidence(mine_bad), expected=mine_bad[0].typical and
            f"{mine_bad[0].typical} of each path's bottleneck", expected_source=mine_bad[0].threshold_source,
            remedy=(f"{g}'s own links are at fault: check its NVLinks (`nvidia-smi nvlink -s -i "
                    f"{_gpu_index(g)}`) and PCIe link, its clocks and throttle reasons (`nvidia-smi -q -d "
                    f"PERFORMANCE -i {_gpu_index(g)}`); reset it when idle, and replace it if it stays slow."),
            details={"pairs": [m.label for m in mine_bad]}))
        pool = [m for m in pool if m not in mine_bad]
    return out, pool


def rule_shared_link(scene: Scene, pool: list[Measurement]) -> tuple[list[Finding], list[Measurement]]:
    """3. A link crossed by slow paths and by no healthy one (greedy cover: two faults, two links).
    A link is named when two or more slow paths share it, or when healthy paths clear every other
    link of a slow path."""
    healthy_links = {l for m in scene.good if m.expected for l in m.expected.links}

    def suspects(m: Measurement) -> list[str]:
        return [l for l in (m.expected.links if m.expected else ()) if l not in healthy_links]

    out = []
    while pool:
        cover: dict[str, list[Measurement]] = {}
        for m in pool:
            for l in suspects(m):
                cover.setdefault(l, []).append(m)
        named = {l: g for l, g in cover.items() if len(g) >= 2 or any(len(suspects(m)) == 1 for m in g)}
        if not named:
            break
        # most slow paths first; on a tie the link nearer the root (shared by more devices) wins
        name, group = max(named.items(), key=lambda kv: (len(kv[1]), kv[0].startswith(("switch", "NVSwitch"))))
        comp = _link_component(scene.topology, name)
        out.append(Finding(
            f"{scene.check}.shared_link", _worst(group), comp,
            f"{len(group)} slow path(s) share {name}, which no healthy path crosses: {_fmt(_min_ratio(group))}",
            evidence=_evidence(group), expected=group[0].typical and f"{group[0].typical} of each path's bottleneck",
            expected_source=group[0].threshold_source, remedy=_remedy_for_link(comp, False),
            details={"measurements": [m.label for m in group]}))
        pool = [m for m in pool if m not in group]
    return out, pool


def _own_component(m: Measurement) -> Component:
    if _is_pair(m) or (m.src.startswith("GPU") and m.dst.startswith("GPU")):
        return Component("gpu_pair", f"{m.src}-{m.dst}", gpu=_gpu_index(m.src), peer=m.dst)
    dev = m.dst if m.dst.startswith("GPU") else m.src
    return Component("gpu" if dev.startswith("GPU") else "nic", dev, gpu=_gpu_index(dev),
                     device=None if dev.startswith("GPU") else dev)


def rule_own_component(scene: Scene, pool: list[Measurement]) -> tuple[list[Finding], list[Measurement]]:
    """4. Whatever is left, by its own pair or device."""
    out = []
    for m in pool:
        e = m.expected
        out.append(Finding(
            scene.check, m.status, _own_component(m), f"{_fmt(m)}" + (f" (typical {m.typical})" if m.typical else ""),
            evidence=_evidence([m]),
            expected=f"{e.gbyte_s:.1f} GB/s ({e.bottleneck_desc or e.bottleneck})" if e and e.gbyte_s else None,
            expected_source=e.source if e else None,
            remedy="Re-run `ccdiag bench` to confirm; check the path's links with `ccdiag topo` and `ccdiag check`.",
            details={"measurement": m.label}))
    return out, []


#: the explanation rules, in the order they take slow measurements out of the pool
RULES: tuple[Rule, ...] = (rule_trained_down, rule_slow_gpu, rule_shared_link, rule_own_component)


def _healthy(check: str, bench: str, judged: list[Measurement]) -> Finding:
    ratios = [m.ratio for m in judged if m.ratio is not None]
    rng = f"{min(ratios):.0%}-{max(ratios):.0%} of expected" if ratios else "as expected"
    return Finding(check, PASS, Component("node", bench), f"{bench}: {len(judged)} measurement(s) within range ({rng})",
                   evidence=_evidence(judged, 3), expected=judged[0].typical,
                   expected_source=judged[0].threshold_source)


def localize(bench: str, ms: list[Measurement], topology: Topology | None = None) -> list[Finding]:
    """Findings for one benchmark's judged measurements (see the module docstring)."""
    check = f"bench.{bench}"
    judged = [m for m in ms if m.gbyte_s is not None and m.status in (PASS, WARN, FAIL)]
    if not judged:
        return []
    pool = [m for m in judged if m.status in BAD]
    if not pool:
        return [_healthy(check, bench, judged)]
    scene = Scene(check, tuple(judged), tuple(m for m in judged if m.status == PASS), topology)
    findings: list[Finding] = []
    for rule in RULES:
        found, pool = rule(scene, pool)
        findings += found
    return findings
