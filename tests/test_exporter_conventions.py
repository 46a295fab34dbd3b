"""Exporter conventions: the exporter toolkit's flag names, one pci_bus_id spelling, a lost GPU
keeping its identifying labels, and one status series per check (no one-hot duplicate)."""

from __future__ import annotations

import urllib.error
import urllib.request

import exporter_cases as C
from ccdiag.run.checkrun import evaluate
from ccdiag.exporters.cycle import CycleState, cycle_from_result
from ccdiag.exporters.daemon import Daemon, DaemonConfig, load_config
from ccdiag.host.door import ReplayHost

from test_metrics import render, samples, value


def _result(sample):
    return evaluate(ReplayHost(str(sample)), deadline_s=60)


def test_a_lost_gpu_keeps_its_bus_id_and_last_known_uuid():
    text = render(cycle_from_result(_result(C.DEGRADED), 1.0))
    info = [dict(k[1]) for k in samples(text) if k[0] == "ccdiag_gpu_info" and dict(k[1])["gpu"] == "6"]
    assert info and info[0]["pci_bus_id"] == "00000000:BA:00.0"  # inferred from PCI as the checks do
    assert value(text, "ccdiag_gpu_up", gpu="6", pci_bus_id="00000000:BA:00.0") == 0
    # the daemon remembers the UUID from a cycle when the GPU still answered
    state = CycleState()
    state.advance(_result(C.HEALTHY), completed_at=1.0)
    text = render(state.advance(_result(C.DEGRADED), completed_at=2.0))
    up = [dict(k[1]) for k in samples(text) if k[0] == "ccdiag_gpu_up" and dict(k[1])["gpu"] == "6"]
    assert up[0]["UUID"].startswith("GPU-") and up[0]["pci_bus_id"] == "00000000:BA:00.0"
    xid = [dict(k[1]) for k in samples(text) if k[0] == "ccdiag_gpu_xid_errors_total"]
    assert xid and xid[0]["UUID"] == up[0]["UUID"]  # the XID joins the lost GPU's series


def test_every_pci_bus_id_uses_dcgm_exporters_spelling():
    text = render(cycle_from_result(_result(C.HEALTHY), 1.0))
    ids = {dict(k[1])[label] for k in samples(text) for label in ("pci_bus_id", "remote_pci_bus_id")
           if dict(k[1]).get(label)}
    assert ids and all(len(i) == 16 and i[:8] == "00000000" and i[8] == ":" and i == i.upper() for i in ids), ids


def test_no_one_hot_status_family():
    text = render(cycle_from_result(_result(C.DEGRADED), 1.0))
    assert "ccdiag_check_status" not in text and "ccdiag_check_severity{" in text


def test_exporter_toolkit_flag_names_and_telemetry_path():
    from cli_runner import run

    config = load_config(None, {"listen": "127.0.0.1:0", "telemetry_path": "/gpu-metrics"})
    d = Daemon(config, host=ReplayHost(str(C.HEALTHY)))
    d.start()
    try:
        import time

        end = time.monotonic() + 30
        while not d.ready() and time.monotonic() < end:
            time.sleep(0.05)
        base = d.server.url.rsplit("/", 1)[0]
        assert d.server.url.endswith("/gpu-metrics")
        with urllib.request.urlopen(base + "/gpu-metrics", timeout=10) as resp:
            assert resp.status == 200 and b"ccdiag_gpu_info" in resp.read()
        try:
            urllib.request.urlopen(base + "/metrics", timeout=10)
            raise AssertionError("/metrics should not be served under another telemetry path")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    finally:
        d.stop()
    code, out, err = run("daemon", "--web.listen-address", "not-an-address", "--once", "--replay", str(C.HEALTHY))
    assert code == 2 and "--web.listen-address" in err
    code, out, err = run("daemon", "--web.telemetry-path", "metrics", "--once", "--replay", str(C.HEALTHY))
    assert code == 2 and "--web.telemetry-path" in err
    code, out, err = run("daemon", "--web.config.file", "/nonexistent.yml", "--once", "--replay", str(C.HEALTHY))
    assert code == 2 and "nonexistent" in err
    assert DaemonConfig().telemetry_path == "/metrics"
