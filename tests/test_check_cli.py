"""``ccdiag check``: verdict line, failure lines, JSON report (validated against the schema), exit
codes, --only, --output, --env-file, --snapshot-on-fail. Replays the bundled samples."""

from __future__ import annotations

import json
import re
import pathlib

import pytest

from ccdiag import checks
from ccdiag.run.checkrun import evaluate, exit_code_for
from ccdiag.inputs.envfile import EnvFileError, parse_env_file
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.host.door import ReplayHost
from ccdiag.report.render import one_line, render_text, verdict_line
from ccdiag.report.document import validate

REPO = pathlib.Path(__file__).resolve().parent.parent
HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"

needs_samples = pytest.mark.skipif(not (HEALTHY.exists() and DEGRADED.exists()),
                                   reason="bundled samples not built (samples/make_samples.py)")


from cli_runner import run, unwrap  # noqa: E402


# -- pure pieces -----------------------------------------------------------------------------------
def _f(status: str, check: str = "x.y", **kw) -> Finding:
    return Finding(check, status, kw.pop("component", Component("node", "n")), kw.pop("summary", "s"), **kw)


@pytest.mark.parametrize("statuses, timed_out, strict, code", [
    ([], False, False, ExitCode.OK),
    ([PASS, SKIP], False, False, ExitCode.OK),
    ([SKIP], False, False, ExitCode.OK),  # a box without GPUs: skips are not failures
    ([PASS, WARN], False, False, ExitCode.OK),
    ([PASS, WARN], False, True, ExitCode.FAIL),
    ([PASS, UNKNOWN], False, False, ExitCode.UNEVALUATED),
    ([PASS], True, False, ExitCode.UNEVALUATED),
    ([FAIL, UNKNOWN], True, False, ExitCode.FAIL),  # a failure found before the deadline stands
    ([WARN, UNKNOWN], False, True, ExitCode.FAIL),
])
def test_exit_code_rule(statuses, timed_out, strict, code):
    assert exit_code_for([_f(s) for s in statuses], timed_out, strict) == code


def test_verdict_and_failure_line_format():
    gpu = Component("gpu", "GPU6", gpu=6, uuid="GPU-0a1b2c3d-0000-4000-8000-000000000006", bdf="0000:ba:00.0")
    lost = _f(FAIL, "gpu.lost", component=gpu, summary="lost on the bus",
              evidence=(Evidence("NVML error", "gpu_lost", "nvmlDeviceGetUUID(6)"),),
              remedy="Reboot the node. A reset rarely brings it back.")
    findings = [lost, _f(FAIL, "a.b"), _f(FAIL, "a.c"), _f(WARN, "w.x"), _f(PASS)]
    assert verdict_line(findings, ExitCode.FAIL, "hgx-01") == "FAIL: 3 failed, 1 warning (node hgx-01)"
    assert one_line(lost) == ("FAIL gpu.lost GPU6 (GPU-0a1b2c3d-0000-4000-8000-000000000006, 0000:ba:00.0) "
                              "lost on the bus [nvmlDeviceGetUUID(6): gpu_lost] -> reboot the node")
    text = render_text(findings, ExitCode.FAIL, "hgx-01")
    lines = text.splitlines()
    assert lines[0].startswith("FAIL: ") and lines[1] == ""
    assert lines[2] == "FAIL gpu.lost GPU6 (GPU-0a1b2c3d-0000-4000-8000-000000000006, 0000:ba:00.0)"
    assert lines[3] == "    lost on the bus"
    assert "    remedy:   Reboot the node. A reset rarely brings it back." in lines
    assert lines[-1] == "passed (1): x.y"
    assert verdict_line([_f(PASS), _f(SKIP)], ExitCode.OK, "n") == "OK: 0 failed, 1 passed, 1 skipped (node n)"
    assert verdict_line([_f(UNKNOWN)], ExitCode.UNEVALUATED, None, True) == \
        "UNKNOWN: 0 failed, 1 unknown, 0 passed (node unknown), deadline reached"


def test_verdict_counts_root_problems_with_the_folded_ones_beside():
    """One switch down with 32 links behind it is one failure, its consequences counted apart."""
    import dataclasses
    root = _f(FAIL, "nvswitch.links_down")
    links = [dataclasses.replace(_f(FAIL, "nvlink.down", component=Component("nvlink", f"GPU{i} NVLinks", gpu=i)),
                                 caused_by=root.key) for i in range(8)]
    warn = dataclasses.replace(_f(WARN, "w.x"), caused_by=root.key)
    assert verdict_line([root, *links, warn, _f(PASS)], ExitCode.FAIL, "n") == "FAIL: 1 failed (+9 folded) (node n)"


def test_on_a_terminal_the_report_ends_with_its_roots_and_the_verdict_and_folds_the_passed_list():
    """At 3 a.m. the details scroll by: the last lines a terminal shows are one line per root problem
    (status, action, check, component, how many follow) and the verdict again; piped output and
    --quiet keep their form (tests/test_terminal_text.py tries it in a real terminal)."""
    import dataclasses
    lost = _f(FAIL, "gpu.lost", component=Component("gpu", "GPU6", gpu=6), action="reboot")
    follows = [dataclasses.replace(_f(UNKNOWN, f"gpu.c{i}", component=lost.component), caused_by=lost.key)
               for i in range(3)]
    passes = [_f(PASS, f"check.number{i}") for i in range(40)]
    findings = [lost, _f(FAIL, "a.b"), *follows, _f(WARN, "w.x"), *passes]
    piped = render_text(findings, ExitCode.FAIL, "hgx-01", width=80).splitlines()
    term = render_text(findings, ExitCode.FAIL, "hgx-01", width=80, terminal=True).splitlines()
    verdict = "FAIL: 2 failed (+3 folded), 1 warning (node hgx-01)"
    assert piped[0] == term[0] == verdict and piped[-1] != verdict
    assert term[-6:] == ["",
                         "summary: 3 root problems, the node's action: reboot",
                         "  FAIL    reboot      gpu.lost GPU6 (+3)",
                         "  FAIL    drain       a.b n",
                         "  WARN    none        w.x n",
                         verdict]
    passed = [line for line in term if line.startswith("passed (40): ")]
    assert len(passed) == 1 and passed[0].endswith(" more checks") and len(passed[0]) <= 80
    assert term[term.index(passed[0]) + 1] == ""  # one line, not wrapped
    assert sum(1 for line in piped if line.startswith("      ")) >= 3  # piped: the whole list, wrapped
    quiet = render_text(findings, ExitCode.FAIL, "hgx-01", quiet=True, terminal=False).splitlines()
    assert quiet[0] == verdict and len(quiet) == 4
    healthy = render_text(passes, ExitCode.OK, "n", terminal=True).splitlines()
    assert healthy[-2:] == ["", "OK: 0 failed, 40 passed (node n)"]


def test_quiet_keeps_only_verdict_and_problems():
    text = render_text([_f(FAIL, "a.b"), _f(PASS), _f(SKIP)], ExitCode.FAIL, "n", quiet=True)
    assert text.splitlines() == ["FAIL: 1 failed (node n)", "FAIL a.b n s"]


@needs_samples
def test_quiet_piped_into_a_log_is_one_line_per_problem():
    """The Slurm prolog logs each line it reads as one syslog record: piped, a finding is never
    wrapped onto a second line (on a terminal it is, to the terminal's width)."""
    code, out, _ = run("check", "--quiet", "--replay", str(DEGRADED))
    assert code == ExitCode.FAIL
    lines = out.splitlines()
    assert lines[0].startswith("FAIL: ")
    assert len(lines) > 3 and all(re.match(r"(FAIL|WARN|UNKNOWN) \S+ ", line) for line in lines[1:]), lines
    assert max(len(line) for line in lines) > 100  # long findings were kept whole, not wrapped
    xid = [line for line in lines if line.startswith("FAIL xid.recent GPU6")]
    assert len(xid) == 1 and "fallen off the bus" in xid[0] and xid[0].endswith("reboot it"), xid


@pytest.mark.parametrize("text, env", [
    ("NCCL_IB_HCA=mlx5_0\n", {"NCCL_IB_HCA": "mlx5_0"}),
    ("# comment\n\nexport NCCL_SOCKET_IFNAME=ib0\n", {"NCCL_SOCKET_IFNAME": "ib0"}),
    ("NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'\n", {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}),
    ('NCCL_DEBUG="INFO"  \n', {"NCCL_DEBUG": "INFO"}),
    ('A="say \\"hi\\""\n', {"A": 'say "hi"'}),
    ("NCCL_P2P_LEVEL=NVL # why\n", {"NCCL_P2P_LEVEL": "NVL"}),
    ("EMPTY=\n", {"EMPTY": ""}),
])
def test_env_file_parsing(text, env):
    assert parse_env_file(text) == env


@pytest.mark.parametrize("text, line", [("just words\n", 1), ("A=1\n1BAD=2\n", 2), ("A='open\n", 1)])
def test_env_file_errors_name_the_line(text, line):
    with pytest.raises(EnvFileError, match=f"f:{line}:"):
        parse_env_file(text, "f")


# -- the command -----------------------------------------------------------------------------------
@needs_samples
def test_healthy_sample_passes():
    code, out, err = run("check", "--replay", str(HEALTHY))
    assert code == 0, out + err
    assert out.splitlines()[0].startswith("OK: 0 failed, ")
    assert "(node " in out.splitlines()[0]


@needs_samples
def test_degraded_sample_fails_with_failures_first():
    code, out, err = run("check", "--replay", str(DEGRADED))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("FAIL: ") and " failed" in lines[0]
    n_fail = int(lines[0].split()[1])
    assert n_fail >= 3
    # root-cause failures first (findings that follow from one are folded beneath it, "  + ...")
    headings = [line.split()[0] for line in lines[1:] if re.match(r"^(FAIL|WARN|UNKNOWN) \S+ ", line)]
    assert headings == sorted(headings, key=["FAIL", "UNKNOWN", "WARN"].index) or \
        headings[:headings.count("FAIL")] == ["FAIL"] * headings.count("FAIL")
    assert headings.count("FAIL") >= 3 and headings[0] == "FAIL"
    assert "    remedy:   " in out and "    evidence: " in out and "Traceback" not in err


@needs_samples
def test_each_finding_is_printed_once_in_lines_that_fit_100_columns():
    code, out, err = run("check", "--replay", str(DEGRADED))
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    headings = [line for line in lines if re.match(r"^(FAIL|WARN|UNKNOWN) [a-z_]+\.[a-z_.]+ ", line)]
    assert len(headings) == len(set(headings)) and headings[0].startswith("FAIL xid.recent GPU6")
    assert sum(line.startswith("FAIL pcie.acs") for line in lines) == 1
    # the evidence wraps, hanging under its label, and reads back whole
    long_path = "/sys/class/infiniband/mlx5_1/ports/1/counters/link_error_recovery"
    assert any(line == "              (" + long_path + ")" for line in lines)
    assert "evidence: link_error_recovery = 0 -> 2 (" + long_path + ")" in [" ".join(l.split()) for l in unwrap(out)]


@needs_samples
@pytest.mark.parametrize("sample, code", [(HEALTHY, 0), (DEGRADED, 1)])
def test_json_report_is_one_valid_document(sample, code, tmp_path):
    out_file = tmp_path / "r.json"
    rc, out, err = run("check", "--replay", str(sample), "--json", "--output", str(out_file))
    assert rc == code
    doc = json.loads(out)  # exactly one document on stdout
    validate(doc)
    assert doc["kind"] == "check"
    assert doc["verdict"]["exit_code"] == code
    assert doc["run"]["replayed_from"] == str(sample)
    assert doc["run"]["window_s"] > 0  # the samples carry a second epoch: counters judged by change
    assert json.loads(out_file.read_text()) == doc


@needs_samples
def test_replay_uses_recorded_window_without_sleeping():
    host = ReplayHost(str(DEGRADED))
    result = evaluate(host, window_s=0.0, deadline_s=30)
    assert result.later is not None
    assert result.window_s == float(host.meta()["window_s"])
    assert result.duration_s < result.window_s  # a run that slept the window would take longer
    assert result.exit_code == 1
    assert {"nvml", "infiniband", "pcie"} <= set(result.later)


@needs_samples
def test_only_restricts_checks_and_rejects_unknown_prefixes():
    code, out, _ = run("check", "--replay", str(DEGRADED), "--only", "pcie", "--json")
    doc = json.loads(out)
    assert doc["findings"] and all(f["check"].startswith("pcie") for f in doc["findings"])
    assert code == 1
    code, out, err = run("check", "--replay", str(DEGRADED), "--only", "nosuchcheck")
    assert code == 2 and "nosuchcheck" in err and out == ""


@needs_samples
def test_strict_turns_warnings_into_failure():
    # the degraded sample's link-flap check only warns (one flap in 24 h)
    code, out, _ = run("check", "--replay", str(DEGRADED), "--only", "ib.link_flaps")
    assert code == 0 and out.startswith("WARN: 0 failed, 1 warning")
    code, out, _ = run("check", "--replay", str(DEGRADED), "--only", "ib.link_flaps", "--strict")
    assert code == 1 and out.startswith("FAIL: 0 failed, 1 warning") and "--strict" in out.splitlines()[0]


@needs_samples
def test_env_file_replaces_the_recorded_environment(tmp_path):
    env = tmp_path / "nccl.env"
    env.write_text("# the job's settings\nexport NCCL_IB_HCA=mlx5_0\n")
    code, out, _ = run("check", "--replay", str(HEALTHY), "--env-file", str(env), "--json")
    doc = json.loads(out)
    assert doc["run"]["env_source"] == f"env file {env}"
    hca = [f for f in doc["findings"] if f["check"] == "env.ib_hca"]
    assert hca and all(f["status"] != "skip" for f in hca)  # judged, no longer "not set"
    bad = tmp_path / "bad.env"
    bad.write_text("NCCL_IB_HCA mlx5_0\n")
    code, out, err = run("check", "--replay", str(HEALTHY), "--env-file", str(bad))
    assert code == 2 and f"{bad}:1:" in err


def test_snapshot_on_fail_writes_a_replayable_snapshot(tmp_path, monkeypatch):
    """A live run over a small tree under --root with one synthesized failing check."""
    tree = tmp_path / "tree"
    (tree / "proc").mkdir(parents=True)
    (tree / "proc" / "uptime").write_text("100.0 50.0\n")

    def synthetic(ctx):
        yield Finding("test.synthetic_fail", FAIL, Component("node", "n"), "synthesized failure")

    checks.load_all()
    monkeypatch.setitem(checks.REGISTRY, "test.synthetic_fail",
                        checks.CheckSpec("test.synthetic_fail", synthetic, (), "synthesized"))
    snapdir = tmp_path / "snaps"
    code, out, err = run("check", "--root", str(tree), "--window", "0", "--timeout", "20",
                         "--snapshot-on-fail", str(snapdir))
    assert code == 1
    written = list(snapdir.glob("ccdiag-*.snap.tar.gz"))
    assert len(written) == 1
    assert str(written[0]) in err
    host = ReplayHost(str(written[0]))
    assert host.meta()["verdict"] == FAIL
    assert host.read_text("/proc/uptime").startswith("100.0")
    # the bundle carries the NCCL settings judged for the node (no RDMA NIC in this tree: no HCA list)
    nccl = host.meta()["nccl"]
    assert nccl["source"] == "node" and "NCCL_IB_HCA" not in nccl["settings"]
    assert {k["name"] for k in nccl["knobs"]} >= {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_TOPO_FILE"}


def test_snapshot_on_fail_writes_nothing_when_the_node_passes(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    snapdir = tmp_path / "snaps"
    code, out, err = run("check", "--root", str(tree), "--window", "0", "--snapshot-on-fail", str(snapdir),
                         "--only", "pcie")
    assert code != 1
    assert not snapdir.exists() or not list(snapdir.iterdir())


def test_bad_policy_file_is_exit_2_with_the_line(tmp_path):
    pol = tmp_path / "p.toml"
    pol.write_text("expected_gpu_count = 8\ngpu_model = \n")
    code, out, err = run("check", "--root", str(tmp_path), "--policy", str(pol))
    assert code == 2 and out == ""
    assert "line 2" in err and str(pol) in err and len(err.strip().splitlines()) == 1


def test_check_textfile_writes_prom_for_node_exporter(tmp_path):
    """`ccdiag check --textfile DIR` leaves one complete .prom file (and no temporary files)."""
    code, _, _ = run("check", "--replay", str(DEGRADED), "--textfile", str(tmp_path), "-q")
    assert code == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ccdiag.prom"]
    text = (tmp_path / "ccdiag.prom").read_text()
    assert "ccdiag_check_severity{" in text and 'check="gpu.lost"' in text
    code, _, err = run("check", "--replay", str(DEGRADED), "--textfile", str(tmp_path / "missing"))
    assert code == 2 and "textfile" in err


def test_failure_snapshot_replays_to_the_same_verdict(tmp_path):
    """Settings judged from --env-file travel in the failure snapshot, so the ticket replays alike."""
    env = tmp_path / "job.env"
    env.write_text("export NCCL_SOCKET_IFNAME=eth9   # no such interface here\n")
    code, out, err = run("check", "--env-file", str(env), "--snapshot-on-fail", str(tmp_path / "sof"),
                         "--window", "0", "--json")
    assert code == 1
    live = json.loads(out)
    [snap] = list((tmp_path / "sof").glob("*.snap.tar.gz"))
    code2, out2, _ = run("check", "--replay", str(snap), "--json")
    assert code2 == 1
    replayed = json.loads(out2)
    pick = lambda doc: sorted((f["check"], f["status"], f["summary"]) for f in doc["findings"]  # noqa: E731
                              if f["status"] in ("fail", "warn"))
    assert pick(replayed) == pick(live) and ("env.socket_ifname", "fail") in [p[:2] for p in pick(live)]
