"""Pure logic of the cluster commands, no MPI: schedule, ring order, hop analysis, sizes, pair
classification, the ring's chunk arithmetic."""

from __future__ import annotations

import itertools

import pytest

from ccdiag.cluster import hops, order, pairs, ring


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
    cls = pairs.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == ["h2"] and cls["slow_links"] == []
    m = _matrix(4, slow={(3, 1): 0.006})
    cls = pairs.classify(m, hosts, 0.5)
    assert cls["slow_hosts"] == [] and [(x["a"], x["b"]) for x in cls["slow_links"]] == [("h1", "h3")]
    f = pairs.findings(cls, hosts, "eth0", 0.5)
    assert f[0].check == "cluster.link_slow" and "h1" in f[0].summary and "h3" in f[0].summary
    assert "eth0" in f[0].summary


def test_classify_healthy_is_one_pass():
    cls = pairs.classify(_matrix(5), [f"h{i}" for i in range(5)], 0.5)
    f = pairs.findings(cls, [f"h{i}" for i in range(5)], "eth0", 0.5)
    assert [x.status for x in f] == ["pass"]


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


def test_link_iface_prefers_mpi_include(monkeypatch):
    from ccdiag.cluster.mpictx import link_iface

    me = {"ifaces": {"eth0": ["10.1.0.1"], "ib0": ["10.2.0.1"]}}
    peer = {"ifaces": {"ib0": ["10.2.0.2"]}}
    monkeypatch.delenv("OMPI_MCA_btl_tcp_if_include", raising=False)
    assert link_iface(me, peer) == "ib0"
    monkeypatch.setenv("OMPI_MCA_btl_tcp_if_include", "eth0")
    assert link_iface(me, peer) == "eth0"


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
    mats = pairs.iface_matrices(results, hosts)
    assert [(m["net"], m["label"]) for m in mats] == [("10.0.0.0/24", "eth0"), ("10.1.0.0/24", "eth1")]
    assert mats[1]["matrix_gbyte_s"][0][2] == 0.0 and mats[1]["matrix_gbyte_s"][1][2] == 0.006
    cls0, f0 = pairs.iface_findings(mats[0], 0.5)
    assert [f.check for f in f0] == ["cluster.iface_pairs"] and "eth0" in f0[0].summary
    cls1, f1 = pairs.iface_findings(mats[1], 0.5)
    assert cls1["slow_hosts"] == ["h2"]
    assert [f.check for f in f1] == ["cluster.iface_host_slow"]
    assert f1[0].details["iface"] == "eth1" and "h2" in f1[0].summary and "eth1" in f1[0].summary
    assert "timed out" in pairs.format_iface_rows(mats[1]["rows"])
