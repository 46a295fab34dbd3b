"""NVSwitches as components: SXids judged from the Fabric Manager guide's catalogue, and links
down to one switch from every GPU folded into one root finding that names the switch. Scenarios
are SYNTHESIZED snapshots built with the samples' builder (tests/scenarios_node.py); kernel-log
lines are REAL (tests/fixtures/kmsg, each file names its public source)."""

from __future__ import annotations

import pytest

import scenarios_node as N
from ccdiag.checks.nvswitch import classify, is_placeholder, load_catalog
from ccdiag.core.findings import FAIL, PASS, WARN
from ccdiag.probes.kmsg import match_event, parse_lines
from ccdiag.report.render import render_text


def _roots(res, status=FAIL):
    return [f for f in res.findings if f.status == status and not f.caused_by]


def _under(res, root):
    return [f for f in res.findings if f.caused_by == root.key]


def test_real_sxid_lines_parse_with_switch_port_and_driver_severity():
    lines = [x for x in (N.KMSG / "dmesg-xid79-sxid20034-fatal-links-four-nvswitches.txt").read_text().splitlines()
             if not x.startswith("#ccdiag-")]
    events, _ = parse_lines(lines)
    sx = [e for e in events if e.kind == "sxid"]
    assert len(sx) == 8 and {e.code for e in sx} == {20034}
    first = sx[0]
    assert (first.bdf, first.device, first.link, first.severity) == ("0000:06:00.0", "nvidia-nvswitch1", 48, "Fatal")
    # continuation lines of the same event carry neither a port nor a severity
    assert [(e.link, e.severity) for e in sx if e.bdf == "0000:07:00.0"] == [(None, None), (37, "Fatal"), (None, None)]


@pytest.mark.parametrize("message, bdf, code, link, severity", [
    # the form without the nvidia-nvswitchN: prefix
    ("SXid (PCI:0000:06:00.0): 24007, Fatal, Link 04 sourcetrack timeout error", "0000:06:00.0", 24007, 4, "Fatal"),
    ("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
     "0000:05:00.0", 12028, 32, "Non-fatal"),
])
def test_sxid_formats(message, bdf, code, link, severity):
    e = match_event(message, 1.0)
    assert (e.kind, e.bdf, e.code, e.link, e.severity) == ("sxid", bdf, code, link, severity)


def test_catalogue_classes_follow_the_fabric_manager_guide():
    cat = load_catalog()
    assert len(cat) > 80
    assert (cat[20034].cls, cat[20034].status) == ("fatal", FAIL)      # LTSSM Fault Up
    assert (cat[24007].cls, cat[24007].status) == ("fatal", FAIL)      # sourcetrack timeout
    assert (cat[22003].cls, cat[22003].action) == ("always_fatal", "reboot")  # Minion Halt
    assert (cat[11012].cls, cat[11012].status) == ("non_fatal", WARN)  # single-bit ECC, corrected
    assert cat[12028].status == FAIL  # non-fatal, yet the guide's recovery is a restart
    # a code the catalogue lacks is judged by the driver's own word
    assert classify(29999, "Fatal").status == FAIL and classify(29999, "Non-fatal").status == WARN


def test_placeholder_addresses_are_not_switches():
    assert is_placeholder("ffffffff:ff:ff.0") and is_placeholder("0000:00:00.0") and is_placeholder(None)
    assert not is_placeholder("0000:06:00.0")


def test_healthy_sample_judges_every_switch_and_passes():
    res = N.result("healthy")
    got = {(f.check, f.status) for f in res.findings if f.check.startswith("nvswitch.")}
    assert got == {("nvswitch.sxid", PASS), ("nvswitch.links_down", PASS)}
    assert sum(1 for f in res.findings if f.check == "nvswitch.links_down") == 4
    assert res.exit_code == 0 and res.status == PASS


def test_a_switch_down_is_one_root_naming_the_switch_with_its_32_links_beneath():
    res = N.result("nvswitch-links-down")
    roots = _roots(res)
    assert [(f.check, f.component.kind, f.component.bdf) for f in roots] == [
        ("nvswitch.links_down", "nvswitch", "0000:06:00.0")]
    under = _under(res, roots[0])
    assert len(under) == 32 and {f.check for f in under} == {"nvlink.down"}
    assert {f.component.gpu for f in under} == set(range(8))
    text = render_text(res.findings, res.exit_code, "n")
    assert "every GPU" in text and "not the GPUs" in text
    assert text.count("FAIL nvlink.down") == 0  # folded: no GPU told to reset or RMA


def test_a_fatal_sxid_is_the_root_of_the_switch_and_its_links():
    res = N.result("nvswitch-down")
    roots = _roots(res)
    assert [(f.check, f.component.name, f.details["sxid"]) for f in roots] == [
        ("nvswitch.sxid", "NVSwitch 0000:06:00.0", 24007)]
    under = _under(res, roots[0])
    assert {f.check for f in under} == {"nvswitch.links_down", "nvlink.down", "xid.recent"} and len(under) == 34
    assert [f.details["xid"] for f in under if f.check == "xid.recent"] == [74]  # propagated to GPU0
    assert "reset the GPUs and NVSwitches" in roots[0].remedy


def test_real_fatal_sxid_lines_fail_each_switch_they_name():
    res = N.result("sxid-real")
    sx = sorted((f.component.bdf, f.status, tuple(f.details["switch_ports"]))
                for f in res.findings if f.check == "nvswitch.sxid")
    assert sx == [("0000:05:00.0", FAIL, (62, 63)), ("0000:06:00.0", FAIL, (48,)), ("0000:07:00.0", FAIL, (37,))]


def test_a_real_non_fatal_sxid_warns_only():
    res = N.result("sxid-nonfatal")
    f = next(f for f in res.findings if f.check == "nvswitch.sxid")
    assert (f.status, f.details["sxid"], f.details["class"]) == (WARN, 22013, "non_fatal")
    assert res.exit_code == 0


def test_one_gpu_with_links_down_stays_the_gpus_finding():
    res = N.result("one-gpu-links-down")
    roots = _roots(res)
    assert sorted(f.component.name for f in roots) == ["GPU2 NVLink 10", "GPU2 NVLink 9"]
    assert all(f.status == PASS for f in res.findings if f.check == "nvswitch.links_down")
