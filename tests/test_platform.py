"""Platform detection (probes/platform.py), NCCL's config-file parser, and the vendor-required
settings table: on every platform in the table, a setting the vendor documents is kept and labelled,
never advised away.

The DMI strings are each provider's documented identity values; the trees they sit in are
SYNTHESIZED here (tmp_path), as are the job environments (built from the documented settings).
"""

from __future__ import annotations

import dataclasses
import pathlib

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


# -- documented settings, one test per platform in the table ----------------------------------------------
def _obs(**kw):
    base = {"dmi": {}, "provider": None, "instance_type": None, "container": None, "net_plugin_env": None}
    base.update(kw)
    return P.PlatformObservation(**base)


#: one instance type per table entry (the first the entry's patterns accept), and the DMI/IMDS it reports
INSTANCE = {"aws-p4d": "p4d.24xlarge", "aws-p5": "p5.48xlarge", "aws-p5en-p6": "p5en.48xlarge",
            "aws-p-series": "p6e-gb200.36xlarge", "aws-p5-4xlarge": "p5.4xlarge", "aws-p3dn": "p3dn.24xlarge",
            "aws-g5": "g5.48xlarge", "aws-g6": "g6e.48xlarge", "aws-g7e": "g7e.48xlarge",
            "gcp-a3-high": "a3-highgpu-8g", "gcp-a3-mega": "a3-megagpu-8g", "gcp-a3-ultra": "a3-ultragpu-8g",
            "gcp-a4": "a4-highgpu-8g", "gcp-a4x": "a4x-highgpu-4g", "azure-ndv4": "Standard_ND96asr_v4",
            "azure-ndv5": "Standard_ND96isr_H100_v5", "azure-nd-gb200-v6": "Standard_ND128isr_NDR_GB200_v6",
            "oci-bm-gpu4-8": "BM.GPU4.8", "oci-bm-gpu-a100-v2-8": "BM.GPU.A100-v2.8", "oci-bm-gpu-h100-8": "BM.GPU.H100.8",
            "oci-bm-gpu-h200-8": "BM.GPU.H200.8", "oci-bm-gpu-b200-8": "BM.GPU.B200.8", "oci-bm-gpu-b300-8": "BM.GPU.B300.8",
            "coreweave-ib": None}


def test_every_platform_in_the_table_has_an_instance_here_and_sources():
    assert set(INSTANCE) == set(platforms.by_key())
    for plat in platforms.table():
        assert plat.sources and plat.title, plat.key
        if INSTANCE[plat.key]:
            assert platforms.for_instance(plat.provider, INSTANCE[plat.key]) is plat, plat.key


def _rec(obs, env, platform=None):
    runs = dict(S.healthy_runs())
    runs["platform"] = ProbeRun("platform", "ok", 0.0, obs)
    return recommend(build_topology(runs), runs, env=env, env_source="job script", platform=platform)


def _documented_env(plat):
    """The documented settings as a job would set them (node-specific ones given a value HERE)."""
    return {k: (v if v is not None else f"node-specific-{k.lower()}") for k, v in plat.settings.items()}


@pytest.mark.parametrize("key", sorted(INSTANCE))
def test_documented_settings_are_kept_and_labelled_never_advised_away(key):
    plat = platforms.by_key()[key]
    env = _documented_env(plat)
    obs = _obs(provider=plat.provider if plat.provider != "coreweave" else None, instance_type=INSTANCE[key],
               instance_type_source="imds" if plat.provider in ("azure", "gcp", "oci") else "dmi")
    rec = _rec(obs, env, platform=None if INSTANCE[key] else key)
    for name, value in env.items():
        k = rec.get(name)
        assert k is not None and k.action == SET and k.value == value, (name, k)
        assert "vendor-required" in k.reason
        assert not any(x.name == name and x.action == REMOVE for x in rec.knobs)
    assert any(plat.title in n for n in rec.notes)


def test_without_a_platform_on_a_visible_tree_the_debugging_variables_are_still_removed():
    rec = _rec(_obs(), {"NCCL_ALGO": "Ring,Tree", "NCCL_NET_GDR_LEVEL": "PIX"})
    assert any(k.name == "NCCL_NET_GDR_LEVEL" and k.action == REMOVE for k in rec.knobs)
    assert any("bare metal" in n and "switches" in n for n in rec.notes)


def test_a3_mega_documented_values_missing_are_named():
    plat = platforms.by_key()["gcp-a3-mega"]
    rec = _rec(_obs(provider="gcp", instance_type="a3-megagpu-8g", instance_type_source="imds"),
               {"NCCL_FASTRAK_CTRL_DEV": "eth0"})
    k = rec.get("NCCL_MIN_NCHANNELS")
    assert k.action == SET and k.value == plat.settings["NCCL_MIN_NCHANNELS"] == "4" and "not set here" in k.reason


# -- identification ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("obs,env,kind,key", [
    (_obs(dmi={"sys_vendor": "Amazon EC2"}, provider="aws", instance_type="p5.48xlarge"), {}, "cloud", "aws-p5"),
    (_obs(provider="azure", instance_type="Standard_ND96isr_H200_v5", instance_type_source="imds"), {}, "cloud",
     "azure-ndv5"),
    (_obs(topo_files=(P.TopoFile("/opt/microsoft/ndv5/topo.xml", None, "provider directory"),)), {}, "cloud",
     "azure-ndv5"),
    (_obs(), {"NCCL_FASTRAK_CTRL_DEV": "eth0"}, "cloud", "gcp-a3-mega"),
    (_obs(), {"NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a3u.txtpb"}, "cloud", "gcp-a3-ultra"),
    (_obs(provider="aws", efa_devices=("efa_0",)), {}, "cloud", None),
    (_obs(dmi={"sys_vendor": "Supermicro"}), {}, "bare-metal", None),
])
def test_identify_names_the_platform_and_how(obs, env, kind, key):
    ident = platforms.identify(obs, env, flattened=True)
    assert ident.kind == kind and (ident.platform.key if ident.platform else None) == key and ident.how


def test_a_flattened_tree_without_identity_is_unidentified_and_nothing_is_advised_away():
    """An Azure-shaped VM (the PCI tree flattened, no switches) whose DMI says nothing: NCCL_TOPO_FILE and a
    debugging variable present are kept, with the reason."""
    ident = platforms.identify(_obs(), {}, flattened=True)
    assert ident.kind == "unknown" and "flattened" in ident.how
    from ccdiag.nccl.layout import Layout
    from ccdiag.nccl.recommend import _recommend

    layout = Layout(("GPU0", "GPU1"), (), {("GPU0", "GPU1"): "PHB"}, "node", "test", platform=_obs(),
                    flattened="the VM's PCI tree is flattened")
    rec = _recommend(layout, {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml", "NCCL_ALGO": "Ring"}, "job", {}, None)
    assert not any(k.action == REMOVE for k in rec.knobs), [k for k in rec.knobs if k.action == REMOVE]
    assert rec.get("NCCL_TOPO_FILE").action == SET and "not identified" in rec.get("NCCL_TOPO_FILE").reason
    assert any("platform not identified" in n for n in rec.notes)


# -- the providers' own setups (tests/fixtures/nccl-platforms/SOURCES.md) ---------------------------------------
FIX = pathlib.Path(__file__).resolve().parent / "fixtures" / "nccl-platforms"


def _env(name):
    from ccdiag.inputs.envfile import parse_env_file

    return parse_env_file((FIX / name).read_text(), name)


@pytest.mark.parametrize("name,itype,key", [
    ("azure-ndv5-nccl.conf", "Standard_ND96isr_H100_v5", "azure-ndv5"),
    ("azure-ndv4-nccl.conf", "Standard_ND96amsr_A100_v4", "azure-ndv4"),
    ("oci-bm-gpu-h100-8-nccl.conf", "BM.GPU.H100.8", "oci-bm-gpu-h100-8"),
    ("gcp-a3-mega-tcpxo.env", "a3-megagpu-8g", "gcp-a3-mega"),
    ("gcp-a3-high-tcpx.env", "a3-highgpu-8g", "gcp-a3-high"),
    ("aws-p4d-efa.env", "p4d.24xlarge", "aws-p4d"),
])
def test_a_providers_own_setup_comes_through_with_nothing_removed(name, itype, key):
    env = _env(name)
    plat = platforms.by_key()[key]
    rec = _rec(_obs(provider=plat.provider, instance_type=itype, instance_type_source="imds"), env)
    removed = [k.name for k in rec.knobs if k.action == REMOVE]
    assert not removed, removed
    for var in env:
        if var in plat.settings:
            assert "vendor-required" in rec.get(var).reason, var
    if "NCCL_IB_PCI_RELAXED_ORDERING" in env:
        assert rec.get("NCCL_IB_PCI_RELAXED_ORDERING").action == SET


def test_g5_is_never_told_to_set_device_rdma_and_a_copied_setting_is_removed():
    env = _env("aws-g5-efa-copied-from-p4d.env")
    rec = _rec(_obs(provider="aws", instance_type="g5.48xlarge"), env)
    k = rec.get("FI_EFA_USE_DEVICE_RDMA")
    assert k.action == REMOVE and "no RDMA" in k.reason
    bare = _rec(_obs(provider="aws", instance_type="g5.48xlarge"), {})
    assert not any(x.name == "FI_EFA_USE_DEVICE_RDMA" and x.action == SET for x in bare.knobs)


def test_an_a100_shapes_queue_pairs_on_an_h100_shape_are_flagged_with_both_values():
    env = _env("oci-bm-gpu4-8-nccl.conf")
    rec = _rec(_obs(provider="oci", instance_type="BM.GPU.H100.8", instance_type_source="imds"), env)
    k = rec.get("NCCL_IB_QPS_PER_CONNECTION")
    assert k.action == SET and k.value == "4"
    assert "documents 1 for this instance type, 4 is set" in k.reason and "BM.GPU4.8" in k.reason


def test_gib_settings_on_an_a3_high_are_flagged():
    rec = _rec(_obs(provider="gcp", instance_type="a3-highgpu-8g", instance_type_source="imds"), {"NCCL_NET": "gIB"})
    k = rec.get("NCCL_NET")
    assert k is not None and "documented for GCP A3 Ultra" in k.reason and "not for GCP A3 High" in k.reason


def test_coreweave_named_by_the_user_keeps_its_documented_prefix():
    rec = _rec(_obs(), _env("coreweave-ib.env"), platform="coreweave-ib")
    k = rec.get("NCCL_IB_HCA")
    assert k.action == SET and k.value == "ibp" and "vendor-required" in k.reason


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
