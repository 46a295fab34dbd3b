"""The checks' toolkit: how a check names what it judges, gates on its probes, cites its policy and
reads counters over the sampling window.

Every check module uses these, so the same situation reads the same everywhere: a probe that timed
out is the same ``unknown`` finding whichever check needed it, a GPU is "GPU3" with its UUID and bus
address, a value from the policy file cites the file and the key, and a counter is only judged by
its change between the two samples of a window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from ccdiag.checks.context import REGISTRY, CheckContext
from ccdiag.core.findings import SKIP, UNKNOWN, Component, Evidence, Finding
from ccdiag.core.readings import ReadError, normalize_bdf
from ccdiag.core.probenames import PROBE_NVML, PROBE_SMI_TOPO
from ccdiag.probes.registry import NOT_RECORDED_PREFIX, TIMEOUT, UNAVAILABLE

NVIDIA_VENDOR = "0x10de"
#: evidence source for values read through NVML
NVML = "NVML"
#: NVML error classes meaning "this GPU does not have that" rather than "could not read it"
NOT_APPLICABLE = ("not_supported", "not_found")

#: the node as a component (findings about the node as a whole)
NODE = Component("node", "node")



# ---------------------------------------------------------------- naming

def node_component(name: str = "node") -> Component:
    return Component("node", name)


def sysfs_path(bdf: str, attr: str) -> str:
    """Where a PCI function's attribute is read (evidence source)."""
    return f"/sys/bus/pci/devices/{bdf}/{attr}"


def gpu_component(g: Any) -> Component:
    """An NVML GPU as a component: index, UUID and bus address."""
    return Component("gpu", f"GPU{g.index}", gpu=g.index, uuid=g.uuid, bdf=normalize_bdf(g.bus_id))


@dataclass(frozen=True)
class GpuId:
    index: int | None
    uuid: str | None
    bdf: str
    label: str  # "GPU3"
    gpu: Any = None  # the nvml Gpu, when NVML saw it


def gpu_ids(ctx: CheckContext) -> dict[str, GpuId]:
    """BDF -> GPU identity, from NVML first, then the topology."""
    out: dict[str, GpuId] = {}
    for g in getattr(ctx.nvml, "gpus", ()) or ():
        bdf = normalize_bdf(g.bus_id)
        if bdf:
            out[bdf] = GpuId(g.index, g.uuid, bdf, f"GPU{g.index}", g)
    if ctx.topology is not None:
        for n in ctx.topology.gpus():
            bdf = normalize_bdf(n.bdf)
            if bdf and bdf not in out:
                label = n.label or (f"GPU{n.index}" if n.index is not None else f"GPU {bdf}")
                out[bdf] = GpuId(n.index, n.uuid, bdf, label)
    return out


def nic_names(ctx: CheckContext) -> dict[str, str]:
    """BDF -> the name operators use for the NIC: the RDMA device ("mlx5_0"), else the netdev."""
    out: dict[str, str] = {}
    for i in getattr(ctx.netdev, "interfaces", ()) or ():
        bdf = normalize_bdf(i.pci_bdf)
        if bdf and not i.virtual:
            out.setdefault(bdf, i.name)
    for d in getattr(ctx.infiniband, "devices", ()) or ():
        bdf = normalize_bdf(d.pci_bdf)
        if bdf:
            out[bdf] = d.name
    return out


def gpu_by_bdf(nvml: Any) -> dict[str, Any]:
    """NVML GPUs keyed by normalised PCI address (domain:bus:device.function)."""
    out = {}
    for g in nvml.gpus:
        bdf = normalize_bdf(g.bus_id)
        if bdf:
            out[bdf] = g
    return out


def nvidia_pci_gpus(ctx: CheckContext) -> list | None:
    """NVIDIA GPUs as PCI enumerates them (None when the PCI probe gave nothing usable).

    PCI is the independent witness: a GPU the driver lost is still enumerated on the bus."""
    pcie = ctx.pcie
    if pcie is None:
        return None
    return [d for d in pcie.devices
            if d.kind == "gpu" and (d.vendor_id is None or d.vendor_id.lower() == NVIDIA_VENDOR)]


def nvswitches_on_pci(ctx: CheckContext) -> list:
    pcie = ctx.pcie
    return [d for d in pcie.devices if d.kind == "nvswitch"] if pcie is not None else []


def gpu_activity(gpu: Any) -> str:
    """"busy", "idle" or "unknown" from NVML, for deciding whether a low PCIe speed means anything.

    NVML's clock-event reasons carry an idle bit; running compute processes without it mean work.
    """
    if gpu is None:
        return "unknown"
    names = tuple(getattr(gpu, "clock_event_names", ()) or ())
    if any("idle" in n.lower() for n in names):
        return "idle"
    if getattr(gpu, "compute_processes", ()):
        return "busy"
    if getattr(gpu, "clock_event_reasons", None) is not None:
        return "busy"  # reasons were read and the idle bit is clear: the GPU is clocked up for work
    return "unknown"


# ---------------------------------------------------------------- policy

def policy_source(ctx: CheckContext, key: str | None = None) -> str:
    """Where an expectation came from: "policy fleet.toml: min_pcie_gen", or the built-in default."""
    if key is None:
        return f"policy {ctx.policy.source}" if ctx.policy.source else "default policy"
    return f"policy {ctx.policy.source or '(given)'}: {key}"


# ---------------------------------------------------------------- gating on probes

def unusable_probe_finding(ctx: CheckContext, check_id: str, probe: str, what: str) -> Finding:
    """The one finding for "``probe`` gave this check nothing to judge".

    Absent subsystem (``unavailable``: no IB stack, no NVIDIA driver on a box without NVIDIA GPUs):
    the check does not apply, skip. A probe that failed or timed out, or NVML unavailable while PCI
    shows NVIDIA GPUs: the check is undecided, unknown, never pass."""
    run = ctx.runs.get(probe)
    if run is None:
        return Finding(check_id, SKIP, NODE, f"{what}: probe {probe} was not run",
                       details={"probe": probe, "probe_status": None})
    details = {"probe": probe, "probe_status": run.status}
    if probe == PROBE_NVML:
        pci = nvidia_pci_gpus(ctx)
        if run.status == UNAVAILABLE and pci is not None and not pci:
            return Finding(check_id, SKIP, NODE, "No NVIDIA GPU on this node (NVML absent, none on PCI).",
                           evidence=(Evidence("nvml probe", run.error, NVML),), details=details)
        why = f"nvml probe {run.status}: {run.error or ''}".strip()
        return Finding(check_id, UNKNOWN, NODE, f"Not evaluated: {why}.",
                       evidence=(Evidence("nvml probe", run.status, NVML),),
                       remedy="See the gpu.driver_unavailable and probe.* findings.", details=details)
    if run.status == UNAVAILABLE:
        return Finding(check_id, SKIP, NODE, f"{what}: not present ({run.error or probe})", details=details)
    remedy = probe_timeout_remedy(probe) if run.status == TIMEOUT else (
        "What was read (a bug report, a pasted output) does not hold it: run `ccdiag check` on the node."
        if (run.error or "").startswith(NOT_RECORDED_PREFIX) else
        "Re-run `ccdiag check`; if the probe keeps failing, attach `ccdiag snapshot` output to a bug report.")
    return Finding(check_id, UNKNOWN, NODE, f"{what} could not be judged: probe {probe} {run.status} ({run.error})",
                   remedy=remedy, details=details)


def probe_timeout_remedy(probe: str) -> str:
    """What to do about a probe that hung: a wedged GPU driver for NVML, a D-state read otherwise."""
    if probe in (PROBE_NVML, PROBE_SMI_TOPO):
        return ("A hung NVML call usually means a wedged driver or GPU: look for XID 79/119 in the kernel log, "
                "drain the node and reset or reboot.")
    return ("Re-run; if it hangs again, look for processes in D state (ps -eo stat,pid,cmd | grep ^D) "
            "and the device named in the kernel log.")


def gate(ctx: CheckContext, check_id: str, what: str | None = None,
         probes: Iterable[str] | None = None) -> Finding | None:
    """The finding that stops ``check_id`` when one of its probes gave nothing usable, else None.

    ``probes`` defaults to the check's declared ``needs=``; the first unusable one decides.
    :func:`ccdiag.checks.run_checks` applies this before calling a check, so a check only calls it
    itself for probes it reads conditionally (declared ``uses=``)."""
    spec = REGISTRY.get(check_id)
    if probes is None:
        probes = spec.needs if spec is not None else ()
    if what is None:
        what = (spec.what if spec is not None and spec.what else check_id)
    for probe in probes:
        run = ctx.runs.get(probe)
        if run is None or not run.usable:
            return unusable_probe_finding(ctx, check_id, probe, what)
    return None


# ---------------------------------------------------------------- NVML per GPU

def read_error(g: Any, *fns: str) -> Any:
    """The per-GPU ReadError recorded for any of the NVML functions ``fns`` (or None)."""
    for e in getattr(g, "errors", ()):
        if any(e.source.startswith(fn) for fn in fns):
            return e
    return None


#: evidence source for a bus id ccdiag worked out rather than read
INFERRED_BDF = "inferred: the NVIDIA GPU on PCI that no other NVML GPU claims (NVML enumerates in PCI order)"


def with_inferred_bus_ids(nvml: Any, pci: list | None) -> Any:
    """Fill the bus id of GPUs NVML lost before it could say where they sit.

    A GPU that fell off the bus often fails its first NVML call, so NVML lists "GPU6, lost" with
    no address while PCI still shows the device. When the GPUs without an address and the PCI
    GPUs no NVML GPU claims are equally many, pair them in order (NVML indexes GPUs by PCI bus
    order), so findings and XIDs name the physical part. The GPU's ``errors`` keep a note."""
    if pci is None:
        return nvml
    missing = sorted((g for g in nvml.gpus if not normalize_bdf(g.bus_id)), key=lambda g: g.index)
    if not missing:
        return nvml
    claimed = set(gpu_by_bdf(nvml))
    free = sorted(b for b in (normalize_bdf(d.bdf) for d in pci) if b and b not in claimed)
    if len(free) != len(missing):
        return nvml
    fill = {g.index: b for g, b in zip(missing, free)}

    def note(g: Any) -> ReadError:
        return ReadError(f"nvmlDeviceGetPciInfo_v3({g.index})", "inferred", INFERRED_BDF)

    gpus = tuple(replace(g, bus_id=fill[g.index], errors=g.errors + (note(g),)) if g.index in fill else g
                 for g in nvml.gpus)
    return replace(nvml, gpus=gpus)


def nvml_gate(ctx: CheckContext, check_id: str) -> tuple[Any, list[Finding]]:
    """(NVML observation with inferred bus ids, []) when NVML data is usable, else (None, [the gate
    finding])."""
    gated = gate(ctx, check_id, probes=(PROBE_NVML,))
    if gated is not None:
        return None, [gated]
    return with_inferred_bus_ids(ctx.nvml, nvidia_pci_gpus(ctx)), []


def not_read(check_id: str, g: Any, what: str, fns: tuple[str, ...]) -> Finding:
    """The finding for a value NVML did not give: skip when the GPU lacks it, unknown otherwise."""
    err = read_error(g, *fns)
    src = f"{fns[0]}({g.index})"
    if g.failed:
        return Finding(check_id, UNKNOWN, gpu_component(g),
                       f"GPU{g.index}: {what} not read; the GPU failed ({g.failed}).",
                       evidence=(Evidence("GPU state", g.failed, NVML),),
                       remedy="See gpu.lost for this GPU.")
    if err is None or err.kind in NOT_APPLICABLE:
        return Finding(check_id, SKIP, gpu_component(g), f"GPU{g.index}: {what} not supported on this GPU/driver.",
                       evidence=(Evidence(what, err.kind if err else None, src),))
    if err.kind == "not_recorded":  # a snapshot, bug report or paste that does not hold this value
        return Finding(check_id, UNKNOWN, gpu_component(g), f"GPU{g.index}: {what} is not in this record.",
                       evidence=(Evidence(what, "not recorded", err.source),),
                       remedy="Run ccdiag on the node itself (a record made by an older ccdiag, or an "
                              "nvidia-smi output that does not print this value, cannot say).")
    return Finding(check_id, UNKNOWN, gpu_component(g), f"GPU{g.index}: {what} could not be read ({err.kind}).",
                   evidence=(Evidence(what, f"{err.kind}: {err.message}", err.source),),
                   remedy="Run as root (some NVML queries need it) or check the driver.")


def per_gpu(ctx: CheckContext, check_id: str, judge: Callable[[Any, Any], Iterable[Finding]]) -> list[Finding]:
    """Run ``judge(gpu, nvml)`` on every NVML GPU in index order (gated on NVML)."""
    nvml, gated = nvml_gate(ctx, check_id)
    if gated:
        return gated
    if not nvml.gpus:
        return [Finding(check_id, SKIP, NODE, "NVML lists no GPU.",
                        evidence=(Evidence("device count", nvml.device_count, "nvmlDeviceGetCount()"),))]
    out: list[Finding] = []
    for g in sorted(nvml.gpus, key=lambda g: g.index):
        out.extend(judge(g, nvml))
    return out


# ---------------------------------------------------------------- counters over the window

def counter_delta(before: int | None, after: int | None) -> int | None:
    """Increase of a monotonic counter; None when unknown or when it went backwards (a reset)."""
    if before is None or after is None or after < before:
        return None
    return after - before


def second_sample(ctx: CheckContext, probe: str, check_id: str, what: str,
                  lifetime: dict | None = None) -> tuple[Any, Finding | None]:
    """(the probe's second sample, None), or (None, the finding saying why ``what`` is not judged).

    Counters are judged by their change over the window, never by lifetime totals: without a
    window the check skips (``lifetime`` non-zero totals go in its details, for the curious); a
    second sample that is unusable leaves it unknown."""
    if not ctx.later:
        return None, Finding(check_id, SKIP, NODE,
                             f"{what} are judged by their change over a window (--window); none was taken "
                             "(lifetime totals are not a verdict)",
                             remedy=f"Run `ccdiag check --window 30` to judge {what}.",
                             details={"lifetime_nonzero": lifetime} if lifetime else {})
    later = ctx.later_data(probe)
    if later is None:
        run = ctx.later.get(probe)
        return None, Finding(check_id, UNKNOWN, NODE,
                             f"{what} not judged: the second {probe} sample is not usable "
                             f"({run.status if run else 'not taken'})",
                             remedy="See the probe.* findings.")
    return later, None
