"""``bench hbm`` and ``bench gemm``: one GPU's memory and tensor cores against the vendor's published
figures in the hardware catalogue, measured by the CuPy engine against its test double (SYNTHESIZED,
see tests/fakes/README.md: the rates are set by each test, nothing here ran on a GPU); and which
CuPy the engine found (``cupy-cuda12x``/``cupy-cuda13x``, one at a time, fit for the driver)."""

from __future__ import annotations

import json
import os

import pytest

from bench_support import FAKES, context, fake_env, observed
from ccdiag.bench import cupy_dist, gpu_self
from ccdiag.bench.gpu_copy import D2D, run_group, worker_request
from ccdiag.bench.registry import BenchContext
from ccdiag.bench.runner import exit_code, resolve
from ccdiag.core.exitcodes import ExitCode
from ccdiag.topology.catalogue import catalogue, gpu_by_name
from ccdiag.topology.model import GpuNode

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def healthy():
    return observed("hgx-h100-8gpu-healthy")


def _dist(root, name: str, version: str) -> None:
    d = root / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


# -- the catalogue's figures -----------------------------------------------------------------------


def test_every_published_figure_names_its_vendor_source():
    with_figures = [g for g in catalogue().gpus if g.hbm_gbyte_s or g.dense_tflops]
    assert {g.key for g in with_figures} >= {"H100-SXM5", "H100-PCIE", "H100-NVL", "H200-SXM", "H200-NVL"}
    for g in with_figures:
        assert g.hbm_source and "nvidia" in g.hbm_source.lower(), g.key
        assert g.dense_tflops_source and "nvidia" in g.dense_tflops_source.lower(), g.key


@pytest.mark.parametrize("name, hbm, peak", [
    ("NVIDIA H100 80GB HBM3", 3350.0, 989.5), ("NVIDIA H100 PCIe", 2000.0, 756.5), ("NVIDIA H100 NVL", 3900.0, 835.5),
    ("NVIDIA H200", 4800.0, 989.5), ("NVIDIA H200 NVL", 4800.0, 835.5),
    ("NVIDIA A100-SXM4-80GB", 2039.0, 312.0), ("NVIDIA A100-SXM4-40GB", 1555.0, 312.0),
    ("NVIDIA A100 80GB PCIe", 1935.0, 312.0)])
def test_the_board_named_by_nvml_gets_its_own_figures(name, hbm, peak):
    model = gpu_by_name(name)
    assert model.hbm_for(name) == hbm and model.dense_peak_tflops("fp16") == peak


# -- judged against the catalogue ---------------------------------------------------------------


def test_healthy_memory_and_tensor_cores_pass_and_say_which_cupy_ran(healthy, tmp_path):
    runs, topo = healthy
    _dist(tmp_path, "cupy-cuda13x", "13.6.0")
    env = fake_env(d2d={"default": 1400.0}, gemm_tflops={"default": 780.0})
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    out = run_group(["hbm", "gemm"], context(runs, topo, env, iters=2), 60)
    hbm, gemm = out["hbm"], out["gemm"]
    assert hbm.outcome == gemm.outcome == "ran", (hbm.reason, gemm.reason)
    assert len(hbm.measurements) == len(gemm.measurements) == 8
    for m in hbm.measurements:  # a copy moves every byte twice: read and written
        assert m.gbyte_s == pytest.approx(2800.0) and m.expected.gbyte_s == 3350.0
        assert m.status == "pass" and m.ratio == pytest.approx(2800 / 3350)
    for m in gemm.measurements:
        assert m.tflops == pytest.approx(780.0) and m.expected.tflops == 989.5 and m.gbyte_s is None
        assert m.status == "pass" and m.extra["gemm_n"] == 8192
        assert "nvidia.com" in m.expected.source
    assert [f.check for f in hbm.findings + gemm.findings] == ["bench.hbm", "bench.gemm"]
    # what the child sees on its path: the wheel put there, and any CuPy this environment has itself
    assert "cupy-cuda13x 13.6.0 (CUDA 13)" in gemm.engine["cupy_distribution"]
    assert exit_code([hbm, gemm]) == ExitCode.OK


@pytest.mark.slow
def test_a_gpu_held_below_its_published_figures_is_named(healthy):
    runs, topo = healthy
    env = fake_env(d2d={"default": 1400.0, "5": 1100.0}, gemm_tflops={"default": 780.0, "3": 300.0})
    out = run_group(["hbm", "gemm"], context(runs, topo, env, iters=2), 60)
    bad = {(f.check, f.component.kind, f.component.name, f.status) for r in out.values() for f in r.findings
           if f.status != "pass"}
    # GPU5: 2200 of 3350 GB/s = 66 % (warn below 70 %); GPU3: 300 of 989.5 TFLOPS = 30 % (fail below 35 %)
    assert bad == {("bench.hbm.slow_gpu", "gpu", "GPU5", "warn"), ("bench.gemm.slow_gpu", "gpu", "GPU3", "fail")}
    gemm = next(f for f in out["gemm"].findings if f.status == "fail")
    assert "30% of 989.5" in gemm.summary and "power" in gemm.remedy and "78%-87%" in gemm.summary
    assert exit_code(list(out.values())) == ExitCode.FAIL


class _Topo:
    """A topology of one GPU of a model the catalogue has no performance figures for (an L4)."""

    def __init__(self, name: str):
        self.node = GpuNode("GPU0", 0, "0000:01:00.0", name=name)

    def has_device(self, n):
        return n == "GPU0"

    def gpu(self, n):
        if n != "GPU0":
            raise KeyError(n)
        return self.node


def test_a_model_without_published_figures_is_measured_but_not_judged():
    ctx = BenchContext(host=None, topology=_Topo("NVIDIA L4"), runs={})
    hbm = gpu_self.measurement({"bench": "hbm", "src": "GPU0", "dst": "GPU0", "samples_gbyte_s": [240, 250, 245]}, ctx)
    gemm = gpu_self.measurement({"bench": "gemm", "src": "GPU0", "dst": "GPU0", "samples_tflops": [90.0]}, ctx)
    assert hbm.status == gemm.status == "unknown" and hbm.gbyte_s == 245 and gemm.tflops == 90.0
    assert "no published HBM bandwidth for NVIDIA L4" in hbm.note
    found = gpu_self.findings("gemm", [gemm], ctx.topology)
    assert [(f.check, f.status) for f in found] == [("bench.gemm.unjudged", "unknown")]
    assert "NVIDIA L4" in found[0].summary and "hardware.json" in found[0].remedy


def test_a_figure_above_the_published_peak_is_never_a_pass():
    ctx = BenchContext(host=None, topology=_Topo(H100), runs={})
    m = gpu_self.measurement({"bench": "gemm", "src": "GPU0", "dst": "GPU0", "samples_tflops": [1500.0]}, ctx)
    assert m.status == "unknown" and "faster than" in m.note


def test_the_gemm_reports_tflops_in_a_report_the_schema_accepts(healthy):
    from ccdiag.bench.result import BenchResult
    from ccdiag.commands.bench import Observed, bench_report
    from ccdiag.report.document import validate

    runs, topo = healthy
    ctx = BenchContext(host=None, topology=topo, runs=runs)
    m = gpu_self.measurement({"bench": "gemm", "src": "GPU0", "dst": "GPU0", "samples_tflops": [780.0, 790.0]}, ctx)
    res = BenchResult("gemm", "ran", measurements=[m], findings=gpu_self.findings("gemm", [m], topo))
    doc = bench_report(Observed(runs, topo, {}), [res], 0, None, 1.0)
    validate(doc)
    got = doc["bench"][0]["measurements"][0]
    assert got["tflops"] == 785.0 and got["samples_tflops"] == [780.0, 790.0] and got["expected"]["kind"] == "gemm"
    assert got["expected"]["tflops"] == 989.5 and got["gbyte_s"] is None


def test_the_engine_runs_them_last_and_shorter_in_a_prolog(healthy):
    runs, topo = healthy
    assert resolve(["gemm", "h2d", "hbm", "p2p"]) == ["h2d", "p2p", "hbm", "gemm"]
    quick = worker_request(["hbm", "gemm"], BenchContext(host=None, topology=topo, runs=runs, quick=True))
    full = worker_request(["hbm", "gemm"], BenchContext(host=None, topology=topo, runs=runs))
    assert quick["hbm_size_bytes"] < (1 << 30) and quick["gemm_seconds"] < 1.0
    assert "hbm_size_bytes" not in full and "gemm_seconds" not in full  # the worker's defaults: 1 GiB, 3 s


def test_a_copy_asked_for_without_a_topology_is_refused_naming_it(healthy):
    """applicable() skips the copies on a node without a topology; a caller that skips asking gets an
    error naming the benchmarks, not an AttributeError on None."""
    runs, _ = healthy
    ctx = BenchContext(host=None, topology=None, runs=runs)
    with pytest.raises(ValueError, match="'hbm, gemm' needs this node's topology"):
        worker_request(["hbm", "gemm"], ctx)


# -- which CuPy ---------------------------------------------------------------------------------


def test_installed_cupy_is_named_with_its_cuda_major(tmp_path):
    _dist(tmp_path, "cupy-cuda12x", "13.6.0")
    got = cupy_dist.installed([str(tmp_path)])
    assert [d.describe() for d in got] == ["cupy-cuda12x 13.6.0 (CUDA 12)"]
    assert cupy_dist.why_unusable(got, "580.95.05") is None and cupy_dist.why_unusable(got, "535.54.03") is None


@pytest.mark.parametrize("driver, extra", [("580.65.06", "gpu-cuda13"), ("575.57.08", "gpu-cuda12"),
                                           ("535.54.03", "gpu-cuda12"), (None, "gpu-cuda12")])
def test_the_extra_named_fits_the_driver(driver, extra):
    assert cupy_dist.extra_for_driver(driver) == extra
    assert f"ccdiag[{extra}]" in cupy_dist.install_hint(driver)


def _ctx_with(runs, topo, tmp_path, *dists) -> BenchContext:
    for name in dists:
        _dist(tmp_path, name, "13.6.0")
    env = fake_env()
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), str(tmp_path)])
    return context(runs, topo, env)


def test_two_cupy_wheels_at_once_are_refused_with_both_named(healthy, tmp_path):
    runs, topo = healthy
    why = D2D.applicable(_ctx_with(runs, topo, tmp_path, "cupy-cuda12x", "cupy-cuda13x"))
    assert why and "cupy-cuda12x 13.6.0 (CUDA 12)" in why and "cupy-cuda13x 13.6.0 (CUDA 13)" in why
    assert "uninstall all but one" in why


def test_a_cuda_13_wheel_on_an_older_driver_names_the_extra_that_fits(healthy, tmp_path):
    runs, topo = healthy
    driver = runs["nvml"].data.driver_version
    assert driver and int(driver.split(".")[0]) < 580  # the sample node's driver
    _dist(tmp_path, "cupy-cuda13x", "13.6.0")
    why = cupy_dist.why_unusable(cupy_dist.installed([str(tmp_path)]), driver)
    assert why and "needs NVIDIA driver 580 or newer" in why and "ccdiag[gpu-cuda12]" in why


def test_without_cupy_the_reason_names_the_extra_for_this_driver(healthy):
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed in this environment: its absence cannot be shown here")
    runs, topo = healthy
    env = dict(os.environ, PYTHONPATH="")
    why = D2D.applicable(context(runs, topo, env))
    assert why.startswith("cupy is not installed") and "ccdiag[gpu-cuda12]" in why
    assert json.dumps(why)  # one plain line
