"""The ``ccdiag`` command line. Thin: parse options, build the host, call the library, render.

Sub-commands live in ``ccdiag/commands/<name>.py`` and are imported only when invoked, so
``ccdiag check`` does not pay for the daemon's imports (start-up time counts inside a Slurm prolog).
Every failure path ends in :func:`main` with one line on stderr and a code from
:mod:`ccdiag.core.exitcodes`; a traceback is shown only with ``CCDIAG_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import click

from ccdiag.host import procgroups
from ccdiag.core.exitcodes import ExitCode

#: command name -> (module, attribute, one-line help)
COMMANDS = {
    "check": ("ccdiag.commands.check", "command", "Pre-job verdict: is this node fit to run a job?"),
    "topo": ("ccdiag.commands.topo", "command", "Show the GPU/NIC/NVLink/PCIe topology and expected bandwidths."),
    "snapshot": ("ccdiag.commands.snapshot", "command", "Record everything the probes read into one replayable file."),
    "policy": ("ccdiag.commands.policy", "group", "Write or show the expectations a node is held to."),
    "daemon": ("ccdiag.commands.daemon", "command", "Serve Prometheus metrics from a background collection loop."),
    "nccl": ("ccdiag.commands.nccl", "command", "NCCL settings for this node with their evidence; read NCCL logs."),
    "bench": ("ccdiag.commands.bench", "command", "Measure the node's links and judge each figure against the topology."),
    "cluster": ("ccdiag.commands.cluster", "group", "Across hosts, as MPI ranks: every node's check in one report."),
    "compare": ("ccdiag.commands.compare", "command", "Outliers among many hosts' JSON reports; diff of two."),
    "health": ("ccdiag.commands.health", "group", "Health as a loop: idle-time checks, validity window, ladder, cap."),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str):
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        module, attr, _ = spec
        # an import failure here is a broken installation: let main() report it as one (exit 4),
        # never as "No such command"
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """--version: ccdiag's version and commit, Python, nvidia-ml-py, driver and NVML (ccdiag.commands.version)."""
    if not value or ctx.resilient_parsing:
        return
    from ccdiag.commands.version import version_text

    click.echo(version_text())
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="""\b
Examples:
  ccdiag check        # is this node fit to run a job?
  ccdiag topo         # the GPU/NIC matrix, links, bandwidths
  # the verdict of a recorded node
  ccdiag check --replay samples/hgx-h100-8gpu-degraded.snap.tar.gz

\b
Shell completion (bash; zsh_source / fish_source for the others):
  eval "$(_CCDIAG_COMPLETE=bash_source ccdiag)"
""")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show ccdiag's version and commit, Python, nvidia-ml-py, driver and NVML versions, and exit.")
@click.option("-v", "--verbose", count=True, help="More log detail on stderr (-vv for debug).")
def cli(verbose: int) -> None:
    """ccdiag: is this GPU node fit to run a job, and if not, what exactly is broken?

    Every command reads the live machine, or with --replay FILE a snapshot recorded anywhere.
    Exit codes: 0 ok, 1 check failed, 2 usage/input error, 3 could not evaluate, 4 internal error;
    143/129/130 ended by SIGTERM/SIGHUP/SIGINT (what ccdiag had started is killed first).
    """
    from ccdiag.core.output import setup_logging

    setup_logging(verbose)


#: sub-packages that live at the top of the source tree and exist inside ccdiag only once installed
_MAPPED = ("ccdiag.probes", "ccdiag.exporters")


def _broken_install(exc: BaseException) -> str | None:
    """The message for running ccdiag from a source tree it was not installed from: Python finds
    the ``ccdiag/`` folder of the checkout, but ``probes/`` and ``exporters/`` become
    ``ccdiag.probes`` / ``ccdiag.exporters`` only through the package mapping of an install."""
    link: BaseException | None = exc
    while link is not None and not isinstance(link, ModuleNotFoundError):
        link = getattr(link, "cause", None) or link.__cause__
    name = getattr(link, "name", None) or ""
    if any(name == m or name.startswith(m + ".") for m in _MAPPED):
        return (f"ccdiag is not installed here: {name} is missing (run ccdiag from an installed "
                f"package: `pip install .` in the source tree, or `pip install -e .`)")
    return None


def _check_install() -> str | None:
    """Whether the mapped sub-packages can be found, before any command needs them."""
    import importlib.util

    for mod in _MAPPED:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return _broken_install(ModuleNotFoundError(mod, name=mod))
    return None


def _say(message: str) -> None:
    """One line on stderr. Messages quote file names and text read from snapshots or pastes, so
    terminal control characters in them are shown escaped, never sent to the terminal."""
    from ccdiag.core.output import sanitize_text

    click.echo(sanitize_text(message), err=True)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds the command (its ``finally`` blocks remove temporary
    files) to :func:`main`, which exits ``128 + signum``. A ``BaseException``, so no ``except
    Exception`` on the way can swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


#: signals that end a command; the daemon installs its own handlers (stop, reload) over these
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _on_terminate(signum: int, frame) -> None:
    """Kill every process group ccdiag started (they run in sessions of their own, so a signal to
    ccdiag's group never reaches them), then unwind. Once here, a group started later is killed as
    it registers; a second signal during the unwinding is not raised again."""
    procgroups.kill_all(closing=True)
    for sig in TERMINATING_SIGNALS:
        signal.signal(sig, _ignore_repeat)
    raise Terminated(signum)


def _ignore_repeat(signum: int, frame) -> None:
    procgroups.kill_all(closing=True)


def _install_signal_handlers() -> dict:
    """Install the handlers; returns the previous ones (restored when :func:`main` returns, for
    a caller that runs ccdiag in its own process, as the tests do)."""
    previous = {}
    for sig in TERMINATING_SIGNALS:
        try:
            old = signal.getsignal(sig)
            if old is not signal.SIG_IGN:  # nohup'd: stay ignored
                signal.signal(sig, _on_terminate)
                previous[sig] = old
        except (ValueError, OSError):  # not the main thread (ccdiag called as a library)
            pass
    return previous


def _terminated(exc: Terminated) -> None:
    procgroups.shutdown()  # a probe thread may be starting a command right now
    _say(f"ccdiag: terminated by {signal.Signals(exc.signum).name}")
    sys.exit(128 + exc.signum)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: maps every outcome to a documented exit code."""

    broken = _check_install()
    if broken:
        _say(f"ccdiag: {broken}")
        sys.exit(int(ExitCode.INTERNAL))
    previous = _install_signal_handlers()
    try:
        _run(argv)
    except Terminated as exc:
        _terminated(exc)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def _run(argv: list[str] | None) -> None:
    from ccdiag.core.errors import CcdiagError

    try:
        rv = cli.main(args=argv, prog_name="ccdiag", standalone_mode=False)
    except Terminated:
        raise
    except CcdiagError as exc:
        # UserInputError (every parse and file error a user can cause) is one: exit 2, one line
        _say(f"ccdiag: {exc}")
        sys.exit(int(exc.exit_code))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.Abort:
        procgroups.kill_all(closing=True)
        click.echo("ccdiag: aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        procgroups.kill_all(closing=True)
        click.echo("ccdiag: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        # the reader went away (`ccdiag topo | head`): not an error worth a message
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        sys.exit(int(ExitCode.OK))
    except Exception as exc:  # noqa: BLE001 - never a traceback for the user
        cause: BaseException
        if os.environ.get("CCDIAG_DEBUG"):
            raise
        broken = _broken_install(exc)
        if broken:
            _say(f"ccdiag: {broken}")
            sys.exit(int(ExitCode.INTERNAL))
        from ccdiag.run.stages import StageError

        where, cause = "", exc
        if isinstance(exc, StageError):
            where, cause = f" in the {exc.stage} stage", exc.cause
        _say(f"ccdiag: internal error{where}: {type(cause).__name__}: {cause} "
             f"(set CCDIAG_DEBUG=1 for a traceback, and please report it)")
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(int(rv) if isinstance(rv, int) else 0)
