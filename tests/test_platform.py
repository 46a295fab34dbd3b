"""Platform detection (probes/platform.py), NCCL's config-file parser, and the vendor-required
settings table: on every platform in the table, a setting the vendor documents is kept and labelled,
never advised away.

The DMI strings are each provider's documented identity values; the trees they sit in are
SYNTHESIZED here (tmp_path), as are the job environments (built from the documented settings).
"""

from __future__ import annotations

import dataclasses

import pytest
import scenarios_fabric as S
from ccdiag.probes import platform as P
from ccdiag.probes._ncclconf import conf_problems, parse_nccl_conf

from ccdiag.host.door import LiveHost
from ccdiag.nccl import platforms
from ccdiag.nccl.knobs import REMOVE, SET
from ccdiag.nccl.recommend import recommend
from ccdiag.probes.registry import ProbeRun
from ccdiag.topology import build_topology


@pytest.mark.parametrize("dmi, expected", [
    ({"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine",
      "chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77"}, ("azure", None)),
    ({"sys_vendor": "Amazon EC2", "product_name": "p5.48xlarge", "bios_vendor": "Amazon EC2"}, ("aws", "p5.48xlarge")),
    ({"sys_vendor": "Google", "product_name": "Google Compute Engine"}, ("gcp", None)),
    ({"sys_vendor": "Oracle Corporation", "chassis_asset_tag": "OracleCloud.com"}, ("oci", None)),
    ({"sys_vendor": "Supermicro", "product_name": "SYS-821GE-TNHR"}, (None, None)),
    ({}, (None, None)),
])
def test_classify(dmi, expected):
    assert P.classify(dmi) == expected


@pytest.mark.parametrize("cgroup, dockerenv, containerenv, kind", [
    ("0::/kubepods/besteffort/pod1234/abcd\n", False, False, "kubernetes"),
    ("0::/system.slice/docker-0123abcd.scope\n", True, False, "docker"),
    ("0::/machine.slice/libpod-0123.scope\n", False, True, "podman"),
    ("0::/init.scope\n", False, False, None),
])
def test_container_kind(cgroup, dockerenv, containerenv, kind):
    assert P.container_kind(cgroup, dockerenv, containerenv) == kind


def _tree(root, files):
    for rel, text in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_collect_reads_only_under_the_root(tmp_path):
    _tree(tmp_path, {
        "/sys/class/dmi/id/sys_vendor": "Amazon EC2\n", "/sys/class/dmi/id/product_name": "p4d.24xlarge\n",
        "/sys/class/dmi/id/bios_vendor": "Amazon EC2\n", "/proc/1/cgroup": "0::/kubepods/pod1/x\n",
        "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so": "", "/opt/amazon/ofi-nccl/lib/libnccl-net.so": "",
        "/sys/class/infiniband/efa_0/node_type": "1\n", "/sys/class/infiniband/efa_1/node_type": "1\n",
        "/etc/nccl.conf": "NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml\n",
        "/opt/microsoft/ndv5-topo.xml": "<system version=\"1\"/>\n"})
    obs = P.collect(LiveHost(root=str(tmp_path)))
    assert (obs.provider, obs.instance_type, obs.container) == ("aws", "p4d.24xlarge", "kubernetes")
    assert obs.efa_devices == ("efa_0", "efa_1")
    assert obs.net_plugins == ("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "/opt/amazon/ofi-nccl/lib/libnccl-net.so")
    assert [(f.path, f.named_by) for f in obs.topo_files] == [("/opt/microsoft/ndv5-topo.xml", "/etc/nccl.conf")]
    assert obs.topo_files[0].text.startswith("<system")


def test_empty_tree_is_bare_metal_not_an_error(tmp_path):
    obs = P.collect(LiveHost(root=str(tmp_path)))
    assert (obs.provider, obs.container, obs.net_plugins, obs.efa_devices, obs.topo_files) == (None, None, (), (), ())


# -- NCCL's own config-file parser --------------------------------------------------------------------------
def test_nccl_conf_is_not_a_shell_file():
    text = ('# comment\nexport NCCL_IB_HCA=mlx5_0\nNCCL_SOCKET_IFNAME="eth0"\nNCCL_DEBUG = INFO\n'
            'NCCL_IB_GID_INDEX=3\nNCCL_IB_GID_INDEX=5\nno equals sign\nNCCL_TOPO_FILE=/opt/x=y.xml\r\n')
    conf = parse_nccl_conf(text)
    assert conf["export NCCL_IB_HCA"] == "mlx5_0" and "NCCL_IB_HCA" not in conf
    assert conf["NCCL_SOCKET_IFNAME"] == '"eth0"'  # quotes kept
    assert conf["NCCL_DEBUG "] == " INFO"  # spaces kept on both sides
    assert conf["NCCL_IB_GID_INDEX"] == "3"  # first occurrence wins (setenv without overwrite)
    assert conf["NCCL_TOPO_FILE"] == "/opt/x=y.xml"  # only the first '=' splits; the CR is dropped
    problems = "\n".join(conf_problems(text))
    assert "'export NCCL_IB_HCA'" in problems and "quotes" in problems and "repeats line 5" in problems


# -- vendor-required settings, one test per platform in the table ---------------------------------------
def _obs(**kw):
    base = {"dmi": {}, "provider": None, "instance_type": None, "container": None, "net_plugin_env": None}
    base.update(kw)
    return P.PlatformObservation(**base)


VENDOR_CASES = {
    "gcp-a3-mega": (_obs(provider="gcp", net_plugins=("/var/lib/tcpxo/lib64/libnccl-net.so",)),
                    {"NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "Simple,LL128", "NCCL_NET_GDR_LEVEL": "PIX",
                     "NCCL_CROSS_NIC": "0", "NCCL_NVLS_ENABLE": "0", "NCCL_FASTRAK_CTRL_DEV": "enp0s12",
                     "NCCL_SOCKET_IFNAME": "enp0s12"}),
    "gcp-a3-high": (_obs(provider="gcp", net_plugins=("/usr/local/tcpx/lib64/libnccl-net.so",)),
                    {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_P2P_PXN_LEVEL": "0",
                     "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}),
    "aws-efa": (_obs(provider="aws", instance_type="p4d.24xlarge", efa_devices=("efa_0",)),
                {"NCCL_PROTO": "simple", "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}),
    "azure-nd": (_obs(provider="azure", topo_files=(P.TopoFile("/opt/microsoft/ndv5-topo.xml", None, "/etc/nccl.conf"),)),
                 {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml"}),
    "oci-bm-gpu": (_obs(provider="oci"), {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_QPS_PER_CONNECTION": "4"}),
}


def test_every_platform_in_the_table_has_a_case():
    assert set(VENDOR_CASES) == set(platforms.PLATFORMS)


def _rec(obs, env):
    runs = dict(S.healthy_runs())
    runs["platform"] = ProbeRun("platform", "ok", 0.0, obs)
    return recommend(build_topology(runs), runs, env=env, env_source="job script")


@pytest.mark.parametrize("key", sorted(VENDOR_CASES))
def test_vendor_required_settings_are_never_advised_away(key):
    obs, env = VENDOR_CASES[key]
    assert platforms.detect(obs, env).key == key
    rec = _rec(obs, env)
    for name, value in env.items():
        k = rec.get(name)
        assert k is not None and k.action == SET and k.value == value, (name, k)
        assert "vendor-required" in k.reason
        assert not any(x.name == name and x.action == REMOVE for x in rec.knobs)
    assert any(key in n or platforms.PLATFORMS[key].title in n for n in rec.notes)


def test_without_a_platform_the_debugging_variables_are_still_removed():
    rec = _rec(_obs(), {"NCCL_ALGO": "Ring,Tree", "NCCL_NET_GDR_LEVEL": "PIX"})
    assert rec.get("NCCL_NET_GDR_LEVEL").action == REMOVE or any(
        k.name == "NCCL_NET_GDR_LEVEL" and k.action == REMOVE for k in rec.knobs)


def test_a3_mega_documented_values_missing_are_named():
    obs, env = VENDOR_CASES["gcp-a3-mega"]
    rec = _rec(obs, env)
    k = rec.get("NCCL_MIN_NCHANNELS")
    assert k.action == SET and k.value == "4" and "not set here" in k.reason


# -- a provider's topology file checked against the node ---------------------------------------------------
def _topo_xml(gpus, nics):
    """SYNTHESIZED topology file in NCCL's format: each GPU paired with one NIC under a switch."""
    parts = ['<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">']
    for i, (g, n) in enumerate(zip(gpus, nics)):
        parts.append(f'<pci busid="ffff:ff:{i:02x}.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
                     f'<pci busid="{g}" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="{i}"/></pci>'
                     f'<pci busid="{n}" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16"><nic/></pci></pci>')
    return "".join(parts) + "</cpu></system>"


def test_provider_topology_file_is_checked_against_the_node_and_kept():
    runs = dict(S.healthy_runs())
    topo = build_topology(runs)
    gpus = [g.bdf for g in topo.gpus()]
    nics = [n.bdf for n in topo.nics()]
    good = P.TopoFile("/opt/microsoft/ndv5-topo.xml", _topo_xml(gpus, nics), "/etc/nccl.conf")
    rec = _rec(_obs(provider="azure", topo_files=(good,)), {"NCCL_TOPO_FILE": good.path})
    k = rec.get("NCCL_TOPO_FILE")
    assert k.action == SET and "names every GPU and NIC bus id" in k.reason and "vendor-required" in k.reason
    bad = dataclasses.replace(good, text=_topo_xml(gpus[:-1], nics[:-1]))
    k = _rec(_obs(provider="azure", topo_files=(bad,)), {"NCCL_TOPO_FILE": bad.path}).get("NCCL_TOPO_FILE")
    assert k.action == SET and "does not match this node" in k.reason and "rather than deleting it" in k.reason


def test_topo_file_pairing_is_compared_with_the_node_tree():
    topo = build_topology(dict(S.healthy_runs()))
    gpus = [g.bdf for g in topo.gpus()]
    nics = [n.bdf for n in topo.nics()]
    swapped = _topo_xml(gpus, nics[1:] + nics[:1])
    labels_g = {g.label: g.bdf for g in topo.gpus()}
    labels_n = {n.label: n.bdf for n in topo.nics()}
    nearest = {g.label: (topo.nics()[i].label,) for i, g in enumerate(topo.gpus())}
    res = platforms.check_topo_file("x.xml", swapped, labels_g, labels_n, nearest)
    assert res.readable and not res.gpus_missing and len(res.disagree) == len(gpus)


def test_nccl_command_names_conf_lines_nccl_reads_differently(tmp_path):
    import json

    from cli_runner import run

    _tree(tmp_path, {"/etc/nccl.conf": 'export NCCL_IB_HCA=mlx5_0\nNCCL_SOCKET_IFNAME="eth0"\n'})
    code, out, _ = run("nccl", "--root", str(tmp_path), "--json")
    notes = "\n".join(json.loads(out)["nccl"]["notes"])
    assert code == 0 and "'export NCCL_IB_HCA'" in notes and "with its quotes" in notes
