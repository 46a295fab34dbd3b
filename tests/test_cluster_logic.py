"""Pure logic of the cluster commands, no MPI: schedule, ring order, hop analysis, sizes, pair
classification, the ring's chunk arithmetic."""

from __future__ import annotations

import itertools
import pathlib

import pytest

from ccdiag.cluster import hops, order, pairs, ring, tcpsteps
from ccdiag.cluster import pairmatrix as pmx
from ccdiag.cluster.judgement import View, judge

IPERF3 = pathlib.Path(__file__).resolve().parent / "fixtures" / "corpus" / "iperf3"


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_round_robin_covers_every_pair_once_in_disjoint_rounds(n):
    rounds = pairs.round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = []
    for rnd in rounds:
        hosts = [h for p in rnd for h in p]
        assert len(hosts) == len(set(hosts)), "a host twice in one round"
        seen += rnd
    assert sorted(seen) == sorted(itertools.combinations(range(n), 2))


def test_plan_groups_ranks_by_host_lowest_rank_leads():
    p = pairs.plan({0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"})
    assert p["hosts"] == ["a", "b", "c"] and p["leaders"] == [0, 2, 4]
    assert p["slots"] == {"a": 2, "b": 2, "c": 2} and len(p["rounds"]) == 3


def _matrix(n, fast=1.0, slow=None):
    m = [[None if i == j else fast for j in range(n)] for i in range(n)]
    for (a, b), v in (slow or {}).items():
        m[a][b] = v
    return m


def test_classify_slow_host_vs_slow_link():
    hosts = ["h0", "h1", "h2", "h3"]
    m = _matrix(4, slow={(0, 2): 0.006, (1, 2): 0.006, (3, 2): 0.006})
    cls = pmx.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == ["h2"] and cls["slow_links"] == []
    m = _matrix(4, slow={(3, 1): 0.006})
    cls = pmx.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == [] and [(x["a"], x["b"]) for x in cls["slow_links"]] == [("h1", "h3")]
    f = pmx.relative_findings(cls, hosts, "eth0", 0.5)
    assert f[0].check == "cluster.link_slow" and "h1" in f[0].summary and "h3" in f[0].summary
    assert "eth0" in f[0].summary


def test_classify_follows_the_shared_rule_where_every_pair_of_a_host_is_slow():
    from ccdiag.core import outliers

    hosts = ["h0", "h1", "h2", "h3"]
    # h2 slow with every peer: the same answer as the shared rule on the slower directions
    m = _matrix(4, slow={(0, 2): 0.006, (1, 2): 0.006, (3, 2): 0.006})
    shared = outliers.classify({(hosts[a], hosts[b]): min(m[a][b], m[b][a]) for a in range(4)
                                for b in range(a + 1, 4)}, fraction=0.5)
    cls = pmx.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == list(shared.slow_members) == ["h2"]
    assert cls["reference_gbyte_s"] == shared.reference and cls["floor_gbyte_s"] == shared.floor
    # h0's only measured pair is slow: one pair names a link, not a host (the shared rule wants two)
    m = _matrix(4, slow={(0, 1): 0.006})
    for b in (2, 3):
        m[0][b] = m[b][0] = None
    cls = pmx.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == [] and [(x["a"], x["b"]) for x in cls["slow_links"]] == [("h0", "h1")]


def test_classify_fewer_than_three_measured_hosts_is_unknown_not_pass():
    hosts = ["h0", "h1", "h2"]
    m = _matrix(3)
    m[0][2] = m[2][0] = m[1][2] = m[2][1] = None  # h2 never measured
    cls = pmx.classify(m, hosts, 0.5)
    assert cls["reference_gbyte_s"] is None and cls["slow_hosts"] == [] and cls["slow_links"] == []
    assert [f.status for f in pmx.relative_findings(cls, hosts, "eth0", 0.5)] == ["unknown"]
    # no reference, and the pairs of h2 neither measured nor failed: both said, never a PASS
    assert sorted(f.check for f in judge(View(hosts, m, "eth0"), 0.5)[0] if f.status != "skip") == [
        "cluster.pairs", "cluster.pairs_missing"]
    assert {f.status for f in judge(View(hosts, m, "eth0"), 0.5)[0] if f.status != "skip"} == {"unknown"}


def test_classify_healthy_is_one_pass():
    hosts = [f"h{i}" for i in range(5)]
    f, _ = judge(View(hosts, _matrix(5), "eth0"), 0.5)
    # relative judgement decides with no line rate known; a SKIP says the absolute check did not run
    assert [(x.check, x.status) for x in f] == [("cluster.pairs", "pass"), ("cluster.link_capability", "skip")]
    assert "within 50% of the fleet reference" in f[0].summary and "--line-rate-gbit-s" in f[1].remedy


def test_ring_order_avoids_a_slow_link_exactly():
    hosts = [f"h{i}" for i in range(6)]
    # current order 0-1-2-3-4-5 uses the slow link 2->3 and 3->2
    m = _matrix(6, slow={(2, 3): 0.01, (3, 2): 0.01})
    rec = order.recommend(m, hosts)
    assert rec["current_busbw_gbyte_s"] == pytest.approx(0.01)
    assert rec["predicted_busbw_gbyte_s"] == pytest.approx(1.0)
    o = rec["order"]
    for k in range(6):
        assert {o[k], o[(k + 1) % 6]} != {"h2", "h3"}


def test_ring_order_heuristic_beyond_exact_size():
    n = 14
    hosts = [f"h{i}" for i in range(n)]
    slow = {(i, (i + 1) % n): 0.01 for i in range(0, n, 2)}
    slow.update({(b, a): v for (a, b), v in slow.items()})
    m = _matrix(n, slow=slow)
    rec = order.recommend(m, hosts)
    assert rec["method"] != "exact"
    assert rec["predicted_busbw_gbyte_s"] == pytest.approx(1.0)


def test_ring_order_slow_host_placed_where_it_costs_least_and_dropped_variant():
    hosts = ["h0", "h1", "h2", "h3"]
    # h2 slow with everyone, but least slow with h0 and h3
    m = _matrix(4, slow={(0, 2): 0.05, (2, 0): 0.05, (1, 2): 0.01, (2, 1): 0.01, (3, 2): 0.05, (2, 3): 0.05})
    rec = order.recommend(m, hosts, ["h2"])
    assert set(rec["slow_hosts"]["h2"]["between"]) == {"h0", "h3"}
    assert rec["predicted_busbw_gbyte_s"] == pytest.approx(0.05)
    assert "h2" not in rec["without_slow_hosts"]["order"]
    assert rec["without_slow_hosts"]["predicted_busbw_gbyte_s"] == pytest.approx(1.0)


def test_hostfiles(tmp_path):
    paths = order.write_hostfiles(str(tmp_path / "hf"), ["b", "a"], slots={"a": 2, "b": 1}, note="x")
    assert (tmp_path / "hf").read_text() == "# x\nb slots=1\na slots=2\n"
    assert (tmp_path / "hf.slurm").read_text() == "b\na\na\n"
    assert len(paths) == 2


def test_hop_analysis_names_the_slow_hop():
    recs = {r: {"bytes": 1 << 20, "step0_s": 0.002} for r in range(4)}
    recs[2]["step0_s"] = 0.2  # hop 1 -> 2 is slow
    idents = {r: {"host": f"h{r}", "ifaces": {"eth0": [f"10.0.0.{r + 1}"]}} for r in range(4)}
    rows = hops.hop_table(recs, idents, 4, lambda a, b: "eth0")
    median, fs = hops.slow_hops(rows, 0.5)
    failed = [f for f in fs if f.status == "fail"]
    assert len(failed) == 1
    d = failed[0].details
    assert (d["src_rank"], d["dst_rank"], d["src_host"], d["dst_host"], d["iface"]) == (1, 2, "h1", "h2", "eth0")
    assert "h1" in failed[0].summary and "h2" in failed[0].summary and "MB/s" in failed[0].summary
    assert "slow" in hops.format_hops(rows, median, 0.5)


def test_sizes_and_bus_factor():
    assert ring.sweep_sizes(1 << 20, 16 << 20, 4) == [1 << 20, 4 << 20, 16 << 20]
    assert ring.parse_size("16M") == 16 << 20 and ring.parse_size("8K") == 8192 and ring.parse_size("100") == 100
    with pytest.raises(ValueError):
        ring.parse_size("lots")
    with pytest.raises(ValueError):
        ring.sweep_sizes(10, 5, 2)
    assert ring.bus_factor(4) == 1.5 and ring.bus_factor(8) == 1.75


def test_chunk_bounds_cover_the_buffer():
    for count, n in [(10, 3), (3, 4), (1 << 20, 8)]:
        b = ring.chunk_bounds(count, n)
        assert b[0][0] == 0 and b[-1][1] == count and all(x[1] == y[0] for x, y in zip(b, b[1:]))


def test_link_is_shared_memory_on_one_host_and_the_routed_interface_between_hosts():
    from ccdiag.cluster.route import SHARED_MEMORY, link_to

    me = {"host": "a", "ifaces": {"eth0": ["10.1.0.1"], "ib0": ["10.2.0.1"]}}
    assert link_to(me, {"host": "a", "ifaces": me["ifaces"]}, env={}) == SHARED_MEMORY
    peer = {"host": "b", "ifaces": {"ib0": ["10.2.0.2"]}}
    routes = {"10.2.0.2": "10.2.0.1", "10.1.0.2": "10.1.0.1"}
    assert link_to(me, peer, env={}, resolve=routes.get) == "ib0"
    # a /16 network: no /24 in common, the kernel's route still names the interface
    me16 = {"host": "a", "ifaces": {"eth0": ["10.1.3.1"]}}
    assert link_to(me16, {"host": "b", "ifaces": {"eth0": ["10.1.200.9"]}}, env={},
                   resolve=lambda a: "10.1.3.1") == "eth0"
    # the peer reachable over two networks: MPI's TCP transport may stripe over both
    both = {"host": "b", "ifaces": {"eth0": ["10.1.0.2"], "ib0": ["10.2.0.2"]}}
    assert link_to(me, both, env={}, resolve=routes.get).startswith("unknown (MPI may use any of eth0, ib0")
    # what MPI was told to use wins
    assert link_to(me, both, env={"OMPI_MCA_btl_tcp_if_include": "eth0"}, resolve=routes.get) == "eth0"
    assert link_to(me, both, env={"UCX_NET_DEVICES": "mlx5_0:1"}, resolve=routes.get) == "UCX mlx5_0:1"
    assert link_to(me, {"host": "c", "ifaces": {}}, env={}, resolve=routes.get) == "unknown"


def test_hops_inside_one_host_are_never_network_findings():
    """Four ranks on one loaded host: one hop much slower (the scheduler, not a link); nothing fails
    and the run says the network was not judged."""
    recs = {r: {"bytes": 4 << 20, "step0_s": 0.002} for r in range(4)}
    recs[2]["step0_s"] = 0.2
    idents = {r: {"host": "solo", "rank": r} for r in range(4)}
    rows = hops.hop_table(recs, idents, 4, lambda a, b: "shared memory")
    median, fs = hops.slow_hops(rows, 0.5)
    assert [f.status for f in fs] == ["skip"] and "shared memory" in fs[0].summary
    # two hosts with two ranks each: both hops between hosts cross their one link at once, so each
    # direction is held to the faster one (the line rate, where known, judges the link as a whole)
    idents = {r: {"host": "h0" if r < 2 else "h1", "rank": r} for r in range(4)}
    rows = hops.hop_table(recs, idents, 4, lambda a, b: "eth0")
    median, fs = hops.slow_hops(rows, 0.5)
    assert sorted((f.details["src_rank"], f.status) for f in fs) == [(1, "fail"), (3, "pass")]
    assert "1% of the other direction's" in next(f.summary for f in fs if f.status == "fail")
    recs[2]["step0_s"] = 0.0025  # both directions alike: both pass
    rows = hops.hop_table(recs, idents, 4, lambda a, b: "eth0")
    assert [f.status for f in hops.slow_hops(rows, 0.5)[1]] == ["pass", "pass"]
    recs[2]["step0_s"] = 0.2
    # three hosts (h0 twice): only the three hops between hosts are judged, the slow one fails
    idents = {r: {"host": ("h0", "h0", "h1", "h2")[r], "rank": r} for r in range(4)}
    rows = hops.hop_table(recs, idents, 4, lambda a, b: "eth0")
    median, fs = hops.slow_hops(rows, 0.5)
    assert len(fs) == 3 and all(f.details["src_host"] != f.details["dst_host"] for f in fs)
    failed = [f for f in fs if f.status == "fail"]
    assert len(failed) == 1 and 2 in (failed[0].details["src_rank"], failed[0].details["dst_rank"])


def test_alone_is_refused_and_a_missing_pmi_named():
    from ccdiag.cluster.runner import alone_reason

    assert alone_reason(4, {}) is None
    assert alone_reason(1, {}).startswith("needs at least 2 ranks under mpirun or srun")
    why = alone_reason(1, {"SLURM_NTASKS": "8"})
    assert "8 tasks" in why and "PMI" in why and "srun --mpi=pmix" in why
    assert "OMPI_COMM_WORLD_SIZE=4" in alone_reason(1, {"OMPI_COMM_WORLD_SIZE": "4"})
    assert alone_reason(1, {"SLURM_NTASKS": "1"}).startswith("needs at least 2")


def test_pair_work_shrinks_to_its_share_of_the_budget():
    mb = 1 << 20
    # 1 Gbit/s: 64 MiB takes ~0.54 s; 20 + 3 exchanges need ~12 s
    per_byte = 8 / 1e9
    assert pairs.plan_work(per_byte, 64 * mb, 20, 3, 60.0) == (64 * mb, 3, 20)
    size, warm, timed = pairs.plan_work(per_byte, 64 * mb, 20, 3, 4.0)
    assert size == 64 * mb and warm == 1 and 2 <= timed < 20
    assert (warm + timed) * per_byte * size <= 4.0
    # a link at 5 % of that: smaller messages, never below the probe size
    size, warm, timed = pairs.plan_work(per_byte * 20, 64 * mb, 20, 3, 4.0)
    assert pairs.PROBE_BYTES <= size < 64 * mb and (warm + timed) * per_byte * 20 * size <= 4.0 + 1e-9
    assert tcpsteps.plan_blocks(per_byte, 64 * mb, 20, 3, 100.0) == (3, 23)
    assert tcpsteps.plan_blocks(per_byte, 64 * mb, 20, 3, 1.0) == (1, 2)


def test_flagged_pairs_are_the_slow_link_and_every_pair_of_a_slow_host_packed_into_disjoint_rounds():
    """What the retest measures again: a pair below the margin (either direction), and every pair
    of a host slow with everyone; with two hosts, one direction far below the other."""
    hosts = ["h0", "h1", "h2", "h3", "h4"]
    into = {h: {s: 0.117 for s in hosts if s != h} for h in hosts}
    assert pairs.flagged_pairs(into, hosts, 0.5) == []
    into["h1"]["h4"] = 0.02  # one direction of one pair far below the rest (a stall or a slow link)
    assert pairs.flagged_pairs(into, hosts, 0.5) == [(1, 4)]
    for s in ("h0", "h1", "h3", "h4"):
        into["h2"][s] = 0.006  # everything into h2 at 5 %
    flagged = pairs.flagged_pairs(into, hosts, 0.5)
    assert sorted(flagged) == [(0, 2), (1, 2), (1, 4), (2, 3), (2, 4)]
    rounds = pairs.disjoint_rounds(flagged)
    assert sorted(p for r in rounds for p in r) == sorted(flagged)
    assert all(len({m for p in r for m in p}) == 2 * len(r) for r in rounds)
    assert len(rounds) == 4  # h2 is in four pairs: four rounds, h1-h4 rides along in one of them
    # two hosts: one direction far below the other, measured at once over one path, is flagged too
    assert pairs.flagged_pairs({"h0": {"h1": 0.001}, "h1": {"h0": 0.1}}, ["h0", "h1"], 0.5) == [(0, 1)]
    assert pairs.flagged_pairs({"h0": {"h1": 0.09}, "h1": {"h0": 0.1}}, ["h0", "h1"], 0.5) == []


def test_a_failed_tcp_transfer_flags_its_pair_for_a_retest_and_the_better_row_is_kept():
    hosts = ["h0", "h1", "h2", "h3"]
    net = "10.0.0.0/24"
    tcp_into = {h: [(net, s, 119.0) for s in hosts if s != h] for h in hosts}
    assert pairs.flagged_iface_pairs(tcp_into, hosts, 0.5) == []
    tcp_into["h3"] = [(net, s, None if s == "h1" else 119.0) for s in hosts if s != "h3"]
    assert pairs.flagged_iface_pairs(tcp_into, hosts, 0.5) == [(1, 3)]

    def row(src, dst, v, err=None):
        return {"net": net, "src_host": src, "dst_host": dst, "src_iface": "eth0", "dst_iface": "eth0",
                "mbyte_s": v, "error": err}
    rows = [row("h1", "h3", None, "timed out"), row("h0", "h3", 119.0)]
    pairs.keep_better_rows(rows, [row("h1", "h3", 118.5)])
    assert rows[0]["mbyte_s"] == 118.5 and rows[0]["error"] is None
    assert rows[0]["first_mbyte_s"] is None and rows[0]["first_error"] == "timed out"
    # a retest that fails never replaces a figure that was measured
    pairs.keep_better_rows(rows, [row("h0", "h3", None, "timed out")])
    assert rows[1]["mbyte_s"] == 119.0 and rows[1]["retest_mbyte_s"] is None


def test_the_report_lists_every_retested_direction_with_both_figures():
    from ccdiag.cluster.pairs_report import format_retests, retests

    results = {0: {"leader": True, "host": "h1", "first_gbyte_s": {"h4": 0.0553}, "retest_gbyte_s": {"h4": 0.1171}},
               1: {"leader": False, "host": "h1"},
               2: {"leader": True, "host": "h4", "first_gbyte_s": {"h1": 0.117}, "retest_gbyte_s": {"h1": 0.1168}}}
    rows = retests(results)
    assert [(r["src_host"], r["dst_host"]) for r in rows] == [("h1", "h4"), ("h4", "h1")]
    text = format_retests(rows)
    assert "h4 -> h1 first 55.3 MB/s, again 117.1 MB/s" in text


def test_partial_matrix_classifies_what_was_measured_and_lists_the_rest():
    missing_pairs = pmx.missing_pairs

    hosts = ["h0", "h1", "h2", "h3"]
    m = _matrix(4)
    m[2][3] = m[3][2] = None  # the last round never ran
    cls = pmx.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == [] and cls["slow_links"] == []
    assert missing_pairs(m, hosts) == ["h2->h3", "h3->h2"]


def test_two_hosts_on_a_link_at_5_percent_of_line_rate_fail_by_capability():
    from ccdiag.cluster import capability

    hosts = ["a", "b"]
    m = [[None, 0.00625], [0.0063, None]]  # 50 Mbit/s
    links = {"a": {"b": "eth0"}, "b": {"a": "eth0"}}
    cap = capability.path_capability(hosts, links, {"a": {"eth0": 1000}, "b": {"eth0": 1000}})
    assert cap[0][1] == pytest.approx(0.125)
    fs, named = capability.judge(m, cap, hosts, [], "eth0")
    assert [f.status for f in fs] == ["fail"] and named == {(0, 1)}
    assert "a <-> b" in fs[0].summary and "5%" in fs[0].summary
    # two hosts have no fleet, but both directions agree: the relative judgement finds nothing, and
    # the one judgement says the absolute FAIL only (no PASS beside it)
    assert [f.status for f in pmx.relative_findings(pmx.directions(m, hosts, 0.5), hosts, "eth0", 0.5)] == []
    one, _ = judge(View(hosts, m, "eth0", cap=capability.path_capability(hosts, links, {"a": {"eth0": 1000},
                                                                                        "b": {"eth0": 1000}})), 0.5)
    assert [(f.check, f.status) for f in one] == [("cluster.link_capability", "fail")]
    # virtual interfaces report no rate: unknown, unless the user gives one
    cap = capability.path_capability(hosts, links, {})
    assert [f.status for f in capability.judge(m, cap, hosts, [], "eth0")[0]] == ["unknown"]
    cap = capability.path_capability(hosts, links, {}, line_rate_gbit_s=1.0)
    assert [f.status for f in capability.judge(m, cap, hosts, [], "eth0")[0]] == ["fail"]


def test_a_uniformly_slow_fabric_is_one_finding_and_a_slow_host_is_not_repeated_per_link():
    from ccdiag.cluster import capability

    hosts = [f"h{i}" for i in range(4)]
    links = {h: {p: "eth0" for p in hosts if p != h} for h in hosts}
    speeds = {h: {"eth0": 100000} for h in hosts}
    cap = capability.path_capability(hosts, links, speeds)
    slow_everywhere = _matrix(4, fast=1.0)  # 8 Gbit/s on 100 Gbit/s paths
    fs, _ = capability.judge(slow_everywhere, cap, hosts, [], "eth0")
    assert len(fs) == 1 and fs[0].status == "fail" and "every pair of 4 hosts" in fs[0].summary
    m = _matrix(4, fast=10.0, slow={(0, 2): 0.1, (1, 2): 0.1, (3, 2): 0.1})
    fs, _ = capability.judge(m, cap, hosts, ["h2"], "eth0")
    assert fs == []


def test_ring_order_advice_only_when_the_gain_beats_the_noise():
    hosts = [f"h{i}" for i in range(4)]
    m = _matrix(4, slow={(1, 2): 0.95, (2, 1): 0.95})  # 5 % slower: noise
    rec = order.recommend(m, hosts)
    assert rec["order"] == hosts and "kept" in rec["method"]
    m = _matrix(4, slow={(1, 2): 0.3, (2, 1): 0.3})
    assert order.recommend(m, hosts)["order"] != hosts


# -- per-interface matching (ccdiag.cluster.ifaces), no MPI, no network ---------------------------

from ccdiag.cluster import ifaces  # noqa: E402


def test_select_keeps_up_addressed_fabric_interfaces_only():
    addrs = {"lo": [("127.0.0.1", "255.0.0.0")], "eth0": [("10.0.0.5", "255.255.255.0")],
             "ib0": [("10.2.0.5", 16)], "docker0": [("172.17.0.1", "255.255.0.0")],
             "veth12ab": [("172.17.0.9", 16)], "br-1234": [("172.18.0.1", 16)],
             "eth2": [("10.3.0.5", 24)], "eth3": [("10.4.0.5", 24)], "eth4": [],
             "bond0": [("10.5.0.5", 24)], "ens1": [("169.254.3.4", 16)]}
    up = {n: True for n in addrs}
    up["eth2"] = False
    got = ifaces.select(addrs, up, enslaved=["eth3"])
    assert [(c["name"], c["address"], c["prefix"]) for c in got] == [
        ("bond0", "10.5.0.5", 24), ("eth0", "10.0.0.5", 24), ("ib0", "10.2.0.5", 16)]


def test_select_iface_option_restricts_but_never_takes_an_interface_the_rule_refuses():
    addrs = {"eth0": [("10.0.0.5", 24)], "eth1": [("10.1.0.5", 24)], "veth0": [("10.9.0.5", 24)]}
    up = {n: True for n in addrs}
    assert [c["name"] for c in ifaces.select(addrs, up, only=["eth1"])] == ["eth1"]
    # the same usable-interface rule as the environment check and `ccdiag nccl`: a veth is refused
    assert ifaces.select(addrs, up, only=["veth0", "nosuch"]) == []


def _c(name, addr, prefix=24):
    return {"name": name, "address": addr, "prefix": prefix}


def test_common_pairs_match_by_subnet_and_agree_on_both_sides():
    a = [_c("eth0", "10.0.0.1"), _c("eth1", "10.1.0.1"), _c("ib0", "10.2.0.1", 16)]
    b = [_c("ens1", "10.1.0.2"), _c("eth0", "10.0.0.2"), _c("ib0", "10.2.7.9", 16), _c("eth9", "192.168.0.2")]
    ab = ifaces.common_pairs(a, b)
    assert [(x["name"], y["name"]) for x, y in ab] == [("eth0", "eth0"), ("eth1", "ens1"), ("ib0", "ib0")]
    ba = ifaces.common_pairs(b, a)
    # the same steps in the same order on both hosts: their lockstep depends on it
    assert [(y["address"], x["address"]) for x, y in ba] == [(x["address"], y["address"]) for x, y in ab]


def test_common_pairs_leave_out_mismatched_masks_and_same_address():
    a = [_c("eth0", "10.0.0.1", 24), _c("eth1", "10.1.0.1")]
    b = [_c("eth0", "10.0.0.2", 16), _c("eth1", "10.1.0.1")]
    assert ifaces.common_pairs(a, b) == []
    assert ifaces.network_of(_c("x", "10.1.2.3", 20)) == "10.1.0.0/20"


def _row(src, dst, net, iface, mbyte_s, error=None):
    return {"src_host": src, "dst_host": dst, "net": net, "src_iface": iface, "dst_iface": iface,
            "src_addr": "?", "dst_addr": "?", "bytes": 1, "mbyte_s": mbyte_s, "error": error}


def test_iface_matrices_and_findings_name_the_interface():
    hosts = ["h0", "h1", "h2", "h3"]
    results = {}
    for j, dst in enumerate(hosts):
        rows = []
        for src in hosts:
            if src == dst:
                continue
            rows.append(_row(src, dst, "10.0.0.0/24", "eth0", 1000.0))
            rows.append(_row(src, dst, "10.1.0.0/24", "eth1", 6.0 if dst == "h2" else 1000.0,
                             "timed out" if (src, dst) == ("h0", "h2") else None))
        results[j] = {"leader": True, "host": dst, "tcp_rows": rows}
    for r in results[2]["tcp_rows"]:
        if r["error"]:
            r["mbyte_s"] = None  # a failed transfer counts as 0.0
    mats = pmx.iface_matrices(results, hosts)
    assert [(m["net"], m["label"]) for m in mats] == [("10.0.0.0/24", "eth0"), ("10.1.0.0/24", "eth1")]
    # a transfer that failed is no figure: it is a failed direction of its own
    assert mats[1]["matrix_gbyte_s"][0][2] is None and mats[1]["matrix_gbyte_s"][1][2] == 0.006
    assert list(mats[1]["failed"]) == [("h0", "h2")]
    f0, cls0 = judge(View(mats[0]["hosts"], mats[0]["matrix_gbyte_s"], "eth0 (10.0.0.0/24)", prefix="cluster.iface"), 0.5)
    assert [f.check for f in f0] == ["cluster.iface_pairs"] and "eth0" in f0[0].summary
    f1, cls1 = judge(View(mats[1]["hosts"], mats[1]["matrix_gbyte_s"], "eth1 (10.1.0.0/24)", prefix="cluster.iface",
                          failed=mats[1]["failed"]), 0.5)
    assert cls1["slow_hosts"] == ["h2"]
    assert sorted(f.check for f in f1) == ["cluster.iface_host_slow", "cluster.iface_transfer_failed"]
    slow = next(f for f in f1 if f.check == "cluster.iface_host_slow")
    assert "h2" in slow.summary and "eth1" in slow.summary
    assert "timed out" in pmx.format_iface_rows(mats[1]["rows"])


def test_ring_hops_between_two_hosts_are_held_to_the_senders_line_rate():
    from ccdiag.cluster import capability

    rows = [{"src_rank": 0, "dst_rank": 1, "src_host": "a", "dst_host": "b", "iface": "eth0", "gbyte_s": 0.00625},
            {"src_rank": 1, "dst_rank": 0, "src_host": "b", "dst_host": "a", "iface": "eth0", "gbyte_s": 0.12}]
    speeds = {0: {"eth0": 1000}, 1: {"eth0": 1000}}
    fs = capability.judge_hops(rows, speeds)
    assert [(f.status, f.details["src_rank"]) for f in fs] == [("fail", 0)]
    assert "rank 0 -> rank 1" in fs[0].summary and "a <-> b" in fs[0].summary
    assert capability.judge_hops(rows, {}) == []  # no rate known: not judged this way
    assert len(capability.judge_hops(rows, {}, line_rate_gbit_s=1.0)) == 1
    same = [dict(rows[0], dst_host="a")]
    assert capability.judge_hops(same, speeds) == []  # shared memory is never a network finding


def _ec2_single_flow_gbit_s() -> float:
    """The single-stream figure of a real iperf3 run between two EC2 c5n.18xlarge hosts (the
    fixture names its source and cause)."""
    import re

    text = (IPERF3 / "iperf3-ec2-c5n18xlarge-single-flow.txt").read_text()
    return float(re.search(r"([\d.]+) Gbits/sec\s+0\s+sender", text).group(1))


def test_a_healthy_ec2_pair_at_its_single_flow_limit_is_not_failed_against_the_instance_bandwidth():
    """Two c5n.18xlarge hosts (100 Gbit/s) carry 9.46 Gbit/s in one TCP flow: EC2 limits a flow to
    10 Gbit/s. Held to the 100 Gbit/s line rate that read as a 9 % failure of a healthy pair; the
    flow limit of the hosts' cloud bounds the path instead, and the finding says so."""
    from ccdiag.cluster import capability
    from ccdiag.cluster.flowlimits import flow_limit

    figure = _ec2_single_flow_gbit_s() / 8.0
    hosts = ["a", "b"]
    m = [[None, figure], [figure, None]]
    links = {"a": {"b": "eth0"}, "b": {"a": "eth0"}}
    bare = capability.path_capability(hosts, links, {}, line_rate_gbit_s=100.0)
    assert [f.status for f in capability.judge(m, bare, hosts, [], "eth0")[0]] == ["fail"]  # the old verdict
    aws = flow_limit("aws")
    cap = capability.path_capability(hosts, links, {}, 100.0, {"a": aws.gbit_s, "b": aws.gbit_s})
    assert cap[0][1] == pytest.approx(10.0 / 8)
    assert capability.judge(m, cap, hosts, [], "eth0", aws.source)[0] == []
    # a pair far below one flow is still named, with the limit it was held to
    slow = [[None, 0.05], [0.05, None]]  # 0.4 Gbit/s
    (f,) = capability.judge(slow, cap, hosts, [], "eth0", aws.source)[0]
    assert f.status == "fail" and "what its path carries 10 Gbit/s" in f.summary
    assert "single-flow limit" in f.expected_source
    # the limit never stands in for an unknown line rate, and other clouds have none recorded
    assert capability.path_capability(hosts, links, {}, None, {"a": 10.0, "b": 10.0})[0][1] is None
    assert flow_limit("azure") is None and flow_limit(None) is None


def test_ring_hops_on_ec2_are_held_to_the_flow_limit():
    from ccdiag.cluster import capability
    from ccdiag.cluster.flowlimits import flow_limit

    figure = _ec2_single_flow_gbit_s() / 8.0
    rows = [{"src_rank": 0, "dst_rank": 1, "src_host": "a", "dst_host": "b", "iface": "eth0", "gbyte_s": figure}]
    speeds = {0: {"eth0": 100000}, 1: {"eth0": 100000}}
    assert [f.status for f in capability.judge_hops(rows, speeds)] == ["fail"]
    limits = {0: flow_limit("aws"), 1: flow_limit("aws")}
    assert capability.judge_hops(rows, speeds, None, limits) == []
    slow = [dict(rows[0], gbyte_s=0.05)]
    (f,) = capability.judge_hops(slow, speeds, None, limits)
    assert f.status == "fail" and "single-flow limit" in f.expected_source


def test_the_flow_limit_follows_the_cloud_the_door_reads_in_dmi(tmp_path):
    """The cross-host benchmarks learn their host's cloud as the platform probe does (the EC2
    identity strings of tests/test_platform.py); a tree without DMI has no cloud and no limit."""
    from ccdiag.cluster.flowlimits import flow_limit
    from ccdiag.host.door import LiveHost
    from ccdiag.probes.platform import provider_of

    dmi = tmp_path / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Amazon EC2\n")
    (dmi / "product_name").write_text("p4d.24xlarge\n")
    assert provider_of(LiveHost(str(tmp_path))) == "aws"
    assert flow_limit(provider_of(LiveHost(str(tmp_path)))).gbit_s == 10.0
    assert provider_of(LiveHost(str(tmp_path / "sys" / "class"))) is None
