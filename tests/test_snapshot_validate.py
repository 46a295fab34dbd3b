"""A snapshot that is damaged or lies is refused on load (exit 2, naming the member and field).

SYNTHESIZED from the bundled healthy sample: each case damages it one way the issue found (a flipped
byte, a tar cut mid-header, trailing garbage, deep nesting, a string where a number belongs).
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import tarfile

import pytest

from ccdiag.host.snapshot import SnapshotData, SnapshotError
from cli_runner import run

SAMPLE = pathlib.Path(__file__).parent.parent / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
DATA = SAMPLE.read_bytes()
RAW_TAR = gzip.decompress(DATA)


def _members() -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(RAW_TAR), mode="r:") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]


def _pack(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return gzip.compress(buf.getvalue(), mtime=0)


def _with_json(name: str, edit) -> bytes:
    out = []
    for info, data in _members():
        if info.name == name:
            data = edit(json.loads(data))
            data = data if isinstance(data, bytes) else json.dumps(data).encode()
        out.append((info, data))
    return _pack(out)


def _refused(data: bytes, needle: str, tmp_path) -> None:
    with pytest.raises(SnapshotError) as info:
        SnapshotData.from_bytes(data, name="x.snap")
    assert needle in str(info.value), str(info.value)
    path = tmp_path / "x.snap.tar.gz"
    path.write_bytes(data)
    code, out, err = run("check", "--replay", str(path))
    assert code == 2, (code, err)
    assert needle in err and "Traceback" not in err


def test_the_sample_loads():
    SnapshotData.from_bytes(DATA)


def test_a_flipped_byte_in_the_compressed_data_is_refused(tmp_path):
    p = len(DATA) // 2
    _refused(DATA[:p] + bytes([DATA[p] ^ 0x01]) + DATA[p + 1:], "corrupt snapshot", tmp_path)


def test_a_wrong_gzip_checksum_is_refused(tmp_path):
    bad = DATA[:-8] + bytes([DATA[-8] ^ 0xFF]) + DATA[-7:]  # the CRC32 in the trailer
    _refused(bad, "damaged gzip data", tmp_path)


def test_a_tar_cut_mid_header_is_refused(tmp_path):
    _refused(gzip.compress(RAW_TAR[:2048 + 100], mtime=0), "corrupt snapshot", tmp_path)


def test_trailing_garbage_after_the_tar_is_refused(tmp_path):
    _refused(gzip.compress(RAW_TAR + b"garbage" * 100, mtime=0), "trailing data", tmp_path)


def test_deep_nesting_is_refused_without_recursion_error(tmp_path):
    deep = b'{"format": "ccdiag-snapshot", "format_version": 1, "x": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    _refused(_with_json("meta.json", lambda d: deep), "MAX_JSON_DEPTH", tmp_path)


def test_a_string_where_a_number_belongs_names_member_and_field(tmp_path):
    def edit(cmds):
        cmds[0]["duration_s"] = "9" * 5000
        return cmds
    _refused(_with_json("commands.json", edit), "commands.json: record 0.duration_s", tmp_path)


def test_infinity_is_not_a_number(tmp_path):
    def edit(meta):
        return json.dumps(meta).replace('"time_epoch": ', '"time_epoch": Infinity, "x": ').encode()
    _refused(_with_json("meta.json", edit), "meta.json", tmp_path)


def test_an_epoch_that_is_not_a_small_integer_is_refused(tmp_path):
    def edit(index):
        index["kmsg"] = {"1e9": {"lines": []}}
        return index
    _refused(_with_json("index.json", edit), "index.json: kmsg", tmp_path)


def test_net_facts_of_the_wrong_type_are_refused(tmp_path):
    def edit(index):
        index["net"] = {"0": {"addrs": {"eth0": "not a list"}, "stats": {}}}
        return index
    _refused(_with_json("index.json", edit), "index.json: net.0.addrs.eth0", tmp_path)


def test_nvml_value_of_the_wrong_type_is_that_calls_error_not_a_crash(tmp_path):
    def edit(nvml):
        for rec in nvml:
            if "ok" in rec and isinstance(rec["ok"], dict):
                rec["ok"] = [1, 2]
        return nvml
    path = tmp_path / "x.snap.tar.gz"
    path.write_bytes(_with_json("nvml.json", edit))
    code, out, err = run("check", "--replay", str(path), "--json")
    assert code in (0, 1, 3), err
    assert "AttributeError" not in out and "TypeError" not in out


@pytest.mark.parametrize("field, bad, named", [
    ("epoch", -1, ".epoch"), ("epoch", True, ".epoch"), ("call", [], ".call"), ("call", [7], ".call"),
    ("call", ["nvmlDeviceGetHandleByIndex", {"x": 1}], ".call"), ("error", 5, ".error"),
    ("error", {"kind": "io", "message": "m"}, ".error"),
    ("code", "12", ".code"), ("code", 1 << 70, ".code"), ("message", ["m"], ".message")])
def test_a_malformed_nvml_record_is_refused_naming_its_field(tmp_path, field, bad, named):
    """Well-formed records take a fast path; every malformed one still reaches the full check and
    its refusal names the record and the field."""
    def edit(nvml):
        rec = nvml[3]
        if field in ("code", "message"):
            rec["error"] = rec.get("error", "NVMLError_NotSupported")
        rec[field] = bad
        return nvml
    _refused(_with_json("nvml.json", edit), f"nvml.json: record 3{named}", tmp_path)


def test_a_host_name_with_terminal_escapes_is_shown_escaped(tmp_path):
    def edit(meta):
        meta["hostname"] = "node\x1b]0;pwned\x07\x1b[2J"
        return meta
    path = tmp_path / "x.snap.tar.gz"
    path.write_bytes(_with_json("meta.json", edit))
    code, out, err = run("check", "--replay", str(path))
    assert code in (0, 1), err
    assert "\x1b" not in out and "\x07" not in out
