"""One way to read a node: the probe registry, every probe list derived from it, observe() and the
host door's Host protocol."""

from __future__ import annotations

import pathlib
import sys
import threading
import time

import pytest

import ccdiag.probes
from ccdiag.host import inflight
from ccdiag.probes import registry
from ccdiag.host.door import Host, LiveHost, ReplayHost
from ccdiag.run.observe import observe

SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples"
HEALTHY = SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz"


def test_every_probe_list_derives_from_the_registry():
    from ccdiag.commands.nccl import NCCL_PROBES
    from ccdiag.commands.policy import POLICY_PROBES
    from ccdiag.commands.topo import topology_probes
    from ccdiag.exporters.daemon import DaemonConfig

    names = tuple(s.name for s in registry.registry())
    assert names == registry.ALL_PROBES == registry.all_probes()
    assert set(names) == {"system", "pcie", "nvml", "infiniband", "netdev", "kmsg", "smi_topo", "platform"}
    assert registry.counter_probes() == tuple(s.name for s in registry.registry() if s.counters)
    assert set(registry.resampled_probes()) == set(registry.counter_probes()) | {registry.PROBE_KMSG}
    assert DaemonConfig().probes == names
    assert set(topology_probes()) == set(names) - {registry.PROBE_KMSG}
    assert set(NCCL_PROBES) <= set(names) and set(POLICY_PROBES) <= set(names)
    for spec in registry.registry():
        assert spec.what and spec.timeout_s > 0
        assert sys.modules[spec.module].NAME == spec.name


def test_the_snapshot_command_offers_every_registered_probe():
    from ccdiag.commands.snapshot import command

    choice = next(p for p in command.params if p.name == "probes").type
    assert tuple(choice.choices) == registry.all_probes()


@pytest.fixture
def toy_probe(tmp_path, monkeypatch):
    """A probe module dropped into a folder of the ``ccdiag.probes`` package, and nothing else."""
    (tmp_path / "uptime_toy.py").write_text(
        '"""Seconds since boot (a probe added as one file)."""\n'
        "from ccdiag.probes.registry import probe\n"
        'NAME = "uptime_toy"\n'
        "TIMEOUT_S = 2.0\n"
        '@probe(order=99, what="seconds since boot")\n'
        "def collect(host):\n"
        '    return float(host.read_attr("/proc/uptime").split()[0])\n')
    monkeypatch.setattr(ccdiag.probes, "__path__", [*ccdiag.probes.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_discovered", False)
    yield "uptime_toy"
    sys.modules.pop("ccdiag.probes.uptime_toy", None)


def test_a_probe_is_one_file(toy_probe):
    assert registry.all_probes()[-1] == toy_probe
    assert registry.probe_what(toy_probe) == "seconds since boot"
    obs = observe(LiveHost("/"), [toy_probe, registry.PROBE_SYSTEM], time.monotonic() + 10)
    assert obs.runs[toy_probe].status == "ok" and obs.runs[toy_probe].data > 0


def test_the_three_faces_of_the_door_are_hosts(tmp_path):
    for host in (LiveHost(str(tmp_path)), ReplayHost(str(HEALTHY))):
        assert isinstance(host, Host)
        assert host.deadline is None


def test_observe_reads_builds_and_closes_once():
    closed = []

    class Counting(ReplayHost):
        def close(self) -> None:
            closed.append(True)

    host = Counting(str(HEALTHY))
    obs = observe(host, None, time.monotonic() + 30, close=True)
    assert set(obs.runs) == set(registry.all_probes())
    assert "topology" not in obs.__dict__  # built when first asked for
    assert [g.label for g in obs.topology.gpus()] == [f"GPU{i}" for i in range(8)]
    assert obs.topology is obs.topology
    assert closed == [True]
    assert obs.meta["hostname"] and host.deadline is not None


def test_the_door_says_what_a_thread_waits_in(tmp_path):
    """A command still running is announced by the door, and withdrawn when it ends."""
    host = LiveHost("/")  # commands run live only (under a root nothing runs)
    started = threading.Event()
    seen: list[str | None] = []

    def work() -> None:
        started.set()
        host.run(["sleep", "0.5"], timeout=5)

    t = threading.Thread(target=work)
    t.start()
    started.wait(5)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not seen:
        seen = [x for x in [inflight.doing(t.ident)] if x]
        time.sleep(0.01)
    t.join(5)
    assert seen == ["command `sleep 0.5`"]
    assert inflight.doing(t.ident) is None
