"""The escalation ladder, the remediation hook and the drain cap against a REAL single-node Slurm.

The cluster is the one ``tests/test_slurm.py`` starts (a private munged, slurmctld and slurmd in a
temporary directory), with nine more nodes in ``slurm.conf`` that no slurmd serves: they stand for
the rest of the fleet, and the test drains them with ccdiag's reasons to fill the cap. The health
check runs ``slurm/ccdiag-healthcheck.sh`` every 5 s with ``CCDIAG_HEALTH_ARGS`` naming a health
configuration whose remediation commands are a SYNTHESIZED stand-in that only records what it was
asked to do: nothing is reset or rebooted. Every process started here is stopped by PID.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from test_slurm import DEGRADED, HEALTHY, PROLOG, Cluster, _free_port, _missing_prerequisite, running_slurm

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FLEET = [f"ccdfake{i}" for i in range(1, 10)]
#: one root cause whose action is reset_gpu: GPU2's pending row remap in the degraded sample
ONE_ROOT = f"--replay {DEGRADED} --only gpu.remapped_rows"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    why = _missing_prerequisite()
    if why:
        pytest.skip(why)
    if not (DEGRADED.exists() and HEALTHY.exists()):
        pytest.skip("bundled samples not built yet")
    root = tmp_path_factory.mktemp("slurmfleet")
    for d in ("health", "textfile"):
        (root / d).mkdir()
    # the operator's remediation command, a stand-in that records its arguments and environment
    hook = root / "site-remedy"
    hook.write_text(f'#!/bin/sh\necho "$* ($CCDIAG_ACTION $CCDIAG_ROOT)" >> "{root}/remedies"\n')
    os.chmod(hook, 0o755)
    (root / "health.toml").write_text(f"""\
state_dir = "{root}/health"
textfile_dir = "{root}/textfile"
[cap]
max_out_fraction = 0.2
[remediation]
reset_gpu = ["{hook}", "reset_gpu", "{{node}}", "{{gpus}}"]
reboot = ["{hook}", "reboot", "{{node}}"]
service = ["{hook}", "service", "{{node}}", "{{reason}}"]
""")
    # the rest of the fleet: an address that resolves and a port no slurmd answers on
    fakes = "\n".join(f"NodeName={n} NodeAddr=127.0.0.1 Port={_free_port()} CPUs=1 State=UNKNOWN" for n in FLEET)
    with running_slurm(root, name="ccdiagfleet", extra_nodes=fakes, partition_nodes="ALL",
                       health_env=f'export CCDIAG_HEALTH_ARGS="--config {root}/health.toml"',
                       ready=lambda state, reason: state.startswith("idle") and "*" not in state) as c:
        yield c


def _undrain(fleet: Cluster, nodes: list[str]) -> None:
    """The stand-in nodes have no slurmd (down): clear their drain, leave them down."""
    for node in nodes:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=undrain"], env=fleet.env,
                       capture_output=True, timeout=10)


def _remedies(fleet: Cluster) -> list[str]:
    path = fleet.root / "remedies"
    return path.read_text().splitlines() if path.exists() else []


def _wait(fleet: Cluster, predicate, what: str, limit_s: float = 60.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(1.0)
    raise AssertionError(f"never happened: {what}\nhealth-check log:\n" + "\n".join(fleet.log_lines()[-30:]))


def _textfile(fleet: Cluster) -> str:
    path = fleet.root / "textfile" / "ccdiag-health.prom"
    return path.read_text() if path.exists() else ""


def test_above_the_cap_a_failing_node_is_reported_not_drained(fleet):
    """Two of ten nodes already out for ccdiag's reasons fill a 20 % cap: the failing node stays in
    service, the log says why and the textfile raises ccdiag_health_drain_held; once one of them is
    back, the failing node is drained."""
    for fake, reason in zip(FLEET[:2], ("ccdiag-hc: reboot xid.recent GPU6", "ccdiag-prolog: drain gpu.count node")):
        fleet.scontrol("update", f"nodename={fake}", "state=drain", f"reason={reason}")
    fleet.scontrol("update", f"nodename={FLEET[2]}", "state=drain", "reason=NHC: disk full")  # not ccdiag's
    try:
        before = len(fleet.log_lines())
        fleet.set_args(f"--replay {DEGRADED}")
        line = _wait(fleet, lambda: [x for x in fleet.log_lines()[before:] if "left in service" in x],
                     "a held failure")[-1]
        assert "drain cap reached: 2 of 10 nodes already out" in line and "cap 2" in line, line
        assert fleet.state()[0] == "idle"
        assert "ccdiag_health_drain_held 1.0" in _textfile(fleet)
        assert "ccdiag_health_fleet_nodes_out 2.0" in _textfile(fleet)
        # an administrator takes over one of them (another reason): ccdiag counts one node out
        fleet.scontrol("update", f"nodename={FLEET[0]}", "state=drain", "reason=RMA ticket 1234")
        state, reason = fleet.wait_for(lambda s, r: "drain" in s and r.startswith("ccdiag-hc:"), 45)
        assert reason.split()[1] == "service" and len(reason) <= 60  # the degraded sample's top rung
        assert "ccdiag_health_drain_held 0.0" in _textfile(fleet)
    finally:
        fleet.set_args(f"--replay {HEALTHY}")
        _undrain(fleet, FLEET[:3])
    fleet.wait_for(lambda s, r: s == "idle", 45)


def test_the_ladder_climbs_from_a_gpu_reset_to_a_reboot_to_service_by_the_operators_commands(fleet):
    """One root (a pending row remap: reset_gpu). Drained, then, once idle, the operator's reset runs;
    it does not hold (the stand-in changes nothing), so the reason climbs to reboot and the reboot
    command runs, then service; each command once. A pass resumes the node."""
    start = len(_remedies(fleet))
    # a fresh ladder: the root failed in the test before, and a root that returns after a pass climbs
    (fleet.root / "health" / "health.json").unlink(missing_ok=True)
    fleet.set_args(ONE_ROOT)
    try:
        state, reason = fleet.wait_for(lambda s, r: r.startswith("ccdiag-hc: reset_gpu gpu.remapped_rows GPU2"), 45)
        _wait(fleet, lambda: len(_remedies(fleet)) >= start + 1, "the reset command")
        state, reason = fleet.wait_for(lambda s, r: r.startswith("ccdiag-hc: reboot gpu.remapped_rows GPU2"), 45)
        state, reason = fleet.wait_for(lambda s, r: r.startswith("ccdiag-hc: service gpu.remapped_rows GPU2"), 45)
        _wait(fleet, lambda: len(_remedies(fleet)) >= start + 3, "the service command")
        time.sleep(11)  # two more health checks: no command runs a second time on the same rung
        done = _remedies(fleet)[start:]
        assert [d.split()[0] for d in done] == ["reset_gpu", "reboot", "service"], done
        assert done[0].startswith(f"reset_gpu {fleet.node} 2 (reset_gpu gpu.remapped_rows|GPU2)"), done[0]
        assert "ccdiag-hc: service gpu.remapped_rows GPU2" in done[2]
        log = "\n".join(fleet.log_lines())
        assert "remediation reset_gpu:" in log and "succeeded" in log
        prom = _textfile(fleet)
        assert 'ccdiag_remediation_steps_total{action="reset_gpu",outcome="ok"} 1.0' in prom
        assert 'ccdiag_health_ladder_action{check="gpu.remapped_rows",component="GPU2",root="gpu.remapped_rows|GPU2"} 5.0' in prom
    finally:
        fleet.set_args(f"--replay {HEALTHY}")
    fleet.wait_for(lambda s, r: s == "idle", 45)
    status = subprocess.run([sys.executable, "-m", "ccdiag", "health", "status", "--json", "--config",
                             str(fleet.root / "health.toml")], capture_output=True, text=True, timeout=60)
    import json

    record = json.loads(status.stdout)["ladder"]["gpu.remapped_rows|GPU2"]
    assert record["cleared"] >= record["last_failed"]  # the pass cleared it: a return starts a new incident


def test_the_prolog_holds_above_the_cap_and_lets_the_job_run(fleet, tmp_path):
    for fake in FLEET[:2]:
        fleet.scontrol("update", f"nodename={fake}", "state=drain", "reason=ccdiag-hc: drain env.shm node")
    wrapper = fleet.root / "ccdiag"
    env = dict(fleet.env, CCDIAG=str(wrapper), CCDIAG_ARGS=f"--replay {DEGRADED}", CCDIAG_DEFAULTS="/nonexistent",
               CCDIAG_PYTHON=sys.executable, SLURM_JOB_ID="45", SLURMD_NODENAME=fleet.node,
               CCDIAG_HEALTH_ARGS=f"--config {fleet.root / 'health.toml'}")
    try:
        proc = subprocess.run(["/bin/bash", str(PROLOG)], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        (line,) = [x for x in proc.stderr.splitlines() if "left in service and the job allowed" in x]
        assert "drain cap reached: 2 of 10" in line, proc.stderr
        assert fleet.state()[0] == "idle"
    finally:
        _undrain(fleet, FLEET[:2])


def test_the_idle_time_loop_drains_under_its_own_prefix_and_resumes_only_that(fleet, tmp_path):
    """``ccdiag health run`` with scheduler = "slurm" on the idle node: the failing check drains it
    under ``ccdiag-idle:``; the health check, passing meanwhile, leaves that drain alone; the loop's
    next pass resumes it."""
    config = tmp_path / "loop.toml"

    def write(sample) -> None:
        config.write_text(f'scheduler = "slurm"\nnode = "{fleet.node}"\nbench = false\nstate_dir = "{tmp_path}/state"\n'
                          f'gpu_devices = ["{tmp_path}/dev/nvidia[0-9]*"]\ncheck_args = ["--replay", "{sample}"]\n')

    def turn() -> dict:
        proc = subprocess.run([sys.executable, "-m", "ccdiag", "health", "run", "--force", "--json", "--config",
                               str(config)], env=fleet.env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        import json

        return json.loads(proc.stdout)

    fleet.set_args(f"--replay {HEALTHY}")
    fleet.wait_for(lambda s, r: s == "idle", 45)
    write(DEGRADED)
    try:
        result = turn()
        assert result["outcome"] == "fail" and result["decision"].startswith("drain|ccdiag-idle: service ")
        state, reason = fleet.wait_for(lambda s, r: "drain" in s and r.startswith("ccdiag-idle:"), 20)
        before = len(fleet.log_lines())
        _wait(fleet, lambda: any("left drained by someone else" in x for x in fleet.log_lines()[before:]),
              "the health check leaving the loop's drain alone")
        assert fleet.state()[1] == reason
        write(HEALTHY)
        result = turn()
        assert result["outcome"] == "pass" and result["decision"].startswith("resume|")
        fleet.wait_for(lambda s, r: s == "idle", 20)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={fleet.node}", "state=resume"], env=fleet.env,
                       capture_output=True, timeout=10)
