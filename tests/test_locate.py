"""Group testing (`bench locate`'s search): the real Locator against the fabric model of
tests/fabric_model.py (leaf/spine, ECMP, noise), each planted fault named by its kind and nothing
else, and the report's findings and exit codes. The figures at 64-1,024 hosts over many trials are
bench/bench_locate.py's; these are single, seeded cases that must come out right."""

from __future__ import annotations

import random

import pytest

from fabric_model import ModelTransport, leaf_spine, leaves
from ccdiag.cluster import locate as L
from ccdiag.cluster.layout import square_groups
from ccdiag.cluster.locate_report import findings, verdict
from ccdiag.core.findings import FAIL, PASS, UNKNOWN


def search(fab, groups=None, fabric_groups=True, hops=True, **kw) -> L.Outcome:
    groups = groups or leaves(fab)
    loc = L.Locator(fab.hosts, groups, margin=0.5, fabric_groups=fabric_groups, **kw)
    loc.group_names = [f"leaf{i}" for i in range(len(groups))]
    return L.run(loc, ModelTransport(fab, hops=hops))


def test_healthy_fabric_names_nothing_in_a_few_rounds():
    fab = leaf_spine(64, seed=3)
    out = search(fab)
    assert (out.slow_hosts, out.slow_links, out.slow_uplinks, out.unconfirmed) == ([], [], {}, [])
    assert out.judged and out.rounds <= 8 and out.tests <= 64
    f = findings(out, fab.hosts, 0.5)
    assert [x.status for x in f] == [PASS] and "2016" in f[0].summary  # what every pair would have cost


@pytest.mark.parametrize("inbound_only", [False, True])
def test_slow_host_named_and_confirmed_against_two_good_hosts(inbound_only):
    fab = leaf_spine(256, seed=5)
    x = fab.hosts[77]
    fab.host_in[x] = 0.2
    if not inbound_only:
        fab.host_out[x] = 0.2
    out = search(fab)
    assert out.slow_hosts == [x] and out.slow_links == [] and out.slow_uplinks == {}
    confirm = [t["hosts"] for e in out.log for t in e["tests"] if t["why"] == "confirm" and x in t["hosts"]]
    assert len(confirm) == 2  # one good host from its own leaf, then one from another
    partners = [h for t in confirm for h in t if h != x]
    assert fab.leaf_of[partners[0]] == fab.leaf_of[x] != fab.leaf_of[partners[1]]
    assert out.tests <= 256 // 2
    (f,) = findings(out, fab.hosts, 0.5)
    assert f.check == "cluster.host_slow" and f.status == FAIL and f.component.name == x


def test_slow_uplink_named_as_the_leafs_uplinks_not_its_hosts():
    fab = leaf_spine(256, seed=11)
    fab.uplink[(6, 3)] = 0.1
    out = search(fab)
    assert list(out.slow_uplinks) == ["leaf6"] and out.slow_hosts == [] and out.slow_links == []
    assert all((fab.leaf_of[a] == 6) != (fab.leaf_of[b] == 6) for a, b in out.slow_uplinks["leaf6"])
    (f,) = findings(out, fab.hosts, 0.5, "leaf switch")
    assert f.check == "cluster.link_slow" and f.component.kind == "fabric_link"
    assert f.component.name == "leaf6 uplinks" and "the uplinks of leaf switch leaf6" in f.summary


def test_without_a_layout_the_same_fault_is_links_not_a_group():
    fab = leaf_spine(256, seed=11)
    fab.uplink[(6, 3)] = 0.1
    out = search(fab, groups=square_groups(fab.hosts)[::-1], fabric_groups=False)
    assert out.slow_uplinks == {} and out.slow_links
    assert all((fab.leaf_of[a] == 6) != (fab.leaf_of[b] == 6) for a, b in out.slow_links)


def test_slow_link_between_ring_neighbours_is_a_link_measured_slow_four_times():
    fab = leaf_spine(64, seed=2)
    a, b = fab.hosts[20], fab.hosts[21]  # neighbours in their leaf's ring
    fab.pair[frozenset((a, b))] = 0.2
    out = search(fab)
    assert out.slow_links == [(a, b)] and out.slow_hosts == []
    tests_of_pair = [e for e in out.log for t in e["tests"] if {a, b} == set(t["hosts"])]
    assert len(tests_of_pair) == 3  # three retests after the screen
    (f,) = findings(out, fab.hosts, 0.5)
    assert f.check == "cluster.link_slow" and f.details["a"] == a and f.details["b"] == b


class StarvedOnce:
    """The model, with one host held off the CPU for the whole of the first round only."""

    def __init__(self, fab, host):
        self.inner, self.host, self.k = ModelTransport(fab), host, 0

    def __call__(self, tests):
        self.k += 1
        out = self.inner(tests)
        if self.k == 1:
            for r in out:
                r.hops_gbyte_s = {d: v * (0.3 if self.host in d else 1.0) for d, v in r.hops_gbyte_s.items()}
        return out


def test_a_host_slow_once_is_not_accused():
    fab = leaf_spine(64, seed=4, hiccup_p=0.0)
    loc = L.Locator(fab.hosts, leaves(fab), margin=0.5)
    out = L.run(loc, StarvedOnce(fab, fab.hosts[9]))
    assert (out.slow_hosts, out.slow_links, out.unconfirmed) == ([], [], [])
    assert any(t["why"] == "confirm" and fab.hosts[9] in t["hosts"] for e in out.log for t in e["tests"])


def test_test_budget_leaves_suspects_unconfirmed_and_the_verdict_open():
    fab = leaf_spine(64, seed=5)
    x = fab.hosts[40]
    fab.host_in[x] = fab.host_out[x] = 0.2
    out = search(fab, max_tests=8)  # the screen alone takes more
    assert out.tests == 8 and out.slow_hosts == [] and "test budget" in (out.stopped or "")
    f = findings(out, fab.hosts, 0.5)
    assert [x.status for x in f] == [UNKNOWN] or any(x.status == UNKNOWN for x in f)


class Outcome:
    missing: list = []
    errors: dict = {}


def test_exit_codes_follow_pairs():
    fab = leaf_spine(64, seed=5)
    ok = search(fab)
    assert verdict(findings(ok, fab.hosts, 0.5), Outcome(), False) == 0
    assert verdict(findings(ok, fab.hosts, 0.5), Outcome(), True) == 3  # a rank stopped measuring
    fab.host_in[fab.hosts[3]] = 0.1
    bad = search(fab)
    assert verdict(findings(bad, fab.hosts, 0.5), Outcome(), True) == 1  # a failure decides whatever else


def test_ring_known_by_bus_bandwidth_alone_is_split_down_to_the_slow_host():
    fab = leaf_spine(64, seed=8)
    x = fab.hosts[50]
    fab.host_in[x] = fab.host_out[x] = 0.2
    out = search(fab, hops=False)
    assert out.slow_hosts == [x]
    whys = [t["why"] for e in out.log for t in e["tests"]]
    assert "split" in whys


def test_two_hosts_cannot_be_judged():
    fab = leaf_spine(2, seed=1)
    out = search(fab, groups=[fab.hosts])
    assert not out.judged and "fewer than three" in out.why_not
    (f,) = findings(out, fab.hosts, 0.5)
    assert f.status == UNKNOWN


def test_stripes_and_packing():
    groups = [["a1", "a2", "a3"], ["b1", "b2"], ["c1", "c2", "c3"]]
    assert L.stripes(groups) == [["a1", "b1", "c1"], ["a2", "b2", "c2"], ["a3", "c3"]]
    assert L.stripes([["a1", "a2"], ["b1"]]) == [["a1", "b1", "a2"]]  # a ring of one joins the one before
    g = {h: i for i, grp in enumerate(groups) for h in grp}
    rounds = L.pack([("a1", "b1"), ("a2", "c1"), ("a3", "a2"), ("b2", "c2")], g)
    # no host twice in a round, and no group in two tests that cross groups in one round
    for r in rounds:
        hosts = [h for t in r for h in t]
        assert len(hosts) == len(set(hosts))
        spans = [{g[h] for h in t} for t in r if len({g[h] for h in t}) > 1]
        assert all(not (s & t) for i, s in enumerate(spans) for t in spans[i + 1:])
    assert sorted(t for r in rounds for t in r) == sorted([("a1", "b1"), ("a2", "c1"), ("a3", "a2"), ("b2", "c2")])


def test_margin_out_of_range():
    with pytest.raises(ValueError):
        L.Locator(["a", "b"], [["a", "b"]], margin=1.5)


def test_seeded_trial_at_scale_names_the_planted_host():
    """One of the simulator's trials at 1,024 hosts, as a regression guard for the search."""
    for seed in (2,):
        fab = leaf_spine(1024, seed=seed, hash_seed=seed)
        x = random.Random(seed).choice(fab.hosts)
        fab.host_in[x] = fab.host_out[x] = 0.2
        out = search(fab)
        assert out.slow_hosts == [x] and not out.slow_links and out.tests <= 1024 // 4


# -- the MPI side's pure parts, and the command's bad input ---------------------------------------
def test_launcher_rank_read_before_mpi_starts():
    from ccdiag.cluster.locate_mpi import launcher_rank

    assert launcher_rank({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert launcher_rank({"SLURM_PROCID": "0", "PMI_RANK": "x"}) == 0
    assert launcher_rank({}) is None


class FakeComm:
    rank = 7

    def __init__(self):
        self.calls = []

    def Isend(self, buf, dest, tag):  # noqa: N802
        self.calls.append(("send", dest, tag))

    def Irecv(self, buf, source, tag):  # noqa: N802
        self.calls.append(("recv", source, tag))


def test_ring_view_maps_ring_positions_to_world_ranks_and_keeps_rounds_apart():
    from ccdiag.cluster.locate_mpi import RingView

    comm = FakeComm()
    v = RingView(comm, [4, 7, 9], tag_offset=2048)
    assert (v.rank, v.size) == (1, 3)
    v.Isend(None, 2, 1000)
    v.Irecv(None, 0, 1001)
    assert comm.calls == [("send", 9, 3048), ("recv", 4, 3049)]


def test_round_results_take_each_ring_at_its_slowest_member():
    from ccdiag.cluster.locate_mpi import _results

    hosts = ["a", "b", "c", "d"]
    tests = [L.RingTest(("a", "b", "c"), "screen"), L.RingTest(("d",), "screen")]
    objs = {0: {"ring": [0, 1, 2], "hops": {(2, 0): 1.0}, "busbw": 0.9, "wrong": 0},
            1: {"ring": [0, 1, 2], "hops": {(0, 1): 2.0}, "busbw": 0.5, "wrong": 3},
            2: None}
    r, empty = _results(tests, objs, hosts)
    assert r.hops_gbyte_s == {("c", "a"): 1.0, ("a", "b"): 2.0} and r.busbw_gbyte_s == 0.5 and r.wrong == 3
    assert empty.hops_gbyte_s == {} and empty.busbw_gbyte_s is None


@pytest.mark.parametrize("args, words", [
    (["--layout", "nvml", "--layout", "x.conf"], "--layout nvml reads NVML on every host"),
    (["--size", "0"], "not a positive size"),
    (["--layout", "MISSING"], "MISSING"),
])
def test_bad_options_exit_2_in_one_line(args, words):
    from cli_runner import run

    code, out, err = run("bench", "locate", *args)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (code, out, err)


def test_bad_layout_exits_2_naming_its_line(tmp_path):
    from cli_runner import run

    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s0 Nodes=a,b\nSwitchName=s1 Nodes=c[9-1]\n")
    code, out, err = run("bench", "locate", "--layout", str(conf))
    assert code == 2 and f"{conf}:2: bad hostlist" in err and "Traceback" not in err


def test_nvml_layout_groups_by_domain_and_says_when_no_host_has_one():
    from ccdiag.cluster.locate_mpi import _start_search

    hosts = ["g1", "g2", "g3", "g4"]
    cfg = {"layout": ["nvml"], "margin": 0.5, "runs": 3, "max_tests": None}
    d = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
    plan = {"nvlink": {"g1": (f"{d}.1", None), "g2": (f"{d}.1", None), "g3": (f"{d}.2", None),
                       "g4": (None, "no GPU registered with an NVLink fabric")}}
    s = _start_search(hosts, plan, cfg)
    assert s["placement"].kind == "NVLink domain" and s["placement"].unplaced == ("g4",)
    assert s["groups"] == [["g1", "g2"], ["g3", "g4"]]  # a domain of one host joins the next group
    none = {"nvlink": {h: (None, "the nvml probe read nothing (no NVIDIA driver)") for h in hosts}}
    s = _start_search(hosts, none, cfg)
    assert s["placement"] is None and s["groups"] == [["g1", "g2"], ["g3", "g4"]]
    assert s["notes"] == ["no host has an NVLink domain id from NVML: the nvml probe read nothing (no NVIDIA driver)"]
