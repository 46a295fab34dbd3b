"""A collection cycle as Prometheus metric families: a pure function, no I/O, no clock.

:func:`families` turns a :class:`~ccdiag.exporters.cycle.Cycle` into ``prometheus_client`` metric
families declared in :mod:`ccdiag.exporters.spec`. Devices, links and ports are emitted in a stable
order (the client library keeps the order it is given), so the whole exposition can be compared
against a golden file. Anything that was not read is left out; nothing is zero-filled.
"""

from __future__ import annotations

import platform
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ccdiag import __version__
from ccdiag.checks.causes import key as finding_key
from ccdiag.exporters import spec as S
from ccdiag.exporters.cycle import Cycle, xid_keys
from ccdiag.core.actions import RANK, action_of
from ccdiag.core.actions import worst as worst_action
from ccdiag.core.findings import STATUSES, WAIVED, Finding, verdict_status
from ccdiag.core.readings import normalize_bdf
from ccdiag.probes.registry import OK, PARTIAL, UNAVAILABLE
from ccdiag.topology.levels import UNKNOWN
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_KMSG, PROBE_NVML, PROBE_PCIE, PROBE_SYSTEM

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

#: kernel modules whose presence decides whether GPU or RDMA work can run
WATCHED_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem", "nv_peer_mem", "gdrdrv",
                   "nvidia_fs", "ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib")
FABRIC_STATES = ("not_supported", "not_started", "in_progress", "completed")
RECOVERY_ACTIONS = ("none", "reset", "reboot", "drain_p2p", "drain_and_reset")
NVLINK_ERRORS = (("crc_flit", "crc_flit_errors"), ("crc_data", "crc_data_errors"),
                 ("replay", "replay_errors"), ("recovery", "recovery_errors"))
#: IB counters exported under their own names, with the factor to base units (data counters
#: count 32-bit words: IBTA PortCounters, PortXmitData/PortRcvData "divided by 4")
IB_NAMED = {"port_xmit_data": ("infiniband_port_transmitted_bytes", 4),
            "port_rcv_data": ("infiniband_port_received_bytes", 4),
            "port_xmit_packets": ("infiniband_port_transmitted_packets", 1),
            "port_rcv_packets": ("infiniband_port_received_packets", 1)}
#: hw_counters files that are settings, not counters
IB_HW_NOT_COUNTERS = frozenset({"lifespan"})


def _clock_reasons() -> tuple[str, ...]:
    try:
        from ccdiag.probes.nvml import CLOCK_EVENT_BITS
    except ImportError:  # pragma: no cover - the probe ships with the package
        return ()
    return tuple(name for _, name in CLOCK_EVENT_BITS)


class _Families:
    """Collects samples per declared metric and returns only the families that got samples."""

    def __init__(self) -> None:
        self._fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(self, name: str, labels: Iterable[Any], value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bool):
            value = int(value)
        full = "ccdiag_" + name
        fam = self._fams.get(full)
        if fam is None:
            sp = S.BY_NAME.get(full) or S.BY_NAME[full + "_total"]
            cls = CounterMetricFamily if sp.type == S.COUNTER else GaugeMetricFamily
            fam = self._fams[full] = cls(sp.family_name, sp.help, labels=list(sp.labels))
        fam.add_metric(["" if v is None else str(v) for v in labels], float(value))

    def ordered(self) -> list[Metric]:
        order = {sp.family_name: i for i, sp in enumerate(S.SPECS)}
        return sorted(self._fams.values(), key=lambda f: order[f.name])


def dcgm_bus_id(bdf: str | None) -> str | None:
    """``0000:18:00.0`` in dcgm-exporter's ``pci_bus_id`` spelling, ``00000000:18:00.0``."""
    b = normalize_bdf(bdf)
    if b is None:
        return None
    dom, bus, devfn = b.split(":")
    return f"{int(dom, 16):08X}:{bus.upper()}:{devfn.upper()}"


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


# -- sections ---------------------------------------------------------------------------------------
def _self_metrics(out: _Families, cycle: Cycle, interval_s: float | None, cycles_total: int | None) -> None:
    out.add("build_info", (__version__, platform.python_version()), 1)
    out.add("last_collection_timestamp_seconds", (), cycle.completed_at)
    out.add("collection_duration_seconds", (), cycle.duration_s)
    out.add("collection_interval_seconds", (), interval_s)
    out.add("collection_cycles", (), cycles_total)
    for stage in sorted(cycle.stages):
        out.add("collection_stage_success", (stage,), cycle.stages[stage])
    for name in sorted(cycle.runs):
        run = cycle.runs[name]
        out.add("probe_success", (name,), run.status in (OK, PARTIAL, UNAVAILABLE))
        for status in S.PROBE_STATUSES:
            out.add("probe_status", (name, status), run.status == status)
        out.add("probe_duration_seconds", (name,), run.duration_s)
    for name in sorted(cycle.last_success):
        out.add("probe_last_success_timestamp_seconds", (name,), cycle.last_success[name])
    for name in sorted(cycle.data):
        out.add("probe_data_stale", (name,), name in cycle.stale)
        out.add("probe_read_errors", (name,), _count_errors(cycle.data[name]))


def _count_errors(obj: Any, depth: int = 0) -> int:
    """ReadError entries anywhere in an observation (its own and its devices', links', ports')."""
    if depth > 4 or obj is None:
        return 0
    n = len(getattr(obj, "errors", ()) or ())
    for attr in ("gpus", "nvlinks", "devices", "ports", "interfaces"):
        for child in getattr(obj, attr, ()) or ():
            n += _count_errors(child, depth + 1)
    return n


def _system(out: _Families, sysobs: Any, nvml: Any) -> None:
    if nvml is not None:
        if nvml.driver_version or nvml.cuda_driver_version:
            out.add("nvidia_driver_info", (nvml.driver_version, nvml.cuda_driver_version), 1)
        out.add("nvml_devices", (), nvml.device_count)
    if sysobs is None:
        return
    out.add("system_info", (sysobs.kernel, sysobs.os_release, sysobs.iommu), 1)
    if sysobs.modules:
        loaded = set(sysobs.modules)
        for mod in WATCHED_MODULES:
            out.add("kernel_module_loaded", (mod,), mod in loaded)
    if sysobs.fabric_manager is not None:
        out.add("fabric_manager_active", (), sysobs.fabric_manager == "active")
    out.add("shm_size_bytes", (), sysobs.shm_bytes)
    out.add("memlock_unlimited", (), sysobs.memlock_unlimited)
    if not sysobs.memlock_unlimited:
        out.add("memlock_limit_bytes", ("soft",), sysobs.memlock_soft_bytes)
        out.add("memlock_limit_bytes", ("hard",), sysobs.memlock_hard_bytes)


def _gpu_ids(gpu: Any) -> tuple:
    return (gpu.index, gpu.uuid, dcgm_bus_id(gpu.bus_id))


def _xid_counts(cycle: Cycle) -> dict[tuple, int]:
    if cycle.xid_counts is not None:
        return dict(cycle.xid_counts)
    counts: dict[tuple, int] = {}
    for bdf, code in xid_keys(cycle.data.get(PROBE_KMSG)).values():
        counts[(bdf, code)] = counts.get((bdf, code), 0) + 1
    return counts


def _with_lost_ids(cycle: Cycle, nvml: Any) -> Any:
    """NVML's GPUs with what a lost GPU could not say filled in: its bus id as the checks infer it
    (the NVIDIA GPU on PCI no other NVML GPU claims), and its UUID as the kernel log or an earlier
    cycle knew it. A lost GPU keeps its ``gpu``, ``UUID`` and ``pci_bus_id`` labels that way."""
    import dataclasses

    from ccdiag.checks.common import NVIDIA_VENDOR, with_inferred_bus_ids

    if nvml is None:
        return None
    pcie = cycle.data.get(PROBE_PCIE)
    pci = None
    if pcie is not None:
        pci = [d for d in pcie.devices if d.kind == "gpu" and (d.vendor_id or NVIDIA_VENDOR).lower() == NVIDIA_VENDOR]
    nvml = with_inferred_bus_ids(nvml, pci)
    known = dict(cycle.known_uuids)
    for e in getattr(cycle.data.get(PROBE_KMSG), "events", ()) or ():
        if e.kind == "gpu_uuid" and e.bdf and e.device:
            known.setdefault(e.bdf, e.device)
    gpus = tuple(dataclasses.replace(g, uuid=known.get(normalize_bdf(g.bus_id) or "")) if not g.uuid and
                 known.get(normalize_bdf(g.bus_id) or "") else g for g in nvml.gpus)
    return dataclasses.replace(nvml, gpus=gpus)


def _pci_numa(cycle: Cycle) -> dict[str, int]:
    """NUMA node of each PCI function by address, as sysfs says: NVML's own NUMA id is "N/A" on most
    x86 systems, while the PCI device's ``numa_node`` is what ``topo`` (and the kernel) use."""
    devices = getattr(cycle.data.get("pcie"), "devices", ()) or ()
    return {bdf: d.numa_node for d in devices if d.numa_node is not None and (bdf := normalize_bdf(d.bdf))}


def _gpus(out: _Families, cycle: Cycle, nvml: Any) -> None:
    gpus = sorted(getattr(nvml, "gpus", ()) or (), key=lambda g: g.index)
    by_bdf = {normalize_bdf(g.bus_id): g for g in gpus if g.bus_id}
    reasons = _clock_reasons()
    pci_numa = _pci_numa(cycle)
    for g in gpus:
        ids = _gpu_ids(g)
        numa = pci_numa.get(normalize_bdf(g.bus_id) or "", g.numa_node)
        out.add("gpu_info", ids + (g.name, numa), 1)
        out.add("gpu_up", ids, g.failed is None)
        out.add("gpu_memory_total_bytes", ids, g.memory_total_bytes)
        out.add("gpu_memory_used_bytes", ids, g.memory_used_bytes)
        if g.failed is None:
            out.add("gpu_compute_processes", ids, len(g.compute_processes))
        out.add("gpu_persistence_mode_enabled", ids, g.persistence_mode)
        out.add("gpu_mig_mode_enabled", ids, g.mig_mode_current)
        out.add("gpu_ecc_mode_enabled", ids, g.ecc_mode_current)
        for typ in ("corrected", "uncorrected"):
            for scope in ("volatile", "aggregate"):
                out.add("gpu_ecc_errors", ids + (typ, scope), getattr(g, f"ecc_{scope}_{typ}"))
        out.add("gpu_retired_pages", ids + ("sbe",), g.retired_pages_sbe)
        out.add("gpu_retired_pages", ids + ("dbe",), g.retired_pages_dbe)
        out.add("gpu_retired_pages_pending", ids, g.retired_pages_pending)
        out.add("gpu_remapped_rows", ids + ("correctable",), g.remapped_rows_correctable)
        out.add("gpu_remapped_rows", ids + ("uncorrectable",), g.remapped_rows_uncorrectable)
        out.add("gpu_remapped_rows_pending", ids, g.remapped_rows_pending)
        out.add("gpu_remapped_rows_failed", ids, g.remapped_rows_failure)
        if g.clock_event_reasons is not None:
            out.add("gpu_clock_event_reasons", ids, g.clock_event_reasons)
            active = set(g.clock_event_names)
            for reason in reasons + tuple(sorted(active - set(reasons))):
                out.add("gpu_clock_event_reason_active", ids + (reason,), reason in active)
        out.add("gpu_temperature_celsius", ids, g.temperature_c)
        out.add("gpu_power_usage_watts", ids, g.power_w)
        out.add("gpu_power_limit_watts", ids, g.power_limit_w)
        out.add("gpu_pcie_current_link_generation", ids, g.pcie_gen_current)
        out.add("gpu_pcie_max_link_generation", ids, g.pcie_gen_max)
        out.add("gpu_pcie_device_max_link_generation", ids, g.pcie_gen_device_max)
        out.add("gpu_pcie_current_link_width", ids, g.pcie_width_current)
        out.add("gpu_pcie_max_link_width", ids, g.pcie_width_max)
        out.add("gpu_pcie_replay_errors", ids, g.pcie_replay_counter)
        if g.fabric_state is not None:
            for state in FABRIC_STATES + ((g.fabric_state,) if g.fabric_state not in FABRIC_STATES else ()):
                out.add("gpu_fabric_state", ids + (state,), state == g.fabric_state)
        if g.recovery_action is not None:
            extra = (g.recovery_action,) if g.recovery_action not in RECOVERY_ACTIONS else ()
            for action in RECOVERY_ACTIONS + extra:
                out.add("gpu_recovery_action", ids + (action,), action == g.recovery_action)
    # XIDs: per GPU by bus id; records naming a bus id NVML does not list keep that bus id
    for (bdf, code), count in sorted(_xid_counts(cycle).items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        g = by_bdf.get(normalize_bdf(bdf))
        ids = _gpu_ids(g) if g is not None else (None, None, dcgm_bus_id(bdf))
        out.add("gpu_xid_errors", ids + (code,), count)
    # NVLinks
    for g in gpus:
        ids = _gpu_ids(g)
        for link in sorted(g.nvlinks, key=lambda nl: nl.link):
            lid = ids + (link.link,)
            out.add("nvlink_up", lid, link.active)
            peer = by_bdf.get(normalize_bdf(link.remote_bus_id)) if link.remote_bus_id else None
            peer_label = f"GPU{peer.index}" if peer is not None else None
            if link.remote_bus_id or link.version is not None or link.remote_device_type:
                out.add("nvlink_info", lid + (link.version, dcgm_bus_id(link.remote_bus_id),
                                              link.remote_device_type, peer_label), 1)
            for typ, attr in NVLINK_ERRORS:
                out.add("nvlink_errors", lid + (typ,), getattr(link, attr))
            out.add("nvlink_transmit_bytes", lid, link.tx_bytes)
            out.add("nvlink_receive_bytes", lid, link.rx_bytes)


def _pcie(out: _Families, pcie: Any) -> None:
    devices = {d.bdf: d for d in getattr(pcie, "devices", ()) or ()}
    endpoints = [d for d in devices.values() if d.kind in ("gpu", "nic", "nvswitch")]
    serves: dict[str, set[str]] = {}
    for ep in endpoints:
        for bdf in tuple(ep.path) + (ep.bdf,):
            serves.setdefault(bdf, set()).add(ep.bdf)
    for bdf in sorted(serves):
        d = devices.get(bdf)
        if d is None:
            continue
        ids = (d.bdf, d.kind)
        out.add("pcie_device_info", ids + (d.vendor_id, d.device_id, d.driver, d.parent, d.numa_node,
                                           ",".join(sorted(serves[bdf]))), 1)
        out.add("pcie_current_link_transfers_per_second", ids, _gts(d.current_link_speed_gts))
        out.add("pcie_max_link_transfers_per_second", ids, _gts(d.max_link_speed_gts))
        out.add("pcie_current_link_width", ids, d.current_link_width)
        out.add("pcie_max_link_width", ids, d.max_link_width)
        for severity, counters in (("correctable", d.aer_correctable), ("nonfatal", d.aer_nonfatal),
                                   ("fatal", d.aer_fatal)):
            if counters is None:
                continue
            kinds = {k: v for k, v in counters.items() if not k.startswith("TOTAL_")}
            totals = [v for k, v in counters.items() if k.startswith("TOTAL_")]
            out.add("pcie_aer_errors", ids + (severity,), totals[0] if totals else sum(kinds.values()))
            for name in sorted(kinds):
                if kinds[name]:
                    out.add("pcie_aer_error_kinds", ids + (severity, name), kinds[name])
        if d.acs_ctrl is not None:
            out.add("pcie_acs_request_redirect_enabled", ids, "ReqRedir" in d.acs_enabled)


def _gts(gts: float | None) -> float | None:
    return None if gts is None else gts * 1e9


def _nearest_gpus(topology: Topology | None) -> dict[str, list[tuple[str, str]]]:
    """NIC label -> the GPUs it serves (those for which it is at their best level), with that level.

    What :meth:`Topology.gpus_near_nic` answers for one NIC, for all NICs at once: each GPU's
    levels to every NIC are computed once (GPUs x NICs), where asking ``gpus_near_nic`` per NIC
    recomputed every GPU's for each NIC, and rendering grew with the cube of the node (1.7 s at
    64 GPUs, ``bench/bench_render.py``).
    """
    served: dict[str, list[tuple[str, str]]] = {}
    if topology is None:
        return served
    for g in topology.gpus():
        near = topology.nearest_nics(g.label)
        if not near or near[0][1] == UNKNOWN:
            continue
        best = topology.level_rank(near[0][1])
        for nic, level in near:
            if topology.level_rank(level) == best:
                served.setdefault(nic, []).append((g.label, level))
    return served


def _near(topology: Topology | None, nic: str, served: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str]]:
    if topology is None:
        return []
    if not topology.has_device(nic):  # a NIC the topology does not know serves no GPU we can name
        return []
    return list(served.get(topology.label(topology.node_id(nic)), ()))


def _infiniband(out: _Families, ib: Any, topology: Topology | None, nvml: Any) -> None:
    by_index = {g.index: g for g in getattr(nvml, "gpus", ()) or ()}
    topo_gpus = {}
    if topology is not None:
        topo_gpus = {g.label: g for g in topology.gpus()}
    served = _nearest_gpus(topology) if getattr(ib, "devices", None) else {}
    for dev in sorted(getattr(ib, "devices", ()) or (), key=lambda d: _natural(d.name)):
        near_levels = dict(_near(topology, dev.name, served))
        near = list(near_levels)
        for port in sorted(dev.ports, key=lambda p: p.port):
            ids = (dev.name, port.port)
            out.add("infiniband_port_info", ids + (port.link_layer, dcgm_bus_id(dev.pci_bdf), ",".join(dev.netdevs),
                                                   dev.hca_type, dev.fw_ver, ",".join(near)), 1)
            out.add("infiniband_port_state_id", ids, port.state_code)
            out.add("infiniband_port_physical_state_id", ids, port.phys_state_code)
            out.add("infiniband_port_rate_bytes_per_second", ids,
                    None if port.rate_gbit_s is None else port.rate_gbit_s * 1e9 / 8)
            out.add("infiniband_port_link_width", ids, port.width)
            counters = port.counters or {}
            for raw, (name, factor) in IB_NAMED.items():
                if counters.get(raw) is not None:
                    out.add(name, ids, counters[raw] * factor)
            for name in sorted(counters):
                if name not in IB_NAMED:
                    out.add("infiniband_port_stats", ids + (name,), counters[name])
            hw = port.hw_counters or {}
            for name in sorted(hw):
                if name not in IB_HW_NOT_COUNTERS:
                    out.add("infiniband_port_hw_stats", ids + (name,), hw[name])
        for label in sorted(near, key=_natural):
            tg = topo_gpus.get(label)
            g = by_index.get(tg.index) if tg is not None else None
            gid = _gpu_ids(g) if g is not None else (
                (tg.index, tg.uuid, dcgm_bus_id(tg.bdf)) if tg is not None else (None, None, None))
            level = near_levels[label]
            out.add("infiniband_nearest_gpu_info", (dev.name,) + gid + (level,), 1)


def _check_labels(f: Finding) -> tuple:
    c = f.component
    return (f.check, c.name, c.kind, c.gpu, c.uuid, c.device, c.port)


def _checks(out: _Families, findings: tuple[Finding, ...] | None) -> None:
    if findings is None:
        return
    # one series per (check, component): when a check reports a component twice, the worst wins
    worst: dict[tuple, str] = {}
    for f in findings:
        if f.status == WAIVED:
            continue  # ccdiag_finding_waived carries it, with the status it was judged with
        key = tuple("" if v is None else str(v) for v in _check_labels(f))
        if key not in worst or S.SEVERITY[f.status] > S.SEVERITY[worst[key]]:
            worst[key] = f.status
    for key in sorted(worst):
        out.add("check_severity", key, S.SEVERITY[worst[key]])
    counts = {s: 0 for s in STATUSES}
    for f in findings:
        counts[f.status] = counts.get(f.status, 0) + 1
    for status in sorted(counts):
        out.add("findings", (status,), counts[status])
    out.add("verdict_severity", (), S.SEVERITY[verdict_status(findings)])
    roots = [f for f in findings if not f.caused_by and f.status in ("fail", "warn", "unknown")]
    acted: dict[tuple, int] = {}
    for f in roots:
        key = tuple("" if v is None else str(v) for v in _check_labels(f))
        acted[key] = max(acted.get(key, 0), RANK[action_of(f)])
    for key in sorted(acted):
        out.add("check_action", key, acted[key])
    node = worst_action(action_of(f) for f in roots)
    out.add("node_action", (node,), RANK[node])
    _roots(out, findings)
    _waived(out, findings)


def _waived(out: _Families, findings: tuple[Finding, ...]) -> None:
    """``ccdiag_finding_waived`` (the status each waived finding was judged with, and who waived it)
    and ``ccdiag_finding_waiver_lapse_timestamp_seconds`` (when its waiver lapses: an alert warns
    ahead of it). Nothing when no finding is waived."""
    judged: dict[tuple, int] = {}
    lapses: dict[tuple, float] = {}
    for f in findings:
        if f.status != WAIVED or not f.waived:
            continue
        labels = tuple("" if v is None else str(v) for v in _check_labels(f))
        sev = S.SEVERITY.get(f.waived.get("status", ""), S.SEVERITY["fail"])
        key = labels + (str(f.waived.get("by") or ""),)
        judged[key] = max(judged.get(key, 0), sev)
        at = f.waived.get("lapses_at")
        if isinstance(at, (int, float)):
            lapses[labels] = min(lapses.get(labels, float(at)), float(at))
    for key in sorted(judged):
        out.add("finding_waived", key, judged[key])
    for labels in sorted(lapses):
        out.add("finding_waiver_lapse_timestamp_seconds", labels, lapses[labels])


#: statuses that carry a root: what an operator acts on, and the skips a root cause explains
_ROOTED = ("warn", "unknown", "fail")


def _roots(out: _Families, findings: tuple[Finding, ...]) -> None:
    """``ccdiag_finding_root``: every finding not passing, with the root cause it follows from
    (``caused_by``, linked by the check run; a root names itself). Alertmanager groups by ``root``,
    so one fallen GPU raises one notification, not one per check it made fail."""
    worst: dict[tuple, tuple[int, str]] = {}
    for f in findings:
        if f.status in ("pass", WAIVED) or (f.status not in _ROOTED and not f.caused_by):
            continue  # a passing XID folded under its event (45 after 149) is no alert
        labels = tuple("" if v is None else str(v) for v in (*_check_labels(f), f.component.bdf))
        sev = S.SEVERITY[f.status]
        if labels not in worst or sev > worst[labels][0]:
            worst[labels] = (sev, f.caused_by or finding_key(f))
    for labels in sorted(worst):
        sev, root = worst[labels]
        out.add("finding_root", labels + (root,), sev)


def families(cycle: Cycle, *, interval_s: float | None = None, cycles_total: int | None = None,
             include: Callable[[str], bool] | None = None) -> list[Metric]:
    """Every family of ``cycle`` except the scrape-time age (see :func:`age_family`)."""
    out = _Families()
    _self_metrics(out, cycle, interval_s, cycles_total)
    nvml = _with_lost_ids(cycle, cycle.data.get(PROBE_NVML))
    _system(out, cycle.data.get(PROBE_SYSTEM), nvml)
    _gpus(out, cycle, nvml)
    _pcie(out, cycle.data.get(PROBE_PCIE))
    _infiniband(out, cycle.data.get(PROBE_INFINIBAND), cycle.topology, nvml)
    _checks(out, cycle.findings)
    fams = out.ordered()
    return [f for f in fams if include(f.name)] if include else fams


def age_family(cycle: Cycle, now: float) -> Metric:
    """``ccdiag_collection_age_seconds``, computed when a scrape asks."""
    sp = S.BY_NAME["ccdiag_collection_age_seconds"]
    return GaugeMetricFamily(sp.name, sp.help, value=max(0.0, now - cycle.completed_at))
