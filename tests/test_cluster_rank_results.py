"""What rank 0 makes of the ranks' answers, without MPI: the sweep table (slowest rank per size,
bus bandwidth as nccl-tests defines it), the fault lines of silent and failing ranks, and the
verdict of a cluster run. The MPI runs themselves are in the slow, real-component tests
(test_cluster_check.py, test_cluster_netns.py); these keep the same modules in the fast loop.

The per-rank answers below are SYNTHESIZED in the shape run_sweep returns."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ccdiag.commands.cli import cli
from ccdiag.cluster import benchrun, sweep
from ccdiag.cluster.runner import RankOutcome, reserve_for
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, PASS, Component, Finding

MIB = 1 << 20


def _rank(ring_s: float, mpi_s: float, wrong: int = 0) -> dict:
    return {"sizes": {MIB: {"count": MIB // 4, "ring": {"time_s": ring_s, "wrong": wrong, "iters": 5},
                            "MPI_Allreduce": {"time_s": mpi_s, "wrong": 0, "iters": 5}}},
            "hops": {"size_bytes": MIB, "bytes": MIB // 4, "runs_s": [0.002, 0.001]}}


def test_sweep_rows_take_the_slowest_rank_and_nccl_tests_bus_factor():
    rows = sweep.merge({0: _rank(0.001, 0.002), 1: _rank(0.004, 0.002, wrong=3)}, n=2)
    (row,) = rows
    ring = row["algos"]["ring"]
    assert ring["time_s"] == 0.004 and ring["wrong"] == 3  # the collective ends with its last rank
    assert abs(ring["algbw_gbyte_s"] - MIB / 0.004 / 1e9) < 1e-12
    assert abs(ring["busbw_gbyte_s"] - ring["algbw_gbyte_s"] * 2 * (2 - 1) / 2) < 1e-12
    assert abs(row["ring_ratio"]["MPI_Allreduce"] - 0.5) < 1e-12
    table = sweep.format_table(rows, 2)
    assert "busbw = algbw x 2(n-1)/n" in table and f"{MIB:>12}" in table and "0.50" in table
    size, hops = sweep.hop_records({0: _rank(0.001, 0.002), 1: {"sizes": {}}})
    assert size == MIB and hops == {0: {"bytes": MIB // 4, "step0_s": 0.001, "runs_s": [0.002, 0.001]}}


def test_silent_and_failing_ranks_are_named_and_make_the_run_unevaluated():
    out = RankOutcome(size=3, answers={0: {"ident": {"host": "n0"}}, 2: {"ident": {"host": "n2"}}},
                      missing=[1], errors={2: "RuntimeError: boom"}, waited_on={0: [1]})
    lines = out.fault_lines()
    assert lines == ["rank 1 did not answer by the deadline: dead, hung or unreachable (ranks 0 were waiting on it)",
                     "rank 2 (n2): RuntimeError: boom"]
    assert out.to_json()["missing_ranks"] == [1] and out.to_json()["hosts"] == {"0": "n0", "2": "n2"}
    assert benchrun._verdict([], out) == int(ExitCode.UNEVALUATED)
    clean = RankOutcome(size=2, answers={0: {}, 1: {}})
    failed = Finding("cluster.allreduce", FAIL, Component("node", "n0"), "slow")
    assert benchrun._verdict([failed], clean) == int(ExitCode.FAIL)
    assert benchrun._verdict([Finding("cluster.allreduce", PASS, Component("node", "n0"), "ok")], clean) == 0
    doc = benchrun._doc("cluster-allreduce", out, [failed], 3)
    json.dumps(doc, default=str)
    assert doc["faults"] == lines and doc["verdict"]["failed"] == ["slow"]


def test_the_reserve_for_reporting_is_bounded():
    assert reserve_for(1.0) == 2.0 and reserve_for(40.0) == 6.0 and reserve_for(1000.0) == 10.0


def test_the_cluster_and_compare_commands_explain_themselves():
    runner = CliRunner()
    for argv in (["cluster", "--help"], ["compare", "--help"]):
        res = runner.invoke(cli, argv)
        assert res.exit_code == 0 and "Usage:" in res.output, (argv, res.output)
