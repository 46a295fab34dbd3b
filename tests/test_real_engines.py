"""The engines' figures beside independent ones, measured on a real GPU node.

``bench/results/engines_real.json`` is what ``scripts/gpu-evidence.sh --unpack`` writes from a
single-GPU node's run (docs/first-gpu-node.md): every copy ccdiag's CuPy engine measured (host to
device, device to host, device-local, 1 MiB to 1 GiB) beside the same copy through the CUDA driver
API and PyTorch, and ``hbm``/``gemm`` beside the driver API's device copy and PyTorch's GEMM.
``bench/results/engines_real_multi.json`` is what ``bench/bench_engines_real.py`` writes on a
multi-GPU node with RDMA ports. Skipped, saying so, until that evidence is committed; the checks
themselves run in tests/test_gpu_evidence.py on synthesized documents.
"""

from __future__ import annotations

import json
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "bench" / "results" / "engines_real.json"
MULTI = REPO / "bench" / "results" / "engines_real_multi.json"

#: ccdiag's figure over the independent one: the same copy engine timed the same way agrees within a
#: few per cent (nvbandwidth's own run-to-run spread)
MIN_RATIO, MAX_RATIO = 0.95, 1.05
#: the independent measures in the order one is trusted to decide a figure
MEASURES = ("driver_api", "nvbandwidth", "torch")

NONE_YET = "no engine evidence from a real GPU node yet: run scripts/gpu-evidence.sh there (docs/first-gpu-node.md)"


def _doc(path: pathlib.Path) -> dict:
    doc = json.loads(path.read_text())
    if doc.get("dry_run"):
        pytest.fail(f"{path} holds a dry run: not evidence")
    return doc


def copy_problems(rows: list[dict]) -> list[str]:
    """Every figure with no independent measure, or outside 0.95-1.05 of the first one there is."""
    problems = []
    for row in rows:
        name = next((m for m in MEASURES if row.get(f"ratio_{m}") is not None), None)
        if name is None:
            problems.append(f"{row['key']}: no independent figure")
        elif not MIN_RATIO <= row[f"ratio_{name}"] <= MAX_RATIO:
            problems.append(f"{row['key']}: ccdiag {row['ccdiag']} is {row[f'ratio_{name}']:.1%} of {name}'s {row[name]}")
    return problems


def evidence_problems(doc: dict) -> list[str]:
    """What a single-GPU evidence document lacks: its node, every copy size, agreement, hbm and gemm judged."""
    problems = []
    node = doc.get("node") or {}
    for key in ("name", "driver_version", "date", "commit"):
        if not node.get(key):
            problems.append(f"node.{key} missing")
    rows = doc.get("copies") or []
    sizes = {r["key"].split(":")[2] for r in rows if r["key"].count(":") == 2}
    if len(sizes) < 6:
        problems.append(f"copies at {len(sizes)} sizes, the run measures 6 (1 MiB to 1 GiB)")
    problems += copy_problems(rows)
    problems += copy_problems([r for r in doc.get("gpu_self") or [] if r["key"].startswith("hbm:")])
    judged = {j["key"].split(":")[0]: j["status"] for j in doc.get("gpu_self_judged") or []}
    for bench in ("hbm", "gemm"):
        if judged.get(bench) not in ("pass", "warn", "fail"):
            problems.append(f"{bench} not judged against the catalogue ({judged.get(bench)})")
    return problems


@pytest.mark.skipif(not EVIDENCE.exists(), reason=NONE_YET)
def test_the_evidence_names_its_node_and_its_folder_is_committed():
    doc = _doc(EVIDENCE)
    assert (REPO / doc["evidence"] / "snapshot.snap.tar.gz").exists()


@pytest.mark.skipif(not EVIDENCE.exists(), reason=NONE_YET)
def test_every_figure_agrees_with_an_independent_measure():
    assert not evidence_problems(_doc(EVIDENCE))


@pytest.mark.skipif(not MULTI.exists(), reason="no evidence from a multi-GPU node with RDMA ports yet "
                    "(bench/bench_engines_real.py there)")
def test_multi_gpu_copy_figures_agree_with_an_independent_measure():
    doc = _doc(MULTI)
    assert doc["gpus"] and doc["date"] and doc["ccdiag_gbyte_s"]
    got = doc.get("ratio_over_nvbandwidth") or doc.get("ratio_over_torch")
    assert got, "neither nvbandwidth nor PyTorch measured the same copies"
    off = {k: r for k, r in got.items() if not MIN_RATIO <= r <= MAX_RATIO}
    assert not off, off


@pytest.mark.skipif(not MULTI.exists(), reason="no evidence from a multi-GPU node with RDMA ports yet")
def test_both_rdma_engines_measured_and_agree():
    ib = _doc(MULTI)["ib_write"]
    if isinstance(ib, str):
        pytest.skip(ib)
    perftest, pyverbs = ib["ccdiag_perftest_engine"], ib["ccdiag_pyverbs_engine"]
    assert isinstance(perftest, dict) and isinstance(pyverbs, dict), ib
    for key, v in perftest.items():
        assert key in pyverbs and 0.8 <= pyverbs[key] / v <= 1.2, (key, v, pyverbs.get(key))
