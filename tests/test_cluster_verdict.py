"""Verdicts across hosts compose as ``ccdiag check``'s do: a failure decides, whatever else could
not be evaluated (:mod:`ccdiag.cluster.verdict`), for ``cluster check``, ``bench allreduce``,
``bench pairs`` and ``compare``."""

from __future__ import annotations

import pytest

from ccdiag.cluster import verdict
from ccdiag.cluster.benchrun import _verdict
from ccdiag.cluster.runner import RankOutcome
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Finding


def _f(status: str, check: str = "cluster.x") -> Finding:
    return Finding(check, status, Component("node", "h1"), status)


#: (statuses, unevaluated, judged) -> exit code
TABLE = [
    ((), False, True, 0),
    ((PASS,), False, True, 0),
    ((PASS, SKIP), False, True, 0),
    ((PASS, WARN), False, True, 0),
    ((FAIL,), False, True, 1),
    ((FAIL, UNKNOWN), False, True, 1),        # a host fails, another could not be evaluated
    ((FAIL, PASS), True, True, 1),            # a failure and a silent rank
    ((FAIL,), False, False, 1),               # a failure counts even where nothing else was judged
    ((FAIL, UNKNOWN, UNKNOWN, WARN), True, False, 1),
    ((UNKNOWN,), False, True, 3),
    ((PASS, UNKNOWN), False, True, 3),
    ((PASS,), True, True, 3),                 # a silent rank, nothing failed
    ((PASS,), False, False, 3),               # nothing held to a reference
    ((SKIP,), False, False, 3),
    ((WARN, UNKNOWN), False, True, 3),
]


@pytest.mark.parametrize("statuses, unevaluated, judged, code", TABLE)
def test_a_failure_decides_whatever_else_is_unknown(statuses, unevaluated, judged, code):
    assert verdict.exit_code([_f(s) for s in statuses], unevaluated=unevaluated, judged=judged) == code


def test_what_a_command_counts_as_failing_decides_too():
    # cluster check: a host that differs from the majority (WARN) fails the cluster, beside UNKNOWNs
    differs = _f(WARN, "cluster.consistency.mtu eth0")
    rule = lambda f: f.status == FAIL or (f.status == WARN and f.check != "cluster.host_check")  # noqa: E731
    assert verdict.exit_code([differs, _f(UNKNOWN, "cluster.host_check")], failing=rule) == 1
    assert verdict.exit_code([_f(WARN, "cluster.host_check"), _f(UNKNOWN, "cluster.host_check")], failing=rule) == 3


@pytest.mark.parametrize("missing, errors, statuses, code", [
    ([], {}, (PASS,), 0),
    ([2], {}, (PASS,), 3),
    ([], {1: "RuntimeError: boom"}, (PASS,), 3),
    ([2], {}, (FAIL,), 1),
    ([], {1: "deadline passed"}, (FAIL, UNKNOWN), 1),
])
def test_the_benchmarks_across_hosts_compose_the_same_way(missing, errors, statuses, code):
    out = RankOutcome(size=3, answers={0: {}, 1: {}}, missing=list(missing), errors=dict(errors))
    assert _verdict([_f(s) for s in statuses], out) == code


@pytest.mark.parametrize("failed, unreadable, unevaluated, code", [
    (False, False, False, 0), (True, False, False, 1), (True, True, True, 1), (False, True, True, 2),
    (False, False, True, 3),
])
def test_compare_puts_an_outlier_first_then_bad_input_then_unevaluated(failed, unreadable, unevaluated, code):
    from ccdiag.commands.compare import _code

    assert _code(failed, unreadable, unevaluated) == code


def _summary(host: str, code: int, facts: dict) -> dict:
    return {"leader": True, "host": host, "exit_code": code, "facts": facts,
            "nccl": {"settings": {"NCCL_SOCKET_IFNAME": "=eth0"}}, "reason": None if code == 0 else "why"}


@pytest.mark.parametrize("codes, odd_mtu, missing, expected", [
    ((0, 0, 0, 0), False, [], 0),
    ((0, 1, 0, 0), False, [], 1),          # a host fails its own check
    ((0, 1, 3, 0), False, [], 1),          # ... and another could not be evaluated: still 1
    ((3, 3, 3, 3), True, [], 1),           # a GPU-less fleet (every host UNKNOWN) with an MTU apart: 1
    ((3, 3, 3, 3), False, [], 3),          # the same fleet agreeing: nothing failed, 3
    ((0, 0, 0), True, [3], 1),             # a silent rank beside a host whose MTU differs: 1
    ((0, 0, 0), False, [3], 3),            # a silent rank alone: 3
])
def test_cluster_check_composes_host_verdicts_differences_and_silent_ranks(codes, odd_mtu, missing, expected):
    from ccdiag.cluster import gather

    summaries = {r: _summary(f"h{r}", c, {"mtu eth0": 9000 if (odd_mtu and r == 1) else 1500, "gpu_data": "missing"})
                 for r, c in enumerate(codes)}
    found = gather.cluster_findings(summaries, list(missing), {r: {"host": f"h{r}"} for r in range(4)})
    assert gather.exit_code(found, bool(missing)) == expected, [(f.check, f.status) for f in found]


def test_a_sweep_stuck_on_a_transfer_names_the_pair_never_the_chain_of_waits():
    """What four ranks reported when a path into h2 carried large frames only at a trickle: the
    halving-doubling exchange between ranks 0 and 2 never completed; 1 and 3 waited behind them."""
    from ccdiag.cluster.benchrun import _stuck_transfers

    waits = {0: [2], 1: [0], 2: [0], 3: [2]}
    results = {r: {"incomplete": f"deadline passed in halving-doubling waiting on rank {w[0]}", "waiting_on": w}
               for r, w in waits.items()}
    out = RankOutcome(size=4, answers={r: {"ident": {"host": f"h{r}"}, "result": results[r]} for r in range(4)})
    found = _stuck_transfers(results, out, 4)
    assert [(f.details["src_rank"], f.details["dst_rank"]) for f in found] == [(0, 2)]
    assert "ranks 0 (h0) and 2 (h2) each waited on the other" in found[0].summary
    assert _verdict(found, out, incomplete=True) == 1
    # a plain chain: 1 waits on 0, which waited on nothing (it finished): the hop 0 -> 1
    found = _stuck_transfers({1: {"incomplete": "deadline passed", "waiting_on": [0]}}, out, 4)
    assert [(f.details["src_rank"], f.details["dst_rank"]) for f in found] == [(0, 1)]
    # 0 done with the ring and waiting in the barrier after it (on no peer); 1 waits on 0, 2 on 1
    res = {0: {"incomplete": "deadline passed in ring 1048576 bytes waiting on no peer", "waiting_on": []},
           1: {"incomplete": "deadline passed in ring reduce-scatter waiting on rank 0", "waiting_on": [0]},
           2: {"incomplete": "deadline passed in ring reduce-scatter waiting on rank 1", "waiting_on": [1]}}
    found = _stuck_transfers(res, out, 4)
    assert [(f.details["src_rank"], f.details["dst_rank"]) for f in found] == [(0, 1)]


def test_a_ring_of_waits_names_the_hop_into_the_rank_left_behind():
    """Seen with a black hole into h2 that let the hop check's messages through: every rank waits on
    its left neighbour; rank 2 is still reducing while the others gather, so 1 -> 2 is stuck."""
    from ccdiag.cluster.benchrun import _stuck_transfers

    res = {0: {"incomplete": "deadline passed in ring allgather waiting on rank 3", "waiting_on": [3]},
           1: {"incomplete": "deadline passed in ring allgather waiting on rank 0", "waiting_on": [0]},
           2: {"incomplete": "deadline passed in ring reduce-scatter waiting on rank 1", "waiting_on": [1]},
           3: {"incomplete": "deadline passed in ring allgather waiting on rank 2", "waiting_on": [2]}}
    out = RankOutcome(size=4, answers={r: {"ident": {"host": f"h{r}"}, "result": res[r]} for r in range(4)})
    found = _stuck_transfers(res, out, 4)
    assert [(f.details["src_rank"], f.details["dst_rank"]) for f in found] == [(1, 2)]
    res[0]["incomplete"] = res[0]["incomplete"].replace("allgather", "reduce-scatter")  # two behind: not told
    assert _stuck_transfers(res, out, 4) == []
