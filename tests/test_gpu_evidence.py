"""The evidence script for a real GPU node (``scripts/gpu-evidence.sh``, ``bench/gpu_evidence.py``),
everything of it that runs without a GPU:

* the readers of ``nvidia-smi -q`` and ``-q -x`` on real outputs (tests/fixtures/corpus/smi-q,
  smi-q-x, each with its source), and the field comparison with the probe's reading on those
  outputs paired with SYNTHESIZED probe readings (made to match the output, then changed one field
  at a time);
* the CUDA driver API measure against a stand-in of ``libcuda`` at the C ABI (tests/fakes/libcuda.py,
  SYNTHESIZED rates);
* the dry run, end to end: the throwaway environment and the offline install from wheels, the
  worker started from the checkout, ccdiag's commands against a recorded snapshot, the engine path
  through the CuPy double, redaction, the returned folder's shape, and its unpacking;
* the checks that wait for real evidence (tests/test_real_*.py), run on the dry run's folder and on
  synthesized documents.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import REPO
from ccdiag.probes.nvml import Gpu, NvmlObservation

sys.path.insert(0, str(REPO / "bench"))

import copy_driver_api  # noqa: E402
import evidence_smi  # noqa: E402
import gpu_evidence  # noqa: E402


def _load_standin():
    """tests/fakes/libcuda.py by its path: tests/fakes must not join sys.path (its ``cupy`` would
    stand in for the real one in every later test of this process)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("libcuda_standin", REPO / "tests" / "fakes" / "libcuda.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LibCuda


LibCuda = _load_standin()

CORPUS = REPO / "tests" / "fixtures" / "corpus"
H800_Q = CORPUS / "smi-q" / "q-i0-full-h800-driver525-throttle-reasons-link-info-device-host-max-fabric.txt"
A100_ECC_Q = CORPUS / "smi-q" / "q-d-ECC-a100-pcie-x2-sram-dram-counters.txt"
RTX4090_Q = CORPUS / "smi-q" / "q-full-rtx4090-x8-driver535-first-gpu-block.txt"
A100_X = CORPUS / "smi-q-x" / "a100-sxm4-40gb-mig-driver510.xml"
RTX4090_X = CORPUS / "smi-q-x" / "rtx4090-x1-driver535.xml"
SAMPLE = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"


# -- nvidia-smi's two forms, read ------------------------------------------------------------------


def test_the_text_reader_takes_every_compared_field_of_a_real_h800():
    got = evidence_smi.read_text(H800_Q.read_text())
    assert (got["driver_version"], got["cuda_version"]) == ("525.105.17", "12.0")
    g = got["gpus"]["0000:18:00.0"]
    assert (g["name"], g["serial"], g["uuid"]) == ("NVIDIA H800", "1651323018291", "GPU-34bf77d1-c686-6821-79a8-32d326c5039c")
    assert (g["memory_total_mib"], g["persistence_mode"], g["mig_mode_current"], g["ecc_mode_current"]) == (81559, True, False, False)
    assert (g["temp_shutdown_c"], g["temp_slowdown_c"], g["temp_gpu_max_c"], g["temp_mem_max_c"]) == (92, 89, 87, 95)
    assert (g["power_w"], g["power_limit_w"], g["clock_sm_max_mhz"], g["clock_sm_app_mhz"]) == (74.71, 700.0, 1980, 1980)
    assert (g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_gen_device_max"], g["pcie_width_max"]) == (5, 5, 5, 16)
    # 'HW Thermal Slowdown' sits under 'HW Slowdown': nested, still read; only Idle is active
    assert g["clock_event_names"] == ("idle",) and g["fabric_state"] == "completed"
    assert (g["remapped_rows_pending"], g["ecc_volatile_corrected"]) == (False, None)  # ECC off: N/A


def test_the_text_reader_sums_the_split_ecc_counters_of_driver_555():
    got = evidence_smi.read_text(A100_ECC_Q.read_text())
    assert sorted(got["gpus"]) == ["0000:12:00.0", "0000:8a:00.0"]
    g = got["gpus"]["0000:8a:00.0"]
    assert (g["ecc_mode_current"], g["ecc_volatile_corrected"], g["ecc_aggregate_uncorrected"]) == (True, 0, 0)


def test_limits_relative_to_t_limit_are_not_taken_for_absolute_ones():
    g = evidence_smi.read_text(RTX4090_Q.read_text())["gpus"]["0000:01:00.0"]
    # "GPU Shutdown T.Limit Temp : -7 C" is a margin, not the 92 C NVML's threshold call answers
    assert g["temp_shutdown_c"] is None and g["temperature_c"] == 30 and g["pcie_gen_current"] == 1


def test_the_xml_reader_takes_both_power_layouts_and_both_reason_names():
    a100 = evidence_smi.read_xml(A100_X.read_text())
    g = a100["gpus"]["0000:00:04.0"]  # driver 510: <power_readings>, <clocks_throttle_reasons>
    assert (g["name"], g["power_w"], g["power_limit_w"], g["clock_sm_app_mhz"]) == ("NVIDIA A100-SXM4-40GB", 66.92, 400.0, 1095)
    assert (g["mig_mode_current"], g["clock_event_names"], g["memory_total_mib"]) == (True, (), 40960)
    assert (g["ecc_volatile_corrected"], g["ecc_aggregate_corrected"]) == (None, 0)  # MIG: volatile N/A
    rtx = evidence_smi.read_xml(RTX4090_X.read_text())["gpus"]["0000:84:00.0"]  # 535: <gpu_power_readings>
    assert (rtx["power_w"], rtx["power_limit_w"], rtx["serial"], rtx["clock_event_names"]) == (26.84, 450.0, None, ("idle",))
    assert (rtx["pcie_gen_max"], rtx["pcie_gen_device_max"]) == (3, 4)  # the host's slot limits the link


@pytest.mark.parametrize("text", ["", "garbage", "<html><body/></html>", "<nvidia_smi_log>"])
def test_the_xml_reader_refuses_what_is_not_nvidia_smi_output(text):
    with pytest.raises(ValueError, match="not an nvidia-smi -q -x document"):
        evidence_smi.read_xml(text)


# -- the probe's reading beside nvidia-smi's ---------------------------------------------------------


def _h800_probe(**changes) -> NvmlObservation:
    """A SYNTHESIZED probe reading made to match the real H800 ``nvidia-smi -q`` above."""
    g = Gpu(index=0, uuid="GPU-34bf77d1-c686-6821-79a8-32d326c5039c", name="NVIDIA H800", serial="1651323018291",
            bus_id="0000:18:00.0", memory_total_bytes=(81559 << 20) + 4096, persistence_mode=True,
            mig_mode_current=False, mig_mode_pending=False, ecc_mode_current=False, ecc_mode_pending=False,
            remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remapped_rows_pending=False,
            remapped_rows_failure=False, clock_event_reasons=1, clock_event_names=("idle",), temperature_c=35.0,
            temp_slowdown_c=89.0, temp_shutdown_c=92.0, temp_gpu_max_c=87.0, temp_mem_max_c=95.0,
            memory_temperature_c=44.0, power_w=74.71, power_limit_w=700.0, clock_sm_max_mhz=1980, clock_sm_app_mhz=1980,
            pcie_gen_current=5, pcie_gen_max=5, pcie_gen_device_max=5, pcie_width_current=16, pcie_width_max=16,
            pcie_replay_counter=0, fabric_state="completed")
    return NvmlObservation(driver_version="525.105.17", cuda_driver_version="12.0", gpus=(dataclasses.replace(g, **changes),))


@pytest.fixture(scope="module")
def h800():
    return evidence_smi.read_text(H800_Q.read_text())


def test_a_matching_reading_agrees_field_by_field(h800):
    got = evidence_smi.compare(_h800_probe(), h800)
    assert got["agree"] and got["counts"]["static_differ"] == got["counts"]["sampled_outside"] == 0
    assert got["counts"]["static_equal"] >= 25 and got["counts"]["sampled_within"] == 6
    util = [r for r in got["rows"] if r["field"] == "utilization_gpu_pct"]
    assert util and util[0]["kind"] == "not read by the probe" and util[0]["agrees"] is None


@pytest.mark.parametrize("field, value", [("serial", "1651323018292"), ("power_limit_w", 650.0), ("clock_sm_max_mhz", 1755),
                                          ("memory_total_bytes", 80 << 30), ("fabric_state", "in_progress")])
def test_a_static_field_that_differs_is_named(h800, field, value):
    got = evidence_smi.compare(_h800_probe(**{field: value}), h800)
    assert not got["agree"] and got["counts"]["static_differ"] == 1
    assert [r["field"] for r in got["rows"] if r["agrees"] is False] == [field]


@pytest.mark.parametrize("field, within, outside", [
    ("temperature_c", 39.0, 41.0), ("memory_temperature_c", 40.0, 50.0), ("power_w", 88.0, 120.0),
    ("clock_event_names", (), ("sw_power_cap",))])
def test_sampled_fields_are_held_to_their_tolerance(h800, field, within, outside):
    assert evidence_smi.compare(_h800_probe(**{field: within}), h800)["agree"]
    got = evidence_smi.compare(_h800_probe(**{field: outside}), h800)
    assert not got["agree"] and got["counts"]["sampled_outside"] == 1


def test_a_gpu_in_one_reading_only_is_not_agreement(h800):
    got = evidence_smi.compare(_h800_probe(bus_id="0000:19:00.0"), h800)
    assert got["gpus_in_one_reading_only"] == ["0000:18:00.0", "0000:19:00.0"] and not got["agree"]


# -- the CUDA driver API measure, against the ABI stand-in ----------------------------------------------


def _lib(**kw) -> LibCuda:
    kw.setdefault("rates", {"h2d": 55.0, "d2h": 53.0, "d2d": 1400.0})
    return LibCuda(copy_driver_api.PROTOTYPES, [("0000:18:00.0", "NVIDIA H100 80GB HBM3")],
                   older_symbols=copy_driver_api.OLDER_SYMBOL, **kw)


def test_the_driver_api_times_each_copy_behind_its_gate():
    lib = _lib()
    got = copy_driver_api.measure_gpu(copy_driver_api.Driver(lib), "GPU0", "0000:18:00.0", [1 << 20, 64 << 20],
                                      ["h2d", "d2h", "d2d", "hbm"], 4, 2, 5, lambda _m: None)
    assert got["name"] == "NVIDIA H100 80GB HBM3" and got["gate"].startswith("cuStreamWaitValue32")
    assert got["figures"] == {f"{k}:GPU0:{s}": v for s in (1 << 20, 64 << 20)
                              for k, v in (("h2d", 55.0), ("d2h", 53.0), ("d2d", 1400.0), ("hbm", 2800.0))}
    assert all(len(v) == 5 for v in got["samples"].values())  # the warm-up rounds are not kept
    assert lib.holds == 2 * 4 * 7 and lib.holds_with_flag_open == 0


def test_an_older_driver_gets_the_older_symbols_and_rounds_without_a_gate():
    lib = _lib(missing=("cuEventElapsedTime_v2", "cuStreamWaitValue32_v2", "cuStreamWaitValue32"))
    drv = copy_driver_api.Driver(lib)
    got = copy_driver_api.measure_gpu(drv, "GPU0", "0000:18:00.0", [1 << 20], ["h2d"], 4, 1, 3, lambda _m: None)
    assert "cuEventElapsedTime" in lib.calls and "cuEventElapsedTime_v2" not in lib.calls
    assert got["gate"] == "cuStreamWaitValue32_v2 not in this driver" and got["figures"]["h2d:GPU0:1048576"] == 55.0


def test_a_size_the_gpu_cannot_hold_is_that_size_s_error():
    lib = _lib(max_alloc_bytes=16 << 20)
    got = copy_driver_api.measure_gpu(copy_driver_api.Driver(lib), "GPU0", "0000:18:00.0", [1 << 20, 64 << 20],
                                      ["d2d"], 4, 1, 3, lambda _m: None)
    assert list(got["figures"]) == ["d2d:GPU0:1048576"]
    assert got["errors"] == {"*:GPU0:67108864": "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"}


def test_a_missing_required_symbol_is_said_by_name():
    with pytest.raises(copy_driver_api.DriverError, match="has no cuMemcpyDtoDAsync_v2"):
        copy_driver_api.Driver(_lib(missing=("cuMemcpyDtoDAsync_v2",)))


# -- figures, agreement, the wheel ---------------------------------------------------------------------


def test_agreement_is_within_five_percent_of_each_independent_figure():
    rows = gpu_evidence.agreement({"h2d:GPU0:1048576": 50.0, "d2d:GPU0:1048576": 1300.0},
                                  {"driver_api": {"h2d:GPU0:1048576": 52.0, "d2d:GPU0:1048576": 1400.0}, "torch": {}})
    assert [(r["key"], r["agrees_driver_api"]) for r in rows] == [("d2d:GPU0:1048576", False), ("h2d:GPU0:1048576", True)]
    assert "ratio_torch" not in rows[0]


def test_ccdiag_figures_are_keyed_like_the_independent_ones():
    doc = {"bench": [{"measurements": [
        {"bench": "h2d", "src": "host:numa0", "dst": "GPU0", "direction": "uni", "gbyte_s": 54.0, "size_bytes": 1048576, "extra": {}},
        {"bench": "h2d", "src": "host:numa1", "dst": "GPU0", "direction": "uni", "gbyte_s": 40.0, "size_bytes": 1048576,
         "extra": {"remote_numa": True}},
        {"bench": "d2h", "src": "GPU0", "dst": "host:numa0", "direction": "bidir", "gbyte_s": 30.0, "size_bytes": 1048576},
        {"bench": "gemm", "src": "GPU0", "dst": "GPU0", "direction": "uni", "gbyte_s": None, "tflops": 700.0}]}]}
    assert gpu_evidence.ccdiag_figures(doc) == {"h2d:GPU0:1048576": 54.0, "gemm:GPU0:fp16": 700.0}


def test_a_carried_wheel_that_is_not_this_tree_is_named(tmp_path, capsys):
    def record(path: str, data: bytes) -> str:
        return f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"

    init = (REPO / "ccdiag" / "__init__.py").read_bytes()
    with zipfile.ZipFile(tmp_path / "ccdiag-0.1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("ccdiag-0.1.0.dist-info/RECORD", "\n".join([
            record("ccdiag/__init__.py", init), record("ccdiag/probes/nvml.py", b"# another version\n")]))
    assert gpu_evidence.main(["check-wheel", str(tmp_path), "--repo", str(REPO)]) == 1
    out = capsys.readouterr().out
    assert "2 files checked" in out and "differs: ccdiag/probes/nvml.py" in out and "__init__" not in out.split("\n", 1)[1]


def test_unpack_refuses_a_dry_run_and_what_the_script_did_not_write(tmp_path, capsys):
    assert gpu_evidence.main(["unpack", str(tmp_path), "--repo", str(tmp_path)]) == 2
    (tmp_path / "summary.json").write_text(json.dumps({"dry_run": True}))
    assert gpu_evidence.main(["unpack", str(tmp_path), "--repo", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a folder the evidence script wrote" in err and "a dry run" in err


def test_the_checks_that_wait_for_engine_evidence_name_what_is_off():
    from test_real_engines import evidence_problems

    rows = [{"key": f"h2d:GPU0:{m << 20}", "ccdiag": 54.0, "driver_api": 55.0, "ratio_driver_api": 54 / 55}
            for m in (1, 4, 16, 64, 256, 1024)]
    doc = {"node": {"name": "n", "driver_version": "580.95.05", "date": "d", "commit": {"commit": "c"}}, "copies": rows,
           "gpu_self": [{"key": "hbm:GPU0:1073741824", "ccdiag": 2700.0, "driver_api": 2800.0, "ratio_driver_api": 2700 / 2800}],
           "gpu_self_judged": [{"key": "hbm:GPU0", "status": "pass"}, {"key": "gemm:GPU0", "status": "pass"}]}
    assert evidence_problems(doc) == []
    rows[2] = {**rows[2], "ccdiag": 40.0, "ratio_driver_api": 40 / 55}
    doc["gpu_self_judged"][1]["status"] = "unknown"
    got = evidence_problems(doc)
    assert got == ["h2d:GPU0:16777216: ccdiag 40.0 is 72.7% of driver_api's 55.0",
                   "gemm not judged against the catalogue (unknown)"]


# -- the dry run, end to end ------------------------------------------------------------------------


def _build_wheel(dest: pathlib.Path) -> None:
    # without build isolation only where this Python can build a wheel itself: setuptools 70.1+ has
    # bdist_wheel; older setuptools needs a wheel package that still carries it (wheel 0.46+ does
    # not, and a venv's setuptools 65 beside it fails "invalid command 'bdist_wheel'")
    probe = ("import setuptools\ntry:\n    from setuptools.command.bdist_wheel import bdist_wheel\n"
             "except ImportError:\n    from wheel.bdist_wheel import bdist_wheel\n")
    here = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60).returncode == 0
    tree = dest.parent / "src"
    top = {".git", ".venv", "build", "gpu-node", "tests", "bench", "docs"}
    shutil.copytree(REPO, tree, ignore=lambda d, names: [n for n in names if n == "__pycache__" or n.endswith(".egg-info")
                                                         or (d == str(REPO) and n in top)])
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *(["--no-build-isolation"] if here else []),
                           "-w", str(dest), str(tree)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_the_dry_run_does_every_step_up_to_the_first_gpu_call(tmp_path):
    """The script as the node runs it, with the machine's base Python standing for the node's (this
    environment's site directory on PYTHONPATH standing for the node's preinstalled packages), a
    recorded snapshot for the node and a SYNTHESIZED nvidia-smi -q -x of the same GPUs."""
    import sysconfig

    sys.path.insert(0, str(REPO / "tests"))
    from synth.smi_xml import smi_xml

    wheels = tmp_path / "wheels"
    _build_wheel(wheels)
    (tmp_path / "smi.xml").write_text(smi_xml(gpu_evidence.probe_nvml(str(SAMPLE))))
    out = tmp_path / "out"
    # the node's preinstalled packages: this environment's, less ccdiag itself (the node has none;
    # a regular install of it on PYTHONPATH would shadow the carried wheel)
    site = tmp_path / "node-site"
    site.mkdir()
    for entry in pathlib.Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("ccdiag", "__editable__")):
            (site / entry.name).symlink_to(entry)
    env = dict(os.environ, PYTHONPATH=str(site))
    base = getattr(sys, "_base_executable", None) or sys.executable
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu-evidence.sh"), "--dry-run", "--out", str(out), "--replay",
                           str(SAMPLE), "--python", base, "--wheels", str(wheels), "--smi-xml", str(tmp_path / "smi.xml"),
                           "--budget-s", "240"], capture_output=True, text=True, timeout=400, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # what comes back from the node: at most 8 files, no folder, none over 16 MiB
    files = sorted(p.name for p in out.iterdir())
    assert files == ["progress.log", "s1-install.tar.gz", "s2-node.tar.gz", "s3-copies.tar.gz", "s4-gpu-self.tar.gz",
                     "summary.json", "summary.txt"]
    assert all(p.is_file() and p.stat().st_size < 16 << 20 for p in out.iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] and "DRY RUN" in (out / "summary.txt").read_text()
    assert {n: s["status"] for n, s in summary["stages"].items()} == {"node": "ran", "copies": "ran", "gpu_self": "ran"}

    def members(name):
        with tarfile.open(out / name) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}

    s1 = members("s1-install.tar.gz")
    assert s1["./pip-install.log.rc"].strip() == b"0" and s1["./ccdiag-version.log.rc"].strip() == b"0"
    worker = json.loads(s1["./worker-from-checkout.log"])
    # the worker imported the installed ccdiag (CuPy itself may be absent where the suite runs)
    assert worker["cwd"] == str(REPO) and "/venv/" in worker["parent_package"]
    assert "No module named 'ccdiag" not in json.dumps(worker)
    s2 = members("s2-node.tar.gz")
    fields = json.loads(s2["field-comparison.json"])
    assert fields["agree"] and fields["counts"]["static_equal"] > 200  # 8 GPUs x the static fields
    assert json.loads(s2["replay-verdict.json"])["same"]
    raw = gpu_evidence.probe_nvml(str(SAMPLE))
    for g in raw.gpus:  # redacted: no serial or UUID of the recorded node in any file that comes back
        assert not [n for n, data in s2.items() if g.serial.encode() in data or g.uuid.encode() in data]
    s3, s4 = members("s3-copies.tar.gz"), members("s4-gpu-self.tar.gz")
    engine = json.loads(s3["dry-run-engine-1024MiB.json"])
    assert {b["name"]: b["outcome"] for b in engine["bench"]} == {"h2d": "ran", "d2h": "ran", "d2d": "ran"}
    assert json.loads(s3["ccdiag-1MiB.json"])["bench"][0]["outcome"] == "skip"  # the real command line, on a replay
    assert {b["name"] for b in json.loads(s4["dry-run-engine-self.json"])["bench"]} == {"hbm", "gemm"}
    assert "libcuda.so.1" in json.loads(s3["driver-api.json"])["error"]

    # back at the checkout: unpacked where the tests wait for evidence, and those checks run on it
    repo = tmp_path / "repo"
    assert gpu_evidence.main(["unpack", str(out), "--repo", str(repo), "--allow-dry-run"]) == 0
    folder = repo / "tests" / "fixtures" / "real" / summary["node"]["name"]
    assert (folder / "snapshot.snap.tar.gz").exists() and (folder / "copies" / "driver-api.json").exists()
    assert json.loads((repo / "bench" / "results" / "engines_real.json").read_text())["dry_run"] is True
    from test_real_snapshots import check_fields, check_replay

    assert check_fields(folder) == [] and check_replay(folder) == []
