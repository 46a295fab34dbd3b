"""The CLI's contract: documented exit codes, one-line errors, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ccdiag.core.exitcodes import ExitCode


def run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ccdiag", *args], capture_output=True, text=True, timeout=timeout)


def test_exit_codes_are_stable():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4]


def test_help_and_version_work_without_extras():
    assert run("--help").returncode == 0
    proc = run("--version")
    assert proc.returncode == 0 and "ccdiag" in proc.stdout


@pytest.mark.parametrize("args", [
    ("no-such-command",),
    ("snapshot", "--window", "-5"),
    ("snapshot", "--replay", "/nonexistent/file.snap"),
])
def test_usage_errors_exit_2_without_traceback(args):
    proc = run(*args)
    assert proc.returncode == int(ExitCode.USAGE), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("sample,expected", [("healthy", 0), ("degraded", 1)])
@pytest.mark.parametrize("fmt", [(), ("--json",)], ids=["text", "json"])
def test_a_closed_pipe_never_changes_the_verdict(sample, expected, fmt):
    """`ccdiag check | head -c1`: the reader goes away, the exit code still tells the verdict."""
    import pathlib
    import shlex

    path = pathlib.Path(__file__).resolve().parent.parent / "samples" / f"hgx-h100-8gpu-{sample}.snap.tar.gz"
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ccdiag", "check", "--replay", str(path), *fmt])
    proc = subprocess.run(["bash", "-c", f"{cmd} | head -c1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == str(expected), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["check", "snapshot", "topo"])
def test_a_missing_root_is_bad_input(command, tmp_path):
    proc = run(command, "--root", str(tmp_path / "absent"))
    assert proc.returncode == int(ExitCode.USAGE), proc.stderr
    assert "not a directory" in proc.stderr or "does not exist" in proc.stderr


def test_exit_code_tables_match_the_code():
    """docs/commands.md holds the full table; the README's short one names the same codes."""
    import pathlib
    import re

    from ccdiag.core.exitcodes import EXIT_CODE_DOCS

    repo = pathlib.Path(__file__).resolve().parent.parent
    full = (repo / "docs" / "commands.md").read_text()
    section = full.split("### Exit codes", 1)[1].split("\n\n", 2)[1]
    rows = dict(re.findall(r"^\| (\d) \| (.+?) \|$", section, flags=re.M))
    assert {int(k): v for k, v in rows.items()} == {int(k): v for k, v in EXIT_CODE_DOCS.items()}
    readme = (repo / "README.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert sorted(int(c) for c in re.findall(r"^\| (\d) \| ", readme, flags=re.M)) == sorted(int(c) for c in ExitCode)
