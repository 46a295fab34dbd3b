"""Drift from a known-good set: ``policy init`` records a node class's versions, ``check --policy``
names every value of a node that differs from its machine type's set, ``compare`` every host of a
machine type that differs, each with both values. The reports are the bundled samples' real ones
(replayed snapshots), edited where a test needs a node that drifted (SYNTHESIZED edits: a version
string changed, as an upgrade left behind would change it)."""

from __future__ import annotations

import copy
import json

import pytest

from ccdiag.cluster.drift import DriftFleet, flat
from ccdiag.inputs.knowngood import KnownGood, differences, parse, pick, to_toml
from ccdiag.inputs.policy import PolicyError, parse_policy, to_toml as policy_toml
from cli_runner import run
from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
H100 = "8x NVIDIA H100 80GB HBM3"
SET = KnownGood(H100, {"driver": "570.133.20", "cuda": "12.8", "vbios": ["96.00.51.00.0E"],
                       "connectx_firmware": {"MT4129": "28.41.1000"}, "nccl": "2.21.5", "nccl_net_plugin": [],
                       "kernel": "5.15.0-131-generic", "nccl_env": {"NCCL_IB_HCA": "=mlx5_0"}})


# -- the set, its file form and the comparison ---------------------------------------------------------------
def test_a_set_survives_its_toml_and_two_types_live_in_one_policy():
    from ccdiag.inputs.policy import DEFAULT_POLICY
    import dataclasses

    a100 = KnownGood("8x NVIDIA A100-SXM4-80GB", {"driver": "550.54.15"}, "fail")
    policy = dataclasses.replace(DEFAULT_POLICY, known_good=(SET, a100))
    back = parse_policy(policy_toml(policy), "fleet.toml")
    assert back.known_good == (SET, a100)
    assert pick(back.known_good, H100) == SET and pick(back.known_good, "4x L40S") is None
    assert pick((KnownGood(None, {"driver": "1"}),), "anything").values == {"driver": "1"}


def test_every_difference_is_named_with_both_values():
    found = {"driver": "570.124.06", "cuda": "12.8", "vbios": ["96.00.51.00.0E", "96.00.61.00.01"],
             "connectx_firmware": {"MT4129": "28.39.1002", "MT4123": "20.35.1012"}, "nccl_net_plugin": [],
             "kernel": "5.15.0-131-generic", "nccl_env": {}}
    diffs = {d.key: d for d in differences(SET, found)}
    assert (diffs["driver"].expected, diffs["driver"].found) == ("570.133.20", "570.124.06")
    assert diffs["vbios"].found == ["96.00.51.00.0E", "96.00.61.00.01"]
    assert (diffs["connectx_firmware.MT4129"].expected, diffs["connectx_firmware.MT4129"].found) == \
        ("28.41.1000", "28.39.1002")
    assert diffs["connectx_firmware.MT4123"].expected is None  # a model the set does not name
    assert diffs["nccl_env.NCCL_IB_HCA"].found is None
    assert diffs["nccl"].unread and diffs["nccl"].found is None  # not read on the node: unknown, not a match
    assert "cuda" not in diffs and "kernel" not in diffs


@pytest.mark.parametrize("text, said", [
    ('[[known_good]]\nmachine_type = "x"\ndriverr = "1"', "unknown key known_good.driverr"),
    ('[[known_good]]\nmachine_type = "x"\nvbios = "96.00"', "known_good.vbios must be a list of strings"),
    ('[[known_good]]\nmachine_type = "x"\non_drift = "drain"', 'on_drift must be "warn" or "fail"'),
    ('[[known_good]]\nmachine_type = "x"\n[[known_good]]\nmachine_type = "x"', "two known_good sets for machine type 'x'"),
    ('known_good = 3', "known_good must be a table"),
])
def test_a_bad_set_is_refused_naming_the_file(text, said):
    with pytest.raises(PolicyError) as exc:
        parse_policy(text, "fleet.toml")
    assert str(exc.value).startswith("fleet.toml") and said in str(exc.value)


def test_the_toml_names_what_was_not_read_as_a_comment():
    text = "\n".join(to_toml((KnownGood(None, {"driver": "570.133.20"}),)))
    assert "# machine_type = (not read" in text and "# vbios = (not read on this node" in text
    (back,) = parse_policy(text, "p.toml").known_good
    assert back.machine_type is None and back.values == {"driver": "570.133.20"}
    assert parse([{"driver": "1"}], "p")[0].values == {"driver": "1"}


# -- policy init and check --policy on the sample -----------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet_policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "fleet.toml"
    code, _, err = run("policy", "init", "--replay", str(HEALTHY), "-o", str(path))
    assert code == 0, err
    return path


@pytest.mark.slow  # replays the sample three times
def test_policy_init_records_the_class_and_check_names_what_drifted(fleet_policy, tmp_path):
    policy = parse_policy(fleet_policy.read_text(), str(fleet_policy))
    (known,) = policy.known_good
    assert known.machine_type == H100 and known.values["driver"] == "570.133.20"
    assert known.values["vbios"] == ["96.00.51.00.0E"] and known.values["connectx_firmware"] == {"MT4129": "28.41.1000"}
    assert known.values["kernel"] == "5.15.0-131-generic" and known.values["cuda"] == "12.8"
    code, out, _ = run("check", "--replay", str(HEALTHY), "--policy", str(fleet_policy), "--only", "drift", "--json")
    doc = json.loads(out)
    assert code == 0 and [f["status"] for f in doc["findings"]] == ["pass"]
    # the fleet moved on: the set names a newer driver and firmware; this node is behind
    drifted = tmp_path / "moved.toml"
    drifted.write_text(fleet_policy.read_text().replace('driver = "570.133.20"', 'driver = "580.65.06"')
                       .replace('MT4129 = "28.41.1000"', 'MT4129 = "28.45.1020"'))
    code, out, _ = run("check", "--replay", str(HEALTHY), "--policy", str(drifted), "--only", "drift", "--json")
    found = {f["subject"]: f for f in json.loads(out)["findings"]}
    assert code == 0 and set(found) == {"driver", "connectx_firmware.MT4129"}
    assert found["driver"]["status"] == "warn" and "driver 570.133.20 differs from the known-good 580.65.06" in \
        found["driver"]["summary"]
    assert found["connectx_firmware.MT4129"]["details"]["found"] == "28.41.1000"
    # on_drift = "fail": a failure that drains
    failing = tmp_path / "strict.toml"
    failing.write_text(drifted.read_text().replace('on_drift = "warn"', 'on_drift = "fail"'))
    code, out, _ = run("check", "--replay", str(HEALTHY), "--policy", str(failing), "--only", "drift", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"]["action"] == "drain" and doc["verdict"]["reason"].startswith("ccdiag: drain drift.known_good")
    # another machine type's set only: no verdict on versions, said so
    other = tmp_path / "other.toml"
    other.write_text(fleet_policy.read_text().replace(f'machine_type = "{H100}"', 'machine_type = "8x NVIDIA B200"'))
    code, out, _ = run("check", "--replay", str(HEALTHY), "--policy", str(other), "--only", "drift", "--json")
    (f,) = json.loads(out)["findings"]
    assert code == 3 and f["status"] == "unknown" and "no known-good set for this node's machine type" in f["summary"]


# -- compare: per machine type ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def healthy_doc():
    code, out, err = run("check", "--replay", str(HEALTHY), "--json")
    return json.loads(out)


def _host(doc: dict, name: str, *, gpu: str | None = None, driver: str | None = None, vbios: str | None = None) -> dict:
    d = copy.deepcopy(doc)
    d["host"]["hostname"] = name
    nvml = d["probes"]["nvml"]["data"]
    if gpu:
        for g in nvml["gpus"]:
            g["name"] = gpu
    if driver:
        nvml["driver_version"] = driver
    if vbios:
        nvml["gpus"][3]["vbios_version"] = vbios
    return d


@pytest.mark.slow  # replays the sample, compares a dozen reports twice
def test_compare_names_each_host_apart_within_its_machine_type(healthy_doc, tmp_path, fleet_policy):
    a100 = "NVIDIA A100-SXM4-80GB"
    hosts = [_host(healthy_doc, f"h{i}") for i in range(6)]
    hosts[2] = _host(healthy_doc, "h2", vbios="96.00.61.00.01")  # one board flashed differently
    # three A100 nodes on an older driver than the H100s: no drift for that, they are another type;
    # one of them is behind its own type
    hosts += [_host(healthy_doc, f"a{i}", gpu=a100, driver="550.54.15") for i in range(3)]
    hosts[-1] = _host(healthy_doc, "a2", gpu=a100, driver="535.104.05")
    for d in hosts:
        (tmp_path / f"{d['host']['hostname']}.json").write_text(json.dumps(d))
    code, out, _ = run("compare", str(tmp_path), "--json", "--limit", "200")
    drifts = json.loads(out)["drift"]
    assert code == 1
    by = {(d["machine_type"], d["key"], tuple(d["hosts"])): d for d in drifts}
    vb = by[(H100, "vbios", ("h2",))]
    assert vb["value"] == "96.00.51.00.0E, 96.00.61.00.01" and vb["expected"] == "96.00.51.00.0E"
    assert vb["basis"] == "the majority of its 6 hosts"
    dr = by[(f"8x {a100}", "driver", ("a2",))]
    assert (dr["value"], dr["expected"]) == ("535.104.05", "550.54.15")
    assert not any(d["key"] == "driver" and d["machine_type"] == H100 for d in drifts)
    # with the policy, the H100s are held to the known-good set: all six are apart from a newer driver
    moved = tmp_path.parent / "moved.toml"
    moved.write_text(fleet_policy.read_text().replace('driver = "570.133.20"', 'driver = "580.65.06"'))
    code, out, _ = run("compare", str(tmp_path), "--policy", str(moved))
    assert code == 1 and f"{H100}: driver: h0, h1, h2, h3, h4, h5 has '570.133.20'; the known-good set of {H100}: '580.65.06'" \
        in " ".join(out.split())


def test_a_type_without_majority_names_each_value():
    fleet = DriftFleet()
    base = {"probes": {"nvml": {"data": {"driver_version": "1", "gpus": [{"name": "G"}]}}}}
    for host, drv in (("x", "1"), ("y", "2")):
        d = copy.deepcopy(base)
        d["probes"]["nvml"]["data"]["driver_version"] = drv
        fleet.add_report(d, host)
    (split,) = [d for d in fleet.drifts() if d["key"] == "driver"]
    assert split["kind"] == "no majority" and set(split["values"]) == {"1", "2"}
    assert flat("connectx_firmware", {"b": "2", "a": "1"}) == "a=1 b=2" and flat("vbios", None) == "(not read)"
