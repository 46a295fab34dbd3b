"""Snapshot format 2 (one file table and one contents blob) replays exactly as format 1 (one tar
member per file) did, format 1 stays readable, and a damaged file table is refused as bad input.

The snapshots are the committed samples (format 1; synthesized from real facts, see samples/README.md)
and a small synthesized scale node (tests/synth/scale.py).
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import tarfile

import pytest

from ccdiag.host.door import HostReadError, ReplayHost, normpath, resolve_path
from ccdiag.report.document import strip_volatile
from ccdiag.host.snapshot import SnapshotData, SnapshotError
from cli_runner import run
from synth.scale import build_scale_node

ROOT = pathlib.Path(__file__).parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.snap.tar.gz"))


def _members(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [m.name for m in tar]


def _check_json(path: str) -> dict:
    code, out, err = run("check", "--replay", path, "--json", "--timeout", "120")
    assert code in (0, 1), err
    doc = strip_volatile(json.loads(out))
    for probe in doc["probes"].values():
        probe.pop("duration_s", None)
    return doc


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_a_sample_replays_to_the_same_report_from_either_format(sample, tmp_path):
    old = SnapshotData.load(str(sample))
    assert old.meta["format_version"] == 1 and any(n.startswith("fs/") for n in _members(sample.read_bytes()))
    new_path = tmp_path / "new.snap.tar.gz"
    old.save(str(new_path))
    names = _members(new_path.read_bytes())
    assert "fs.json" in names and "fs.data" in names and not any(n.startswith("fs/") for n in names)
    new = SnapshotData.load(str(new_path))
    assert new.meta["format_version"] == 2
    assert (new.files, new.links, new.dirs, new.listings) == (old.files, old.links, old.dirs, old.listings)
    before, after = _check_json(str(sample)), _check_json(str(new_path))
    assert before["findings"] and after["findings"] == before["findings"]
    assert after["probes"] == before["probes"] and after["topology"] == before["topology"]


def test_format_2_is_much_smaller_unpacked_than_format_1():
    snap = build_scale_node(30, 2)
    v2 = gzip.decompress(snap.to_bytes())
    files = sum(1 for v in snap.files[0].values() if isinstance(v, bytes))
    # format 1 spent a 512-byte header per file, directory and symlink, and a padded block per file
    assert len(v2) < 512 * (2 * files + len(snap.dirs) + len(snap.links)) / 3
    again = SnapshotData.from_bytes(snap.to_bytes())
    assert again.files == snap.files and again.dirs == snap.dirs and again.links == snap.links


def _with_table(table, blob: bytes = b"ab") -> bytes:
    snap = SnapshotData(meta={"hostname": "t"})
    raw = gzip.decompress(snap.to_bytes())
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as src, tarfile.open(fileobj=buf, mode="w") as dst:
        for m in src:
            body = src.extractfile(m).read()
            if m.name == "fs.json":
                body = json.dumps(table).encode()
            elif m.name == "fs.data":
                body = blob
            m.size = len(body)
            dst.addfile(m, io.BytesIO(body))
    return gzip.compress(buf.getvalue(), mtime=0)


@pytest.mark.parametrize("table, blob, says", [
    ({"files": {"paths": ["/a"], "sizes": [3]}}, b"ab", "add up to 3"),
    ({"files": {"paths": ["/a", "/b"], "sizes": [2]}}, b"ab", "one per path"),
    ({"files": {"paths": ["a"], "sizes": [2]}}, b"ab", "absolute paths"),
    ({"files": {"paths": ["/a"], "sizes": [-1]}}, b"ab", "one per path"),
    ({"files": {"paths": ["/a"], "sizes": [True]}}, b"ab", "one per path"),
    ({"files": [["/a", 2]]}, b"ab", "files"),
    ({"dirs": "/x"}, b"", "dirs"),
    ({"links": {"/l": 5}}, b"", "links"),
    ([], b"", "fs.json"),
])
def test_a_damaged_file_table_is_refused_naming_it(table, blob, says):
    with pytest.raises(SnapshotError) as exc:
        SnapshotData.from_bytes(_with_table(table, blob), "t.snap")
    assert says in str(exc.value) and "t.snap" in str(exc.value)


def test_a_good_file_table_is_read_with_its_parents():
    snap = SnapshotData.from_bytes(_with_table({"files": {"paths": ["/x/y/a", "/b"], "sizes": [1, 1]},
                                                "links": {"/x/l": "y"}, "dirs": ["/d/e"]}))
    assert snap.files[0] == {"/x/y/a": b"a", "/b": b"b"}
    assert {"/x", "/x/y", "/d", "/d/e"} <= snap.dirs and snap.links == {"/x/l": "y"}


def test_replay_realpath_answers_as_resolving_from_the_root():
    """The replay host keeps resolved directory prefixes; its answers and refusals (loops past 40
    hops, counted over the whole path) are those of :func:`resolve_path` from the root."""
    snap = SnapshotData()
    for i in range(25):
        snap.put_link(f"/c1/a{i}", f"/c1/a{i + 1}")
        snap.put_link(f"/c2/b{i}", f"/c2/b{i + 1}")
    snap.put_link("/c1/a25", "/real1")
    snap.put_link("/c2/b25", "/real2")
    snap.put_link("/real1/z", "/c2/b0")
    snap.put_link("/loop/x", "/loop/y")
    snap.put_link("/loop/y", "/loop/x")
    snap.put_link("/rel/up", "../real2/d")
    snap.put_dir("/real2/d")
    snap.put_dir("/real1/w")
    host = ReplayHost(snap)
    paths = ["/c1/a0/w/f", "/c1/a0/w/g", "/c1/a0/z/d/f", "/c2/b3/d/x", "/c1/a20/z/d/f", "/c1/a0/z",
             "/loop/x/f", "/rel/up/q", "/rel/up/../d/q", "/c1/a24/w//./f", "real1/w/", "/"]

    def answer(resolve, p):
        try:
            return resolve(p)
        except HostReadError as exc:
            return f"refused: {exc}"

    for p in paths * 2:  # twice: the second pass answers from what the first kept
        assert answer(host.realpath, p) == answer(lambda q: resolve_path(normpath(q), host._lookup_link), p), p
    assert answer(host.realpath, "/c1/a0/z/d/f").startswith("refused") and host.realpath("/c1/a20/z/d/f") == "/real2/d/f"
