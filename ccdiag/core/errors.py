"""Errors that end a command with a clear one-line message and a documented exit code.

Every error in what a user handed to ccdiag (a file named on the command line, a snapshot, a
policy, an environment file, a pasted tool output) derives from :class:`UserInputError`, wherever
it is raised: the library raises its own precise class, and :func:`ccdiag.commands.cli.main` turns any of
them into one line on stderr and exit 2. Commands therefore never catch and re-wrap them.
"""

from __future__ import annotations

from ccdiag.core.exitcodes import ExitCode


class CcdiagError(Exception):
    """An error for the user, not a bug: printed as one line, exits with ``exit_code``."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str = "", exit_code: ExitCode | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UserInputError(CcdiagError):
    """Bad input from the user (exit 2): the base of every parse and file error a user can cause."""

    exit_code = ExitCode.USAGE


class InputError(UserInputError):
    """A file or option given on the command line is missing, unreadable or malformed."""


class NotEvaluated(CcdiagError):
    """The node could not be evaluated (no driver, deadline reached)."""

    exit_code = ExitCode.UNEVALUATED
