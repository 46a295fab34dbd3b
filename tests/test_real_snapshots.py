"""Replays of what real GPU nodes recorded (tests/fixtures/real): the project's evidence that the NVML
and sysfs paths read real hardware correctly.

Two kinds of evidence: a bare ``*.snap.tar.gz`` (``ccdiag snapshot`` on a node), and a folder
``<gpu>-x<N>-driver<ver>/`` that ``scripts/gpu-evidence.sh`` recorded and ``--unpack`` placed
(``snapshot.snap.tar.gz`` redacted, with ``check.json`` of the live node, ``nvidia-smi-q.xml`` read
beside it, and the same pseudonyms in every file). Each snapshot must replay to a usable NVML
observation, a topology and a check verdict without internal errors, and re-recording its replay
must change nothing. For a folder, in addition: the probe's static values equal ``nvidia-smi -q``'s,
its sampled ones within the tolerances of ``bench/evidence_smi.py`` (recomputed here from the
committed files, and as the node found before redaction), and the snapshot replays to the verdict
the live node gave. Skipped, saying so, until such evidence is committed; the checks themselves run
in tests/test_gpu_evidence.py on the dry run's folder.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.readings import to_jsonable
from ccdiag.host.door import ReplayHost
from ccdiag.host.snapshot import SnapshotData
from ccdiag.probes.registry import ALL_PROBES, run_probes
from ccdiag.run.checkrun import evaluate

TESTS = pathlib.Path(__file__).resolve().parent
REAL = TESTS / "fixtures" / "real"
sys.path.insert(0, str(TESTS.parent / "bench"))

import evidence_smi  # noqa: E402

SNAPSHOTS = sorted(REAL.glob("*.snap.tar.gz")) + sorted(REAL.glob("*/snapshot.snap.tar.gz"))
FOLDERS = sorted(p.parent for p in REAL.glob("*/snapshot.snap.tar.gz"))
NONE_YET = "no evidence from real GPU hardware recorded yet (docs/first-gpu-node.md; tests/fixtures/real/README.md)"


def check_fields(folder: pathlib.Path) -> list[str]:
    """What disagrees between the probe's reading (the committed snapshot) and ``nvidia-smi -q -x``
    (committed beside it), field by field; and whether the node found the same before redaction."""
    observation = run_probes(ReplayHost(str(folder / "snapshot.snap.tar.gz")), ["nvml"])["nvml"].data
    smi = evidence_smi.read_xml((folder / "nvidia-smi-q.xml").read_text())
    got = evidence_smi.compare(observation, smi)
    problems = [f"{r['gpu']} {r['field']} ({r['kind']}, {r['tolerance']}): probe {r['probe']!r}, nvidia-smi {r['smi']!r}"
                for r in got["rows"] if r["agrees"] is False]
    problems += [f"GPU {b} in one reading only" for b in got["gpus_in_one_reading_only"]]
    if got["counts"]["static_equal"] == 0:
        problems.append("no static field could be compared")
    on_node = json.loads((folder / "field-comparison.json").read_text())
    if on_node.get("counts") != got["counts"]:
        problems.append(f"the node found {on_node.get('counts')} before redaction, the committed files give {got['counts']}")
    return problems


def check_replay(folder: pathlib.Path) -> list[str]:
    """Differences between the live node's verdict (``check.json``) and the committed snapshot's replay."""
    live = json.loads((folder / "check.json").read_text())
    live_set = {(f["check"], f["status"], (f.get("component") or {}).get("name")) for f in live.get("findings") or []}
    result = evaluate(ReplayHost(str(folder / "snapshot.snap.tar.gz")))
    replay_set = {(f.check, f.status, f.component.name) for f in result.findings}
    problems = [f"only live: {x}" for x in sorted(live_set - replay_set, key=str)]
    problems += [f"only on replay: {x}" for x in sorted(replay_set - live_set, key=str)]
    if int(result.exit_code) != (live.get("verdict") or {}).get("exit_code"):
        problems.append(f"exit code live {(live.get('verdict') or {}).get('exit_code')}, replay {int(result.exit_code)}")
    return problems


@pytest.mark.skipif(not SNAPSHOTS, reason=NONE_YET)
@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: str(p.relative_to(REAL)))
def test_real_snapshot_replays_completely(path):
    host = ReplayHost(str(path))
    assert host.meta().get("source") == "recorded"
    runs = run_probes(host, ALL_PROBES)
    nvml = runs["nvml"]
    assert nvml.usable and nvml.data.gpus, nvml.error
    assert all(g.uuid and g.bus_id for g in nvml.data.gpus if not g.failed)
    result = evaluate(ReplayHost(str(path)))
    assert result.exit_code != ExitCode.INTERNAL
    assert not [f for f in result.findings if "ccdiag bug" in (f.remedy or "")]
    again = ReplayHost(SnapshotData.from_bytes(host.snap.to_bytes()))
    assert {n: to_jsonable(r.data) for n, r in run_probes(again, ALL_PROBES).items()} == \
        {n: to_jsonable(r.data) for n, r in runs.items()}


@pytest.mark.skipif(not FOLDERS, reason=NONE_YET)
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_probe_reads_what_nvidia_smi_reads(folder):
    assert not check_fields(folder)


@pytest.mark.skipif(not FOLDERS, reason=NONE_YET)
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_snapshot_replays_to_the_live_verdict(folder):
    assert not check_replay(folder)


@pytest.mark.skipif(not FOLDERS, reason=NONE_YET)
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_evidence_is_redacted_and_says_what_ran(folder):
    node = json.loads((folder / "node.json").read_text())
    assert node["gpu_count"] >= 1 and node["driver_version"] and node["date"] and not node.get("dry_run")
    assert ReplayHost(str(folder / "snapshot.snap.tar.gz")).meta().get("redacted") is True
    assert (folder / "README.md").exists(), "describe the node (GPU, driver, CUDA, date) in its README.md"
