"""XID classification and windowing, on real kernel-log lines (tests/fixtures/kmsg) placed on a
synthesized HGX H100 node (tests/scenarios_gpu.py)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

import scenarios_gpu as S
from ccdiag.checks import run_checks
from ccdiag.checks.xid import catalogue_version, classify, load_catalog
from ccdiag.core.actions import ACTIONS
from ccdiag.inputs.policy import Policy
from ccdiag.probes.kmsg import KernelEvent
from ccdiag.probes.registry import ProbeRun

XID79 = "dmesg-xid79-crash-dump-multiline-continuation.txt"  # GPU at 0000:5d:00 = HGX GPU3
XID13 = "dmesg-ctime-xid13-xid109-pid-unknown.txt"  # 0000:cb:00, ctime stamps (no uptime)
FALLEN = "dmesg-fallen-off-bus-without-xid-multiline.txt"  # 0000:b3:00, no XID number
XID31_32 = "dmesg-xid31-xid32-no-pid-old-driver.txt"  # 0000:01:00
XID45 = "journal-xid45-kernel-prefix-only.txt"


def xids(ctx):
    return [f for f in run_checks(ctx, only=["xid."]) if f.check == "xid.recent"]


def gpus_at(*bdfs):
    return [S.h100(i, bus_id=b) for i, b in enumerate(bdfs)]


def node_at(*bdfs, kmsg):
    gpus = gpus_at(*bdfs)
    return S.healthy_runs(n=len(bdfs), gpus=gpus, kmsg=kmsg, pcie=S.pcie_obs(list(bdfs)))


# -- the catalogue -----------------------------------------------------------------------------------

def test_catalogue_holds_every_code_nvidia_documents_with_its_bucket():
    """Every code of NVIDIA's catalogue (1-172 at the version read), each with NVIDIA's resolution
    bucket as NVIDIA names it, and the version named in what the report cites."""
    raw = json.loads(resources.files("ccdiag").joinpath("data/xid_catalog.json").read_text())
    cat = load_catalog()
    assert len(cat) == len(raw["codes"]) == raw["catalogue"]["codes_documented"] == 172
    assert sorted(cat) == list(range(1, 173))
    buckets = {e.nvidia_action for e in cat.values()}
    assert {"RESET_GPU", "RESTART_BM", "RESTART_VM", "RESTART_APP", "CHECK_MECHANICALS", "CONTACT_SUPPORT",
            "WORKFLOW_XID_48", "WORKFLOW_NVLINK5_ERR", "IGNORE"} <= buckets
    for code, e in cat.items():
        assert e.action in ACTIONS and e.status in ("pass", "warn", "fail") and e.name, code
    for code, d in raw["decisions"].items():  # every departure from NVIDIA's bucket says why
        assert d["why"] and d["action"] in ACTIONS, code
    assert catalogue_version() == "NVIDIA XID catalogue 2025-10-29 (172 codes)"


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68, 109])
def test_application_errors_never_fail(code):
    # NVIDIA k8s-device-plugin's application-error list
    assert classify(code).status != "fail"


@pytest.mark.parametrize("code", [13, 31, 43, 68, 39, 94])
def test_application_xids_are_the_jobs_not_the_nodes(code):
    e = classify(code)
    assert e.status != "fail" and e.action in ("restart_job", "none") and (e.scope == "job" or e.action == "none")


@pytest.mark.parametrize("code", [48, 64, 74, 79, 95, 119, 120, 140])
def test_dcgm_fatal_xids_fail(code):
    # DCGM BuildXidMappings FAIL set
    assert classify(code).status == "fail"


@pytest.mark.parametrize("code,bucket,action", [
    (79, "RESTART_BM", "reboot"), (119, "RESET_GPU", "reset_gpu"), (48, "WORKFLOW_XID_48", "reset_gpu"),
    (95, "RESET_GPU", "reset_gpu"), (54, "CHECK_MECHANICALS", "service"), (151, "RESTART_VM", "reboot"),
    (13, "RESTART_APP", "restart_job"), (63, "IGNORE", "none"), (74, "WORKFLOW_NVLINK_ERR", "reset_gpu"),
    (78, "UPDATE_SWFW", "drain")])
def test_actions_come_from_nvidias_buckets(code, bucket, action):
    e = classify(code)
    assert (e.nvidia_action, e.action) == (bucket, action)


def test_unused_codes_warn_and_point_to_the_archive():
    e = classify(56)
    assert e.status == "warn" and e.action == "none" and "unused" in e.note


def test_xid154_takes_the_action_its_line_names():
    from ccdiag.checks.xid import refine
    line = "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    e = refine(classify(154), line)
    assert (e.status, e.action) == ("fail", "reboot")
    e = refine(classify(154), line.replace("0x2 (Node Reboot Required)", "0x1 (GPU Reset Required)"))
    assert e.action == "reset_gpu"


def test_nvlink5_xid_follows_the_lines_severity():
    from ccdiag.checks.xid import refine
    fatal = ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 "
             "0x00000000 0x00000000 0x00000000 0x00000000)")
    assert refine(classify(149), fatal).action == "reset_gpu"
    assert refine(classify(149), fatal.replace("Fatal", "Non-fatal")).status == "warn"


def test_unknown_code_is_warn_with_pointer():
    e = classify(9999)
    assert e.status == "warn" and "catalogue" in e.note and not e.known


# -- the check -----------------------------------------------------------------------------------------

def test_xid79_in_window_fails_on_the_right_gpu():
    events = S.kmsg_fixture(XID79)
    ctx = S.xid_at(events, uptime_s=4254.2 + 600)
    findings = xids(ctx)
    f = [x for x in findings if x.status == "fail"]
    assert len(f) == 1, [(x.status, x.summary) for x in findings]
    f = f[0]
    assert (f.component.kind, f.component.gpu, f.component.uuid, f.component.bdf) == (
        "gpu", 3, S.uuid(3), "0000:5d:00.0")
    assert f.details["xid"] == 79 and f.details["action"] == "reboot" and f.action == "reboot"
    # the XID line and the un-numbered "fallen off the bus" line are one incident, both counted
    assert f.details["count"] == 2
    assert "reboot" in f.remedy.lower()
    assert f.evidence[0].what == "kernel message" and f.evidence[0].source == "/dev/kmsg"
    assert f.evidence[0].value.startswith("NVRM: Xid (PCI:0000:5d:00): 79")
    assert f.expected_source == "NVIDIA XID catalogue 2025-10-29 (172 codes)"


def test_xid79_outside_window_is_history():
    events = S.kmsg_fixture(XID79)
    ctx = S.xid_at(events, uptime_s=4254.2 + 2 * 86400)
    findings = xids(ctx)
    assert [f.status for f in findings] == ["pass"]
    assert "2 older" in findings[0].summary


def test_policy_window_is_honoured():
    events = S.kmsg_fixture(XID79)
    ctx = S.xid_at(events, uptime_s=4254.2 + 600, policy=Policy(xid_window_s=300.0))
    assert [f.status for f in xids(ctx)] == ["pass"]


def test_ignore_xids_is_honoured_and_reported():
    events = S.kmsg_fixture(XID79)
    ctx = S.xid_at(events, uptime_s=4254.2 + 600, policy=Policy(ignore_xids=(79,)))
    findings = xids(ctx)
    assert [f.status for f in findings] == ["pass"]
    assert "XID 79 x2" in findings[0].summary


def test_xid13_is_not_a_node_fault():
    # ctime-stamped lines carry no uptime: age unknown, so they count as recent, and still pass
    kmsg = S.kmsg_obs(S.kmsg_fixture(XID13), uptime_s=1000.0)
    findings = xids(S.context(node_at("0000:cb:00.0", kmsg=kmsg)))
    by_code = {f.details["xid"]: f for f in findings}
    assert set(by_code) == {13, 109}
    assert by_code[13].status == "pass" and by_code[13].action == "restart_job"
    assert by_code[109].status == "warn"  # NVIDIA: RESET_GPU; the device plugin: an application's error
    assert by_code[13].details["count"] == 3 and by_code[13].component.gpu == 0
    assert "time unknown" in by_code[13].summary
    assert by_code[109].details["action"] == "restart_job"
    assert any(e.what == "pids" and e.value == [1797828] for e in by_code[109].evidence)


def test_xid31_passes_and_xid32_warns():
    kmsg = S.kmsg_obs(S.kmsg_fixture(XID31_32), uptime_s=24200.0)
    findings = xids(S.context(node_at("0000:01:00.0", kmsg=kmsg)))
    status = {f.details["xid"]: f.status for f in findings}
    assert status == {31: "pass", 32: "warn"}


def test_xid45_follow_up_errors_pass_per_gpu():
    kmsg = S.kmsg_obs(S.kmsg_fixture(XID45), uptime_s=1000.0)
    findings = xids(S.context(S.healthy_runs(kmsg=kmsg)))
    assert {f.status for f in findings} == {"pass"}
    # 0000:ba:00 is HGX GPU6; the other three addresses are not on this node
    mapped = [f for f in findings if f.component.gpu is not None]
    assert [f.component.gpu for f in mapped] == [6]
    assert {f.component.name for f in findings if f.component.gpu is None} == {
        "GPU at 0000:97:00.0", "GPU at 0000:dc:00.0", "GPU at 0000:ed:00.0"}


def test_fallen_off_bus_without_xid_fails_as_79_even_when_nvml_lost_the_gpu():
    kmsg = S.kmsg_obs(S.kmsg_fixture(FALLEN), uptime_s=2000.0)
    runs = S.healthy_runs(kmsg=kmsg)
    runs["nvml"] = ProbeRun("nvml", "unavailable", 0.01, None, "NVML: driver not loaded")
    f = [x for x in xids(S.context(runs)) if x.status == "fail"]
    assert len(f) == 1
    assert f[0].details["xid"] == 79 and f[0].component.bdf == "0000:b3:00.0" and f[0].component.gpu is None


def test_uuid_from_kernel_log_names_a_gpu_nvml_does_not_know():
    kmsg = S.kmsg_obs(S.kmsg_fixture(XID79), uptime_s=4300.0)
    runs = S.healthy_runs(kmsg=kmsg)
    runs["nvml"] = ProbeRun("nvml", "unavailable", 0.01, None, "NVML: driver not loaded")
    f = [x for x in xids(S.context(runs)) if x.status == "fail"][0]
    assert f.component.uuid == "GPU-f1906b9b-557a-e961-045c-9fe4be3ce012"


def test_fatal_xid_on_each_action():
    def synthesized(bus, code):
        return KernelEvent("xid", f"NVRM: Xid (PCI:0000:{bus}:00): {code}, synthesized", time_s=100.0,
                           bdf=f"0000:{bus}:00.0", code=code)

    events = [synthesized("18", 119), synthesized("2a", 63), synthesized("3a", 4242)]
    findings = {f.component.gpu: f for f in xids(S.xid_at(events, uptime_s=200.0))}
    assert findings[0].status == "fail" and "nvidia-smi -r -i 0" in findings[0].remedy
    assert findings[1].status == "pass"  # XID 63: NVIDIA's IGNORE (gpu.remapped_rows judges the rows)
    assert findings[2].status == "warn" and "not in NVIDIA's XID catalogue" in findings[2].summary


def test_unreadable_kernel_log_is_unknown():
    runs = S.healthy_runs()
    runs["kmsg"] = ProbeRun("kmsg", "unavailable", 0.01, None, "/dev/kmsg: permission denied")
    f = xids(S.context(runs))
    assert [x.status for x in f] == ["unknown"] and "dmesg_restrict" in f[0].remedy


def test_no_gpu_node_with_clean_log_skips():
    runs = {"pcie": S.ok("pcie", S.pcie_obs([], switches=())),
            "nvml": ProbeRun("nvml", "unavailable", 0.01, None, "no driver"),
            "kmsg": S.ok("kmsg", S.kmsg_obs())}
    assert [f.status for f in xids(S.context(runs))] == ["skip"]


# -- real lines of NVLink5 and follow-up XIDs --------------------------------------------------------

def test_gpud_1174_nvlink5_xid_severity_comes_from_the_line():
    kmsg = S.kmsg_obs(S.kmsg_fixture("kmsg-nvlink5-xid149-fatal-xid145-nonfatal-gpud-1174.txt"), uptime_s=None)
    runs = node_at("0019:01:00.0", "0018:01:00.0", "0000:9b:00.0", kmsg=kmsg)
    by = {f.details["xid"]: f for f in xids(S.context(runs))}
    assert (by[149].status, by[149].action) == ("fail", "reset_gpu")
    assert (by[145].status, by[145].action) == ("warn", "none") and "non-fatal" in by[145].remedy
    assert (by[94].status, by[94].action) == ("warn", "restart_job")


def test_ogkm_1150_xid45_is_never_a_failure_and_folds_under_the_xid_it_follows():
    from ccdiag.checks.causes import link_causes
    from ccdiag.probes.kmsg import parse_lines

    events = S.kmsg_fixture("kmsg-xid45-caused-by-previous-xid149-145-ogkm-1150.txt")
    bdfs = ("0000:dc:00.0", "0000:ed:00.0", "0000:ba:00.0", "0000:97:00.0")
    alone = xids(S.context(node_at(*bdfs, kmsg=S.kmsg_obs(events, uptime_s=None))))
    assert {f.status for f in alone} == {"pass"} and {f.details["xid"] for f in alone} == {45}
    # with the XID 149 it names (the real gpud#1174 line, RE-ADDRESSED to 0000:dc:00): one event
    fatal, _ = parse_lines(["NVRM: Xid (PCI:0000:dc:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 "
                            "0x00000000 0x00000000 0x00000000 0x00000000)"])
    found = link_causes(xids(S.context(node_at(*bdfs, kmsg=S.kmsg_obs(fatal + list(events), uptime_s=None)))))
    on_dc = {f.details["xid"]: f for f in found if f.component.bdf == "0000:dc:00.0"}
    assert on_dc[45].caused_by == on_dc[149].key and on_dc[149].caused_by is None


def test_every_bucket_nvidia_names_has_an_action_and_every_action_a_meaning():
    from ccdiag.core import actions as A

    raw = json.loads(resources.files("ccdiag").joinpath("data/xid_catalog.json").read_text())
    buckets = {e["immediate"] for e in raw["codes"].values() if e["immediate"]}
    assert buckets and all(A.from_bucket(b) in A.ACTIONS for b in buckets), sorted(buckets)
    assert set(A.MEANING) == set(A.ACTIONS) and list(A.RANK) == list(A.ACTIONS)
    assert A.worst(["drain", "reboot", "reset_gpu"]) == "reboot" and A.worst([]) == "none"
    assert A.action_of(type("F", (), {"status": "fail", "action": None})()) == "drain"


def _extractor():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "extract_xid_catalog.py"
    spec = importlib.util.spec_from_file_location("extract_xid_catalog", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HEAD = ["Type (XID)", "Code", "Mnemonic", "Description", "Applies to A100", "Applies to H100", "Applies to B100",
        "Applies to GB200", "Resolution Bucket (Immediate Action)", "Resolution Bucket (Investigatory Action)"]
ROWS = [["XID", "48", "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "YES", "YES", "YES", "YES",
         "WORKFLOW_XID_48", "WORKFLOW_XID_48"],
        ["XID", "56", "DISPLAY_CHANNEL_EXCEPTION", "Unused", "NO", "NO", "NO", "NO", "CONTACT_SUPPORT", ""]]


def test_the_extractor_reads_nvidias_spreadsheet_and_page(tmp_path):
    """SYNTHESIZED inputs in the layouts the script reads: a spreadsheet with a "Catalog" sheet
    (shared strings, as spreadsheet programs write them) and the page's HTML table."""
    import zipfile

    ex = _extractor()
    strings = sorted({c for r in [HEAD] + ROWS for c in r})
    idx = {c: i for i, c in enumerate(strings)}
    cols = "ABCDEFGHIJ"
    rows = "".join(f'<row r="{n}">' + "".join(f'<c r="{cols[i]}{n}" t="s"><v>{idx[v]}</v></c>' for i, v in enumerate(r))
                   + "</row>" for n, r in enumerate([HEAD] + ROWS, 1))
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
    xlsx = tmp_path / "Xid-Catalog.xlsx"
    with zipfile.ZipFile(xlsx, "w") as z:
        z.writestr("xl/workbook.xml", f'<workbook {ns} {rel}><sheets><sheet name="Decode" sheetId="2" r:id="rId2"/>'
                                      f'<sheet name="Catalog" sheetId="1" r:id="rId1"/></sheets></workbook>')
        z.writestr("xl/_rels/workbook.xml.rels",
                   '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                   '<Relationship Id="rId1" Target="worksheets/sheet1.xml"/>'
                   '<Relationship Id="rId2" Target="worksheets/sheet2.xml"/></Relationships>')
        z.writestr("xl/sharedStrings.xml", f"<sst {ns}>" + "".join(f"<si><t>{s}</t></si>" for s in strings) + "</sst>")
        z.writestr("xl/worksheets/sheet1.xml", f"<worksheet {ns}><sheetData>{rows}</sheetData></worksheet>")
        z.writestr("xl/worksheets/sheet2.xml", f"<worksheet {ns}><sheetData/></worksheet>")
    page = tmp_path / "analyzing-xid-catalog.html"
    page.write_text("<html><body><table><tr>" + "".join(f"<th>{h}</th>" for h in HEAD) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in ROWS)
                    + "</table></body></html>")
    for src in (xlsx, page):
        got = ex.read_any(src)
        assert sorted(got) == [48, 56]
        doc = ex.build(got, {"decisions": {"56": {"why": "kept"}}}, "2099-01-01", src.name)
        assert doc["codes"]["48"]["immediate"] == "WORKFLOW_XID_48" and doc["codes"]["48"]["applies_to"] == [
            "A100", "H100", "B100", "GB200"]
        assert doc["codes"]["56"]["unused"] and doc["decisions"] == {"56": {"why": "kept"}}
        assert doc["catalogue"]["codes_documented"] == 2
