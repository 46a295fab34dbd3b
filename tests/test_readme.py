"""The README is the front door: under 8 KB, every command in it runs as written, every link leads
somewhere. The quick start runs for real in a fresh copy of the tree with a new virtual
environment (slow: it installs ccdiag and its dependencies)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

README = REPO / "README.md"
SAMPLE_VERDICT = "FAIL: 8 failed (+14 folded) (node hgx-h100-synth-degraded)"


def shell_commands(text: str) -> list[str]:
    """The lines of every ```sh block (comments and blank lines left out)."""
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [l.strip() for b in blocks for l in b.splitlines() if l.strip() and not l.strip().startswith("#")]


def test_readme_is_a_front_door_under_8_kb():
    assert README.stat().st_size < 8192
    text = README.read_text()
    for heading in ("## Requirements", "## Quick start", "## Pick your integration", "## Commands", "## Exit codes"):
        assert heading in text
    assert "Python >= 3.10" in text and "RHEL / Rocky 9" in text and "Ubuntu 22.04 / 24.04" in text


def test_the_readme_commands_are_the_quick_start_and_the_tests():
    cmds = shell_commands(README.read_text())
    assert cmds[0] == ("python3 -m venv .venv && . .venv/bin/activate && pip install --no-compile . && "
                       "{ ccdiag check; ccdiag check --replay samples/hgx-h100-8gpu-degraded.snap.tar.gz; }")
    assert cmds[1:] == ["bash .ci/run"]
    # the test command is the CI script; it needs root, and the README says so
    assert subprocess.run(["bash", "-n", str(REPO / ".ci" / "run")], timeout=30).returncode == 0
    assert "as root" in README.read_text()


def test_the_quick_start_stops_when_the_install_fails_and_shows_both_verdicts_when_it_works(tmp_path):
    """The quick start as bash reads it, with python3, pip and ccdiag stood in by functions: a
    failed install runs no ccdiag at all (an old Python's refusal is the last thing printed), a
    working one runs both checks even when the first says "no driver" (exit 3)."""
    line = shell_commands(README.read_text())[0].replace(". .venv/bin/activate", "true")
    stand_ins = ('python3() { return 0; }; ccdiag() { echo "ccdiag $*"; [ "$1 $2" = "check --replay" ] && return 1; '
                 'return 3; }; ')
    failed = subprocess.run(["bash", "-c", stand_ins + "pip() { return 1; }; " + line], cwd=tmp_path,
                            capture_output=True, text=True, timeout=30)
    assert failed.stdout == "" and failed.returncode == 1
    worked = subprocess.run(["bash", "-c", stand_ins + "pip() { return 0; }; " + line], cwd=tmp_path,
                            capture_output=True, text=True, timeout=30)
    assert worked.stdout.splitlines() == ["ccdiag check", "ccdiag check --replay samples/hgx-h100-8gpu-degraded.snap.tar.gz"]
    assert worked.returncode == 1


@pytest.mark.slow
def test_the_quick_start_runs_as_written_on_a_fresh_tree(tmp_path):
    """A copy of the tree without any virtual environment or build output, the first command run
    by bash exactly as written; python3 is this test's interpreter (a supported one)."""
    tree = tmp_path / "ccdiag"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "build", "__pycache__",
                                                                ".pytest_cache"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python3")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
    line = shell_commands(README.read_text())[0]
    proc = subprocess.run(["bash", "-c", line], cwd=str(tree), env=env, capture_output=True, text=True, timeout=900)
    verdicts = [l for l in proc.stdout.splitlines() if re.match(r"^(OK|WARN|FAIL|UNKNOWN): ", l)]
    assert len(verdicts) == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert verdicts[1] == SAMPLE_VERDICT and proc.returncode == 1
    assert "Traceback" not in proc.stderr


def _table_commands(text: str) -> list[list[str]]:
    section = text[text.index("## Commands"):text.index("## Exit codes")]
    out = []
    for cell in re.findall(r"^\| (.*?) \|", section, re.M):
        for code in re.findall(r"`(ccdiag [^`]*)`", cell):
            words = [w for w in code.split()[1:] if re.fullmatch(r"[a-z]+", w)]
            out.append(words)
    return out


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
def test_every_command_in_the_table_exists():
    commands = _table_commands(README.read_text())
    assert len(commands) >= 8
    for words in commands:
        proc = subprocess.run([sys.executable, "-m", "ccdiag", *words, "--help"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, (words, proc.stderr)


def _links(path) -> list[str]:
    return [m for m in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()) if "://" not in m]


@pytest.mark.parametrize("page", [README, *sorted((REPO / "docs").glob("*.md")), REPO / "slurm" / "README.md",
                                  REPO / "systemd" / "README.md", REPO / "monitoring" / "README.md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_leads_somewhere(page):
    missing = [l for l in _links(page) if not (page.parent / l).exists()]
    assert missing == []


def test_nothing_but_the_readme_links_is_needed_to_reach_every_doc():
    linked = {(REPO / "docs" / l).resolve() for l in _links(REPO / "docs" / "README.md")}
    assert set((REPO / "docs").glob("*.md")) - {REPO / "docs" / "README.md"} <= linked


@pytest.mark.parametrize("page", ["slurm/README.md", "systemd/README.md", "monitoring/README.md", "docs/install.md",
                                  "docs/kubernetes.md", "docs/prometheus.md", "docs/tickets.md"])
def test_each_install_doc_ends_with_a_verify_step(page):
    text = (REPO / page).read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[-1] == "Verify"
    assert "```sh" in text.split("## Verify", 1)[1]


def test_the_tour_shows_what_ccdiag_prints():
    """The sample's verdict in the README is the real output, cut with "..." but never reworded."""
    text = README.read_text()
    shown = re.search(r"## The sample's verdict in one minute\n\n```\n(.*?)```", text, re.S).group(1).splitlines()
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--replay",
                           str(REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "100"})
    real = proc.stdout.splitlines()
    pos = 0
    for line in shown:
        if line.strip() == "...":
            continue
        assert line in real[pos:], line
        pos = real.index(line, pos) + 1
