"""`bench locate` on real ranks: namespace hosts under the real mpirun, a fault planted with tc or
nftables, and the host, link or uplink it names (by which, never by an absolute rate). Three runs,
each bounded: a slow host among 8 with a topology.conf; a slow leaf uplink among 12 hosts on three
leaf bridges under a spine bridge (tests/mpifabric.py); a path between two hosts that swallows
large frames (nftables) among 8 without a layout."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from mpifabric import LeafSpineCluster
from mpinet import NetnsCluster, netns_skip_reason, python_argv

pytestmark = [pytest.mark.mpi, pytest.mark.netns, pytest.mark.slow]

_WHY = netns_skip_reason()
if _WHY:
    pytest.skip(_WHY, allow_module_level=True)

#: a pair below 30 % of the fleet is slow: the planted faults run at a few per cent of the line rate,
#: and the wide margin keeps a loaded 2-core machine's scheduling from making a second finding
ARGS = ["--size", "1M", "--runs", "2", "--margin", "0.7", "--json"]


def _doc(out: str) -> dict:
    return json.loads(out[out.index("{"):])


def _why(out: str, err: str) -> str:
    """What a failed run said: its findings and where each round got, else the end of its output."""
    try:
        doc = _doc(out)
        return json.dumps({"findings": [(f["status"], f["summary"]) for f in doc["findings"]],
                           "search": {k: doc.get("search", {}).get(k) for k in ("unconfirmed", "stopped")},
                           "rounds": [(e["round"], [t["why"] for t in e["tests"]]) for e in doc.get("search", {}).get("log", [])],
                           "incomplete": doc.get("incomplete"), "faults": doc.get("faults")}, indent=1) + "\n" + err[-3000:]
    except ValueError:
        return out[-3000:] + err[-2000:]


def _fails(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["status"] == "fail"]


@pytest.fixture
def eight(request):
    c = NetnsCluster(8)
    request.addfinalizer(c.close)
    return c.up()


def test_slow_host_named_with_the_slurm_layout_and_left_out_of_the_ring_order(eight, tmp_path):
    c = eight
    c.line_rate("1gbit")
    c.slow_host(5)
    conf = tmp_path / "topology.conf"
    conf.write_text(f"SwitchName=leaf0 Nodes={','.join(c.hosts[:4])}\n"
                    f"SwitchName=leaf1 Nodes={','.join(c.hosts[4:])}\nSwitchName=spine Switches=leaf[0-1]\n")
    hf = tmp_path / "ring.hosts"
    rc, out, err, _ = c.run(c.mpirun_argv() + python_argv("bench", "locate", "--layout", str(conf), *ARGS,
                                                         "--budget", "60", "--hostfile-out", str(hf)), 120)
    assert rc == 1, _why(out, err)
    doc = _doc(out)
    assert [(f["check"], f["component"]["name"]) for f in _fails(doc)] == [("cluster.host_slow", c.hosts[5])]
    s = doc["search"]
    assert s["slow_hosts"] == [c.hosts[5]] and s["tests"] <= 12 and s["rounds"] <= 6
    assert doc["layout"]["format"] == "slurm-tree" and doc["layout"]["groups"] == {
        "leaf0": c.hosts[:4], "leaf1": c.hosts[4:]}
    order = [ln.split()[0] for ln in hf.read_text().splitlines() if not ln.startswith("#")]
    assert order == c.hosts[:5] + c.hosts[6:]  # grouped by leaf, the slow host left out
    # the slow host reads far below its peers (a ratio, not a rate)
    pairs = {frozenset((p["a"], p["b"])): p["gbyte_s"] for p in doc["pairs"]}
    slow = [v for k, v in pairs.items() if c.hosts[5] in k]
    fine = [v for k, v in pairs.items() if c.hosts[5] not in k]
    assert max(slow) < 0.3 * sorted(fine)[len(fine) // 2]


def test_slow_uplink_of_one_leaf_named_as_its_uplinks(request, tmp_path):
    c = LeafSpineCluster(leaves=3, per_leaf=4)
    request.addfinalizer(c.close)
    c.up()
    c.line_rate("1gbit")
    c.slow_uplink(1, "40mbit")
    conf = tmp_path / "topology.conf"
    conf.write_text(c.topology_conf())
    rc, out, err, _ = c.run(c.mpirun_argv() + python_argv("bench", "locate", "--layout", str(conf), *ARGS,
                                                         "--budget", "100"), 170)
    assert rc == 1, _why(out, err)
    doc = _doc(out)
    fails = _fails(doc)
    assert [(f["check"], f["component"]["kind"], f["component"]["name"]) for f in fails] == [
        ("cluster.link_slow", "fabric_link", "leaf1 uplinks")], fails
    # every pair it names crosses leaf 1's boundary, and the hosts of leaf 1 are fine inside it
    members = set(c.hosts[4:8])
    assert all((p["a"] in members) != (p["b"] in members) for p in fails[0]["details"]["pairs"])
    assert doc["search"]["slow_hosts"] == []
    assert doc["ring_order"]["crossings"] == 3


def test_path_swallowing_large_frames_between_two_hosts_named_as_a_link_without_a_layout(request):
    """nftables in h2 drops every packet from h1 longer than 1200 bytes: small messages pass, a
    transfer never completes. The hops over it are cut at their share of the budget, the search goes
    on around them (its barriers pass through rank 0 alone), and the pair is named after four cuts."""
    if shutil.which("nft") is None:
        pytest.skip("needs nft (nftables; scripts/install-test-deps.sh installs it)")
    c = NetnsCluster(8, nets=2)
    request.addfinalizer(c.close)
    c.up()
    c.line_rate("1gbit")
    rules = (f"table inet ccdl {{\n chain input {{ type filter hook input priority 0; policy accept;\n"
             f"  ip saddr {c.addrs[1]} ip length > 1200 drop\n }}\n}}\n")
    try:
        subprocess.run(["ip", "netns", "exec", c.hosts[2], "nft", "-f", "-"], input=rules, check=True,
                       capture_output=True, text=True, timeout=30)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"nftables cannot load a ruleset here: {exc.stderr.strip()[:200]}")
    # the launcher's own channel on the second network, so the fault hits the ranks' traffic alone;
    # without a layout the 8 hosts form groups of 3, 3 and 2 ranks: h1 and h2 are ring neighbours
    argv = c.mpirun_argv()
    argv[argv.index("oob_tcp_if_include") + 1] = f"{c.subnet2}.0/24"
    rc, out, err, _ = c.run(argv + python_argv("bench", "locate", *ARGS, "--budget", "60"), 120)
    # rank 0 exits 1; in about a third of runs Open MPI's ob1 layer then aborts on a cut send that
    # can never complete as the ranks end ("pml_ob1_sendreq.c:236 FATAL", mpirun 255), after the
    # report was printed whole (docs/across-hosts.md)
    assert rc == 1 or (rc == 255 and "FATAL" in err), _why(out, err)
    doc = _doc(out)
    assert doc["verdict"]["exit_code"] == 1, _why(out, err)  # rank 0's own code, whatever mpirun says
    assert [(f["check"], f["details"].get("a"), f["details"].get("b")) for f in _fails(doc)] == [
        ("cluster.link_slow", c.hosts[1], c.hosts[2])]
    assert doc["layout"]["format"].startswith("none") and doc["cut_runs"] > 0
    retests = [t for e in doc["search"]["log"] for t in e["tests"] if t["why"] == "retest"
               and set(t["hosts"]) == {c.hosts[1], c.hosts[2]}]
    assert len(retests) == 3  # measured slow four times before it was named
    pairs = {frozenset((p["a"], p["b"])): p["gbyte_s"] for p in doc["pairs"]}
    fine = sorted(v for k, v in pairs.items() if k != frozenset(c.hosts[1:3]))
    assert pairs[frozenset(c.hosts[1:3])] < 0.1 * fine[len(fine) // 2]
