"""Waivers: one check on one component excused until a date, with who and why.

The rule (ccdiag/checks/waiving.py) is tried on findings linked by the real root-cause table
(ccdiag/checks/causes.py): a port that is down with its kernel-log flaps and the GPU whose nearest
NIC it is, and an XID 79 with the lost GPU and the node's GPU count. The findings are written here
in the shape the checks give them (SYNTHESIZED); the end-to-end tests replay the bundled degraded
sample (itself synthesized from real facts, see samples/make_samples.py), whose faults include
``mlx5_4 port 1`` DOWN and GPU6 lost after an XID 79.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import pathlib

import pytest

from ccdiag.checks.causes import drain_reason, link_causes, node_action, ordered_roots
from ccdiag.checks.waiving import LAPSED, LAPSING, IN_FORCE, apply_waivers
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WAIVED, WARN, Component, Finding, verdict_status
from ccdiag.inputs.policy import DEFAULT_POLICY, PolicyError, parse_policy, to_toml
from ccdiag.inputs.waivers import lapse_time, parse_waiver
from ccdiag.run.checkrun import exit_code_for

REPO = pathlib.Path(__file__).resolve().parent.parent
DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
#: the degraded sample's recording time (2025-01-01T12:00:00Z): the time its waivers are judged at
SAMPLE_NOW = 1735732800.0
DAY = 86400.0
NOW = 1_800_000_000.0

PORT = Component("ib_port", "mlx5_4 port 1", bdf="0000:9b:00.0", device="mlx5_4", port=1)
GPU4 = Component("gpu", "GPU4", gpu=4, uuid="GPU-c0a28392-0013-51a3-ad0e-84ccb9fe501a", bdf="0000:9a:00.0")
GPU6 = Component("gpu", "GPU6", gpu=6, bdf="0000:ba:00.0")
NODE = Component("node", "node")


def node_findings() -> list[Finding]:
    """Two roots with their follow-ons, linked by the real cause table (SYNTHESIZED findings)."""
    return link_causes([
        Finding("ib.port_state", FAIL, PORT, "mlx5_4 port 1 is DOWN / Polling"),
        Finding("ib.link_flaps", WARN, PORT, "link down lines in the kernel log"),
        Finding("ib.gpudirect", WARN, GPU4, "GPU4's nearest usable NIC is across the CPU",
                details={"inactive_nic": "mlx5_4"}),
        Finding("ib.counters", PASS, PORT, "no error counter moved"),
        Finding("xid.recent", FAIL, GPU6, "XID 79 on GPU6", details={"xid": 79}, subject="XID 79", action="reboot"),
        Finding("gpu.lost", FAIL, GPU6, "GPU6 lost"),
        Finding("gpu.ecc", UNKNOWN, GPU6, "not read: GPU lost"),
        Finding("gpu.count", FAIL, NODE, "7 GPUs of 8"),
        Finding("pcie.link_width", PASS, Component("pcie_link", "GPU4 PCIe link", gpu=4, bdf="0000:9a:00.0"), "x16"),
    ])


def waiver(check="ib.port_state", component="mlx5_4 port 1", until=NOW + 10 * DAY, **kw):
    stamp = dt.datetime.fromtimestamp(until, dt.timezone.utc).isoformat() if isinstance(until, float) else until
    return parse_waiver({"check": check, "component": component, "until": stamp, "by": "alice",
                         "reason": "cable on order (OPS-1234)", **kw})


def by_key(findings):
    return {f.key: f for f in findings}


def test_the_causes_link_as_the_rule_expects():
    k = by_key(node_findings())
    assert k["ib.link_flaps|mlx5_4 port 1"].caused_by == "ib.port_state|mlx5_4 port 1"
    assert k["ib.gpudirect|GPU4"].caused_by == "ib.port_state|mlx5_4 port 1"
    assert k["gpu.count|node"].caused_by == k["gpu.lost|GPU6"].caused_by == "xid.recent|GPU6|XID 79"


# -- the rule ---------------------------------------------------------------------------------------
def test_a_waived_root_takes_its_follow_ons_on_the_same_component_and_never_another():
    out, outcomes = apply_waivers(node_findings(), [waiver()], now=NOW)
    k = by_key(out)
    port = k["ib.port_state|mlx5_4 port 1"]
    assert port.status == WAIVED and port.waived["status"] == FAIL and port.waived["with"] is None
    assert port.waived["by"] == "alice" and port.waived["reason"] == "cable on order (OPS-1234)"
    assert port.waived["action"] == "drain"  # what it would ask for; waived, it asks for nothing
    flaps = k["ib.link_flaps|mlx5_4 port 1"]
    assert flaps.status == WAIVED and flaps.waived["with"] == port.key and flaps.waived["status"] == WARN
    # GPU4 is another component: its detour is not hidden, and it stands as a root of its own
    gpu4 = k["ib.gpudirect|GPU4"]
    assert gpu4.status == WARN and gpu4.caused_by is None and gpu4.details["follows_waived"] == port.key
    assert k["ib.counters|mlx5_4 port 1"].status == PASS  # a pass is never touched
    assert outcomes[0].state == IN_FORCE and set(outcomes[0].waived) == {port.key, flaps.key}
    assert outcomes[0].matched == 1  # ib.port_state on that port: one check on one component
    # the other root still fails the node; the waived one is in no drain reason or action
    assert exit_code_for(out) == 1 and "ib.port_state" not in drain_reason(out)
    assert node_action(out) == "reboot"


def test_waiving_the_lost_gpu_never_waives_the_node_gpu_count():
    out, _ = apply_waivers(node_findings(), [waiver("xid.recent", "GPU6")], now=NOW)
    k = by_key(out)
    assert k["xid.recent|GPU6|XID 79"].status == WAIVED
    assert k["gpu.lost|GPU6"].status == k["gpu.ecc|GPU6"].status == WAIVED  # the same GPU, the same event
    count = k["gpu.count|node"]
    assert count.status == FAIL and count.caused_by is None
    assert exit_code_for(out) == 1
    assert [f.key for f in ordered_roots(out) if f.status == FAIL] == ["ib.port_state|mlx5_4 port 1", "gpu.count|node"]


def test_a_waived_failure_alone_does_not_fail_the_node():
    findings = [f for f in node_findings() if f.component.name in ("mlx5_4 port 1",)]
    assert exit_code_for(findings) == 1
    out, _ = apply_waivers(findings, [waiver()], now=NOW)
    assert exit_code_for(out) == 0 and exit_code_for(out, strict=True) == 0
    assert verdict_status(out) == PASS and drain_reason(out) is None and node_action(out) == "none"


def test_a_waiver_never_covers_another_check_on_the_same_component():
    findings = link_causes([Finding("ib.port_state", FAIL, PORT, "down"),
                            Finding("ib.rate", FAIL, PORT, "trained at 200 of 400 Gb/s")])
    out, _ = apply_waivers(findings, [waiver("ib.rate")], now=NOW)
    assert {f.check: f.status for f in out} == {"ib.port_state": FAIL, "ib.rate": WAIVED}


@pytest.mark.parametrize("name, covers", [
    ("GPU4", True),
    ("GPU-C0A28392-0013-51A3-AD0E-84CCB9FE501A", True),  # the UUID, in any case
    ("00000000:9A:00.0", True),  # NVML's spelling of the PCI address
    ("9a:00.0", True),
    ("GPU 4", False),
    ("GPU40", False),
    ("0000:9a:00.1", False),
])
def test_a_gpu_is_named_by_name_uuid_or_pci_address(name, covers):
    assert waiver("ib.gpudirect", name).covers("ib.gpudirect", GPU4) is covers


def test_a_uuid_names_the_gpu_itself_not_its_links():
    link = Component("nvlink", "GPU4 NVLink 7", gpu=4, uuid=GPU4.uuid, bdf=GPU4.bdf, link=7)
    assert not waiver("nvlink.down", GPU4.uuid).covers("nvlink.down", link)
    assert waiver("nvlink.down", "GPU4 NVLink 7").covers("nvlink.down", link)


def test_a_subject_narrows_a_waiver_to_one_event():
    findings = [Finding("xid.recent", FAIL, GPU6, "XID 79", subject="XID 79", details={"xid": 79}),
                Finding("xid.recent", FAIL, GPU6, "XID 48", subject="XID 48", details={"xid": 48})]
    out, _ = apply_waivers(findings, [waiver("xid.recent", "GPU6", subject="XID 79")], now=NOW)
    assert {f.subject: f.status for f in out} == {"XID 79": WAIVED, "XID 48": FAIL}


# -- time ---------------------------------------------------------------------------------------------
def test_a_date_covers_that_whole_day_in_utc():
    text, at = lapse_time(dt.date(2026, 12, 4))
    assert text == "2026-12-04" and at == calendar.timegm((2026, 12, 5, 0, 0, 0))
    assert lapse_time("2026-12-04T18:00:00+02:00")[1] == calendar.timegm((2026, 12, 4, 16, 0, 0))
    assert lapse_time("2026-12-04T18:00:00Z")[1] == calendar.timegm((2026, 12, 4, 18, 0, 0))
    assert lapse_time(dt.datetime(2026, 12, 4, 18, 0))[1] == calendar.timegm((2026, 12, 4, 18, 0, 0))  # no offset: UTC


def test_a_waiver_lapsing_soon_still_covers_and_says_so():
    out, outcomes = apply_waivers(node_findings(), [waiver(until=NOW + 2 * DAY)], now=NOW, warn_s=3 * DAY)
    port = by_key(out)["ib.port_state|mlx5_4 port 1"]
    assert port.status == WAIVED and port.waived["lapsing"] and port.waived["lapses_in_s"] == 2 * DAY
    assert outcomes[0].state == LAPSING
    assert not [f for f in out if f.check == "policy.waiver"]  # a notice, not a warning (--strict would fail)
    _, outcomes = apply_waivers(node_findings(), [waiver(until=NOW + 4 * DAY)], now=NOW, warn_s=3 * DAY)
    assert outcomes[0].state == IN_FORCE


def test_a_lapsed_waiver_covers_nothing_and_raises_a_warning():
    out, outcomes = apply_waivers(node_findings(), [waiver(until=NOW - 3 * DAY)], now=NOW)
    k = by_key(out)
    assert k["ib.port_state|mlx5_4 port 1"].status == FAIL
    assert k["ib.gpudirect|GPU4"].caused_by == "ib.port_state|mlx5_4 port 1"  # folded as without a waiver
    lapsed = k["policy.waiver|mlx5_4 port 1|ib.port_state"]
    assert lapsed.status == WARN and lapsed.component == PORT
    assert "lapsed 3 days ago" in lapsed.summary and "ib.port_state fails there again" in lapsed.summary
    assert outcomes[0].state == LAPSED and outcomes[0].waived == ()


def test_a_lapsed_waiver_of_a_problem_now_fixed_warns_and_passes_the_node():
    findings = [Finding("ib.port_state", PASS, PORT, "ACTIVE")]
    out, _ = apply_waivers(findings, [waiver(until=NOW - DAY)], now=NOW)
    lapsed = [f for f in out if f.check == "policy.waiver"]
    assert len(lapsed) == 1 and "passes there now: the waiver can go" in lapsed[0].summary
    assert exit_code_for(out) == 0 and exit_code_for(out, strict=True) == 1


def test_a_lapsed_waiver_of_a_check_that_did_not_run_raises_nothing():
    out, _ = apply_waivers(node_findings(), [waiver(until=NOW - DAY)], now=NOW, only=["gpu"])
    assert not [f for f in out if f.check == "policy.waiver"]


def test_a_waiver_that_names_nothing_is_said_so():
    _, outcomes = apply_waivers(node_findings(), [waiver(component="mlx5_4 port 2")], now=NOW)
    assert outcomes[0].check_ran and outcomes[0].matched == 0 and outcomes[0].waived == ()
    from ccdiag.report.render import unmatched_waiver_lines

    assert unmatched_waiver_lines(outcomes) == [
        "NOTE the waiver of ib.port_state on mlx5_4 port 2 names no finding of this run: spell the component "
        "as `ccdiag check` prints it"]


# -- the policy file ----------------------------------------------------------------------------------
POLICY = """expected_gpu_count = 8
waiver_warn_days = 2

[[waiver]]
check = "ib.port_state"
component = "mlx5_4 port 1"
until = 2025-01-03
by = "alice@example.com"
reason = "mlx5_4 is unplugged until the new cable arrives"

[[waiver]]
check = "xid.recent"
component = "GPU6"
subject = "XID 79"
until = 2025-01-01T08:00:00Z
by = "bob"
reason = "GPU6 back from RMA on Monday"
"""


def test_policy_reads_waivers_with_their_lines_and_writes_them_back():
    p = parse_policy(POLICY, "fleet.toml")
    assert p.waiver_warn_days == 2.0 and [w.line for w in p.waivers] == [4, 11]
    assert p.waivers[0].until == "2025-01-03" and p.waivers[1].subject == "XID 79"
    assert p.waivers[1].lapses_at == calendar.timegm((2025, 1, 1, 8, 0, 0))
    back = parse_policy(to_toml(p), "fleet.toml")
    assert [(w.check, w.component, w.subject, w.until, w.by, w.reason) for w in back.waivers] == \
        [(w.check, w.component, w.subject, w.until, w.by, w.reason) for w in p.waivers]


@pytest.mark.parametrize("entry, line, words", [
    ('check = "ib.port_state"\ncomponent = "mlx5_4 port 1"\nuntil = 2026-12-04\nby = "a"\n', 2, "needs reason"),
    ('check = "ib.port_state"\ncomponent = "x"\nuntil = 2026-12-04\nby = "a"\nreason = "r"\nfor = "b"\n', 2,
     "unknown key 'for'"),
    ('check = "port_state"\ncomponent = "x"\nuntil = 2026-12-04\nby = "a"\nreason = "r"\n', 2, "a check id"),
    ('check = "ib.port_state"\ncomponent = "x"\nuntil = "Friday"\nby = "a"\nreason = "r"\n', 2, "until must be a date"),
    ('check = "ib.port_state"\ncomponent = "x"\nuntil = 2026-12-04\nby = ""\nreason = "r"\n', 2, "by must be"),
    ('check = "nvlink.down"\ncomponent = "MIG-1f2e"\nuntil = 2026-12-04\nby = "a"\nreason = "r"\n', 2,
     "MIG instance"),
])
def test_a_malformed_waiver_names_file_and_line(entry, line, words):
    with pytest.raises(PolicyError) as info:
        parse_policy("# fleet\n[[waiver]]\n" + entry, "fleet.toml")
    assert str(info.value).startswith(f"fleet.toml:{line}: ") and words in str(info.value), str(info.value)


def test_the_same_waiver_twice_is_refused():
    entry = '[[waiver]]\ncheck = "ib.rate"\ncomponent = "x"\nuntil = 2026-12-04\nby = "a"\nreason = "r"\n'
    with pytest.raises(PolicyError, match=r"fleet.toml:7: a second waiver of ib.rate on x \(the first is at line 1\)"):
        parse_policy(entry + entry, "fleet.toml")


def test_waivers_as_a_plain_key_are_refused():
    with pytest.raises(PolicyError, match=r"fleet.toml:1: write waivers as \[\[waiver\]\] tables"):
        parse_policy("waivers = []\n", "fleet.toml")
    with pytest.raises(PolicyError, match="waiver_warn_days = 400.0 is outside"):
        parse_policy("waiver_warn_days = 400\n", "fleet.toml")


def test_the_written_policy_carries_a_commented_example_that_reads_once_uncommented():
    text = to_toml(DEFAULT_POLICY, ["header"])
    assert parse_policy(text).waivers == ()  # commented: waives nothing
    assert max(len(line) for line in text.splitlines()) <= 80
    start = text.index("# [[waiver]]")
    live = text[:start] + "\n".join(line[2:] for line in text[start:].splitlines()) + "\n"
    (w,) = parse_policy(live, "p.toml").waivers
    assert (w.check, w.component, w.until) == ("ib.port_state", "mlx5_4 port 1", "2026-12-04")


# -- the report and the metrics -----------------------------------------------------------------------
def test_text_report_shows_waived_with_who_why_and_until_and_counts_it_apart():
    from ccdiag.report.render import render_text

    out, outcomes = apply_waivers(node_findings(), [waiver(until=NOW + 2 * DAY)], now=NOW)
    from cli_runner import unwrap

    text = render_text(out, exit_code_for(out), "hgx-01", waivers=outcomes)
    lines = unwrap(text)
    assert lines[0] == "FAIL: 1 failed (+3 folded), 1 waived, 1 warning (node hgx-01)"
    i = lines.index("WAIVED ib.port_state mlx5_4 port 1 (0000:9b:00.0)")
    assert lines[i + 1] == "  + 1 follows from it: ib.link_flaps mlx5_4 port 1 (warn)"
    assert lines[i + 3] == ("    waiver:   fail, waived until " + outcomes[0].waiver.until +
                            " by alice: cable on order (OPS-1234) (lapses in 2 days)")
    assert "    follows:  ib.port_state|mlx5_4 port 1, which is waived; a waiver never covers another component" \
        in lines
    quiet = unwrap(render_text(out, exit_code_for(out), "hgx-01", quiet=True))
    assert [line.split(" ")[0] for line in quiet] == ["FAIL:", "FAIL", "WARN", "WAIVED"]
    assert quiet[-1].endswith("[fail, waived until " + outcomes[0].waiver.until +
                              " by alice: cable on order (OPS-1234) (lapses in 2 days)]")


def test_json_findings_carry_the_waiver_and_the_schema_holds_it():
    from ccdiag.report.document import build_report, validate

    out, outcomes = apply_waivers(node_findings(), [waiver(), waiver("gpu.count", "node", until=NOW - DAY)], now=NOW)
    doc = json.loads(json.dumps(build_report("check", {}, findings=out, exit_code=int(exit_code_for(out)), run_info={},
                                             extra={"waivers": [o.to_json() for o in outcomes]})))
    validate(doc)
    port = next(f for f in doc["findings"] if f["key"] == "ib.port_state|mlx5_4 port 1")
    assert port["status"] == "waived" and port["action"] == "none"
    assert port["waived"]["status"] == "fail" and port["waived"]["by"] == "alice"
    assert not any("waived" in f for f in doc["findings"] if f["status"] != "waived")
    assert doc["verdict"]["counts"]["waived"] == 2 and doc["verdict"]["status"] == "fail"
    assert [w["state"] for w in doc["waivers"]] == ["in_force", "lapsed"]


def test_metrics_carry_waived_findings_apart_from_the_severity_series():
    import exporter_cases as C
    from prometheus_client.parser import text_string_to_metric_families

    from test_metrics import render
    from ccdiag.exporters.cycle import cycle_from_result

    text = render(cycle_from_result(C.waived_result(), 1.0), interval_s=15, cycles_total=1)
    series = {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in text_string_to_metric_families(text)
              for s in fam.samples}
    waived = {k: v for k, v in series.items() if k[0] == "ccdiag_finding_waived"}
    assert list(waived.values()) == [2.0]  # judged warn
    (labels,) = [dict(k[1]) for k in waived]
    assert labels["check"] == "pcie.link_downtrained" and labels["component"] == "GPU0 PCIe" and labels["by"] == "alice"
    lapse = [v for k, v in series.items() if k[0] == "ccdiag_finding_waiver_lapse_timestamp_seconds"]
    assert lapse == [float(calendar.timegm((2023, 11, 21, 0, 0, 0)))]
    # the severity series keep only the passing duplicate of that component; no root names it
    assert [v for k, v in series.items() if k[0] == "ccdiag_check_severity"
            and dict(k[1]).get("check") == "pcie.link_downtrained"] == [0.0]
    assert not [k for k in series if k[0] == "ccdiag_finding_root" and dict(k[1]).get("check") == "pcie.link_downtrained"]
    assert series[("ccdiag_findings", (("status", "waived"),))] == 1.0


# -- end to end, on the degraded sample ------------------------------------------------------------
def _policy(tmp_path, *entries, extra="") -> str:
    path = tmp_path / "fleet.toml"
    body = "".join(f'\n[[waiver]]\ncheck = "{c}"\ncomponent = "{n}"\nuntil = {u}\nby = "alice"\nreason = "r"\n'
                   for c, n, u in entries)
    path.write_text(extra + body)
    return str(path)


@pytest.mark.slow  # replays the sample several times
def test_check_on_the_sample_waives_the_unplugged_port_and_exits_by_the_rest(tmp_path):
    from cli_runner import run

    policy = _policy(tmp_path, ("pcie.link_width", "GPU3 PCIe link", "2025-01-02"))
    code, out, _ = run("check", "--replay", str(DEGRADED), "--only", "pcie.link_width")
    assert code == 1
    code, out, err = run("check", "--replay", str(DEGRADED), "--only", "pcie.link_width", "--policy", policy)
    assert code == 0 and out.startswith("OK: 0 failed, 1 waived, 20 passed"), out + err
    assert "WAIVED pcie.link_width GPU3 PCIe link" in out and "(lapses in 1.5 days)" in out
    # the day after: lapsed, the failure counts again, and a warning says why
    policy = _policy(tmp_path, ("pcie.link_width", "GPU3 PCIe link", "2024-12-31"))
    code, out, _ = run("check", "--replay", str(DEGRADED), "--only", "pcie.link_width", "--policy", policy)
    assert code == 1 and out.startswith("FAIL: 1 failed, 1 warning")
    assert "WARN policy.waiver GPU3 PCIe link" in out
    # the whole node, JSON: the port waived, GPU4's detour kept, the drain reason from the rest
    policy = _policy(tmp_path, ("ib.port_state", "mlx5_4 port 1", "2025-01-02"))
    code, out, _ = run("check", "--replay", str(DEGRADED), "--policy", policy, "--json")
    doc = json.loads(out)
    status = {f["key"]: f["status"] for f in doc["findings"]}
    assert status["ib.port_state|mlx5_4 port 1"] == status["ib.link_flaps|mlx5_4 port 1"] == "waived"
    assert status["ib.gpudirect|GPU4"] == "warn"
    assert doc["waivers"][0]["state"] == "lapsing" and doc["waivers"][0]["line"] == 2
    assert code == 1 and "ib.port_state" not in doc["verdict"]["reason"]


def test_a_waiver_of_a_check_no_check_has_is_bad_input(tmp_path):
    from cli_runner import run

    policy = _policy(tmp_path, ("ib.port_sate", "mlx5_4 port 1", "2025-01-02"))
    code, out, err = run("check", "--replay", str(tmp_path / "absent.tar"), "--policy", policy)
    assert code == 2 and out == ""
    assert err.strip() == (f"ccdiag: {policy}:2: the waiver names check 'ib.port_sate', which no check has "
                           "(`ccdiag check --json` lists the ids)")


def test_policy_show_lists_the_waivers_from_the_file(tmp_path):
    from cli_runner import run

    path = tmp_path / "fleet.toml"
    path.write_text(POLICY)
    code, out, _ = run("policy", "show", str(path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["policy"]["origin"]["waivers"] == "file"
    assert [(w["check"], w["line"], w["until"]) for w in doc["policy"]["values"]["waivers"]] == [
        ("ib.port_state", 4, "2025-01-03"), ("xid.recent", 11, "2025-01-01T08:00:00+00:00")]
