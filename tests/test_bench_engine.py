"""The CuPy benchmark engine end to end, against a test double of CuPy (SYNTHESIZED, see
tests/fakes/README.md): the real child process, its timing arithmetic, NUMA binding, device
mapping, judging against the topology and localisation; and its boundaries: out of memory, peer
access unsupported, a copy that never completes (the budget holds), no CuPy, a replay."""

from __future__ import annotations

import os
import time

import pytest

from bench_support import FAKES, context, fake_env, observed, two_cpus
from ccdiag.bench.gpu_copy import run_group
from ccdiag.bench.registry import BenchContext
from ccdiag.bench.runner import exit_code, run_benchmarks
from ccdiag.core.exitcodes import ExitCode

H100_H2D = 55.0  # GB/s: what a healthy Gen5 x16 host copy reaches (88 % of 63, stas00 H200 figure)
NV18_P2P = 380.0  # GB/s: 84 % of 450 (NVIDIA/nccl#1264)


@pytest.fixture(scope="module")
def healthy():
    return observed("hgx-h100-8gpu-healthy")


def by(res, **kw):
    return [m for m in res.measurements if all(getattr(m, k) == v for k, v in kw.items())]


def test_healthy_host_copies_pass_with_figures_and_expectations(healthy):
    runs, topo = healthy
    env = fake_env(h2d={"default": H100_H2D}, d2h={"default": H100_H2D}, d2d={"default": 2000.0})
    out = run_group(["h2d", "d2h", "d2d"], context(runs, topo, env), 60)
    h2d = out["h2d"]
    assert h2d.outcome == "ran", h2d.reason
    local = by(h2d, direction="uni", op="h2d")
    local = [m for m in local if not m.extra.get("remote_numa")]
    assert {m.dst for m in local} == {f"GPU{i}" for i in range(8)}
    for m in local:
        assert m.gbyte_s == pytest.approx(H100_H2D, rel=1e-6)
        assert m.expected.gbyte_s == pytest.approx(63.015, rel=1e-3)
        assert m.expected.bottleneck_desc == "Gen5 x16"
        assert m.status == "pass" and m.ratio == pytest.approx(H100_H2D / 63.015, rel=1e-3)
        assert len(m.samples_gbyte_s) == 3
    assert by(out["d2h"], direction="bidir") and by(h2d, direction="bidir")
    assert all(f.status == "pass" for f in h2d.findings + out["d2h"].findings + out["d2d"].findings)
    assert exit_code(list(out.values())) == ExitCode.OK


@pytest.mark.skipif(not two_cpus(), reason="needs CPUs 0 and 1 to stand for two NUMA nodes")
def test_remote_numa_penalty_is_measured_with_the_thread_really_bound(healthy):
    runs, topo = healthy
    env = fake_env(h2d={"default": H100_H2D}, remote_factor=0.7)
    out = run_group(["h2d"], context(runs, topo, env), 60)
    remote = [m for m in out["h2d"].measurements if m.extra.get("remote_numa")]
    assert remote and all(m.gbyte_s == pytest.approx(H100_H2D * 0.7) for m in remote)
    numa = [f for f in out["h2d"].findings if f.check == "bench.h2d.numa"]
    assert numa and numa[0].status == "pass" and "30%" in numa[0].summary and numa[0].remedy


@pytest.mark.skipif(not two_cpus(), reason="needs CPUs 0 and 1 to stand for two NUMA nodes")
def test_gpu_faster_from_the_remote_node_has_its_numa_affinity_misreported(healthy):
    runs, topo = healthy
    # GPU2's PCIe path really hangs off NUMA 1: from its reported node 0 it is slow
    env = fake_env(h2d={"default": H100_H2D}, remote_factor=1.0,
                   devices=[{"bdf": b, "name": "H100", "numa": (1 if i == 2 else n)}
                            for i, (b, n) in sorted(__import__("bench_support").SAMPLE_GPUS.items())])
    cfg_env = dict(env)
    import json
    cfg = json.loads(cfg_env["CCDIAG_FAKE_CUDA"])
    cfg["remote_factor"] = 0.6
    cfg_env["CCDIAG_FAKE_CUDA"] = json.dumps(cfg)
    out = run_group(["h2d"], context(runs, topo, cfg_env), 60)
    warn = [f for f in out["h2d"].findings if f.check == "bench.h2d.numa" and f.status == "warn"]
    assert [f.component.name for f in warn] == ["GPU2"]


def test_gpu_at_x8_is_named_as_the_trained_down_link():
    runs, topo = observed("hgx-h100-8gpu-degraded")  # GPU3's link trained at x8
    rates = {str(i): H100_H2D for i in range(8)}
    rates["3"] = H100_H2D / 2  # what an x8 link delivers
    env = fake_env(h2d=rates, d2h=rates)
    out = run_group(["h2d"], context(runs, topo, env), 60)
    fails = [f for f in out["h2d"].findings if f.status == "fail"]
    assert [f.check for f in fails] == ["bench.h2d.slow_link"]
    assert fails[0].component.name == "GPU3 <- 0000:5c:00.0"
    assert "x8" in fails[0].summary and "x16" in fails[0].summary
    assert exit_code(list(out.values())) == ExitCode.FAIL


def test_switch_shared_by_slow_gpus_is_named_not_each_gpu(healthy):
    """Two GPUs whose copies are slow while their own links trained fine: in the sample each GPU
    sits under its own switch, so the common link of GPU0's slow paths is its switch uplink."""
    runs, topo = healthy
    rates = {str(i): H100_H2D for i in range(8)}
    rates["0"] = 20.0
    env = fake_env(h2d=rates, d2h=rates, remote_factor=1.0)
    out = run_group(["h2d", "d2h"], context(runs, topo, env), 60)
    fails = [f for r in out.values() for f in r.findings if f.status == "fail"]
    names = {f.component.name for f in fails}
    assert names and all("GPU0" in n or "0000:16:00.0" in n or "0000:15:01.0" in n for n in names), names


def test_p2p_matrix_names_the_gpu_slow_with_every_peer(healthy):
    runs, topo = healthy
    p2p = {f"{a}-{b}": NV18_P2P for a in range(8) for b in range(8) if a != b}
    for k in p2p:
        if "5" in k.split("-"):
            p2p[k] = 81.0  # GPU5 slow with everyone
    env = fake_env(p2p=p2p)
    out = run_group(["p2p"], context(runs, topo, env, size_bytes=16 << 20, iters=2), 120)
    res = out["p2p"]
    assert res.outcome == "ran", res.reason
    assert len(by(res, op="write", direction="uni")) == 56
    assert len(by(res, op="read", direction="uni")) == 56
    assert len(by(res, direction="bidir")) == 56
    assert all(m.latency_us is not None for m in by(res, op="write", direction="uni"))
    fails = [f for f in res.findings if f.status == "fail"]
    assert [(f.check, f.component.name) for f in fails] == [("bench.p2p.gpu", "GPU5")]
    assert "450.0" in fails[0].summary or "450" in str(fails[0].evidence)


def test_nvlink_down_is_named_on_the_pair_path():
    runs, topo = observed("hgx-h100-8gpu-degraded")  # GPU5 has 17 of 18 NVLinks; GPU6 lost
    p2p = {f"{a}-{b}": NV18_P2P for a in range(8) for b in range(8) if a != b}
    env = fake_env(p2p=p2p, p2p_default=NV18_P2P)
    out = run_group(["p2p"], context(runs, topo, env, size_bytes=16 << 20, iters=2), 120)
    res = out["p2p"]
    assert "GPU6" not in {m.src for m in res.measurements}  # a lost GPU is not measured
    assert all(f.status == "pass" for f in res.findings)  # 17 of 18 links at 380 GB/s is still 84 %


def test_peer_access_unsupported_is_measured_through_the_host_and_said_so(healthy):
    runs, topo = healthy
    env = fake_env(no_peer=["0-1"], staged=25.0, h2d={"default": H100_H2D})
    out = run_group(["p2p"], context(runs, topo, env, size_bytes=16 << 20, iters=2), 120)
    staged = [m for m in out["p2p"].measurements if m.src == "GPU0" and m.dst == "GPU1" and m.op == "write"
              and m.direction == "uni"]
    assert staged[0].extra.get("peer_access") is False
    assert "staged through host memory" in staged[0].note
    assert staged[0].expected.level == "host" and staged[0].expected.gbyte_s == pytest.approx(63.015, rel=1e-3)


def test_out_of_memory_on_one_gpu_is_that_gpus_error_not_the_run(healthy):
    runs, topo = healthy
    env = fake_env(oom_devices=[4], h2d={"default": H100_H2D}, d2h={"default": H100_H2D})
    out = run_group(["h2d", "d2h"], context(runs, topo, env), 60)
    res = out["h2d"]
    assert res.outcome == "partial"
    errs = [f for f in res.findings if f.check == "bench.h2d.error"]
    assert errs and errs[0].component.name == "GPU4" and "smaller --size" in errs[0].remedy
    assert len([m for m in res.measurements if m.gbyte_s]) >= 7


def test_a_copy_that_never_completes_costs_the_budget_and_is_said(healthy):
    runs, topo = healthy
    env = fake_env(hang="p2p")
    t0 = time.monotonic()
    out = run_group(["p2p"], context(runs, topo, env, size_bytes=16 << 20), 4.0)
    took = time.monotonic() - t0
    assert took < 4.0 + 4.0  # the budget, plus the kill's grace
    res = out["p2p"]
    assert res.outcome == "timeout"
    assert any(f.check == "bench.p2p.budget" and f.status == "unknown" for f in res.findings)
    assert exit_code([res]) == ExitCode.UNEVALUATED


def test_without_cupy_the_engine_says_why(healthy, tmp_path):
    runs, topo = healthy
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    env = fake_env()
    env["PYTHONPATH"] = str(tmp_path)
    out = run_group(["h2d"], context(runs, topo, env), 20)
    assert out["h2d"].outcome == "error" and "libcudart" in out["h2d"].reason


def test_a_replay_and_a_node_without_gpus_skip_with_the_reason(healthy):
    runs, topo = healthy
    ctx = BenchContext(host=type("R", (), {"live": False})(), topology=topo, runs=runs)
    res = run_benchmarks([], ctx, 10)
    assert {r.outcome for r in res} == {"skip"}
    assert all("replayed snapshot" in r.reason for r in res)
    assert exit_code(res) == ExitCode.UNEVALUATED


def test_pairs_below_their_nvlink_count_name_the_links_down():
    runs, topo = observed("hgx-h100-8gpu-degraded")  # GPU5: 17 of 18 NVLinks active
    p2p = {f"{a}-{b}": NV18_P2P for a in range(8) for b in range(8) if a != b}
    for k in p2p:
        if "5" in k.split("-"):
            p2p[k] = 300.0  # 67 % of 18 links, 71 % of the 17 that are up
    env = fake_env(p2p=p2p)
    out = run_group(["p2p"], context(runs, topo, env, size_bytes=16 << 20, iters=2), 120)
    bad = [f for f in out["p2p"].findings if f.status != "pass"]
    assert [(f.check, f.component.name, f.component.kind) for f in bad] == \
        [("bench.p2p.slow_link", "GPU5 NVLink -> NVSwitch fabric", "nvlink")]
    assert "17 active" in bad[0].summary and "nvidia-smi nvlink" in bad[0].remedy


def test_check_bench_quick_folds_benchmark_findings_into_the_verdict():
    from bench_support import LiveStub, SAMPLES
    from ccdiag.run.checkrun import QUICK_BENCH_S, add_benchmarks, evaluate
    from ccdiag.host.door import ReplayHost
    from ccdiag.run.stages import Budget

    host = ReplayHost(str(SAMPLES / "hgx-h100-8gpu-degraded.snap.tar.gz"))
    res = evaluate(host, budget=Budget.plan(30, bench_s=QUICK_BENCH_S))
    rates = {str(i): H100_H2D for i in range(8)}
    rates["3"] = H100_H2D / 2
    out = add_benchmarks(res, LiveStub(), names=["h2d"], env=fake_env(h2d=rates, d2h=rates))
    assert [b.name for b in out.bench] == ["h2d"], out.bench
    assert out.bench[0].outcome == "ran", (out.bench[0].outcome, out.bench[0].reason)
    assert out.bench[0].params["quick"] is True
    slow = [f for f in out.findings if f.check == "bench.h2d.slow_link"]
    assert slow and slow[0].component.name == "GPU3 <- 0000:5c:00.0"
    assert out.exit_code == 1


def test_check_bench_quick_on_a_replay_keeps_the_verdict_and_lists_the_skips():
    import json as _json

    from bench_support import SAMPLES
    from cli_runner import run

    sample = str(SAMPLES / "hgx-h100-8gpu-degraded.snap.tar.gz")
    code_plain, out_plain, _ = run("check", "--replay", sample, "--json")
    code, out, _ = run("check", "--replay", sample, "--json", "--bench", "quick")
    assert code == code_plain == 1
    doc = _json.loads(out)
    from ccdiag.report.document import validate

    validate(doc)
    assert doc["verdict"]["counts"] == _json.loads(out_plain)["verdict"]["counts"]
    assert {b["outcome"] for b in doc["bench"]} == {"skip"}
    assert all("replayed snapshot" in b["reason"] for b in doc["bench"])


def test_bench_command_on_this_machine_says_why_nothing_runs():
    from cli_runner import run

    code, out, err = run("bench")
    if "NOT MEASURED" not in out:
        pytest.skip("this machine has a GPU or an RDMA port")
    assert code == 3 and "skip:" in out and "Traceback" not in err
    code, out, err = run("bench", "nosuch")
    assert code == 2 and "unknown benchmark 'nosuch'" in err
    code, out, _ = run("bench", "list", "--json")
    names = {b["name"] for b in __import__("json").loads(out)}
    assert code == 0 and names == {"h2d", "d2h", "p2p", "d2d", "hbm", "gemm", "ib_write"}


def test_gpus_are_found_by_bus_address_whatever_cuda_numbers_them(healthy):
    """CUDA sees two of the eight GPUs, in its own order (as under CUDA_VISIBLE_DEVICES=5,2): its
    ordinal 0 is GPU5. The figures land on the GPU that made them, by PCI address, and the six
    GPUs CUDA cannot see are named, not measured as someone else."""
    from bench_support import SAMPLE_GPUS

    runs, topo = healthy
    devices = [{"bdf": SAMPLE_GPUS[5][0].replace("0000:", "00000000:").upper(), "name": "H100", "numa": 1},
               {"bdf": SAMPLE_GPUS[2][0], "name": "H100", "numa": 0}]
    env = fake_env(devices=devices, h2d={"0": 10.0, "1": H100_H2D}, d2h={"default": H100_H2D})
    out = run_group(["h2d"], context(runs, topo, env), 60)
    local = {m.dst: m for m in by(out["h2d"], direction="uni", op="h2d") if not m.extra.get("remote_numa")}
    assert set(local) == {"GPU5", "GPU2"}
    assert local["GPU5"].gbyte_s == pytest.approx(10.0, rel=1e-6) and local["GPU5"].status == "fail"
    assert local["GPU2"].gbyte_s == pytest.approx(H100_H2D, rel=1e-6)
    assert out["h2d"].outcome == "partial" and "not visible" in out["h2d"].reason
    assert out["h2d"].engine["spin_kernel"] == "used"


DRIVER = """\
import json, sys
import ccdiag
from ccdiag.bench.engine import run_worker

env = json.loads(sys.argv[1])
req = {"tasks": ["d2d"], "gpus": [{"label": "GPU0", "bdf": "0000:18:00.0", "index": 0, "numa": None}],
       "size_bytes": 1 << 20, "iters": 1, "warmup": 0}
run = run_worker(req, 30.0, env=env)
print(json.dumps({"parent": ccdiag.__file__, "fatal": run.fatal, "done": run.done, "info": run.info,
                  "measured": len(run.lines), "stderr": run.stderr_tail}))
"""


@pytest.mark.slow
def test_a_worker_started_from_the_checkout_imports_the_installed_package(tmp_path):
    """After ``pip install .`` (not editable), ``ccdiag bench`` run with the source checkout as the
    current directory: the worker must import the installed ccdiag, not the checkout's ``ccdiag/``
    (which has no ``probes/``). The interpreter is the base one, so no editable-install finder of
    the test environment can hide the difference; the environment's site directory is only on
    PYTHONPATH, for the libraries ccdiag imports."""
    import json
    import shutil
    import subprocess
    import sys
    import sysconfig

    from conftest import REPO

    tree, target = tmp_path / "src", tmp_path / "installed"
    top = {".git", ".venv", "build", "tests", "bench", "docs"}  # at the top only: ccdiag/bench is the package's
    shutil.copytree(REPO, tree, ignore=lambda d, names: [n for n in names if n == "__pycache__" or n.endswith(".egg-info")
                                                         or (d == str(REPO) and n in top)])
    import importlib.util

    # the build backend where it is installed here (no index needed); else pip's isolated build
    here = all(importlib.util.find_spec(m) is not None for m in ("setuptools", "wheel"))
    isolation = ["--no-build-isolation"] if here else []
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "--target", str(target),
                           str(tree)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (target / "ccdiag" / "probes").is_dir() and not (REPO / "ccdiag" / "probes").exists()
    (tmp_path / "driver.py").write_text(DRIVER)
    site = sysconfig.get_paths()["purelib"]
    base = getattr(sys, "_base_executable", None) or sys.executable
    env = fake_env(devices=[{"bdf": "0000:18:00.0", "name": "NVIDIA H100 80GB HBM3", "numa": None}])
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(FAKES), site])
    proc = subprocess.run([base, str(tmp_path / "driver.py"), json.dumps(env)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["parent"].startswith(str(target)), got
    assert got["fatal"] is None and got["done"] and got["measured"] == 1, got
    assert got["info"]["ccdiag_package"].startswith(str(target)), got["info"]
