"""The catalogue of NCCL's messages against the formats extracted from NCCL's and its plugins' sources:
every WARN format of the pinned releases maps to a family with a meaning and a remedy (a new release
that adds an unmapped message fails here, naming it), and the extractor reads the C shapes NCCL uses."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

from ccdiag.nccl import catalogue, messages

REPO = pathlib.Path(__file__).resolve().parent.parent


def _extractor():
    spec = importlib.util.spec_from_file_location("extract_nccl_messages", REPO / "scripts" / "extract_nccl_messages.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("key", ["nccl WARN", "aws-ofi-nccl WARN", "nccl-plugin-gpudirecttcpx WARN",
                                 "nccl-rdma-sharp-plugins WARN", "nccl INFO"])
def test_every_extracted_format_of_the_pinned_release_maps_to_a_family(key):
    row = catalogue.coverage()[key]
    assert row["extracted"] > 0
    assert not row["unmapped"], f"{key} ({row['release']}): unmapped formats:\n" + "\n".join(row["unmapped"])


def test_the_pinned_nccl_release_has_about_six_hundred_warn_formats():
    row = catalogue.coverage()["nccl WARN"]
    assert messages.pinned() == "v2.30.7-1" and 550 <= row["extracted"] <= 700
    assert row["specific"] / row["extracted"] > 0.6  # generic families only for internal asserts


@pytest.mark.parametrize("area", ["transport/net_ib", "transport/net_socket", "transport/p2p", "bootstrap.cc",
                                  "init.cc", "proxy.cc", "os/linux.cc", "transport/nvls.cc", "mem_manager.cc",
                                  "transport/shm.cc"])
def test_each_area_has_specific_families(area):
    _, msgs = messages.load()
    fams = {catalogue.family_of(m.format, m.file, m.source).id for m in msgs
            if m.source == "nccl" and m.level == "WARN" and area in m.file}
    specific = {f for f in fams if not catalogue.by_id()[f].generic}
    assert specific, f"{area}: only generic families {fams}"


def test_every_family_says_what_it_means_what_is_at_fault_and_what_to_do():
    ids = set()
    for f in catalogue.families():
        assert f.id not in ids
        ids.add(f.id)
        assert f.component in catalogue.COMPONENTS and f.role in catalogue.ROLES, f.id
        assert len(f.meaning) > 40 and len(f.remedy) > 30 and f.subsys, f.id
        assert f.refs or f.generic, f.id
    assert catalogue.UNKNOWN in ids


@pytest.mark.parametrize("text,file,family", [
    ("socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort", "misc/socket.cc",
     "connect-failed"),
    ("Cuda failure 1 'invalid argument'", "transport/nvls.cc", "nvls-cuda"),
    ("Cuda failure 'out of memory'", "include/alloc.h", "cuda-oom"),
    ("Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes", "misc/shmutils.cc", "shm-full"),
    ("socketProgress: Connection closed by remote peer node1<57557>", "misc/socket.cc", "connection-closed"),
    ("NET/IB : Got completion from peer 10.216.210.236<59474> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
     "transport/net_ib.cc", "ib-completion-timeout"),
    ("Cuda failure 217 'peer access is not supported between these two devices'", "transport/shm.cc",
     "cuda-p2p-unsupported"),
    ("Duplicate GPU detected : rank 2 and rank 0 both on CUDA device 1000", "init.cc", "duplicate-gpu"),
    ("[Proxy Service 0] Failed to execute operation Connect from rank 0, retcode 2", "proxy.cc", "proxy-remote-failed"),
    ("NET/OFI Only EFA provider is supported", "ofi_init", "ofi-no-efa"),
])
def test_printed_messages_find_their_family(text, file, family):
    fam, _ = catalogue.explain(text, file)
    assert fam.id == family


def test_a_printed_message_finds_the_format_and_releases_it_came_from():
    _, msg = catalogue.explain("Bootstrap Root : rank 1 of 8 ranks has already checked in", "bootstrap.cc")
    assert msg is not None and msg.file == "src/bootstrap.cc" and msg.versions[0].startswith("2.18.1")
    assert messages.in_release(msg, "2.30.7") and not messages.in_release(msg, "2.17.1")


def test_a_format_regex_reads_numbers_pointers_and_text_and_stays_bounded():
    rx = re.compile(messages.format_regex("Failed to CUDA calloc %ld bytes at %p (%s) %d%%"))
    assert rx.fullmatch("Failed to CUDA calloc 6291456 bytes at 0x7f00 (dev 3) 50%")
    assert not rx.fullmatch("Failed to CUDA calloc many bytes at 0x7f00 (dev 3) 50%")
    assert messages.format_regex("%s%s%s") == ".*?"  # adjacent wildcards are one
    assert messages.index().find("x" * 5000) is None


def test_the_extractor_reads_concatenation_pri_macros_and_calls_spanning_lines():
    """SYNTHESIZED C in the shapes NCCL's sources use."""
    mod = _extractor()
    src = r'''
#define WARN(...) ncclDebugLogInternal(NCCL_LOG_WARN, __VA_ARGS__)
#define NAME "NET/IB"
static void f() {
  // WARN("a comment is not a message %d", 1);
  WARN("NET/IB : Got completion from peer %s with status=%d"
       " opcode=%d len=%" PRIu64 " (%s)", a, b, c, d,
       e);
  INFO(NCCL_INIT, "Failed to open libibverbs.so[.1]");
  INFO(NCCL_INIT, "Using network %s", x);
  WARN(NAME " : \"quoted\" %s", s);  /* WARN("nor this") */
  NOWARN(x, 0);
}
'''
    got = list(mod.messages_in(src, {"WARN": 0, "INFO": 1}))
    assert got == [("WARN", 6, "NET/IB : Got completion from peer %s with status=%d opcode=%d len=%lu (%s)"),
                   ("INFO", 9, "Failed to open libibverbs.so[.1]"),
                   ("WARN", 11, 'NET/IB : "quoted" %s')]
    assert mod.ranges(["v2.18.1-1", "v2.18.3-1", "v2.20.3-1"], ["v2.18.1-1", "v2.18.3-1", "v2.19.1-1", "v2.20.3-1"]) \
        == ["2.18.1..2.18.3", "2.20.3"]
