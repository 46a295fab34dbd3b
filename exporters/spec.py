"""Every metric ccdiag exports, declared once: name, type, help text and label names.

The builders in :mod:`ccdiag.exporters.metrics` create their families from these declarations only,
so the exposition, ``exporters/metrics.json`` (read by dashboards and alert rules) and the docs
cannot drift apart; a test regenerates the JSON and compares it.

Conventions (Prometheus naming): base units in the name (``_bytes``, ``_seconds``, ``_celsius``,
``_watts``, ``_transfers_per_second``), counters end in ``_total``, string facts live in ``_info``
gauges whose value is always 1, and a value that could not be read is *omitted*, never exported as
-1 or 0. Label names that other exporters use mean the same here, so series join: ``gpu``, ``UUID``,
``pci_bus_id`` (NVML spelling ``00000000:18:00.0``) as in dcgm-exporter, and ``device``/``port`` as
in node_exporter's InfiniBand collector. dcgm-exporter's ``modelName`` is spelled ``model_name`` on
``ccdiag_gpu_info`` because ``promtool check metrics`` rejects camelCase label names; join on ``UUID``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ccdiag.core.actions import ACTIONS

GAUGE = "gauge"
COUNTER = "counter"

#: labels on every per-GPU series; they join with dcgm-exporter's series of the same GPU
GPU = ("gpu", "UUID", "pci_bus_id")
#: labels on every per-IB-port series; they join with node_exporter's node_infiniband_* series
IB_PORT = ("device", "port")
#: a PCIe function in sysfs spelling ("0000:18:00.0") and what it is (gpu, nic, bridge, ...)
PCIE = ("bdf", "kind")
#: what a finding is about; empty where it does not apply (an empty label equals an absent one)
CHECK = ("check", "component", "kind", "gpu", "UUID", "device", "port")

#: numeric encoding of a finding status in ``ccdiag_check_severity``: larger is worse, so ``max()``
#: over any set of series is their worst status
SEVERITY = {"pass": 0, "skip": 1, "warn": 2, "unknown": 3, "fail": 4}
SEVERITY_HELP = "0 pass, 1 skip, 2 warn, 3 unknown, 4 fail"

#: numeric encoding of an action (ccdiag/core/actions.py), least disruptive first, so ``max()`` works too
ACTION_HELP = ", ".join(f"{i} {a}" for i, a in enumerate(ACTIONS))

PROBE_STATUSES = ("ok", "partial", "unavailable", "failed", "timeout")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as exposed; counters include the _total suffix
    type: str
    help: str
    labels: tuple[str, ...] = ()

    @property
    def family_name(self) -> str:
        """The name prometheus_client wants (it appends ``_total`` to counters itself)."""
        return self.name[: -len("_total")] if self.type == COUNTER else self.name

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "help": self.help, "labels": list(self.labels)}


def _g(name: str, help_: str, labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec("ccdiag_" + name, GAUGE, help_, labels)


def _c(name: str, help_: str, labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec("ccdiag_" + name + "_total", COUNTER, help_, labels)


SPECS: tuple[MetricSpec, ...] = (
    # -- the exporter itself ----------------------------------------------------------------------
    _g("build_info", "ccdiag version and the Python running it; value is always 1.",
       ("version", "python_version")),
    _g("last_collection_timestamp_seconds", "Wall-clock time the served collection cycle completed."),
    _g("collection_age_seconds", "Seconds between the served collection cycle's completion and this scrape."),
    _g("collection_duration_seconds", "Seconds the served collection cycle took (probes, topology and checks)."),
    _g("collection_interval_seconds", "Configured seconds between the starts of two collection cycles."),
    _c("collection_cycles", "Collection cycles completed since the exporter started."),
    _g("collection_stage_success", "Whether a stage after the probes worked in the served cycle (1) or not (0).",
       ("stage",)),
    _g("probe_success", "Whether the probe delivered data in the served cycle (1: ok, partial, or its subsystem "
       "is absent; 0: it failed or timed out).", ("probe",)),
    _g("probe_status", "Outcome of the probe in the served cycle; 1 for the current status, 0 for the others.",
       ("probe", "status")),
    _g("probe_duration_seconds", "Seconds the probe ran in the served cycle.", ("probe",)),
    _g("probe_last_success_timestamp_seconds", "Wall-clock time the probe last delivered data.", ("probe",)),
    _g("probe_data_stale", "1 when this probe failed in the served cycle and its metrics come from its last good "
       "cycle; 0 when they are fresh.", ("probe",)),
    _g("probe_read_errors", "Files, devices or calls the probe could not read in its served data.", ("probe",)),
    # -- node -------------------------------------------------------------------------------------
    _g("nvidia_driver_info", "NVIDIA driver and CUDA driver API versions from NVML; value is always 1.",
       ("driver_version", "cuda_driver_version")),
    _g("nvml_devices", "GPUs NVML reports."),
    _g("system_info", "Kernel, OS and IOMMU mode of the node; value is always 1.",
       ("kernel", "os_release", "iommu")),
    _g("kernel_module_loaded", "Whether a kernel module that GPU or RDMA work depends on is loaded.", ("module",)),
    _g("fabric_manager_active", "Whether the nvidia-fabricmanager service is active (1) or not (0)."),
    _g("shm_size_bytes", "Size of /dev/shm (NCCL's shared-memory transport lives there)."),
    _g("memlock_limit_bytes", "Locked-memory limit (RLIMIT_MEMLOCK); omitted when unlimited.", ("limit",)),
    _g("memlock_unlimited", "Whether the locked-memory limit is unlimited (RDMA needs it large)."),
    # -- GPUs -------------------------------------------------------------------------------------
    _g("gpu_info", "Identity of a GPU; value is always 1.", GPU + ("model_name", "numa_node")),
    _g("gpu_up", "Whether NVML answers for this GPU (1) or reports it lost or hung (0).", GPU),
    _g("gpu_memory_total_bytes", "Framebuffer memory of the GPU.", GPU),
    _g("gpu_memory_used_bytes", "Framebuffer memory in use.", GPU),
    _g("gpu_compute_processes", "Compute processes running on the GPU.", GPU),
    _g("gpu_persistence_mode_enabled", "Whether persistence mode is on.", GPU),
    _g("gpu_mig_mode_enabled", "Whether MIG mode is currently on.", GPU),
    _g("gpu_ecc_mode_enabled", "Whether ECC is currently on.", GPU),
    _c("gpu_ecc_errors", "ECC errors; volatile since the last driver load, aggregate over the GPU's life.",
       GPU + ("type", "scope")),
    _c("gpu_retired_pages", "Framebuffer pages retired (pre-Ampere page retirement), by cause.", GPU + ("cause",)),
    _g("gpu_retired_pages_pending", "Whether a page retirement waits for the next driver reload.", GPU),
    _c("gpu_remapped_rows", "Memory rows remapped (Ampere and later), by error type.", GPU + ("type",)),
    _g("gpu_remapped_rows_pending", "Whether a row remap waits for a GPU reset.", GPU),
    _g("gpu_remapped_rows_failed", "Whether a row remap failed (the GPU needs service).", GPU),
    _c("gpu_xid_errors", "XID error records for this GPU in the kernel log, by XID code (counted from the "
       "kernel log buffer; the daemon keeps counting records that scroll out of it).", GPU + ("xid",)),
    _g("gpu_clock_event_reasons", "Raw bitmask of active clock event (throttle) reasons from NVML.", GPU),
    _g("gpu_clock_event_reason_active", "Whether a clock event (throttle) reason is active.", GPU + ("reason",)),
    _g("gpu_temperature_celsius", "GPU core temperature.", GPU),
    _g("gpu_power_usage_watts", "Power draw of the GPU board.", GPU),
    _g("gpu_power_limit_watts", "Enforced power limit of the GPU board.", GPU),
    _g("gpu_pcie_current_link_generation", "PCIe generation the GPU's link runs at now (it drops at idle on "
       "some GPUs; compare under load).", GPU),
    _g("gpu_pcie_max_link_generation", "Highest PCIe generation the GPU and its slot can both run.", GPU),
    _g("gpu_pcie_device_max_link_generation", "Highest PCIe generation the GPU alone supports.", GPU),
    _g("gpu_pcie_current_link_width", "PCIe lanes the GPU's link runs with now.", GPU),
    _g("gpu_pcie_max_link_width", "PCIe lanes the GPU's link can run with.", GPU),
    _c("gpu_pcie_replay_errors", "PCIe replays (retransmissions) the GPU counted.", GPU),
    _g("gpu_fabric_state", "NVLink fabric registration state (NVSwitch systems); 1 for the current state.",
       GPU + ("state",)),
    _g("gpu_recovery_action", "Recovery action the driver asks for; 1 for the current action.",
       GPU + ("action",)),
    # -- NVLink -----------------------------------------------------------------------------------
    _g("nvlink_up", "Whether the NVLink is active.", GPU + ("link",)),
    _g("nvlink_info", "What an NVLink connects to; value is always 1.",
       GPU + ("link", "version", "remote_pci_bus_id", "remote_type", "peer")),
    _c("nvlink_errors", "NVLink error counters, by type (crc_flit, crc_data, replay, recovery).",
       GPU + ("link", "type")),
    _c("nvlink_transmit_bytes", "Data bytes the GPU sent over the NVLink (NVML's lifetime data counter, protocol "
       "overhead not included; counted in KiB by NVML).", GPU + ("link",)),
    _c("nvlink_receive_bytes", "Data bytes the GPU received over the NVLink (NVML's lifetime data counter, "
       "protocol overhead not included; counted in KiB by NVML).", GPU + ("link",)),
    # -- PCIe links -------------------------------------------------------------------------------
    _g("pcie_device_info", "A PCIe function on the path of a GPU, NIC or NVSwitch; value is always 1.",
       PCIE + ("vendor_id", "device_id", "driver", "parent", "numa_node", "endpoints")),
    _g("pcie_current_link_transfers_per_second", "Speed the link above this function runs at now.", PCIE),
    _g("pcie_max_link_transfers_per_second", "Highest speed the link above this function supports.", PCIE),
    _g("pcie_current_link_width", "Lanes the link above this function runs with now.", PCIE),
    _g("pcie_max_link_width", "Lanes the link above this function supports.", PCIE),
    _c("pcie_aer_errors", "PCIe Advanced Error Reporting errors, by severity (correctable, nonfatal, fatal).",
       PCIE + ("severity",)),
    _c("pcie_aer_error_kinds", "PCIe AER errors by error name; a series appears once its count is non-zero "
       "(about 40 names per function would otherwise be exported as zeros).", PCIE + ("severity", "error")),
    _g("pcie_acs_request_redirect_enabled", "Whether ACS request redirect is on at this bridge (it sends GPU "
       "peer-to-peer traffic up to the root complex).", PCIE),
    # -- InfiniBand / RoCE ------------------------------------------------------------------------
    _g("infiniband_port_info", "An RDMA port and the GPUs it serves (nearest by PCIe topology); value is "
       "always 1.", IB_PORT + ("link_layer", "pci_bus_id", "netdev", "hca_type", "fw_ver", "gpus")),
    _g("infiniband_port_state_id", "Logical port state (1: down, 2: init, 3: armed, 4: active, 5: active "
       "defer).", IB_PORT),
    _g("infiniband_port_physical_state_id", "Physical port state (1: sleep, 2: polling, 3: disabled, 4: port "
       "configuration training, 5: link up, 6: link error recovery, 7: phy test).", IB_PORT),
    _g("infiniband_port_rate_bytes_per_second", "Data rate the port trained at.", IB_PORT),
    _g("infiniband_port_link_width", "Lanes the port trained with.", IB_PORT),
    _c("infiniband_port_transmitted_bytes", "Data octets transmitted on all lanes.", IB_PORT),
    _c("infiniband_port_received_bytes", "Data octets received on all lanes.", IB_PORT),
    _c("infiniband_port_transmitted_packets", "Packets transmitted.", IB_PORT),
    _c("infiniband_port_received_packets", "Packets received.", IB_PORT),
    _c("infiniband_port_stats", "Other port counters from sysfs ports/N/counters, by file name, in the "
       "kernel's units.", IB_PORT + ("stat",)),
    _c("infiniband_port_hw_stats", "Driver counters from sysfs ports/N/hw_counters, by file name.",
       IB_PORT + ("stat",)),
    _g("infiniband_nearest_gpu_info", "A GPU this RDMA device serves, with the PCIe path level between them "
       "(PIX, PXB, PHB, NODE, SYS); value is always 1.", ("device",) + GPU + ("path",)),
    # -- checks -----------------------------------------------------------------------------------
    _g("check_severity", f"Status of one check on one component as a number ({SEVERITY_HELP}).", CHECK),
    _g("findings", "Findings of the served cycle, by status.", ("status",)),
    _g("verdict_severity", f"The served cycle's verdict: its worst finding status, skipped checks not counted "
       f"(a healthy node is 0) ({SEVERITY_HELP})."),
    _g("finding_root", f"The root cause a finding that is not passing follows from, as the root's check|component "
       f"(a root names itself), so one cause groups into one alert; value: the finding's status "
       f"({SEVERITY_HELP}); bdf joins it to the ccdiag_pcie_* series of the same function.", CHECK + ("bdf", "root")),
    _g("check_action", f"The action one root problem (fail, warn or unknown, not a consequence of another) asks "
       f"for ({ACTION_HELP}); an escalation ladder climbs these values.", CHECK),
    _g("node_action", f"The node's action: the most disruptive among its root problems ({ACTION_HELP}); the "
       "action label names it.", ("action",)),
    _g("finding_waived", f"A problem the policy waives until a date (it counts in no verdict, severity or root "
       f"series); value: the status it was judged with ({SEVERITY_HELP}); by: who waived it.", CHECK + ("by",)),
    _g("finding_waiver_lapse_timestamp_seconds", "When the waiver of this waived finding lapses (the problem then "
       "counts again); alert ahead of it with `- time() < 3 * 86400`.", CHECK),
    # -- the health loop (ccdiag health run: active checks on an idle node, ccdiag-health.prom) ----------
    _g("last_pass_timestamp_seconds", "Wall-clock time the last active check on this node (idle, ccdiag health "
       "run) passed."),
    _g("verdict_valid_until_seconds", "Until when the health loop's verdict holds: its last pass plus the validity "
       "window (a pre-job check may reuse the pass until then); the time of the failure or lost verdict that ended "
       "it otherwise."),
    _g("health_last_run_timestamp_seconds", "Wall-clock time the health loop last ran, whatever its outcome."),
    _g("health_last_run_outcome", "Outcome of the health loop's last run (pass, fail, unknown, error, yielded to a "
       "job, busy, not_due); 1 for the current outcome, 0 for the others.", ("outcome",)),
    _c("health_runs", "Runs of the health loop, by outcome.", ("outcome",)),
    _g("health_drain_held", "1 when the node failed and was left in service because ccdiag's drain cap was "
       "reached (reported instead of drained); 0 otherwise."),
    _g("health_fleet_nodes", "Nodes of the fleet as the scheduler counted them at the last drain decision."),
    _g("health_fleet_nodes_out", "Nodes ccdiag held out of service (Slurm drains with a ccdiag reason, Kubernetes "
       "condition False) at the last drain decision."),
    _g("health_fleet_nodes_out_limit", "The most nodes ccdiag may hold out at once (the drain cap) at the last "
       "drain decision."),
    _g("health_ladder_action", f"The escalation ladder's rung for one failing root cause ({ACTION_HELP}); it climbs "
       "when the root fails again after its rung's step.", ("check", "component", "root")),
    _c("remediation_steps", "Steps of the escalation ladder taken on this node: the drain itself and the "
       "operator's remediation command per rung, by outcome (ok, failed, timeout, not_started, report_only, held).",
       ("action", "outcome")),
    _g("remediation_last_step_timestamp_seconds", "Wall-clock time of the last step taken for this rung.",
       ("action",)),
)

BY_NAME = {s.name: s for s in SPECS}


def metrics_json() -> str:
    """The metric list as committed in ``exporters/metrics.json``."""
    return json.dumps({"metrics": [s.to_json() for s in SPECS]}, indent=2) + "\n"
