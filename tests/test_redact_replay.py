"""Every snapshot the tests build, redacted, replays to the same verdict, the same findings (check,
status and component, the component's identities read through the same pseudonyms), the same
platform identity and the same NCCL advice (each setting named and what to do with it).

Why: the redaction keeps only what the allow-list names (ccdiag/report/allowlist.py). A probe that
starts reading something new (a file, a variable, a DMI field, a kernel line) and is not added
there loses that reading in a redacted snapshot: a ticket's replay would then judge a different
node. This test fails first.

The snapshots: both bundled samples; every node-wide fault scenario of tests/scenarios_node.py
(SYNTHESIZED on the samples' builder); the recordings made against NVIDIA's mock NVML
(tests/fixtures/mocknvml); and the healthy sample dressed as each cloud platform in the table the
way its provider's images are (SYNTHESIZED identity: DMI fields, the metadata service's answer,
the provider's documented settings from tests/fixtures/nccl-platforms, its plugin library and
topology files, EFA devices, the plugin's own variables).
"""

from __future__ import annotations

import collections
import pathlib

import pytest

import scenarios_node as N
from ccdiag.host.door import ReplayHost
from ccdiag.host.snapshot import SnapshotData
from ccdiag.report.redact import redact_with_texts
from ccdiag.run.checkrun import evaluate

pytestmark = pytest.mark.slow  # dozens of snapshots, each judged twice

HERE = pathlib.Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples"
MOCK = HERE / "fixtures" / "mocknvml"
PLATFORM_FIX = HERE / "fixtures" / "nccl-platforms"
DMI = "/sys/class/dmi/id/"


def _conf_lines(name: str) -> dict[str, str]:
    from ccdiag.inputs.envfile import parse_env_file

    return parse_env_file((PLATFORM_FIX / name).read_text(), name)


def _dressed(dmi: dict[str, str], imds: dict[str, str] | None = None, env: dict[str, str] | None = None,
             conf: str | None = None, files: dict[str, str] | None = None, plugin: str | None = None) -> SnapshotData:
    """The healthy sample dressed as a cloud node (SYNTHESIZED identity; see the module docstring)."""
    snap = SnapshotData.load(str(SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz"))
    for field, value in dmi.items():
        snap.put_file(DMI + field, value + "\n")
    for field, value in (("product_uuid", "4c4c4544-0042-3510-8052-b4c04f4e3432"), ("product_serial", "CNX7Q93K2")):
        snap.put_file(DMI + field, value + "\n")  # identities that must not leave, planted beside
    for provider, text in (imds or {}).items():
        snap.imds[provider] = {"text": text}
    if env is not None:
        snap.environ = {**(snap.environ or {}), **env, "HOME": "/home/alice", "AWS_SECRET_ACCESS_KEY": "x" * 40}
    if conf is not None:
        snap.put_file("/etc/nccl.conf", "# a comment with a token=abc123\n" + (PLATFORM_FIX / conf).read_text())
    for path, text in (files or {}).items():
        snap.put_file(path, text)
    if plugin is not None:
        directory, name = plugin.rsplit("/", 1)
        snap.put_file(plugin, b"\x7fELF")
        snap.listings[directory] = sorted({*snap.listings.get(directory, []), name})
    return snap


def _azure_topology() -> str:
    """An NCCL topology file in the layout Azure's images ship, naming this node's GPUs and NICs."""
    host = ReplayHost(SnapshotData.load(str(SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz")))
    res = evaluate(host, deadline_s=120, only=["gpu.count"])
    topo = res.topology
    parts = ['<system version="1">', '  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel">']
    for g, nic in zip(topo.gpus(), topo.nics()):
        parts.append(f'    <pci busid="{g.bdf}" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">')
        parts.append(f'      <pci busid="{g.bdf}" class="0x030200"/>')
        parts.append(f'      <pci busid="{nic.bdf}" class="0x020700"/>')
        parts.append("    </pci>")
    parts += ["  </cpu>", "</system>", ""]
    return "\n".join(parts)


def _platforms() -> dict[str, SnapshotData]:
    tcpxo = {k: v for k, v in _conf_lines("gcp-a3-mega-tcpxo.env").items()}
    return {
        "aws-p5 (EFA, libfabric settings, the OFI plugin)": _dressed(
            {"sys_vendor": "Amazon EC2", "product_name": "p5.48xlarge", "bios_vendor": "Amazon EC2",
             "board_vendor": "Amazon EC2"}, env=_conf_lines("aws-p4d-efa.env"),
            plugin="/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
            files={"/sys/class/infiniband/efa_0/ports/1/state": "4: ACTIVE\n"}),
        "gcp-a3-mega (TCPXO variables, the metadata service)": _dressed(
            {"sys_vendor": "Google", "product_name": "Google Compute Engine", "bios_vendor": "Google"},
            imds={"gcp": "projects/123456789012/machineTypes/a3-megagpu-8g"}, env=tcpxo,
            plugin="/var/lib/tcpxo/lib64/libnccl-net.so"),
        "gcp-a3-ultra (gIB tuner path only)": _dressed(
            {"product_name": "Google Compute Engine"},
            env={"NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a3u.txtpb", "NCCL_NET": "gIB"}),
        "azure-ndv5 (asset tag, vmSize, nccl.conf, topology file)": _dressed(
            {"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine",
             "chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77", "bios_vendor": "Microsoft Corporation"},
            imds={"azure": "Standard_ND96isr_H100_v5"}, conf="azure-ndv5-nccl.conf",
            files={"/opt/microsoft/ndv5/topo.xml": _azure_topology()}),
        "oci (asset tag, shape, nccl.conf)": _dressed(
            {"sys_vendor": "Oracle Corporation", "chassis_asset_tag": "OracleCloud.com"},
            imds={"oci": "BM.GPU.H100.8"}, conf="oci-bm-gpu-h100-8-nccl.conf"),
    }


def _roce_rails(shared_subnet: bool) -> SnapshotData:
    """The healthy sample's eight ports in Ethernet mode (RoCE rails), strict reverse-path filtering
    and ECN on each rail, their addresses in one subnet or each in its own (SYNTHESIZED)."""
    import dataclasses

    snap = N.MS.build(False, N.MS.Variant(name="roce", ib_port=lambda i, spec: dataclasses.replace(
        spec, link_layer="Ethernet")))
    for epoch, facts in snap.net.items():
        for name, addrs in facts.get("addrs", {}).items():
            if name.startswith("ib"):
                i = int(name[2:])
                for a in addrs:
                    if a.get("family") == "inet":
                        a["address"] = f"10.10.0.{11 + i}" if shared_subnet else f"10.10.{i}.11"
    where = ReplayHost(snap)
    for i in range(8):
        snap.put_file(f"/proc/sys/net/ipv4/conf/ib{i}/rp_filter", "1\n")
        snap.put_file(f"/proc/sys/net/ipv4/conf/ib{i}/arp_ignore", "1\n")
        device = where.realpath(f"/sys/class/net/ib{i}")  # the interface's own directory
        for point in ("roce_np", "roce_rp"):
            for prio in range(8):
                snap.put_file(f"{device}/ecn/{point}/enable/{prio}", "1\n" if prio == 3 else "0\n")
    snap.put_file("/proc/sys/net/ipv4/conf/all/rp_filter", "0\n")
    return snap


def _gb200_imex(service: str) -> SnapshotData:
    """The GB200 mock-NVML recording with the IMEX service's state, its channel device in
    /proc/devices and one channel (SYNTHESIZED)."""
    snap = SnapshotData.load(str(MOCK / "gb200.snap.tar.gz"))
    snap.put_file("/proc/devices", "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n"
                                   "Block devices:\n259 blkext\n")
    snap.put_dir("/dev/nvidia-caps-imex-channels")
    snap.put_file("/dev/nvidia-caps-imex-channels/channel0", b"")
    snap.commands.append({"argv": ["systemctl", "is-active", "nvidia-imex"], "rc": 0 if service == "active" else 3,
                          "stdout": service + "\n", "stderr": "", "duration_s": 0.01, "timed_out": False,
                          "epoch": 0})
    return snap


EXTRA = {"RoCE rails, each in its own subnet": lambda: _roce_rails(False),
         "RoCE rails sharing a subnet": lambda: _roce_rails(True),
         "GB200 with IMEX active": lambda: _gb200_imex("active"),
         "GB200 with IMEX inactive": lambda: _gb200_imex("inactive")}


def _sources() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [(f"sample {p.name}", p) for p in sorted(SAMPLES.glob("*.snap.tar.gz"))]
    out += [(f"mock NVML {p.name}", p) for p in sorted(MOCK.glob("*.snap.tar.gz"))]
    out += [(f"scenario {name}", name) for name in sorted(N.SCENARIOS)]
    out += [(f"platform {name}", name) for name in sorted(_platforms())]
    out += [(f"reading {name}", name) for name in sorted(EXTRA)]
    return out


def _snapshot(label: str, source: object) -> SnapshotData:
    if isinstance(source, pathlib.Path):
        return SnapshotData.load(str(source))
    if label.startswith("scenario "):
        return N.MS.build(False, N.SCENARIOS[source]())
    if label.startswith("reading "):
        return EXTRA[source]()
    return _platforms()[source]


def _judged(snap: SnapshotData):
    """The verdict, every finding, the platform identity and the NCCL advice of a snapshot."""
    from ccdiag.nccl.recommend import recommend
    from ccdiag.run.observe import nccl_settings_seen

    host = ReplayHost(snap)
    res = evaluate(host, deadline_s=120)
    seen = nccl_settings_seen(host)
    plat = res.runs.get("platform")
    ident = None
    if plat is not None and plat.data is not None:
        ident = (plat.data.provider, plat.data.instance_type, plat.data.identified_by, plat.data.container,
                 len(plat.data.net_plugins), plat.data.efa_devices)
    knobs = []
    if res.topology is not None:
        rec = recommend(res.topology, res.runs, env=seen.env, env_source=seen.source, env_unread=seen.unread)
        knobs = [(k.name, k.action, k.value or "", k.reason) for k in rec.knobs]
    return res, ident, knobs


SOURCES = _sources()


@pytest.mark.parametrize("label,source", SOURCES, ids=[label for label, _ in SOURCES])
def test_the_redacted_snapshot_is_judged_as_the_original(label, source):
    snap = _snapshot(label, source)
    red, _texts, _counts, r = redact_with_texts(snap, {})
    before, ident_a, knobs_a = _judged(snap)
    after, ident_b, knobs_b = _judged(red)
    assert (after.status, after.exit_code) == (before.status, before.exit_code), label
    want = collections.Counter((f.check, f.status, r.text(f.component.label())) for f in before.findings)
    got = collections.Counter((f.check, f.status, f.component.label()) for f in after.findings)
    assert got == want, f"{label}: lost {want - got}, gained {got - want}"
    assert ident_b == ident_a, label
    # each setting named, what to do with it, its value and why, as the original's read through the
    # same pseudonyms: a setting the redaction dropped reads "not set" here
    assert knobs_b == [(n, a, r.text(v), r.text(why)) for n, a, v, why in knobs_a], label


def test_every_kind_of_snapshot_is_covered():
    kinds = collections.Counter(label.split()[0] for label, _ in SOURCES)
    assert kinds["sample"] == 2 and kinds["mock"] >= 7 and kinds["scenario"] >= 20 and kinds["platform"] == 5
    assert kinds["reading"] == 4
