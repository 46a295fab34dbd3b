"""``ccdiag bench import`` of the CUDA sample ``bandwidthTest``: each host<->device figure held to the
GPU's PCIe link (the node's topology, else the hardware catalogue), and the causes a slow one has.

Why: ``bandwidthTest`` is the output people paste most, and it says "Result = PASS" whatever the
figure. A pinned host-to-device copy is bounded by the GPU's PCIe link (or NVLink-C2C on Grace
parts); below it, the usual causes are a link that trained down, host memory on the far NUMA node
(the copy crosses the inter-socket link), or an IOMMU translating every DMA. A paste with several
runs under different ``numactl`` bindings shows the NUMA cause by itself (mpicbg-scicomp/gearshifft#82:
12.2 GB/s with memory on the GPU's node, 3.8 GB/s on the other); a snapshot shows it by the GPU's
NUMA node.

Not held to a link: pageable copies (the driver stages them through its own pinned buffers, so
they measure host memcpy as much as the link) and device-to-device copies (the GPU's own memory,
each byte counted twice, read and write, as the sample says).
"""

from __future__ import annotations

from typing import Any

from ccdiag.bench.result import Expected, Measurement
from ccdiag.core.findings import FAIL, WARN, Component, Evidence, Finding

#: a run this much slower than another run of the same copy on the same GPU is explained by what
#: differs between them (the NUMA binding)
NUMA_SLOWER = 0.7

SLOW_HOST_COPY_CAUSES = (
    "Host copies below the GPU's link have three usual causes, told apart on the node: the link trained down "
    "(`sudo lspci -vv -s <GPU BDF>`: LnkSta speed and width against LnkCap; `ccdiag check` reads both ends of "
    "every hop); host memory on the far NUMA node (rerun under `numactl --cpunodebind=N --membind=N` with N "
    "the GPU's node from `nvidia-smi topo -m`); an IOMMU translating DMA (`cat /proc/cmdline`: intel_iommu=on "
    "or amd_iommu=on without iommu=pt) or a VM without GPU passthrough tuned for it.")


def _gpu(i: int) -> str:
    return f"GPU{i}"


def _label(run: Any) -> str:
    bind = []
    if run.membind is not None:
        bind.append(f"memory on NUMA node {run.membind}")
    if run.cpubind is not None:
        bind.append(f"CPUs of node {run.cpubind}")
    return f" ({', '.join(bind)})" if bind else ""


def _scaled(e: Expected | None, n: int) -> Expected | None:
    if e is None or n <= 1 or not e.gbyte_s:
        return e
    return Expected(e.gbyte_s * n, e.current_gbyte_s * n if e.current_gbyte_s else None, e.bottleneck,
                    e.current_bottleneck, f"{n} x {e.bottleneck_desc or 'link'}", e.current_desc, e.level, e.kind,
                    e.source + f"; {n} devices' cumulative figure held to {n} links", e.links)


def measurements(parsed: Any, ex: Any, source: str, judge_one: Any) -> list[Measurement]:
    """One measurement per copy kind and run, at its largest transfer; ``judge_one(m, (expected,
    why))`` judges it (the caller's policy)."""
    out: list[Measurement] = []
    for ri, run in enumerate(parsed.runs):
        devs = sorted(run.devices) or [0]
        for copy in run.copies:
            row = copy.largest
            gpu = _gpu(devs[0]) if copy.devices == 1 else "+".join(_gpu(d) for d in devs)
            src, dst = {"h2d": ("host", gpu), "d2h": (gpu, "host"), "d2d": (gpu, gpu)}[copy.kind]
            note = f"{source}, run {ri + 1}{_label(run)}, {row.size_bytes} bytes"
            m = Measurement(copy.kind, src, dst, op="copy", direction="uni", engine="import:bandwidthTest",
                            gbyte_s=row.gbyte_s, samples_gbyte_s=tuple(r.gbyte_s for r in copy.rows),
                            size_bytes=row.size_bytes, note=note)
            m.extra.update(run=ri, membind=run.membind, memory=copy.memory, devices=copy.devices,
                           unit_printed=copy.unit)
            if copy.kind == "d2d":
                why = ("device-to-device copies measure the GPU's own memory (the sample counts each byte twice, "
                       "read and write); no link is held to them")
                out.append(judge_one(m, (None, why)))
                continue
            if copy.memory == "pageable":
                why = ("pageable host memory: the driver stages these copies through its own pinned buffers, so the "
                       "figure measures host memcpy as much as the link; judge a --memory=pinned run")
                out.append(judge_one(m, (None, why)))
                continue
            found = ex.host_device(gpu if copy.devices == 1 else _gpu(devs[0]))
            out.append(judge_one(m, (_scaled(found[0], copy.devices), found[1])))
    return out


def _gpu_of(m: Measurement) -> str:
    """The GPU end of a host copy."""
    return m.dst if m.bench == "h2d" else m.src


def _far_runs(same: list[Measurement], fast: Measurement, own: int | None) -> list[Measurement]:
    """The runs of one copy on one GPU whose host memory is on the far node: bound elsewhere than the
    fastest run and :data:`NUMA_SLOWER` slower than it, or (with the GPU's node known) bound to
    another node than the GPU's."""
    slow = [x for x in same if (x.gbyte_s or 0.0) < NUMA_SLOWER * (fast.gbyte_s or 0.0)
            and x.extra.get("membind") != fast.extra.get("membind") and x.extra.get("membind") is not None]
    if own is not None:
        slow += [x for x in same if x not in slow and x.extra.get("membind") not in (None, own)]
    return slow


def _numa_finding(bench: str, gpu: str, same: list[Measurement], fast: Measurement, slow: list[Measurement],
                  node: int | None, own: int | None, source: str) -> Finding:
    """The far-node finding of one copy on one GPU, naming its slowest run against its fastest."""
    worst = min(slow, key=lambda x: x.gbyte_s or 0.0)
    status = FAIL if any(x.status == FAIL for x in slow) else WARN
    return Finding(
        "bench.h2d.numa", status, Component("gpu", gpu, gpu=int(gpu[3:]) if gpu[3:].isdigit() else None),
        f"{gpu} {bench} is {(worst.gbyte_s or 0) / (fast.gbyte_s or 1):.0%} as fast with host memory on NUMA node "
        f"{worst.extra.get('membind')} ({worst.gbyte_s:.1f} GB/s) as on node {node} ({fast.gbyte_s:.1f} GB/s): the "
        "copies cross the inter-socket link to reach the far node's memory",
        evidence=tuple(Evidence(f"{x.bench} {x.label}, memory on node {x.extra.get('membind')}",
                                f"{x.gbyte_s:.2f} GB/s", source) for x in sorted(same, key=lambda y: -(y.gbyte_s or 0))),
        expected=f"host memory on the GPU's NUMA node ({node})",
        expected_source="the same file's runs under other numactl bindings" if own is None else "snapshot: GPU NUMA node",
        remedy=(f"Bind the process to the GPU's node: `numactl --cpunodebind={node} --membind={node} ...` (the "
                "node is the GPU's CPU Affinity / NUMA Affinity in `nvidia-smi topo -m`); data loaders and "
                "pinned buffers should be allocated there."))


def numa_findings(ms: list[Measurement], source: str, gpu_numa: dict[str, int | None] | None = None) -> list[Finding]:
    """Runs of the same copy on the same GPU under different NUMA bindings: the slow one's memory is on
    the far node. With a snapshot (``gpu_numa``), a binding other than the GPU's node is named even in
    one run. The slow runs' notes say so."""
    out: list[Finding] = []
    host = [m for m in ms if m.bench in ("h2d", "d2h") and m.gbyte_s is not None and m.extra.get("memory") == "pinned"]
    seen: set[tuple[str, str]] = set()
    for m in host:
        key = (m.bench, _gpu_of(m))
        if key in seen:
            continue
        seen.add(key)
        bench, gpu = key
        same = [x for x in host if (x.bench, _gpu_of(x)) == key]
        fast = max(same, key=lambda x: x.gbyte_s or 0.0)
        own = (gpu_numa or {}).get(gpu)
        slow = _far_runs(same, fast, own)
        if len({x.extra.get("membind") for x in same}) < 2 and own is None or not slow:
            continue
        node = own if own is not None else fast.extra.get("membind")
        for x in slow:
            x.note = (x.note or "") + f"; host memory on NUMA node {x.extra.get('membind')}, the GPU's node is {node}"
        out.append(_numa_finding(bench, gpu, same, fast, slow, node, own, source))
    return out


def slow_causes(ms: list[Measurement], source: str) -> list[Finding]:
    """Slow pinned host copies that no NUMA finding explains: the causes that fit, and how to tell them apart."""
    slow = [m for m in ms if m.bench in ("h2d", "d2h") and m.status in (WARN, FAIL) and "NUMA node" not in (m.note or "")]
    if not slow:
        return []
    worst = min(slow, key=lambda m: m.ratio if m.ratio is not None else 9.0)
    e = worst.expected
    return [Finding(
        "bench.h2d.slow", FAIL if any(m.status == FAIL for m in slow) else WARN, Component("node", "host-device copies"),
        f"{len(slow)} host<->device figure(s) below the GPU's link: {worst.label} {worst.gbyte_s:.1f} GB/s = "
        f"{worst.ratio:.0%} of {e.gbyte_s:.1f} GB/s ({e.bottleneck_desc})" if e and e.gbyte_s and worst.ratio is not None
        else f"{len(slow)} host<->device figure(s) below the GPU's link",
        evidence=tuple(Evidence(f"{m.bench} {m.label}", f"{m.gbyte_s:.2f} GB/s", source) for m in slow[:8]),
        expected=f"{e.gbyte_s:.1f} GB/s" if e and e.gbyte_s else None, expected_source=e.source if e else None,
        remedy=SLOW_HOST_COPY_CAUSES)]

