"""A verdict that reads root cause first: consequences folded under their cause in text, linked
in JSON, the Slurm drain reason naming the root; values printed as values; remedies whole."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema

from ccdiag.checks.causes import link_causes
from ccdiag.core.findings import FAIL, UNKNOWN, Component, Finding

from cli_runner import run, unwrap
from conftest import REPO

DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"


def test_xid79_is_the_root_of_the_lost_gpu_its_unknowns_and_the_gpu_count():
    code, out, err = run("check", "--replay", str(DEGRADED))
    lines = unwrap(out)
    assert code == 1 and lines[0].startswith("FAIL: 8 failed (+14 folded)")  # roots, with their consequences beside
    xid = next(i for i, l in enumerate(lines) if l.startswith("FAIL xid.recent GPU6"))
    folded = lines[xid + 1]
    assert folded.startswith("  + 12 follow from it: gpu.count node (fail); gpu.lost GPU6 (fail); ")
    assert "gpu.ecc" in folded and "nvlink.down GPU6 (unknown)" in folded
    one_liners = [l for l in lines if re.match(r"^(FAIL|WARN|UNKNOWN) \S+ ", l)]
    assert not [l for l in one_liners if l.startswith(("FAIL gpu.count", "FAIL gpu.lost", "UNKNOWN gpu."))]
    assert one_liners[0].startswith("FAIL xid.recent GPU6")  # the root comes first
    # the port that is down explains its kernel-log flap and GPU4's detour to another NIC
    port = next(i for i, l in enumerate(lines) if l.startswith("FAIL ib.port_state mlx5_4 port 1"))
    assert lines[port + 1] == "  + 2 follow from it: ib.gpudirect GPU4 (warn); ib.link_flaps mlx5_4 port 1 (warn)"
    assert sum(1 for l in lines if "ib.link_flaps" in l) == 1  # nothing twice


def test_json_links_each_consequence_to_its_cause():
    code, out, err = run("check", "--replay", str(DEGRADED), "--json")
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads((REPO / "ccdiag" / "schema" / "report.schema.json").read_text()))
    by_key = {f["key"]: f for f in doc["findings"]}
    count = by_key["gpu.count|node"]
    assert count["caused_by"] == "xid.recent|GPU6|XID 79" and by_key[count["caused_by"]]["status"] == "fail"
    caused = sorted(f["check"] for f in doc["findings"] if f["caused_by"] == "xid.recent|GPU6|XID 79")
    assert len(caused) == 12 and "gpu.lost" in caused  # chains end at the root: XID 79 -> lost -> unknowns
    assert by_key["xid.recent|GPU6|XID 79"]["caused_by"] is None


def test_the_slurm_drain_reason_names_the_root_cause(tmp_path):
    code, out, err = run("check", "--replay", str(DEGRADED), "--json")
    report = tmp_path / "report.json"
    report.write_text(out)
    script = (REPO / "slurm" / "ccdiag-healthcheck.sh").read_text()
    snippet = re.search(r'reason_from_report\(\) \{\n\s*"\$PYTHON" -c \'(.*?)\' "\$1"', script, re.S).group(1)
    reason = subprocess.run([sys.executable, "-c", snippet, str(report)], capture_output=True, text=True,
                            timeout=30).stdout.strip()
    # the node's action first, with the root that asks for it: GPU3's lane needs service, more than a reboot
    assert reason == "ccdiag: service pcie.link_width GPU3 PCIe link (+7)"


def test_evidence_reads_as_values_and_remedies_are_whole_sentences():
    code, out, err = run("check", "--replay", str(DEGRADED))
    assert "{'" not in out and "None" not in out and "True" not in out and "False" not in out
    lines = unwrap(out)
    counters = lines[next(i for i, l in enumerate(lines) if l.startswith("FAIL ib.counters")):]
    assert "    evidence: symbol_error = 3 -> 57  (/sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error)" in counters
    acs = lines[next(i for i, l in enumerate(lines) if l.startswith("FAIL pcie.acs")):]
    remedy = next(l for l in acs if l.startswith("    remedy:   "))
    assert "(not persistent: run it at boot, e.g. from a systemd unit), or turn ACS off in the BIOS" in remedy


def test_causes_need_the_same_gpu_and_a_failing_cause():
    lost = Finding("gpu.lost", FAIL, Component("gpu", "GPU6", gpu=6), "lost")
    other = Finding("gpu.ecc", UNKNOWN, Component("gpu", "GPU2", gpu=2), "not read")
    mine = Finding("gpu.ecc", UNKNOWN, Component("gpu", "GPU6", gpu=6), "not read")
    linked = {f.key: f.caused_by for f in link_causes([lost, other, mine])}
    assert linked == {"gpu.lost|GPU6": None, "gpu.ecc|GPU2": None, "gpu.ecc|GPU6": "gpu.lost|GPU6"}
    passing = Finding("gpu.lost", "pass", Component("gpu", "GPU6", gpu=6), "answers")
    assert link_causes([passing, mine])[1].caused_by is None


def test_topo_fits_an_80_column_terminal_and_lists_the_gpus(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run("topo", "--replay", str(DEGRADED))
    assert code == 0
    assert [l for l in out.splitlines() if len(l) > 80] == []
    assert "GPU - GPU" in out and "GPU - NIC" in out  # the matrix in two blocks that fit
    gpu_table = out[out.index("\nGPUs"):]
    assert "GPU-e11292b7" in gpu_table and "0000:ab:00.0" in gpu_table and "lost" in gpu_table
    monkeypatch.setenv("COLUMNS", "250")
    code, wide, err = run("topo", "--replay", str(DEGRADED))
    assert "Topology (as nvidia-smi topo -m would show it)" in wide and "GPU - GPU" not in wide


def test_text_from_the_machine_is_never_read_as_markup_or_emoji():
    """PCI bus 0xab once printed as an emoji (':ab:'); a host name with [brackets] as markup."""
    code, out, err = run("topo", "--replay", str(DEGRADED))
    assert "0000:ab:00.0" in out and "\U0001f18e" not in out


def test_the_picture_draws_a_lost_gpu_as_lost(tmp_path):
    dot = tmp_path / "t.dot"
    code, out, err = run("topo", "--replay", str(DEGRADED), "--dot", str(dot))
    line = next(l for l in dot.read_text().splitlines() if "GPU6" in l and "label=" in l and " -- " not in l)
    assert "LOST (gpu_lost)" in line and "color=red" in line and "#f4b6b6" in line


def _fake_scontrol(tmp_path):
    """A SYNTHESIZED scontrol that records its arguments (the real one is tested in test_slurm)."""
    import os

    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "scontrol.calls"
    (bindir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    os.chmod(bindir / "scontrol", 0o755)
    wrapper = bindir / "ccdiag"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ccdiag "$@"\n')
    os.chmod(wrapper, 0o755)
    return bindir, calls


import pytest  # noqa: E402


@pytest.mark.parametrize("script", ["ccdiag-prolog.sh", "ccdiag-epilog.sh"])
def test_prolog_and_epilog_drain_with_ccdiags_reason(tmp_path, script):
    import os

    bindir, calls = _fake_scontrol(tmp_path)
    env = {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "CCDIAG": str(bindir / "ccdiag"),
           "CCDIAG_PYTHON": sys.executable, "CCDIAG_ARGS": f"--replay {DEGRADED}", "CCDIAG_DEFAULTS": "/nonexistent",
           "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu-node-7", "SCONTROL": str(bindir / "scontrol")}
    proc = subprocess.run(["/bin/bash", str(REPO / "slurm" / script)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    # ccdiag's reason under the script's own prefix (the health check resumes only its own drains)
    own = "ccdiag-epilog:" if script == "ccdiag-epilog.sh" else "ccdiag-prolog:"
    assert calls.read_text().split("\n")[0] == f"update nodename=gpu-node-7 state=drain reason={own} service pcie.link_width GPU3 PCIe link (+7)"
    assert f"drained: {own} service pcie.link_width GPU3 PCIe link (+7)" in proc.stderr
    assert ("after the job" in proc.stderr) == (script == "ccdiag-epilog.sh")


def test_skipped_checks_never_lower_a_healthy_verdict():
    healthy = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
    code, out, err = run("check", "--replay", str(healthy), "--json")
    verdict = json.loads(out)["verdict"]
    assert code == 0 and verdict["counts"]["skip"] > 0 and verdict["counts"]["warn"] == 0
    assert verdict["status"] == "pass"
    from ccdiag.core.findings import SKIP, verdict_status
    skipped = Finding("ib.roce_gid", SKIP, Component("node", "node"), "no RoCE port")
    assert verdict_status([skipped]) == SKIP  # nothing judged at all is not a pass
    assert verdict_status([]) == "pass"
