"""Input that once ended in an internal error (exit 4) now gives a refusal naming its line (exit 2):
a real ``ib_write_lat`` output cut mid-row (what a killed run leaves) and a 5,000-digit nvbandwidth
column index. Both are made here from real captures in tests/fixtures/corpus by cutting or editing
one line (synthesized from real data: the edit is the point of the test)."""

from __future__ import annotations

import pathlib
import re

from cli_runner import run

CORPUS = pathlib.Path(__file__).resolve().parent / "fixtures" / "corpus"
LAT = CORPUS / "perftest" / "ib_write_lat-a-mlx5_0-hdr-ib-client-all-sizes-tabs-cpu-freq-warnings.txt"
NVB = CORPUS / "nvbandwidth" / "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt"


def test_latency_output_cut_mid_row_is_refused_with_its_line(tmp_path):
    text = LAT.read_text()
    cut = text.index("\n 32 ") + 3  # the run was killed after printing " 3" of the 32-byte row
    f = tmp_path / "ib_write_lat-killed.txt"
    f.write_text(text[:cut])
    code, out, err = run("bench", "import", str(f))
    assert code == 2, err
    assert "cut mid-row" in err and "line " in err and "Traceback" not in err


def test_every_cut_of_a_latency_output_is_exit_2_or_3(tmp_path):
    text = LAT.read_text()
    start = text.index("#bytes")
    for cut in range(start, len(text), 97):
        f = tmp_path / "cut.txt"
        f.write_text(text[:cut])
        code, _, err = run("bench", "import", str(f))
        assert code in (2, 3), (cut, err)


def test_a_5000_digit_column_index_is_refused(tmp_path):
    lines = NVB.read_text().split("\n")
    i = next(i for i, l in enumerate(lines) if re.match(r"^\s+0\s+1\s+2", l))
    lines[i] = lines[i].replace(" 7", " " + "9" * 5000, 1)
    f = tmp_path / "nvb.txt"
    f.write_text("\n".join(lines))
    code, _, err = run("bench", "import", str(f))
    assert code == 2 and "not a device index" in err and f"line {i + 1}" in err
