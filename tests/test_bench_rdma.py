"""``ib_write`` at its boundary (no RDMA device here): the perftest adapter driven through a
stand-in ``ib_write_bw`` script (SYNTHESIZED: it prints a real client output from the corpus, or
an error, or hangs), the choice of engine and its skip reasons, and the judging that tells a slow
port from a GPUDirect path across the CPU socket (linux-rdma/perftest#241)."""

from __future__ import annotations

import pathlib
import time

import pytest

from bench_support import context, observed
from ccdiag.bench import expected as exp
from ccdiag.bench import ib_write
from ccdiag.bench.judge import judge
from ccdiag.bench.result import Measurement

TESTS = pathlib.Path(__file__).resolve().parent
HDR_CLIENT = TESTS / "fixtures" / "corpus" / "perftest" / "ib_write_bw-a-mlx5_0-hdr-ib-client-MBps-tabs-cpu-freq-warnings.txt"


@pytest.fixture(scope="module")
def healthy():
    return observed("hgx-h100-8gpu-healthy", numa_on_this_machine=False)


def fake_perftest(tmp_path, monkeypatch, behaviour: str):
    """A stand-in ib_write_bw on PATH: the server exits after a moment; the client (last argument an
    address) prints the real HDR client capture, an error, or hangs."""
    log = tmp_path / "argv.log"
    script = tmp_path / "ib_write_bw"
    script.write_text(f"""#!/bin/bash
echo "$@" >> {log}
last="${{@: -1}}"
if [ "$last" != "127.0.0.1" ]; then sleep {2 if behaviour == "late" else 0.2}; exit 0; fi
case {behaviour} in
  late) n=$(grep -c 127.0.0.1 {log}); if [ "$n" -le 2 ]; then echo " Couldn't connect to 127.0.0.1:18515"; exit 1; fi
        grep -v '^#ccdiag-' {HDR_CLIENT}; exit 0;;
  ok) grep -v '^#ccdiag-' {HDR_CLIENT}; exit 0;;
  error) echo " Couldn't connect to 127.0.0.1:18515"; echo " Unable to open file descriptor for socket connection"; exit 1;;
  hang) sleep 600;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return log


def test_perftest_adapter_runs_server_and_client_per_port_and_reads_the_client(healthy, tmp_path, monkeypatch):
    runs, topo = healthy
    log = fake_perftest(tmp_path, monkeypatch, "ok")
    ctx = context(runs, topo, env=None, size_bytes=None, iters=None, quick=True)
    bench = ib_write.IbWrite()
    assert bench.applicable(ctx) is None and bench.engine_choice()[0] == "perftest"
    res = bench.run(ctx, 60)
    ports = {m.dst for m in res.measurements}
    assert ports == {f"mlx5_{i}:1" for i in range(8)}
    gpu = [m for m in res.measurements if m.src.startswith("GPU")]
    assert {m.src for m in gpu} == {f"GPU{i}" for i in range(8)}  # each rail's own GPU
    assert all(m.gbyte_s == pytest.approx(24.45, abs=0.1) for m in res.measurements)
    argv = log.read_text().splitlines()
    assert any("--use_cuda_bus_id=0000:18:00.0" in a and "-d mlx5_0" in a and "--report_gbits" in a for a in argv)
    # 196 Gb/s on 400 Gb/s ports from every buffer: the ports are blamed, not GPUDirect; a loopback
    # turns round inside the HCA, so the remedy names the HCA and its slot, not the cable
    assert {f.check for f in res.findings} == {"bench.ib_write.port"}
    remedy = res.findings[0].remedy
    assert "HCA mlx5_" in remedy and "lspci" in remedy and "never reaches the cable" in remedy


def test_client_started_again_until_the_server_listens(healthy, tmp_path, monkeypatch):
    """A server slow to open its port: the first clients are refused, a later one measures."""
    runs, topo = healthy
    log = fake_perftest(tmp_path, monkeypatch, "late")
    ctx = context(runs, topo, env=None, size_bytes=None, iters=None, quick=True)
    job = ib_write.IbWrite().jobs(ctx)[0]
    m = ib_write.run_perftest(job, ctx, time.monotonic() + 20)
    assert m.error is None and m.gbyte_s == pytest.approx(24.45, abs=0.1)
    assert m.extra["client_starts"] == 3
    assert sum(1 for a in log.read_text().splitlines() if a.endswith("127.0.0.1")) == 3


def test_perftest_error_is_that_ports_error_with_perftests_words(healthy, tmp_path, monkeypatch):
    runs, topo = healthy
    fake_perftest(tmp_path, monkeypatch, "error")
    res = ib_write.IbWrite().run(context(runs, topo, env=None, quick=True), 60)
    assert res.outcome == "partial"
    assert all("Couldn't connect" in m.error for m in res.measurements)
    assert {f.check for f in res.findings} == {"bench.ib_write.error"}


def test_a_hung_ib_write_bw_is_killed_at_the_budget(healthy, tmp_path, monkeypatch):
    runs, topo = healthy
    fake_perftest(tmp_path, monkeypatch, "hang")
    t0 = time.monotonic()
    res = ib_write.IbWrite().run(context(runs, topo, env=None, quick=True), 3.0)
    assert time.monotonic() - t0 < 3.0 + 5.0
    assert res.outcome == "timeout" or any("did not finish" in (m.error or "") for m in res.measurements)


def test_without_perftest_or_pyverbs_it_says_so(healthy, tmp_path, monkeypatch):
    runs, topo = healthy
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ib_write, "module_missing", lambda *a, **k: "pyverbs is not installed (rdma-core)")
    from ccdiag.bench import sysverbs

    monkeypatch.setattr(sysverbs, "system_pyverbs_dirs", lambda: [])
    why = ib_write.IbWrite().applicable(context(runs, topo, env=None))
    assert "neither ib_write_bw (perftest) nor pyverbs" in why


def test_a_system_pyverbs_outside_the_environment_is_used(healthy, tmp_path, monkeypatch):
    """rdma-core's python3-pyverbs in the system's site directory, ccdiag in a venv: the engine is
    available (the worker appends that directory to its path)."""
    runs, topo = healthy
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ib_write, "module_missing", lambda *a, **k: "pyverbs is not installed (rdma-core)")
    from ccdiag.bench import sysverbs

    monkeypatch.setattr(sysverbs, "system_pyverbs_dirs", lambda: ["/usr/lib/python3/dist-packages"])
    assert ib_write.IbWrite().engine_choice() == ("pyverbs", None)


def test_no_active_port_and_replay_skip_with_reasons(healthy):
    runs, topo = healthy
    from ccdiag.bench.registry import BenchContext

    replay = BenchContext(host=type("R", (), {"live": False})(), topology=topo, runs=runs)
    assert "replayed snapshot" in ib_write.IbWrite().applicable(replay)
    empty = context({}, None, env=None)
    assert "no active RDMA port" in ib_write.IbWrite().applicable(empty)


def _m(topo, src, nic, gbyte_s):
    m = Measurement("ib_write", src, f"{nic}:1", op="rdma_write", engine="perftest", gbyte_s=gbyte_s)
    m.expected = exp.gpu_nic(topo, src, nic) if src.startswith("GPU") else exp.host_nic(topo, nic)
    return judge(m)


def test_gpudirect_across_the_socket_is_named_as_the_path(healthy):
    runs, topo = healthy
    assert topo.level("GPU0", "mlx5_7") == "SYS"
    ms = [_m(topo, "GPU0", "mlx5_7", 23.0), _m(topo, "host", "mlx5_7", 48.0)]
    f = [x for x in ib_write.findings(ms, topo) if x.status != "pass"]
    assert [x.check for x in f] == ["bench.ib_write.gpudirect"]
    assert "SYS" in f[0].summary and "CPU socket" in f[0].summary and f[0].component.kind == "gpu_pair"


def test_gpudirect_slow_on_its_own_switch_blames_gpudirect(healthy):
    runs, topo = healthy
    ms = [_m(topo, "GPU0", "mlx5_0", 23.0), _m(topo, "host", "mlx5_0", 48.0)]
    f = [x for x in ib_write.findings(ms, topo) if x.status != "pass"]
    assert f[0].check == "bench.ib_write.gpudirect" and "nvidia_peermem" in f[0].remedy


def test_line_rate_passes(healthy):
    runs, topo = healthy
    ms = [_m(topo, "GPU0", "mlx5_0", 48.5), _m(topo, "host", "mlx5_0", 48.7)]
    assert [x.status for x in ib_write.findings(ms, topo)] == ["pass"]


def test_pyverbs_engine_says_when_pyverbs_cannot_be_used(healthy, tmp_path, monkeypatch):
    """The native engine's child process with a pyverbs that cannot load (as on a machine whose
    rdma-core has no device or no Python binding): the result says so, nothing hangs."""
    runs, topo = healthy
    (tmp_path / "pyverbs").mkdir()
    (tmp_path / "pyverbs" / "__init__.py").write_text("raise ImportError('libibverbs.so.1: cannot open shared object')\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no ib_write_bw: the pyverbs engine is chosen
    import os
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    ctx = context(runs, topo, env=env)
    bench = ib_write.IbWrite()
    monkeypatch.setattr(ib_write, "module_missing", lambda *a, **k: None)
    assert bench.engine_choice()[0] == "pyverbs"
    res = bench.run(ctx, 20)
    assert res.outcome == "error" and "pyverbs not available" in res.reason and "libibverbs" in res.reason


def test_pyverbs_jobs_pair_each_port_with_its_own_gpu_and_host_memory(healthy):
    runs, topo = healthy
    jobs = ib_write.IbWrite().jobs(context(runs, topo, env=None))
    gpu_jobs = [j for j in jobs if j["buffer"] == "gpu"]
    assert len(jobs) == 16 and len(gpu_jobs) == 8
    j0 = next(j for j in gpu_jobs if j["device"] == "mlx5_0")
    assert j0["src"] == "GPU0" and j0["cuda_bus_id"] == "0000:18:00.0" and "PIX" in j0["note"]


def test_roce_gid_index_is_the_one_nccl_would_pick(healthy):
    """Read with `ccdiag nccl`'s own GID reading: a RoCE v2 GID holding an IPv4 address first."""
    from ccdiag.probes.infiniband import Gid, IbDevice, IbObservation, IbPort
    from ccdiag.probes.registry import ProbeRun

    port = IbPort(1, state="ACTIVE", link_layer="Ethernet", gids=(
        Gid(0, "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "IB/RoCE v1"),
        Gid(1, "fe80:0000:0000:0000:0a00:27ff:fe00:0001", "RoCE v2"),
        Gid(2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
        Gid(3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2")))
    data = IbObservation(devices=(IbDevice("mlx5_0", ports=(port,)),))
    runs, topo = healthy
    ctx = context({**runs, "infiniband": ProbeRun("infiniband", "ok", 0.0, data)}, topo, env=None)
    assert ib_write._gid_index(ctx, "mlx5_0", 1) == 3
    assert ib_write._gid_index(ctx, "mlx5_9", 1) is None


def fake_perftest_dmabuf(tmp_path, monkeypatch, dmabuf_works: bool):
    """A stand-in ib_write_bw built with CUDA dma-buf support: its --help lists --use_cuda_dmabuf
    (the flag perftest prints when built with it); a run with the flag measures, or fails the way a
    node without DMA-BUF would (SYNTHESIZED message); a run without it measures (peermem)."""
    log = tmp_path / "argv.log"
    script = tmp_path / "ib_write_bw"
    script.write_text(f"""#!/bin/bash
if [ "$1" = "--help" ]; then echo " --use_cuda_dmabuf  Use CUDA DMA-BUF for GPUDirect RDMA testing"; exit 1; fi
echo "$@" >> {log}
last="${{@: -1}}"
if [ "$last" != "127.0.0.1" ]; then sleep 0.2; exit 0; fi
case "$*" in
  *--use_cuda_dmabuf*) if [ {int(dmabuf_works)} = 0 ]; then echo " Couldn't allocate MR"; exit 1; fi;;
esac
grep -v '^#ccdiag-' {HDR_CLIENT}
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return log


@pytest.mark.parametrize("works", [True, False])
def test_perftest_registers_gpu_memory_by_dmabuf_first_and_says_which(healthy, tmp_path, monkeypatch, works):
    runs, topo = healthy
    log = fake_perftest_dmabuf(tmp_path, monkeypatch, works)
    ctx = context(runs, topo, env=None, size_bytes=None, iters=None, quick=True)
    job = ib_write.IbWrite().jobs(ctx)[0]
    assert ib_write.perftest_has_dmabuf(ib_write._engine_env(ctx))
    m = ib_write.run_perftest(job, ctx, time.monotonic() + 20)
    clients = [a for a in log.read_text().splitlines() if a.endswith("127.0.0.1")]
    assert "--use_cuda_dmabuf" in clients[0]
    if works:
        assert m.extra["registration"] == "dmabuf" and len(clients) == 1
    else:  # the DMA-BUF run failed: measured again through nvidia_peermem, and why is kept
        assert m.extra["registration"] == "peermem" and "--use_cuda_dmabuf" not in clients[-1]
        assert "Couldn't allocate MR" in m.extra["dmabuf_error"]
    assert m.error is None and "registered by " in ib_write.registered(m)
    host = ib_write.run_perftest(ib_write.IbWrite().jobs(ctx)[1], ctx, time.monotonic() + 20)
    assert "registration" not in host.extra and ib_write.registered(host) == ""
