"""Property-based fuzzing of the snapshot loader and of ``ccdiag check --replay``, seeded from the
bundled samples: whatever the damage, loading ends in a SnapshotData or a SnapshotError, and the
CLI never exits 4. Example counts are bounded (about 20 s on 2 cores); bench/bench_fuzz.py runs
thousands.
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import random
import tarfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccdiag.host.snapshot import SnapshotData, SnapshotError
from cli_runner import run

SAMPLES = sorted((pathlib.Path(__file__).parent.parent / "samples").glob("*.snap.tar.gz"))
DATA = [p.read_bytes() for p in SAMPLES]
VALUES = [None, True, 0, -1, 2 ** 70, 1.5, "x", "", "\x1b[2J", "9" * 5000, [], {}, [1, "a"], {"k": "v"}]


def _mutate_json(raw: bytes, rng: random.Random, value) -> bytes:
    doc = json.loads(raw)
    cur, key = None, None
    node = doc
    for _ in range(rng.randint(1, 4)):
        if isinstance(node, dict) and node:
            k = rng.choice(list(node))
        elif isinstance(node, list) and node:
            k = rng.randrange(len(node))
        else:
            break
        cur, key, node = node, k, node[k]
    if cur is None:
        return json.dumps(value).encode()
    cur[key] = value
    return json.dumps(doc).encode()


@st.composite
def damaged(draw):
    data = draw(st.sampled_from(DATA))
    rng = random.Random(draw(st.integers(0, 2 ** 32)))
    op = draw(st.integers(0, 4))
    if op == 0:
        p = rng.randrange(len(data))
        return data[:p] + bytes([data[p] ^ (1 << rng.randrange(8))]) + data[p + 1:]
    if op == 1:
        return data[:rng.randrange(len(data))]
    raw = gzip.decompress(data)
    if op == 2:
        return gzip.compress(raw[:rng.randrange(len(raw))], mtime=0)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]
    if op == 3:
        del members[rng.randrange(len(members))]
    else:
        jsons = [i for i, (m, _) in enumerate(members) if m.name.endswith(".json")]
        k = rng.choice(jsons)
        members[k] = (members[k][0], _mutate_json(members[k][1], rng, draw(st.sampled_from(VALUES))))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, body in members:
            if body is not None:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
            else:
                tar.addfile(info)
    return gzip.compress(buf.getvalue(), mtime=0)


SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@SETTINGS
@given(damaged())
def test_loading_gives_a_snapshot_or_a_snapshot_error(data):
    try:
        SnapshotData.from_bytes(data, name="fuzzed")
    except SnapshotError as exc:
        assert "\n" not in str(exc)


@SETTINGS
@given(damaged())
def test_check_replay_never_exits_4(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "x.snap.tar.gz"
    path.write_bytes(data)
    code, out, err = run("check", "--replay", str(path))
    assert code != 4, err
    assert "Traceback" not in err
