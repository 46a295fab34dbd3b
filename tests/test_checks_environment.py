"""Environment checks (NCCL settings, /dev/shm, memlock) on named, synthesized scenarios."""

from __future__ import annotations

from dataclasses import replace

import pytest

import scenarios_fabric as S
from ccdiag.checks import REGISTRY, load_all, run_checks
from ccdiag.checks.environment import ib_hca, memlock, nccl_disable, shm, socket_ifname
from ccdiag.nccl.lists import NcclEntry, parse_nccl_list
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN
from ccdiag.inputs.policy import Policy
from ccdiag.probes.registry import ProbeRun

MIB = 1 << 20


def bad(findings):
    return [f for f in findings if f.status in (FAIL, WARN, UNKNOWN)]


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def test_registered():
    load_all()
    assert {"env.nccl_disable", "env.socket_ifname", "env.ib_hca", "env.shm", "env.memlock"} <= set(REGISTRY)


@pytest.mark.parametrize("text,exclude,exact,entries", [
    ("eth", False, False, [("eth", None)]),
    ("=eth0", False, True, [("eth0", None)]),
    ("=eth0,eth1", False, True, [("eth0", None), ("eth1", None)]),
    ("^docker", True, False, [("docker", None)]),
    ("^=docker0", True, True, [("docker0", None)]),
    ("mlx5", False, False, [("mlx5", None)]),
    ("=mlx5_0:1,mlx5_1:1", False, True, [("mlx5_0", 1), ("mlx5_1", 1)]),
    ("^=mlx5_1,mlx5_4", True, True, [("mlx5_1", None), ("mlx5_4", None)]),
    ("=mlx5_0:1:0:0,mlx5_1:1:0:1", False, True, [("mlx5_0", 1), ("mlx5_1", 1)]),
    ("=mlx5_0::0:0", False, True, [("mlx5_0", None)]),
    # NCCL's parseStringList strips nothing: these names carry their spaces and match no device
    (" mlx5_0 , ,mlx5_1 ", False, False, [(" mlx5_0 ", None), (" ", None), ("mlx5_1 ", None)]),
])
def test_parse_nccl_list(text, exclude, exact, entries):
    spec = parse_nccl_list(text)
    assert (spec.exclude, spec.exact) == (exclude, exact)
    assert [(e.name, e.port) for e in spec.entries] == entries
    assert all(isinstance(e, NcclEntry) for e in spec.entries)


def test_healthy_node_with_sane_settings_has_no_warn_or_fail():
    env = {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
           "NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"}
    findings = run_checks(S.make_ctx(env=env), only=("env.",))
    assert bad(findings) == []
    assert {f.check for f in findings if f.status == PASS} == \
        {"env.nccl_disable", "env.socket_ifname", "env.ib_hca", "env.shm", "env.memlock"}


def test_nothing_set_skips_the_list_checks():
    ctx = S.make_ctx()
    assert only(socket_ifname(ctx)).status == SKIP
    assert only(ib_hca(ctx)).status == SKIP
    assert only(nccl_disable(ctx)).status == PASS


@pytest.mark.parametrize("var", ["NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"])
def test_transport_disabled_warns(var):
    f = only(nccl_disable(S.make_ctx(env={var: "1"})))
    assert (f.check, f.status, f.component.kind, f.component.name) == ("env.nccl_disable", WARN, "env", var)
    assert f.evidence[0].source == "environment"


def test_ib_disable_without_rdma_devices_costs_nothing():
    runs = dict(S.healthy_runs())
    runs["infiniband"] = ProbeRun("infiniband", "unavailable", 0.0, None, "absent")
    assert only(nccl_disable(S.make_ctx(runs, env={"NCCL_IB_DISABLE": "1"}))).status == PASS


@pytest.mark.parametrize("value,status", [
    ("eth9", FAIL),            # no such interface
    ("=eth0", PASS),
    ("eth", PASS),             # prefix: eth0
    ("ib", PASS),              # prefix: ib0..ib7
    ("docker0", FAIL),         # exists but down
    ("=eth0,eth9", FAIL),      # one entry names nothing
    ("^docker,lo", PASS),
    ("^eth,ib", FAIL),         # only docker0 (down) would be left
])
def test_socket_ifname(value, status):
    f = only(socket_ifname(S.make_ctx(env={"NCCL_SOCKET_IFNAME": value})))
    assert (f.check, f.status, f.component.kind, f.component.name) == \
        ("env.socket_ifname", status, "env", "NCCL_SOCKET_IFNAME")
    if status == FAIL and not value.startswith("^"):
        assert "eth0" in f.remedy  # names what would work


def test_socket_ifname_eth9_names_the_missing_interface():
    f = only(socket_ifname(S.make_ctx(env={"NCCL_SOCKET_IFNAME": "eth9"})))
    assert "'eth9' matches no interface" in f.summary


def test_socket_ifname_without_netdev_data_is_unknown():
    runs = dict(S.healthy_runs())
    runs["netdev"] = ProbeRun("netdev", "failed", 0.0, None, "boom")
    assert only(socket_ifname(S.make_ctx(runs, env={"NCCL_SOCKET_IFNAME": "eth0"}))).status == UNKNOWN


@pytest.mark.parametrize("value,status", [
    ("mlx5_9", FAIL),
    ("=mlx5_9", FAIL),
    ("mlx5_0:2", FAIL),                  # no port 2
    ("=mlx5_0:1,mlx5_1", PASS),
    ("mlx5", PASS),
    ("^mlx5", FAIL),                     # excludes every HCA
    ("^=mlx5_0", PASS),
])
def test_ib_hca(value, status):
    f = only(ib_hca(S.make_ctx(env={"NCCL_IB_HCA": value})))
    assert (f.check, f.status, f.component.kind, f.component.name) == ("env.ib_hca", status, "env", "NCCL_IB_HCA")


def test_ib_hca_naming_a_down_port_fails():
    runs = S.edit_port(S.healthy_runs(), "mlx5_2", state="DOWN", phys_state="Polling")
    f = only(ib_hca(S.make_ctx(runs, env={"NCCL_IB_HCA": "=mlx5_2:1,mlx5_3:1"})))
    assert f.status == FAIL and "mlx5_2 port 1 is DOWN" in f.summary


def test_ib_hca_prefix_trap_warns():
    runs = S.healthy_runs()
    ib = runs["infiniband"].data
    extra = replace(ib.devices[0], name="mlx5_10", pci_bdf="0000:f0:00.0", netdevs=("ib10",))
    runs = S.with_data(runs, "infiniband", replace(ib, devices=ib.devices + (extra,)))
    f = only(ib_hca(S.make_ctx(runs, env={"NCCL_IB_HCA": "mlx5_1"})))
    assert f.status == WARN and "mlx5_10" in f.summary
    assert only(ib_hca(S.make_ctx(runs, env={"NCCL_IB_HCA": "=mlx5_1"}))).status == PASS


def test_ib_hca_set_on_node_without_rdma_fails():
    runs = dict(S.healthy_runs())
    runs["infiniband"] = ProbeRun("infiniband", "unavailable", 0.0, None, "absent")
    assert only(ib_hca(S.make_ctx(runs, env={"NCCL_IB_HCA": "mlx5_0"}))).status == FAIL


@pytest.mark.parametrize("size,status", [(64 * MIB, FAIL), (512 * MIB, WARN), (1 << 30, PASS), (None, UNKNOWN)])
def test_shm(size, status):
    f = only(shm(S.make_ctx(S.edit_system(S.healthy_runs(), shm_bytes=size))))
    assert (f.check, f.status, f.component.kind, f.component.name) == ("env.shm", status, "limit", "/dev/shm")
    if size == 64 * MIB:
        assert "Docker default" in f.summary and "--shm-size" in f.remedy


def test_shm_policy_threshold_and_source():
    ctx = S.make_ctx(S.edit_system(S.healthy_runs(), shm_bytes=2 << 30),
                     policy=Policy(min_shm_bytes=8 << 30, source="/etc/ccdiag/fleet.yaml"))
    f = only(shm(ctx))
    assert f.status == WARN and f.expected_source == "policy /etc/ccdiag/fleet.yaml: min_shm_bytes"


@pytest.mark.parametrize("soft,unlimited,status", [
    (64 * 1024, False, FAIL),     # the classic 64 KiB default
    (8 << 30, False, WARN),
    (None, True, PASS),
    (None, None, UNKNOWN),
])
def test_memlock(soft, unlimited, status):
    runs = S.edit_system(S.healthy_runs(), memlock_soft_bytes=soft, memlock_hard_bytes=soft,
                         memlock_unlimited=unlimited)
    f = only(memlock(S.make_ctx(runs)))
    assert (f.check, f.status, f.component.kind) == ("env.memlock", status, "limit")
    if status == FAIL:
        assert "64 KiB" in f.summary and "memlock=-1" in f.remedy


def test_memlock_policy_minimum_and_no_rdma_skip():
    runs = S.edit_system(S.healthy_runs(), memlock_soft_bytes=8 << 30, memlock_unlimited=False)
    assert only(memlock(S.make_ctx(runs, policy=Policy(min_memlock_bytes=1 << 30, source="p"))))\
        .status == PASS
    assert only(memlock(S.make_ctx(runs, policy=Policy(min_memlock_bytes=16 << 30, source="p")))).status == FAIL
    no_ib = dict(runs)
    no_ib["infiniband"] = ProbeRun("infiniband", "unavailable", 0.0, None, "absent")
    assert only(memlock(S.make_ctx(no_ib))).status == SKIP
    empty = S.with_data(runs, "infiniband", replace(runs["infiniband"].data, devices=()))
    assert only(memlock(S.make_ctx(empty))).status == SKIP
