"""ccdiag nccl: the recommended settings for every real topology in the corpus (asserted against
rails derived by hand from each matrix, reasoning beside each entry), the bundled samples, named
fault scenarios that must change exactly one setting, NCCL's own topology-XML vocabulary, env
files that ccdiag's own check reads back clean, and the NCCL log reader on every corpus log."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from xml.etree import ElementTree as ET

import pytest

from ccdiag.run.checkrun import evaluate
from ccdiag.host.door import ReplayHost
from ccdiag.nccl.knobs import DEFAULT, INFO, REMOVE, SET
from ccdiag.nccl.diagnose import compare
from ccdiag.nccl.logread import LogError, parse_nccl_log
from ccdiag.nccl.recommend import recommend, recommend_from_matrix
from ccdiag.probes.netdev import Address, NetInterface
from ccdiag.probes.smi_topo import parse_topo_matrix
from ccdiag.topology import build_topology

from cli_runner import run
from conftest import FIXTURES, REPO

TOPO = FIXTURES / "corpus" / "topo-m"
LOGS = FIXTURES / "corpus" / "nccl-log"
HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"

# -- every corpus matrix, derived by hand --------------------------------------------------------------
# (NCCL_IB_HCA value or None, GPU ring order or None). A rail is a NIC at some GPU's best level.
BY_HAND = {
    # GPU0/1 PXB to NIC0,NIC1; GPU2/3 to NIC2,3; GPU4/5 to NIC4,5; GPU6/7 to NIC6,7 (legend NICk =
    # mlx5_k). NIC8/NIC9 are SYS to every GPU (a storage pair): not rails. NV12 all-to-all: no order.
    "a100-sxm4-40g-x8-epyc7742-10nic-tabs.txt": ("=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", None),
    # headers name the NICs; GPU0 NODE to mlx5_0 (SYS to mlx5_1), GPU1 NODE to mlx5_1. Two GPUs: no order.
    "a100-x2-della-mlx5-headers-no-nic-legend.txt": ("=mlx5_0,mlx5_1", None),
    # 12 NIC columns, but the legend was cut after NIC5 and the rails include NIC9..NIC11 (GPU5..7
    # PXB): the names are not in the paste, so no list can be written.
    "dgx-h100-talos-driver580-12nic-truncated-after-nic5-trailing-tabs.txt": (None, None),
    # topo -mp (PCIe only): GPU0,1 PIX mlx5_0; GPU2,3 PIX mlx5_1; GPU4,5 PIX mlx5_2; GPU6,7 PIX mlx5_3.
    # No NV# in a -mp matrix, so it reads as PCIe-only: GPU0-1 PIX, 1-2 PXB, 2-3 PIX, 3-4 NODE ...
    # index order already chains each GPU to its nearest peer, so no ring-order advice (it changes nothing).
    "dgx2-topo-mp-elided-single-space-mangled.txt": ("=mlx5_0,mlx5_1,mlx5_2,mlx5_3", None),
    "h100-pcie-x2-nvlink-bridge-nv12-indented.txt": (None, None),  # no NIC, two GPUs
    # NIC k PIX to GPU k only (legend mlx5_k); NV18: no order.
    "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt": ("=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
                                                        None),
    "h100-sxm-x8-kvm-vm-nvswitch-passthrough-topo-matrix-no-nic.txt": (None, None),  # no NIC
    # NIC rows only (columns cut by the terminal): NIC0 PIX GPU1, NODE GPU0/2/3; NIC1 PIX GPU3, NODE
    # GPU0/1/2; NIC2 and NIC3 PIX GPU7, NODE GPU4-6. GPU0 and GPU2 are NODE to both NIC0 and NIC1,
    # GPU4-6 to both NIC2 and NIC3: all four NICs are rails.
    "h800-x8-nv8-4nic-topo-matrix-terminal-truncated-mangled.txt": ("=mlx5_0,mlx5_1,mlx5_2,mlx5_3", None),
    "hopper-nv18-x4-visible-subset-brev-vm-blank-cpu-affinity-mixed-numa.txt": (None, None),  # no NIC
    # the only NIC, PHB to GPU2/3 and SOC (old name of SYS) to GPU0/1. PCIe only: GPU0-1 PHB, 1-2
    # SOC, 2-3 PHB: index order is the nearest chain, so no ring-order advice.
    "k40m-x4-mlx4-soc-legacy-2017.txt": ("=mlx4_0", None),
    "p100-sxm2-x2-nv2-rwth-c16g.txt": (None, None),
    "rtx3090-x2-nvlink-bridge-nv4-lxc-spaces.txt": (None, None),
    # one NIC (NIC0 = mlx5_2), NODE to GPU0-3 and SYS to GPU4-7: it is every GPU's nearest.
    "v100-sxm2-x8-hybrid-cube-mesh-nv1-nv2-1nic-gpunumaid.txt": ("=mlx5_2", None),
    # fused-cell pastes (read after their repairs). B200: each GPU PXB to one NIC (GPU0 NIC4, GPU1 NIC7,
    # GPU2 NIC8, GPU3 NIC9, GPU4 NIC10, GPU5 NIC13, GPU6 NIC14, GPU7 NIC15; NICk = mlx5_k), the rest
    # NODE or SYS; NV18: no order.
    "b200-x8-nv18-16nic-fused-pxbnode-syssys-nccl-tests-333.txt": (
        "=mlx5_4,mlx5_7,mlx5_8,mlx5_9,mlx5_10,mlx5_13,mlx5_14,mlx5_15", None),
    # A100: all 8 NICs PHB to every GPU (NIC7's 'PH' read from its mirror): all are rails; NV12: no order.
    "a100-sxm4-x8-nv12-8nic-fused-phb-affinity-ph0-115.txt": (
        "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", None),
    # H100: GPU0-2 PIX NIC0-2, GPU3 NIC5, GPU4 NIC6, GPU5 NIC7 (from 'PIXNODE'), GPU6 NIC8, GPU7 NIC11;
    # NIC3/4/9/10 NODE to every GPU. The operator's own NCCL_IB_HCA in the same file names these 8.
    "h100-x8-nv18-12nic-fused-pixnode-x-node-slurmv4.txt": (
        "=mlx5_0,mlx5_1,mlx5_2,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_11", None),
    # no NIC; GPU pairs (0,1) (2,3) ... PIX, NODE within a NUMA node, SYS across: index order, no advice.
    "x8-pcie-only-2numa-pix-pairs-node-sys-no-nic-spaces.txt": (None, None),
}
NOT_MATRICES = {"topo-c-cpu-affinity-query-dgx-a100.txt"}  # `nvidia-smi topo -c`: refused by the parser


def test_the_table_covers_every_corpus_matrix():
    assert set(BY_HAND) | NOT_MATRICES == {p.name for p in TOPO.glob("*.txt")}


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_corpus_matrix_rails_and_ring_order(name):
    m = parse_topo_matrix((TOPO / name).read_text())
    rec = recommend_from_matrix(m, name)
    hca, order = BY_HAND[name]
    k = rec.get("NCCL_IB_HCA")
    assert (k.value if k.action == SET else None) == hca, k.reason
    ring = rec.get("GPU ring order")
    assert (ring.value if ring is not None else None) == order
    # what a matrix cannot say is said, never guessed
    assert rec.get("NCCL_SOCKET_IFNAME").action == DEFAULT and "needs the node" in rec.get("NCCL_SOCKET_IFNAME").reason
    assert rec.notes


def test_every_gpu_of_the_h800_paste_has_its_rails_named():
    m = parse_topo_matrix((TOPO / "h800-x8-nv8-4nic-topo-matrix-terminal-truncated-mangled.txt").read_text())
    rails = recommend_from_matrix(m, "x").get("NCCL_IB_HCA").details["rails"]
    assert rails == {"mlx5_0": ["GPU0", "GPU1", "GPU2"], "mlx5_1": ["GPU0", "GPU2", "GPU3"],
                     "mlx5_2": ["GPU4", "GPU5", "GPU6", "GPU7"], "mlx5_3": ["GPU4", "GPU5", "GPU6", "GPU7"]}
    # GPU0,2,4,5,6 reach their NIC across the CPU, but the GPUs are joined by NVLink: NCCL relays their
    # traffic over NVLink to the GPU beside the NIC (PXN) instead of staging it in host memory
    assert not any(k.name == "NCCL_NET_GDR_LEVEL" for k in recommend_from_matrix(m, "x").knobs)


# -- the samples and named faults ---------------------------------------------------------------------
def _runs(sample=HEALTHY):
    return evaluate(ReplayHost(str(sample)), deadline_s=60).runs


def _rec(runs, env=None):
    return recommend(build_topology(runs), runs, env=env)


def _edit(runs, probe, data):
    out = dict(runs)
    out[probe] = dataclasses.replace(runs[probe], data=data)
    return out


def _edit_ports(runs, fn):
    ib = runs["infiniband"].data
    devices = tuple(dataclasses.replace(d, ports=tuple(fn(d, p) for p in d.ports)) for d in ib.devices)
    return _edit(runs, "infiniband", dataclasses.replace(ib, devices=devices))


def _same_except(a, b, names):
    ka = {k.name: (k.action, k.value) for k in a.knobs}
    kb = {k.name: (k.action, k.value) for k in b.knobs}
    changed = {n for n in ka.keys() | kb.keys() if ka.get(n) != kb.get(n)}
    assert changed == set(names), changed


ALL_RAILS = "=" + ",".join(f"mlx5_{i}:1" for i in range(8))


def test_healthy_sample_gets_every_rail_with_its_port_and_the_fastest_interfaces():
    rec = _rec(_runs())
    assert rec.settings() == {"NCCL_IB_HCA": ALL_RAILS, "NCCL_SOCKET_IFNAME": "=" + ",".join(f"ib{i}" for i in range(8))}
    assert rec.get("NCCL_IB_HCA").details["rails"] == {f"mlx5_{i}": [f"GPU{i}"] for i in range(8)}
    assert rec.get("NCCL_TOPO_FILE").action == DEFAULT and rec.get("NCCL_IB_GID_INDEX").action == DEFAULT
    assert not [k for k in rec.knobs if k.action == REMOVE]


def test_a_rail_down_is_a_drain_finding_not_an_edit_of_the_shared_settings():
    runs = _runs()
    down = _edit_ports(runs, lambda d, p: dataclasses.replace(p, state="DOWN", state_code=1)
                       if d.name == "mlx5_2" else p)
    healthy, faulty = _rec(runs), _rec(down)
    assert faulty.settings() == healthy.settings()  # the env file every node sources is unchanged
    k = faulty.get("NCCL_IB_HCA")
    assert k.details["node_faults"] == {"mlx5_2:1": "port is DOWN"} and k.details["gpus_without_own_rail"] == ["GPU2"]
    drain = faulty.get("node fault")
    assert drain.action == INFO and drain.value == "mlx5_2:1" and "drain" in drain.reason and "GPU2" in drain.reason
    assert healthy.get("node fault") is None


def _roce(runs, without_v2=()):
    from ccdiag.probes.infiniband import Gid

    def to_roce(d, p):
        n = int(d.name.split("_")[1])
        gids = (Gid(0, "fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1", f"ens{n}"),
                Gid(1, "fe80:0000:0000:0000:0000:0000:0000:0001", "RoCE v2", f"ens{n}"))
        if d.name not in without_v2:
            gids += (Gid(2, f"0000:0000:0000:0000:0000:ffff:0a00:0{n}0b", "IB/RoCE v1", f"ens{n}"),
                     Gid(3, f"0000:0000:0000:0000:0000:ffff:0a00:0{n}0b", "RoCE v2", f"ens{n}"))
        else:
            gids = gids[:1]
        return dataclasses.replace(p, link_layer="Ethernet", gids=gids)

    return _edit_ports(runs, to_roce)


def test_roce_rails_leave_the_gid_to_nccl_and_say_the_index_seen():
    rec = _rec(_roce(_runs()))
    k = rec.get("NCCL_IB_GID_INDEX")
    assert k.action == DEFAULT and k.details == {"index_on_this_host": 3, "set_for_nccl_before_2_21": 3}
    assert "Before NCCL 2.21 the default index is 0" in k.reason
    assert rec.settings()["NCCL_IB_HCA"] == ALL_RAILS


def test_a_roce_port_without_a_v2_gid_leaves_only_the_hca_list_changed():
    good, bad = _rec(_roce(_runs())), _rec(_roce(_runs(), without_v2=("mlx5_5",)))
    _same_except(good, bad, {"NCCL_IB_HCA"})
    assert "mlx5_5:1" not in bad.settings()["NCCL_IB_HCA"]
    assert "RoCEv2 GID" in bad.get("NCCL_IB_HCA").details["left_out"]["mlx5_5:1"]


def _with_interfaces(runs, extra):
    net = runs["netdev"].data
    return _edit(runs, "netdev", dataclasses.replace(net, interfaces=net.interfaces + tuple(extra)))


def test_docker0_and_container_interfaces_are_never_chosen():
    runs = _runs()
    docker = NetInterface("docker0", up=True, operstate="up", speed_mbps=None, mtu=1500, virtual=True,
                          addresses=(Address("inet", "172.17.0.1", "255.255.0.0"),))
    veth = NetInterface("veth1a2b", up=True, operstate="up", speed_mbps=10000, mtu=1500, virtual=True,
                        addresses=(Address("inet", "172.17.0.5", "255.255.0.0"),))
    bridge = NetInterface("br-3f1c", up=True, operstate="up", speed_mbps=800000, mtu=1500, virtual=True,
                          addresses=(Address("inet", "172.18.0.1", "255.255.0.0"),))
    _same_except(_rec(runs), _rec(_with_interfaces(runs, [docker, veth, bridge])), set())
    # with only the management port besides them, it is that port, by its exact name
    net = runs["netdev"].data
    eno = next(i for i in net.interfaces if i.name == "eno1")
    small = _edit(runs, "netdev", dataclasses.replace(net, interfaces=(eno, docker, veth, bridge)))
    assert _rec(small).settings()["NCCL_SOCKET_IFNAME"] == "=eno1"


def _flattened(runs):
    """SYNTHESIZED VM view: every GPU and NIC straight under one host bridge, no switch."""
    pcie = runs["pcie"].data
    flat = []
    for d in pcie.devices:
        if d.kind in ("bridge", "root_port"):
            continue
        flat.append(dataclasses.replace(d, parent=None, path=(d.bdf,), root_complex="pci0000:00", numa_node=0))
    return _edit(runs, "pcie", dataclasses.replace(pcie, devices=tuple(flat)))


def test_a_vm_flattened_tree_adds_a_topology_file_and_nothing_else():
    runs = _runs()
    flat = _rec(_flattened(runs))
    _same_except(_rec(runs), flat, {"NCCL_TOPO_FILE"})
    k = flat.get("NCCL_TOPO_FILE")
    assert k.action == SET and k.value in flat.files and "PHB" in k.reason


NCCL_XML = {}  # element -> attributes NCCL writes, from the corpus XML (NCCL_TOPO_DUMP_FILE format)


def _nccl_vocabulary():
    if not NCCL_XML:
        text = (LOGS / "nccl-topo-xml-azure-ncv4-a100-pcie-nvlink-pairs.txt").read_text()
        root = ET.fromstring("\n".join(l for l in text.splitlines() if not l.startswith("#")))
        for el in root.iter():
            NCCL_XML.setdefault(el.tag, set()).update(el.attrib)
    return NCCL_XML


def test_the_generated_topology_xml_speaks_nccls_vocabulary():
    flat = _rec(_flattened(_runs()))
    root = ET.fromstring(next(iter(flat.files.values())))
    vocab = _nccl_vocabulary()
    assert root.tag == "system" and root.attrib == {"version": "1"}
    for el in root.iter():
        assert el.tag in vocab, el.tag
        assert set(el.attrib) <= vocab[el.tag], (el.tag, set(el.attrib) - vocab[el.tag])
        assert all(v != "" for v in el.attrib.values()), el.attrib  # unknown values are left out, never empty
    speeds = {"2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"}
    assert all(p.attrib.get("link_speed", "32.0 GT/s PCIe") in speeds for p in root.iter("pci"))  # NCCL's table
    topo = build_topology(_flattened(_runs()))
    switches = [p for p in root.iter("pci") if p.attrib["busid"].startswith("ffff:")]
    real = {p.attrib["busid"] for p in root.iter("pci")} - {p.attrib["busid"] for p in switches}
    assert real == {g.bdf for g in topo.gpus()} | {n.bdf for n in topo.nics()}
    assert all(s.attrib["class"] == "0x060400" and "link_speed" in s.attrib and "link_width" in s.attrib
               for s in switches)
    assert all(c.attrib["affinity"].replace(",", "").strip("0") for c in root.iter("cpu"))
    assert all("arch" not in c.attrib for c in root.iter("cpu"))  # unknown here: NCCL fills it from the machine


def test_the_topology_xml_carries_the_pairing_the_flat_tree_hides():
    """Each synthetic switch holds one NIC and the GPU(s) paired with it; on this layout the pairing is
    the one the real (unflattened) tree shows."""
    flat = _rec(_flattened(_runs()))
    root = ET.fromstring(next(iter(flat.files.values())))
    real = build_topology(_runs())
    label = {d.bdf: d.label for d in list(real.gpus()) + list(real.nics())}
    nics = {n.label for n in real.nics()}
    for sw in (p for p in root.iter("pci") if p.attrib["busid"].startswith("ffff:")):
        kids = [label[c.attrib["busid"]] for c in sw]
        nic = [k for k in kids if k in nics]
        assert len(nic) == 1
        for g in (k for k in kids if k not in nics):
            assert real.level(g, nic[0]) in ("PIX", "PXB"), (g, nic[0], real.level(g, nic[0]))


def test_nccl_arch_vocabulary():
    from ccdiag.nccl.topo_xml import nccl_arch

    assert (nccl_arch("aarch64"), nccl_arch("x86_64"), nccl_arch("ppc64le"), nccl_arch("riscv64")) == \
        ("arm64", "x86_64", "ppc64", None)


def test_no_numa_means_no_file_and_the_reason_is_said(tmp_path):
    runs = _flattened(_runs())
    pcie = runs["pcie"].data
    runs = _edit(runs, "pcie", dataclasses.replace(pcie, devices=tuple(dataclasses.replace(d, numa_node=None)
                                                                       for d in pcie.devices)))
    rec = _rec(runs)
    k = rec.get("NCCL_TOPO_FILE")
    assert not rec.files and k.action == DEFAULT and "no file is written" in k.reason


def test_debugging_variables_already_set_are_named_for_removal():
    rec = _rec(_runs(), env={"NCCL_P2P_DISABLE": "1", "NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "INFO"})
    removals = {k.name for k in rec.knobs if k.action == REMOVE}
    assert removals == {"NCCL_P2P_DISABLE"}
    assert "replaces NCCL_IB_HCA=mlx5" in rec.get("NCCL_IB_HCA").reason


def test_nvlink_nodes_get_no_ring_order_advice():
    assert _rec(_runs()).get("GPU ring order") is None  # NCCL builds its own rings over NVLink


# -- the env file round trip and the command -----------------------------------------------------------
def test_env_output_sources_in_a_shell_and_passes_ccdiags_own_environment_check(tmp_path):
    env_file = tmp_path / "nccl.env"
    code, out, err = run("nccl", "--replay", str(HEALTHY), "--format", "env", "-o", str(env_file))
    assert code == 0 and err == ""
    proc = subprocess.run(["bash", "-c", f"set -eu; . {env_file}; env"], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert proc.returncode == 0, proc.stderr
    sourced = dict(line.split("=", 1) for line in proc.stdout.splitlines() if line.startswith("NCCL_"))
    assert sourced == {"NCCL_IB_HCA": ALL_RAILS, "NCCL_SOCKET_IFNAME": "=" + ",".join(f"ib{i}" for i in range(8))}
    code, out, err = run("check", "--replay", str(HEALTHY), "--env-file", str(env_file), "--only", "env", "--json")
    doc = json.loads(out)
    assert code == 0
    assert [f["status"] for f in doc["findings"] if f["check"] in ("env.ib_hca", "env.socket_ifname")] == ["pass", "pass"]
    assert not [f for f in doc["findings"] if f["status"] in ("warn", "fail", "unknown")]


def test_json_output_validates_and_nccl_conf_is_key_value(tmp_path):
    import jsonschema

    schema = json.loads((REPO / "ccdiag" / "schema" / "report.schema.json").read_text())
    code, out, err = run("nccl", "--replay", str(DEGRADED), "--json")
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    assert code == 0 and doc["kind"] == "nccl" and "mlx5_4:1" in doc["nccl"]["settings"]["NCCL_IB_HCA"]
    drain = next(k for k in doc["nccl"]["knobs"] if k["name"] == "node fault")
    assert "mlx5_4:1" in drain["value"] and drain["details"]["drain"]
    code, out, err = run("nccl", "--replay", str(HEALTHY), "--format", "nccl.conf")
    lines = [l for l in out.splitlines() if l and not l.startswith("#")]
    assert lines == [f"NCCL_IB_HCA={ALL_RAILS}", "NCCL_SOCKET_IFNAME==" + ",".join(f"ib{i}" for i in range(8))]


def test_from_smi_text_says_what_needs_the_node():
    code, out, err = run("nccl", "--from-smi", str(TOPO / "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"))
    assert code == 0 and "needs the node" in out and "=mlx5_0,mlx5_1" in out


@pytest.mark.parametrize("args,needle", [
    (["--log", str(LOGS / "nccl-topo-xml-azure-ncv4-a100-pcie-nvlink-pairs.txt")], "line 4"),
    (["--from-smi", str(TOPO / "topo-c-cpu-affinity-query-dgx-a100.txt")], "not an nvidia-smi topo -m matrix"),
    (["--from-smi", "/nonexistent/topo.txt"], "cannot read"),
])
def test_bad_input_is_exit_2_with_one_line(args, needle):
    code, out, err = run("nccl", *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, out, err = run("nccl", "--from-smi", str(fifo))
    assert code == 2 and "not a regular file" in err


# -- the log reader --------------------------------------------------------------------------------------
def test_every_corpus_log_is_read_or_refused_with_the_line_named():
    for path in sorted(LOGS.glob("*.txt")):
        try:
            log = parse_nccl_log(path.read_text(), path.name)
        except LogError as exc:
            assert "line " in str(exc), str(exc)
            continue
        assert log.nccl_lines > 0, path.name


def test_two_node_log_transports_ranks_and_environment():
    log = parse_nccl_log((LOGS / "2node-16rank-node2-trees-p2p-ipc-pxn-gdrdma-channels.txt").read_text())
    assert (log.ranks, log.nodes) == (16, 2)
    assert set(log.transports) == {"P2P/IPC", "NET/IB/GDRDMA"}
    assert log.env["NCCL_NET_GDR_LEVEL"] == "PIX" and log.env["NCCL_NVLS_ENABLE"] == "0"
    diffs = compare(log, _rec(_runs()))
    assert any("NCCL_NET_GDR_LEVEL=PIX was set by the environment: a debugging variable" in d for d in diffs)


def test_rccl_on_one_host_puts_its_failure_first_and_makes_no_cross_host_claim():
    log = parse_nccl_log((LOGS / "rccl-2.17-2x-rx7900xtx-docker-net-ib-no-device-net-socket-eth0-p2p-ipc-"
                                 "invalid-device-pointer.txt").read_text())
    assert (log.flavour, log.version, log.network, log.net_devices) == ("RCCL", "2.17.1", "Socket", {"eth0": "Socket"})
    assert log.no_ib_device and any("invalid device pointer" in t for _, t in log.warnings)
    diffs = compare(log, _rec(_runs()))
    # all ranks on one host (one communicator seen whole): the failure first, no claim about sockets between hosts
    assert "invalid device pointer" in diffs[0] and any("none needed" in d for d in diffs)
    assert not any("sockets although the node has RDMA rails" in d for d in diffs)


def test_warnings_keep_their_line_numbers_through_application_prefixes():
    log = parse_nccl_log((LOGS / "net-ib-completion-error-status4-vendor-err-81-hang.txt").read_text())
    assert [n for n, _ in log.warnings] == [4, 7]
    assert all("vendor err 81" in t for _, t in log.warnings)


def test_interleaved_prefixed_and_cut_lines_are_still_read():
    """SYNTHESIZED damage on real lines: Ray and kubectl prefixes, a line cut mid-token, a repeat suffix."""
    real = [l for l in (LOGS / "2node-16rank-node2-trees-p2p-ipc-pxn-gdrdma-channels.txt").read_text().splitlines()
            if not l.startswith("#")]
    env_lines = [l for l in real if "set by environment" in l]
    lines = [next(l for l in env_lines if "CUMEM" in l), next(l for l in env_lines if "GDR_LEVEL" in l)]
    lines += [next(l for l in real if "via P2P/IPC" in l), next(l for l in real if "GDRDMA" in l)]
    damaged = [f"(RayWorkerWrapper pid=4242, ip=10.0.0.7) {lines[0]}",
               f"[pod/trainer-0/main] {lines[1]} (repeated 7 times)",
               lines[2][: lines[2].index(" via ") + 7],  # cut in "P2P/IPC"
               "this line is from the training script, not NCCL",
               lines[3]]
    log = parse_nccl_log("\n".join(damaged))
    assert log.env == {"NCCL_CUMEM_ENABLE": "0", "NCCL_NET_GDR_LEVEL": "PIX"}
    assert log.transports == {"NET/IB/GDRDMA": 1}  # the cut "via P2" names no transport
    assert log.nccl_lines == 4  # the cut line still carries its marker; the script's line is not NCCL's


def test_text_prints_the_job_script_exports_one_per_line():
    """Pasted into a job script as printed: each export its own line, values quoted."""
    from cli_runner import run
    from conftest import REPO

    code, out, err = run("nccl", "--replay", str(REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"))
    lines = out.splitlines()
    start = lines.index("In a job script:")
    exports = [l.strip() for l in lines[start + 1:] if l.startswith("  export ")]
    hca = "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    ifname = "=" + ",".join(f"ib{i}" for i in range(8))
    assert exports == [f"export NCCL_IB_HCA='{hca}'", f"export NCCL_SOCKET_IFNAME='{ifname}'"]
    # and bash reads them back as the recommended values
    script = "\n".join(exports) + '\nprintf "%s|%s" "$NCCL_IB_HCA" "$NCCL_SOCKET_IFNAME"'
    import subprocess

    got = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30).stdout
    assert got == f"{hca}|{ifname}"


def test_write_topo_file_says_why_nothing_was_written(tmp_path):
    out = tmp_path / "topo.xml"
    code, _, err = run("nccl", "--replay", str(HEALTHY), "--write-topo-file", str(out))
    assert code == 0 and not out.exists()
    assert "--write-topo-file: nothing written" in err and "real PCI tree" in err


def test_ring_order_advice_only_where_it_changes_the_slowest_hops():
    """SYNTHESIZED PCIe-only levels: pairs (GPU0,GPU2) and (GPU1,GPU3) share a switch, everything else
    crosses the sockets; index order crosses four times, the suggested order twice."""
    from ccdiag.nccl.layout import Layout
    from ccdiag.nccl.recommend import _ring_order

    gpus = ("GPU0", "GPU1", "GPU2", "GPU3")
    near = {("GPU0", "GPU2"), ("GPU1", "GPU3")}
    levels = {(a, b): ("PIX" if (a, b) in near else "SYS") for i, a in enumerate(gpus) for b in gpus[i + 1:]}
    k = _ring_order(Layout(gpus, (), levels, "smi", "test"))
    assert k is not None and k.value == "GPU0,GPU2,GPU1,GPU3" and "index order would hop SYS, SYS, SYS, SYS" in k.reason
    chain = {(a, b): ("PIX" if gpus.index(b) - gpus.index(a) == 1 else "SYS") for (a, b) in levels}
    assert _ring_order(Layout(gpus, (), chain, "smi", "test")) is None  # index order is already the best ring


def test_the_degraded_node_writes_the_same_shared_settings_as_a_healthy_one():
    """The degraded sample's own fault (mlx5_4/ib4 down) is a drain finding, not an edit of the env file
    that every rank sources."""
    def exports(sample):
        code, out, _ = run("nccl", "--replay", str(sample), "--format", "env")
        assert code == 0
        return [l for l in out.splitlines() if l.startswith("export ")]

    assert exports(DEGRADED) == exports(HEALTHY)
    code, out, _ = run("nccl", "--replay", str(DEGRADED), "--json")
    drain = next(k for k in json.loads(out)["nccl"]["knobs"] if k["name"] == "node fault")
    assert "mlx5_4:1" in drain["value"] and "drain" in drain["reason"]
