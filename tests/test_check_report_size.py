"""check's JSON on a node with many devices: above CHECK_MATRIX_MAX_ENDS GPUs+NICs it carries the
GPU rows of the level matrix and says what it left out (topo --json keeps every row); a large
document is written compact; the evaluation gets what --timeout leaves after opening the host and
a reserve for the report. The bundled healthy sample (8 GPUs, 8 NICs) stands in for a large node
by lowering the limit."""

from __future__ import annotations

import json
import time

import pytest

import exporter_cases as C
from cli_runner import run
from ccdiag.commands import check as check_cmd
from ccdiag.core.output import PRETTY_MAX_BYTES, json_text

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
    started = time.monotonic() - 5.0  # opening the host took 5 s
    assert check_cmd.evaluation_budget(30.0, started, reporting=False) == pytest.approx(25.0, abs=0.2)
    assert check_cmd.evaluation_budget(30.0, started, reporting=True) == pytest.approx(
        25.0 - check_cmd.REPORT_RESERVE_S, abs=0.2)
    assert check_cmd.evaluation_budget(3.0, started, reporting=True) == 1.0  # never below a second
    # a short --timeout keeps a tenth for the report, not 2 s of its 3: the probes still get their time
    assert check_cmd.evaluation_budget(3.0, time.monotonic(), reporting=True) == pytest.approx(2.7, abs=0.1)


def test_a_node_with_many_pci_functions_keeps_more_for_its_report():
    now = time.monotonic()
    # 6,216 functions (a 3,000-NIC node): about 3 s of a 30 s deadline, at most 0.3 of a short one
    assert check_cmd.evaluation_budget(30.0, now, True, 6216) == pytest.approx(30.0 - 6216 * 0.0005, abs=0.1)
    assert check_cmd.evaluation_budget(10.0, now, True, 6216) == pytest.approx(7.0, abs=0.1)
    # an ordinary node (about a hundred functions) keeps the fixed reserve
    assert check_cmd.evaluation_budget(30.0, now, True, 120) == pytest.approx(30.0 - check_cmd.REPORT_RESERVE_S, abs=0.1)
    assert check_cmd.evaluation_budget(30.0, now, False, 6216) == pytest.approx(30.0, abs=0.1)
