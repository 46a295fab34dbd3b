"""``ccdiag topo``: rendering, JSON report, graph output, pasted matrices, bad input, and a live run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REPO

from ccdiag.cli import cli, main
from ccdiag.commands.topo import gather, topo_report
from ccdiag.exitcodes import ExitCode
from ccdiag.host import RecordingHost, ReplayHost
from ccdiag.report import strip_volatile, validate

HEALTHY = str(REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz")
DEGRADED = str(REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz")
CORPUS = FIXTURES / "corpus" / "topo-m"
HAS_NVIDIA_DRIVER = os.path.exists("/proc/driver/nvidia/version")


def invoke(*args):
    """Run ``ccdiag topo`` in-process; returns (return value or exception, output)."""
    result = CliRunner().invoke(cli, ["topo", *args], standalone_mode=False)
    return (result.exception if result.exception else result.return_value), result.output


def main_exit(argv, capsys):
    """Run the console entry point (the real error handling) and return (exit code, out, err)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


# -- replayed samples --------------------------------------------------------------------------------
def test_topo_healthy_text():
    code, out = invoke("--replay", HEALTHY)
    assert code == int(ExitCode.OK)
    assert "GPU0  X     NV18" in out
    assert "NIC0=mlx5_0" in out
    assert "nvidia-smi topo -m agrees with this topology." in out
    assert "all 28 GPU pairs" in out and "450.0" in out
    assert "SYNTHESIZED" in out


def test_topo_degraded_link_table_shows_gpu3_at_x8():
    code, out = invoke("--replay", DEGRADED)
    assert code == int(ExitCode.OK)
    row = next(line for line in out.splitlines() if line.startswith("GPU3 <- "))
    assert "Gen5 x8" in row and "Gen5 x16" in row and "DEGRADED" in row and "31.5" in row
    assert any(line.startswith("mlx5_4 port 1") and "DOWN" in line for line in out.splitlines())
    assert "NV17" in out
    assert "GPU6 (0000:ba:00.0) failed in NVML (gpu_lost)" in out


def test_topo_json_is_one_valid_document():
    code, out = invoke("--replay", HEALTHY, "--json")
    assert code == int(ExitCode.OK)
    doc = json.loads(out)
    validate(doc)
    assert doc["kind"] == "topo" and doc["host"]["synthesized"] is True
    assert doc["smi_mismatches"] == []
    assert doc["topology"]["matrix"]["labels"][:2] == ["GPU0", "GPU1"]
    assert doc["topology"]["nic_affinity"]["GPU3"][0] == ["mlx5_3", "PIX"]


def test_topo_output_and_dot_files(tmp_path):
    out_file, dot_file = tmp_path / "topo.json", tmp_path / "topo.dot"
    code, out = invoke("--replay", DEGRADED, "--json", "--output", str(out_file), "--dot", str(dot_file))
    assert code == int(ExitCode.OK) and out == ""
    validate(json.loads(out_file.read_text()))
    dot = dot_file.read_text()
    # GPU5's link 7 reaches the second NVSwitch (links 5-8): that edge is drawn red as NV3/4
    assert dot.startswith("graph ccdiag_topology") and 'label="NV3/4", color=red' in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_topo_svg_via_graphviz(tmp_path):
    svg = tmp_path / "t.svg"
    code, _ = invoke("--replay", HEALTHY, "--svg", str(svg))
    assert code == int(ExitCode.OK)
    assert "<svg" in svg.read_text()


def test_topo_svg_without_graphviz_is_a_clear_usage_error(tmp_path, monkeypatch, capsys):
    import ccdiag.commands.topo as topo_cmd

    monkeypatch.setattr(topo_cmd.shutil, "which", lambda name: None)
    code, out, err = main_exit(["topo", "--replay", HEALTHY, "--png", str(tmp_path / "t.png")], capsys)
    assert code == int(ExitCode.USAGE)
    assert "Graphviz" in err and "Traceback" not in err
    assert not (tmp_path / "t.png").exists()


# -- pasted nvidia-smi output ------------------------------------------------------------------------
def test_from_smi_renders_a_pasted_matrix():
    code, out = invoke("--from-smi", str(CORPUS / "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"))
    assert code == int(ExitCode.OK)
    assert "8 GPU(s), 8 NIC(s)" in out and "NIC7=mlx5_7" in out
    assert any(line.startswith("GPU4") and "mlx5_4" in line and "PIX" in line for line in out.splitlines())


def test_from_smi_json(tmp_path):
    code, out = invoke("--from-smi", str(CORPUS / "h100-pcie-x2-nvlink-bridge-nv12-indented.txt"), "--json")
    assert code == int(ExitCode.OK)
    doc = json.loads(out)
    validate(doc)
    assert doc["topology"]["matrix"]["rows"][0] == ["X", "NV12"]


def test_from_smi_refusal_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\tbanana\n")
    code, out, err = main_exit(["topo", "--from-smi", str(bad)], capsys)
    assert code == int(ExitCode.USAGE)
    assert "line 3" in err and "banana" in err and "Traceback" not in err


# -- bad input never gives a traceback --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["missing", "directory", "corrupt", "empty"])
def test_bad_replay_file_is_one_line_and_exit_2(kind, tmp_path, capsys):
    path = {"missing": tmp_path / "nope.snap.tar.gz", "directory": tmp_path}.get(kind, tmp_path / "x.tar.gz")
    if kind == "corrupt":
        path.write_bytes(open(HEALTHY, "rb").read()[:4000])
    elif kind == "empty":
        path.write_bytes(b"")
    code, out, err = main_exit(["topo", "--replay", str(path)], capsys)
    assert code == int(ExitCode.USAGE), err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert str(path) in last and ("directory" in last if kind == "directory" else "snapshot" in last)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_bad_from_smi_file(kind, tmp_path, capsys):
    path = tmp_path / "nope.txt" if kind == "missing" else tmp_path
    code, out, err = main_exit(["topo", "--from-smi", str(path)], capsys)
    assert code == int(ExitCode.USAGE) and "Traceback" not in err


# -- this machine ------------------------------------------------------------------------------------
@pytest.mark.skipif(HAS_NVIDIA_DRIVER, reason="this host has an NVIDIA driver")
def test_live_run_without_driver_exits_3_and_lists_interfaces():
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "topo"], capture_output=True, text=True, timeout=60,
                          cwd=str(REPO))
    assert proc.returncode == int(ExitCode.UNEVALUATED), proc.stderr
    assert "No NVIDIA driver/GPUs found" in proc.stdout
    assert "Network interfaces" in proc.stdout
    for name in psutil.net_if_addrs():
        assert name in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.skipif(HAS_NVIDIA_DRIVER, reason="this host has an NVIDIA driver")
def test_record_then_replay_gives_the_same_report(tmp_path):
    started = time.monotonic()
    rec = RecordingHost("/")
    runs, topo, _, diffs = gather(rec)
    live = topo_report(rec.meta(), runs, topo, diffs, started)
    path = tmp_path / "this-host.snap.tar.gz"
    rec.snapshot().save(str(path))
    replay_host = ReplayHost(str(path))
    runs2, topo2, _, diffs2 = gather(replay_host)
    replayed = topo_report(replay_host.meta(), runs2, topo2, diffs2, started, replay=str(path))
    validate(live)
    validate(replayed)
    assert strip_volatile(replayed) == strip_volatile(live)
