"""One base for errors in what a user handed to ccdiag, and one place that turns it into exit 2.

Each parser and reader raises its own precise class; every one of them is a
:class:`ccdiag.core.errors.UserInputError`, so the command line maps all of them to one line on stderr
and exit 2 without a command catching and re-wrapping it.
"""

from __future__ import annotations

import pathlib

import pytest

from ccdiag.core.errors import UserInputError
from ccdiag.core.exitcodes import ExitCode
from cli_runner import run

SAMPLES = pathlib.Path(__file__).resolve().parent.parent / "samples"


def _classes():
    from ccdiag.benchparse.errors import BenchParseError
    from ccdiag.inputs.envfile import EnvFileError
    from ccdiag.exporters.daemon import ConfigError
    from ccdiag.exporters.webconfig import WebConfigError
    from ccdiag.nccl.logread import LogError
    from ccdiag.inputs.policy import PolicyError
    from ccdiag.probes.smi_topo import TopoParseError
    from ccdiag.host.snapshot import SnapshotError
    from ccdiag.inputs.tomlread import TomlError
    from ccdiag.core.userfiles import UserFileError

    return [BenchParseError, EnvFileError, ConfigError, WebConfigError, LogError, PolicyError, TopoParseError,
            SnapshotError, TomlError, UserFileError]


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_user_input_error_is_one(cls):
    assert issubclass(cls, UserInputError)
    assert cls.exit_code == ExitCode.USAGE


def test_errors_keep_the_builtin_class_callers_catch():
    from ccdiag.inputs.policy import PolicyError
    from ccdiag.core.userfiles import UserFileError

    assert issubclass(PolicyError, ValueError) and issubclass(UserFileError, OSError)


def test_a_parse_error_raised_deep_in_a_parser_exits_2_with_one_line(tmp_path):
    """The env-file parser's error travels unwrapped through `ccdiag check` to the entry point."""
    env = tmp_path / "bad.env"
    env.write_text("NCCL_SOCKET_IFNAME=eth0\nthis is not an assignment\n")
    code, out, err = run("check", "--replay", str(SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz"), "--env-file", str(env))
    assert code == ExitCode.USAGE
    assert err.strip().splitlines() == [f"ccdiag: {env}:2: expected KEY=VALUE, got 'this is not an assignment'"]
    assert "Traceback" not in err and out == ""


def test_commands_do_not_rewrap_user_input_errors():
    """No command catches a UserInputError subclass only to raise InputError(str(exc))."""
    import re

    commands = pathlib.Path(__file__).resolve().parent.parent / "ccdiag" / "commands"
    names = "|".join(c.__name__ for c in _classes())
    pattern = re.compile(rf"except \(?[^)\n]*\b({names})\b[^\n]*:\n\s+raise InputError\(str\(exc\)\)")
    offenders = [p.name for p in commands.glob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
