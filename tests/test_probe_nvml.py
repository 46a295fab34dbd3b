"""The nvml probe, replayed from named scenarios.

All NVML answers here are SYNTHESIZED by synth.nvml (healthy HGX H100 defaults built from
real facts, then one fault each); none was read from a machine. The last test runs the probe on
this machine's real NVML door, where no NVIDIA driver is installed.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from ccdiag.host.door import LiveHost, ReplayHost
from ccdiag.host.nvmlcall import (
    DRIVER_MISSING,
    GPU_LOST,
    HUNG,
    INVALID_ARGUMENT,
    NO_PERMISSION,
    NOT_SUPPORTED,
    NvmlCallError,
    call_name,
)
from ccdiag.probes import nvml
from ccdiag.probes.registry import ProbeUnavailable
from ccdiag.host.snapshot import SnapshotData
from synth.nvml import (
    err,
    h100_node,
    nvml_records,
    nvml_unavailable_records,
    nvml_window_records,
)

META = {"source": "synthesized", "note": "SYNTHESIZED NVML answers (synth.nvml)"}


class KeyLog:
    """A replay host that remembers which NVML calls the probe made."""

    def __init__(self, host: ReplayHost):
        self.host = host
        self.calls: list[list] = []

    def nvml(self, fn, *args):
        self.calls.append([fn, *args])
        return self.host.nvml(fn, *args)


def replay(records: list[dict]) -> ReplayHost:
    return ReplayHost(SnapshotData(nvml=records, meta=dict(META)))


def observe(records: list[dict]) -> nvml.NvmlObservation:
    return nvml.collect(replay(records))


def gpu_by_index(obs, i):
    return next(g for g in obs.gpus if g.index == i)


# -- parsers (pure), from tables -------------------------------------------------------------
@pytest.mark.parametrize("raw,text", [(12080, "12.8"), (12020, "12.2"), (11040, "11.4"), (13000, "13.0"),
                                      (12090, "12.9")])
def test_cuda_version(raw, text):
    assert nvml.parse_cuda_version(raw) == text


@pytest.mark.parametrize("mask,names", [
    (0, ()),
    (0x1, ("idle",)),
    (0x4, ("sw_power_cap",)),
    (0x8 | 0x20, ("hw_slowdown", "sw_thermal_slowdown")),
    (0x40 | 0x80, ("hw_thermal_slowdown", "hw_power_brake_slowdown")),
    (0x2 | 0x10 | 0x100, ("applications_clocks_setting", "sync_boost", "display_clocks_setting")),
    (0x1000, ("unknown_0x1000",)),
])
def test_clock_event_names(mask, names):
    assert nvml.clock_event_names(mask) == names


def test_clock_event_bits_match_the_binding():
    pynvml = pytest.importorskip("pynvml")
    expected = {
        "idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake_slowdown": "HwPowerBrakeSlowdown", "display_clocks_setting": "DisplayClockSetting",
        "board_limit": "BoardLimit", "reliability": "Reliability",
    }
    for bit, name in nvml.CLOCK_EVENT_BITS:
        assert getattr(pynvml, "nvmlClocksThrottleReason" + expected[name]) == bit, name


def test_constants_match_the_binding():
    pynvml = pytest.importorskip("pynvml")
    assert pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == nvml.FI_DEV_GET_GPU_RECOVERY_ACTION
    assert pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT == nvml.NVLINK_ERROR_DL_CRC_FLIT
    assert pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA == nvml.NVLINK_ERROR_DL_CRC_DATA
    assert pynvml.NVML_NVLINK_ERROR_DL_REPLAY == nvml.NVLINK_ERROR_DL_REPLAY
    assert pynvml.NVML_NVLINK_ERROR_DL_RECOVERY == nvml.NVLINK_ERROR_DL_RECOVERY
    assert pynvml.NVML_NVLINK_MAX_LINKS == nvml.NVLINK_MAX_LINKS
    assert dict(nvml.P2P_CAPS)["write"] == pynvml.NVML_P2P_CAPS_INDEX_WRITE
    assert dict(nvml.P2P_CAPS)["nvlink"] == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    assert dict(nvml.P2P_CAPS)["atomics"] == pynvml.NVML_P2P_CAPS_INDEX_ATOMICS
    assert dict(nvml.P2P_CAPS)["prop"] == pynvml.NVML_P2P_CAPS_INDEX_PROP
    assert pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY == 4 and nvml.P2P_STATUS[4] == "DR"
    assert pynvml.NVML_NVLINK_VERSION_4_0 == 6 and nvml.NVLINK_VERSION_MAJOR[6] == 4
    assert pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET == 4


@pytest.mark.parametrize("code,name", [(0, "OK"), (1, "CNS"), (2, "GNS"), (3, "TNS"), (4, "DR"), (5, "NS"),
                                       (6, "U"), (77, "U")])
def test_p2p_status_name(code, name):
    assert nvml.p2p_status_name(code) == name


@pytest.mark.parametrize("info,expected", [
    ({"state": 3, "status": 0, "healthMask": 0}, ("completed", "success", 0)),
    ({"state": 3, "status": 27}, ("completed", "not_ready", None)),
    ({"state": 2, "status": 27, "healthMask": 5}, ("in_progress", None, 5)),
    ({"state": 0, "status": 3}, ("not_supported", None, None)),
    ({"state": 1, "status": 0}, ("not_started", None, None)),
])
def test_fabric_info(info, expected):
    assert nvml.parse_fabric_info(info) == expected


@pytest.mark.parametrize("raw,major", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 5), (0, None)])
def test_nvlink_version_is_an_enum(raw, major):
    assert nvml.nvlink_version_major(raw) == major


@pytest.mark.parametrize("info,bdf", [
    ({"busId": "00000000:18:00.0", "busIdLegacy": "0000:18:00.0"}, "0000:18:00.0"),
    ({"busId": "00000000:DB:00.0"}, "0000:db:00.0"),
    ({"busId": "", "busIdLegacy": "0000:9A:00.0"}, "0000:9a:00.0"),
    ({"busId": "0000000F:01:00.0"}, "000f:01:00.0"),
])
def test_pci_bus_id(info, bdf):
    assert nvml.parse_pci_bus_id(info) == bdf


@pytest.mark.parametrize("bad", [None, "x", {"busId": ""}, {"busId": "nonsense"}])
def test_pci_bus_id_rejects(bad):
    with pytest.raises(nvml.ParseError):
        nvml.parse_pci_bus_id(bad)


def test_field_values_pick_the_typed_member():
    union = {"dVal": 1e-323, "uiVal": 4, "ulVal": 4, "ullVal": 4, "sllVal": 4, "siVal": 4, "usVal": 4}
    got = nvml.parse_field_values([{"fieldId": 230, "valueType": 1, "nvmlReturn": 0, "value": union},
                                   {"fieldId": 231, "valueType": 0, "nvmlReturn": 0, "value": dict(union, dVal=2.5)},
                                   {"fieldId": 232, "valueType": 1, "nvmlReturn": 3, "value": union}])
    assert got == {230: (0, 4), 231: (0, 2.5), 232: (3, None)}
    assert nvml.recovery_action_name(4) == "drain_and_reset"
    assert nvml.recovery_action_name(2) == "reboot"
    assert nvml.recovery_action_name(42) == "unknown_42"


@pytest.mark.parametrize("value,expected", [([0, 0, 0, 0], (0, 0, False, False)),
                                            ([3, 1, 1, 0], (3, 1, True, False)),
                                            ([0, 0, 0, 1], (0, 0, False, True))])
def test_remapped_rows(value, expected):
    assert nvml.parse_remapped_rows(value) == expected


def test_remapped_rows_rejects_three_values():
    with pytest.raises(nvml.ParseError):
        nvml.parse_remapped_rows([0, 0, 0])


# -- scenarios ----------------------------------------------------------------------------------
def test_every_call_is_a_real_binding_function():
    pynvml = pytest.importorskip("pynvml")
    recs = nvml_records(h100_node(2, overrides={"nvmlDeviceGetCurrentClocksEventReasons": err(NOT_SUPPORTED),
                                                "nvmlDeviceGetGpuFabricInfoV": err(NOT_SUPPORTED, code=13)}))
    fns = {r["call"][0] for r in recs}
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fns and "nvmlDeviceGetGpuFabricInfo" in fns
    missing = sorted(fn for fn in fns if not callable(getattr(pynvml, fn, None)))
    assert missing == []


def test_healthy_8_gpus_complete_and_exact(tmp_path):
    recs = nvml_records(h100_node(8))
    path = tmp_path / "healthy.ccdiag"
    SnapshotData(nvml=recs, meta=dict(META)).save(str(path))  # through the real file format
    host = KeyLog(ReplayHost(str(path)))
    obs = nvml.collect(host)
    # the builder answers exactly the calls the probe makes
    assert sorted(map(repr, host.calls)) == sorted(repr(r["call"]) for r in recs if r["call"] != ["nvmlInit"])
    assert obs.errors == ()
    assert (obs.driver_version, obs.cuda_driver_version, obs.device_count) == ("570.133.20", "12.8", 8)
    assert obs.nvml_version == "12.570.133.20"
    assert [g.bus_id for g in obs.gpus] == ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                            "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert len({g.uuid for g in obs.gpus}) == 8
    for g in obs.gpus:
        assert g.failed is None and g.errors == ()
        assert g.name == "NVIDIA H100 80GB HBM3"
        assert g.memory_total_bytes == 81559 * 2**20
        assert g.persistence_mode is True and g.ecc_mode_current is True and g.mig_mode_current is False
        assert (g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (0, 0)
        assert g.retired_pages_sbe is None  # Hopper: not supported, and not an error
        assert g.remapped_rows_failure is False and g.remapped_rows_pending is False
        assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
        assert g.power_limit_w == 700.0 and g.temperature_c == 33.0
        assert g.fabric_state == "completed" and g.fabric_status == "success"
        assert g.recovery_action == "none"
        assert g.clock_event_names == ("idle",)
        assert len(g.nvlinks) == 18
        assert all(link.active and link.version == 4 and link.remote_device_type == "switch"
                   and link.crc_flit_errors == 0 and link.errors == () for link in g.nvlinks)
        assert len({link.remote_bus_id for link in g.nvlinks}) == 4
    assert len(obs.p2p) == 56
    assert all((p.read, p.write, p.nvlink, p.atomics, p.prop) == ("OK",) * 5 for p in obs.p2p)


def test_one_gpu_lost_on_its_third_call():
    gpus = h100_node(8)
    gpus[2] = dataclasses.replace(gpus[2], overrides={"nvmlDeviceGetSerial": err(GPU_LOST)})
    recs = nvml_records(gpus)
    gpu2_calls = [r["call"][0] for r in recs if r["call"][0].startswith("nvmlDevice")
                  and len(r["call"]) > 1 and r["call"][1] == 2 and r["call"][0] != "nvmlDeviceGetP2PStatus"]
    assert gpu2_calls == ["nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetSerial"]
    obs = observe(recs)
    lost = gpu_by_index(obs, 2)
    assert lost.failed == GPU_LOST
    assert lost.uuid and lost.name == "NVIDIA H100 80GB HBM3"  # read before the loss: kept
    assert lost.serial is None and lost.nvlinks == () and lost.bus_id is None
    assert [e.kind for e in lost.errors] == [GPU_LOST]
    assert lost.errors[0].source == "nvmlDeviceGetSerial(2)"
    for g in obs.gpus:
        if g.index != 2:
            assert g.failed is None and len(g.nvlinks) == 18 and g.errors == ()
    assert len(obs.p2p) == 7 * 6
    assert all(2 not in (p.gpu_a, p.gpu_b) for p in obs.p2p)


def test_hung_gpu_keeps_links_read_before_it():
    gpus = h100_node(2)
    gpus[1] = dataclasses.replace(gpus[1], overrides={("nvmlDeviceGetNvLinkState", 4): err(HUNG)})
    obs = observe(nvml_records(gpus))
    g = gpu_by_index(obs, 1)
    assert g.failed == HUNG
    assert [link.link for link in g.nvlinks] == [0, 1, 2, 3]
    assert g.fabric_state == "completed"
    assert obs.p2p == ()  # one GPU left: no pair to ask about


def test_not_supported_fields_are_none_without_errors():
    ns = err(NOT_SUPPORTED)
    gpus = h100_node(2)
    gpus[0] = dataclasses.replace(gpus[0], temperature_c=None, remapped_rows=None, fabric_state=None,
                                  recovery_action=None, pcie_replay_counter=None,
                                  overrides={"nvmlDeviceGetPowerUsage": ns, "nvmlDeviceGetEccMode": ns,
                                             "nvmlDeviceGetTotalEccErrors": ns})
    recs = nvml_records(gpus)
    obs = observe(recs)
    g = gpu_by_index(obs, 0)
    assert g.failed is None and g.errors == () and obs.errors == ()
    for name in ("temperature_c", "power_w", "remapped_rows_correctable", "remapped_rows_failure",
                 "fabric_state", "fabric_status", "recovery_action", "pcie_replay_counter", "ecc_mode_current",
                 "ecc_volatile_corrected", "ecc_aggregate_uncorrected"):
        assert getattr(g, name) is None, name
    assert g.power_limit_w == 700.0 and len(g.nvlinks) == 18  # the rest is still read


def test_clock_reasons_fall_back_to_the_throttle_call():
    gpus = h100_node(1, overrides={"nvmlDeviceGetCurrentClocksEventReasons": err(NOT_SUPPORTED, code=13),
                                   "nvmlDeviceGetCurrentClocksThrottleReasons": 0x8 | 0x40})
    recs = nvml_records(gpus)
    assert ["nvmlDeviceGetCurrentClocksThrottleReasons", 0] in [r["call"] for r in recs]
    g = observe(recs).gpus[0]
    assert g.clock_event_reasons == 0x48
    assert g.clock_event_names == ("hw_slowdown", "hw_thermal_slowdown")
    # with the new call answering, the old one is never asked
    healthy = nvml_records(h100_node(1))
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in {r["call"][0] for r in healthy}


def test_fabric_falls_back_only_when_the_v_call_is_missing():
    gpus = h100_node(1, overrides={"nvmlDeviceGetGpuFabricInfoV": err(NOT_SUPPORTED, code=13)})
    recs = nvml_records(gpus)
    assert ["nvmlDeviceGetGpuFabricInfo", 0] in [r["call"] for r in recs]
    assert observe(recs).gpus[0].fabric_state == "completed"
    not_hopper = nvml_records(h100_node(1, fabric_state=None))
    assert "nvmlDeviceGetGpuFabricInfo" not in {r["call"][0] for r in not_hopper}


def test_fabric_registration_in_progress():
    g = observe(nvml_records(h100_node(1, fabric_state=2, fabric_status=27))).gpus[0]
    assert (g.fabric_state, g.fabric_status) == ("in_progress", None)


def test_no_permission_is_none_with_a_read_error():
    gpus = h100_node(2)
    gpus[1] = dataclasses.replace(gpus[1], overrides={"nvmlDeviceGetSerial": err(NO_PERMISSION),
                                                      ("nvmlDeviceGetNvLinkErrorCounter", 7, 2): err(NO_PERMISSION)})
    obs = observe(nvml_records(gpus))
    g = gpu_by_index(obs, 1)
    assert g.failed is None and g.serial is None
    assert [(e.source, e.kind) for e in g.errors] == [("nvmlDeviceGetSerial(1)", NO_PERMISSION)]
    link7 = g.nvlinks[7]
    assert link7.crc_flit_errors is None and link7.crc_data_errors == 0
    assert [(e.source, e.kind) for e in link7.errors] == [("nvmlDeviceGetNvLinkErrorCounter(1, 7, 2)", NO_PERMISSION)]
    assert gpu_by_index(obs, 0).errors == ()


def test_unexpected_value_is_a_parse_error_not_a_crash():
    g = observe(nvml_records(h100_node(1, overrides={"nvmlDeviceGetTemperature": "hot",
                                                     "nvmlDeviceGetMigMode": [0]}))).gpus[0]
    assert g.temperature_c is None and g.mig_mode_current is None
    assert sorted(e.kind for e in g.errors) == ["parse", "parse"]
    assert g.failed is None and g.power_w == 72.0


def test_driver_missing_is_unavailable():
    with pytest.raises(ProbeUnavailable, match="NVIDIA driver not loaded / NVML library not found"):
        observe(nvml_unavailable_records(DRIVER_MISSING))


def test_driver_missing_at_device_count_is_unavailable():
    recs = nvml_records(h100_node(1), overrides={"nvmlDeviceGetCount": err(DRIVER_MISSING, code=9,
                                                                           message="Driver Not Loaded")})
    with pytest.raises(ProbeUnavailable, match="Driver Not Loaded"):
        observe(recs)


def test_snapshot_without_nvml_is_unavailable_not_a_crash():
    with pytest.raises(ProbeUnavailable, match="not recorded"):
        observe([])


def test_gpu_count_unreadable_is_reported():
    obs = observe(nvml_records(h100_node(2), overrides={"nvmlDeviceGetCount": err(NO_PERMISSION)}))
    assert obs.device_count is None and obs.gpus == ()
    assert [(e.source, e.kind) for e in obs.errors] == [("nvmlDeviceGetCount()", NO_PERMISSION)]
    assert obs.driver_version == "570.133.20"


def test_nvlink_down_on_one_link():
    gpus = h100_node(8)
    gpus[5] = dataclasses.replace(gpus[5], nvlink_states={11: False})
    obs = observe(nvml_records(gpus))
    g = gpu_by_index(obs, 5)
    assert [link.link for link in g.nvlinks if not link.active] == [11]
    assert len(g.nvlinks) == 18 and g.errors == () and g.failed is None
    assert all(link.active for other in obs.gpus if other.index != 5 for link in other.nvlinks)


def test_nvlink_walk_stops_at_the_first_missing_link():
    # a PCIe H100 with an NVLink bridge: 12 of 18 links (corpus topo-m h100-pcie-x2-nvlink-bridge-nv12)
    gpus = h100_node(2, nvlink_count=12, nvlink_remote_type=0,
                     nvlink_remote_bus_ids=tuple(["0000:8a:00.0"] * 12))
    recs = nvml_records(gpus)
    states = [r for r in recs if r["call"][0] == "nvmlDeviceGetNvLinkState" and r["call"][1] == 0]
    assert [r["call"][2] for r in states] == list(range(13))
    assert states[-1]["error"] == INVALID_ARGUMENT
    g = observe(recs).gpus[0]
    assert len(g.nvlinks) == 12 and g.errors == ()
    assert {link.remote_device_type for link in g.nvlinks} == {"gpu"}
    assert {link.remote_bus_id for link in g.nvlinks} == {"0000:8a:00.0"}


def test_gpu_without_nvlink():
    gpus = h100_node(2, nvlink_count=0)
    recs = nvml_records(gpus)
    assert [r["call"] for r in recs if r["call"][0].startswith("nvmlDeviceGetNvLink")] == [
        ["nvmlDeviceGetNvLinkState", 0, 0], ["nvmlDeviceGetNvLinkState", 1, 0]]
    obs = observe(recs)
    assert all(g.nvlinks == () and g.errors == () for g in obs.gpus)
    assert {(p.nvlink, p.read) for p in obs.p2p} == {("NS", "OK")}


def test_nvlink_state_unknown_ends_the_walk_with_an_error():
    gpus = h100_node(1, overrides={("nvmlDeviceGetNvLinkState", 3): err(NO_PERMISSION)})
    g = observe(nvml_records(gpus)).gpus[0]
    assert [link.active for link in g.nvlinks] == [True, True, True, None]
    assert g.nvlinks[3].errors[0].kind == NO_PERMISSION and g.failed is None


def test_nvlink_error_counters_rise_over_a_window():
    before = h100_node(2)
    after = list(before)
    after[1] = dataclasses.replace(before[1], nvlink_errors={6: {"crc_flit": 17, "replay": 3}})
    recs = nvml_window_records(before, after)
    assert {r["epoch"] for r in recs} == {0, 1}
    assert len([r for r in recs if r["epoch"] == 1]) == 2  # only what changed
    host = replay(recs)
    first = nvml.collect(host)
    host.next_epoch(5.0)
    second = nvml.collect(host)
    a, b = gpu_by_index(first, 1).nvlinks[6], gpu_by_index(second, 1).nvlinks[6]
    assert (a.crc_flit_errors, a.replay_errors) == (0, 0)
    assert (b.crc_flit_errors, b.replay_errors, b.crc_data_errors) == (17, 3, 0)
    assert second.errors == () and all(g.errors == () for g in second.gpus)


def test_p2p_matrix():
    recs = nvml_records(h100_node(4), p2p={(0, 1): "NS", (1, 0): "NS", (2, 3): {"nvlink": "TNS", "atomics": "GNS"},
                                           (3, 2): {"read": err(NO_PERMISSION)}, (1, 2): "DR", "default": "OK"})
    obs = observe(recs)
    m = {(p.gpu_a, p.gpu_b): p for p in obs.p2p}
    assert len(m) == 12
    assert (m[0, 1].read, m[0, 1].nvlink, m[1, 0].prop) == ("NS", "NS", "NS")
    assert (m[2, 3].read, m[2, 3].nvlink, m[2, 3].atomics) == ("OK", "TNS", "GNS")
    assert m[3, 2].read is None and m[3, 2].write == "OK"
    assert m[1, 2].write == "DR" and m[2, 1].write == "OK"
    assert [(e.source, e.kind) for e in obs.errors] == [("nvmlDeviceGetP2PStatus(3, 2, 0)", NO_PERMISSION)]


def test_retired_pages_on_a_pre_ampere_gpu():
    g = observe(nvml_records(h100_node(1, retired_pages=(2, 1), retired_pages_pending=True,
                                       remapped_rows=None))).gpus[0]
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (2, 1, True)
    assert g.remapped_rows_correctable is None and g.errors == ()


def test_faulted_gpu_values():
    gpus = h100_node(1, ecc_volatile_uncorrected=2, ecc_aggregate_uncorrected=5, remapped_rows=(0, 1, True, False),
                     recovery_action=4, processes=((4242, 1 << 30),), pcie_gen=3, pcie_width=8,
                     clocks_event_reasons=0x8, pcie_replay_counter=12)
    g = observe(nvml_records(gpus)).gpus[0]
    assert (g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (2, 5)
    assert (g.remapped_rows_uncorrectable, g.remapped_rows_pending) == (1, True)
    assert g.recovery_action == "drain_and_reset"
    assert g.compute_processes == (nvml.ComputeProcess(4242, 1 << 30),)
    assert (g.pcie_gen_current, g.pcie_width_current, g.pcie_replay_counter) == (3, 8, 12)
    assert g.clock_event_names == ("hw_slowdown",)


def test_recovery_field_unknown_to_an_older_driver_is_absent():
    # the call answers; the field itself says invalid argument (a driver that predates the id)
    g = observe(nvml_records(h100_node(1, field_returns={(230, 0): 2}))).gpus[0]
    assert g.recovery_action is None and g.errors == ()
    assert all(link.errors == () and link.tx_bytes == 0 for link in g.nvlinks)  # the traffic call is apart


@pytest.mark.gpu(False)
def test_live_machine_without_driver_is_unavailable():
    host = LiveHost()
    try:
        start = time.monotonic()
        with pytest.raises(ProbeUnavailable) as info:
            nvml.collect(host)
        assert time.monotonic() - start < 15
    finally:
        host.close()
    assert "NVML library" in str(info.value) or "driver" in str(info.value)
    assert "NVIDIA driver not loaded / NVML library not found" in str(info.value)


def test_call_names_are_stable():
    # the report and error entries name calls this way; keep it readable
    assert call_name("nvmlDeviceGetFieldValues", (0, [230])) == "nvmlDeviceGetFieldValues(0, [230])"
    assert isinstance(NvmlCallError("f", (1,), NO_PERMISSION).to_record(), dict)


GOLDEN_PLAN = __import__("pathlib").Path(__file__).parent / "fixtures" / "nvml" / "call-plan-h100-x2.txt"
_PLAN_HEADER = ("# SYNTHESIZED: the NVML calls the nvml probe makes on two healthy H100s (synth.nvml),\n"
                "# one per line, in order. Refresh with: pytest tests/test_probe_nvml.py --update-golden\n")


def test_call_plan_matches_golden(update_golden):
    """Changing which NVML calls the probe makes changes what snapshots must hold: make it visible."""
    plan = _PLAN_HEADER + "".join(call_name(r["call"][0], r["call"][1:]) + "\n" for r in nvml_records(h100_node(2)))
    if update_golden:
        GOLDEN_PLAN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_PLAN.write_text(plan)
    assert GOLDEN_PLAN.read_text() == plan


# -- NVLink traffic counters (field values 138/139, one scope per link) --------------------------
TX, RX = nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX


def _traffic_request(links: int) -> tuple:
    """The throughput call's argument as a hashable override key (tuples where the call has lists)."""
    return tuple((fid, k) for k in range(links) for fid in (TX, RX))


def test_throughput_field_ids_match_the_binding():
    pynvml = pytest.importorskip("pynvml")
    assert pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX == TX == 138
    assert pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX == RX == 139
    assert pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG == 3


def _fv(fid, scope, ret=0, value=0, vtype=3):
    union = {"dVal": 0.0, "uiVal": value & 0xFFFFFFFF, "ulVal": value, "ullVal": value, "sllVal": value,
             "siVal": value & 0x7FFFFFFF, "usVal": value & 0xFFFF}
    return {"fieldId": fid, "scopeId": scope, "timestamp": 1, "latencyUsec": 0, "valueType": vtype,
            "nvmlReturn": ret, "value": union}


def test_scoped_field_values_keep_one_entry_per_link():
    got = nvml.parse_scoped_field_values([_fv(TX, 0, value=5), _fv(RX, 0, value=6), _fv(TX, 1, value=2**40),
                                          _fv(RX, 1, ret=4, value=99)])
    assert got == {(TX, 0): (0, 5), (RX, 0): (0, 6), (TX, 1): (0, 2**40), (RX, 1): (4, None)}
    # the unscoped reader still keys by field id alone (the recovery action); a missing scope is 0
    assert nvml.parse_field_values([{k: v for k, v in _fv(230, 0, value=1, vtype=1).items() if k != "scopeId"}]) \
        == {230: (0, 1)}
    with pytest.raises(nvml.ParseError):
        nvml.parse_scoped_field_values({"fieldId": TX})


@pytest.mark.parametrize("value,expected", [(0, 0), (1, 1024), (2**50, 2**60), (7.0, 7168)])
def test_kib_counter_bytes(value, expected):
    assert nvml.kib_counter_bytes(value) == expected


@pytest.mark.parametrize("bad", [-1, 1.5, True, "12", None])
def test_kib_counter_bytes_rejects(bad):
    with pytest.raises(nvml.ParseError):
        nvml.kib_counter_bytes(bad)


def test_nvlink_traffic_is_read_in_one_call_per_gpu_as_bytes():
    traffic = {k: (1000 + k, 2000 + k) for k in range(18)}
    recs = nvml_records(h100_node(2, nvlink_traffic_kib=traffic))
    calls = [r["call"] for r in recs if r["call"][0] == "nvmlDeviceGetFieldValues"]
    every_link = [list(p) for p in _traffic_request(18)]
    assert every_link[:4] == [[138, 0], [139, 0], [138, 1], [139, 1]] and len(every_link) == 36
    assert calls == [["nvmlDeviceGetFieldValues", 0, [82]], ["nvmlDeviceGetFieldValues", 0, [230]],
                     ["nvmlDeviceGetFieldValues", 0, every_link],
                     ["nvmlDeviceGetFieldValues", 1, [82]], ["nvmlDeviceGetFieldValues", 1, [230]],
                     ["nvmlDeviceGetFieldValues", 1, every_link]]
    obs = observe(recs)
    for g in obs.gpus:
        assert g.errors == ()
        assert [(lk.tx_bytes, lk.rx_bytes) for lk in g.nvlinks] == [((1000 + k) * 1024, (2000 + k) * 1024)
                                                                    for k in range(18)]
        assert all(lk.errors == () and lk.active for lk in g.nvlinks)


def test_nvlink_traffic_per_field_error_is_filed_on_its_link_only():
    traffic = {k: (10 * k + 1, 10 * k + 2) for k in range(18)}
    gpus = h100_node(2, nvlink_traffic_kib=traffic)
    gpus[1] = dataclasses.replace(gpus[1], field_returns={(TX, 7): 4, (RX, 3): 3, (RX, 9): 999})
    g = gpu_by_index(observe(nvml_records(gpus)), 1)
    assert g.failed is None and g.errors == ()
    link3, link7, link9 = g.nvlinks[3], g.nvlinks[7], g.nvlinks[9]
    assert (link7.tx_bytes, link7.rx_bytes) == (None, 72 * 1024)  # RX of the same link still read
    assert [(e.kind, e.message) for e in link7.errors] == [
        ("field_error", "link 7 tx data counter (field 138): no_permission")]
    assert link7.errors[0].source.startswith("nvmlDeviceGetFieldValues(1, [[138, 0], [139, 0], ")
    assert (link3.tx_bytes, link3.rx_bytes, link3.errors) == (31 * 1024, None, ())  # not supported: quiet
    assert link9.rx_bytes is None and [e.message for e in link9.errors] == [
        "link 9 rx data counter (field 139): unknown"]
    assert link7.active and link7.crc_flit_errors == 0  # the rest of the link is untouched
    others = [lk for lk in g.nvlinks if lk.link not in (3, 7, 9)]
    assert all(lk.errors == () and lk.tx_bytes == (10 * lk.link + 1) * 1024 for lk in others)
    assert all(lk.errors == () for lk in gpu_by_index(observe(nvml_records(gpus)), 0).nvlinks)


def test_nvlink_traffic_not_supported_is_absent_without_errors():
    g = observe(nvml_records(h100_node(1, nvlink_traffic_kib=None))).gpus[0]
    assert g.errors == () and len(g.nvlinks) == 18
    assert all(lk.tx_bytes is None and lk.rx_bytes is None and lk.errors == () and lk.active for lk in g.nvlinks)


def test_nvlink_traffic_call_refused_is_a_gpu_error_and_links_stay():
    gpus = h100_node(1, overrides={("nvmlDeviceGetFieldValues", _traffic_request(18)): err(NO_PERMISSION)})
    g = observe(nvml_records(gpus)).gpus[0]
    assert g.failed is None and g.recovery_action == "none"
    assert [(e.kind, e.source.split(",")[0]) for e in g.errors] == [(NO_PERMISSION, "nvmlDeviceGetFieldValues(0")]
    assert len(g.nvlinks) == 18 and all(lk.active and lk.tx_bytes is None and lk.errors == () for lk in g.nvlinks)


def test_nvlink_traffic_call_losing_the_gpu_keeps_the_links():
    gpus = h100_node(2)
    gpus[0] = dataclasses.replace(gpus[0], overrides={("nvmlDeviceGetFieldValues", _traffic_request(18)):
                                                      err(GPU_LOST)})
    obs = observe(nvml_records(gpus))
    g = gpu_by_index(obs, 0)
    assert g.failed == GPU_LOST and len(g.nvlinks) == 18 and all(lk.tx_bytes is None for lk in g.nvlinks)
    assert obs.p2p == ()  # only GPU1 left
    assert gpu_by_index(obs, 1).nvlinks[0].tx_bytes == 0


def test_nvlink_traffic_answer_missing_a_link_is_a_parse_error_on_that_link():
    answer = [_fv(fid, k, value=k + 1) for k in range(18) for fid in (TX, RX) if (fid, k) != (RX, 4)]
    gpus = h100_node(1, overrides={("nvmlDeviceGetFieldValues", _traffic_request(18)): answer})
    g = observe(nvml_records(gpus)).gpus[0]
    assert g.errors == ()
    assert (g.nvlinks[4].tx_bytes, g.nvlinks[4].rx_bytes) == (5 * 1024, None)
    assert [e.kind for e in g.nvlinks[4].errors] == ["parse"]
    assert sum(len(lk.errors) for lk in g.nvlinks) == 1


def test_nvlink_traffic_only_for_links_the_walk_found():
    recs = nvml_records(h100_node(1, nvlink_count=12, nvlink_traffic_kib={0: (1, 2)}))
    call = [r["call"] for r in recs if r["call"][0] == "nvmlDeviceGetFieldValues"][-1]
    assert call[2] == [list(p) for p in _traffic_request(12)]
    assert observe(recs).gpus[0].nvlinks[0].rx_bytes == 2048
    # no links, no call
    none = nvml_records(h100_node(1, nvlink_count=0))
    assert [r["call"] for r in none if r["call"][0] == "nvmlDeviceGetFieldValues"] == [
        ["nvmlDeviceGetFieldValues", 0, [82]], ["nvmlDeviceGetFieldValues", 0, [230]]]


def test_nvlink_traffic_rises_over_a_window():
    before = h100_node(1, nvlink_traffic_kib={k: (100, 200) for k in range(18)})
    after = [dataclasses.replace(before[0], nvlink_traffic_kib={k: (100 + 10 * k, 200 + k) for k in range(18)})]
    host = replay(nvml_window_records(before, after))
    first = nvml.collect(host).gpus[0]
    host.next_epoch(10.0)
    second = nvml.collect(host).gpus[0]
    deltas = [(b.tx_bytes - a.tx_bytes, b.rx_bytes - a.rx_bytes) for a, b in zip(first.nvlinks, second.nvlinks)]
    assert deltas == [(10 * k * 1024, k * 1024) for k in range(18)]


def test_nvlink_traffic_through_the_binding_and_facade(monkeypatch):
    """The real nvidia-ml-py wrapper fills scopeId from a [fieldId, scopeId] list, and the facade's
    JSON of the returned structures is what the probe parses. Only the driver entry point is faked:
    it answers each field by its (fieldId, scopeId) the way NVML documents it."""
    pynvml = pytest.importorskip("pynvml")
    from ccdiag.host.nvmlcall import NvmlFacade
    seen = []

    def fake_driver(handle, count, ref):
        for fv in ref._obj[: count.value]:
            seen.append((fv.fieldId, fv.scopeId))
            if fv.fieldId == TX and fv.scopeId == 1:
                fv.nvmlReturn = 4  # no permission, for this one field
                continue
            fv.nvmlReturn = 0
            fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            fv.value.ullVal = (fv.scopeId + 1) * (3 if fv.fieldId == TX else 5) * 2**33
        return 0

    class Binding:
        def __getattr__(self, name):
            return getattr(pynvml, name)

        nvmlInit = staticmethod(lambda: None)
        nvmlShutdown = staticmethod(lambda: None)
        nvmlDeviceGetHandleByIndex = staticmethod(lambda i: f"handle{i}")

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: fake_driver)
    facade = NvmlFacade(binding=Binding())
    try:
        request = [[TX, 0], [RX, 0], [TX, 1], [RX, 1]]
        answer = facade.call("nvmlDeviceGetFieldValues", 0, request)
    finally:
        facade.shutdown()
    assert seen == [(TX, 0), (RX, 0), (TX, 1), (RX, 1)]
    assert [(a["fieldId"], a["scopeId"], a["nvmlReturn"], a["valueType"]) for a in answer] == [
        (TX, 0, 0, 3), (RX, 0, 0, 3), (TX, 1, 4, 0), (RX, 1, 0, 3)]
    parsed = nvml.parse_scoped_field_values(answer)
    assert parsed == {(TX, 0): (0, 3 * 2**33), (RX, 0): (0, 5 * 2**33), (TX, 1): (4, None), (RX, 1): (0, 10 * 2**33)}
    assert nvml.kib_counter_bytes(parsed[(RX, 1)][1]) == 10 * 2**43


def test_bundled_samples_carry_nvlink_traffic_that_moves_between_epochs():
    samples = __import__("pathlib").Path(__file__).resolve().parent.parent / "samples"
    for name, idle in (("hgx-h100-8gpu-healthy.snap.tar.gz", set()),
                       ("hgx-h100-8gpu-degraded.snap.tar.gz", {(5, 7)})):
        host = ReplayHost(str(samples / name))
        first = nvml.collect(host)
        host.next_epoch(10.0)
        second = nvml.collect(host)
        for a, b in zip(first.gpus, second.gpus):
            for la, lb in zip(a.nvlinks, b.nvlinks):
                assert la.tx_bytes and la.rx_bytes and la.errors == (), (name, a.index, la.link)
                moved = (lb.tx_bytes - la.tx_bytes, lb.rx_bytes - la.rx_bytes)
                if (a.index, la.link) in idle:  # the inactive link carries nothing
                    assert moved == (0, 0)
                else:
                    assert all(0 < d < 25e9 * 10 for d in moved), (name, a.index, la.link, moved)  # under 25 GB/s


def test_remapped_rows_of_a_mig_gpu_are_read_per_instance():
    """SYNTHESIZED: GPU 0 in MIG mode answers remapped rows only per instance (slots 0 and 3);
    slot 3 has a remap pending, which the GPU's verdict must not miss."""
    from ccdiag.checks import CheckContext, run_checks
    from ccdiag.probes.registry import ProbeRun

    import dataclasses

    gpus = h100_node(2)
    gpus[0] = dataclasses.replace(gpus[0], mig_mode=(True, True),
                                  mig_remapped_rows={0: (1, 0, False, False), 3: (0, 2, True, False)})
    obs = observe(nvml_records(gpus))
    g0 = obs.gpus[0]
    assert g0.remapped_rows_mig == (0, 3)
    assert (g0.remapped_rows_correctable, g0.remapped_rows_uncorrectable, g0.remapped_rows_pending) == (1, 2, True)
    assert obs.gpus[1].remapped_rows_mig is None
    ctx = CheckContext(runs={"nvml": ProbeRun("nvml", "ok", 0.1, obs)})
    fails = [f for f in run_checks(ctx, only=["gpu.remapped_rows"]) if f.status == "fail"]
    assert [f.component.gpu for f in fails] == [0]
    assert "'0:mig3'" in fails[0].evidence[0].source and "pending" in fails[0].summary
