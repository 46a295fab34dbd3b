"""GPU health checks on named scenarios (tests/scenarios_gpu.py, synthesized observations)."""

from __future__ import annotations

import dataclasses

import pytest

from ccdiag.checks import run_checks
from ccdiag.core.readings import ReadError
from ccdiag.inputs.policy import Policy
from ccdiag.probes.registry import ProbeRun
import scenarios_gpu as S

MINE = ("gpu.", "probe.", "xid.", "nvlink.")


def run(ctx, prefix):
    return [f for f in run_checks(ctx, only=[prefix]) if f.check.startswith(prefix)]


def only(findings, status):
    return [f for f in findings if f.status == status]


def one(findings, status):
    got = only(findings, status)
    assert len(got) == 1, [(f.check, f.status, f.summary) for f in findings]
    return got[0]


# -- healthy ---------------------------------------------------------------------------------------

def test_healthy_node_has_no_warn_or_fail():
    findings = run_checks(S.healthy(), only=MINE)
    bad = [(f.check, f.status, f.component.name, f.summary) for f in findings
           if f.status in ("warn", "fail", "unknown")]
    assert bad == []
    ids = {f.check for f in findings}
    # every check id of this area answered
    assert {"gpu.count", "gpu.lost", "gpu.ecc", "gpu.remapped_rows", "gpu.recovery_action", "gpu.clocks",
            "gpu.persistence_mode", "gpu.mig", "gpu.processes", "gpu.temperature", "gpu.fabric_manager",
            "gpu.driver_version", "gpu.driver_unavailable", "xid.recent", "nvlink.down", "nvlink.errors",
            "probe.timeout", "probe.failed"} <= ids


def test_healthy_node_with_unchanged_window_has_no_warn_or_fail():
    runs = S.healthy_runs()
    findings = run_checks(S.windowed(runs, runs, 10.0), only=MINE)
    assert [f for f in findings if f.status in ("warn", "fail", "unknown")] == []


def test_per_gpu_pass_names_gpu_uuid_and_bdf():
    f = [x for x in run(S.healthy(), "gpu.ecc") if x.component.gpu == 2][0]
    assert f.status == "pass"
    assert (f.component.kind, f.component.name, f.component.uuid, f.component.bdf) == (
        "gpu", "GPU2", S.uuid(2), "0000:3a:00.0")


# -- presence / driver -------------------------------------------------------------------------------

def test_gpu_gone_names_the_bdf_pci_still_sees():
    findings = run(S.gpu_gone(3), "gpu.count")
    fails = only(findings, "fail")
    pci = [f for f in fails if f.component.bdf == "0000:5d:00.0"]
    assert len(pci) == 1 and pci[0].component.gpu is None and pci[0].component.kind == "gpu"
    assert "0000:5d:00.0" in pci[0].summary
    policy = [f for f in fails if f.component.kind == "node"]
    assert len(policy) == 1 and "policy expects 8" in policy[0].summary
    assert policy[0].expected == "8 GPUs"


def test_gpu_seen_by_nvml_but_not_pci_fails():
    runs = S.healthy_runs()
    runs["pcie"] = S.ok("pcie", S.pcie_obs([S.bus_id(i) for i in range(7)]))
    f = one(run(S.context(runs), "gpu.count"), "fail")
    assert (f.component.gpu, f.component.bdf) == (7, "0000:db:00.0")


def test_gpu_bound_to_vfio_only_warns():
    runs = S.healthy_runs()
    devs = list(runs["pcie"].data.devices)
    extra = dataclasses.replace(devs[0], bdf="0000:e1:00.0", driver="vfio-pci")
    runs["pcie"] = S.ok("pcie", dataclasses.replace(runs["pcie"].data, devices=tuple(devs + [extra])))
    f = one(run(S.context(runs), "gpu.count"), "warn")
    assert f.component.bdf == "0000:e1:00.0" and "vfio-pci" in f.summary


def test_container_restricted_visibility_is_not_a_missing_gpu():
    ctx = S.gpu_gone(3)
    ctx = dataclasses.replace(ctx, env={"NVIDIA_VISIBLE_DEVICES": "0,1,2,4,5,6,7"}, policy=Policy())
    f = one(run(ctx, "gpu.count"), "pass")
    assert "NVIDIA_VISIBLE_DEVICES" in f.summary


def test_policy_count_more_gpus_only_warns():
    f = one(run(S.context(S.healthy_runs(), policy=Policy(expected_gpu_count=4)), "gpu.count"), "warn")
    assert f.component.kind == "node" and f.expected == "4 GPUs"


def test_gpu_lost_fails_with_reboot_remedy_and_other_checks_say_unknown():
    ctx = S.gpu_lost(5)
    f = one(run(ctx, "gpu.lost"), "fail")
    assert (f.component.gpu, f.component.uuid, f.component.bdf) == (5, S.uuid(5), "0000:ab:00.0")
    assert "reboot" in f.remedy.lower()
    assert f.evidence[0].source.startswith("nvmlDeviceGetTotalEccErrors(5")
    ecc = [x for x in run(ctx, "gpu.ecc") if x.component.gpu == 5]
    assert [x.status for x in ecc] == ["unknown"]


def test_gpu_hung_asks_for_reset():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 1, failed="timeout"))
    f = one(run(ctx, "gpu.lost"), "fail")
    assert f.component.gpu == 1 and "nvidia-smi -r -i 1" in f.remedy


def test_driver_unavailable_with_gpus_on_pci_fails():
    runs = S.healthy_runs()
    runs["nvml"] = ProbeRun("nvml", "unavailable", 0.01, None, "NVML: driver not loaded [driver_missing]")
    ctx = S.context(runs)
    f = one(run(ctx, "gpu.driver_unavailable"), "fail")
    assert "8 NVIDIA GPU" in f.summary
    # every other GPU check says it could not judge (never pass)
    others = run(ctx, "gpu.ecc")
    assert [x.status for x in others] == ["unknown"]


def test_no_gpu_node_skips_cleanly():
    runs = {"pcie": S.ok("pcie", S.pcie_obs([], switches=())),
            "nvml": ProbeRun("nvml", "unavailable", 0.01, None, "NVML library not found"),
            "kmsg": S.ok("kmsg", S.kmsg_obs())}
    findings = run_checks(S.context(runs), only=("gpu.", "nvlink.", "xid."))
    assert {f.status for f in findings} == {"skip"}
    f = [x for x in findings if x.check == "gpu.driver_unavailable"][0]
    assert "No NVIDIA GPU" in f.summary


def test_no_gpu_but_policy_expects_some_fails():
    runs = {"nvml": ProbeRun("nvml", "unavailable", 0.01, None, "NVML library not found")}
    f = one(run(S.context(runs, policy=Policy(expected_gpu_count=8)), "gpu.driver_unavailable"), "fail")
    assert f.expected == "8 GPUs"


def test_nvml_timeout_is_a_driver_failure_and_a_probe_timeout():
    runs = S.healthy_runs()
    runs["nvml"] = ProbeRun("nvml", "timeout", 15.0, None, "probe nvml did not finish within 15.0s; abandoned")
    ctx = S.context(runs)
    assert one(run(ctx, "gpu.driver_unavailable"), "fail").component.kind == "node"
    t = one(run(ctx, "probe.timeout"), "unknown")
    assert (t.component.kind, t.component.name) == ("probe", "nvml")
    assert "15.0s" in " ".join(str(e.value) for e in t.evidence)


def test_probe_failure_is_unknown_naming_probe_and_error():
    runs = S.healthy_runs()
    runs["pcie"] = ProbeRun("pcie", "failed", 0.2, None, "KeyError: 'class'")
    f = one(run(S.context(runs), "probe.failed"), "unknown")
    assert f.component.name == "pcie" and "KeyError" in f.summary


def test_probe_timeout_in_second_sample_is_reported():
    runs = S.healthy_runs()
    later = dict(runs)
    later["kmsg"] = ProbeRun("kmsg", "timeout", 5.0, None, "probe kmsg did not finish within 5.0s; abandoned")
    f = one(run(S.windowed(runs, later, 10.0), "probe.timeout"), "unknown")
    assert f.component.name == "kmsg" and "second sample" in f.summary


def test_driver_version_mismatch_fails():
    runs = S.healthy_runs(system=S.system_obs(nvidia_driver_version="570.124.06"))
    f = one(run(S.context(runs), "gpu.driver_version"), "fail")
    assert "570.133.20" in f.summary and "570.124.06" in f.summary
    assert {e.source for e in f.evidence} == {"nvmlSystemGetDriverVersion()", "/proc/driver/nvidia/version"}


# -- memory ---------------------------------------------------------------------------------------------

def test_volatile_uncorrected_ecc_fails():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 4, ecc_volatile_uncorrected=2, ecc_aggregate_uncorrected=2))
    f = one(run(ctx, "gpu.ecc"), "fail")
    assert (f.component.gpu, f.component.bdf) == (4, "0000:9a:00.0")
    assert any(e.source == "nvmlDeviceGetTotalEccErrors(4, 1, 0)" and e.value == 2 for e in f.evidence)


def test_aggregate_only_ecc_with_nothing_pending_passes_with_a_note():
    """Lifetime-only uncorrectable errors, repaired (no remap pending): history, so `--strict` does
    not fail the GPU for the rest of its life; a repair still pending warns."""
    ctx = S.context(S.with_gpu(S.healthy_runs(), 4, ecc_aggregate_uncorrected=2))
    f = next(f for f in run(ctx, "gpu.ecc") if f.component.gpu == 4)
    assert f.status == "pass" and "2 in its lifetime" in f.summary and f.details == {"lifetime_uncorrected": 2}
    ctx = S.context(S.with_gpu(S.healthy_runs(), 4, ecc_aggregate_uncorrected=2, remapped_rows_pending=True))
    f = one(run(ctx, "gpu.ecc"), "warn")
    assert f.component.gpu == 4 and "row remap pending" in f.summary


def test_ecc_rising_during_window_fails():
    before = S.healthy_runs()
    after = S.with_gpu(before, 0, ecc_volatile_uncorrected=1)
    f = one(run(S.windowed(before, after, 10.0), "gpu.ecc"), "fail")
    assert f.component.gpu == 0


def test_ecc_disabled_warns():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 6, ecc_mode_current=False))
    assert one(run(ctx, "gpu.ecc"), "warn").component.gpu == 6


def test_remapped_rows_pending_fails_with_reset_remedy():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 2, remapped_rows_pending=True, remapped_rows_uncorrectable=1))
    f = one(run(ctx, "gpu.remapped_rows"), "fail")
    assert (f.component.gpu, f.component.uuid, f.component.bdf) == (2, S.uuid(2), "0000:3a:00.0")
    assert "nvidia-smi -r -i 2" in f.remedy
    assert any(e.source == "nvmlDeviceGetRemappedRows(2)" and e.what == "pending" and e.value is True
               for e in f.evidence)


def test_remap_failure_fails_as_rma():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 2, remapped_rows_failure=True))
    assert "RMA" in one(run(ctx, "gpu.remapped_rows"), "fail").remedy


def test_many_uncorrectable_remaps_warn():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 2, remapped_rows_uncorrectable=512))
    assert one(run(ctx, "gpu.remapped_rows"), "warn").component.gpu == 2
    ctx = S.context(S.with_gpu(S.healthy_runs(), 2, remapped_rows_uncorrectable=511))
    assert only(run(ctx, "gpu.remapped_rows"), "warn") == []


PRE_AMPERE = dict(remapped_rows_pending=None, remapped_rows_failure=None, remapped_rows_correctable=None,
                  remapped_rows_uncorrectable=None)


@pytest.mark.parametrize("sbe,dbe,pending,status", [
    (0, 0, False, "pass"),
    (2, 1, True, "fail"),     # retirement pending: takes effect after a reset
    (40, 23, False, "fail"),  # 63 retired pages: DCGM limit
    (50, 12, True, "fail"),   # 62 + pending: table full (Azure)
    (0, 16, False, "warn"),   # DBE soft limit
])
def test_retired_pages_pre_ampere(sbe, dbe, pending, status):
    ctx = S.context(S.with_gpu(S.healthy_runs(), 1, retired_pages_sbe=sbe, retired_pages_dbe=dbe,
                               retired_pages_pending=pending, **PRE_AMPERE))
    f = [x for x in run(ctx, "gpu.remapped_rows") if x.component.gpu == 1][0]
    assert f.status == status


def test_memory_state_not_supported_skips_and_no_permission_is_unknown():
    runs = S.with_gpu(S.healthy_runs(), 0, errors=(ReadError("nvmlDeviceGetRemappedRows(0)", "not_supported"),),
                      **PRE_AMPERE)
    runs = S.with_gpu(runs, 1, errors=(ReadError("nvmlDeviceGetRemappedRows(1)", "no_permission", "denied"),),
                      **PRE_AMPERE)
    findings = {f.component.gpu: f for f in run(S.context(runs), "gpu.remapped_rows")}
    assert findings[0].status == "skip"
    assert findings[1].status == "unknown" and findings[1].evidence[0].source == "nvmlDeviceGetRemappedRows(1)"


# -- recovery action, clocks, temperature -------------------------------------------------------------

def test_recovery_action_not_none_fails_with_action():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 7, recovery_action="drain_and_reset"))
    f = one(run(ctx, "gpu.recovery_action"), "fail")
    assert f.component.gpu == 7 and "drain_and_reset" in f.summary and "nvidia-smi -r -i 7" in f.remedy


def test_recovery_action_unreported_skips():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 7, recovery_action=None))
    f = [x for x in run(ctx, "gpu.recovery_action") if x.component.gpu == 7][0]
    assert f.status == "skip"


def test_hw_slowdown_warns():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 3, clock_event_reasons=0x48,
                               clock_event_names=("hw_slowdown", "hw_thermal_slowdown"), temperature_c=91.0))
    f = one(run(ctx, "gpu.clocks"), "warn")
    assert f.component.gpu == 3 and "hw_thermal_slowdown" in f.summary


@pytest.mark.parametrize("mask,names", [
    (0x1, ("idle",)),
    (0x4, ("sw_power_cap",)),
    (0x5, ("idle", "sw_power_cap")),
    (0x12, ("applications_clocks_setting", "sync_boost")),
])
def test_idle_and_power_cap_are_not_faults(mask, names):
    ctx = S.context(S.with_gpu(S.healthy_runs(), 3, clock_event_reasons=mask, clock_event_names=names))
    assert only(run(ctx, "gpu.clocks"), "warn") == []


def test_clock_reasons_decoded_from_mask_when_names_missing():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 3, clock_event_reasons=0x80, clock_event_names=()))
    assert "hw_power_brake_slowdown" in one(run(ctx, "gpu.clocks"), "warn").summary


def test_slowdown_persisting_over_window_is_said():
    before = S.with_gpu(S.healthy_runs(), 3, clock_event_reasons=0x8, clock_event_names=("hw_slowdown",))
    f = one(run(S.windowed(before, before, 10.0), "gpu.clocks"), "warn")
    assert "still active" in f.summary


def test_temperature_above_policy_warns():
    """A model neither NVML nor the hardware catalogue has limits for: the policy's limit."""
    ctx = S.context(S.with_gpu(S.healthy_runs(), 0, temperature_c=88.0, name="NVIDIA L40S"))
    f = one(run(ctx, "gpu.temperature"), "warn")
    assert f.component.gpu == 0 and f.expected == "<= 85 C"
    ctx = S.context(S.with_gpu(S.healthy_runs(), 0, temperature_c=88.0, name="NVIDIA L40S"),
                    policy=Policy(temperature_warn_c=90.0))
    assert only(run(ctx, "gpu.temperature"), "warn") == []


def test_temperature_without_nvml_limits_uses_the_models_table_limits():
    ctx = S.context(S.with_gpu(S.healthy_runs(), 0, temperature_c=88.0), policy=Policy(temperature_warn_c=90.0))
    f = one(run(ctx, "gpu.temperature"), "warn")  # within 5 C of the H100's slowdown (89 C)
    assert "slowdown limit (89 C)" in f.summary and "hardware catalogue (H100-SXM5" in f.expected_source


# the GPU's own limits, as a Hopper GPU reports them (shutdown 92, slowdown 89, max operating 87,
# memory max 95 C: a public `nvidia-smi -q` of an H800); temperatures SYNTHESIZED
HOPPER_LIMITS = dict(temp_shutdown_c=92.0, temp_slowdown_c=89.0, temp_gpu_max_c=87.0, temp_mem_max_c=95.0)


@pytest.mark.parametrize("gpu_c,mem_c,status,words", [
    (60.0, 50.0, "pass", "slowdown at 89 C"),
    (85.0, 50.0, "warn", "within 5 C of its slowdown limit"),
    (89.0, 50.0, "fail", "reached its slowdown limit"),
    (91.0, 50.0, "fail", "at its shutdown limit"),
    (70.0, 95.0, "fail", "memory at 95 C has reached its limit"),
])
def test_temperature_is_judged_against_the_gpus_own_limits(gpu_c, mem_c, status, words):
    ctx = S.context(S.with_gpu(S.healthy_runs(), 0, temperature_c=gpu_c, memory_temperature_c=mem_c, **HOPPER_LIMITS))
    f = [x for x in run(ctx, "gpu.temperature") if x.component.gpu == 0][0]
    assert f.status == status and words in f.summary, f.summary
    assert "NVML temperature thresholds" in f.expected_source
    assert any(e.what == "slowdown C" and e.value == 89.0 for e in f.evidence)


def test_a_gpu_limit_overrides_the_generic_policy_limit():
    # 86 C is over the generic 85 C, but this GPU slows down only at 95: not a warning
    ctx = S.context(S.with_gpu(S.healthy_runs(), 0, temperature_c=86.0, temp_slowdown_c=95.0, temp_gpu_max_c=90.0))
    assert [x.status for x in run(ctx, "gpu.temperature") if x.component.gpu == 0] == ["pass"]


# -- configuration ----------------------------------------------------------------------------------------

def test_persistence_off_warns_unless_policy_relaxes_it():
    runs = S.with_gpu(S.healthy_runs(), 6, persistence_mode=False)
    f = one(run(S.context(runs), "gpu.persistence_mode"), "warn")
    assert (f.component.gpu, f.component.bdf) == (6, "0000:ba:00.0")
    relaxed = S.context(runs, policy=Policy(require_persistence_mode=False))
    assert only(run(relaxed, "gpu.persistence_mode"), "warn") == []


def test_mig_pending_and_mixed_modes_warn():
    runs = S.with_gpu(S.healthy_runs(), 0, mig_mode_pending=True)
    f = one(run(S.context(runs), "gpu.mig"), "warn")
    assert f.component.gpu == 0 and "pending" in f.summary
    runs = S.with_gpu(S.healthy_runs(), 0, mig_mode_current=True, mig_mode_pending=True)
    f = one(run(S.context(runs), "gpu.mig"), "warn")  # the odd GPU is named, not the node
    assert (f.component.kind, f.component.gpu, f.details) == ("gpu", 0, {"mig": True, "peers_mig": False})
    assert "7 peers have MIG off" in f.summary
    runs = S.healthy_runs(n=2, gpus=[S.h100(0, mig_mode_current=True, mig_mode_pending=True), S.h100(1)],
                          pcie=S.pcie_obs([S.bus_id(0), S.bus_id(1)]))
    f = one(run(S.context(runs), "gpu.mig"), "warn")  # split down the middle: no odd one, the node
    assert f.component.kind == "node" and "[0]" in f.summary


def test_mig_unsupported_everywhere_skips():
    gpus = [S.h100(i, mig_mode_current=None, mig_mode_pending=None) for i in range(2)]
    findings = run(S.context(S.healthy_runs(n=2, gpus=gpus, pcie=S.pcie_obs([S.bus_id(0), S.bus_id(1)]))), "gpu.mig")
    assert [f.status for f in findings] == ["skip"]


def test_compute_process_is_information_unless_the_policy_wants_idle_gpus():
    """During a job its processes are the job: pass, naming them. A prolog policy that asks for
    idle GPUs (require_idle_gpus) fails a leftover process."""
    from ccdiag.probes.nvml import ComputeProcess
    runs = S.with_gpu(S.healthy_runs(), 4, compute_processes=(ComputeProcess(4242, 1 << 30),))
    findings = run(S.context(runs), "gpu.processes")
    assert {f.status for f in findings} == {"pass"}
    busy = [f for f in findings if f.details.get("in_use")]
    assert [f.component.gpu for f in busy] == [4] and "4242" in busy[0].summary
    f = one(run(S.context(runs, policy=Policy(require_idle_gpus=True)), "gpu.processes"), "fail")
    assert f.component.gpu == 4 and "4242" in f.summary and f.details["pids"] == [4242]


def test_model_policy_mismatch_fails():
    ctx = S.context(S.healthy_runs(), policy=Policy(gpu_model="H200"))
    findings = run(ctx, "gpu.model")
    assert len(only(findings, "fail")) == 8
    ctx = S.context(S.healthy_runs(), policy=Policy(gpu_model="H100 80GB HBM3", source="/etc/ccdiag/policy.toml"))
    findings = run(ctx, "gpu.model")
    assert {f.status for f in findings} == {"pass"}
    assert findings[0].expected_source == "policy /etc/ccdiag/policy.toml"


# -- fabric manager -----------------------------------------------------------------------------------------

def test_fabric_manager_down_fails():
    gpus = [S.h100(i, fabric_state="not_started", fabric_status=None) for i in range(8)]
    runs = S.healthy_runs(gpus=gpus, system=S.system_obs(fabric_manager="inactive"))
    findings = run(S.context(runs), "gpu.fabric_manager")
    node = [f for f in findings if f.component.kind == "node"]
    assert [f.status for f in node] == ["fail"] and "inactive" in node[0].summary
    per_gpu = [f for f in findings if f.component.kind == "gpu"]
    assert len(per_gpu) == 8 and {f.status for f in per_gpu} == {"fail"}
    assert per_gpu[0].evidence[0].source == "nvmlDeviceGetGpuFabricInfoV(0)"


def test_fabric_manager_seen_inactive_in_container_with_gpus_registered_only_warns():
    runs = S.healthy_runs(system=S.system_obs(fabric_manager="inactive"))
    assert one(run(S.context(runs), "gpu.fabric_manager"), "warn").component.kind == "node"


def test_fabric_manager_unreadable_with_gpus_registered_passes():
    runs = S.healthy_runs(system=S.system_obs(fabric_manager=None))
    assert one(run(S.context(runs), "gpu.fabric_manager"), "pass")


def test_one_gpu_stuck_in_fabric_registration_fails():
    runs = S.with_gpu(S.healthy_runs(), 5, fabric_state="in_progress", fabric_status=None)
    f = one(run(S.context(runs), "gpu.fabric_manager"), "fail")
    assert f.component.gpu == 5


def test_fabric_registration_error_status_fails():
    runs = S.with_gpu(S.healthy_runs(), 5, fabric_status="nvml_error_999")
    assert one(run(S.context(runs), "gpu.fabric_manager"), "fail").component.gpu == 5



@pytest.mark.parametrize("service, registration, want", [
    ("activating", "in_progress", [("warn", "nvidia-fabricmanager")]),
    ("reloading", "not_started", [("warn", "nvidia-fabricmanager")]),
    ("activating", "completed", [("warn", "node")]),  # registered though the service restarts here
    ("failed", "completed", [("warn", "node")]),
    (None, None, [("unknown", "node")]),  # nothing to judge the fabric by
    (None, "completed", [("pass", "node")]),
    ("active", "completed", [("pass", "node")]),
])
def test_fabric_manager_service_state_against_the_gpus_registration(service, registration, want):
    """The service's state is judged with the GPUs' registration: starting warns, not active while
    every GPU is registered warns on the node, unreadable with no GPU reporting is unknown."""
    gpus = [S.h100(i, fabric_state=registration, fabric_status=None) for i in range(8)]
    runs = S.healthy_runs(gpus=gpus, system=S.system_obs(fabric_manager=service))
    node = [(f.status, f.component.name) for f in run(S.context(runs), "gpu.fabric_manager")
            if f.component.kind != "gpu"]
    assert node == want

def test_no_nvswitch_skips_fabric_manager():
    gpus = [S.h100(i, nvlinks=(), fabric_state="not_supported", fabric_status=None) for i in range(2)]
    runs = S.healthy_runs(n=2, gpus=gpus, pcie=S.pcie_obs([S.bus_id(0), S.bus_id(1)], switches=()),
                          system=S.system_obs(fabric_manager="inactive"))
    assert [f.status for f in run(S.context(runs), "gpu.fabric_manager")] == ["skip"]


def test_lost_gpu_without_bus_id_is_placed_by_pci_order():
    # NVML lost GPU6 before reading its PCI info; PCI still lists 0000:ba:00.0
    runs = S.with_gpu(S.healthy_runs(), 6, failed="gpu_lost", bus_id=None, uuid=None, nvlinks=())
    ctx = S.context(runs)
    f = one(run(ctx, "gpu.lost"), "fail")
    assert (f.component.gpu, f.component.bdf) == (6, "0000:ba:00.0")
    assert any(e.what == "bus id" and e.source.startswith("inferred") for e in f.evidence)
    # it is not reported as missing from NVML, but the count of usable GPUs is short
    count = run(ctx, "gpu.count")
    assert [(x.status, x.component.kind) for x in count] == [("fail", "node")]
    assert "7 of 8" in count[0].summary and "GPU6 gpu_lost" in count[0].summary


def test_bus_id_not_inferred_when_ambiguous():
    runs = S.with_gpu(S.healthy_runs(), 6, failed="gpu_lost", bus_id=None, nvlinks=())
    runs["pcie"] = S.ok("pcie", S.pcie_obs([S.bus_id(i) for i in range(8)] + ["0000:e1:00.0"]))
    ctx = S.context(runs)
    assert one(run(ctx, "gpu.lost"), "fail").component.bdf is None
    assert {f.component.bdf for f in only(run(ctx, "gpu.count"), "fail")} == {"0000:ba:00.0", "0000:e1:00.0", None}


def test_lost_gpu_is_short_of_the_policy_count():
    runs = S.with_gpu(S.healthy_runs(), 6, failed="gpu_lost")
    f = one(run(S.context(runs, policy=Policy(expected_gpu_count=8)), "gpu.count"), "fail")
    assert f.summary == "7 usable GPU(s) (GPU6 gpu_lost), policy expects 8."


def test_sram_over_its_threshold_needs_service_and_below_it_a_reset():
    """nvmlDeviceGetSramEccErrorStatus: bThresholdExceeded set is NVIDIA's RMA criterion (XID 48
    flow); uncorrectable SRAM errors below it warn; a driver without the call skips."""
    runs = S.with_gpu(S.healthy_runs(), 3, sram_threshold_exceeded=True, sram_uncorrected_volatile=2,
                      sram_uncorrected_aggregate=41)
    runs = S.with_gpu(runs, 5, sram_threshold_exceeded=False, sram_uncorrected_volatile=1, sram_uncorrected_aggregate=1)
    for i in (0, 1, 2, 4, 6, 7):
        runs = S.with_gpu(runs, i, sram_threshold_exceeded=False, sram_uncorrected_volatile=0,
                          sram_uncorrected_aggregate=0)
    found = {f.component.gpu: f for f in run(S.context(runs), "gpu.sram_ecc")}
    assert (found[3].status, found[3].action) == ("fail", "service") and "threshold" in found[3].summary
    assert (found[5].status, found[5].action) == ("warn", "reset_gpu")
    assert {found[i].status for i in (0, 1, 2, 4, 6, 7)} == {"pass"}
    assert {f.status for f in run(S.context(S.healthy_runs()), "gpu.sram_ecc")} == {"skip"}


def _gb200_runs(**system):
    gpus = [S.h100(i, name="NVIDIA GB200", fabric_cluster_uuid="00000000-0000-0000-0000-000000000001",
                   fabric_clique_id=0) for i in range(4)]
    runs = S.healthy_runs(n=4, gpus=gpus, pcie=S.pcie_obs([S.bus_id(i) for i in range(4)]))
    sysobs = dataclasses.replace(runs["system"].data, **system)
    return {**runs, "system": S.ok("system", sysobs)}


def test_imex_on_gb200_needs_its_service_and_a_channel():
    """NVIDIA's IMEX guide: the nvidia-imex service and /dev/nvidia-caps-imex-channels/channelN
    (created by the administrator, gone after a reboot) for memory shared across trays."""
    ok = _gb200_runs(imex_channel_device=True, imex_service="active", imex_channels=("channel0",))
    assert [f.status for f in run(S.context(ok), "gpu.imex")] == ["pass"]
    down = _gb200_runs(imex_channel_device=True, imex_service="inactive", imex_channels=())
    got = sorted((f.status, f.component.name) for f in run(S.context(down), "gpu.imex"))
    assert got == [("warn", "nvidia-caps-imex-channels"), ("warn", "nvidia-imex")]
    assert [f.status for f in run(S.context(S.healthy_runs()), "gpu.imex")] == ["skip"]  # H100: no IMEX
    assert [f.status for f in run(S.context(_gb200_runs()), "gpu.imex")] == ["skip"]  # not read


def test_fabric_manager_finding_follows_what_the_gpus_report():
    """Registration that finishes during the window counts as finished; with the service not
    readable (a container), GPUs that report registration are never said to report none."""
    sysobs = dataclasses.replace(S.system_obs(), fabric_manager=None)
    before = S.healthy_runs(system=sysobs)
    for i in range(8):
        before = S.with_gpu(before, i, fabric_state="in_progress", fabric_status=None)
    after = {"nvml": S.healthy_runs(system=sysobs)["nvml"]}
    found = run(S.context(before, later=after, window_s=10), "gpu.fabric_manager")
    assert [f.status for f in found] == ["pass"] and "every GPU (8)" in found[0].summary
    found = run(S.context(before), "gpu.fabric_manager")
    assert {f.status for f in found} == {"fail"} and len(found) == 8
    assert not any("do not report" in f.summary or "no GPU reports" in f.summary for f in found)
