"""Conventions a new user looks for: examples in every command's --help (and the ones that need no
hardware actually run), ``--version`` with build information, shell completion as documented."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from ccdiag.commands.examples import EXAMPLES
from conftest import REPO


def _ccdiag(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccdiag", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_help_shows_examples(command):
    from cli_runner import run

    code, out, err = run(*command.split(), "--help")
    assert code == 0, err
    tail = out[out.index("Examples:"):]
    assert sum(line.strip().startswith(("ccdiag ", "mpirun ", "srun ")) for line in tail.splitlines()) >= 2


def test_daemon_help_shows_the_default_port():
    from cli_runner import run

    assert "127.0.0.1:9643" in run("daemon", "--help")[1]


RUNNABLE = sorted({cmd for examples in EXAMPLES.values() for cmd, _ in examples
                   if "--replay samples/" in cmd and cmd.startswith("ccdiag ")})


@pytest.mark.slow  # a child process per case (the fast loop leaves it to CI)
@pytest.mark.parametrize("line", RUNNABLE)
def test_examples_that_need_no_hardware_run_as_written(line, tmp_path):
    os.symlink(REPO / "samples", tmp_path / "samples")
    # the file named in the bench import example: a real nvbandwidth output from the corpus
    nvb = REPO / "tests" / "fixtures" / "corpus" / "nvbandwidth" / "nvbandwidth-v0.4-d2d-memcpy-read-ce-h100-x8-azure-ndv5.txt"
    (tmp_path / "nvbandwidth.txt").write_bytes(nvb.read_bytes())
    args = shlex.split(line)[1:]
    proc = _ccdiag(*args, cwd=str(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr  # 1: the degraded sample fails its check
    assert "Traceback" not in proc.stderr


def test_version_names_commit_python_nvml_binding_and_driver():
    proc = _ccdiag("--version")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.match(r"ccdiag \S+, commit (\S+( \+local changes)? \((recorded at build time|read at run time "
                    r"from the source tree .+)\)|unknown \(not built from a git checkout\))$", lines[0]), lines[0]
    assert lines[1].startswith(f"Python {sys.version_info[0]}.{sys.version_info[1]}.")
    assert re.match(r"nvidia-ml-py (\d+\.\d+|not installed)", lines[2])
    # a driver and NVML version where NVML answers, else why not (this machine: no driver)
    assert re.match(r"NVIDIA driver( \S+|: not read \(.+\))$", lines[3]), lines[3]


def test_commit_recorded_at_build_time_wins(tmp_path, monkeypatch):
    from ccdiag.commands import version

    recorded = tmp_path / "_build_commit.txt"
    recorded.write_text("0123456789ab\n")
    monkeypatch.setattr(version, "BUILD_COMMIT_FILE", str(recorded))
    assert version.commit_line() == "commit 0123456789ab (recorded at build time)"
    monkeypatch.setattr(version, "BUILD_COMMIT_FILE", str(tmp_path / "absent"))
    monkeypatch.setattr(version, "PACKAGE_DIR", str(tmp_path / "pkg"))  # no git checkout around it
    assert version.commit_line() == "commit unknown (not built from a git checkout)"


def test_shell_completion_as_documented():
    proc = _ccdiag(env={"_CCDIAG_COMPLETE": "bash_complete", "COMP_WORDS": "ccdiag ch", "COMP_CWORD": "1"})
    assert "plain,check" in proc.stdout.splitlines()
    script = _ccdiag(env={"_CCDIAG_COMPLETE": "bash_source"}).stdout
    assert "_ccdiag_completion" in script and "complete " in script


def test_a_missing_extra_names_the_pip_install_line(monkeypatch, tmp_path):
    """--web.config.file without PyYAML: the message says which install line brings it."""
    from ccdiag.exporters.webconfig import WebConfigError, load_web_config

    cfg = tmp_path / "web.yml"
    cfg.write_text("basic_auth_users: {}\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(WebConfigError, match=r"pip install '\.\[daemon\]'"):
        load_web_config(str(cfg))


def test_every_extra_hint_in_the_code_is_a_pip_install_line_that_works_from_the_tree():
    """`pip install 'ccdiag[gpu]'` would look for ccdiag on an index; the source tree has it."""
    hints = []
    for base in (REPO / "ccdiag", REPO / "exporters", REPO / "probes"):
        for path in base.rglob("*.py"):
            hints += re.findall(r"pip install '[^']*\[\w+\]'", path.read_text())
    assert hints and all(re.fullmatch(r"pip install '\.\[(gpu|mpi|daemon|test)\]'", h) for h in hints), hints


def test_no_command_is_left_without_examples():
    """Every command and sub-command, including ones added later, has an Examples block."""
    import click

    from ccdiag.commands.cli import COMMANDS, cli

    ctx = click.Context(cli)
    missing = []
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        subs = [(f"{name} {s}", cmd.get_command(ctx, s)) for s in cmd.list_commands(ctx)] \
            if isinstance(cmd, click.Group) else []
        missing += [n for n, c in [(name, cmd), *subs] if c is not None and "Examples:" not in (c.epilog or "")]
    assert missing == []
