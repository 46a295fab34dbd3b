"""The health loop's rules as tables: the escalation ladder, the drain cap, the decision from a
verdict, the validity window, the settings file and the node condition. Pure functions; the reports
are the bundled samples' real JSON reports (replayed snapshots) where a verdict is needed."""

from __future__ import annotations

import json

import pytest

from ccdiag.core.actions import ACTIONS, DRAIN, NONE, REBOOT, RESET_GPU, SERVICE
from ccdiag.health import act as A
from ccdiag.health import conditions as C
from ccdiag.health import ladder
from ccdiag.health.cap import CCDIAG_REASON, FleetCount, decide as cap_decide, limit_of, slurm_count
from ccdiag.health.config import CapConfig, HealthConfig, HealthConfigError, parse_health_config
from ccdiag.health.state import HealthState, check_digest, load_state, locked_state, save_state

DAY = 86400.0
GPU_ROOT = ladder.Root(key="xid.recent|GPU6|XID 79", check="xid.recent", component="GPU6", action=REBOOT, gpu=6)


def root(action: str, key: str = "gpu.row_remap|GPU2") -> ladder.Root:
    return ladder.Root(key=key, check=key.split("|")[0], component="GPU2", action=action, gpu=2)


# -- the ladder ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("action, rung", [(NONE, DRAIN), ("restart_job", DRAIN), (DRAIN, DRAIN),
                                          (RESET_GPU, RESET_GPU), (REBOOT, REBOOT), (SERVICE, SERVICE)])
def test_a_first_failure_starts_on_its_own_action_and_at_least_drain(action, rung):
    assert ladder.rung_for(root(action), None, 0.0, DAY).action == rung


@pytest.mark.parametrize("action, above", [(DRAIN, RESET_GPU), (RESET_GPU, REBOOT), (REBOOT, SERVICE),
                                           (SERVICE, SERVICE), (NONE, RESET_GPU)])
def test_each_rung_has_the_next_above_it_and_service_is_the_top(action, above):
    assert ladder.above(action) == above


def test_a_reset_that_did_not_hold_climbs_to_reboot_then_service():
    lad: dict = {}
    r = root(RESET_GPU)
    (first,) = ladder.record_failures(lad, [r], 100.0, DAY)
    assert first.action == RESET_GPU and not first.climbed
    # still failing, nothing done: stays
    (again,) = ladder.record_failures(lad, [r], 200.0, DAY)
    assert again.action == RESET_GPU and not again.climbed
    # the operator's reset ran, the root came back: reboot
    ladder.record_remedy(lad, r.key, RESET_GPU, 300.0, ok=True)
    (climbed,) = ladder.record_failures(lad, [r], 400.0, DAY)
    assert climbed.action == REBOOT and climbed.climbed and "reset_gpu did not hold" in climbed.why
    # the node rebooted, passed and went back into service, then the root returned: service
    assert ladder.record_pass(lad, 500.0, DAY) == [r.key]
    (top,) = ladder.record_failures(lad, [r], 600.0, DAY)
    assert top.action == SERVICE and top.climbed
    ladder.record_remedy(lad, r.key, SERVICE, 700.0, ok=True)
    (stays,) = ladder.record_failures(lad, [r], 800.0, DAY)
    assert stays.action == SERVICE and not stays.climbed
    assert [s["action"] for s in lad[r.key]["steps"]][:3] == [RESET_GPU, RESET_GPU, REBOOT]


def test_a_failed_remediation_command_does_not_climb():
    lad: dict = {}
    r = root(RESET_GPU)
    ladder.record_failures(lad, [r], 100.0, DAY)
    ladder.record_remedy(lad, r.key, RESET_GPU, 200.0, ok=False)
    (again,) = ladder.record_failures(lad, [r], 300.0, DAY)
    assert again.action == RESET_GPU and not again.climbed
    assert not ladder.hook_due(lad[r.key], RESET_GPU)  # it ran once on this rung: not again


def test_a_root_that_returns_after_the_window_starts_again_from_its_own_action():
    lad: dict = {}
    r = root(DRAIN)
    ladder.record_failures(lad, [r], 0.0, DAY)
    ladder.record_pass(lad, 10.0, DAY)
    (late,) = ladder.record_failures(lad, [r], 10.0 + 2 * DAY, DAY)
    assert late.action == DRAIN and not late.climbed


def test_a_root_never_goes_below_its_own_action():
    lad = {GPU_ROOT.key: {"action": DRAIN, "last_failed": 0.0}}
    assert ladder.rung_for(GPU_ROOT, lad[GPU_ROOT.key], 10.0, DAY).action == REBOOT


def test_roots_forgotten_after_two_windows_and_kept_before():
    lad = {"a|x": {"action": DRAIN, "last_failed": 0.0}, "b|y": {"action": DRAIN, "last_failed": 5 * DAY}}
    ladder.record_pass(lad, 5.5 * DAY, DAY)
    assert list(lad) == ["b|y"]


def test_rungs_are_most_disruptive_first():
    lad: dict = {}
    rungs = ladder.record_failures(lad, [root(DRAIN, "env.shm|node"), GPU_ROOT], 0.0, DAY)
    assert [r.action for r in rungs] == [REBOOT, DRAIN]


# -- the drain cap -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fraction, nodes, minimum, total, limit", [
    (0.1, None, 1, 100, 10), (0.1, None, 1, 5, 1), (0.1, 3, 1, 100, 3), (0.0, None, 0, 100, 0),
    (0.25, None, 1, 8, 2), (0.5, None, 2, 2, 2)])
def test_the_limit_is_the_fraction_bounded_by_the_counts(fraction, nodes, minimum, total, limit):
    assert limit_of(CapConfig(fraction, nodes, minimum), total) == limit


def test_above_the_cap_the_node_is_held_and_said_why():
    cap = CapConfig(max_out_fraction=0.25)
    count = FleetCount(total=8, out=2, out_nodes=("n1", "n2"), source="sinfo")
    dec = cap_decide(cap, count, "n3", already_out=False)
    assert not dec.allowed and "drain cap reached: 2 of 8" in dec.why and "cap 2" in dec.why
    assert cap_decide(cap, count, "n1", already_out=True).allowed  # its own reason is refreshed
    assert cap_decide(cap, FleetCount(8, 1, ("n1",), "sinfo"), "n3", already_out=False).allowed


def test_a_node_counted_out_is_not_counted_against_itself():
    cap = CapConfig(max_out_fraction=0.125)  # 1 of 8
    assert cap_decide(cap, FleetCount(8, 1, ("n3",), "sinfo"), "n3", already_out=False).allowed


@pytest.mark.parametrize("reason, ccdiags", [
    ("ccdiag-hc: reboot xid.recent GPU6", True), ("ccdiag-prolog: drain gpu.count node", True),
    ("ccdiag-epilog: drain x y", True), ("ccdiag-idle: service pcie.link_width GPU3 PCIe link", True),
    ("ccdiag: drain env.shm node", True), ("NHC: check_fs_mount /scratch", False), ("maintenance ccdiag:", False),
    ("Prolog error", False), ("ccdiagx: x", False)])
def test_ccdiags_reasons_are_told_from_others(reason, ccdiags):
    assert bool(CCDIAG_REASON.match(reason)) == ccdiags


def test_sinfo_lines_count_each_node_once_and_only_ccdiags_drains():
    lines = ["n1|idle|none", "n1|idle|none",  # one node in two partitions
             "n2|drained|ccdiag-hc: reboot xid.recent GPU6", "n3|draining|ccdiag-prolog: drain gpu.count node",
             "n4|drained|NHC: disk full", "n5|down*|ccdiag-hc: reboot x y", "n6|mixed|none"]
    count = slurm_count(lines)
    assert (count.total, count.out, count.out_nodes) == (6, 2, ("n2", "n3"))


# -- the decision from a verdict --------------------------------------------------------------------
def _finding(check, component, status, action, caused_by=None, gpu=None):
    return {"check": check, "status": status, "action": action, "caused_by": caused_by, "summary": f"{check} said so",
            "component": {"name": component, "kind": "gpu" if gpu is not None else "node", "gpu": gpu},
            "key": f"{check}|{component}"}


#: the shape of a failing `ccdiag check --json` report (SYNTHESIZED: two roots, one follow-on)
SYNTH_FAIL = {"verdict": {"status": "fail", "action": REBOOT, "reason": "ccdiag: reboot xid.recent GPU6 (+1)"},
              "findings": [_finding("xid.recent", "GPU6", "fail", REBOOT, gpu=6),
                           _finding("gpu.lost", "GPU6", "fail", REBOOT, caused_by="xid.recent|GPU6", gpu=6),
                           _finding("env.shm", "node", "fail", DRAIN),
                           _finding("gpu.temperature", "GPU1", "warn", NONE, gpu=1)]}
SYNTH_PASS = {"verdict": {"status": "pass", "action": NONE, "reason": None}, "findings": []}


@pytest.fixture(scope="module")
def reports(request):
    """A failing and a passing report; the slow tests use the bundled samples' real ones instead."""
    return {"healthy": SYNTH_PASS, "degraded": SYNTH_FAIL}


@pytest.fixture(scope="module")
def sample_reports(tmp_path_factory):
    """The bundled samples' real check reports (replayed snapshots)."""
    from cli_runner import run
    from conftest import REPO

    out = {}
    for name in ("healthy", "degraded"):
        path = tmp_path_factory.mktemp(name) / "r.json"
        code, _, err = run("check", "--replay", str(REPO / "samples" / f"hgx-h100-8gpu-{name}.snap.tar.gz"),
                           "--output", str(path), "--quiet")
        assert code in (0, 1), err
        out[name] = json.loads(path.read_text())
    return out


@pytest.mark.slow  # two replays of the samples
def test_the_samples_reports_decide_as_the_synthesized_ones(sample_reports):
    st = HealthState()
    dec = _decide(sample_reports["degraded"], st)
    verdict = sample_reports["degraded"]["verdict"]
    words = dec.reason.split()
    assert dec.verb == A.DRAIN_VERB and words[:3] == ["ccdiag-hc:", verdict["action"], verdict["reason"].split()[2]]
    roots = ladder.roots_of_report(sample_reports["degraded"])
    assert len(st.ladder) == len(roots) >= 2 and all(r.key.count("|") >= 1 for r in roots)
    assert _decide(sample_reports["healthy"], st, out=True, ours=True, now=2000.0).verb == A.RESUME


def _decide(report, st, cfg=None, **kw):
    args = dict(prefix="ccdiag-hc:", node="n1", out=False, ours=False, idle_out=False,
                count=lambda: FleetCount(10, 0, (), "sinfo"), now=1000.0)
    args.update(kw)
    return A.decide(report, st, cfg or HealthConfig(), **args)


def test_a_failure_drains_with_the_rung_the_root_and_its_count(reports):
    st = HealthState()
    dec = _decide(reports["degraded"], st)
    assert dec.verb == A.DRAIN_VERB and dec.cap is not None and dec.cap.allowed
    verdict = reports["degraded"]["verdict"]
    # the report's own reason, under the caller's prefix, the ladder's rung first
    words = dec.reason.split()
    assert words[0] == "ccdiag-hc:" and words[1] == verdict["action"] and len(dec.reason) <= 60
    assert verdict["reason"].split()[2] == words[2]  # the same root check
    assert sorted(st.ladder) == ["env.shm|node", "xid.recent|GPU6"]  # roots only, not the lost GPU
    assert st.cap["held"] is False and st.cap["total"] == 10
    assert A.Decision.line(dec).startswith("drain|ccdiag-hc: ")


def test_above_the_cap_a_failure_is_held_and_counted(reports):
    st = HealthState()
    dec = _decide(reports["degraded"], st, count=lambda: FleetCount(10, 1, ("n9",), "sinfo"),
                  cfg=HealthConfig(cap=CapConfig(max_out_fraction=0.1)))
    assert dec.verb == A.HOLD and "drain cap reached" in dec.line() and st.cap["held"] is True


def test_a_fleet_that_cannot_be_counted_drains_as_before_and_says_the_cap_was_not_kept(reports):
    def broken():
        raise RuntimeError("sinfo not found on PATH")

    dec = _decide(reports["degraded"], HealthState(), count=broken)
    assert dec.verb == A.DRAIN_VERB and any("could not be kept" in n and "sinfo not found" in n for n in dec.notes)
    st = HealthState()
    dec = _decide(reports["degraded"], st, count=None)
    assert dec.verb == A.DRAIN_VERB and any("does not apply" in n for n in dec.notes)
    assert st.cap["held"] is False


def test_a_node_out_for_someone_else_is_left_alone(reports):
    dec = _decide(reports["degraded"], HealthState(), out=True, ours=False, idle_out=True,
                  cfg=HealthConfig(remediation={SERVICE: ("/bin/true",)}))
    assert dec.verb == A.KEEP and dec.hook is None


def test_the_hook_is_due_only_once_the_node_is_out_and_idle(reports):
    action = reports["degraded"]["verdict"]["action"]
    cfg = HealthConfig(remediation={action: ("/bin/true", "{node}", "{gpus}")})
    st = HealthState()
    busy = _decide(reports["degraded"], st, cfg, out=True, ours=True, idle_out=False)
    assert busy.verb == A.DRAIN_VERB and busy.hook is None and any("waits until no job" in n for n in busy.notes)
    idle = _decide(reports["degraded"], st, cfg, out=True, ours=True, idle_out=True)
    assert idle.hook == action and idle.cap is None  # already out: no cap question
    result = A.run_due_hook(idle, cfg, st, "n1", 1001.0)
    assert result is not None and result.outcome == "ok" and result.argv[1] == "n1"
    assert st.steps[action]["ok"] == 1
    again = _decide(reports["degraded"], st, cfg, out=True, ours=True, idle_out=True, now=1002.0)
    # the step ran and the root is still there: the rung above (its own command is not configured),
    # or at the top the same rung, whose command does not run a second time for the same incident
    assert again.rung.action == ladder.above(action)
    assert again.hook is None


def test_at_the_top_a_command_runs_once_per_incident():
    lad: dict = {}
    r = root(SERVICE)
    ladder.record_failures(lad, [r], 100.0, DAY)
    assert ladder.hook_due(lad[r.key], SERVICE)
    ladder.record_remedy(lad, r.key, SERVICE, 200.0, ok=True)
    for t in (300.0, 400.0):  # still failing after the ticket: no second ticket
        (rung,) = ladder.record_failures(lad, [r], t, DAY)
        assert rung.action == SERVICE and not ladder.hook_due(lad[r.key], SERVICE)
    ladder.record_pass(lad, 500.0, DAY)  # back in service, then it returns: a new incident
    ladder.record_failures(lad, [r], 600.0, DAY)
    assert ladder.hook_due(lad[r.key], SERVICE)


def test_a_pass_resumes_only_its_own_drain_and_clears_the_ladder(reports):
    st = HealthState()
    _decide(reports["degraded"], st)
    assert _decide(reports["healthy"], st, out=True, ours=True, now=2000.0).verb == A.RESUME
    assert all(r.get("cleared") == 2000.0 for r in st.ladder.values())
    assert _decide(reports["healthy"], HealthState(), out=True, ours=False).verb == A.KEEP
    assert _decide(reports["healthy"], HealthState()).verb == A.NOTHING


def test_no_verdict_changes_nothing():
    dec = _decide({"verdict": {"status": "unknown"}}, HealthState(), out=True, ours=True)
    assert dec.verb == A.KEEP and "no verdict" in dec.line()


# -- the validity window -------------------------------------------------------------------------------
def test_a_pass_holds_for_its_window_under_the_same_policy_only(tmp_path):
    policy = tmp_path / "fleet.toml"
    policy.write_text("expected_gpu_count = 8\n")
    digest = check_digest(["--replay", "x", "--policy", str(policy), "--timeout", "120"])
    st = HealthState()
    st.record_pass(1000.0, 600.0, "check --bench quick", digest)
    assert st.valid_pass(1500.0, check_digest(["--policy", str(policy)]))[0]
    ok, why = st.valid_pass(1600.0, digest)
    assert not ok and "ran out" in why
    policy.write_text("expected_gpu_count = 4\n")
    ok, why = st.valid_pass(1500.0, check_digest(["--policy", str(policy)]))
    assert not ok and "another policy" in why
    assert not st.valid_pass(1500.0, check_digest(["--policy", str(policy), "--strict"]))[0]
    st.invalidate(1200.0)
    assert not st.valid_pass(1300.0, None)[0] and st.valid_until == 1200.0


def test_the_state_survives_a_round_trip_and_a_corrupt_file_starts_afresh(tmp_path):
    path = str(tmp_path / "health.json")
    with locked_state(path) as st:
        st.count_run("pass")
        st.record_pass(5.0, 10.0, "check", None)
        st.ladder["a|b"] = {"action": DRAIN, "last_failed": 1.0}
    again = load_state(path)
    assert again.runs == {"pass": 1} and again.valid_until == 15.0 and again.ladder["a|b"]["action"] == DRAIN
    (tmp_path / "health.json").write_text("{not json")
    fresh = load_state(path)
    assert fresh.problem and "not JSON" in fresh.problem and fresh.runs == {}
    save_state(path, HealthState())
    assert json.loads((tmp_path / "health.json").read_text())["version"] == 1


# -- the settings --------------------------------------------------------------------------------------
def test_the_settings_file_is_read_with_every_table():
    cfg = parse_health_config("""
cadence = 1800
validity = 7200
bench = false
check_args = ["--policy", "/etc/ccdiag/fleet.toml"]
scheduler = "slurm"
[cap]
max_out_fraction = 0.05
max_out_nodes = 4
[remediation]
reset_gpu = ["/usr/local/sbin/site-reset-gpu", "{gpus}"]
reboot = "/usr/local/sbin/site-reboot {node}"
timeout = 120
[evidence]
bug_report = true
max_bytes = 1000000
[kubernetes]
taint = true
""", "h.toml")
    assert cfg.cadence_s == 1800 and cfg.validity_s == 7200 and not cfg.bench and cfg.scheduler == "slurm"
    assert cfg.cap.max_out_fraction == 0.05 and cfg.cap.max_out_nodes == 4
    assert cfg.remediation[REBOOT] == ("/usr/local/sbin/site-reboot", "{node}") and cfg.remediation_timeout_s == 120
    assert cfg.evidence.bug_report and cfg.evidence.max_bytes == 1000000 and cfg.kubernetes.taint


@pytest.mark.parametrize("text, said", [
    ("cadnce = 60", "unknown key 'cadnce'"),
    ("cadence = 10", "cadence must be at least 60"),
    ("scheduler = 'pbs'", "scheduler must be one of none, slurm, kubernetes"),
    ("[cap]\nmax_out_fraction = 1.5", "cap.max_out_fraction must be a fraction"),
    ("[cap]\nmax_out = 3", "unknown key cap.'max_out'"),
    ("[remediation]\nreboot_node = ['x']", "the ladder's rungs"),
    ("[remediation]\nreboot = ['x', '{host}']", "unknown placeholder {host}"),
    ("[remediation]\nreboot = []", "must name a command"),
    ("[kubernetes]\ncondition = 'Ccdiag Healthy'", "must be one word"),
    ("bench = 'yes'", "bench must be true or false"),
])
def test_a_bad_setting_is_named_with_its_file(text, said):
    with pytest.raises(HealthConfigError) as exc:
        parse_health_config(text, "h.toml")
    assert str(exc.value).startswith("h.toml") and said in str(exc.value)


# -- the node condition --------------------------------------------------------------------------------
def test_the_condition_keeps_its_transition_time_while_its_status_holds():
    first = C.passed("CcdiagHealthy", 1000.0, 2000.0, "check", None)
    assert first["status"] == "True" and first["reason"] == "ChecksPassed"
    assert first["lastTransitionTime"] == first["lastHeartbeatTime"] == C.rfc3339(1000.0)
    again = C.passed("CcdiagHealthy", 1500.0, 2500.0, "check", first)
    assert again["lastTransitionTime"] == C.rfc3339(1000.0) and again["lastHeartbeatTime"] == C.rfc3339(1500.0)
    down = C.failed("CcdiagHealthy", REBOOT, "xid.recent GPU6", "XID 79", 2, "first failure", 1600.0, again)
    assert down["status"] == "False" and down["reason"] == "RebootRequired"
    assert down["lastTransitionTime"] == C.rfc3339(1600.0) and "(+2 other root causes)" in down["message"]
    held = C.held("CcdiagHealthy", REBOOT, "xid.recent GPU6", "XID 79", "drain cap reached", 1700.0, down)
    assert held["status"] == "Unknown" and held["reason"] == "DrainCapReached" and held["message"].startswith("would be False")


def test_every_rung_has_a_reason_word():
    for action in ACTIONS:
        if action in ladder.LADDER:
            assert C.RUNG_REASONS[action].isalnum() and C.RUNG_REASONS[action][0].isupper()


def test_ccdiags_taint_is_set_and_removed_without_touching_others():
    theirs = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    ts = C.with_taint([theirs], "ccdiag/unhealthy", REBOOT)
    assert ts == [theirs, {"key": "ccdiag/unhealthy", "value": REBOOT, "effect": "NoSchedule"}]
    assert C.with_taint(ts, "ccdiag/unhealthy", SERVICE)[-1]["value"] == SERVICE and len(C.with_taint(ts, "ccdiag/unhealthy", SERVICE)) == 2
    assert C.without_taint(ts, "ccdiag/unhealthy") == [theirs]


# -- the pre-job reuse, the Slurm words, the act command ---------------------------------------------------
def test_reuse_needs_a_valid_pass_under_the_same_policy(tmp_path):
    from ccdiag.health.reuse import reusable_pass

    path = str(tmp_path / "health.json")
    assert not reusable_pass(path, None, None, False).ok
    with locked_state(path) as st:
        st.record_pass(1000.0, 600.0, "check --bench quick", check_digest([]))
    ok = reusable_pass(path, None, None, False, now=1200.0)
    assert ok.ok and "reusing the health loop's pass" in ok.line() and ok.to_json()["mode"] == "check --bench quick"
    late = reusable_pass(path, None, None, False, now=1700.0)
    assert not late.ok and late.line().startswith("no pass to reuse (the last pass ran out at")
    assert not reusable_pass(path, None, None, True, now=1200.0).ok  # --strict judges otherwise


def test_slurm_words():
    from ccdiag.health.slurm import NodeState, clean_reason

    assert NodeState("drained", "x").idle_drained and not NodeState("draining", "x").idle_drained
    assert NodeState("draining", "x").drained and not NodeState("idle", "").drained
    assert clean_reason('ccdiag-hc: "quoted"  reason') == "ccdiag-hc: quoted reason"
    assert len(clean_reason("x" * 100)) == 60 and clean_reason("x" * 100).endswith("~")


def test_act_prints_one_decision_line_for_the_slurm_scripts(tmp_path):
    from cli_runner import run

    report = tmp_path / "r.json"
    report.write_text(json.dumps(SYNTH_FAIL))
    args = ("health", "act", "--report", str(report), "--state-dir", str(tmp_path / "s"), "--node", "n1", "--no-cap")
    code, out, err = run(*args, "--node-state", "idle")
    assert code == 0 and out.strip() == "drain|ccdiag-hc: reboot xid.recent GPU6 (+1)"
    code, out, err = run(*args, "--node-state", "drained", "--node-reason", "NHC: disk full")
    assert out.strip().startswith("keep|") and "already out for another reason" in out
    report.write_text(json.dumps(SYNTH_PASS))
    code, out, err = run(*args, "--node-state", "drained", "--node-reason", "ccdiag-hc: reboot xid.recent GPU6 (+1)")
    assert out.strip() == "resume|passed; cleared env.shm|node, xid.recent|GPU6 (a new failure climbs a rung)"
    report.write_text("{}")
    code, out, err = run(*args)
    assert code == 2 and "not a `ccdiag check` JSON report" in err


@pytest.mark.slow  # promtool, a child process
def test_the_health_textfile_passes_promtool(tmp_path):
    import shutil
    import subprocess

    from ccdiag.health.metrics import write

    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed")
    st = HealthState(last_run={"at": 2.0, "outcome": "pass"}, runs={"pass": 3, "yielded": 1}, last_pass=2.0,
                     valid_until=602.0, cap={"held": False, "total": 8, "out": 0, "limit": 1, "source": "sinfo"})
    st.count_step("reset_gpu", "ok", 1.0)
    path = write(str(tmp_path), st)
    res = subprocess.run(["promtool", "check", "metrics"], input=open(path, "rb").read(), capture_output=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
