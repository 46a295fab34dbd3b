"""check's JSON on a node with many devices: above CHECK_MATRIX_MAX_ENDS GPUs+NICs it carries the
GPU rows of the level matrix and says what it left out (topo --json keeps every row); a large
document is written compact; the evaluation gets what --timeout leaves after opening the host and
a reserve for the report; above CHECK_P2P_MAX_PAIRS GPU pairs the identical ones are counted. The
bundled healthy sample (8 GPUs, 8 NICs) stands in for a large node by lowering the limits."""

from __future__ import annotations

import json

import pytest

import exporter_cases as C
from cli_runner import run
from ccdiag.commands import check as check_cmd
from ccdiag.core.output import PRETTY_MAX_BYTES, json_text
from ccdiag.report.document import summarise_pairs
from ccdiag.run.stages import REPORT_RESERVE_S, Budget, report_reserve_s

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")


def test_above_the_limit_check_keeps_the_gpu_rows_and_says_what_it_left_out(monkeypatch):
    code, out, err = run("check", "--replay", str(C.HEALTHY), "--json")
    full = json.loads(out)["topology"]["matrix"]
    assert "omitted" not in full and len(full["rows"]) == len(full["labels"]) == 16
    monkeypatch.setattr(check_cmd, "CHECK_MATRIX_MAX_ENDS", 10)
    code2, out2, err2 = run("check", "--replay", str(C.HEALTHY), "--json")
    assert code2 == code
    cut = json.loads(out2)["topology"]["matrix"]
    assert cut["omitted"]["ends"] == 16 and cut["omitted"]["limit"] == 10 and cut["omitted"]["rows"] == "NIC"
    assert cut["rows"] == full["rows"][:8]  # the GPU rows, cell for cell
    code3, out3, _ = run("topo", "--replay", str(C.HEALTHY), "--json")
    assert len(json.loads(out3)["topology"]["matrix"]["rows"]) == 16


def test_a_large_document_is_written_compact_and_reads_the_same():
    small = {"a": [1, 2], "b": "x"}
    assert json_text(small).count("\n") > 1
    big = {"rows": [["PIX"] * 1000 for _ in range(PRETTY_MAX_BYTES // 6000 + 1)]}
    text = json_text(big)
    assert text.count("\n") == 1 and json.loads(text) == big


def test_the_evaluation_gets_what_the_timeout_leaves():
    # the deadline counts from the process's start: opening the host took 5 s of 30
    b = Budget.plan(30.0, start=100.0, began=105.0)
    assert b.bench_end == pytest.approx(130.0) and b.probe_end - b.began == pytest.approx(25.0 - 2.5)
    with_report = Budget.plan(30.0, start=100.0, began=105.0, report_s=report_reserve_s(30.0))
    assert with_report.bench_end == pytest.approx(130.0 - REPORT_RESERVE_S)
    assert with_report.to_json()["load_s"] == 5.0 and with_report.to_json()["report_reserve_s"] == REPORT_RESERVE_S
    # a short deadline keeps a tenth for the report, not 2 s of its 3: the probes still get their time
    assert report_reserve_s(3.0) == pytest.approx(0.3)
    # the load used everything: nothing is left for probing, and nothing ends before the evaluation began
    late = Budget.plan(10.0, start=100.0, began=112.0)
    assert late.probe_end == late.judge_end == late.bench_end == 112.0


def test_a_node_with_many_pci_functions_keeps_more_for_its_report():
    # 6,216 functions (a 3,000-NIC node): the fixed reserve and 0.6 s more, at most 0.3 of a short deadline
    assert report_reserve_s(30.0, 6216) == pytest.approx(REPORT_RESERVE_S + 0.6216)
    assert report_reserve_s(10.0, 6216) == pytest.approx(1.0 + 0.6216)
    assert report_reserve_s(3.0, 6216) == pytest.approx(0.9)
    # an ordinary node (about a hundred functions) keeps about the fixed reserve
    assert report_reserve_s(30.0, 120) == pytest.approx(REPORT_RESERVE_S + 0.012)


def _expected(pairs: list[tuple[str, str, str, float]]) -> dict:
    return {"expected": [{"a": a, "b": b, "kind": "p2p", "level": lvl, "gbyte_s": bw, "current_gbyte_s": bw,
                          "usable": True, "blocked_by": None, "bottleneck": f"{a}-{b}", "links": []}
                         for a, b, lvl, bw in pairs] + [{"a": "host", "b": "GPU0", "kind": "h2d"}]}


def test_many_identical_pairs_are_counted_and_the_odd_ones_stay_listed():
    gpus = [f"GPU{i}" for i in range(12)]
    pairs = [(a, b, "NV18", 450.0) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    pairs[5] = (pairs[5][0], pairs[5][1], "NV12", 300.0)  # one pair trained down: the one to see
    topo = _expected(pairs)
    cut = summarise_pairs(topo, max_pairs=10)
    assert cut["expected_summary"] == [{"kind": "p2p", "pairs": 65, "level": "NV18", "gbyte_s": 450.0,
                                        "current_gbyte_s": 450.0, "usable": True, "blocked_by": None,
                                        "example": {"a": "GPU0", "b": "GPU1"}}]
    odd = [e for e in cut["expected"] if e["kind"] == "p2p"]
    assert [(e["a"], e["b"], e["level"]) for e in odd] == [("GPU0", "GPU6", "NV12")]
    assert [e for e in cut["expected"] if e["kind"] != "p2p"] == [{"a": "host", "b": "GPU0", "kind": "h2d"}]
    assert summarise_pairs(topo, max_pairs=66) is topo  # under the limit: every pair listed
    assert "expected_summary" not in topo  # the topology's own JSON (topo --json) is left whole


def test_a_check_report_with_summarised_pairs_validates(monkeypatch):
    from ccdiag.report import document

    monkeypatch.setattr(document, "CHECK_P2P_MAX_PAIRS", 3)
    code, out, err = run("check", "--replay", str(C.HEALTHY), "--json")
    doc = json.loads(out)
    document.validate(doc)
    (group,) = doc["topology"]["expected_summary"]
    assert group["pairs"] == 28 and group["level"].startswith("NV")
    assert not [e for e in doc["topology"]["expected"] if e["kind"] == "p2p"]
    code2, out2, _ = run("topo", "--replay", str(C.HEALTHY), "--json")
    assert len([e for e in json.loads(out2)["topology"]["expected"] if e["kind"] == "p2p"]) == 28
