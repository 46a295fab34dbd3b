"""Errors that end a command with a clear one-line message and a documented exit code."""

from __future__ import annotations

from ccdiag.exitcodes import ExitCode


class CcdiagError(Exception):
    """An error for the user, not a bug: printed as one line, exits with ``exit_code``."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, exit_code: ExitCode | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(CcdiagError):
    """A file given on the command line is missing, unreadable or malformed."""

    exit_code = ExitCode.USAGE


class NotEvaluated(CcdiagError):
    """The node could not be evaluated (no driver, deadline reached)."""

    exit_code = ExitCode.UNEVALUATED
