"""``cluster check`` compares each host's NCCL recommendation and names the hosts that differ.

Data: the bundled samples (``samples/README.md``: SYNTHESIZED from facts in real outputs of the
corpus, not read from a machine) and copies of the healthy one changed here, each change said where
it is made: an HCA renamed (``mlx5_7`` -> ``mlx5_8``, the numbering a replaced or re-enumerated
ConnectX card gets) and an HCA missing (``mlx5_7`` gone from ``/sys/class/infiniband``, as when its
driver did not bind). Everything else in those copies is the sample's.
"""

from __future__ import annotations

import pytest

from ccdiag.cluster import gather
from ccdiag.cluster.nccl_agree import CHECK, agreement
from ccdiag.host.snapshot import SnapshotData
from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"


def _rename(snap: SnapshotData, old: str, new: str) -> SnapshotData:
    """The snapshot with every path component and listed name ``old`` called ``new`` (CHANGED HERE)."""
    def fix(path: str) -> str:
        return "/".join(new if part == old else part for part in path.split("/"))

    snap.files = {e: {fix(p): v for p, v in files.items()} for e, files in snap.files.items()}
    snap.links = {fix(p): fix(t) for p, t in snap.links.items()}
    snap.dirs = {fix(p) for p in snap.dirs}
    snap.listings = {fix(p): sorted(new if n == old else n for n in names) for p, names in snap.listings.items()}
    return snap


def _drop(snap: SnapshotData, name: str) -> SnapshotData:
    """The snapshot without the HCA ``name``'s infiniband class entry and device directory (CHANGED HERE)."""
    def kept(path: str) -> bool:
        return name not in path.split("/")

    snap.files = {e: {p: v for p, v in files.items() if kept(p)} for e, files in snap.files.items()}
    snap.links = {p: t for p, t in snap.links.items() if kept(p) and kept(t)}
    snap.dirs = {p for p in snap.dirs if kept(p)}
    snap.listings = {p: [n for n in names if n != name] for p, names in snap.listings.items() if kept(p)}
    return snap


def _summary(host: str, path, rank: int) -> dict:
    return {"leader": True, **gather.run_node_check({"host": host}, rank, str(path), 30, None, None)}


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """Node-check summaries of the samples and of the changed copies, computed once."""
    d = tmp_path_factory.mktemp("snaps")
    renamed, missing = d / "renamed.snap.tar.gz", d / "missing.snap.tar.gz"
    _rename(SnapshotData.load(str(HEALTHY)), "mlx5_7", "mlx5_8").save(str(renamed))
    _drop(SnapshotData.load(str(HEALTHY)), "mlx5_7").save(str(missing))
    return {"healthy": _summary("healthy", HEALTHY, 0), "degraded": _summary("degraded", DEGRADED, 1),
            "renamed": _summary("renamed", renamed, 2), "missing": _summary("missing", missing, 3)}


def _cluster(summaries: dict, names: list[str]) -> list:
    picked = {r: dict(summaries[n], host=f"{n}{r}") for r, n in enumerate(names)}
    return [f for f in gather.cluster_findings(picked, [], {}) if f.check == CHECK]


def test_a_degraded_node_writes_the_shared_settings_of_its_kind(summaries):
    """The degraded sample's own faults (mlx5_4 down, a GPU lost) are its findings, not other settings."""
    assert summaries["healthy"]["nccl"]["settings"] == summaries["degraded"]["nccl"]["settings"]
    assert "mlx5_7:1" in summaries["healthy"]["nccl"]["settings"]["NCCL_IB_HCA"]
    fs = _cluster(summaries, ["healthy", "healthy", "degraded"])
    assert [f.status for f in fs] == ["pass"] and "all 3 hosts" in fs[0].summary


@pytest.mark.parametrize("odd, here, other", [("renamed", "mlx5_8:1", "mlx5_7:1"), ("missing", None, "mlx5_7:1")])
def test_the_host_whose_hca_list_differs_is_named_with_both_values(summaries, odd, here, other):
    fs = _cluster(summaries, ["healthy", "degraded", odd, "healthy"])
    bad = [f for f in fs if f.status != "pass"]
    assert len(bad) == 1 and bad[0].status == "fail" and bad[0].component.name == f"{odd}2"
    diff = bad[0].details["differences"]["NCCL_IB_HCA"]
    assert other in diff["majority"] and other not in diff["host"]
    if here:
        assert here in diff["host"]
    assert "3 of 4 hosts" in bad[0].summary and "NCCL_IB_HCA" in bad[0].summary
    assert "HCA missing, renamed" in bad[0].remedy and "drain" in bad[0].remedy
    # the interface list still agrees (ib7 is there on every host): only the HCA list is named
    assert set(bad[0].details["differences"]) == {"NCCL_IB_HCA"}


def test_a_tie_names_no_odd_host_and_says_unknown(summaries):
    fs = _cluster(summaries, ["healthy", "renamed"])
    assert [f.status for f in fs] == ["unknown"]
    assert "no majority" in fs[0].summary and "1/1" in fs[0].summary
    # each group named with its own value of the setting that splits them
    assert "healthy0: NCCL_IB_HCA=" in fs[0].summary and "renamed1: NCCL_IB_HCA=" in fs[0].summary
    assert "mlx5_7:1" in fs[0].summary and "mlx5_8:1" in fs[0].summary
    fs = _cluster(summaries, ["healthy", "healthy", "renamed", "missing"])  # 2 of 4 is not more than half
    assert [f.status for f in fs] == ["unknown"] and "2/1/1" in fs[0].summary


def test_a_single_host_is_skipped_not_passed(summaries):
    fs = _cluster(summaries, ["healthy"])
    assert [f.status for f in fs] == ["skip"] and "no other host" in fs[0].summary


def test_a_host_without_a_recommendation_is_unknown_and_the_others_are_still_compared():
    s = {"NCCL_IB_HCA": "=mlx5_0:1"}
    fs = agreement({"a": s, "b": s, "c": {"NCCL_IB_HCA": "=mlx5_1:1"}}, {"d": "no GPU and no NIC was read"})
    by = {f.component.name: f for f in fs}
    assert by["d"].status == "unknown" and "no GPU and no NIC" in by["d"].summary
    assert by["c"].status == "fail" and "'=mlx5_1:1' here, '=mlx5_0:1' on 2 of 3 hosts" in by["c"].summary
    assert agreement({}, {}) == []


def test_a_difference_outside_the_rails_warns():
    a = {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml"}
    b = {"NCCL_IB_HCA": "=mlx5_0:1"}
    (f,) = [f for f in agreement({"a": a, "b": a, "c": b}, {}) if f.status != "pass"]
    assert f.status == "warn" and f.component.name == "c" and "NCCL_TOPO_FILE unset here" in f.summary


def test_reports_dir_reports_carry_the_recommendation_and_compare_names_the_odd_host(tmp_path):
    """``cluster check --reports-dir`` writes each host's whole recommendation into its report, and
    ``ccdiag compare`` over those files names the host whose HCA list differs, by the setting."""
    import json

    from ccdiag.report.document import validate
    from cli_runner import run

    renamed = tmp_path / "renamed.snap.tar.gz"
    _rename(SnapshotData.load(str(HEALTHY)), "mlx5_7", "mlx5_8").save(str(renamed))
    reports = tmp_path / "reports"
    for rank, (host, snap) in enumerate([("n0", HEALTHY), ("n1", HEALTHY), ("n2", DEGRADED), ("n3", renamed)]):
        got = gather.run_node_check({"host": host}, rank, str(snap), 30, str(reports), None)
        assert "error" not in got, got
    doc = json.loads((reports / "n3.json").read_text())
    validate(doc)
    assert "mlx5_8:1" in doc["nccl"]["settings"]["NCCL_IB_HCA"]
    assert any(k["name"] == "NCCL_IB_HCA" and k["reason"] for k in doc["nccl"]["knobs"])
    code, out, err = run("compare", str(reports), "--json")
    assert code == 1, err
    nccl = [o for o in json.loads(out)["outliers"] if o["key"].startswith("nccl_setting")]
    assert [(o["key"], o["hosts"]) for o in nccl] == [("nccl_setting NCCL_IB_HCA", ["n3"])], nccl
    assert "mlx5_7:1" in nccl[0]["fleet"] and "mlx5_8:1" in nccl[0]["value"]
