"""From many judged measurements, name the component at fault.

Every measurement crossed a path of links the topology knows. Slow figures are explained in this
order, each step taking the measurements it explains out of the pool:

1. **A link that trained down.** The figure is low against the path's capability but normal
   against the links as they trained: the trained-down bottleneck (a GPU at x8, NVLinks down) is
   the cause, named once for every measurement it slows.
2. **One GPU slow with every peer.** In a peer matrix, a GPU whose every pair is slow while pairs
   without it are fine: that GPU's own links (or the GPU) are at fault.
3. **A link shared by the slow paths.** The link crossed by the most slow measurements and by no
   healthy one (a PCIe switch's uplink under two slow GPUs, one root port): path tomography by
   greedy cover, so two faults are named as two links.
4. What is left is named by its own pair or device.

A healthy run gives one ``pass`` finding per benchmark with the range of ratios seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, cast

from ccdiag.bench.result import Expected, Measurement
from ccdiag.findings import FAIL, PASS, WARN, Component, Evidence, Finding

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


def localize(bench: str, ms: list[Measurement], topology: Topology | None = None) -> list[Finding]:
    """Findings for one benchmark's judged measurements (see the module docstring)."""
    check = f"bench.{bench}"
    judged = [m for m in ms if m.gbyte_s is not None and m.status in (PASS, WARN, FAIL)]
    if not judged:
        return []
    bad = [m for m in judged if m.status in BAD]
    good = [m for m in judged if m.status == PASS]
    findings: list[Finding] = []
    if not bad:
        ratios = [m.ratio for m in judged if m.ratio is not None]
        rng = f"{min(ratios):.0%}-{max(ratios):.0%} of expected" if ratios else "as expected"
        return [Finding(check, PASS, Component("node", bench),
                        f"{bench}: {len(judged)} measurement(s) within range ({rng})",
                        evidence=_evidence(judged, 3), expected=judged[0].typical,
                        expected_source=judged[0].threshold_source)]

    # 1. links that trained down
    pool: list[Measurement] = []
    by_trained: dict[str, list[Measurement]] = {}
    for m in bad:
        e = m.expected
        if e is not None and e.degraded and e.current_bottleneck and m.ratio_current is not None \
                and m.ratio_current >= EXPLAINED_BY_TRAINED:
            by_trained.setdefault(e.current_bottleneck, []).append(m)
        else:
            pool.append(m)
    for name, group in by_trained.items():
        e = cast("Expected", group[0].expected)  # grouped by its expected's trained bottleneck above
        comp = _link_component(topology, name)
        findings.append(Finding(
            f"{check}.slow_link", _worst(group), comp,
            f"{name} runs at {e.current_desc or '?'} (capable of {e.bottleneck_desc or '?'}): "
            f"{_fmt(min(group, key=lambda m: m.ratio or 0))}",
            evidence=_evidence(group), expected=f"{e.gbyte_s:.1f} GB/s at {e.bottleneck_desc}",
            expected_source=e.source, remedy=_remedy_for_link(comp, True),
            details={"measurements": [m.label for m in group], "trained_gbyte_s": e.current_gbyte_s}))

    # 2. one GPU slow with every peer (peer matrices only)
    pairs = [m for m in judged if m.src.startswith("GPU") and m.dst.startswith("GPU") and m.src != m.dst]
    if pairs:
        gpus = sorted({m.src for m in pairs} | {m.dst for m in pairs}, key=lambda g: _gpu_index(g) or 0)
        for g in gpus:
            mine = [m for m in pairs if g in (m.src, m.dst)]
            mine_bad = [m for m in mine if m in pool]
            others_bad = [m for m in pool if m in pairs and g not in (m.src, m.dst)]
            others = [m for m in pairs if g not in (m.src, m.dst)]
            if len(mine) >= 2 and len(mine_bad) == len(mine) and others and not others_bad:
                findings.append(Finding(
                    f"{check}.gpu", _worst(mine_bad), Component("gpu", g, gpu=_gpu_index(g)),
                    f"{g} is slow with every peer ({len(mine_bad)} of {len(mine)} pairs) while pairs "
                    f"without it are normal: {_fmt(min(mine_bad, key=lambda m: m.ratio or 0))}",
                    evidence=_evidence(mine_bad), expected=mine_bad[0].typical and
                    f"{mine_bad[0].typical} of each path's bottleneck", expected_source=mine_bad[0].threshold_source,
                    remedy=(f"{g}'s own links are at fault: check its NVLinks (`nvidia-smi nvlink -s -i "
                            f"{_gpu_index(g)}`) and PCIe link, its clocks and throttle reasons (`nvidia-smi -q -d "
                            f"PERFORMANCE -i {_gpu_index(g)}`); reset it when idle, and replace it if it stays slow."),
                    details={"pairs": [m.label for m in mine_bad]}))
                pool = [m for m in pool if m not in mine_bad]

    # 3. a link shared by the slow paths and by no healthy one: a link is named when two or more
    #    slow paths share it, or when healthy paths clear every other link of a slow path
    healthy_links = {l for m in good if m.expected for l in m.expected.links}

    def suspects(m: Measurement) -> list[str]:
        return [l for l in (m.expected.links if m.expected else ()) if l not in healthy_links]

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
        comp = _link_component(topology, name)
        findings.append(Finding(
            f"{check}.shared_link", _worst(group), comp,
            f"{len(group)} slow path(s) share {name}, which no healthy path crosses: "
            f"{_fmt(min(group, key=lambda m: m.ratio or 0))}",
            evidence=_evidence(group), expected=group[0].typical and f"{group[0].typical} of each path's bottleneck",
            expected_source=group[0].threshold_source, remedy=_remedy_for_link(comp, False),
            details={"measurements": [m.label for m in group]}))
        pool = [m for m in pool if m not in group]

    # 4. whatever is left, by its own pair or device
    for m in pool:
        if m.src.startswith("GPU") and m.dst.startswith("GPU"):
            comp = Component("gpu_pair", f"{m.src}-{m.dst}", gpu=_gpu_index(m.src), peer=m.dst)
        else:
            dev = m.dst if m.dst.startswith("GPU") else m.src
            comp = Component("gpu" if dev.startswith("GPU") else "nic", dev, gpu=_gpu_index(dev),
                             device=None if dev.startswith("GPU") else dev)
        e = m.expected
        findings.append(Finding(
            check, m.status, comp, f"{_fmt(m)}" + (f" (typical {m.typical})" if m.typical else ""),
            evidence=_evidence([m]), expected=f"{e.gbyte_s:.1f} GB/s ({e.bottleneck_desc or e.bottleneck})" if e and e.gbyte_s else None,
            expected_source=e.source if e else None,
            remedy="Re-run `ccdiag bench` to confirm; check the path's links with `ccdiag topo` and `ccdiag check`.",
            details={"measurement": m.label}))
    return findings
