"""Redaction by allow-list: secrets and identities planted in every place a snapshot carries them
(environment, /etc/nccl.conf, DMI, the kernel log, process lists) never survive ``--redact``, while the
redacted snapshot replays to the same verdict and a cloud node keeps its platform identity.

Every planted value is SYNTHESIZED (the shapes are the documented ones of each kind: an AWS access
key id's AKIA prefix and length, GitHub's ghp_ tokens, a JSON web token's three parts, a PEM key's
header, a URL with credentials); none is a real credential.
"""

from __future__ import annotations

import tarfile

import pytest

from cli_runner import run
from conftest import REPO

SAMPLE = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"

#: (kind, where it is planted, the value that must not survive)
PLANTED: list[tuple[str, str, str]] = [
    ("api key in an NVIDIA_* variable", "env", "nvapi-Q7fZx2LmP9sT4vW8yB3nC6dK1hJ5gR0e"),
    ("another node's host name in NCCL_COMM_ID", "env", "trainhost17"),
    ("a home directory in NCCL_DEBUG_FILE", "env", "/home/alice"),
    ("a user cache path in a CUDA_* variable", "env", "/home/bob"),
    ("a token in an unknown NCCL_* variable", "env", "tok-8fK2mQ9xZ4vL7pN1"),
    ("a GitHub token in an allowed variable's value", "env", "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"),
    ("credentials in a URL", "env", "pa55w0rd-Kite"),
    ("an Open MPI host file under a home directory", "env", "/home/carol"),
    ("an AWS access key id", "env", "AKIAIOSFODNN7QWERTYU"),
    ("a password in an nccl.conf comment", "nccl.conf", "hunter2-Quokka"),
    ("a token line in nccl.conf", "nccl.conf", "Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcgZ9"),
    ("a home directory in nccl.conf", "nccl.conf", "/home/dave"),
    ("a JSON web token in nccl.conf", "nccl.conf", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyNDIifQ.c2lnbmF0dXJl"),
    ("a chassis asset tag", "dmi", "ACME-ASSET-99812"),
    ("a product serial", "dmi", "SN7731XQ-ZZ"),
    ("a product UUID", "dmi", "4c4c4544-0042-3510-8051-b4c04f4e3532"),
    ("a board serial", "dmi", ".PB1234567890."),
    ("a chassis serial", "dmi", "CHS-55501-KQ"),
    ("a process name in an XID line", "kmsg", "secret_trainer_v2"),
    ("a password on a mount line", "kmsg", "Sup3rS3cretMount"),
    ("a USB serial in the kernel log", "kmsg", "0123ABCD99EF"),
    ("a PEM private key in the kernel log", "kmsg", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    ("a process name in an NVML process record", "processes", "evil_miner_bin"),
    ("a command line in a process list", "processes", "wandb-key-51f0c2e9"),
]


def _planted_snapshot():
    from ccdiag.host.snapshot import SnapshotData

    snap = SnapshotData.load(str(SAMPLE))
    v = {kind: value for kind, _, value in PLANTED}
    snap.environ = {
        "NVIDIA_API_KEY": v["api key in an NVIDIA_* variable"],
        "NCCL_COMM_ID": "trainhost17:23456",
        "NCCL_DEBUG_FILE": "/home/alice/nccl.%h.%p.log",
        "CUDA_CACHE_PATH": "/home/bob/.nv/ComputeCache",
        "NCCL_SECRETS_FROM_VAULT": v["a token in an unknown NCCL_* variable"],
        "NCCL_SOCKET_IFNAME": v["a GitHub token in an allowed variable's value"],
        "NCCL_TOPO_FILE": "https://svc:pa55w0rd-Kite@files.example.com/topo.xml",
        "OMPI_MCA_orte_default_hostfile": "/home/carol/hosts",
        "NCCL_IB_HCA": "AKIAIOSFODNN7QWERTYU",
    }
    snap.meta["environ_recorded"] = ["NCCL_", "CUDA_", "NVIDIA_", "UCX_", "OMPI_MCA_", "GPU_DEVICE_ORDINAL", "FI_",
                                     "RDMAV_FORK_SAFE"]
    snap.put_file("/etc/nccl.conf", (
        "# ops contact: password: hunter2-Quokka\n"
        "NCCL_DEBUG=WARN\n"
        "MY_SERVICE_TOKEN=Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcgZ9\n"
        "NCCL_DEBUG_FILE=/home/dave/nccl.log\n"
        "NCCL_ALGO=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyNDIifQ.c2lnbmF0dXJl\n"))
    for field, value in (("chassis_asset_tag", v["a chassis asset tag"]), ("product_serial", v["a product serial"]),
                         ("product_uuid", v["a product UUID"]), ("board_serial", v["a board serial"]),
                         ("chassis_serial", v["a chassis serial"]), ("sys_vendor", "Dell Inc."),
                         ("product_name", "PowerEdge XE9680")):
        snap.put_file(f"/sys/class/dmi/id/{field}", value + "\n")
    lines = snap.kmsg[0]["lines"]
    lines.append("4,13,52873613300,-;NVRM: Xid (PCI:0000:ba:00): 79, pid=48299, name=secret_trainer_v2, "
                 "GPU has fallen off the bus.")
    lines.append("6,14,52873613400,-;CIFS: mount options: username=eve,password=Sup3rS3cretMount")
    lines.append("6,15,52873613500,-;usb 1-1: SerialNumber: 0123ABCD99EF")
    lines.append("6,16,52873613600,-;-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    for rec in snap.nvml:
        if rec["call"][0] == "nvmlDeviceGetComputeRunningProcesses" and rec["call"][1] == 0:
            rec["ok"] = [{"pid": 4242, "usedGpuMemory": 1 << 30, "name": "evil_miner_bin"}]
    snap.commands.append({"argv": ["ps", "-eo", "pid,args"], "rc": 0, "stderr": "", "duration_s": 0.01,
                          "timed_out": False, "error": None, "epoch": 0,
                          "stdout": "4242 python train.py --key wandb-key-51f0c2e9\n"})
    return snap


def _all_text(path) -> str:
    out = []
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if member.isfile():
                out.append(tar.extractfile(member).read().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.fixture(scope="module")
def redacted(tmp_path_factory):
    from ccdiag.report.redact import redact_with_report

    tmp = tmp_path_factory.mktemp("redact")
    original = _planted_snapshot()
    red, counts, dropped = redact_with_report(original)
    orig_path, red_path = tmp / "orig.snap.tar.gz", tmp / "red.snap.tar.gz"
    original.save(str(orig_path))
    red.save(str(red_path))
    return orig_path, red_path, red, dropped


def test_at_least_twenty_kinds_are_planted_in_every_place():
    assert len({kind for kind, _, _ in PLANTED}) >= 20
    assert {where for _, where, _ in PLANTED} == {"env", "nccl.conf", "dmi", "kmsg", "processes"}


def test_the_planted_values_are_in_the_original(redacted):
    orig_path, _, _, _ = redacted
    text = _all_text(orig_path)
    assert [value for _, _, value in PLANTED if value not in text] == []


@pytest.mark.parametrize("kind,where,value", PLANTED, ids=[k for k, _, _ in PLANTED])
def test_no_planted_secret_or_identity_survives(redacted, kind, where, value):
    _, red_path, _, _ = redacted
    assert value.lower() not in _all_text(red_path).lower()


def test_what_the_checks_read_stays(redacted):
    _, _, red, _ = redacted
    conf = red.files[0]["/etc/nccl.conf"].decode()
    # the lines a check reads, no comment, no other key; a secret or a home path becomes a placeholder
    assert conf == "NCCL_DEBUG=WARN\nNCCL_DEBUG_FILE=/redacted/path-1\nNCCL_ALGO=redacted-1\n"
    assert red.environ["NCCL_COMM_ID"].endswith(":23456") and "trainhost17" not in red.environ["NCCL_COMM_ID"]
    assert red.files[0]["/sys/class/dmi/id/product_name"] == b"PowerEdge XE9680\n"
    xid = [l for l in red.kmsg[0]["lines"] if "pid=48299" in l]
    assert xid and "Xid (PCI:0000:ba:00): 79" in xid[0] and "name=process-" in xid[0]
    proc = next(r for r in red.nvml if r["call"] == ["nvmlDeviceGetComputeRunningProcesses", 0])
    assert proc["ok"] == [{"pid": 4242, "usedGpuMemory": 1 << 30}]


def test_every_drop_is_listed_by_name_without_its_value(redacted):
    _, _, _, dropped = redacted
    listed = "\n".join(dropped.lines())
    for name in ("NVIDIA_API_KEY", "NCCL_DEBUG_FILE", "CUDA_CACHE_PATH", "NCCL_SECRETS_FROM_VAULT",
                 "NCCL_SOCKET_IFNAME", "NCCL_TOPO_FILE", "OMPI_MCA_orte_default_hostfile", "product_serial",
                 "chassis_asset_tag", "MY_SERVICE_TOKEN", "/etc/nccl.conf:1"):
        assert name in listed
    assert [value for _, _, value in PLANTED if value in listed] == []


@pytest.mark.slow  # two replays through the command line
def test_the_redacted_snapshot_replays_to_the_same_verdict(redacted):
    orig_path, red_path, _, _ = redacted
    a = run("check", "--replay", str(orig_path), "-q")
    b = run("check", "--replay", str(red_path), "-q")
    assert a[0] == b[0]
    la, lb = a[1].splitlines(), b[1].splitlines()
    assert la[0].split("(node")[0] == lb[0].split("(node")[0]
    assert [l.split()[:2] for l in la[1:]] == [l.split()[:2] for l in lb[1:]]


def test_a_redacted_azure_node_still_replays_as_azure():
    from ccdiag.host.door import ReplayHost
    from ccdiag.host.snapshot import SnapshotData
    from ccdiag.probes import platform
    from ccdiag.report.redact import redact

    snap = SnapshotData.load(str(SAMPLE))
    for field, value in (("sys_vendor", "Microsoft Corporation"), ("product_name", "Virtual Machine"),
                         ("chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77"),
                         ("product_uuid", "7e9a8c2d-1f3b-4a5c-9d6e-0f1a2b3c4d5e")):
        snap.put_file(f"/sys/class/dmi/id/{field}", value + "\n")
    red, _ = redact(snap)
    obs = platform.collect(ReplayHost(red))
    assert obs.provider == "azure"
    assert red.meta["platform_identity"] == {"provider": "azure"}
    assert "/sys/class/dmi/id/product_uuid" not in red.files[0]


def test_snapshot_redact_prints_what_it_dropped(tmp_path):
    src = tmp_path / "planted.snap.tar.gz"
    _planted_snapshot().save(str(src))
    code, out, err = run("snapshot", "--replay", str(src), "--redact", "-o", str(tmp_path / "r.snap.tar.gz"))
    assert code == 0
    assert "dropped" in out and "NVIDIA_API_KEY" in out and "product_serial" in out
    assert "nvapi-" not in out + err
