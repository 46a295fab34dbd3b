"""What a person sees in a real terminal: ``check`` and ``topo`` run inside tmux (a real
pseudo-terminal of a fixed size), the screen captured as the terminal drew it.

The terminal wraps a line that is too long; ``tmux capture-pane -J`` joins such wrapped lines again,
so a capture that changes under ``-J`` is a line the program let the terminal fold. An address or
UUID split across screen lines can no longer be copied: every one the wide output holds must appear
whole on one screen line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from conftest import REPO

DEGRADED = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
PCI = re.compile(r"\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]\b")
#: run outside the source tree, so `python -m ccdiag` is the installed ccdiag and not the tree's folder
CWD = REPO / "tests"
GPU_UUID = re.compile(r"\bGPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (scripts/install-test-deps.sh installs it)")


def _screen(args: list[str], columns: int, rows: int = 50, visible: list | None = None) -> tuple[str, str]:
    """(screen lines as drawn, the same with wrapped lines joined) of ``ccdiag ARGS`` in a tmux pane
    of ``columns`` x ``rows``; ``visible`` (a list) receives what the pane shows at the end, as a
    person sees it without scrolling back."""
    sock = f"ccdiag-test-{uuid.uuid4().hex[:8]}"
    done = "__ccdiag_done__"
    cmd = " ".join([sys.executable, "-m", "ccdiag", *args]) + f"; echo {done}; sleep 60"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", str(columns), "-y", str(rows), "-s", "t",
                    f"tmux set-option -g history-limit 20000 >/dev/null 2>&1; {cmd}"],
                   env=env, check=True, timeout=30, cwd=str(CWD))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            drawn = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-20000", "-t", "t"], env=env,
                                   capture_output=True, text=True, timeout=30).stdout
            if done in drawn:
                joined = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-20000", "-t", "t"], env=env,
                                        capture_output=True, text=True, timeout=30).stdout
                if visible is not None:
                    visible.append(subprocess.run([*tmux, "capture-pane", "-p", "-t", "t"], env=env,
                                                  capture_output=True, text=True, timeout=30).stdout.split(done)[0])
                return drawn.split(done)[0], joined.split(done)[0]
            time.sleep(0.3)
        pytest.fail(f"ccdiag {' '.join(args)} did not finish in the tmux pane:\n{drawn}")
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True, timeout=30)


def _wide(args: list[str]) -> str:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "ccdiag", *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=str(CWD)).stdout


def _lines(text: str) -> list[str]:
    return [l.rstrip() for l in text.splitlines()]


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
def test_topo_on_an_80_column_terminal_splits_no_address_uuid_or_word():
    args = ["topo", "--replay", str(DEGRADED)]
    drawn, joined = _screen(args, 80)
    assert "GPU - GPU" in drawn and "RDMA NICs" in drawn
    assert _lines(drawn) == _lines(joined), "the terminal had to fold a line"
    assert max(len(l) for l in _lines(drawn)) <= 80
    wide = _wide(args)
    for pattern in (PCI, GPU_UUID):
        expected = set(pattern.findall(wide))
        assert expected and expected <= set(pattern.findall(drawn))
    # and no word cut in two: every word on the screen is a word of the wide output
    # (rules drawn by the table, and "UUID:" naming a value moved under its row, are not words)
    words = set(wide.split())
    drawn_words = [w for w in drawn.split() if w.strip("\u2500\u2501\u2502\u2504")]
    assert [w for w in drawn_words if w not in words and w.rstrip(":") not in words] == []


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
def test_check_on_a_100_column_terminal_prints_each_finding_once_root_first():
    args = ["check", "--replay", str(DEGRADED)]
    drawn, joined = _screen(args, 100)
    lines = _lines(drawn)
    assert _lines(drawn) == _lines(joined), "the terminal had to fold a line"
    assert max(len(l) for l in lines) <= 100
    verdict = next(i for i, l in enumerate(lines) if l.startswith("FAIL: 8 failed"))
    headings = [l for l in lines[verdict:] if re.match(r"^(FAIL|WARN|UNKNOWN) [a-z_]+\.[a-z_.]+ ", l)]
    assert headings[0] == "FAIL xid.recent GPU6 (0000:ba:00.0)"  # the root cause first
    # 8 root failures, each once: the lost GPU and the GPU count are folded under the XID 79 that
    # explains them, the two warnings under the port that is down
    assert len(headings) == len(set(headings)) == 8
    assert "  + 12 follow from it: gpu.count node (fail); gpu.lost GPU6 (fail);" in drawn


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
def test_check_on_a_40_line_terminal_ends_with_the_verdict_and_its_roots(tmp_path):
    """At 3 a.m. on a 100x40 terminal the details have scrolled by: the last screen still holds the
    verdict and each root problem with its component and action (and what the policy waived)."""
    policy = tmp_path / "fleet.toml"
    policy.write_text('[[waiver]]\ncheck = "ib.port_state"\ncomponent = "mlx5_4 port 1"\nuntil = 2025-01-02\n'
                      'by = "alice"\nreason = "cable on order"\n')
    args = ["check", "--replay", str(DEGRADED), "--policy", str(policy)]
    shown: list[str] = []
    drawn, joined = _screen(args, 100, rows=40, visible=shown)
    assert _lines(drawn) == _lines(joined), "the terminal had to fold a line"
    lines, screen = _lines(drawn), [l for l in _lines(shown[0]) if l]
    verdict = lines[0]
    assert verdict.startswith("FAIL: 7 failed (+12 folded), 1 waived, 1 warning")
    assert verdict not in screen[:-1] and screen[-1] == verdict  # scrolled away, and said again last
    # the roots as the JSON report orders and names them, one line each, on the last screen
    doc = json.loads(_wide(args + ["--json"]))
    roots = [f for f in doc["findings"] if f["status"] in ("fail", "warn", "unknown") and not f.get("caused_by")]
    assert len(roots) == 8
    summary = screen[screen.index(next(l for l in screen if l.startswith("summary: 8 root problems"))):]
    for f in roots:
        name = f"{f['check']} {f['component']['name']}" + (f" {f['subject']}" if f.get("subject") else "")
        assert any(l.split()[:2] == [f["status"].upper(), f["action"]] and name in l for l in summary), name
    assert "  WAIVED  ib.port_state mlx5_4 port 1, until 2025-01-02, lapses in 1.5 days" in summary
    assert "the node's action: service" in summary[0]
    # the passed list is one line on a terminal
    passed = [l for l in lines if l.startswith("passed (")]
    assert len(passed) == 1 and passed[0].endswith(" more checks") and not lines[lines.index(passed[0]) + 1]


CORPUS_TOPO = sorted((REPO / "tests" / "fixtures" / "corpus" / "topo-m").glob("*.txt"))


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
@pytest.mark.parametrize("corpus", CORPUS_TOPO, ids=lambda p: p.name)
def test_a_pasted_matrix_at_80_columns_splits_no_cell(corpus, tmp_path):
    """Real pastes (corpus) rendered for an 80-column terminal: levels, CPU lists and names whole."""
    paste = tmp_path / "paste.txt"
    paste.write_bytes(corpus.read_bytes())
    narrow = subprocess.run([sys.executable, "-m", "ccdiag", "topo", "--from-smi", str(paste)], capture_output=True,
                            text=True, timeout=60, cwd=str(CWD), env={**os.environ, "COLUMNS": "80"})
    if narrow.returncode == 2:
        pytest.skip(f"not a matrix ccdiag reads: {narrow.stderr.strip()[:120]}")
    wide = _wide(["topo", "--from-smi", str(paste)])
    assert max(len(l) for l in _lines(narrow.stdout)) <= 80
    # the titles of the narrow blocks: "GPU - GPU", "GPU - NIC", "GPU - NIC (NIC0-NIC9)"
    words = set(wide.split()) | {"-"}
    titles = re.compile(r"\((GPU|NIC)\d+-(GPU|NIC)\d+\)")
    assert [w for w in narrow.stdout.split()
            if w not in words and w.rstrip(":") not in words and not titles.fullmatch(w)] == []
