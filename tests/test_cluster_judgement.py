"""One judgement of the pairwise matrix (pure, no MPI): with or without a line rate, never contradicting
itself; transfers that never completed; retests that disagree; a CPU-starved host; loss read from the
kernel's counters; the counters and CPU readings themselves."""

from __future__ import annotations

import pathlib
import re

import pytest

from ccdiag.cluster import capability, cpuuse, loss, netcounters, transfers, verdict
from ccdiag.cluster.judgement import View, judge

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "corpus"
HOSTS = ["h0", "h1", "h2", "h3"]
LINKS = {h: {p: "eth0" for p in HOSTS if p != h} for h in HOSTS}


def _m(n=4, fast=0.117, slow=None):
    m = [[None if i == j else fast for j in range(n)] for i in range(n)]
    for (a, b), v in (slow or {}).items():
        m[a][b] = v
    return m


def _cap(rate_gbit_s=1.0, hosts=HOSTS):
    return capability.path_capability(hosts, LINKS, {}, line_rate_gbit_s=rate_gbit_s)


def _statuses(found):
    return sorted((f.check, f.status) for f in found)


def test_with_no_line_rate_the_relative_judgement_decides_and_says_what_it_held_the_pairs_to():
    found, _ = judge(View(HOSTS, _m(), "eth0"), 0.5)
    assert _statuses(found) == [("cluster.link_capability", "skip"), ("cluster.pairs", "pass")]
    assert verdict.exit_code(found) == 0
    found, _ = judge(View(HOSTS, _m(slow={(0, 2): 0.006, (1, 2): 0.006, (3, 2): 0.006}), "eth0"), 0.5)
    assert ("cluster.host_slow", "fail") in _statuses(found) and verdict.exit_code(found) == 1
    assert not [f for f in found if f.status == "pass"]


def test_a_known_line_rate_adds_the_absolute_check_and_the_report_never_contradicts_itself():
    # h2 at 5 % of a 1 Gbit/s line rate with every peer: one finding on the host carrying the fraction,
    # no "every pair within its path's line rate" beside it
    m = _m(slow={(0, 2): 0.006, (1, 2): 0.006, (3, 2): 0.006})
    found, _ = judge(View(HOSTS, m, "eth0", cap=_cap()), 0.5)
    assert _statuses(found) == [("cluster.host_slow", "fail")]
    assert "5% of its paths' line rate" in found[0].summary
    # a whole fabric slow: relative finds nothing, the absolute check fails it, and no PASS stands beside
    found, _ = judge(View(HOSTS, _m(fast=0.006), "eth0", cap=_cap()), 0.5)
    assert _statuses(found) == [("cluster.link_capability", "fail")]
    # healthy at a known rate: one PASS that says both
    found, _ = judge(View(HOSTS, _m(), "eth0", cap=_cap()), 0.5)
    assert _statuses(found) == [("cluster.pairs", "pass")]
    assert "fleet reference" in found[0].summary and "line rate" in found[0].summary
    # one link slow both ways: one finding (the relative one, the line-rate fraction in its evidence)
    found, _ = judge(View(HOSTS, _m(slow={(1, 3): 0.006, (3, 1): 0.006}), "eth0", cap=_cap()), 0.5)
    assert _statuses(found) == [("cluster.link_slow", "fail")]
    assert found[0].details["fraction"] == pytest.approx(0.006 / 0.125)


def test_two_hosts_are_judged_by_their_two_directions_with_or_without_a_line_rate():
    hosts = ["a", "b"]
    one_way = [[None, 0.006], [0.117, None]]  # a -> b 20x slower than b -> a
    found, cls = judge(View(hosts, one_way, "eth0"), 0.5)
    assert _statuses(found) == [("cluster.link_capability", "skip"), ("cluster.link_slow", "fail")]
    slow = next(f for f in found if f.status == "fail")
    assert "a->b 6.0 MB/s is 5% of b->a" in slow.summary and verdict.exit_code(found) == 1
    # directions that agree with no line rate known: a link slow both ways would read the same
    # (a one-way shaper slows the other way too), so never a PASS: UNKNOWN, exit 3
    found, _ = judge(View(hosts, [[None, 0.11], [0.117, None]], "eth0"), 0.5)
    assert _statuses(found) == [("cluster.link_capability", "skip"), ("cluster.pairs", "unknown")]
    assert "both directions" in found[-1].summary or "both directions" in found[0].summary
    assert verdict.exit_code(found) == 3
    # with the line rate known, the same figures pass
    found, _ = judge(View(hosts, [[None, 0.11], [0.117, None]], "eth0", cap=_cap(1.0, hosts)), 0.5)
    assert _statuses(found) == [("cluster.pairs", "pass")]


def test_a_pair_read_slow_once_and_at_rate_once_is_unstable_not_slow():
    m = _m()  # the matrix keeps the better figure
    found, _ = judge(View(HOSTS, m, "eth0", retested={("h3", "h1"): (0.02, 0.117)}), 0.5)
    assert _statuses(found) == [("cluster.link_capability", "skip"), ("cluster.pair_unstable", "warn")]
    assert "unstable, not slow" in found[0].summary and verdict.exit_code(found) == 0
    # slow both times: the retest agrees, it is slow
    m = _m(slow={(3, 1): 0.02})
    found, _ = judge(View(HOSTS, m, "eth0", retested={("h3", "h1"): (0.019, 0.02)}), 0.5)
    assert ("cluster.link_slow", "fail") in _statuses(found)


def test_a_link_slow_on_one_matrix_and_at_rate_on_the_other_over_the_same_interface_is_unstable():
    """The false accusation seen under load: MPI's matrix had h3 <-> h5 slow twice while TCP over
    the same eth0 carried it at full rate. Only measurements that agree accuse a link."""
    mpi = View(HOSTS, _m(slow={(1, 3): 0.03}), "eth0", retested={("h1", "h3"): (0.03, 0.028)})
    tcp = View(HOSTS, _m(), "eth0 (10.0.0.0/24)", prefix="cluster.iface", transport="TCP")
    mpi.other, tcp.other = tcp, mpi
    found, _ = judge(mpi, 0.5)
    assert ("cluster.pair_unstable", "warn") in _statuses(found) and verdict.exit_code(found) == 0
    assert "TCP over the same interface" in next(f.summary for f in found if f.status == "warn")
    # TCP slow there too: both agree, the link is slow
    tcp.m = _m(slow={(1, 3): 0.03})
    found, _ = judge(mpi, 0.5)
    assert ("cluster.link_slow", "fail") in _statuses(found)


def test_a_host_all_of_whose_transfers_never_completed_is_named_with_the_mtu_that_differs():
    """A black hole for large frames: every pair of h2 delivered its small message, never its 1 MiB
    probe. The finding is on the host, says size-dependent, and names the MTU that differs; the
    empty cells never stand under a PASS."""
    m = _m()
    failed = {}
    for p in ("h0", "h1", "h3"):
        for src, dst in ((p, "h2"), ("h2", p)):
            m[HOSTS.index(src)][HOSTS.index(dst)] = None
            failed[(src, dst)] = {"stage": "the 1048576-byte probe", "small_ok": True, "bytes": 1 << 20, "share_s": 6.0}
    mtus = {"h0": 1500, "h1": 1500, "h2": 9000, "h3": 1500}
    found, _ = judge(View(HOSTS, m, "eth0", failed=failed, mtus=mtus), 0.5)
    assert _statuses(found) == [("cluster.host_transfers_failed", "fail"), ("cluster.link_capability", "skip")]
    f = found[0]
    assert f.component.name == "h2" and f.details["size_dependent"]
    assert "256-byte messages arrive, 1 MiB ones do not" in f.summary and "MTU or fragmentation" in f.summary
    assert "h2 9000" in f.remedy and "1500" in f.remedy
    # every MTU the same: the path (a switch port, a tunnel) is named instead
    found, _ = judge(View(HOSTS, m, "eth0", failed=failed, mtus={h: 9000 for h in HOSTS}), 0.5)
    assert "every host's eth0 has MTU 9000" in found[0].remedy
    # nothing at all arrived from one peer only: that pair, not a host
    failed = {("h1", "h3"): {"stage": "a 256-byte message", "small_ok": False, "bytes": 256, "share_s": 6.0}}
    m = _m()
    m[1][3] = None
    found, _ = judge(View(HOSTS, m, "eth0", failed=failed), 0.5)
    assert ("cluster.transfer_failed", "fail") in _statuses(found)
    assert "not even a 256-byte message arrived" in next(f.summary for f in found if f.status == "fail")
    assert verdict.exit_code(found) == 1


def test_a_cpu_starved_host_is_the_finding_and_its_slow_pairs_fold_under_it():
    m = _m(slow={(0, 2): 0.03, (2, 0): 0.03, (2, 3): 0.03, (3, 2): 0.03})  # two of h2's three pairs slow
    cpu = {h: {"wall_s": 4.0, "cpu_s": 1.5, "sched_s": 3.98, "throttled_s": None} for h in HOSTS}
    cpu["h2"] = {"wall_s": 4.0, "cpu_s": 0.4, "sched_s": 1.2, "throttled_s": None}  # stopped 70 % of the time
    found, _ = judge(View(HOSTS, m, "eth0", cpu=cpu), 0.5)
    assert _statuses(found) == [("cluster.host_cpu_starved", "fail"), ("cluster.link_capability", "skip")]
    f = found[0]
    assert f.component.name == "h2" and "30% of the time" in f.summary
    assert "h0 <-> h2" in f.summary and "h2 <-> h3" in f.summary
    # throttled by a cgroup quota: the waiting it counts in schedstat is taken off
    assert cpuuse.starved({"wall_s": 4.0, "cpu_s": 0.4, "sched_s": 4.0, "throttled_s": 3.6})
    # a loaded machine (waiting for a CPU, not held off it) is not starved
    assert not cpuuse.starved({"wall_s": 4.0, "cpu_s": 0.5, "sched_s": 3.97, "throttled_s": 0.0})
    assert cpuuse.available_fraction({"wall_s": 0.01, "cpu_s": 0.0, "sched_s": 0.0}) is None  # too little to judge


def test_throttled_time_is_read_from_either_cgroup_version():
    v1 = "nr_periods 38\nnr_throttled 38\nthrottled_time 2749638729\nnr_bursts 0\nburst_time 0\n"  # read on this machine
    v2 = "usage_usec 1000\nuser_usec 600\nsystem_usec 400\nnr_periods 5\nnr_throttled 2\nthrottled_usec 1500000\n"
    assert cpuuse.parse_throttled_s(v1) == pytest.approx(2.749638729)
    assert cpuuse.parse_throttled_s(v2) == pytest.approx(1.5)
    assert cpuuse.parse_throttled_s("usage_usec 5\n") is None
    paths = cpuuse.cgroup_cpu_stat_path("4:memory:/x\n1:cpu:/job/7\n0::/job/7\n", "/cg")
    assert paths[0] == "/cg/cpu/job/7/cpu.stat" and "/cg/job/7/cpu.stat" in paths


def test_the_kernels_tcp_counters_are_read_from_real_proc_files():
    snmp = (FIXTURES / "procnet" / "snmp-dev-machine.txt").read_text()
    netstat = (FIXTURES / "procnet" / "netstat-dev-machine.txt").read_text()
    tables = netcounters.parse_proc_table(snmp)
    assert {"Ip", "Icmp", "Tcp", "Udp"} <= set(tables) and "RetransSegs" in tables["Tcp"]
    tcp = netcounters.tcp_counters(snmp, netstat)
    assert {"out_segs", "retrans_segs", "in_segs", "lost_retransmit", "timeouts"} <= set(tcp)
    assert all(isinstance(v, int) and v >= 0 for v in tcp.values())
    # a truncated read (header without its values) is left out, never misread
    assert netcounters.parse_proc_table("Tcp: RtoAlgorithm OutSegs\n") == {}


def test_counters_before_and_after_give_the_traffic_and_the_interface_that_carried_it(tmp_path):
    """SYNTHESIZED trees in the kernel's file layout; the RDMA counter names are those of a real
    mlx5 port (tests/fixtures/corpus/sysfs/gpud-class-infiniband-h100.ttar.txt)."""
    def tree(root, tcp, eth0_bytes, lo_bytes, oos):
        (root / "proc/net").mkdir(parents=True, exist_ok=True)
        (root / "proc/net/snmp").write_text(f"Tcp: OutSegs RetransSegs InSegs\nTcp: {tcp[0]} {tcp[1]} 5\n")
        (root / "proc/net/netstat").write_text("TcpExt: TCPLostRetransmit TCPTimeouts\nTcpExt: 1 2\n")
        for name, n in (("eth0", eth0_bytes), ("lo", lo_bytes)):
            d = root / f"sys/class/net/{name}/statistics"
            d.mkdir(parents=True, exist_ok=True)
            for k in netcounters.IFACE_FIELDS:
                (d / k).write_text(f"{n if k in ('rx_bytes', 'tx_bytes') else 0}\n")
        hw = root / "sys/class/infiniband/mlx5_0/ports/1/hw_counters"
        hw.mkdir(parents=True, exist_ok=True)
        (hw / "out_of_sequence").write_text(f"{oos}\n")
        (hw / "np_cnp_sent").write_text("0\n")
    a, b = tmp_path / "a", tmp_path / "b"
    tree(a, (1000, 0), 10, 10, 0)
    tree(b, (201000, 1900), 300 << 20, 1 << 10, 17)
    moved = netcounters.delta(netcounters.read_local(str(b)), netcounters.read_local(str(a)))
    assert moved["tcp"]["out_segs"] == 200000 and moved["tcp"]["retrans_segs"] == 1900
    assert netcounters.busiest_iface(moved) == "eth0"
    assert moved["rdma"]["mlx5_0/1"]["out_of_sequence"] == 17
    assert loss.loss_fraction(moved["tcp"]) == pytest.approx(0.0095)
    # a counter that went down (a reset) is no traffic
    back = netcounters.delta(netcounters.read_local(str(a)), netcounters.read_local(str(b)))["tcp"]
    assert "out_segs" not in back and "retrans_segs" not in back and back["timeouts"] == 0
    found = loss.rdma_findings({"h1": moved})
    assert [f.check for f in found] == ["cluster.rdma_loss"] and "out_of_sequence +17" in found[0].summary


def _iperf3_fraction(path: pathlib.Path, mss: int) -> float:
    """Resent / sent segments of a kept iperf3 output (sent = bytes / MSS)."""
    text = path.read_text()
    retr = sum(int(x) for x in re.findall(r"sec\s+[\d.]+ \w?Bytes\s+[\d.]+ \w?bits/sec\s+(\d+)", text))
    units = {"GBytes": 1 << 30, "MBytes": 1 << 20, "KBytes": 1 << 10}
    sent = sum(float(v) * units[u] for v, u in re.findall(r"sec\s+([\d.]+) (GBytes|MBytes|KBytes)", text))
    if "0.00-20.00" in text:  # the one-line summary: its own figures
        retr, sent = 114, 32086665888
    return retr / (sent / mss)


@pytest.mark.parametrize("name, mss", [("iperf3-25g-healthy-retransmits-esnet-1088.txt", 1448),
                                       ("iperf3-40g-netns-healthy-retransmits-cilium-981.txt", 1428)])
def test_real_healthy_runs_resend_far_less_than_the_loss_threshold(name, mss):
    frac = _iperf3_fraction(FIXTURES / "iperf3" / name, mss)
    assert 0 < frac < loss.LOSS_FRACTION / 5, frac


def test_loss_into_one_host_is_named_on_that_host_and_a_lossy_pair_on_the_pair():
    """Each sender's counters during its pair: 1 % lost into h2 resends ~0.9 % of the segments its
    peers send it (measured here between namespace hosts with nftables dropping 1 % at random),
    healthy directions ~0.01 %."""
    def c(out, retr):
        return {"tcp": {"out_segs": out, "retrans_segs": retr}, "ifaces": {}}
    per_pair = {(a, b): c(140000, 1300 if b == "h2" else 15) for a in HOSTS for b in HOSTS if a != b}
    per_pair[("h2", "h0")]["ifaces"] = {"eth0": {"rx_dropped": 3}}
    found = loss.findings(per_pair, HOSTS, "eth0")
    assert [(f.check, f.component.name) for f in found] == [("cluster.host_loss", "h2")]
    assert "loses packets into it" in found[0].summary and "0.93%" in found[0].summary
    assert "eth0 rx_dropped +3" in found[0].summary
    per_pair = {(a, b): c(140000, 15) for a in HOSTS for b in HOSTS if a != b}
    per_pair[("h1", "h3")] = c(140000, 1300)
    found = loss.findings(per_pair, HOSTS, "eth0")
    # one pair, seen once: the tail of another pair's traffic resent in its window reads the same
    assert [(f.check, f.component.name, f.status) for f in found] == [("cluster.link_loss", "h1 <-> h3 (eth0)", "warn")]
    assert "not measured again" in found[0].summary
    found = loss.findings(per_pair, HOSTS, "eth0", {("h1", "h3"): c(140000, 1200)})
    assert [f.status for f in found] == ["fail"] and "lossy again" in found[0].summary
    found = loss.findings(per_pair, HOSTS, "eth0", {("h1", "h3"): c(140000, 2)})
    assert [f.status for f in found] == ["warn"] and "not lossy (seen once)" in found[0].summary
    # too few segments to say anything
    assert loss.findings({("h0", "h1"): c(10, 5)}, ["h0", "h1"], "eth0") == []


def test_failed_transfers_by_the_same_rule_as_slow_ones():
    failed = {("h0", "h1"): {"small_ok": True, "bytes": 1 << 20, "share_s": 3.0}}
    measured = {("h0", "h2"), ("h1", "h2"), ("h0", "h3"), ("h1", "h3"), ("h2", "h3")}
    found = transfers.findings(failed, measured, HOSTS, "eth0", prefix="cluster.iface")
    assert [f.check for f in found] == ["cluster.iface_transfer_failed"]


def test_loss_on_a_host_already_named_slow_joins_that_finding():
    """A shaper drops what exceeds its rate: the resent segments into a slowed host are how it is
    slow, one finding, not a second one on a link of it."""
    from ccdiag.cluster.pairs_report import fold_loss

    m = _m(slow={(0, 2): 0.006, (1, 2): 0.006, (3, 2): 0.006})
    found, _ = judge(View(HOSTS, m, "eth0"), 0.5)
    per_pair = {(a, b): {"tcp": {"out_segs": 5000, "retrans_segs": 90 if (a, b) == ("h1", "h2") else 0}}
                for a in HOSTS for b in HOSTS if a != b}
    lost = loss.findings(per_pair, HOSTS, "eth0")
    assert [f.check for f in lost] == ["cluster.link_loss"]
    folded = fold_loss(found, lost)
    fails = [f for f in folded if f.status == "fail"]
    assert [f.check for f in fails] == ["cluster.host_slow"] and "TCP resent" in fails[0].summary
    # loss on a host nothing else names stands on its own
    assert [f.check for f in fold_loss(judge(View(HOSTS, _m(), "eth0"), 0.5)[0], lost) if f.status != "pass"
            and f.check != "cluster.link_capability"] == ["cluster.link_loss"]


def test_the_ring_hop_check_names_the_hop_into_a_black_hole_and_the_host_both_of_whose_hops_failed():
    """Rank 0's gather of the hop check (ccdiag.cluster.hopcheck): the receiver's word decides a hop;
    when the receiver never answered (its answer queues behind the stuck transfer), the sender's."""
    from ccdiag.cluster import hopcheck

    hosts = {r: f"h{r}" for r in range(4)}
    every = {r: {"small_in": True, "large_in": True, "small_out": True, "large_out": True, "share_s": 2.0}
             for r in range(4)}
    assert hopcheck.failed_hops(every, hosts, 4) == ({}, {("h3", "h0"), ("h0", "h1"), ("h1", "h2"), ("h2", "h3")})
    every[2].update(large_in=False)  # into h2 large frames vanish
    failed, ok = hopcheck.failed_hops(every, hosts, 4)
    assert list(failed) == [("h1", "h2")] and failed[("h1", "h2")]["small_ok"] is True
    found = transfers.findings(failed, ok, list(hosts.values()), "eth0", {"h0": 9000, "h1": 9000, "h2": 1500, "h3": 9000})
    assert [f.check for f in found] == ["cluster.transfer_failed"] and "h2 1500" in found[0].remedy
    del every[2]  # h2 never answered: its senders speak for it
    every[1].update(large_out=False)
    every[3]["small_in"] = every[3]["large_in"] = False
    failed, ok = hopcheck.failed_hops(every, hosts, 4)
    assert set(failed) == {("h1", "h2"), ("h2", "h3")} and not failed[("h1", "h2")]["receiver_reported"]
    found = transfers.findings(failed, ok, list(hosts.values()), "eth0")
    assert [(f.check, f.component.name) for f in found] == [("cluster.host_transfers_failed", "h2")]
    assert hopcheck.share_s(100.0) == 7.5 and hopcheck.share_s(1.0) == 1.0


def test_resent_segments_the_receiver_reported_as_duplicates_are_not_loss():
    """A retransmission timer or tail loss probe that fired early (a loaded host) resends a segment
    that had arrived; the receiver says so with a D-SACK (TcpExt TCPDSACKRecvSegs)."""
    assert loss.loss_fraction({"out_segs": 20000, "retrans_segs": 60, "dsack_recv_segs": 58}) == pytest.approx(0.0001)
    assert loss.loss_fraction({"out_segs": 20000, "retrans_segs": 60}) == pytest.approx(0.003)
    assert "dsack_recv_segs" in netcounters.tcp_counters(
        (FIXTURES / "procnet" / "snmp-dev-machine.txt").read_text(),
        (FIXTURES / "procnet" / "netstat-dev-machine.txt").read_text())
