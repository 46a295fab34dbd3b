"""The fabric's layout as `bench locate` reads it: every format from real samples (tests/fixtures/layouts,
each with its source), bad input as one line naming the line (exit 2), hostlists, the placement of a
run's hosts, and the ring order the layout recommends."""

from __future__ import annotations

import gzip
import json
import pathlib
import re

import pytest

from ccdiag.cluster import hostlist, layout as L
from ccdiag.cluster import layout_ibnet, layout_k8s, layout_nvlink, layout_read, layout_slurm
from ccdiag.core.errors import InputError

LAYOUTS = pathlib.Path(__file__).parent / "fixtures" / "layouts"


def text(name: str) -> str:
    data = (LAYOUTS / name).read_bytes()
    return (gzip.decompress(data) if name.endswith(".gz") else data).decode()


# -- hostlists -------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr, names", [
    ("tux[0-3,12,18-20]", ["tux0", "tux1", "tux2", "tux3", "tux12", "tux18", "tux19", "tux20"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("s[0-2,4]", ["s0", "s1", "s2", "s4"]),
    ("switch.1.[1-2]", ["switch.1.1", "switch.1.2"]),
    ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]),
    ("a, b[7-8] ,c", ["a", "b7", "b8", "c"]),
    ("circe-n[001-002],n[019-020]", ["circe-n001", "circe-n002", "n019", "n020"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("", []),
])
def test_hostlist_expands_as_slurm_writes_them(expr, names):
    assert hostlist.expand(expr) == names


@pytest.mark.parametrize("expr, words", [
    ("n[3-1]", "goes down"), ("n[1-", "never closed"), ("n[a-b]", "not a number"), ("n]", "without '['"),
    ("n[[1]]", "nested"), ("a,,b", "empty entry"), ("n[0-999999999]", "more than"),
    ("n[0-999]m[0-9999]", "more than"),
])
def test_hostlist_refuses_bad_and_unbounded_expressions(expr, words):
    with pytest.raises(hostlist.HostlistError, match=re.escape(words)):
        hostlist.expand(expr)


# -- Slurm topology.conf ----------------------------------------------------------------------------
def test_slurm_man_page_tree_example():
    lay = layout_slurm.parse(text("topology-tree-slurm-man-example.conf"))
    assert lay.fmt == "slurm-tree" and lay.group_kind == "leaf switch"
    assert lay.groups() == ["s0", "s1", "s2"]
    assert [h for h, g in lay.group_of.items() if g == "s1"] == [f"dev{i}" for i in range(6, 12)]
    assert lay.parent_of == {"s0": "s3", "s1": "s3", "s2": "s3"}


def test_slurm_man_page_block_example():
    lay = layout_slurm.parse(text("topology-block-slurm-man-example.conf"))
    assert lay.fmt == "slurm-block" and lay.groups() == ["block1", "block2", "block3", "block4"]
    assert len(lay.group_of) == 128 and lay.group_of["node33"] == "block2"
    assert any("BlockSizes=30,120" in n for n in lay.notes)


def test_topograph_tree_output_three_levels():
    lay = layout_slurm.parse(text("topology-tree-topograph-oci-sim.conf"))
    assert len(lay.group_of) == 96 and len(lay.groups()) == 12
    assert lay.group_of["srv1101"] == "switch.1.1" and lay.group_of["srv6208"] == "switch.1.12"
    assert lay.parent_of["switch.1.1"] == lay.parent_of["switch.1.2"] == "switch.2.1"
    # groups under one spine sit together, in the file's order
    assert lay.groups()[:4] == ["switch.1.1", "switch.1.2", "switch.1.3", "switch.1.4"]


def test_topograph_block_output_from_nvlink_domains():
    lay = layout_slurm.parse(text("topology-block-topograph-dra.conf"))
    assert len(lay.groups()) == 12 and all(sum(1 for g in lay.group_of.values() if g == b) == 8 for b in lay.groups())


def test_real_cluster_file_with_a_host_under_two_leaves():
    lay = layout_slurm.parse(text("topology-tree-circe-superpod.conf"), "topology.conf")
    assert lay.group_of["circe-n051"] == "s2"
    assert any("circe-n051 is listed under s2 and s4" in n for n in lay.notes)
    assert lay.group_of["n019"] == "s0" and len(lay.groups()) == 5


def test_real_cluster_file_with_comment_banner_and_single_node_switches():
    lay = layout_slurm.parse(text("topology-tree-puppet-flat.conf"))
    assert lay.group_of["gpu013"] == "s0" and lay.group_of["saturn4"] == "s3"
    place = lay.place(["hpc001", "hpc002", "gpu001", "xf11id-srv2", "saturn4"])
    # the two one-host switches join a neighbour so every screening group is a ring
    assert all(len(g) >= 2 for g in place.screening_groups())
    assert sorted(h for g in place.screening_groups() for h in g) == sorted(
        ["hpc001", "hpc002", "gpu001", "xf11id-srv2", "saturn4"])


@pytest.mark.parametrize("conf, words", [
    ("SwitchName=s0 Nodes=n[3-1]\n", "topology.conf:1: bad hostlist"),
    ("# c\nSwitchName=s0 Nodes=a Speed=1\n", "topology.conf:2: switchname line with unknown parameter(s) speed"),
    ("SwitchName=s0 Nodes\n", "topology.conf:1: 'Nodes' is not Key=Value"),
    ("Nodes=a\n", "topology.conf:1: a line has one of SwitchName="),
    ("SwitchName=s0 Nodes=a\nBlockName=b Nodes=c\n", "switch lines and block/ring lines in one file"),
    ("SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b\n", "topology.conf:2: switch s0 defined twice"),
    ("SwitchName=s1 Switches=s0\n", "no switch names any node"),
    ("BlockSizes=4,x\n", "topology.conf:1: BlockSizes '4,x' is not a list of numbers"),
    ("", "no SwitchName or BlockName line"),
])
def test_bad_topology_conf_is_one_line_naming_the_line(conf, words):
    with pytest.raises(InputError) as exc:
        layout_slurm.parse(conf, "topology.conf")
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_slurm_keys_are_case_insensitive_and_lines_continue():
    lay = layout_slurm.parse("switchname=l0 \\\n  nodes=a,b\nSWITCHNAME=l1 NODES=c[1-2]\n")
    assert lay.group_of == {"a": "l0", "b": "l0", "c1": "l1", "c2": "l1"}


# -- ibnetdiscover ----------------------------------------------------------------------------------
def test_dgx_superpod_ibnetdiscover_groups_hosts_by_scalable_unit():
    lay = layout_ibnet.parse(text("ibnetdiscover-dgx-superpod-rail-optimised.out.gz"))
    assert lay.fmt == "ibnetdiscover" and len(lay.group_of) == 122
    g = lay.group_of
    # a DGX's HCAs sit on the four rail leaves of its unit: its hosts share one group
    assert g["a06-p1-dgx-02-c01"] == g["a06-p1-dgx-02-c18"] == g["a06-p1-dgx-02-c10"]
    assert g["a06-p1-dgx-02-c01"] != g["b08-p1-dgx-08-c01"] != g["a08-p1-dgx-04-c01"]
    assert "IBLEAF" in g["a06-p1-dgx-02-c01"] and "(+3 leaves)" in g["a06-p1-dgx-02-c01"]
    assert len(lay.groups()) == 8
    # the firmware's default descriptions and SHARP's aggregation nodes stand for no host
    assert not any(h.startswith(("MT4129", "Mellanox")) for h in g)
    assert any("carry no host name" in n for n in lay.notes)


def test_ibnetdiscover_without_switches_places_no_host():
    with pytest.raises(InputError, match="no switch port leads to a host's HCA"):
        layout_ibnet.parse(text("ibnetdiscover-ca-only-no-switch.out"), "example-bad.out")


@pytest.mark.parametrize("line, words", [
    ('[1]\t"H-0002c903000e0b72"[1]', "a port line before any Switch/Ca record"),
    ('Switch\t36 S-0002c9020040cf78', "a Switch record without its"),
    ('hello world', 'not an ibnetdiscover line'),
])
def test_bad_ibnetdiscover_line_is_named(line, words):
    with pytest.raises(InputError, match=re.escape(words)) as exc:
        layout_ibnet.parse(f"#\n{line}\n", "ib.out")
    assert str(exc.value).startswith("ib.out:2:")


#: what each kind of line of ibnetdiscover's dump looks like, by the literal that starts it in the
#: print format (the %s before it is the chassis-mode prefix, empty by default); full lines for the
#: records and ports, as the real sample prints them
_LINE_OF = {
    "vendid=": "vendid=0x2c9", "devid=": "devid=0xd2f2", "sysimgguid=": "sysimgguid=0x2c5eab0300b87b40",
    "Chassis": "Chassis 3 (guid 0x2c9020040cf78)", "switchguid=": "switchguid=0x2c5eab0300b87b40(2c5eab0300b87b40)",
    "Switch": 'Switch\t65 "S-2c5eab0300b87b41"\t\t# "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" enhanced port 0 lid 73 lmc 0',
    "%s\t": 'Ca\t1 "H-e09d7303007a5a68"\t\t# "a08-p1-dgx-04-c17 mlx5_5"',
    "guid=": "caguid=0xe09d7303007a5a68",
    "[": '[1](e09d7303007a5a68) \t"S-2c5eab0300b87b40"[17]\t\t# lid 657 lmc 0 "MF0;A09:MQM9701/U1" lid 73 4xNDR',
    "#": "# Topology file: generated on Wed Aug  6 16:11:23 2025", "Hostname:": "Hostname: node01",
    "Non-Chassis Nodes": "Non-Chassis Nodes",
}


def _starts(fmt: str) -> str | None:
    """The literal a format starts a line with (None: it continues a line)."""
    f = fmt.lstrip("\n") if fmt.startswith("\n") else fmt
    if fmt.startswith(("\t", " ", "(")) or not f:
        return None
    f = f.removeprefix("%s")
    if not f.strip():
        return None  # the chassis type or slot, printed inside a line
    for key in _LINE_OF:
        if f.startswith(key) or (key == "%s\t" and f.startswith("%s\t%d")) or (key == "guid=" and f.startswith("%sguid=")):
            return key
    return f[:20]


def test_every_line_ibnetdiscover_starts_is_read_or_passed_over():
    """Coverage against ibnetdiscover's own print formats (scripts/extract_ibnetdiscover_formats.py
    keeps them in ibnetdiscover-print-formats.json): every kind of line the default dump starts is
    read or passed over; a kind a newer ibnetdiscover adds fails here until the reader knows it."""
    formats = json.loads((LAYOUTS / "ibnetdiscover-print-formats.json").read_text())["formats"]
    kinds = {k for f in formats if f["format"] != "\n" and (k := _starts(f["format"])) is not None}
    assert kinds <= set(_LINE_OF), sorted(kinds - set(_LINE_OF))
    assert len(kinds) == len(_LINE_OF)  # every kind the source prints is here, and no more
    base = ('Switch\t2 "S-0002c9020040cf78"\t\t# "MF0;leaf1:MQM9701/U1" enhanced port 0 lid 5 lmc 0\n'
            '[1]\t"H-0002c903000e0b72"[1](2c903000e0b73) \t\t# "node01 mlx5_0" lid 3 4xNDR\n'
            '[2]\t"H-0002c903000e0b74"[1](2c903000e0b75) \t\t# "node02 mlx5_0" lid 4 4xNDR\n')
    for kind in sorted(kinds):
        line = _LINE_OF[kind]
        doc = (f'Ca\t1 "H-e09d7303007a5a68"\t\t# "a08-p1-dgx-04-c17 mlx5_5"\n{line}\n' if kind == "[" else "") + base
        lay = layout_ibnet.parse(doc + ("" if kind == "[" else line + "\n"), "ib.out")
        assert {"node01", "node02"} <= set(lay.group_of), kind


# -- Kubernetes labels ------------------------------------------------------------------------------
def test_eks_describe_node_reads_the_nearest_network_node_layer():
    lay = layout_k8s.parse(text("k8s-describe-node-p4d-eks-network-node-layers.txt"))
    assert lay.group_of == {"ip-10-0-5-152.ap-northeast-2.compute.internal": "nn-dcbcca51aebf4c95b"}
    assert lay.parent_of == {"nn-dcbcca51aebf4c95b": "nn-6ff5053c3a4d86db7"}


def test_aws_node_list_groups_by_layer_3_under_layer_2():
    lay = layout_read.read_layout([str(LAYOUTS / "k8s-nodes-aws-network-node-layers.SYNTHESIZED.json")])
    assert lay.fmt == "k8s-labels" and len(lay.groups()) == 4
    assert sorted(set(lay.parent_of.values())) == ["nn-39eb76bb31ed2a526", "nn-6ff5053c3a4d86db7"]


def test_gb200_nodes_group_by_gpu_clique_and_say_who_has_none():
    lay = layout_read.read_layout([str(LAYOUTS / "k8s-nodes-gb200-gpu-clique.SYNTHESIZED.json")])
    assert lay.group_kind.startswith("NVLink domain") and len(lay.groups()) == 2
    assert lay.group_of["gb200-n01"] == "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"
    assert "gb200-n07" not in lay.group_of and any("gb200-n07" in n for n in lay.notes)


def test_topograph_labels_win_over_nvlink_domain_unless_asked():
    nodes = {"items": [{"metadata": {"name": f"n{i}", "labels": {
        "network.topology.nvidia.com/leaf": f"leaf{i // 2}", "network.topology.nvidia.com/spine": "sp1",
        "nvidia.com/gpu.clique": f"c.{i // 3}"}}} for i in range(6)]}
    doc = json.dumps(nodes)
    assert layout_k8s.parse(doc).group_of["n3"] == "leaf1"
    assert layout_k8s.parse(doc, group_by="nvlink").group_of["n3"] == "c.1"


def test_show_labels_table_and_yaml():
    table = ("NAME   STATUS   ROLES    AGE   VERSION   LABELS\n"
             "g1     Ready    <none>   2d    v1.30.2   a=b,cloud.google.com/gce-topology-block=b1,"
             "cloud.google.com/gce-topology-subblock=sb1\n"
             "g2     Ready    <none>   2d    v1.30.2   cloud.google.com/gce-topology-block=b1,"
             "cloud.google.com/gce-topology-subblock=sb2\n")
    lay = layout_read.read_layout([_write(table)])
    assert lay.group_of == {"g1": "sb1", "g2": "sb2"} and lay.parent_of == {"sb1": "b1", "sb2": "b1"}
    pytest.importorskip("yaml")
    y = ("apiVersion: v1\nkind: List\nitems:\n- metadata:\n    name: o1\n    labels:\n"
         "      oci.oraclecloud.com/host.rack_id: r7\n")
    assert layout_read.read_layout([_write(y)]).group_of == {"o1": "r7"}


@pytest.mark.parametrize("content, words", [
    ('{"items": [{"metadata": {}}]}', "item 0 has no metadata.name"),
    ('{"items": [{"metadata": {"name": "a", "labels": {"x": "y"}}}]}', "none of 1 nodes carries a topology label"),
    ('{"items": [', "not valid JSON"),
    ("kind: List\nitems: [\n", "not valid YAML"),
])
def test_bad_kubernetes_input(content, words):
    if "YAML" in words:
        pytest.importorskip("yaml")
    with pytest.raises(InputError, match=re.escape(words)):
        layout_read.read_layout([_write(content)], "k8s")


# -- NVLink domains from NVML ---------------------------------------------------------------------
def _report(host: str, gpus: list[dict]) -> str:
    return _write(json.dumps({"host": {"hostname": host}, "probes": {"nvml": {"data": {"gpus": gpus}}}}))


def test_nvlink_domains_from_ccdiag_reports():
    c1, c2 = "9c6f5af3-53bf-49b5-a436-b66766c413c3", "6a130f54-faaa-4b8f-847f-be44ab70f917"
    paths = [_report("gb1", [{"fabric_clique_id": 4026, "fabric_cluster_uuid": c1}] * 4),
             _report("gb2", [{"fabric_clique_id": 4026, "fabric_cluster_uuid": c1}] * 4),
             _report("gb3", [{"fabric_clique_id": 32766, "fabric_cluster_uuid": c2}] * 3
                     + [{"fabric_clique_id": 1, "fabric_cluster_uuid": c2}]),
             _report("h100", [{"fabric_clique_id": None, "fabric_cluster_uuid": None}] * 8)]
    lay = layout_read.read_layout(paths)
    assert lay.fmt == "nvlink-domains"
    assert lay.group_of == {"gb1": f"{c1}.4026", "gb2": f"{c1}.4026", "gb3": f"{c2}.32766"}
    assert any("gb3: GPUs in 2 NVLink domains" in n for n in lay.notes)
    assert any("h100: no GPU registered" in n for n in lay.notes)


def test_nvlink_domain_from_a_snapshot_as_the_nvml_probe_reads_it(tmp_path):
    import dataclasses
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from synth.nvml import h100_node, nvml_records

    from ccdiag.host.snapshot import SnapshotData

    uuid = bytes.fromhex("9c6f5af353bf49b5a436b66766c413c3")
    paths = []
    for host, clique in (("gbA", 4026), ("gbB", 4026), ("gbC", 7)):
        gpus = [dataclasses.replace(g, fabric_clique_id=clique, fabric_cluster_uuid=tuple(uuid)) for g in h100_node(2)]
        p = tmp_path / f"{host}.ccdiag"
        SnapshotData(nvml=nvml_records(gpus), meta={"hostname": host, "source": "synthesized"}).save(str(p))
        paths.append(str(p))
    lay = layout_read.read_layout(paths)
    assert lay.group_of == {"gbA": "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026",
                            "gbB": "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026",
                            "gbC": "9c6f5af3-53bf-49b5-a436-b66766c413c3.7"}


def test_nvlink_reports_that_place_nobody_and_two_files_for_one_host():
    with pytest.raises(InputError, match="no host has an NVLink domain id"):
        layout_read.read_layout([_report("a", []), _report("b", [])])
    with pytest.raises(InputError, match="host a is named by two files"):
        layout_read.read_layout([_report("a", []), _report("a", [])])
    with pytest.raises(InputError, match="names no host"):
        layout_nvlink.from_report({"probes": {}}, "r.json")


# -- detection, placement, ring order ---------------------------------------------------------------
@pytest.mark.parametrize("name, kind", [
    ("topology-tree-slurm-man-example.conf", "slurm"), ("topology-block-topograph-dra.conf", "slurm"),
    ("ibnetdiscover-dgx-superpod-rail-optimised.out.gz", "ibnetdiscover"),
    ("ibnetdiscover-ca-only-no-switch.out", "ibnetdiscover"),
    ("k8s-describe-node-p4d-eks-network-node-layers.txt", "k8s"),
    ("k8s-nodes-gb200-gpu-clique.SYNTHESIZED.json", "json"),
])
def test_format_told_by_content(name, kind):
    assert layout_read.detect(text(name)) == kind


def test_unknown_file_says_what_is_read(tmp_path):
    with pytest.raises(InputError, match="not a layout this reads"):
        layout_read.read_layout([_write("hello\n")])
    with pytest.raises(InputError, match="only NVLink domain ids"):
        layout_read.read_layout([str(LAYOUTS / "topology-tree-slurm-man-example.conf")] * 2)


def test_placement_matches_short_names_and_fqdns_and_keeps_the_rest():
    lay = L.Layout(fmt="t", sources=("x",), group_of={"n1": "A", "n2": "A", "n3.cl": "B", "n4": "B", "x.a": "C",
                                                      "x.b": "C"}, group_kind="leaf switch")
    pl = lay.place(["n1.cluster", "n2", "n3", "n4", "x", "zz"])
    assert [(g.name, g.hosts) for g in pl.groups] == [("A", ("n1.cluster", "n2")), ("B", ("n3", "n4"))]
    # "x" matches two layout names by its short name: ambiguous, so not placed
    assert pl.unplaced == ("x", "zz")
    assert pl.screening_groups() == [["n1.cluster", "n2"], ["n3", "n4"], ["x", "zz"]]


def test_ring_order_keeps_each_group_together():
    lay = layout_slurm.parse(text("topology-tree-slurm-man-example.conf"))
    run = [f"dev{i}" for i in range(0, 18, 3)] + [f"dev{i}" for i in range(18) if i % 3]  # interleaved by rank
    rec = L.ring_order(lay.place(run), run, avoid=["dev7"])
    assert rec["crossings"] == 3 and rec["run_crossings"] > 3
    assert rec["order"][:6] == [h for h in run if lay.group_of[h] == "s0"]
    assert "dev7" not in rec["without_slow_hosts"]["order"] and rec["without_slow_hosts"]["crossings"] == 3
    assert "3 hops cross between groups" in L.format_ring_order(rec)


def test_bench_pairs_shows_the_layouts_ring_order_beside_the_measured_one():
    """The measured order follows the matrix; the layout's keeps each leaf's hosts together. With
    ``--layout`` the pairs report gives both and how often the measured one crosses between leaves."""
    from ccdiag.cluster.pairs_report import layout_ring_order

    lay = layout_slurm.parse(text("topology-tree-slurm-man-example.conf"))
    hosts = [f"dev{i}" for i in range(0, 18, 3)] + [f"dev{i}" for i in range(18) if i % 3]
    measured = sorted(hosts, key=lambda h: int(h[3:]) % 2)  # even hosts first: across leaves at most hops
    rec, lines = layout_ring_order(lay, hosts, measured, ["dev7"])
    assert rec["crossings"] == 3 and rec["order"][:6] == [h for h in hosts if lay.group_of[h] == "s0"]
    assert rec["measured_order_crossings"] == L.crossings(measured, lay.place(hosts).group_of()) > 3
    assert "dev7" not in rec["without_slow_hosts"]["order"]
    assert "# ring order from the layout" in lines and " -> ".join(rec["order"]) in lines
    assert f"the measured order above crosses between the layout's groups {rec['measured_order_crossings']} times" \
        in lines
    # no measured order (pairs missing): the layout's alone
    rec, lines = layout_ring_order(lay, hosts, None, [])
    assert "measured_order_crossings" not in rec and "measured order" not in lines


def test_bench_pairs_refuses_a_bad_layout_before_measuring(tmp_path):
    from cli_runner import run

    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s0 Nodes=a,b\nSwitchName=s1 Nodes=c[9-1]\n")
    code, out, err = run("bench", "pairs", "--sizes", "1M", "--layout", str(conf))
    assert code == 2 and f"{conf}:2: bad hostlist" in err and "Traceback" not in err


@pytest.mark.parametrize("n, sizes", [(4, [2, 2]), (9, [3, 3, 3]), (10, [3, 3, 2, 2]), (64, [8] * 8),
                                      (1024, [32] * 32), (3, [3])])
def test_square_groups(n, sizes):
    hosts = [f"h{i}" for i in range(n)]
    groups = L.square_groups(hosts)
    assert [len(g) for g in groups] == sizes and sum(groups, []) == hosts


_FILES: list[pathlib.Path] = []


def _write(content: str) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="ccdiag-layout-", suffix=".txt")
    with open(fd, "w") as fh:
        fh.write(content)
    _FILES.append(pathlib.Path(path))
    return path


@pytest.fixture(autouse=True, scope="module")
def _clean():
    yield
    for p in _FILES:
        p.unlink(missing_ok=True)
