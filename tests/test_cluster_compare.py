"""``ccdiag compare``: outliers without a baseline, streaming aggregates, two-report diff."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from ccdiag.commands.cli import cli
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
    # the outlier decides (exit 1) whatever else is wrong; the unreadable file is still named
    assert code == 1 and "broken.json" in out and "node07" in out
    (d / "node07.json").unlink()
    code, out, err = run("compare", str(d))
    assert code == 2 and "broken.json" in out
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


def _malformed(base: dict) -> dict[str, object]:
    """Twenty documents that are not usable check reports (SYNTHESIZED from a real report by
    breaking one thing each), by file name."""
    def broken(path: list, value):
        d = copy.deepcopy(base)
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        return d

    deep = "[" * 100000 + "]" * 100000  # as text: json.dumps itself could not write it
    return {
        "findings-a-string.json": broken(["findings"], "all good"),
        "findings-items-numbers.json": broken(["findings"], [1, 2, 3]),
        "probes-a-list.json": broken(["probes"], []),
        "host-a-number.json": broken(["host"], 5),
        "verdict-a-string.json": broken(["verdict"], "ok"),
        "gpus-an-object.json": broken(["probes", "nvml", "data", "gpus"], {"0": {"name": "x"}}),
        "gpu-a-string.json": broken(["probes", "nvml", "data", "gpus"], ["GPU0"]),
        "nvml-data-a-list.json": broken(["probes", "nvml", "data"], [1]),
        "topology-a-string.json": broken(["topology"], "none"),
        "tool-missing.json": {k: v for k, v in base.items() if k != "tool"},
        "kind-bench.json": broken(["kind"], "bench"),
        "schema-version-a-list.json": broken(["schema_version"], [1]),
        "deep-nesting.json": deep,
        "top-level-list.json": [base],
        "top-level-number.json": 42,
        "cluster-report.json": {"kind": "cluster.check", "hosts": {}, "findings": []},
        "pairs-report.json": {"kind": "bench.pairs", "matrix_gbyte_s": [[None]]},
        "empty-object.json": {},
        "not-json.json": "{not json",
        "binary.json": b"\x00\xff\xfe\x00garbage",
    }


def test_malformed_reports_are_each_named_and_the_rest_compared(tmp_path, healthy_doc):
    d = _fleet(tmp_path, healthy_doc, n=8)
    bad = _malformed(healthy_doc)
    for name, doc in bad.items():
        p = d / name
        if isinstance(doc, bytes):
            p.write_bytes(doc)
        elif isinstance(doc, str):
            p.write_text(doc)
        else:
            p.write_text(json.dumps(doc))
    code, out, err = run("compare", str(d), "--json")
    assert code == 1, err[-2000:]  # node07's odd driver decides; every bad file is still named
    assert "Traceback" not in err and "internal error" not in err
    doc = json.loads(out)
    assert doc["reports"] == 8
    named = " ".join(doc["unreadable"])
    assert all(name in named for name in bad), [n for n in bad if n not in named]
    # the others are still compared: node07's odd driver is named
    assert any(o["key"] == "driver_version" for o in doc["outliers"])
    code, out, err = run("compare", str(d / "node00.json"), str(d / "kind-bench.json"))
    assert code == 2 and "kind-bench.json" in err and "not a ccdiag check report" in err


def test_a_device_or_a_fifo_is_refused_like_every_other_input(tmp_path, healthy_doc):
    import os

    d = _fleet(tmp_path, healthy_doc, n=3)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    code, out, err = run("compare", str(d / "node00.json"), str(d / "node01.json"), "/dev/zero", str(fifo))
    assert code == 2 and "/dev/zero" in out + err and "fifo.json" in out + err
    assert "not a regular file" in out + err


def test_integer_noise_and_momentary_readings_do_not_fail_a_small_healthy_fleet(tmp_path, healthy_doc):
    """Three healthy hosts agreeing exactly except by one unit here and there (MAD 0): no outlier
    that fails. A GPU much hotter than the rest is reported, as a momentary reading."""
    for i in range(3):
        d = copy.deepcopy(healthy_doc)
        d["host"]["hostname"] = f"n{i}"
        g = d["probes"]["nvml"]["data"]["gpus"]
        g[0]["temperature_c"] = 35.0 + (1.0 if i == 2 else 0.0)
        g[1]["power_w"] = 70.0 + (2.0 if i == 1 else 0.0)
        g[2]["pcie_gen_current"] = 1 if i == 0 else 5  # idle GPUs drop their link generation
        if i == 2:
            g[3]["temperature_c"] = 80.0
        (tmp_path / f"n{i}.json").write_text(json.dumps(d))
    code, out, err = run("compare", str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 0, doc["outliers"]
    assert [o["key"] for o in doc["outliers"]] == ["gpu3 temperature_c"]
    assert doc["outliers"][0]["gating"] is False


def test_any_json_number_is_read_and_a_reading_beyond_a_float_is_an_outlier_never_a_nan(tmp_path, healthy_doc):
    """JSON allows 1e400 and a 400-digit integer; Python's float does not. Both are read, named as
    outliers by their literal text, and no NaN or infinity reaches the output (SYNTHESIZED broken
    readings in copies of a real report)."""
    for i in range(5):
        d = copy.deepcopy(healthy_doc)
        d["host"]["hostname"] = f"n{i}"
        (tmp_path / f"n{i}.json").write_text(json.dumps(d))
    text = (tmp_path / "n1.json").read_text()
    gpus = json.loads(text)["probes"]["nvml"]["data"]["gpus"]
    t0 = json.dumps(gpus[0]["temperature_c"])
    assert text.count(f'"temperature_c": {t0}') >= 1
    (tmp_path / "n1.json").write_text(text.replace(f'"temperature_c": {t0}', '"temperature_c": 1e400', 1))
    (tmp_path / "n3.json").write_text((tmp_path / "n3.json").read_text().replace(
        f'"temperature_c": {t0}', '"temperature_c": 1' + "0" * 400, 1))
    for extra in ([], ["--json"]):
        code, out, err = run("compare", str(tmp_path), *extra)
        assert code == 1, out + err
        assert "nan" not in out.lower() and "infinity" not in out.lower() and " inf" not in out.lower(), out
        assert "Traceback" not in err
    doc = json.loads(out)
    odd = {(o["hosts"][0], o["key"]) for o in doc["outliers"]}
    assert {("n1", "gpu0 temperature_c"), ("n3", "gpu0 temperature_c")} <= odd
    assert {h for o in doc["outliers"] for h in o["hosts"]} == {"n1", "n3"}
    # two reports: the diff names it too
    code, out, err = run("compare", str(tmp_path / "n0.json"), str(tmp_path / "n1.json"))
    assert code == 1 and "1e400" in out and "nan" not in out.lower()
    # NaN is not JSON: one line naming the file
    (tmp_path / "n4.json").write_text((tmp_path / "n4.json").read_text().replace(
        f'"temperature_c": {t0}', '"temperature_c": NaN', 1))
    code, out, err = run("compare", str(tmp_path / "n0.json"), str(tmp_path / "n4.json"))
    assert code == 2 and "n4.json" in err and "NaN" in err and "Traceback" not in err


@pytest.mark.parametrize("path, value", [
    (["probes", "infiniband", "data", "devices"], "mlx5_0"),
    (["probes", "infiniband", "data", "devices"], ["mlx5_0"]),
    (["probes", "infiniband", "data", "devices", 0, "ports"], {"1": "ACTIVE"}),
    (["probes", "infiniband", "data", "devices", 0, "ports"], [1]),
    (["probes", "infiniband", "data", "devices", 0, "ports", 0, "gids"], "fe80::1"),
    (["probes", "infiniband", "data", "devices", 0, "ports", 0, "rate_gbit_s"], "400"),
    (["probes", "netdev", "data", "interfaces"], {"eth0": 1500}),
    (["probes", "netdev", "data", "interfaces", 0, "mtu"], [1500]),
    (["topology", "links"], {"a": 1}),
    (["topology", "links"], ["pcie"]),
    (["probes", "nvml", "data", "gpus", 0, "power_w"], "70 W"),
    (["findings", 0, "status"], {"s": 1}),
])
def test_a_field_of_the_wrong_type_is_that_report_named_never_an_internal_error(tmp_path, healthy_doc, path, value):
    """compare reads every field by its type: each of these (SYNTHESIZED by breaking one field of a
    real report) is that one report named with the field's path, exit 2 in a fleet, never exit 4."""
    for i in range(3):
        d = copy.deepcopy(healthy_doc)
        d["host"]["hostname"] = f"n{i}"
        if i == 1:
            node = d
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
        (tmp_path / f"n{i}.json").write_text(json.dumps(d))
    code, out, err = run("compare", str(tmp_path), "--json")
    assert code == 2, (out, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err
    doc = json.loads(out)
    assert doc["reports"] == 2 and len(doc["unreadable"]) == 1 and "n1.json" in doc["unreadable"][0]
    code, out, err = run("compare", str(tmp_path / "n0.json"), str(tmp_path / "n1.json"))
    assert code == 2 and "n1.json" in err and "Traceback" not in err


def test_a_report_whose_nvml_data_is_null_is_never_passed(tmp_path, healthy_doc):
    """A host whose NVML probe delivered nothing (no driver, the probe failed) among hosts with GPU
    data differs from them (exit 1, named); a fleet where no report has GPU data compared nothing
    of its GPUs (exit 3); the diff of two such reports the same."""
    for i in range(4):
        d = copy.deepcopy(healthy_doc)
        d["host"]["hostname"] = f"n{i}"
        if i == 2:
            d["probes"]["nvml"]["data"] = None
        (tmp_path / f"n{i}.json").write_text(json.dumps(d))
    code, out, err = run("compare", str(tmp_path))
    assert code == 1 and "gpu_data: n2 has 'missing'" in out, out
    none = tmp_path / "none"
    none.mkdir()
    for i in range(3):
        d = copy.deepcopy(healthy_doc)
        d["host"]["hostname"] = f"m{i}"
        d["probes"]["nvml"]["data"] = None
        (none / f"m{i}.json").write_text(json.dumps(d))
    code, out, err = run("compare", str(none))
    assert code == 3 and "no GPU data" in out and "m0" in out, out
    code, out, err = run("compare", str(none / "m0.json"), str(none / "m1.json"))
    assert code == 3 and "no GPU data" in out
