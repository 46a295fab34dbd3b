"""Terminal control characters from a snapshot or a pasted file never reach the terminal raw.

SYNTHESIZED inputs: the bundled healthy sample with its host name replaced by a window-retitle
sequence, and a corpus ``topo -m`` paste with a screen-clearing sequence in a device label. Every
command that shows them (text, env file, nccl.conf, policy TOML, the rendered matrix) must print
them escaped (``\\x1b``), never as the ESC/BEL bytes a terminal would act on.
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import tarfile

import pytest

from cli_runner import run

ROOT = pathlib.Path(__file__).parent.parent
SAMPLE = ROOT / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"
HOSTILE_HOST = "node\x1b]0;pwned\x07\x1b[2J"


def _raw(text: str) -> bool:
    return "\x1b" in text or "\x07" in text or "\x9b" in text


@pytest.fixture(scope="module")
def hostile_snapshot(tmp_path_factory) -> str:
    raw = gzip.decompress(SAMPLE.read_bytes())
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as src, \
            tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src:
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name == "meta.json":
                meta = json.loads(data)
                meta["hostname"] = meta["host"] = HOSTILE_HOST
                data = json.dumps(meta).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    path = tmp_path_factory.mktemp("esc") / "hostile.snap.tar.gz"
    path.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return str(path)


@pytest.mark.parametrize("args", [
    ("check",), ("check", "--json"), ("topo",), ("topo", "--json"), ("nccl",), ("nccl", "--format", "env"),
    ("nccl", "--format", "nccl.conf"), ("nccl", "--format", "json"), ("policy", "init"),
])
def test_a_hostile_host_name_is_never_printed_raw(hostile_snapshot, args):
    code, out, err = run(*args, "--replay", hostile_snapshot)
    assert code in (0, 1), (code, err)
    assert not _raw(out) and not _raw(err), (out[-800:], err[-800:])
    assert "Traceback" not in err


def test_the_host_name_is_still_shown_escaped(hostile_snapshot):
    code, out, err = run("nccl", "--format", "env", "--replay", hostile_snapshot)
    assert "\\x1b]0;pwned" in out


def _hostile_paste(tmp_path) -> str:
    corpus = sorted((ROOT / "tests" / "fixtures" / "corpus" / "topo-m").glob("*.txt"))
    text = next(p for p in corpus if "NIC0" in p.read_text()).read_text()
    text = "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("#ccdiag-"))
    text = text.replace("NIC0: ", "NIC0: evil\x1b[2J", 1).replace("mlx5_0", "mlx5_0\x1b[2J", 1)
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("cmd", [("topo", "--from-smi"), ("nccl", "--from-smi")])
def test_a_pasted_matrix_with_escapes_is_shown_escaped(tmp_path, cmd):
    path = _hostile_paste(tmp_path)
    code, out, err = run(*cmd, path)
    assert code in (0, 1), (code, err)
    assert not _raw(out) and not _raw(err), (out[-800:], err[-800:])
    assert "Traceback" not in err


def test_a_rendered_matrix_written_to_a_file_keeps_no_escapes(tmp_path):
    path = _hostile_paste(tmp_path)
    dest = tmp_path / "out.txt"
    code, out, err = run("topo", "--from-smi", path, "-o", str(dest))
    assert code == 0, err
    assert not _raw(dest.read_text())


def test_error_messages_quoting_a_paste_never_carry_escapes(tmp_path):
    """An error names what it read (a line of a paste, a file name): that text is shown escaped."""
    bad = tmp_path / "evil\x1b[2J.txt"
    bad.write_text("GPU0\x1b]0;pwned\x07\tX\n")
    code, out, err = run("topo", "--from-smi", str(bad))
    assert code == 2 and "\x1b" not in err + out and "\x07" not in err + out
    assert "\\x1b" in err
