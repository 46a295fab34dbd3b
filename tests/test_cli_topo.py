"""``ccdiag topo``: rendering, JSON report, graph output, pasted matrices, bad input, and a live run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REPO

from ccdiag.commands.cli import cli, main
from ccdiag.commands.topo import gather, topo_report
from ccdiag.core.exitcodes import ExitCode
from ccdiag.host.door import RecordingHost, ReplayHost
from ccdiag.report.document import strip_volatile, validate

HEALTHY = str(REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz")
DEGRADED = str(REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz")
CORPUS = FIXTURES / "corpus" / "topo-m"


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


@pytest.mark.parametrize("sample", [HEALTHY, DEGRADED], ids=["healthy", "degraded"])
def test_topo_and_check_reports_carry_one_topology_shape(sample):
    """``topo --json`` and ``check --json`` give the same ``topology`` (its usable-now fields are
    computed in the topology room, not by a command), and the schema documents every key of it
    (``additionalProperties`` is false there, so an undocumented field fails validation)."""
    _, topo_out = invoke("--replay", sample, "--json")
    check = CliRunner().invoke(cli, ["check", "--replay", sample, "--json"], standalone_mode=False)
    topo_doc, check_doc = json.loads(topo_out), json.loads(check.output)
    validate(topo_doc)
    validate(check_doc)
    assert topo_doc["topology"] == check_doc["topology"]
    assert {"affinity", "expected"} <= set(check_doc["topology"])
    gpu_nic = [e for e in check_doc["topology"]["expected"] if e["kind"] == "gpu_nic"]
    assert gpu_nic and all("usable" in e and "blocked_by" in e for e in gpu_nic)
    if sample == DEGRADED:  # GPU6 is lost: every path to it is blocked by it, at 0 GB/s now
        lost = [e for e in check_doc["topology"]["expected"] if "GPU6" in (e["a"], e["b"])]
        assert lost and all(e["blocked_by"] == "GPU6 lost" and e["current_gbyte_s"] == 0.0 for e in lost)


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
    assert doc["pasted"]["matrix"]["rows"][0] == ["X", "NV12"]


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
@pytest.mark.gpu(False)
def test_live_run_without_driver_exits_3_and_lists_interfaces(tmp_path):
    before = set(psutil.net_if_addrs())
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "topo"], capture_output=True, text=True, timeout=60,
                          cwd=str(tmp_path))
    assert proc.returncode == int(ExitCode.UNEVALUATED), proc.stderr
    assert "No NVIDIA driver/GPUs found" in proc.stdout
    assert "Network interfaces" in proc.stdout
    # interfaces that other tests' namespaces add or remove meanwhile are not this test's to judge:
    # every one present both before and after the run must be listed
    for name in sorted(before & set(psutil.net_if_addrs())):
        assert name in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.gpu(False)
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


# -- what is usable: a NIC that is down, a GPU that is lost -------------------------------------------
def _table(out: str, title: str) -> list[str]:
    """The rows of one plain-text table (between its title line and the next table's title)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip() or not line.startswith(" ") and line.split()[0] in (
                "RDMA", "Links", "Expected", "Network", "note:", "probe"):
            break
        rows.append(line)
    return rows


def _row(rows: list[str], first: str) -> list[str]:
    """The cells of the row starting with ``first`` (cells are separated by two or more spaces)."""
    import re

    line = next(r for r in rows if r.startswith(first + " "))
    return re.split(r"\s{2,}", line.strip())


def test_degraded_affinity_routes_around_the_down_nic_and_shows_the_lost_gpu():
    code, out = invoke("--replay", DEGRADED)
    assert code == int(ExitCode.OK)
    rows = _table(out, "NIC affinity")
    # mlx5_4 port 1 is DOWN: GPU4's traffic goes to the nearest NIC with an active port, at NODE
    # (the same NIC the ib.gpudirect check names), and the numbers are those of that NIC
    assert _row(rows, "GPU4") == ["GPU4", "ok", "mlx5_4 PIX (down) -> mlx5_5, mlx5_6, mlx5_7 NODE", "50.0", "50.0"]
    # GPU6 is lost in NVML: no healthy number for it
    assert _row(rows, "GPU6") == ["GPU6", "lost", "mlx5_6 PIX", "-", "0.0"]
    # the trained-down GPU3 keeps its capability and shows what it trained at
    assert _row(rows, "GPU3") == ["GPU3", "ok", "mlx5_3 PIX", "50.0", "31.5"]
    assert _row(rows, "GPU0") == ["GPU0", "ok", "mlx5_0 PIX", "50.0", "50.0"]
    nics = _table(out, "RDMA NICs")
    assert _row(nics, "mlx5_4")[1] == "DOWN" and _row(nics, "mlx5_5")[1] == "active"


def test_degraded_expected_bandwidth_rows_are_honest_about_capability_and_trained():
    _, out = invoke("--replay", DEGRADED)
    rows = _table(out, "Expected bandwidth")
    assert _row(rows, "GPU4 -> mlx5_4 (DOWN)") == ["GPU4 -> mlx5_4 (DOWN)", "GPU->NIC", "PIX", "50.0", "0.0",
                                                   "mlx5_4 port 1"]
    assert _row(rows, "GPU4 -> mlx5_5") == ["GPU4 -> mlx5_5", "GPU->NIC", "NODE", "50.0", "50.0", "mlx5_5 port 1"]
    assert _row(rows, "GPU6 -> mlx5_6") == ["GPU6 -> mlx5_6", "GPU->NIC", "PIX", "-", "0.0", "GPU6 lost"]
    assert _row(rows, "host -> GPU6") == ["host -> GPU6", "H2D", "-", "0.0", "GPU6 lost"]
    for other in ("GPU0", "GPU4", "GPU7"):
        pair = f"{other} <-> GPU6" if other < "GPU6" else f"GPU6 <-> {other}"
        cells = _row(rows, pair)
        assert cells[3:] == ["-", "0.0", "GPU6 lost"], cells
    # a healthy GPU's rows are untouched
    assert _row(rows, "host -> GPU0") == ["host -> GPU0", "H2D", "63.0", "63.0", "GPU0 <- 0000:17:00.0"]


def test_healthy_sample_has_no_down_nic_or_failed_gpu():
    _, out = invoke("--replay", HEALTHY)
    rows = _table(out, "NIC affinity")
    assert len(rows) == 8
    for i, row in enumerate(rows):
        assert _row(rows, f"GPU{i}") == [f"GPU{i}", "ok", f"mlx5_{i} PIX", "50.0", "50.0"]
    assert "(down)" not in out and "(DOWN)" not in out and " lost" not in out


def test_degraded_json_carries_nic_and_gpu_states():
    code, out = invoke("--replay", DEGRADED, "--json")
    assert code == int(ExitCode.OK)
    doc = json.loads(out)
    validate(doc)
    topo = doc["topology"]
    nics = {n["label"]: n for n in topo["nics"]}
    assert (nics["mlx5_4"]["state"], nics["mlx5_4"]["usable"], nics["mlx5_4"]["port_states"]) == \
        ("down", False, {"1": "DOWN"})
    assert all(nics[f"mlx5_{i}"]["usable"] is True for i in (0, 1, 2, 3, 5, 6, 7))
    gpus = {g["label"]: g for g in topo["gpus"]}
    assert (gpus["GPU6"]["state"], gpus["GPU6"]["usable"]) == ("lost", False)
    assert all(gpus[f"GPU{i}"]["state"] == "ok" for i in (0, 1, 2, 3, 4, 5, 7))
    aff = topo["affinity"]
    assert aff["GPU4"]["nearest"] == ["mlx5_4"] and aff["GPU4"]["nearest_down"] is True
    assert (aff["GPU4"]["via"], aff["GPU4"]["usable_level"], aff["GPU4"]["current_gbyte_s"]) == ("mlx5_5", "NODE", 50.0)
    assert (aff["GPU6"]["state"], aff["GPU6"]["current_gbyte_s"]) == ("lost", 0.0)
    # the NCCL-style list stays as it was: every NIC with its level, nearest first
    assert topo["nic_affinity"]["GPU4"][0] == ["mlx5_4", "PIX"]
    gpu_nic = {(e["a"], e["b"]): e for e in topo["expected"] if e["kind"] == "gpu_nic"}
    down = gpu_nic[("GPU4", "mlx5_4")]
    assert (down["role"], down["nic_state"], down["usable"], down["gbyte_s"], down["current_gbyte_s"]) == \
        ("nearest", "down", False, 50.0, 0.0)
    alt = gpu_nic[("GPU4", "mlx5_5")]
    assert (alt["role"], alt["usable"], alt["level"], alt["current_gbyte_s"]) == ("nearest_usable", True, "NODE", 50.0)
    lost = [e for e in topo["expected"] if "GPU6" in (e["a"], e["b"])]
    assert len(lost) == 7 + 1 + 1  # 7 pairs, H2D, GPU->NIC
    assert all(e["current_gbyte_s"] == 0.0 and e["usable"] is False and e["blocked_by"] == "GPU6 lost" for e in lost)
    assert gpu_nic[("GPU0", "mlx5_0")]["usable"] is True and gpu_nic[("GPU0", "mlx5_0")]["current_gbyte_s"] == 50.0


def test_usable_nic_agrees_with_the_gpudirect_check():
    from ccdiag.run.checkrun import evaluate

    _, out = invoke("--replay", DEGRADED, "--json")
    aff = json.loads(out)["topology"]["affinity"]
    findings = evaluate(ReplayHost(DEGRADED), only=("ib.",), deadline_s=120).findings
    named = {f.component.name: f.component.peer for f in findings
             if f.check == "ib.gpudirect" and f.component.kind == "gpu"}
    assert named and named == {g: a["via"] for g, a in aff.items()}


# -- --from-smi reads a pasted matrix, not a host -------------------------------------------------
SMI_FILE = str(CORPUS / "h100-pcie-x2-nvlink-bridge-nv12-indented.txt")


@pytest.mark.parametrize("extra, named", [
    (["--replay", HEALTHY], "--replay"),
    (["--root", "/"], "--root"),
    (["--timeout", "20"], "--timeout"),
    (["--dot", "{tmp}/t.dot"], "--dot"),
    (["--svg", "{tmp}/t.svg"], "--svg"),
    (["--png", "{tmp}/t.png"], "--png"),
])
def test_from_smi_with_a_host_option_is_a_one_line_usage_error(extra, named, tmp_path, capsys):
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    code, out, err = main_exit(["topo", "--from-smi", SMI_FILE, *extra], capsys)
    assert code == int(ExitCode.USAGE)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "--from-smi" in lines[0], err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_from_smi_names_every_conflicting_option(tmp_path, capsys):
    code, _, err = main_exit(["topo", "--from-smi", SMI_FILE, "--replay", HEALTHY, "--dot",
                              str(tmp_path / "t.dot")], capsys)
    assert code == int(ExitCode.USAGE) and "--replay, --dot" in err


def test_from_smi_still_takes_json_and_output(tmp_path, capsys):
    dest = tmp_path / "m.json"
    code, out, err = main_exit(["topo", "--from-smi", SMI_FILE, "--json", "-o", str(dest)], capsys)
    assert code == int(ExitCode.OK) and out == "" and err == ""
    validate(json.loads(dest.read_text()))


def test_from_smi_huge_one_token_file_gives_a_short_refusal(tmp_path, capsys):
    bad = tmp_path / "big.txt"
    bad.write_text("x" * 10_000_000)
    code, out, err = main_exit(["topo", "--from-smi", str(bad)], capsys)
    assert code == int(ExitCode.USAGE)
    assert len(err.strip().splitlines()) == 1 and len(err) < 400 and "..." in err


# -- an unwritable -o ------------------------------------------------------------------------------
@pytest.mark.parametrize("as_json", [True, False])
def test_unwritable_output_is_one_line_and_exit_2(as_json, capsys):
    argv = ["topo", "--replay", HEALTHY, *(["--json"] if as_json else []), "-o", "/nonexistent/x"]
    code, out, err = main_exit(argv, capsys)
    assert code == int(ExitCode.USAGE)
    lines = err.strip().splitlines()
    assert lines == ["ccdiag: cannot write /nonexistent/x: No such file or directory"]
    assert out == ""


# -- the same rules on SYNTHESIZED trees (tests/topo_trees.py), for the cases the samples lack ----------
def _synth_topo(runs):
    from ccdiag.topology import build_topology

    return build_topology(runs)


def test_whole_socket_of_nics_down_sends_gpu4_across_sockets():
    from ccdiag.commands.topo import _affinity_rows
    from topo_trees import hgx

    topo = _synth_topo(hgx(nic_down=("mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")))
    a = topo.gpudirect_nics("GPU4")
    assert (a["nearest"], a["nearest_down"], a["usable"], a["usable_level"], a["via"]) == \
        (["mlx5_4"], True, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], "SYS", "mlx5_0")
    row = next(r for r in _affinity_rows(topo) if r[0] == "GPU4")
    assert row[2] == "mlx5_4 PIX (down) -> mlx5_0, mlx5_1, mlx5_2, mlx5_3 SYS"
    assert row[4] == "50.0"  # the SMP link's rate is not known: the wire is the known bottleneck


def test_no_active_nic_anywhere_says_so_and_trains_at_zero():
    from ccdiag.commands.topo import _affinity_rows, _expected_rows
    from topo_trees import hgx

    topo = _synth_topo(hgx(nic_down=tuple(f"mlx5_{i}" for i in range(8))))
    rows = {r[0]: r for r in _affinity_rows(topo)}
    assert rows["GPU2"][2] == "mlx5_2 PIX (down) -> no NIC with an active port"
    assert rows["GPU2"][4] == "0.0"
    exp = {r[0]: r for r in _expected_rows(topo)}
    assert exp["GPU2 -> mlx5_2 (DOWN)"][4] == "0.0" and not any(k.startswith("GPU2 -> mlx5_3") for k in exp)


def test_nic_without_port_data_is_not_called_down():
    from ccdiag.commands.topo import _affinity_rows
    from ccdiag.probes.infiniband import IbObservation
    from topo_trees import hgx

    runs = hgx()
    runs["infiniband"] = IbObservation(devices=tuple(d if d.name != "mlx5_1" else
                                                     type(d)(name=d.name, pci_bdf=d.pci_bdf, ports=())
                                                     for d in runs["infiniband"].devices))
    topo = _synth_topo(runs)
    assert topo.nic_states()["mlx5_1"] == {"state": "unknown", "usable": None, "ports": {}}
    row = next(r for r in _affinity_rows(topo) if r[0] == "GPU1")
    assert row[2] == "mlx5_1 PIX" and "(down)" not in row[2]


def test_two_nics_at_the_same_level_one_down_marks_only_that_one():
    from ccdiag.commands.topo import _affinity_rows
    from ccdiag.probes.nvml import Gpu, NvmlObservation
    from topo_trees import Tree, ib_devices, system

    t = Tree()
    rp = t.rp("0000:10:01.0", "pci0000:10", 0)
    ports = t.switch(rp, "0000:11:00.0", ["0000:12:00.0", "0000:12:01.0", "0000:12:02.0"], "pci0000:10", 0)
    t.end(ports["0000:12:00.0"], "0000:13:00.0", "gpu", "pci0000:10", 0)
    t.end(ports["0000:12:01.0"], "0000:14:00.0", "nic", "pci0000:10", 0)
    t.end(ports["0000:12:02.0"], "0000:15:00.0", "nic", "pci0000:10", 0)
    runs = {"system": system({0: "0-15"}), "pcie": t.obs(),
            "nvml": NvmlObservation(driver_version="570.133.20",
                                    gpus=(Gpu(index=0, uuid="GPU-0", bus_id="0000:13:00.0", numa_node=0),)),
            "infiniband": ib_devices([("mlx5_0", "0000:14:00.0"), ("mlx5_1", "0000:15:00.0")], down=("mlx5_0",))}
    topo = _synth_topo(runs)
    a = topo.gpudirect_nics(topo.gpu("GPU0"))
    assert (a["nearest"], a["nearest_down"], a["via"]) == (["mlx5_0", "mlx5_1"], False, "mlx5_1")
    row = _affinity_rows(topo)[0]
    assert row[2] == "mlx5_0 (down), mlx5_1 PIX" and row[3:] == ["50.0", "50.0"]


# -- --from-smi reads -p2p outputs and shows repairs ------------------------------------------------------
def test_from_smi_reads_a_p2p_matrix_and_names_the_pairs_without_p2p(capsys):
    path = REPO / "tests" / "fixtures" / "corpus" / "topo-p2p" / "p2p-p-rtx2080ti-x2-ns-not-supported.txt"
    code, out, err = main_exit(["topo", "--from-smi", str(path)], capsys)
    assert code == 0 and "nvidia-smi topo -p2p" in out
    assert "no peer-to-peer: GPU0->GPU1 NS, GPU1->GPU0 NS" in out


def test_from_smi_lists_every_repaired_cell_in_text_and_json(tmp_path, capsys):
    src = (REPO / "tests" / "fixtures" / "corpus" / "topo-m" / "a100-sxm4-40g-x8-epyc7742-10nic-tabs.txt").read_text()
    lines = src.split("\n")
    lines[7] = lines[7].replace("SYS\tPXB", "SYSPXB", 1)  # SYNTHESIZED damage: a tab lost in GPU3's row
    bad = tmp_path / "pasted.txt"
    bad.write_text("\n".join(lines))
    code, out, err = main_exit(["topo", "--from-smi", str(bad)], capsys)
    assert code == 0 and "REPAIRED: 1 cell(s)" in out and "'SYSPXB' read as SYS, PXB" in out
    code, out, err = main_exit(["topo", "--from-smi", str(bad), "--json"], capsys)
    doc = json.loads(out)
    assert doc["pasted"]["repaired"] is True and len(doc["pasted"]["repairs"]) == 1


def _paste(n_gpus: int, n_nics: int, label_suffix: str = "") -> str:
    """A SYNTHESIZED ``topo -m`` paste of n_gpus + n_nics devices, tab separated, with a NIC legend."""
    labels = [f"GPU{i}" for i in range(n_gpus)] + [f"NIC{i}" for i in range(n_nics)]
    n = len(labels)

    def lvl(a, b):
        if a == b:
            return "X"
        if a < n_gpus and b < n_gpus:
            return "NV18"
        return "PIX" if a % 8 == b % 8 else ("NODE" if a % 8 // 4 == b % 8 // 4 else "SYS")

    lines = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, la in enumerate(labels):
        tail = ["0-47" if i % 8 < 4 else "48-95", str(i % 8 // 4), "N/A"] if i < n_gpus else []
        lines.append("\t".join([la, *(lvl(i, j) for j in range(n)), *tail]))
    lines += ["", "Legend:", "", "  X    = Self", "  PIX  = Connection traversing at most a single PCIe bridge",
              "", "NIC Legend:", ""] + [f"  NIC{i}: mlx5_{i}{label_suffix}" for i in range(n_nics)]
    return "\n".join(lines) + "\n"


def test_a_pasted_matrix_of_512_devices_is_shown_as_plain_text(tmp_path):
    from cli_runner import run
    """262,000 cells: printed as aligned text in one pass (a rich table of this size took 8 s)."""
    path = tmp_path / "m512.txt"
    path.write_text(_paste(8, 504, "\x1b[2J"))
    code, out, err = run("topo", "--from-smi", str(path))
    assert code == 0, err
    assert "NIC503" in out and "\x1b" not in out and "\\x1b[2J" in out
    code, out, err = run("nccl", "--from-smi", str(path))
    assert code == 0 and "\x1b" not in out, err
