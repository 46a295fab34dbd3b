"""``ccdiag cluster check``: consistency logic (pure) and the real thing over namespaced ranks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest

from ccdiag.cluster import gather
from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"


def test_consistency_names_the_odd_host_and_both_values():
    facts = {f"h{i}": {"ccdiag_version": "0.1.0", "driver_version": "570.133.20", "pcie_link GPU3": "Gen5 x16"}
             for i in range(4)}
    facts["h2"] = {"ccdiag_version": "0.0.9", "driver_version": "550.54.15", "pcie_link GPU3": "Gen5 x8"}
    fs = {f.check: f for f in gather.consistency(facts)}
    assert set(fs) == {"cluster.consistency.ccdiag_version", "cluster.consistency.driver_version",
                       "cluster.consistency.pcie_link GPU3"}
    assert all(f.component.name == "h2" for f in fs.values())
    assert fs["cluster.consistency.driver_version"].status == "fail"
    assert fs["cluster.consistency.ccdiag_version"].status == "warn"
    assert "550.54.15" in fs["cluster.consistency.driver_version"].summary
    assert "3 of 4" in fs["cluster.consistency.driver_version"].summary


def test_consistency_two_hosts_disagreeing_names_both():
    fs = gather.consistency({"a": {"driver_version": "1"}, "b": {"driver_version": "2"}})
    assert sorted(f.component.name for f in fs) == ["a", "b"]


def test_a_host_without_facts_is_one_finding_not_one_per_fact():
    """One host whose check could not run (a bad snapshot) beside three that agree: that host's
    own finding says why, and no fact is reported as differing because it lacks them."""
    facts = {"ccdiag_version": "0.1.0", "driver_version": "570.133.20", "gpu_count": 8, "kernel": "6.8",
             **{f"pcie_link GPU{i} <- 0000:{i}:00.0": "Gen5 x16" for i in range(8)}}
    nccl = {"settings": {"NCCL_IB_HCA": "=mlx5_0:1"}}
    summaries = {r: {"leader": True, "host": f"h{r}", "exit_code": 0, "facts": dict(facts), "nccl": nccl}
                 for r in range(3)}
    summaries[3] = {"leader": True, "host": "h3", "exit_code": 2, "error": "h3.snap: not a snapshot", "facts": {}}
    fs = [f for f in gather.cluster_findings(summaries, [], {}) if f.status != "pass"]
    assert len(fs) == 1 and fs[0].check == "cluster.host_check" and fs[0].component.name == "h3"
    assert "not a snapshot" in fs[0].summary


def test_silent_rank_is_a_finding():
    fs = gather.cluster_findings({0: {"leader": True, "host": "a", "exit_code": 0, "facts": {}}}, [1],
                                 {1: {"host": "b"}})
    silent = [f for f in fs if f.check == "cluster.rank_silent"]
    assert silent and "rank 1 (b)" in silent[0].summary


def test_facts_from_a_real_report(tmp_path):
    from click.testing import CliRunner

    from ccdiag.commands.cli import cli

    r = CliRunner().invoke(cli, ["check", "--replay", str(DEGRADED), "--json"])
    facts = gather.facts_from_report(json.loads(r.output))
    assert facts["pcie_link GPU3 <- 0000:5c:00.0"] == "Gen5 x8"
    assert facts["driver_version"] and facts["gpu_usable"] == 7
    # the fabric's identity: each usable interface's MTU, each port's GID layout and IB subnet prefix
    assert facts["mtu ib0"] == 4092 and facts["mtu eno1"] == 1500
    assert facts["ib_gid_types mlx5_0/1"] == "0:IB/RoCE v1"
    assert facts["ib_gid_prefix mlx5_0/1"] == "fe80:0000:0000:0000"
    assert facts["gpu_data"] == "present"


def test_a_host_whose_mtu_gid_layout_or_partition_differs_is_named():
    """An MTU that differs drops large frames between the hosts (small messages still pass); a GID
    layout that differs makes one NCCL_IB_GID_INDEX wrong there; another partition key puts the
    port on another partition. Each is a failure naming the host and both values."""
    base = {"mtu eth0": 9000, "ib_gid_types mlx5_0/1": "0:IB/RoCE v1,1:RoCE v2,2:IB/RoCE v1,3:RoCE v2",
            "ib_pkeys mlx5_0/1": "0xffff", "gpu_data": "present"}
    facts = {f"h{i}": dict(base) for i in range(4)}
    facts["h1"]["mtu eth0"] = 1500
    facts["h2"]["ib_gid_types mlx5_0/1"] = "0:IB/RoCE v1,1:RoCE v2"  # no IPv4 address on the RoCE netdev
    facts["h3"]["ib_pkeys mlx5_0/1"] = "0x7fff"
    fs = {(f.check, f.component.name): f for f in gather.consistency(facts)}
    assert set(fs) == {("cluster.consistency.mtu eth0", "h1"), ("cluster.consistency.ib_gid_types mlx5_0/1", "h2"),
                       ("cluster.consistency.ib_pkeys mlx5_0/1", "h3")}
    assert all(f.status == "fail" for f in fs.values())
    assert "1500" in fs[("cluster.consistency.mtu eth0", "h1")].summary
    assert "9000" in fs[("cluster.consistency.mtu eth0", "h1")].summary


def test_partition_keys_are_read_per_port_through_the_door(tmp_path):
    """SYNTHESIZED tree in the kernel's sysfs format (Documentation/ABI/stable/sysfs-class-infiniband:
    ports/<n>/pkeys/<index>, "0x0000" for an unused entry)."""
    from ccdiag.cluster.pkeys import parse_pkey, pkey_facts
    from ccdiag.host.door import LiveHost

    base = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/pkeys"
    base.mkdir(parents=True)
    for i, v in enumerate(["0xffff", "0x8001", "0x0000", "0x0000"]):
        (base / str(i)).write_text(v + "\n")
    (tmp_path / "sys/class/infiniband/mlx5_1/ports/1").mkdir(parents=True)  # no pkeys directory
    assert pkey_facts(LiveHost(str(tmp_path))) == {"ib_pkeys mlx5_0/1": "0x8001,0xffff"}
    assert parse_pkey("0x0000") is None and parse_pkey("garbage") is None and parse_pkey("0x7FFF") == "0x7fff"
    assert pkey_facts(LiveHost(str(tmp_path / "nothing-here"))) == {}


def test_wrong_typed_fields_of_a_report_are_named_by_their_path():
    from ccdiag.cluster.reportfields import FieldError

    doc = {"probes": {"infiniband": {"data": {"devices": [{"name": "mlx5_0", "ports": "1"}]}}}}
    with pytest.raises(FieldError, match="devices/0/ports: not a list"):
        gather.facts_from_report(doc)
    with pytest.raises(FieldError, match="topology/links: not a list"):
        gather.facts_from_report({"topology": {"links": {"a": 1}}})
    assert gather.facts_from_report({"probes": {"nvml": {"data": None}}})["gpu_data"] == "missing"


@pytest.mark.mpi
@pytest.mark.netns
@pytest.mark.slow
def test_cluster_check_over_ranks_names_failing_host_and_a_hung_rank(tmp_path):
    from mpinet import NetnsCluster, netns_skip_reason, python_argv

    why = netns_skip_reason()
    if why:
        pytest.skip(why)
    with NetnsCluster(4) as c:
        for i, h in enumerate(c.hosts):
            shutil.copy(DEGRADED if i == 2 else HEALTHY, tmp_path / f"{h}.snap.tar.gz")
        pattern = str(tmp_path / "{host}.snap.tar.gz")
        rc, out, err, dt = c.run(c.mpirun_argv() + python_argv("cluster", "check", "--replay", pattern, "--budget",
                                                              "30", "--json", "--reports-dir", str(tmp_path / "r")), 60)
        assert rc == 1, err[-2000:]
        doc = json.loads(out[out.index("{"):])
        assert doc["verdict"]["failed_hosts"] == [c.hosts[2]]
        odd = {f["check"] for f in doc["findings"] if f["status"] != "pass" and f["component"]["name"] == c.hosts[2]}
        assert "cluster.consistency.gpu_usable" in odd and "cluster.host_check" in odd
        # the degraded host's own faults are its findings; the NCCL settings it would write are its peers'
        nccl = [f for f in doc["findings"] if f["check"] == "cluster.nccl_recommendation"]
        assert [f["status"] for f in nccl] == ["pass"], nccl
        assert sorted(os.listdir(tmp_path / "r")) == sorted(f"{h}.json" for h in c.hosts)

        # a rank that hangs before answering (held at a known point, then stopped): named within
        # the budget, no traceback
        budget = 15
        argv = c.mpirun_argv()
        argv[1:1] = ["-x", "CCDIAG_CLUSTER_STALL=3:30"]
        p = c.start(argv + python_argv("cluster", "check", "--replay", pattern, "--budget", str(budget),
                                       "--timeout", "5"))
        t0 = time.monotonic()
        pids = []
        while not pids and time.monotonic() - t0 < 30:  # mpirun starts slowly on a loaded machine
            pids = c.rank_pids(3, "cluster check")
            time.sleep(0.1)
        assert pids
        time.sleep(5.0)  # past MPI_Init (seconds on a loaded 2-core machine), sitting in the stall
        os.kill(pids[-1], signal.SIGSTOP)
        # the stopped rank never answers: ending at all, within a bound far below forever, is the
        # behaviour; the slack over the budget is for start-up on a loaded 2-core machine
        rc, out, err = c.finish(p, budget + 45)
        assert rc is not None and rc != 0
        assert time.monotonic() - t0 < budget + 45
        assert f"rank 3 ({c.hosts[3]}) did not answer by the deadline" in out, out + err[-2000:]
        assert "rank 1 did not" not in out + err and "rank 2 did not" not in out + err
        assert "Traceback" not in out + err


def test_an_unwritable_reports_dir_is_an_input_error(tmp_path):
    """Before any rank works: exit 2 naming the directory, never a run whose reports went nowhere."""
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = subprocess.run([sys.executable, "-m", "ccdiag", "cluster", "check", "--reports-dir", str(blocker / "r")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--reports-dir" in p.stderr and str(blocker) in p.stderr, p.stderr


@pytest.mark.parametrize("env, words", [({}, "needs at least 2 ranks under mpirun or srun"),
                                        ({"SLURM_NTASKS": "4"}, "srun --mpi=pmix")])
def test_one_rank_alone_refuses_to_report(env, words):
    """Started without a launcher (or by srun without PMI): one rank measures nothing between hosts,
    so it exits 3 saying why instead of printing a passing report."""
    import os
    import subprocess
    import sys

    pytest.importorskip("mpi4py")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM_", "PMIX"))}
    for argv in (["bench", "allreduce", "--sizes", "1M"], ["bench", "pairs", "--sizes", "1M"], ["cluster", "check"]):
        p = subprocess.run([sys.executable, "-m", "ccdiag", *argv], capture_output=True, text=True, timeout=120,
                           env={**clean, **env})
        assert p.returncode == 3 and words in p.stderr, (argv, p.stdout, p.stderr)
        assert "OK" not in p.stdout
