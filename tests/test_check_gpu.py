"""``check --gpu``: one GPU named as NVML and nvidia-smi name it, its findings and what affects it,
under the node's exit rule; a GPU the node does not have is a one-line input error (exit 2).

The findings below are written in the shape the checks give them (SYNTHESIZED); the end-to-end
test replays the bundled degraded sample (synthesized from real facts, samples/make_samples.py),
whose GPU6 fell off the bus, GPU3's link trained x8 and mlx5_4 (GPU4's nearest NIC) is down.
"""

from __future__ import annotations

import json
import pathlib
from types import SimpleNamespace

import pytest

from ccdiag.checks.causes import link_causes
from ccdiag.core.errors import InputError
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN, Component, Finding
from ccdiag.run.checkrun import exit_code_for
from ccdiag.run.gpuselect import findings_for_gpu, parse_gpu, resolve_gpu

REPO = pathlib.Path(__file__).resolve().parent.parent
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
UUID4 = "GPU-c0a28392-0013-51a3-ad0e-84ccb9fe501a"


def gpu(i: int, bdf: str, uuid: str | None = None):
    return SimpleNamespace(label=f"GPU{i}", index=i, bdf=bdf, uuid=uuid)


GPUS = [gpu(3, "0000:5d:00.0", "GPU-4f0a3366-6406-5827-89ee-59cab07b3c81"), gpu(4, "0000:9a:00.0", UUID4),
        gpu(6, "0000:ba:00.0")]
#: GPU4 sits below switch port 0000:99:00.0 under root port 0000:97:01.0 (SYNTHESIZED)
PATHS = {"0000:9a:00.0": ("0000:97:01.0", "0000:98:00.0", "0000:99:00.0", "0000:9a:00.0")}
TOPOLOGY = SimpleNamespace(gpus=lambda: list(GPUS),
                           pcie_tree=SimpleNamespace(get=lambda bdf: SimpleNamespace(path=PATHS[bdf])
                                                     if bdf in PATHS else None))


@pytest.mark.parametrize("spelling", ["4", UUID4, UUID4.upper(), UUID4[4:], "00000000:9A:00.0", "0000:9a:00.0",
                                      "9a:00.0", " 9A:00.0 "])
def test_every_nvml_spelling_names_the_same_gpu(spelling):
    assert resolve_gpu(parse_gpu(spelling), TOPOLOGY).label == "GPU4"


@pytest.mark.parametrize("spelling, words", [
    ("GPU4", "not a GPU index (3), UUID (GPU-xxxxxxxx-...) or PCI address (00000000:5D:00.0)"),
    ("-1", "not a GPU index"),
    ("9a:00", "not a GPU index"),
    ("MIG-c0a28392-0013-51a3-ad0e-84ccb9fe501a", "a MIG instance; name its GPU"),
])
def test_a_malformed_gpu_is_refused_before_the_node_is_read(spelling, words):
    with pytest.raises(InputError) as info:
        parse_gpu(spelling)
    assert str(info.value).startswith(f"--gpu {spelling}: {words}")


def test_a_gpu_the_node_does_not_have_is_named_with_the_ones_it_has():
    with pytest.raises(InputError) as info:
        resolve_gpu(parse_gpu("5"), TOPOLOGY, "hgx-01")
    assert str(info.value) == ("--gpu 5: no such GPU on node hgx-01 (it has GPU3 0000:5d:00.0, GPU4 0000:9a:00.0, "
                               "GPU6 0000:ba:00.0)")
    with pytest.raises(InputError, match=r"--gpu 0: no such GPU on this node \(it shows no GPU\)"):
        resolve_gpu(parse_gpu("0"), None)


def node_findings() -> list[Finding]:
    """A node with faults on three GPUs, a NIC, a bridge and the node (SYNTHESIZED, linked by the real
    cause table)."""
    port = Component("ib_port", "mlx5_4 port 1", bdf="0000:9b:00.0", device="mlx5_4", port=1)
    g4 = Component("gpu", "GPU4", gpu=4, uuid=UUID4, bdf="0000:9a:00.0")
    g6 = Component("gpu", "GPU6", gpu=6, bdf="0000:ba:00.0")
    return link_causes([
        Finding("ib.port_state", FAIL, port, "mlx5_4 port 1 is DOWN"),
        Finding("ib.gpudirect", WARN, g4, "GPU4's nearest NIC is down", details={"inactive_nic": "mlx5_4"}),
        Finding("gpu.temperature", PASS, g4, "41 C"),
        Finding("nvlink.down", PASS, Component("nvlink", "GPU4 NVLink 2", gpu=4, uuid=UUID4, link=2), "up"),
        Finding("nvlink.asymmetric", WARN, Component("gpu_pair", "GPU3-GPU4", gpu=3, peer="GPU4"), "fewer links"),
        Finding("pcie.aer", WARN, Component("bridge", "bridge 0000:99:00.0", bdf="0000:99:00.0"), "AER counted"),
        Finding("pcie.aer", WARN, Component("bridge", "bridge 0000:5b:00.0", bdf="0000:5b:00.0"), "AER counted"),
        Finding("pcie.link_width", FAIL, Component("pcie_link", "GPU3 PCIe link", gpu=3, bdf="0000:5d:00.0"), "x8"),
        Finding("xid.recent", FAIL, g6, "XID 79", details={"xid": 79}, subject="XID 79"),
        Finding("gpu.lost", FAIL, g6, "GPU6 lost"),
        Finding("gpu.ecc", UNKNOWN, g6, "not read"),
        Finding("gpu.count", FAIL, Component("node", "node"), "7 GPUs of 8"),
        Finding("env.shm", FAIL, Component("limit", "/dev/shm"), "64 MiB"),
        Finding("ib.gpudirect", FAIL, Component("module", "nvidia_peermem"), "no GPUDirect path"),
    ])


def test_a_gpu_keeps_its_findings_the_bridges_above_it_the_node_and_the_roots_behind_them():
    kept = findings_for_gpu(node_findings(), TOPOLOGY, GPUS[1])
    assert [f.key for f in kept] == [
        "ib.port_state|mlx5_4 port 1",  # the root GPU4's detour follows from
        "ib.gpudirect|GPU4", "gpu.temperature|GPU4", "nvlink.down|GPU4 NVLink 2", "nvlink.asymmetric|GPU3-GPU4",
        "pcie.aer|bridge 0000:99:00.0",  # on its path to the CPU; 0000:5b:00.0 is not
        "env.shm|/dev/shm", "ib.gpudirect|nvidia_peermem",  # the node's, for every GPU
    ]  # GPU6's XID and the GPU count it made short are GPU6's business
    assert exit_code_for(kept) == 1


def test_a_lost_gpu_keeps_its_event_and_the_count_it_shortened():
    kept = {f.key for f in findings_for_gpu(node_findings(), TOPOLOGY, GPUS[2])}
    assert {"xid.recent|GPU6|XID 79", "gpu.lost|GPU6", "gpu.ecc|GPU6", "gpu.count|node"} <= kept
    assert "ib.port_state|mlx5_4 port 1" not in kept and "pcie.link_width|GPU3 PCIe link" not in kept


def test_a_healthy_gpu_on_a_healthy_node_exits_0_and_a_warning_only_fails_with_strict():
    findings = [f for f in node_findings() if f.status == PASS or f.check == "nvlink.asymmetric"]
    kept = findings_for_gpu(findings, TOPOLOGY, GPUS[0])
    assert [f.key for f in kept] == ["nvlink.asymmetric|GPU3-GPU4"]
    assert exit_code_for(kept) == 0 and exit_code_for(kept, strict=True) == 1


@pytest.mark.slow  # replays the sample several times
def test_check_gpu_on_the_sample(tmp_path):
    from cli_runner import run
    from ccdiag.report.document import validate

    codes = {}
    for spelling in ("4", UUID4, "00000000:9A:00.0"):
        code, out, err = run("check", "--replay", str(DEGRADED), "--gpu", spelling, "-q")
        codes[spelling] = (code, out.splitlines()[0])
    assert len(set(codes.values())) == 1, codes
    code, first = codes["4"]
    assert code == 1 and first.endswith(f"(node hgx-h100-synth-degraded), GPU4 ({UUID4}, 0000:9a:00.0) and what "
                                        "affects it")
    code, out, _ = run("check", "--replay", str(DEGRADED), "--gpu", "3", "--json")
    doc = json.loads(out)
    validate(doc)
    keys = {f["key"] for f in doc["findings"]}
    assert "pcie.link_width|GPU3 PCIe link" in keys and not [k for k in keys if "GPU6" in k]
    assert doc["selection"]["gpu"] == {"asked": "3", "label": "GPU3", "index": 3, "bdf": "0000:5d:00.0",
                                       "uuid": "GPU-4f0a3366-6406-5827-89ee-59cab07b3c81"}
    assert doc["selection"]["node_verdict"] == {"status": "fail", "exit_code": 1}
    assert code == doc["verdict"]["exit_code"] == 1
    code, out, err = run("check", "--replay", str(DEGRADED), "--gpu", "00000000:3B:00.0")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("ccdiag: --gpu 00000000:3B:00.0: no such GPU on node hgx-h100-synth-degraded (it has GPU0 ")


def test_a_malformed_gpu_is_exit_2_before_anything_is_read(tmp_path):
    from cli_runner import run

    code, out, err = run("check", "--replay", str(tmp_path / "absent.tar"), "--gpu", "GPU4")
    assert (code, out) == (2, "")
    assert err == "ccdiag: --gpu GPU4: not a GPU index (3), UUID (GPU-xxxxxxxx-...) or PCI address (00000000:5D:00.0)\n"
