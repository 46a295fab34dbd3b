"""The Slurm health check against a REAL single-node Slurm (slurmctld + slurmd + munged).

Everything runs inside a temporary directory: a private munged (own key, socket and PID file), a
slurm.conf on free ports, and ``HealthCheckProgram`` pointing at a wrapper that calls
``slurm/ccdiag-healthcheck.sh`` with ``CCDIAG_ARGS="--replay <sample>"``. The node must end DRAINED
with a ``ccdiag-hc:`` reason when the degraded sample is replayed, return to idle with the healthy one,
and keep an administrator's own drain reason untouched. Every process started here is stopped by
PID in the fixture's teardown.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from ccdiag.core.actions import ACTIONS

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = pathlib.Path(__file__).resolve().parent.parent

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
HEALTHCHECK = REPO / "slurm" / "ccdiag-healthcheck.sh"
PROLOG = REPO / "slurm" / "ccdiag-prolog.sh"


def _missing_prerequisite() -> str | None:
    for tool in ("slurmctld", "slurmd", "munged", "munge", "scontrol", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install slurmctld slurmd slurm-client munge)"
    if os.geteuid() != 0:
        return "a private slurmctld/slurmd needs root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class Cluster:
    """A running single-node cluster and the knobs the wrapper reads on every health check."""

    def __init__(self, root, node: str):
        self.root = root
        self.node = node
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))

    def set_args(self, args: str) -> None:
        (self.root / "args").write_text(args)

    def set_report_only(self, on: bool) -> None:
        (self.root / "report_only").write_text("1" if on else "0")

    def log_lines(self) -> list[str]:
        log = self.root / "log" / "hc.log"
        return log.read_text().splitlines() if log.exists() else []

    def state(self) -> tuple[str, str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E"], env=self.env,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        state, _, reason = out.partition("|")
        return state, reason

    def wait_for(self, predicate, timeout: float = 45.0) -> tuple[str, str]:
        end = time.monotonic() + timeout
        state = ("", "")
        while time.monotonic() < end:
            state = self.state()
            if predicate(*state):
                return state
            time.sleep(1.0)
        log = (self.root / "log" / "hc.log")
        raise AssertionError(f"node state {state} after {timeout}s; health-check log:\n"
                             f"{log.read_text() if log.exists() else '(none)'}")

    def scontrol(self, *args: str) -> None:
        subprocess.run(["scontrol", *args], env=self.env, check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def running_slurm(root: pathlib.Path, *, name: str, extra_nodes: str = "", partition_nodes: str | None = None,
                  health_env: str = "", ready=None):
    """A private munged, slurmctld and slurmd under ``root`` (its folders made here), their
    ``slurm.conf`` on free ports with this host as the one node slurmd serves (plus ``extra_nodes``
    lines), and ``HealthCheckProgram`` a wrapper that runs ``slurm/ccdiag-healthcheck.sh`` with the
    knobs :class:`Cluster` writes and the ``health_env`` lines. Yields the :class:`Cluster` once the
    node is ``ready`` (by default idle, drained or down, no longer unknown); stops every process by
    PID on the way out."""
    os.chmod(root, 0o755)
    for d in ("spool", "state", "log", "munge"):
        (root / d).mkdir(exist_ok=True)
    munge_dir = root / "munge"
    os.chmod(munge_dir, 0o711)
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = munge_dir / "sock"
    node = socket.gethostname().split(".")[0]
    procs: dict[str, subprocess.Popen] = {}
    env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
    try:
        procs["munged"] = subprocess.Popen(
            ["munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={munge_dir / 'pid'}", f"--log-file={munge_dir / 'log'}", f"--seed-file={munge_dir / 'seed'}"],
            stdout=subprocess.DEVNULL, stderr=open(root / "log" / "munged.out", "w"))
        for _ in range(50):
            if sock.exists():
                break
            time.sleep(0.1)
        else:
            pytest.fail("munged did not create its socket; see " + str(root / "log" / "munged.out"))
        (root / "slurm.conf").write_text(f"""\
ClusterName={name}
SlurmctldHost={node}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/ctld.pid
SlurmdPidFile={root}/d.pid
SlurmctldLogFile={root}/log/ctld.log
SlurmdLogFile={root}/log/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
HealthCheckProgram={root}/hc.sh
HealthCheckInterval=5
NodeName={node} CPUs={os.cpu_count() or 1} State=UNKNOWN
{extra_nodes}
PartitionName=p Nodes={partition_nodes or node} Default=YES State=UP
""")
        # ccdiag exactly as this test session imports it, whatever PATH the health check gets
        (root / "ccdiag").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ccdiag "$@"\n')
        (root / "hc.sh").write_text(f"""#!/bin/bash
# HealthCheckProgram wrapper: slurmd gives it an empty environment
export SLURM_CONF={root}/slurm.conf
export CCDIAG={root}/ccdiag CCDIAG_PYTHON={sys.executable} CCDIAG_LOG={root}/log/hc.log
export CCDIAG_DEFAULTS=/nonexistent
export CCDIAG_ARGS="$(cat {root}/args)"
export CCDIAG_REPORT_ONLY="$(cat {root}/report_only)"
{health_env}
exec {HEALTHCHECK}
""")
        os.chmod(root / "ccdiag", 0o755)
        os.chmod(root / "hc.sh", 0o755)
        c = Cluster(root, node)
        c.set_args(f"--replay {HEALTHY}")
        c.set_report_only(False)
        procs["slurmctld"] = subprocess.Popen(["slurmctld", "-D", "-c"], env=env, stdout=subprocess.DEVNULL,
                                              stderr=open(root / "log" / "ctld.out", "w"))
        time.sleep(1.0)
        procs["slurmd"] = subprocess.Popen(["slurmd", "-D", "-c"], env=env, stdout=subprocess.DEVNULL,
                                           stderr=open(root / "log" / "d.out", "w"))
        c.wait_for(ready or (lambda state, reason: state.startswith(("idle", "drain", "down")) and "*" not in state),
                   60)
        yield c
    finally:
        if "slurmctld" in procs and procs["slurmctld"].poll() is None:
            subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=15)
        for proc_name in ("slurmd", "slurmctld", "munged"):
            _stop(procs.get(proc_name))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = _missing_prerequisite()
    if why:
        pytest.skip(why)
    with running_slurm(tmp_path_factory.mktemp("slurm"), name="ccdiagtest") as c:
        yield c


@pytest.fixture(scope="module")
def samples():
    missing = [str(p) for p in (HEALTHY, DEGRADED) if not p.exists()]
    if missing:
        pytest.skip(f"bundled samples not built yet: {', '.join(missing)}")


def test_degraded_node_is_drained_then_resumed_when_healthy(samples, cluster):
    cluster.set_args(f"--replay {DEGRADED}")
    state, reason = cluster.wait_for(lambda s, r: "drain" in s and r.startswith("ccdiag-hc:"), 45)
    assert len(reason) <= 60
    # the reason names the node's action, then its root failure: a check id (dotted) and a component
    assert reason.split()[1] in ACTIONS and reason.split()[2].count(".") >= 1, reason  # action, then the check
    cluster.set_args(f"--replay {HEALTHY}")
    state, reason = cluster.wait_for(lambda s, r: s == "idle", 45)
    assert reason in ("", "none")


def test_someone_elses_drain_reason_is_kept(samples, cluster):
    cluster.set_args(f"--replay {HEALTHY}")
    cluster.wait_for(lambda s, r: s == "idle", 45)
    cluster.scontrol("update", f"nodename={cluster.node}", "state=drain", "reason=disk swap by ops")
    try:
        cluster.set_args(f"--replay {DEGRADED}")
        before = (cluster.root / "log" / "hc.log").read_text().count("\n")
        # wait until the health check has run at least twice on the degraded sample
        end = time.monotonic() + 30
        while time.monotonic() < end:
            lines = (cluster.root / "log" / "hc.log").read_text().splitlines()[before:]
            if sum("already drained by someone else" in x for x in lines) >= 2:
                break
            time.sleep(1.0)
        state, reason = cluster.state()
        assert "drain" in state
        assert reason == "disk swap by ops"
        # and a passing check does not resume a drain it did not make
        cluster.set_args(f"--replay {HEALTHY}")
        time.sleep(12)
        state, reason = cluster.state()
        assert "drain" in state and reason == "disk swap by ops"
    finally:
        cluster.scontrol("update", f"nodename={cluster.node}", "state=resume")
    cluster.wait_for(lambda s, r: s == "idle", 30)


def _wait_for_lines(cluster: Cluster, needle: str, count: int, after: int, timeout: float = 40.0) -> list[str]:
    end = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < end:
        lines = [x for x in cluster.log_lines()[after:] if needle in x]
        if len(lines) >= count:
            return lines
        time.sleep(1.0)
    raise AssertionError(f"{needle!r} logged {len(lines)} time(s), wanted {count}:\n" +
                         "\n".join(cluster.log_lines()[after:]))


def test_report_only_logs_what_it_would_do_and_never_drains_or_resumes(samples, cluster):
    """CCDIAG_REPORT_ONLY=1 (a roll-out): a failing node is logged with the drain it would get and
    stays in service; a node ccdiag drained earlier is logged as one it would resume, and stays
    drained."""
    cluster.set_args(f"--replay {HEALTHY}")
    cluster.wait_for(lambda s, r: s == "idle", 45)
    cluster.set_report_only(True)
    try:
        cluster.set_args(f"--replay {DEGRADED}")
        before = len(cluster.log_lines())
        lines = _wait_for_lines(cluster, "report only: check failed; would drain: ccdiag-hc: ", 2, before)
        reason = lines[-1].split("would drain: ", 1)[1]
        assert reason.split()[2].count(".") >= 1 and len(reason) <= 60, reason
        state, _ = cluster.state()
        assert state == "idle", state
        # a drain ccdiag made before the roll-out switched to report-only is not lifted either
        cluster.scontrol("update", f"nodename={cluster.node}", "state=drain", f"reason={reason}")
        cluster.set_args(f"--replay {HEALTHY}")
        before = len(cluster.log_lines())
        _wait_for_lines(cluster, "report only: check passed; would resume", 2, before)
        state, now = cluster.state()
        assert "drain" in state and now == reason
    finally:
        cluster.set_report_only(False)
        cluster.set_args(f"--replay {HEALTHY}")
    cluster.wait_for(lambda s, r: s == "idle", 45)  # back to enforcing: the passing check resumes it


@pytest.mark.parametrize("stage", ["prolog", "epilog"])
def test_report_only_prolog_and_epilog_let_the_job_run_and_never_call_scontrol(samples, tmp_path, stage):
    calls = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "scontrol $*" >> "{calls}"\n')
    os.chmod(scontrol, 0o755)
    wrapper = tmp_path / "ccdiag"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ccdiag "$@"\n')
    os.chmod(wrapper, 0o755)
    env = {"CCDIAG": str(wrapper), "CCDIAG_ARGS": f"--replay {DEGRADED}", "CCDIAG_DEFAULTS": "/nonexistent",
           "CCDIAG_PYTHON": sys.executable, "SCONTROL": str(scontrol), "SLURM_JOB_ID": "43",
           "CCDIAG_REPORT_ONLY": "1"}
    script = PROLOG if stage == "prolog" else PROLOG.parent / "ccdiag-epilog.sh"
    proc = subprocess.run(["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "FAIL:" in proc.stderr and f"report only: would drain: ccdiag-{stage}: " in proc.stderr
    assert ("would refuse the job" in proc.stderr) == (stage == "prolog")
    assert not calls.exists(), calls.read_text()


def test_a_node_the_prolog_drained_is_not_resumed_by_a_passing_health_check(samples, cluster, tmp_path):
    """The prolog drains with its own prefix; the health check, passing a few seconds later (it
    does not load the links the prolog loads), leaves that drain to an administrator."""
    cluster.set_args(f"--replay {HEALTHY}")
    cluster.wait_for(lambda s, r: s == "idle", 45)
    wrapper = cluster.root / "ccdiag"
    env = dict(cluster.env, CCDIAG=str(wrapper), CCDIAG_ARGS=f"--replay {DEGRADED}", CCDIAG_DEFAULTS="/nonexistent",
               CCDIAG_PYTHON=sys.executable, SLURM_JOB_ID="44", SLURMD_NODENAME=cluster.node)
    try:
        proc = subprocess.run(["/bin/bash", str(PROLOG)], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc.stderr
        state, reason = cluster.wait_for(lambda s, r: "drain" in s and r.startswith("ccdiag-prolog:"), 20)
        assert len(reason) <= 60 and reason.split()[1] in ACTIONS and reason.split()[2].count(".") >= 1, reason
        before = len(cluster.log_lines())
        lines = _wait_for_lines(cluster, "check passed; left drained by someone else", 2, before)
        assert reason in lines[-1]
        state, now = cluster.state()
        assert "drain" in state and now == reason
    finally:
        cluster.scontrol("update", f"nodename={cluster.node}", "state=resume")
    cluster.wait_for(lambda s, r: s == "idle", 30)


@pytest.mark.parametrize("which, expected_rc", [("degraded", 1), ("healthy", 0)])
def test_prolog_refuses_a_failing_node(samples, tmp_path, which, expected_rc):
    """The prolog needs no running Slurm: its contract is its exit status and its stderr lines."""
    sample = DEGRADED if which == "degraded" else HEALTHY
    wrapper = tmp_path / "ccdiag"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ccdiag "$@"\n')
    os.chmod(wrapper, 0o755)
    env = {"CCDIAG": str(wrapper), "CCDIAG_ARGS": f"--replay {sample}", "CCDIAG_DEFAULTS": "/nonexistent",
           "SLURM_JOB_ID": "42"}
    proc = subprocess.run(["/bin/bash", str(PROLOG)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == expected_rc, proc.stderr
    if expected_rc:
        assert "FAIL:" in proc.stderr and "job 42" in proc.stderr
        assert "refusing the job" in proc.stderr


@pytest.mark.parametrize("script", [PROLOG, PROLOG.parent / "ccdiag-healthcheck.sh", PROLOG.parent / "ccdiag-epilog.sh"])
def test_ccdiag_not_found_says_set_ccdiag_and_leaves_the_node(tmp_path, script):
    """With ccdiag on no PATH the scripts name the fix and touch nothing: no drain, job allowed."""
    calls = tmp_path / "calls"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("scontrol", "sinfo"):  # stand-ins that record any call (there must be none)
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        os.chmod(bindir / tool, 0o755)
    env = {"CCDIAG": "ccdiag-not-installed-here", "CCDIAG_DEFAULTS": "/nonexistent", "PATH": f"{bindir}:/usr/bin:/bin",
           "SCONTROL": str(bindir / "scontrol"), "SLURM_JOB_ID": "7", "CCDIAG_NODENAME": "n1", "SLURMD_NODENAME": "n1"}
    proc = subprocess.run(["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "ccdiag not found: set CCDIAG" in proc.stderr
    assert "bug" not in proc.stderr
    assert not calls.exists(), calls.read_text()
