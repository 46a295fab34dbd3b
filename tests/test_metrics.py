"""The metrics exposition: golden files for the bundled samples, naming rules, and the semantics of
absent values, stale probes, check statuses and XID counting."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

import exporter_cases as C
from ccdiag.exporters import spec as S
from ccdiag.exporters.collector import CycleCollector, StaticCollector, make_registry
from ccdiag.exporters.cycle import CycleState, cycle_from_result
from ccdiag.exporters.metrics import dcgm_bus_id, families
from ccdiag.probes.registry import FAILED, TIMEOUT, ProbeRun
from prometheus_client import generate_latest

REPO = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
METRICS_JSON = REPO / "exporters" / "metrics.json"
SAMPLE_CASES = [("healthy", C.HEALTHY), ("degraded", C.DEGRADED)]


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} of an exposition."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels) -> float | None:
    for (n, items), v in samples(text).items():
        if n == name and all(dict(items).get(k) == str(want) for k, want in labels.items()):
            return v
    return None


def render(cycle, **kw) -> str:
    return generate_latest(StaticCollector(families(cycle, **kw))).decode()


# -- golden files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name,path", SAMPLE_CASES, ids=[c[0] for c in SAMPLE_CASES])
def test_whole_exposition_matches_golden(name, path, update_golden):
    if not path.exists():
        pytest.skip(f"sample {path.name} not bundled")
    text = C.golden_exposition(path)
    golden = GOLDEN / f"{name}.prom"
    if update_golden:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), "run pytest --update-golden to create the golden file"
    assert text == golden.read_text(), f"exposition of {path.name} changed; review, then --update-golden"


@pytest.mark.parametrize("name", ["healthy", "degraded"])
def test_golden_exposition_passes_promtool(name):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    golden = GOLDEN / f"{name}.prom"
    proc = subprocess.run([promtool, "check", "metrics"], input=golden.read_bytes(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_synthetic_exposition_passes_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    text = render(cycle_from_result(C.result(), 1.0), interval_s=15, cycles_total=3)
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_degraded_golden_shows_what_is_broken():
    text = (GOLDEN / "degraded.prom").read_text()
    healthy = (GOLDEN / "healthy.prom").read_text()
    assert value(healthy, "ccdiag_verdict_severity") == S.SEVERITY["pass"]  # its skipped checks lower nothing
    assert value(text, "ccdiag_verdict_severity") == S.SEVERITY["fail"]
    assert value(text, "ccdiag_findings", status="fail") > 0
    # every failing finding is one check_severity series at the fail level (no one-hot duplicate)
    failing = [dict(k[1]) for k, v in samples(text).items() if k[0] == "ccdiag_check_severity" and v == 4]
    assert failing and "ccdiag_check_status" not in text


def test_finding_root_names_the_root_each_finding_follows_from():
    """The degraded sample's GPU6 fell off the bus (XID 79): its lost GPU, the node's GPU count and
    its other checks all name that one root; a root names itself; a healthy node has no series."""
    text = (GOLDEN / "degraded.prom").read_text()
    healthy = (GOLDEN / "healthy.prom").read_text()
    assert "ccdiag_finding_root{" not in healthy
    rows = [(dict(k[1]), v) for k, v in samples(text).items() if k[0] == "ccdiag_finding_root"]
    root_of = {(lab["check"], lab["component"]): lab["root"] for lab, _ in rows}
    assert root_of[("gpu.lost", "GPU6")] == root_of[("gpu.count", "node")] == "xid.recent|GPU6|XID 79"
    assert root_of[("xid.recent", "GPU6")] == "xid.recent|GPU6|XID 79"
    assert root_of[("ib.port_state", "mlx5_4 port 1")] == "ib.port_state|mlx5_4 port 1"
    # a root is itself a finding of the cycle, and names itself
    for root in set(root_of.values()):
        check, component = root.split("|")[:2]  # check|component, and |subject where it has one (XID 79)
        assert root_of[(check, component)] == root, root
    # the value is the finding's status, the same number ccdiag_check_severity carries
    severity = {(dict(k[1])["check"], dict(k[1])["component"]): v for k, v in samples(text).items()
                if k[0] == "ccdiag_check_severity"}
    assert all(severity[(lab["check"], lab["component"])] == v for lab, v in rows)
    # passing findings carry no root; a skip does only when a root explains it
    assert all(v != S.SEVERITY["pass"] for _, v in rows)
    assert all(lab["root"] != f"{lab['check']}|{lab['component']}" for lab, v in rows if v == S.SEVERITY["skip"])
    # bdf joins the PCIe series: the trained-down GPU3 link is the function the raw series names
    assert {lab["bdf"] for lab, _ in rows if lab["check"] == "pcie.link_width"} == {"0000:5d:00.0"}


def test_gpu_numa_node_comes_from_the_pci_device():
    """NVML's NUMA id is N/A on x86 (the samples record it so); the PCI device's numa_node in sysfs is
    what topo shows: GPUs 0-3 on node 0, 4-7 on node 1 in the 8-GPU samples."""
    for name in ("healthy", "degraded"):
        text = (GOLDEN / f"{name}.prom").read_text()
        numa = {dict(k[1])["gpu"]: dict(k[1])["numa_node"] for k in samples(text) if k[0] == "ccdiag_gpu_info"}
        assert numa == {str(i): "0" if i < 4 else "1" for i in range(8)}


# -- the metric list -------------------------------------------------------------------------------
def test_metrics_json_is_generated_from_the_spec(update_golden):
    if update_golden:
        METRICS_JSON.write_text(S.metrics_json())
    assert json.loads(METRICS_JSON.read_text()) == json.loads(S.metrics_json()), \
        "exporters/metrics.json is stale: run pytest --update-golden"


def _health_textfile() -> str:
    """ccdiag-health.prom of a node whose loop passed, then failed and was held by the drain cap
    (the health loop's series, written beside the exporter's: ccdiag/health/metrics.py)."""
    from ccdiag.health.metrics import render as render_health
    from ccdiag.health.state import HealthState

    st = HealthState(last_run={"at": 2.0, "outcome": "fail"}, runs={"pass": 1, "fail": 1}, last_pass=1.0,
                     valid_until=2.0, cap={"held": True, "total": 8, "out": 1, "limit": 1, "source": "sinfo"},
                     ladder={"xid.recent|GPU6": {"action": "reboot", "last_failed": 2.0, "check": "xid.recent",
                                                 "component": "GPU6"}})
    st.count_step("drain", "held", 2.0)
    return render_health(st).decode()


def test_every_exported_family_is_declared_with_its_type_and_labels():
    texts = [render(cycle_from_result(r, 1.0), interval_s=15, cycles_total=1) for r in (C.result(), C.waived_result())]
    texts += [(GOLDEN / f"{n}.prom").read_text() for n in ("healthy", "degraded") if (GOLDEN / f"{n}.prom").exists()]
    texts.append(_health_textfile())
    seen = set()
    for text in texts:
        for fam in text_string_to_metric_families(text):
            sp = S.BY_NAME.get(fam.name) or S.BY_NAME.get(fam.name + "_total")
            assert sp is not None, f"{fam.name} is not declared in exporters/spec.py"
            assert fam.type == sp.type
            for s in fam.samples:
                assert set(s.labels) <= set(sp.labels), (fam.name, s.labels)
            seen.add(sp.name)
    names = [s.name for s in S.SPECS]
    assert len(names) == len(set(names))
    assert all(n.startswith("ccdiag_") for n in names)
    assert all(s.name.endswith("_total") == (s.type == S.COUNTER) for s in S.SPECS)
    # the synthetic case plus the samples exercise most of the list
    assert len(seen) >= len(names) - 3, sorted(set(names) - seen)


@pytest.mark.parametrize("bdf,want", [
    ("0000:18:00.0", "00000000:18:00.0"),
    ("0000:2a:00.0", "00000000:2A:00.0"),
    ("00000000:db:00.0", "00000000:DB:00.0"),
    ("0001:0a:1f.7", "00000001:0A:1F.7"),
    (None, None),
    ("garbage", None),
])
def test_pci_bus_id_uses_dcgm_exporter_spelling(bdf, want):
    assert dcgm_bus_id(bdf) == want


# -- semantics -------------------------------------------------------------------------------------
def test_values_that_were_not_read_are_omitted_not_zero():
    text = render(cycle_from_result(C.result(), 1.0))
    # GPU1 is lost: it is listed and down, but none of its unread values appear as 0 or -1
    assert value(text, "ccdiag_gpu_up", gpu=1) == 0
    assert value(text, "ccdiag_gpu_temperature_celsius", gpu=1) is None
    assert value(text, "ccdiag_gpu_ecc_errors_total", gpu=1) is None
    assert value(text, "ccdiag_gpu_compute_processes", gpu=1) is None
    # a counter NVML did not give (crc_data on link 1) is absent, its siblings are there
    assert value(text, "ccdiag_nvlink_errors_total", gpu=0, link=1, type="crc_data") is None
    assert value(text, "ccdiag_nvlink_errors_total", gpu=0, link=1, type="crc_flit") == 3
    cold = C.result(nvml=ProbeRun("nvml", "ok", 0.1, C.nvml_obs(temp0=None)))
    assert value(render(cycle_from_result(cold, 1.0)), "ccdiag_gpu_temperature_celsius", gpu=0) is None
    assert not any(v < 0 for v in samples(text).values())


def test_units_are_base_units():
    text = render(cycle_from_result(C.result(), 1.0))
    assert value(text, "ccdiag_pcie_current_link_transfers_per_second", bdf="0000:18:00.0") == 16e9
    assert value(text, "ccdiag_infiniband_port_rate_bytes_per_second", device="mlx5_0") == 400e9 / 8
    # port_xmit_data counts 4-byte words
    assert value(text, "ccdiag_infiniband_port_transmitted_bytes_total", device="mlx5_0") == 4000
    assert value(text, "ccdiag_infiniband_port_stats_total", stat="link_downed") == 1
    assert value(text, "ccdiag_infiniband_port_hw_stats_total", stat="lifespan") is None  # a setting


def test_pcie_links_on_gpu_and_nic_paths_only_with_aer_totals():
    text = render(cycle_from_result(C.result(), 1.0))
    bdfs = {dict(k[1])["bdf"] for k in samples(text) if k[0] == "ccdiag_pcie_device_info"}
    assert bdfs == {"0000:16:01.0", "0000:17:00.0", "0000:18:00.0", "0000:19:00.0"}  # not 0000:99:00.0
    assert value(text, "ccdiag_pcie_device_info", bdf="0000:17:00.0",
                 endpoints="0000:18:00.0,0000:19:00.0") == 1
    assert value(text, "ccdiag_pcie_aer_errors_total", bdf="0000:18:00.0", severity="correctable") == 3
    assert value(text, "ccdiag_pcie_aer_errors_total", bdf="0000:18:00.0", severity="fatal") == 0
    assert value(text, "ccdiag_pcie_aer_error_kinds_total", bdf="0000:18:00.0", error="RxErr") == 3
    assert value(text, "ccdiag_pcie_aer_error_kinds_total", bdf="0000:18:00.0", error="BadTLP") is None
    assert value(text, "ccdiag_pcie_acs_request_redirect_enabled", bdf="0000:17:00.0") == 1


def test_ib_port_names_the_gpus_it_serves():
    text = render(cycle_from_result(C.result(), 1.0))
    assert value(text, "ccdiag_infiniband_port_info", device="mlx5_0", port=1, gpus="GPU0") == 1
    assert value(text, "ccdiag_infiniband_nearest_gpu_info", device="mlx5_0", gpu=0, UUID="GPU-aaaa",
                 pci_bus_id="00000000:18:00.0", path="PIX") == 1


def test_one_severity_series_per_check_and_component_takes_the_worst_duplicate():
    text = render(cycle_from_result(C.result(), 1.0))
    key = dict(check="pcie.link_downtrained", component="GPU0 PCIe")
    assert len([k for k in samples(text) if k[0] == "ccdiag_check_severity" and dict(k[1])["check"] == key["check"]
                and dict(k[1])["component"] == key["component"]]) == 1
    assert value(text, "ccdiag_check_severity", **key) == S.SEVERITY["warn"]
    assert value(text, "ccdiag_check_severity", check="gpu.lost", gpu=1, UUID="GPU-bbbb") == S.SEVERITY["fail"]
    assert value(text, "ccdiag_verdict_severity") == S.SEVERITY["fail"]
    assert value(text, "ccdiag_findings", status="warn") == 1 and value(text, "ccdiag_findings", status="pass") == 2


def test_probe_failure_is_marked_and_last_good_data_is_served_until_too_old():
    state = CycleState(max_stale_s=100.0)
    state.advance(C.result(), completed_at=1000.0)
    broken = ProbeRun("nvml", FAILED, 0.2, None, "RuntimeError: boom")
    text = render(state.advance(C.result(nvml=broken), completed_at=1050.0))
    assert value(text, "ccdiag_probe_success", probe="nvml") == 0
    assert value(text, "ccdiag_probe_status", probe="nvml", status="failed") == 1
    assert value(text, "ccdiag_probe_data_stale", probe="nvml") == 1
    assert value(text, "ccdiag_probe_last_success_timestamp_seconds", probe="nvml") == 1000.0
    assert value(text, "ccdiag_gpu_temperature_celsius", gpu=0) == 41.0  # last good value, still served
    assert value(text, "ccdiag_probe_data_stale", probe="pcie") == 0
    assert value(text, "ccdiag_probe_success", probe="pcie") == 1
    # past max_stale the old values are dropped, the failure stays visible
    text = render(state.advance(C.result(nvml=ProbeRun("nvml", TIMEOUT, 15.0, None, "hung")), completed_at=1101.0))
    assert value(text, "ccdiag_gpu_temperature_celsius", gpu=0) is None
    assert value(text, "ccdiag_probe_status", probe="nvml", status="timeout") == 1
    assert value(text, "ccdiag_probe_last_success_timestamp_seconds", probe="nvml") is None
    # and fresh data replaces it as soon as the probe works again
    text = render(state.advance(C.result(), completed_at=1115.0))
    assert value(text, "ccdiag_gpu_temperature_celsius", gpu=0) == 41.0
    assert value(text, "ccdiag_probe_data_stale", probe="nvml") == 0


def test_xid_counter_never_goes_down_when_records_leave_the_log_buffer():
    from ccdiag.probes.kmsg import KernelEvent, KmsgObservation

    state = CycleState()
    first = render(state.advance(C.result(), completed_at=1.0))
    assert value(first, "ccdiag_gpu_xid_errors_total", gpu=0, xid=79) == 1
    # the same records read again are not counted twice
    again = render(state.advance(C.result(), completed_at=2.0))
    assert value(again, "ccdiag_gpu_xid_errors_total", gpu=0, xid=79) == 1
    # the old record scrolled out, a new XID 79 arrived: 2, not 1
    new = KernelEvent("xid", "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.", 900.0,
                      "0000:18:00.0", 79)
    kmsg = KmsgObservation(events=(new,), lines_scanned=10, source="/dev/kmsg")
    later = render(state.advance(C.result(kmsg=ProbeRun("kmsg", "ok", 0.01, kmsg)), completed_at=3.0))
    assert value(later, "ccdiag_gpu_xid_errors_total", gpu=0, xid=79) == 2
    assert value(later, "ccdiag_gpu_xid_errors_total", gpu=0, xid=13) == 1
    # one-off (textfile) cycles count what the log holds
    one_off = render(cycle_from_result(C.result(kmsg=ProbeRun("kmsg", "ok", 0.01, kmsg)), 1.0))
    assert value(one_off, "ccdiag_gpu_xid_errors_total", gpu=0, xid=79) == 1


def test_collector_serves_age_at_scrape_time_and_caches_the_rest():
    now = [1000.0]
    collector = CycleCollector(interval_s=15.0, clock=lambda: now[0])
    empty = collector.exposition().decode()
    assert value(empty, "ccdiag_collection_cycles_total") == 0
    assert value(empty, "ccdiag_collection_age_seconds") is None
    collector.publish(cycle_from_result(C.result(), completed_at=990.0))
    first = collector.exposition()
    assert first == generate_latest(make_registry(collector))
    assert value(first.decode(), "ccdiag_collection_age_seconds") == 10.0
    now[0] = 1012.5
    assert value(collector.exposition().decode(), "ccdiag_collection_age_seconds") == 22.5
    assert value(first.decode(), "ccdiag_collection_interval_seconds") == 15.0
    assert value(first.decode(), "ccdiag_last_collection_timestamp_seconds") == 990.0
    collector.publish(dataclasses.replace(cycle_from_result(C.result(), completed_at=1010.0)))
    text = collector.exposition().decode()
    assert value(text, "ccdiag_last_collection_timestamp_seconds") == 1010.0
    assert value(text, "ccdiag_collection_cycles_total") == 2


def test_nvlink_traffic_counters_are_exported_in_bytes_per_link_and_omitted_when_unread():
    obs = C.nvml_obs()
    g0 = obs.gpus[0]
    links = (dataclasses.replace(g0.nvlinks[0], tx_bytes=3 * 2**40, rx_bytes=5 * 2**40),
             dataclasses.replace(g0.nvlinks[1], tx_bytes=None, rx_bytes=4096))  # TX field not readable
    obs = dataclasses.replace(obs, gpus=(dataclasses.replace(g0, nvlinks=links),) + obs.gpus[1:])
    text = render(cycle_from_result(C.result(nvml=ProbeRun("nvml", "ok", 0.1, obs)), 1.0))
    ids = dict(gpu=0, UUID="GPU-aaaa", pci_bus_id="00000000:18:00.0")
    assert value(text, "ccdiag_nvlink_transmit_bytes_total", link=0, **ids) == 3 * 2**40
    assert value(text, "ccdiag_nvlink_receive_bytes_total", link=0, **ids) == 5 * 2**40
    assert value(text, "ccdiag_nvlink_receive_bytes_total", link=1, **ids) == 4096
    assert value(text, "ccdiag_nvlink_transmit_bytes_total", link=1) is None
    # the series carry exactly the per-link labels the other NVLink series have
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("ccdiag_nvlink_transmit_bytes", "ccdiag_nvlink_receive_bytes"):
        assert fams[name].type == "counter"
        assert {tuple(sorted(s.labels)) for s in fams[name].samples} == {
            tuple(sorted(S.BY_NAME["ccdiag_nvlink_errors_total"].labels[:-1]))}
    # the plain synthetic case has no traffic read: no series at all, not zeros
    plain = render(cycle_from_result(C.result(), 1.0))
    assert "ccdiag_nvlink_transmit_bytes_total{" not in plain and "ccdiag_nvlink_receive_bytes_total{" not in plain
    assert value(plain, "ccdiag_nvlink_up", gpu=0, link=0) == 1


def test_samples_export_nvlink_traffic_for_every_link_that_answers():
    healthy = (GOLDEN / "healthy.prom").read_text()
    degraded = (GOLDEN / "degraded.prom").read_text()
    tx = [k for k in samples(healthy) if k[0] == "ccdiag_nvlink_transmit_bytes_total"]
    assert len(tx) == 8 * 18
    # degraded: GPU6 is lost to NVML, so its links (and their counters) are not there
    assert {dict(k[1])["gpu"] for k in samples(degraded) if k[0] == "ccdiag_nvlink_receive_bytes_total"} == \
        {str(i) for i in range(8) if i != 6}
    assert all(v > 0 and v % 1024 == 0 for k, v in samples(healthy).items()
               if k[0] in ("ccdiag_nvlink_transmit_bytes_total", "ccdiag_nvlink_receive_bytes_total"))


def test_rendering_asks_each_gpu_for_its_nearest_nics_once():
    """The GPUs each NIC serves come from one pass over the GPUs (GPUs x NICs levels), not one per
    NIC (which made rendering grow with the cube of the node); the exposition is the same."""
    result = C.sample_result(C.HEALTHY)
    topo = result.topology
    calls = []

    class Counting:
        def __getattr__(self, name):
            return getattr(topo, name)

        def nearest_nics(self, gpu):
            calls.append(gpu)
            return topo.nearest_nics(gpu)

    plain = generate_latest(StaticCollector(families(cycle_from_result(result, completed_at=1.0))))
    counted = generate_latest(StaticCollector(families(
        cycle_from_result(dataclasses.replace(result, topology=Counting()), completed_at=1.0))))
    assert counted == plain
    assert sorted(calls) == sorted(g.label for g in topo.gpus())
    assert b"ccdiag_infiniband_nearest_gpu_info" in plain
