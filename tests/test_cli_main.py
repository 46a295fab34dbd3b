"""The CLI's contract: documented exit codes, one-line errors, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ccdiag.exitcodes import ExitCode


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
