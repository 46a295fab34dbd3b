"""`ccdiag bench import` on NVIDIA's outputs users paste: nvidia-smi -q (text, -x) and dcgmi diag.

Each real case names, in the verdict, the cause its source established (tests/fixtures/nvfiles/
SOURCES.md); the synthesized JSON files say SYNTHESIZED in themselves.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import run

HERE = pathlib.Path(__file__).parent
FIX = HERE / "fixtures" / "nvfiles"
CORPUS_SMI = HERE / "fixtures" / "corpus" / "smi-q"


def _import(path: pathlib.Path) -> tuple[int, list[dict]]:
    code, out, err = run("bench", "import", str(path), "--json")
    assert "Traceback" not in err, err
    doc = json.loads(out)
    return code, [f for r in doc["bench"] for f in r["findings"]]


def _bad(findings: list[dict], check: str) -> list[dict]:
    return [f for f in findings if f["check"] == check and f["status"] in ("warn", "fail")]


def test_h100_nodes_idle_gpus_in_power_brake_slowdown_are_each_named():
    """gpud's H100 capture: HW Power Brake Slowdown active on all 8 GPUs (its test asserts it)."""
    code, findings = _import(FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt")
    clocks = _bad(findings, "gpu.clocks")
    assert len(clocks) == 8 and all("hw_power_brake_slowdown" in f["summary"] for f in clocks)
    assert {f["component"]["bdf"] for f in clocks} >= {"0000:19:00.0", "0000:db:00.0"}
    assert code == 0  # warnings; --strict would fail


def test_sram_uncorrectable_errors_in_a_pasted_ecc_block_fail_the_gpu():
    """stas00/ml-engineering's node: SRAM Uncorrectable 1 (volatile) and 5 (aggregate)."""
    path = CORPUS_SMI / "q-ecc-errors-sram-uncorrectable-volatile1-aggregate5-fragment.txt"
    code, findings = _import(path)
    ecc = _bad(findings, "gpu.ecc")
    assert code == 1 and ecc[0]["status"] == "fail" and "uncorrected" in ecc[0]["summary"]
    values = {e["what"]: e["value"] for e in ecc[0]["evidence"]}
    assert values["volatile uncorrected ECC"] == 1 and values["aggregate uncorrected ECC"] == 5
    assert [f for f in findings if f["check"] == "smi.not_shown"]  # the rest was not pasted: said, not passed


def test_r470_v100_retired_page_and_old_field_names():
    code, findings = _import(FIX / "smi-q-i1-v100-pcie-470.129.06-retired-page.txt")
    rows = [f for f in findings if f["check"] == "gpu.remapped_rows"][0]
    assert "1 retired page" in rows["summary"]
    ecc = [f for f in findings if f["check"] == "gpu.ecc"][0]
    assert ecc["status"] == "pass"
    assert code == 0


@pytest.mark.parametrize("name", ["smi-x-rtx4070-laptop-575.51.02-excerpt.xml", "smi-x-rtx2080ti-440.82-first-gpu.xml"])
def test_an_idle_gpu_at_a_low_pcie_generation_is_not_a_trained_down_link(name):
    code, findings = _import(FIX / name)
    speed = [f for f in findings if f["check"] == "pcie.link_speed"][0]
    assert speed["status"] == "pass" and "idle" in speed["summary"]
    width = [f for f in findings if f["check"] == "pcie.link_width"][0]
    assert width["status"] == "pass"
    assert code == 0


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS_SMI.glob("*.txt")))
def test_every_smi_q_corpus_file_is_judged_or_refused_in_one_line(name):
    code, out, err = run("bench", "import", str(CORPUS_SMI / name))
    assert "Traceback" not in err and code in (0, 1, 2, 3)
    assert code != 2 or err.count("\n") == 1


def test_a_full_dump_reports_what_it_judged_and_what_it_only_showed():
    code, findings = _import(FIX / "smi-q-titanv-560.35.03-gpud.txt")
    cover = [f for f in findings if f["check"] == "smi.fields"][0]
    judged, printed = map(int, [e for e in cover["evidence"] if e["what"] == "fields judged / printed"][0]["value"].split("/"))
    assert 40 <= judged < printed


# -- dcgmi diag -----------------------------------------------------------------------------------------
def test_dcgm_thermal_violation_names_gpu0_and_the_cooling():
    code, findings = _import(FIX / "dcgmi-r2-gpu0-thermal-violations-fragment.txt")
    fail = _bad(findings, "dcgm.memory")
    assert code == 1 and len(fail) == 1 and fail[0]["component"]["gpu"] == 0
    assert fail[0]["details"]["dcgm_category"] == "hardware_thermal"
    assert "cooling" in fail[0]["remedy"].lower() and "DCGM_FR_THERMAL_VIOLATIONS_TS" in fail[0]["summary"]


def test_dcgm_pending_row_remap_names_gpu3_memory_and_the_rma_path():
    code, findings = _import(FIX / "dcgmi-r3-gpu3-pending-row-remap-after-xid64-fragment.txt")
    fail = [f for f in findings if f["status"] == "fail"]
    assert code == 1 and fail[0]["component"]["gpu"] == 3 and fail[0]["details"]["dcgm_category"] == "hardware_memory"
    assert "RMA" in fail[0]["remedy"] and "row remap" in fail[0]["remedy"]


def test_dcgm_cuda_context_failure_names_gpu0():
    code, findings = _import(FIX / "dcgmi-diag-3x-gpu0-cuda-context-busy-go-dcgm52.txt")
    fail = _bad(findings, "dcgm.memory")
    assert code == 1 and fail[0]["component"]["gpu"] == 0 and fail[0]["details"]["dcgm_category"] == "software_cuda"


def test_dcgm_4x_passes_are_a_pass():
    code, findings = _import(FIX / "dcgmi-diag-4.2.3-26b9x4-head-issue253.txt")
    assert code == 0 and [f["status"] for f in findings] == ["pass"]


@pytest.mark.parametrize("name, check, gpu, part", [
    ("dcgmi-j-4x-synthesized-pcie-replays-gpu1.json", "dcgm.pcie", 1, "hardware_pcie"),
    ("dcgmi-j-3x-synthesized-targeted-power-gpu1.json", "dcgm.targeted_power", 1, "hardware_power"),
])
def test_dcgm_json_failures_map_by_error_id(name, check, gpu, part):
    code, findings = _import(FIX / name)
    fail = _bad(findings, check)
    assert code == 1 and fail[0]["component"]["gpu"] == gpu and fail[0]["details"]["dcgm_category"] == part


def test_a_runtime_error_is_unknown_not_a_pass(tmp_path):
    """SYNTHESIZED: the JSON dcgmi prints when the diagnostic could not run (Diag.cpp HelperDisplayFailureMessage)."""
    path = tmp_path / "diag.json"
    path.write_text('{"DCGM Diagnostic": {"version": "4.6.0", "runtime_error": "Unable to acquire the GPUs"}}')
    code, findings = _import(path)
    assert code == 3 and [f["status"] for f in findings] == ["unknown", "unknown"]


def test_a_gen4_gpu_in_a_gen3_slot_is_named_limited_by_the_host():
    """netdata's real RTX 4090 -q -x (DTD v12): device max gen 4, host max 3, idle at gen 1."""
    code, findings = _import(HERE / "fixtures/corpus/smi-q-x/rtx4090-x1-driver535.xml")
    speed = _bad(findings, "pcie.link_speed")
    assert speed and "limited by the host side" in speed[0]["summary"]


def test_an_a100_in_mig_mode_from_a_dtd_v11_document():
    """netdata's real A100 in MIG mode (DTD v11: power_readings, clocks_throttle_reasons)."""
    code, findings = _import(HERE / "fixtures/corpus/smi-q-x/a100-sxm4-40gb-mig-driver510.xml")
    mig = [f for f in findings if f["check"] == "gpu.mig"][0]
    assert mig["status"] == "pass" and "MIG on" in mig["summary"]
    assert [f["status"] for f in findings if f["check"] == "gpu.ecc"] == ["pass"]


def test_fabric_registration_is_judged_from_the_gpus_own_fabric_state(tmp_path):
    """The real H100 output (fabric Completed on every GPU) passes; the same output with GPU0's state
    edited to "In Progress" (SYNTHESIZED edit, for the failing side) fails GPU0, though a pasted
    output shows no NVSwitch."""
    real = (FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt").read_text()
    _, findings = _import(FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt")
    assert [f["status"] for f in findings if f["check"] == "gpu.fabric_manager"] == ["pass"]
    edited = tmp_path / "smi.txt"
    edited.write_text(real.replace("State                             : Completed\n"
                                   "        Status                            : Success",
                                   "State                             : In Progress\n"
                                   "        Status                            : N/A", 1))
    code, findings = _import(edited)
    fm = _bad(findings, "gpu.fabric_manager")
    assert code == 1 and [f["component"]["gpu"] for f in fm] == [0] and "in_progress" in fm[0]["summary"]


def test_the_sram_error_threshold_nvidia_smi_prints_is_judged(tmp_path):
    """The real H100 output prints `SRAM Threshold Exceeded : No` on every GPU: gpu.sram_ecc passes
    each from it; GPU0's block edited to Yes with 3 aggregate SEC-DED errors (SYNTHESIZED edit, for
    the failing side) fails GPU0 with the RMA path."""
    real = (FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt").read_text()
    _, findings = _import(FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt")
    assert [f["status"] for f in findings if f["check"] == "gpu.sram_ecc"] == ["pass"] * 8
    aggregate = ("        Aggregate\n"
                 "            SRAM Correctable              : 0\n"
                 "            SRAM Uncorrectable Parity     : 0\n"
                 "            SRAM Uncorrectable SEC-DED    : 0\n"
                 "            DRAM Correctable              : 0\n"
                 "            DRAM Uncorrectable            : 0\n"
                 "            SRAM Threshold Exceeded       : No\n")
    assert aggregate in real
    edited = tmp_path / "smi.txt"
    edited.write_text(real.replace(aggregate, aggregate.replace("SEC-DED    : 0", "SEC-DED    : 3")
                                   .replace("Exceeded       : No", "Exceeded       : Yes"), 1))
    code, findings = _import(edited)
    sram = _bad(findings, "gpu.sram_ecc")
    assert code == 1 and [f["component"]["gpu"] for f in sram] == [0]
    assert "threshold" in sram[0]["summary"] and "RMA" in sram[0]["remedy"]
