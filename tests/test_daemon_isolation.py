"""The daemon cannot be stalled or bloated by what it collects: a pathological parse runs in a
collection child while scrapes are answered, a bad value fails one probe, a reload from a file that
cannot be read keeps the running settings, and a clocks-event mask out of range decodes at once."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import tracemalloc
import urllib.error
import urllib.request

import pytest

import exporter_cases as C
from ccdiag.exporters.daemon import Daemon, DaemonConfig, load_config
from ccdiag.exporters.sanity import bad_value
from ccdiag.host.door import ReplayHost
from ccdiag.host.snapshot import SnapshotData
from test_metrics import value

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")


def fetch(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(pred, timeout: float = 30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"condition not reached within {timeout:.0f}s")


def pathological_host(monkeypatch) -> ReplayHost:
    """The healthy sample, with the ``topo -p2p`` parser made to stall the way a super-linear
    parser did on a pathological legend (fixed since): one C-level regex call with catastrophic
    backtracking, which holds the GIL for as long as it runs. The daemon's collection children are
    forked, so they inherit the stall."""
    import re

    from ccdiag.probes import smi_topo

    def stuck(text, mode=None):
        re.match(r"(\s*)*x", " " * 64)  # exponential backtracking inside one call
        raise AssertionError("unreachable")

    monkeypatch.setattr(smi_topo, "parse_topo_p2p", stuck)
    return ReplayHost(SnapshotData.load(str(C.HEALTHY)))


@pytest.fixture
def daemon():
    started = []

    def start(host, **cfg):
        cfg.setdefault("listen", "127.0.0.1:0")
        cfg.setdefault("interval_s", 600.0)
        d = Daemon(DaemonConfig(**cfg), host=host)
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def test_scrapes_are_answered_while_a_cycle_is_stuck_in_a_pathological_parse(daemon, monkeypatch):
    d = daemon(pathological_host(monkeypatch), deadline_s=3.0)
    assert d.isolate
    # the first cycle is stuck in the parse right now: the endpoint answers anyway. Shown by order,
    # not by a stopwatch: a scrape that waited for the cycle would return after it was published,
    # so some scrape must come back while no cycle has been counted yet
    answered_while_stuck = 0
    for path in ("/metrics", "/-/ready", "/-/healthy") * 5:
        code, _ = fetch(d.server.url.replace("/metrics", path), timeout=5.0)
        assert code in (200, 503), path
        answered_while_stuck += d.collector.cycles_total == 0
    assert answered_while_stuck > 0
    wait_for(d.ready)  # the stuck child was killed at the deadline and the cycle published
    text = fetch(d.server.url)[1]
    assert value(text, "ccdiag_probe_success", probe="smi_topo") == 0
    assert value(text, "ccdiag_probe_status", probe="smi_topo", status="timeout") == 1
    # the next cycle runs the probe that stalled in a child of its own: every other probe is fresh
    n = d.collector.cycles_total
    d.request_cycle()
    answered_while_stuck = 0
    while d.collector.cycles_total == n:
        assert fetch(d.server.url)[0] == 200
        answered_while_stuck += d.collector.cycles_total == n
        time.sleep(0.1)
    assert answered_while_stuck > 0  # the second cycle waits for its stalled child too
    text = fetch(d.server.url)[1]
    assert value(text, "ccdiag_probe_success", probe="smi_topo") == 0
    for probe in ("nvml", "pcie", "system", "infiniband"):
        assert value(text, "ccdiag_probe_success", probe=probe) == 1, probe
        assert value(text, "ccdiag_probe_data_stale", probe=probe) == 0, probe
    assert value(text, "ccdiag_gpu_temperature_celsius", gpu=0) is not None
    assert value(text, "ccdiag_collection_stage_success", stage="checks") == 1


@pytest.mark.parametrize("bad", ["abc", float("inf"), float("nan"), 1 << 80])
def test_a_bad_value_fails_that_probe_not_the_cycle(daemon, monkeypatch, bad):
    import ccdiag.probes.nvml as nvml_probe

    d = daemon(ReplayHost(str(C.HEALTHY)))
    wait_for(d.ready)
    good = fetch(d.server.url)[1]
    watts = value(good, "ccdiag_gpu_power_usage_watts", gpu=0)
    real = nvml_probe.collect

    def poisoned(host):
        obs = real(host)
        gpu0 = dataclasses.replace(obs.gpus[0], power_w=bad)
        return dataclasses.replace(obs, gpus=(gpu0,) + tuple(obs.gpus[1:]))

    monkeypatch.setattr(nvml_probe, "collect", poisoned)
    d.restart_collection()  # the patch reaches the cycles' children through a fresh fork
    n = d.collector.cycles_total
    d.request_cycle()
    wait_for(lambda: d.collector.cycles_total > n)
    assert d.last_error is None
    code, text = fetch(d.server.url)
    assert code == 200 and fetch(d.server.url.replace("/metrics", "/-/ready"))[0] == 200
    assert value(text, "ccdiag_probe_success", probe="nvml") == 0
    assert value(text, "ccdiag_probe_status", probe="nvml", status="failed") == 1
    assert value(text, "ccdiag_probe_data_stale", probe="nvml") == 1
    assert value(text, "ccdiag_gpu_power_usage_watts", gpu=0) == watts  # the last good value
    for probe in ("pcie", "system", "infiniband", "kmsg"):
        assert value(text, "ccdiag_probe_success", probe=probe) == 1


def test_bad_value_names_where_and_what():
    @dataclasses.dataclass(frozen=True)
    class Port:
        rate_gbit_s: float | None = None
        name: str | None = None

    @dataclasses.dataclass(frozen=True)
    class Obs:
        ports: tuple = ()

    assert bad_value(Obs((Port(100.0, "x"),))) is None
    assert bad_value(Obs((Port(100.0), Port("abc")))) == "ports[1].rate_gbit_s: not a number ('abc')"
    assert "non-finite" in bad_value(Obs((Port(float("-inf")),)))


# -- files the daemon reads --------------------------------------------------------------------
@pytest.mark.parametrize("setting", ["config", "policy", "web_config"])
def test_a_reload_from_dev_zero_is_refused_fast_with_bounded_memory_and_keeps_the_settings(
        tmp_path, caplog, setting):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 600\n")
    target = tmp_path / "target"
    target.symlink_to("/dev/zero")
    overrides = {"listen": "127.0.0.1:0"}
    config = load_config(str(cfg), overrides)
    d = Daemon(config, reload_config=lambda: load_config(str(cfg), overrides), host=ReplayHost(str(C.HEALTHY)))
    try:
        if setting == "config":
            cfg.unlink()
            cfg.symlink_to("/dev/zero")
        else:
            cfg.write_text(f"interval = 300\n{setting} = {str(target)!r}\n".replace("'", '"'))
        tracemalloc.start()
        t0 = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="ccdiag.daemon"):
            assert d.reload() is False
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert took < 5.0 and peak < 16 << 20
        assert "reload failed" in caplog.text and "keeping the running configuration" in caplog.text
        assert d.config is config and d.collector.interval_s == 600.0
        assert d.run_cycle() is True
    finally:
        d.stop()


def test_a_fifo_config_does_not_block_a_reload(tmp_path, caplog):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 600\n")
    overrides = {"listen": "127.0.0.1:0"}
    d = Daemon(load_config(str(cfg), overrides), reload_config=lambda: load_config(str(cfg), overrides),
               host=ReplayHost(str(C.HEALTHY)))
    try:
        cfg.unlink()
        os.mkfifo(cfg)
        done = []
        t = threading.Thread(target=lambda: done.append(d.reload()), daemon=True)
        t.start()
        t.join(5.0)
        assert done == [False]
    finally:
        d.stop()


# -- clocks-event reasons ----------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [-1, -(1 << 200), 1 << 100, (1 << 64) - 1])
def test_clocks_event_mask_out_of_range_decodes_in_bounded_time(mask):
    from ccdiag.probes.nvml import clock_event_names

    out = []
    t = threading.Thread(target=lambda: out.append(clock_event_names(mask)), daemon=True)
    t.start()
    t.join(5.0)
    assert out, "decoding did not return"
    assert len(out[0]) <= 64 and len(set(out[0])) == len(out[0])


def test_a_negative_clocks_event_value_from_nvml_is_read_as_unsigned():
    from ccdiag.run.checkrun import evaluate

    snap = SnapshotData.load(str(C.HEALTHY))
    for rec in snap.nvml:
        if rec["call"] == ["nvmlDeviceGetCurrentClocksEventReasons", 0] and "ok" in rec:
            rec["ok"] = -1
    t0 = time.monotonic()
    result = evaluate(ReplayHost(snap), deadline_s=20.0)
    assert time.monotonic() - t0 < 15.0
    gpu0 = next(g for g in result.runs["nvml"].data.gpus if g.index == 0)
    assert gpu0.clock_event_reasons == (1 << 64) - 1
    assert "hw_slowdown" in gpu0.clock_event_names and len(gpu0.clock_event_names) == 64


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_tls_file_that_is_a_device_or_a_fifo_is_refused_at_once(tmp_path, target):
    from ccdiag.exporters.webconfig import WebConfigError, load_web_config

    if target == "fifo":
        target = str(tmp_path / "cert.pem")
        os.mkfifo(target)
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {target}\n  key_file: {target}\n")
    out = []

    def load():
        try:
            load_web_config(str(cfg))
        except WebConfigError as exc:
            out.append(str(exc))

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(5.0)
    assert out and "not a regular file" in out[0] and "cert_file" in out[0]


def test_frames_sent_from_several_threads_of_the_child_arrive_whole():
    """Probes run on threads of their own in the collection child: large frames written at once,
    against a slow reader, must arrive whole and in one piece each."""
    import os as _os
    import threading as _threading

    from ccdiag.exporters import isolation

    r, w = _os.pipe()
    job = isolation.Job(pid=_os.getpid(), fd=r)
    payloads = [("p%d" % i, bytes([65 + i]) * (1_000_000 + i)) for i in range(12)]
    threads = [_threading.Thread(target=isolation._send, args=(w, "probe", p)) for p in payloads]
    reader_done = _threading.Event()

    def read():
        while len(job.runs) < len(payloads) and job.error is None:
            job_data = _os.read(r, 1 << 12)  # a slow reader: writers wait on a full pipe
            time.sleep(0.0002)
            if not job_data:
                break
            isolation._feed(job, job_data)
        reader_done.set()

    rt = _threading.Thread(target=read)
    rt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader_done.wait(10)
    _os.close(w)
    _os.close(r)
    assert job.error is None
    assert sorted(job.runs) == sorted(p[0] for p in payloads)
