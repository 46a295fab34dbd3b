#!/usr/bin/env python3
"""``bench locate`` at fleet scale without the fleet: tests used and accuracy at 64, 256 and 1,024 hosts.

Why: the claim of ``ccdiag bench locate`` is that one bad part among hundreds of hosts is named in
a few rounds of ring tests, O(N) tests or fewer, where ``bench pairs`` needs every one of the
N(N-1)/2 pairs. No machine here has a thousand hosts, so the fabric is a model (leaf/spine, per-link
rates, ECMP hashing, measurement noise that only lowers a figure and now and then a rank held off
the CPU for a whole test: ``tests/fabric_model.py``) and everything else is the real localisation
code, :class:`ccdiag.cluster.locate.Locator` with the same functions the MPI command runs, the
transport alone replaced by the model.

Per size, mode and planted fault, over many trials (each its own random fault, noise and ECMP
seed): the fraction of trials whose findings name exactly the planted fault and nothing else
(goal: 99 % or more for the physical faults with the layout), the tests (rings run) against N and
against the N(N-1)/2 pairs of ``bench pairs``, host-tests (each host's part in a ring counted),
rounds, and the unconfirmed suspects left. Modes: the fabric's layout (leaves of 16 hosts under 8
spines), no layout (⌈√N⌉ groups), per-hop timing off (a ring known by its bus bandwidth alone,
split in halves), and a 2:1 oversubscribed spine.

    python bench/bench_locate.py [--trials 200] [--sizes 64,256,1024] [--quick]

Writes ``bench/results/locate.json``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import random
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from fabric_model import ModelTransport, leaf_spine, leaves  # noqa: E402
from results_file import write_result  # noqa: E402

from ccdiag.cluster.layout import square_groups  # noqa: E402
from ccdiag.cluster.locate import Locator, run  # noqa: E402

PER_LEAF = 16
SPINES = 8
MARGIN = 0.5

#: name -> (how the fault is planted, whether it is a physical part the goal covers)
SCENARIOS = {
    "healthy": "no fault: any finding is a false one",
    "slow_host": "a host's NIC at 20 % of its rate, both directions",
    "slow_host_inbound": "a host receiving at 20 % of its rate (a shaper or a bad receive lane)",
    "slow_host_40pct": "a host's NIC at 40 % of its rate",
    "slow_uplink": "one leaf's uplink to one spine at 10 % of its capacity, both directions",
    "slow_pair_path": "the path between two hosts at 20 % (no one part: found only when a ring puts them side by side)",
}
PHYSICAL = ("healthy", "slow_host", "slow_host_inbound", "slow_host_40pct", "slow_uplink")


def plant(fab, scenario: str, rng: random.Random):
    """Plant the fault; the findings that name it exactly."""
    n_leaves = len({fab.leaf_of[h] for h in fab.hosts})
    if scenario == "healthy":
        return []
    if scenario in ("slow_host", "slow_host_40pct"):
        x = rng.choice(fab.hosts)
        fab.host_in[x] = fab.host_out[x] = 0.2 if scenario == "slow_host" else 0.4
        return [("host", x)]
    if scenario == "slow_host_inbound":
        x = rng.choice(fab.hosts)
        fab.host_in[x] = 0.2
        return [("host", x)]
    if scenario == "slow_uplink":
        leaf, spine = rng.randrange(n_leaves), rng.randrange(fab.spines)
        fab.uplink[(leaf, spine)] = 0.1
        return [("uplink", f"leaf{leaf}")]
    if scenario == "slow_pair_path":
        a, b = rng.sample(fab.hosts, 2)
        fab.pair[frozenset((a, b))] = 0.2
        return [("link", tuple(sorted((a, b))))]
    raise ValueError(scenario)


def trial(n: int, scenario: str, seed: int, mode: str) -> dict:
    rng = random.Random(seed * 7919 + n)
    fab = leaf_spine(n, per_leaf=PER_LEAF, spines=SPINES, seed=seed, hash_seed=seed,
                     uplink_ratio=0.5 if mode == "oversubscribed" else 1.0)
    truth = plant(fab, scenario, rng)
    layout = mode != "no_layout"
    groups = leaves(fab) if layout else square_groups(fab.hosts)
    loc = Locator(fab.hosts, groups, margin=MARGIN, fabric_groups=layout)
    loc.group_names = [f"leaf{i}" for i in range(len(groups))]
    t0 = time.process_time()
    out = run(loc, ModelTransport(fab, hops=mode != "busbw_only"))
    cpu_s = time.process_time() - t0
    got = ([("host", h) for h in out.slow_hosts] + [("link", tuple(sorted(p))) for p in out.slow_links]
           + [("uplink", g) for g in out.slow_uplinks])
    if scenario == "slow_uplink" and not layout:
        # without the layout no group is a leaf: the fault counts as found when every finding is
        # a link crossing the planted leaf's boundary
        leaf = int(truth[0][1][4:])
        correct = bool(got) and all(k == "link" and (fab.leaf_of[v[0]] == leaf) != (fab.leaf_of[v[1]] == leaf)
                                    for k, v in got)
    else:
        correct = sorted(got) == sorted(truth)
    false = [] if (scenario == "slow_uplink" and not layout and correct) else [g for g in got if g not in truth]
    return {"correct": correct, "false": false, "tests": out.tests,
            "host_tests": out.host_tests, "rounds": out.rounds, "unconfirmed": len(out.unconfirmed),
            "cpu_s": cpu_s, "missed": not any(g in truth for g in got) and bool(truth)}


def summarise(n: int, mode: str, scenario: str, rows: list[dict]) -> dict:
    tests = [r["tests"] for r in rows]
    return {
        "hosts": n, "mode": mode, "scenario": scenario, "fault": SCENARIOS[scenario], "trials": len(rows),
        "accuracy": round(sum(r["correct"] for r in rows) / len(rows), 4),
        "trials_with_a_false_finding": sum(1 for r in rows if r["false"]),
        "trials_missed": sum(1 for r in rows if r["missed"]),
        "tests_mean": round(statistics.mean(tests), 1), "tests_max": max(tests),
        "tests_per_host_max": round(max(tests) / n, 3),
        "host_tests_mean": round(statistics.mean(r["host_tests"] for r in rows), 1),
        "rounds_mean": round(statistics.mean(r["rounds"] for r in rows), 1),
        "rounds_max": max(r["rounds"] for r in rows),
        "unconfirmed_mean": round(statistics.mean(r["unconfirmed"] for r in rows), 2),
        "pairs_needs_tests": n * (n - 1) // 2, "pairs_needs_rounds": n - 1,
        "locate_cpu_s_mean": round(statistics.mean(r["cpu_s"] for r in rows), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200, help="trials per size, mode and fault (layout mode)")
    ap.add_argument("--other-trials", type=int, default=50, help="trials in the other modes")
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--quick", action="store_true", help="10 trials each, to try the script")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "locate.json"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    trials, other = (10, 5) if args.quick else (args.trials, args.other_trials)
    plan = [("layout", list(SCENARIOS), trials), ("no_layout", ["healthy", "slow_host", "slow_host_inbound",
                                                                 "slow_uplink"], other),
            ("busbw_only", ["healthy", "slow_host", "slow_uplink"], other),
            ("oversubscribed", ["healthy", "slow_host", "slow_uplink"], other)]
    results = []
    t_all = time.monotonic()
    for n in sizes:
        for mode, scenarios, k in plan:
            for scenario in scenarios:
                rows = [trial(n, scenario, seed, mode) for seed in range(k)]
                s = summarise(n, mode, scenario, rows)
                results.append(s)
                print(f"{n:5d} {mode:15s} {scenario:18s} accuracy {s['accuracy']:.3f} tests {s['tests_mean']:6.1f} "
                      f"(max {s['tests_max']}, {s['tests_per_host_max']:.2f}/host) rounds {s['rounds_mean']:.1f} "
                      f"(max {s['rounds_max']}) false {s['trials_with_a_false_finding']}", file=sys.stderr, flush=True)
    goal = [r for r in results if r["mode"] == "layout" and r["scenario"] in PHYSICAL]
    doc = {
        "bench": "locate", "python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
        "command": "python bench/bench_locate.py" + (" --quick" if args.quick else f" --trials {trials} --other-trials {other}"),
        "fabric": {"hosts_per_leaf": PER_LEAF, "spines": SPINES, "nic_gbyte_s": 50.0, "margin": MARGIN,
                   "noise": "jitter |N(0, 3 %)| per run; 1 % of hosts per test held off the CPU (every hop in or out "
                            "of it at 30-70 %)", "model": "tests/fabric_model.py"},
        "goal": "the planted physical fault named (and nothing else) in >= 99 % of trials with O(N) tests or fewer, "
                "with the fabric's layout",
        "goal_met": all(r["accuracy"] >= 0.99 and r["tests_max"] <= r["hosts"] for r in goal),
        "seconds": round(time.monotonic() - t_all, 1),
        "results": results,
    }
    write_result(args.out, doc, echo=False)
    print(f"wrote {args.out}; goal met: {doc['goal_met']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
