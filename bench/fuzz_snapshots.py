"""Damaged snapshots, made fast enough for 10,000 of them on a 2-core machine, and read the way
``ccdiag check --replay FILE --json`` reads them, in this process.

Why in-process and by splicing: a subprocess per input costs about a second (interpreter, imports),
and rewriting a format-1 snapshot's ~3,000 tar members through ``tarfile`` costs a third of one.
Here each seed is unpacked once and indexed (member spans in the tar); a mutation splices bytes
(a member dropped, duplicated or given new contents with its header's size and checksum rewritten)
and recompresses. The check runs as the command does: :meth:`SnapshotData.load`, the replayed
evaluation under a deadline, the JSON report and its text.

Seeds (nothing written here): the bundled samples (format 1, synthesized from real facts, see
samples/README.md) and the snapshots recorded with NVIDIA's mock NVML (tests/fixtures/mocknvml, see
its README), each also rewritten in format 2 (``fs.json`` table + ``fs.data`` contents), so both
layouts are damaged. Mutation levels: ``gzip`` (compressed bytes), ``tar`` (archive structure and
headers), ``meta`` (meta.json), ``json`` (the other JSON members, the format-2 file table included)
and ``content`` (a file's contents, the table kept consistent so the damage reaches the probes).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import random
import re
from dataclasses import dataclass

from bench_fuzz import mutate_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED_FILES = sorted(glob.glob(os.path.join(REPO, "samples", "*.snap.tar.gz"))
                    + glob.glob(os.path.join(REPO, "tests", "fixtures", "mocknvml", "*.snap.tar.gz")))
CONTENTS = (b"", b"\xff\xfe", b"9" * 5000, b"-1\n", b"nan\n", b"0x" + b"f" * 40, b"\x00" * 64,
            b"18446744073709551616\n", b"inf\n", b" \n\n", b"Unknown\n", b"1e400\n")
META_VALUES = (None, 2, 3, 0, -1, "2", 1.5, 10 ** 40, "x" * 300, [], {}, True)
BLOCK = 512


@dataclass
class Member:
    name: str
    start: int  # first header (a PAX header, when there is one)
    data: int  # first data byte
    size: int
    end: int  # past the padded data
    header: int  # the member's own header (after any PAX header)


@dataclass
class Seed:
    name: str
    packed: bytes
    raw: bytes
    members: list[Member]


def index_tar(raw: bytes) -> list[Member]:
    """The members of an uncompressed tar written by ccdiag (PAX headers folded into their member)."""
    out: list[Member] = []
    pos, pax_start, pax_name = 0, None, None
    while pos + BLOCK <= len(raw) and raw[pos:pos + BLOCK].strip(b"\0"):
        hdr = raw[pos:pos + BLOCK]
        size = int(hdr[124:136].strip(b"\0 ") or b"0", 8)
        typ = hdr[156:157]
        data = pos + BLOCK
        end = data + (-(-size // BLOCK) * BLOCK if typ in (b"0", b"\0", b"x") else 0)
        if typ == b"x":
            found = re.search(rb"\d+ path=([^\n]*)\n", raw[data:data + size])
            pax_start, pax_name = pos, found.group(1).decode("utf-8", "replace") if found else None
            pos = end
            continue
        name = pax_name or hdr[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        out.append(Member(name, pax_start if pax_start is not None else pos, data, size, end, pos))
        pax_start, pax_name = None, None
        pos = end
    return out


def _with_data(raw: bytes, m: Member, body: bytes) -> bytes:
    """``raw`` with member ``m``'s data replaced by ``body`` (its header's size and checksum rewritten)."""
    hdr = bytearray(raw[m.header:m.header + BLOCK])
    hdr[124:136] = b"%011o\0" % len(body)
    hdr[148:156] = b" " * 8
    hdr[148:156] = b"%06o\0 " % sum(hdr)
    padded = body + b"\0" * (-len(body) % BLOCK)
    return raw[:m.header] + bytes(hdr) + padded + raw[m.end:]


def _repack(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=1, mtime=0)


def load_seeds() -> list[Seed]:
    """Every seed file, as written (format 1) and rewritten by this ccdiag (format 2)."""
    from ccdiag.host.snapshot import SnapshotData

    seeds = []
    for path in SEED_FILES:
        with open(path, "rb") as fh:
            old = fh.read()
        for label, packed in (("v1", old), ("v2", SnapshotData.from_bytes(old, path).to_bytes())):
            raw = gzip.decompress(packed)
            seeds.append(Seed(f"{os.path.basename(path)}:{label}", packed, raw, index_tar(raw)))
    return seeds


def _gzip_level(rng: random.Random, seed: Seed) -> bytes:
    data = seed.packed
    op = rng.randrange(4)
    if op == 0:
        p = rng.randrange(len(data))
        return data[:p] + bytes([data[p] ^ (1 << rng.randrange(8))]) + data[p + 1:]
    if op == 1:
        return data[:rng.randrange(len(data))]
    if op == 2:  # the gzip header's fields (flags, method, extra/name/comment bits)
        p = rng.randrange(10)
        return data[:p] + bytes([rng.randrange(256)]) + data[p + 1:]
    return data + rng.choice((b"\0" * 8, os.urandom(64), data[:200]))  # after the stream


def _tar_level(rng: random.Random, seed: Seed) -> bytes:
    raw, members = seed.raw, seed.members
    op = rng.randrange(7)
    m = rng.choice(members)
    if op == 0:
        return _repack(raw[:rng.randrange(len(raw))])
    if op == 1:
        return _repack(raw + rng.choice((os.urandom(600), b"\0" * 100, raw[:BLOCK])))
    if op == 2:
        p = rng.randrange(len(raw))
        return _repack(raw[:p] + bytes([raw[p] ^ 0xFF]) + raw[p + 1:])
    if op == 3:  # a member dropped
        return _repack(raw[:m.start] + raw[m.end:])
    if op == 4:  # a member twice (the later copy wins, as in tar)
        k = rng.choice(members)
        return _repack(raw[:k.end] + raw[m.start:m.end] + raw[k.end:])
    if op == 5:  # a header field of one member: size, type, name, link name
        field = rng.choice(((124, 136), (156, 157), (0, 100), (157, 257), (345, 500)))
        hdr = bytearray(raw[m.header:m.header + BLOCK])
        hdr[field[0]:field[1]] = bytes(rng.randrange(256) for _ in range(field[1] - field[0]))
        return _repack(raw[:m.header] + bytes(hdr) + raw[m.header + BLOCK:])
    return _repack(raw[:m.start])  # cut exactly at a member boundary (no end-of-archive blocks)


def _json_member(rng: random.Random, seed: Seed, names: tuple[str, ...]) -> bytes:
    found = [m for m in seed.members if m.name in names]
    if not found:
        return _tar_level(rng, seed)
    m = rng.choice(found)
    body = seed.raw[m.data:m.data + m.size]
    if m.name == "meta.json" and rng.random() < 0.5:
        doc = json.loads(body)
        doc[rng.choice(("format_version", "epochs", "window_s", "time_epoch", "hostname", "format"))] = \
            rng.choice(META_VALUES)
        body = json.dumps(doc).encode()
    else:
        body = mutate_json(rng, body)
    return _repack(_with_data(seed.raw, m, body))


def _content_level(rng: random.Random, seed: Seed) -> bytes:
    files = [m for m in seed.members if m.name.startswith("fs/") and m.size]
    if files:  # format 1: one member's contents
        m = rng.choice(files)
        return _repack(_with_data(seed.raw, m, rng.choice(CONTENTS)))
    table_m = next((m for m in seed.members if m.name == "fs.json"), None)
    data_m = next((m for m in seed.members if m.name == "fs.data"), None)
    table = json.loads(seed.raw[table_m.data:table_m.data + table_m.size]) if table_m and data_m else None
    sizes = table["files"]["sizes"] if table else None
    if not sizes:  # no file recorded (an NVML-only recording): its recorded values are its contents
        return _json_member(rng, seed, ("nvml.json", "commands.json", "index.json"))
    blob = seed.raw[data_m.data:data_m.data + data_m.size]
    k = rng.randrange(len(sizes))
    at = sum(sizes[:k])
    body = rng.choice(CONTENTS)
    blob = blob[:at] + body + blob[at + sizes[k]:]
    sizes[k] = len(body)
    # fs.data is the later member: replace it first, so fs.json's offsets stay valid
    raw = _with_data(seed.raw, data_m, blob)
    return _repack(_with_data(raw, table_m, json.dumps(table).encode()))


def mutate(rng: random.Random, seed: Seed) -> tuple[bytes, str]:
    """One damaged snapshot and the level of its damage."""
    level = rng.choice(("gzip", "tar", "meta", "json", "json", "content", "content", "content"))
    if level == "gzip":
        return _gzip_level(rng, seed), level
    if level == "tar":
        return _tar_level(rng, seed), level
    if level == "meta":
        return _json_member(rng, seed, ("meta.json",)), level
    if level == "json":
        return _json_member(rng, seed, ("index.json", "commands.json", "nvml.json", "fs.json")), level
    return _content_level(rng, seed), level


_CRASH = re.compile(r"^(AttributeError|TypeError|KeyError|IndexError|OverflowError|RecursionError|"
                    r"ZeroDivisionError|UnicodeDecodeError|ValueError|AssertionError|NameError): ")


def check(path: str, deadline_s: float = 8.0) -> tuple[str, str | None]:
    """("refused" | "result", what broke inside a probe or None) for ``check --replay path --json``
    done in this process; any exception other than the documented refusal propagates (exit 4)."""
    from ccdiag.run.checkrun import evaluate
    from ccdiag.commands.check import _report
    from ccdiag.host.door import ReplayHost
    from ccdiag.core.output import json_text
    from ccdiag.host.snapshot import SnapshotData, SnapshotError

    try:
        snap = SnapshotData.load(path)
    except SnapshotError:
        return "refused", None
    result = evaluate(ReplayHost(snap), deadline_s=deadline_s)
    json_text(_report(result, path, None))
    for name, run in {**result.runs, **(result.later or {})}.items():
        if run.error and _CRASH.match(run.error):
            return "result", f"probe {name}: {run.error[:200]}"
    return "result", None
