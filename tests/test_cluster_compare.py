"""``ccdiag compare``: outliers without a baseline, streaming aggregates, two-report diff."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from ccdiag.cli import cli
from ccdiag.cluster import compare
from cli_runner import run
from conftest import REPO


@pytest.fixture(scope="module")
def healthy_doc():
    r = CliRunner().invoke(cli, ["check", "--replay", str(REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"),
                                 "--json"])
    return json.loads(r.output)


def _fleet(tmp_path, base, n=12):
    for i in range(n):
        d = copy.deepcopy(base)
        d["host"]["hostname"] = f"node{i:02d}"
        gpus = d["probes"]["nvml"]["data"]["gpus"]
        gpus[0]["temperature_c"] = 33.0 + (i % 5)  # ordinary spread
        if i == 7:
            d["probes"]["nvml"]["data"]["driver_version"] = "550.54.15"
            gpus[0]["temperature_c"] = 85.0
        (tmp_path / f"node{i:02d}.json").write_text(json.dumps(d))
    return tmp_path


def test_outliers_name_the_odd_host_only(tmp_path, healthy_doc):
    fleet = compare.scan([str(_fleet(tmp_path, healthy_doc))])
    assert fleet.hosts == 12
    outs = fleet.outliers()
    assert {h for o in outs for h in o["hosts"]} == {"node07"}
    keys = {o["key"] for o in outs}
    assert "driver_version" in keys and "gpu0 temperature_c" in keys


def test_memory_per_key_is_bounded():
    agg = compare.KeyAgg()
    import random

    rng = random.Random(1)
    for i in range(20000):
        agg.add(rng.random() * 100, f"h{i}", rng)
    assert len(agg.reservoir) <= compare.RESERVOIR and len(agg.low) <= compare.KEEP_HOSTS
    assert len(agg.high) <= compare.KEEP_HOSTS and not agg.nums
    text = compare.KeyAgg()
    for i in range(5000):  # noqa: B007
        text.add("same" if i else "odd", f"h{i}", rng)
    assert all(len(v) <= compare.KEEP_TEXT_HOSTS for v in text.text_hosts.values())


def test_cli_fleet_and_diff_and_bad_input(tmp_path, healthy_doc):
    d = _fleet(tmp_path, healthy_doc)
    code, out, err = run("compare", str(d))
    assert code == 1 and "node07" in out and "driver_version" in out
    code, out, err = run("compare", str(d / "node00.json"), str(d / "node07.json"), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["kind"] == "compare.diff"
    assert {"key": "driver_version", "a": "570.133.20", "b": "550.54.15"} in doc["differences"]
    (d / "broken.json").write_text("{not json")
    code, out, err = run("compare", str(d))
    assert code == 2 and "broken.json" in out and "node07" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run("compare", str(empty))
    assert code == 2 and "no reports" in err and "Traceback" not in err


def test_a_uniform_fleet_has_no_outliers(tmp_path, healthy_doc):
    for i in range(5):
        d = copy.deepcopy(healthy_doc)
        d["host"]["hostname"] = f"n{i}"
        (tmp_path / f"n{i}.json").write_text(json.dumps(d))
    assert compare.scan([str(tmp_path)]).outliers() == []
