"""Run ``ccdiag ARGS`` in-process through the real entry point, exit-code mapping included.

Faster than a subprocess and still exercises :func:`ccdiag.commands.cli.main`, which is where outcomes
become the documented exit codes.
"""

from __future__ import annotations

import sys

from click.testing import CliRunner

from ccdiag.commands.cli import main


def run(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``ccdiag *args``."""
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()


def unwrap(text: str) -> list[str]:
    """The logical lines of a wrapped text report: a line indented 6 or more columns continues the
    line before it (``ccdiag.report.render.wrap_line`` hangs every continuation that deep)."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and line.startswith("      "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines
