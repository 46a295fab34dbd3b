"""The readers of NVIDIA's support files (ccdiag.nvfiles), one format at a time, on real outputs.

Fixtures under tests/fixtures/nvfiles (sources and causes in SOURCES.md there) and the shared corpus
under tests/fixtures/corpus; lines written here are SYNTHESIZED and say so.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import pathlib

import pytest

from ccdiag.nvfiles import dcgmdiag, dmidecode, ibstat, lspci, pciconfig, sections, services
from ccdiag.nvfiles import smifields as sf
from ccdiag.nvfiles.nvlinktext import parse_nvlink
from ccdiag.nvfiles.smi_nvml import nvml_records
from ccdiag.nvfiles.smiq import parse_smi_q
from ccdiag.nvfiles.smixml import SmiXmlError, parse_smi_xml
from ccdiag.nvfiles.supportfile import SupportFile, SupportFileError

HERE = pathlib.Path(__file__).parent
FIX = HERE / "fixtures" / "nvfiles"
REPO = HERE.parent
R510 = FIX / "bugreport-r510-quadro-k2200-marwank270.log.gz"


def _read(name: str) -> str:
    return (FIX / name).read_text()


# -- sections ---------------------------------------------------------------------------------------
def _r510_sections() -> list[sections.Section]:
    with SupportFile(str(R510)) as f:
        return list(sections.iter_sections(f.lines()))


def test_every_header_of_a_real_r510_report_is_in_the_catalogue():
    """106 sections of a complete real R510 log, each matched to a catalogue entry (none unknown)."""
    secs = _r510_sections()
    assert len(secs) == 106
    assert [s.header for s in secs if s.entry is None] == []
    by_entry = {s.entry for s in secs}
    assert {"prologue", "nvidia-smi-query", "lspci-tree", "lspci-verbose", "lspci-nn", "dmesg", "proc-modules",
            "nvidia-gpu-information", "dmidecode", "epilogue"} <= by_entry


def test_the_r510_prologue_and_file_sections_read_as_the_script_wrote_them():
    secs = _r510_sections()
    pro = sections.parse_prologue(next(s for s in secs if s.entry == "prologue").lines)
    assert (pro.version, pro.hostname, pro.kernel, pro.machine) == ("31295035", "fujitsu", "5.18.0-14parrot1-amd64",
                                                                   "x86_64")
    info = next(s for s in secs if s.entry == "nvidia-gpu-information")
    assert info.path == "/proc/driver/nvidia/gpus/0000:01:00.0/information"  # "/./" normalised away
    assert any("Quadro K2200" in line for line in info.lines)
    assert not any(line.startswith("*** ls:") for line in info.lines)
    missing = [s.path for s in secs if s.kind == "file_missing"]
    assert missing == ["/var/log/nvidia-installer.log", "/proc/pci"]
    # bodies of sections ccdiag does not read are counted, not held
    xorg = next(s for s in secs if s.entry == "xorg-log")
    assert xorg.n_lines > 100 and xorg.lines == []


def test_r580_report_command_writes_several_commands_under_one_separator():
    """SYNTHESIZED, in the 580.126.09 script's layout: report_command's outputs follow each other
    under one separator; each becomes its own section."""
    from synth import bugreport as synth

    text = synth.report(synth.command_block(("/usr/bin/nvidia-smi --query", "\n==============NVSMI LOG=============="),
                                            ("/usr/bin/nvidia-smi nvlink --status", "GPU 0: X (UUID: GPU-1)"),
                                            ("/usr/bin/nvidia-smi conf-compute --query-conf-compute", "CC status: OFF")))
    secs = list(sections.iter_sections(text.splitlines()))
    assert [s.entry for s in secs] == ["prologue", "nvidia-smi-query", "nvidia-smi-nvlink-status",
                                       "nvidia-smi-conf-compute", "epilogue"]
    pro = sections.parse_prologue(secs[0].lines)
    assert pro.version == "37062940" and ("NVIDIA SMI", "NVIDIA-SMI version  : 580.126.09") in pro.table


def test_the_catalogue_covers_what_each_script_version_writes_and_names_what_ccdiag_reads():
    cat = sections.catalogue()
    assert len({e.id for e in cat}) == len(cat)
    versions = sections.generator_versions()
    for e in cat:
        assert set(e.seen_in) <= set(versions), e.id
    read = [e for e in cat if e.read]
    assert {"nvidia-smi-query", "lspci-verbose", "dmesg", "ibstat", "dmidecode", "proc-modules",
            "fabricmanager-status"} <= {e.id for e in read}
    assert len(cat) >= 100 and 15 <= len(read) < len(cat)


def _script(name: str):
    """A script of scripts/ as a module (its main() called in-process)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_extractor_lists_the_headers_of_a_script(tmp_path, capsys):
    """SYNTHESIZED mini script in nvidia-bug-report.sh's idiom (append, which-variables, echo of the
    command, report_command, report_skip); the extractor turns it into headers the catalogue knows."""
    script = tmp_path / "nvidia-bug-report.sh"
    script.write_text('''NVIDIA_BUG_REPORT_CHANGE='$Change: 12345678 $'
append "/proc/modules"
append "/proc/driver/nvidia/gpus/$GPU/information"
    lspci=`which lspci 2> /dev/null | head -n 1`
        echo "$lspci -nnDvvvxxxx"
    echo "dmesg:"
            report_command "$nvidia_smi --query"
        nvidia_smi=`which nvidia-smi 2> /dev/null | head -n 1`
            report_skip "ibstat output" "ibstat not found"
''')
    extractor = _script("extract_bugreport_sections")
    assert extractor.main([str(script)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(r["kind"], r["header"]) for r in rows} >= {
        ("file", "/proc/modules"), ("file", "/proc/driver/nvidia/gpus/*/information"),
        ("command", "lspci -nnDvvvxxxx"), ("title", "dmesg:"), ("skip", "Skipping: ibstat output")}
    assert all(r["change"] == "12345678" for r in rows)
    assert extractor.main(["--check", str(script)]) == 0, capsys.readouterr().out  # every header is catalogued


# -- nvidia-smi -q text ---------------------------------------------------------------------------------
def test_smi_q_r535_h100_fields_read_under_their_paths():
    log = parse_smi_q(_read("smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt"))
    assert (log.driver_version, log.cuda_version, log.attached_gpus, len(log.gpus)) == ("535.161.08", "12.2", 8, 8)
    g = log.gpus[0]
    assert g.bus_id == "00000000:19:00.0"
    assert g.get("Clocks Event Reasons/HW Slowdown/HW Power Brake Slowdown") == "Active"
    assert sf.value(g, "clocks_event_hw_power_brake_slowdown").text == "Active"
    assert sf.value(g, "pcie_gen_device_max").integer == 5
    assert sf.value(g, "fb_total").bytes() == 81559 << 20


def test_smi_q_r470_v100_old_names_read_as_the_same_values():
    log = parse_smi_q(_read("smi-q-i1-v100-pcie-470.129.06-retired-page.txt"))
    g = log.gpus[0]
    assert sf.value(g, "ecc_current").text == "Enabled"  # "Ecc Mode" in R470
    assert sf.value(g, "ecc_aggregate_single_bit_total").integer == 3
    assert sf.value(g, "retired_pages_sbe").integer == 1
    assert sf.value(g, "remapped_rows").kind == "not_applicable"
    assert sf.value(g, "clocks_event_idle").text == "Active"  # "Clocks Throttle Reasons"
    assert sf.value(g, "power_limit").number == 250.0  # "Power Readings/Enforced Power Limit"


def test_smi_q_fragments_and_shifted_pastes_read_relative_to_their_own_indentation():
    ecc = parse_smi_q((REPO / "tests/fixtures/nvfiles/smi-q-i1-v100-pcie-470.129.06-retired-page.txt").read_text()
                      .replace("\n", "\n    "))
    assert sf.value(ecc.gpus[0], "retired_pages_sbe").integer == 1
    frag = parse_smi_q("    ECC Errors\n        Volatile\n            SRAM Uncorrectable            : 1\n")
    assert frag.fragment and frag.gpus[0].bus_id is None
    assert frag.gpus[0].get("ECC Errors/Volatile/SRAM Uncorrectable") == "1"


def test_smi_q_a_gpu_nvidia_smi_could_not_open_is_placed_in_bus_order_and_answers_its_error():
    """SYNTHESIZED: two GPU blocks and the message nvidia-smi prints for a third it cannot open."""
    text = ("==============NVSMI LOG==============\n\nDriver Version : 570.86.15\nAttached GPUs : 3\n"
            "GPU 00000000:18:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    GPU UUID : GPU-a\n"
            "Unable to determine the device handle for GPU0000:2A:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
            "GPU 00000000:3A:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    GPU UUID : GPU-c\n")
    log = parse_smi_q(text)
    recs = nvml_records(log)
    calls = {repr(r["call"]): r for r in recs}
    assert calls[repr(["nvmlDeviceGetCount"])]["ok"] == 3
    assert calls[repr(["nvmlDeviceGetUUID", 1])]["error"] == "gpu_lost"
    assert calls[repr(["nvmlDeviceGetUUID", 2])]["ok"] == "GPU-c"


def test_field_catalogue_covers_every_real_output_and_every_key_is_read_somewhere():
    keys_read: set[str] = set()
    for name in ("smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt", "smi-q-titanv-560.35.03-gpud.txt",
                 "smi-q-a10-535.129.03-gpud.txt", "smi-q-i1-v100-pcie-470.129.06-retired-page.txt"):
        for gpu in parse_smi_q(_read(name)).gpus:
            for f in sf.fields():
                if sf.raw(gpu, f.key)[0] is not None:
                    keys_read.add(f.key)
    for name in ("smi-x-rtx4070-laptop-575.51.02-excerpt.xml", "smi-x-rtx2080ti-440.82-first-gpu.xml"):
        for gpu in parse_smi_xml(_read(name)).gpus:
            keys_read |= {f.key for f in sf.fields() if sf.raw(gpu, f.key)[0] is not None}
    unseen = {f.key for f in sf.fields()} - keys_read
    # keys no stored output prints: newer SRAM split of a driver not covered, fabric health texts
    assert unseen <= {"ecc_volatile_sram_uncorrectable", "ecc_aggregate_sram_uncorrectable",
                      "ecc_volatile_double_bit_total", "ecc_aggregate_double_bit_total",
                      "ecc_volatile_single_bit_total", "retired_pages_pending", "fabric_clique_id",
                      "fabric_cluster_uuid", "fabric_health_route_recovery", "fabric_health_route_unhealthy",
                      "fabric_health_access_timeout", "recovery_action", "drain_and_reset", "reset_required",
                      "temperature_memory_max", "temperature_gpu_max", "temperature_shutdown",
                      "temperature_slowdown"}
    assert len(keys_read) >= 50


# -- nvidia-smi -q -x -------------------------------------------------------------------------------------
def test_smi_xml_v12_and_v10_give_the_same_values_as_the_text():
    new = parse_smi_xml(_read("smi-x-rtx4070-laptop-575.51.02-excerpt.xml")).gpus[0]
    old = parse_smi_xml(_read("smi-x-rtx2080ti-440.82-first-gpu.xml")).gpus[0]
    assert (sf.value(new, "pcie_gen_current").integer, sf.value(new, "pcie_gen_max").integer) == (2, 4)
    assert sf.value(new, "pcie_width_current").integer == 8
    assert sf.value(new, "power_draw").number == 11.26  # instant power draw
    assert sf.value(new, "recovery_action").text == "None"
    assert sf.value(old, "clocks_event_idle").text == "Active"  # clocks_throttle_reasons
    assert sf.value(old, "power_limit").number == 257.0  # power_readings/enforced_power_limit
    assert sf.value(old, "temperature_slowdown").integer == 91


@pytest.mark.parametrize("text", ['<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>',
                                  "<nvidia_smi_log><gpu>", "<other/>"])
def test_bad_smi_xml_is_refused_in_one_line(text):
    with pytest.raises(SmiXmlError) as exc:
        parse_smi_xml(text, "pasted.xml")
    assert "pasted.xml" in str(exc.value) and "\n" not in str(exc.value)


# -- nvlink, lspci, config space, ibstat, dmidecode, systemctl ---------------------------------------------
def test_nvlink_status_and_error_counters_from_the_corpus():
    links = parse_nvlink((HERE / "fixtures/corpus/nvlink").joinpath(
        "nvlink-e-a100-sxm4-40gb-x8-loop-tab-indent-12links-all-zero.txt").read_text()) if (
        HERE / "fixtures/corpus/nvlink").exists() else None
    text = ("GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-3fb1)\n"
            "NVML: Unable to retrieve NVLink information as all links are inActive\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-abcd)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n")
    got = parse_nvlink(text)  # SYNTHESIZED lines in the formats of the corpus files
    assert got[0].none and got[1].active == {0: True, 1: False}
    if links is not None:
        assert links[0].counters[0] == {"replay": 0, "recovery": 0, "crc": 0}


def test_lspci_vvv_of_a_real_h100_node_gives_each_gpus_switch_chain_and_link():
    listing = lspci.PciListing()
    lspci.read_verbose(gzip.decompress((FIX / "lspci-vvv-h100x8-gpud.txt.gz").read_bytes()).decode().splitlines(),
                       listing)
    lspci.link_parents(listing)
    gpus = sorted(b for b, f in listing.functions.items() if f.vendor == 0x10DE and (f.class_code or 0) >> 8 == 0x0302)
    assert len(gpus) == 8
    assert lspci.chain(listing, "0000:19:00.0") == ["0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0"]
    gpu = listing.functions["0000:19:00.0"]
    assert (gpu.speed_gts, gpu.width, gpu.max_speed_gts, gpu.driver, gpu.numa_node) == (32.0, 16, 32.0, "nvidia", 0)
    nic = listing.functions["0000:1a:00.0"]  # a ConnectX-7 on the same switch
    assert nic.vendor == 0x15B3 and listing.parents["0000:1a:00.0"] == "0000:17:02.0"


def test_lspci_tree_and_a_256_byte_dump_of_the_r510_report_give_the_gpu_link_from_config_space():
    secs = {s.entry: s for s in _r510_sections() if s.entry in ("lspci-tree", "lspci-nn")}
    listing = lspci.PciListing()
    lspci.read_tree(secs["lspci-tree"].lines, listing)
    lspci.read_list(secs["lspci-nn"].lines, listing)
    for s in _r510_sections():
        if s.entry == "lspci-verbose":
            lspci.read_verbose(s.lines, listing)
    lspci.link_parents(listing)
    gpu = listing.functions["0000:01:00.0"]
    assert listing.parents["0000:01:00.0"] == "0000:00:01.0" and listing.parents["0000:01:00.1"] == "0000:00:01.0"
    assert gpu.link_from == "config" and (gpu.max_speed_gts, gpu.max_width, gpu.speed_gts, gpu.width) == (
        5.0, 16, 2.5, 16)
    assert len(gpu.config) == 256


def test_config_space_decoding_is_bounded_on_a_looping_capability_list():
    """SYNTHESIZED config space whose capability pointer points at itself."""
    cfg = bytearray(256)
    cfg[6] = 0x10  # capabilities list present
    cfg[0x34] = 0x40
    cfg[0x40], cfg[0x41] = 0x05, 0x40  # an MSI capability whose next pointer is itself
    assert pciconfig.pcie_capability(bytes(cfg)) is None


def test_ibstat_from_the_corpus():
    devices = ibstat.parse_ibstat((HERE / "fixtures/corpus/ib").joinpath(
        "ibstat-a100-8x-cx6-mt4123-hdr-at-2x-width-rate100-tab-indent.txt").read_text().splitlines())
    assert len(devices) == 8
    port = devices[0].ports[0]
    assert (devices[0].name, devices[0].values["CA type"], port.values["State"], port.values["Rate"]) == (
        "mlx5_0", "MT4123", "Active", "100")


def test_dmidecode_and_systemctl_status_lines():
    """SYNTHESIZED lines in dmidecode's and systemctl's layouts."""
    assert dmidecode.dmi_files(["System Information", "\tManufacturer: Dell Inc.", "\tProduct Name: PowerEdge XE9680",
                                "Chassis Information", "\tAsset Tag: Not Specified"]) == {
        "sys_vendor": "Dell Inc.", "product_name": "PowerEdge XE9680", "chassis_asset_tag": "Not Specified"}
    assert services.active_state(["● nvidia-fabricmanager.service - NVIDIA fabric manager service",
                                  "     Active: failed (Result: exit-code) since Tue 2026-03-03"]) == "failed"
    assert services.active_state(["Unit nvidia-fabricmanager.service could not be found."]) == "inactive"


# -- dcgmi diag ---------------------------------------------------------------------------------------
def test_dcgm_text_2x_fragment_names_the_gpu_and_matches_dcgms_code_from_the_message():
    run = dcgmdiag.parse_dcgm_diag(_read("dcgmi-r2-gpu0-thermal-violations-fragment.txt"))
    t = run.tests[0]
    assert (t.name, t.plugin, t.results[0], t.results[7]) == ("GPU Memory", "memory", "fail", "pass")
    m = t.messages[0]
    assert m.gpu == 0 and m.text.startswith("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7")
    assert dcgmdiag.errors_by_code()[m.error_id]["name"] == "DCGM_FR_THERMAL_VIOLATIONS_TS"


def test_dcgm_text_old_wording_of_a_message_still_finds_its_code():
    run = dcgmdiag.parse_dcgm_diag(_read("dcgmi-r3-gpu3-pending-row-remap-after-xid64-fragment.txt"))
    m = run.tests[0].messages[0]
    assert (m.kind, m.gpu, dcgmdiag.errors_by_code()[m.error_id]["name"]) == ("error", 3, "DCGM_FR_PENDING_ROW_REMAP")


def test_dcgm_text_4x_layout():
    run = dcgmdiag.parse_dcgm_diag(_read("dcgmi-diag-4.2.3-26b9x4-head-issue253.txt"))
    assert (run.dcgm_version, run.driver_version) == ("4.2.3", "570.148.08")
    assert [(t.name, t.category, t.status) for t in run.tests] == [("software", "Deployment", "pass"),
                                                                   ("memory", "Hardware", "pass")]
    assert run.tests[0].results == {0: "pass", 1: "pass", 2: "pass", 3: "pass"}



def _dcgm_row(name: str, info: str) -> str:
    return f"| {name:25} | {info:46} |"


def test_dcgm_text_reader_keeps_a_message_before_any_test_and_ends_a_message_at_a_status_row():
    """SYNTHESIZED rows in DCGM 2.x's layout: a deployment "Error" before any test row is kept on a
    test of its own (the software plugin); a message's 45-character pieces join until a status row,
    which is the test's next result; metadata rows set the versions, a loose runtime error is kept."""
    text = "\n".join([
        "+---------------------------+------------------------------------------------+",
        _dcgm_row("Diagnostic", "Result"),
        "|-----  Metadata  ----------+------------------------------------------------|",
        _dcgm_row("DCGM Version", "3.3.5"),
        _dcgm_row("Driver Version Detected", "550.54.15"),
        "|-----  Deployment  --------+------------------------------------------------|",
        _dcgm_row("Error", "A" * 45),
        _dcgm_row("", "B" * 10),
        "|-----  Hardware  ----------+------------------------------------------------|",
        _dcgm_row("GPU Memory", "Pass - GPUs: 1"),
        _dcgm_row("Warning", "GPU 0 first piece of the message, forty-five "),
        _dcgm_row("", "chars"),
        _dcgm_row("", "Fail - GPU: 0"),
        "Error: runtime error: the host engine went away",
    ])
    run = dcgmdiag.parse_text(text)
    assert (run.dcgm_version, run.driver_version, run.runtime_error) == (
        "3.3.5", "550.54.15", "Error: runtime error: the host engine went away")
    deployment, memory = run.tests
    assert (deployment.name, deployment.category, deployment.plugin) == (
        "Deployment (no test named)", "Deployment", "software")
    assert [(m.kind, m.text) for m in deployment.messages] == [("error", "A" * 45 + "B" * 10)]
    assert (memory.name, memory.category, memory.results, memory.status) == (
        "GPU Memory", "Hardware", {1: "pass", 0: "fail"}, "fail")
    assert [(m.kind, m.gpu, m.text) for m in memory.messages] == [
        ("warning", 0, "GPU 0 first piece of the message, forty-five chars")]

@pytest.mark.parametrize("name, test, gpu, code", [
    ("dcgmi-j-4x-synthesized-pcie-replays-gpu1.json", "pcie", 1, "DCGM_FR_PCI_REPLAY_RATE"),
    ("dcgmi-j-3x-synthesized-targeted-power-gpu1.json", "Targeted Power", 1, "DCGM_FR_TARGET_POWER"),
])
def test_dcgm_json_3x_and_4x(name, test, gpu, code):
    run = dcgmdiag.parse_dcgm_diag(_read(name))
    t = next(t for t in run.tests if t.name == test)
    assert t.results[gpu] == "fail"
    m = t.messages[0]
    assert (m.gpu, m.error_id_from, dcgmdiag.errors_by_code()[m.error_id]["name"]) == (gpu, "json", code)


@pytest.mark.parametrize("text", ["", "hello", '{"DCGM Diagnostic": {"test_categories": [', "| Diagnostic | Result |\n"])
def test_dcgm_bad_input_is_one_clear_error(text):
    with pytest.raises(dcgmdiag.DcgmDiagError) as exc:
        dcgmdiag.parse_dcgm_diag(text)
    assert "\n" not in str(exc.value)


def test_dcgm_catalogue_shape():
    errors = dcgmdiag.catalogue()["errors"]
    codes = [e["code"] for e in errors]
    assert codes == sorted(set(codes)) and len(codes) >= 130
    assert all(e["severity"] and e["category"] for e in errors)
    assert sum(1 for e in errors if e["message"]) >= 120
    tests = {t["name"] for t in dcgmdiag.catalogue()["tests"]}
    assert {"software", "memory", "pcie", "targeted_stress", "targeted_power", "diagnostic", "denylist"} <= tests


# -- the support file itself --------------------------------------------------------------------------
def test_a_truncated_gzip_gives_the_lines_before_the_cut_and_says_so(tmp_path):
    data = gzip.compress(("line\n" * 200000).encode())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(data[: len(data) // 2])
    with SupportFile(str(cut)) as f:
        lines = list(f.lines())
        assert 0 < len(lines) < 200000
        assert not f.reading.complete and "truncated" in f.reading.notes[0]


@pytest.mark.parametrize("content", [b"\x00\x01\x02\x03" * 1000, b"\x1f\x8bnot really gzip"])
def test_binary_content_is_refused_in_one_line(tmp_path, content):
    path = tmp_path / "report.log"
    path.write_bytes(content)
    with pytest.raises(SupportFileError) as exc, SupportFile(str(path)) as f:
        list(f.lines())
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_a_deadline_already_passed_stops_reading_after_the_first_chunk_with_a_note(tmp_path):
    path = tmp_path / "report.log"
    path.write_text("x\n" * (1 << 20))  # 2 MiB: more than one chunk
    with SupportFile(str(path), deadline=0.0) as f:
        assert 0 < len(list(f.lines())) < 1 << 20
        assert not f.reading.complete and "deadline" in f.reading.notes[0]


def test_a_line_that_never_ends_is_cut(tmp_path):
    path = tmp_path / "report.log"
    path.write_bytes(b"A" * (3 << 20) + b"\nnext\n")
    with SupportFile(str(path)) as f:
        lines = list(f.lines())
    assert lines[-1] == "next" and max(len(line) for line in lines) <= 1 << 16


def test_the_dcgm_extractor_reads_formats_next_steps_and_the_table(tmp_path):
    """SYNTHESIZED excerpts in the shape of DCGM's dcgm_errors.h and dcgm_errors.c."""
    extractor = _script("extract_dcgm_errors")
    header = '''typedef enum dcgmError_enum
{
    DCGM_FR_OK                       = 0,  //!< 0 No error
    DCGM_FR_PCI_REPLAY_RATE          = 3,  //!< 3 Unacceptable rate of PCI errors
} dcgmError_t;
    DCGM_ERROR_ISOLATE = 2, //!< 2
    DCGM_FR_EC_HARDWARE_PCIE     = 13, //!< 13
#define SYSTEM_TRIAGE_MSG "Check DCGM and system logs for errors."
#define DCGM_FR_OK_MSG "The operation completed successfully."
#define DCGM_FR_PCI_REPLAY_RATE_MSG "Detected more than %u PCIe replays per minute for GPU %u : %d"
#define DCGM_FR_OK_NEXT "N/A"
#define DCGM_FR_PCI_REPLAY_RATE_NEXT SYSTEM_TRIAGE_MSG
'''
    table = "DCGM_ERROR_TABLE_ENTRY(DCGM_FR_PCI_REPLAY_RATE, DCGM_ERROR_ISOLATE, DCGM_FR_EC_HARDWARE_PCIE),"
    rows = extractor.extract(header, table)
    replay = next(r for r in rows if r["code"] == 3)
    assert replay["message"].startswith("Detected more than %u PCIe replays")
    assert replay["next_steps"] == "Check DCGM and system logs for errors."
    assert (replay["severity"], replay["category"]) == ("isolate", "hardware_pcie")


def test_the_smi_field_extractor_lists_read_and_unread_paths(capsys):
    extractor = _script("extract_smi_fields")
    assert extractor.main(["--summary", str(FIX / "smi-q-a10-535.129.03-gpud.txt")]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["driver"] == "535.129.03" and 0 < row["read"] < row["paths"]
