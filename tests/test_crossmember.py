"""Snapshots whose members disagree about a device give a finding or a refusal, never exit 4.

SYNTHESIZED from the bundled healthy sample: each case edits one member so that it names a device
another member lacks or places elsewhere (the shapes outside fuzzing found), then runs ``check``,
``topo --json``, ``topo`` and ``nccl`` on it through the real entry point.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ccdiag.host.snapshot import SnapshotData
from cli_runner import run

SAMPLE = pathlib.Path(__file__).parent.parent / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
MLX0 = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"
MLX1 = "/sys/devices/pci0000:27/0000:27:01.0/0000:28:00.0/0000:29:01.0/0000:2b:00.0"


def _ib_shares_bdf(s):  # mlx5_0's PCI device link names mlx5_1's function
    s.links[MLX0 + "/infiniband/mlx5_0/device"] = MLX1


def _ib_without_pci_link(s):  # listed in /sys/class/infiniband, no device link
    del s.links[MLX0 + "/infiniband/mlx5_0/device"]


def _ib_pci_dir_gone(s):  # the PCI function's own files are gone, the RDMA device still names it
    for files in s.files.values():
        for p in [p for p in files if p.startswith(MLX0 + "/") and "/infiniband/" not in p and "/net/" not in p]:
            del files[p]


def _netdev_names_unknown_rdma(s):  # ib0's device/infiniband holds mlx5_99, which the class lacks
    for files in s.files.values():
        for p in [p for p in files if p.startswith(MLX0 + "/infiniband/mlx5_0/")]:
            files[p.replace("/infiniband/mlx5_0/", "/infiniband/mlx5_99/")] = files.pop(p)
    for p in [p for p in s.links if p.startswith(MLX0 + "/infiniband/mlx5_0")]:
        s.links[p.replace("/infiniband/mlx5_0", "/infiniband/mlx5_99")] = s.links.pop(p)
    s.dirs = {d.replace("/infiniband/mlx5_0", "/infiniband/mlx5_99") for d in s.dirs}


def _netdev_points_at_other_nic(s):  # ib0's device link names mlx5_1's PCI function
    s.links[MLX0 + "/net/ib0/device"] = MLX1


def _nvml_drops_a_gpu(s):  # NVML counts 7, PCI and nvidia-smi topo -m still show 8
    for c in s.nvml:
        if c["call"] == ["nvmlDeviceGetCount"]:
            c["ok"] = 7


def _nvml_bus_id_elsewhere(s):  # NVML puts GPU3 at a bus id the PCI tree lacks
    for c in s.nvml:
        if c["call"][0].startswith("nvmlDeviceGetPciInfo") and c["call"][1:2] == [3] and isinstance(c.get("ok"), dict):
            c["ok"]["busId"] = "00000000:EE:00.0"
            c["ok"]["busIdLegacy"] = "0000:EE:00.0"


def _smi_renames_a_nic(s):  # nvidia-smi's legend names a NIC the InfiniBand class lacks
    for c in s.commands:
        if c["argv"] == ["nvidia-smi", "topo", "-m"]:
            c["stdout"] = c["stdout"].replace("NIC0: mlx5_0", "NIC0: mlx5_42")


#: case -> (check id, words the finding names: the device and each source) or None for cases
#: reported by the topology's smi comparison
CASES = {
    "ib_shares_bdf": (_ib_shares_bdf, "topology.consistency", ["mlx5_0", "mlx5_1", "0000:2b:00.0"]),
    "ib_without_pci_link": (_ib_without_pci_link, "topology.consistency", ["mlx5_0", "PCI device link"]),
    "ib_pci_dir_gone": (_ib_pci_dir_gone, "topology.consistency", ["mlx5_0", "0000:19:00.0"]),
    "netdev_names_unknown_rdma": (_netdev_names_unknown_rdma, "topology.consistency", ["ib0", "mlx5_99"]),
    "netdev_points_at_other_nic": (_netdev_points_at_other_nic, "topology.consistency", ["ib0", "mlx5_0", "mlx5_1"]),
    "nvml_drops_a_gpu": (_nvml_drops_a_gpu, "gpu.count", ["0000:db:00.0", "NVML"]),
    "nvml_bus_id_elsewhere": (_nvml_bus_id_elsewhere, "gpu.count", ["GPU3", "0000:ee:00.0"]),
    "smi_renames_a_nic": (_smi_renames_a_nic, None, ["mlx5_42"]),
}


@pytest.fixture(scope="module")
def snaps(tmp_path_factory):
    out = {}
    for name, (edit, _, _) in CASES.items():
        s = SnapshotData.load(str(SAMPLE))
        edit(s)
        path = tmp_path_factory.mktemp(name) / f"{name}.snap.tar.gz"
        s.save(str(path))
        out[name] = str(path)
    return out


def _ok(code: int, err: str) -> None:
    assert code != 4, err
    assert "Traceback" not in err and "internal error" not in err, err


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_command_survives(name, snaps):
    path = snaps[name]
    for args in (("check", "--replay", path), ("topo", "--replay", path, "--json"), ("topo", "--replay", path),
                 ("nccl", "--replay", path), ("nccl", "--replay", path, "--format", "json")):
        code, out, err = run(*args)
        _ok(code, err)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_disagreement_is_named(name, snaps):
    _, check_id, words = CASES[name]
    if check_id is None:
        code, out, err = run("topo", "--replay", snaps[name], "--json")
        _ok(code, err)
        text = json.dumps(json.loads(out).get("smi_mismatches"))
    else:
        code, out, err = run("check", "--replay", snaps[name], "--json")
        _ok(code, err)
        found = [f for f in json.loads(out)["findings"] if f["check"] == check_id and f["status"] != "pass"]
        assert found, (check_id, [f["summary"] for f in json.loads(out)["findings"] if f["status"] != "pass"])
        text = json.dumps(found)
    for w in words:
        assert w in text, (w, text[:2000])


def test_a_consistent_node_has_no_consistency_finding():
    code, out, err = run("check", "--replay", str(SAMPLE), "--json")
    _ok(code, err)
    assert not [f for f in json.loads(out)["findings"] if f["check"] == "topology.consistency"]
