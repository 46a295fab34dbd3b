"""Expected values from a pasted file's GPU names and the hardware catalogue (ccdiag.bench.filetopo):
what the catalogue can say, what it refuses to guess, and how pasted levels complete it."""

from __future__ import annotations

import pathlib

import pytest
from cli_runner import run

from ccdiag.bench.filetopo import FileTopology
from ccdiag.bench.imports import NodeInfo, choose

TESTS = pathlib.Path(__file__).resolve().parent
HEALTHY = str(TESTS.parent / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz")


class Levels:
    """A pasted matrix's levels (what MatrixTopology answers), written out for two GPUs."""

    def __init__(self, level):
        self._level = level

    def has_device(self, name):
        return name in ("GPU0", "GPU1")

    def level(self, a, b):
        return self._level


def test_bridged_ga102_pair_with_pasted_nv4_is_four_links_at_14_06():
    t = FileTopology({"GPU0": "NVIDIA A40", "GPU1": "NVIDIA A40"}, levels=Levels("NV4"))
    e, why = t.peer("GPU0", "GPU1")
    assert why is None and e.gbyte_s == pytest.approx(56.25) and e.kind == "nvlink" and e.level == "NV4"
    assert e.source.startswith("catalogue: A40")


def test_bridged_board_without_levels_is_not_guessed():
    t = FileTopology({"GPU0": "NVIDIA A40", "GPU1": "NVIDIA A40"})
    e, why = t.peer("GPU0", "GPU1")
    assert e is None and "--from-smi" in why


def test_a_pcie_level_on_a_geforce_board_is_a_staged_path():
    t = FileTopology({"GPU0": "NVIDIA GeForce RTX 4090", "GPU1": "NVIDIA GeForce RTX 4090"}, levels=Levels("PIX"))
    e, _ = t.peer("GPU0", "GPU1")
    assert e.kind == "staged" and e.gbyte_s == pytest.approx(31.5, abs=0.01)
    said, _ = t.peer("GPU0", "GPU1", said=True)  # the file says CAN Access Peer (a patched driver)
    assert said.kind == "pcie"


def test_eight_nvswitch_gpus_get_every_link_four_do_not():
    eight = FileTopology({f"GPU{i}": "NVIDIA H100 80GB HBM3" for i in range(8)})
    assert eight.peer("GPU0", "GPU5")[0].gbyte_s == 450.0
    four = FileTopology({f"GPU{i}": "NVIDIA H100 80GB HBM3" for i in range(4)})
    assert four.peer("GPU0", "GPU1")[0] is None  # a 4-GPU board has direct links, not NVSwitches


def test_host_copies_use_the_card_or_the_c2c_link():
    t = FileTopology({"GPU0": "NVIDIA GH200 480GB", "GPU1": "NVIDIA L40S"})
    assert t.host_device("GPU0")[0].gbyte_s == 450.0 and "C2C" in t.host_device("GPU0")[0].source
    assert t.host_device("GPU1")[0].bottleneck_desc == "Gen4 x16"


def test_unknown_and_mixed_models_say_why():
    t = FileTopology({"GPU0": "Radeon RX 7900 XTX", "GPU1": "NVIDIA A40"})
    assert "does not know" in t.peer("GPU0", "GPU0")[1]
    assert "mixes GPU models" in t.peer("GPU0", "GPU1")[1]


def test_a_snapshot_of_the_same_model_but_another_host_is_not_used():
    from ccdiag.commands.bench import _observe

    _, observed = _observe(HEALTHY, "/", 20.0)
    names = {f"GPU{i}": "NVIDIA H100 80GB HBM3" for i in range(8)}
    ex, why = choose(observed.topology, names, ["ztan-mig-235z", "ztan-mig-gq73"],
                     NodeInfo(observed.hostname, replayed=True))
    assert "the snapshot is of" in why and ex.peer("GPU0", "GPU1")[0] is None
    ex, why = choose(observed.topology, names, [observed.hostname], NodeInfo(observed.hostname, replayed=True))
    assert why is None and ex.peer("GPU0", "GPU1")[0].gbyte_s == 450.0


def test_the_other_hosts_file_is_said_so_on_the_command_line():
    f = TESTS / "fixtures" / "realcases" / "nccl-tests-gcp-a3mega-2node-16x-h100-all-reduce.txt"
    code, out, _ = run("bench", "import", str(f), "--replay", HEALTHY)
    assert code == 3 and "the snapshot is of hgx-h100-synth-healthy" in out
