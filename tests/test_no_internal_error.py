"""Inputs that used to end in exit 4 (an internal error) are bad input or a finding now: integers
past Python's 4,300-digit conversion limit in a policy or daemon config, and an RDMA device listing
holding an empty name (``check --json`` and ``topo --json`` built the topology's JSON from it).
The corrupted inputs are synthesized from the bundled healthy sample."""

from __future__ import annotations

import json

import pytest

import exporter_cases as C
from cli_runner import run
from ccdiag.core.exitcodes import ExitCode
from ccdiag.host.snapshot import SnapshotData

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")
HUGE = "9" * 5000


@pytest.mark.parametrize("text", [f"[gpu]\ncount = {HUGE}\n", f"count = {HUGE}\n", f"x = [{HUGE}]\n"])
def test_a_policy_with_a_5000_digit_integer_is_bad_input(tmp_path, text):
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    code, out, err = run("check", "--replay", str(C.HEALTHY), "--policy", str(policy))
    assert code == ExitCode.USAGE, err
    assert "an integer of more than 4300 digits" in err and str(policy) in err


@pytest.mark.parametrize("key", ["interval", "deadline", "max_requests", "unknown"])
def test_a_daemon_config_with_a_5000_digit_integer_is_bad_input(tmp_path, key):
    cfg = tmp_path / "d.toml"
    cfg.write_text(f"{key} = {HUGE}\n")
    code, out, err = run("daemon", "--once", "--config", str(cfg), "--replay", str(C.HEALTHY))
    assert code == ExitCode.USAGE, err
    assert str(cfg) in err and "internal error" not in err


@pytest.fixture
def empty_ib_name(tmp_path):
    from ccdiag.host.door import ReplayHost

    snap = SnapshotData.load(str(C.HEALTHY))
    names = ReplayHost(snap).list_dir("/sys/class/infiniband")
    snap.listings["/sys/class/infiniband"] = ["", *names]
    # "" names the class directory itself: give it the first device's PCI function, so the nameless
    # device reaches the topology (what made its JSON fail)
    host = ReplayHost(snap)
    snap.links["/sys/class/infiniband/device"] = host.realpath(f"/sys/class/infiniband/{names[0]}/device")
    snap.listings["/sys/class/infiniband/ports"] = host.list_dir(f"/sys/class/infiniband/{names[0]}/ports")
    path = tmp_path / "empty-ib-name.snap.tar.gz"
    snap.save(str(path))
    return path


@pytest.mark.parametrize("command", [["check", "--json"], ["topo", "--json"], ["check"]])
def test_an_rdma_listing_with_an_empty_name_is_read_as_an_error(empty_ib_name, command):
    code, out, err = run(*command, "--replay", str(empty_ib_name))
    assert code != ExitCode.INTERNAL and "internal error" not in err, err
    if "--json" in command:
        json.loads(out)


def test_the_empty_name_is_a_read_error_and_the_other_devices_stay():
    from ccdiag.host.door import ReplayHost
    from ccdiag.probes import infiniband

    snap = SnapshotData.load(str(C.HEALTHY))
    names = ReplayHost(snap).list_dir("/sys/class/infiniband")
    snap.listings["/sys/class/infiniband"] = ["", "..", *names]
    obs = infiniband.collect(ReplayHost(snap))
    assert [d.name for d in obs.devices] == names
    assert [e.kind for e in obs.errors if "not a device name" in e.message] == ["invalid", "invalid"]
