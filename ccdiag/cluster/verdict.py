"""One exit code for every command that judges across hosts: what failed decides first.

Why: ``cluster check``, ``bench allreduce``, ``bench pairs`` and ``compare`` each used to put "could
not evaluate" ahead of "failed", so one silent rank, one probe that timed out or one GPU-less host's
UNKNOWN hid a host that plainly failed (exit 3 instead of 1). ``ccdiag check`` has always put a
failure first; this is that rule once for the commands across hosts:

1. anything failed (a FAIL finding, or whatever the command counts as failing) -> 1,
   whatever else could not be evaluated;
2. else anything could not be evaluated (an UNKNOWN finding, a silent rank, a rank's error, a run
   cut short), or nothing was judged at all -> 3;
3. else 0.

Pure: :func:`exit_code` takes the findings and the facts of the run, so a table of cases tests it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, UNKNOWN, Finding


def is_fail(f: Finding) -> bool:
    return f.status == FAIL


def exit_code(findings: Iterable[Finding], *, unevaluated: bool = False, judged: bool = True,
              failing: Callable[[Finding], bool] = is_fail) -> int:
    """The exit code of a run across hosts (rule in the module docstring).

    ``unevaluated``: a rank was silent or reported an error, or the run was cut short;
    ``judged``: something was held to a reference (False: nothing was, never OK);
    ``failing``: what the command counts as a failure (``cluster check`` also counts a host that
    differs from the majority, a WARN)."""
    found = list(findings)
    if any(failing(f) for f in found):
        return int(ExitCode.FAIL)
    if unevaluated or not judged or any(f.status == UNKNOWN for f in found):
        return int(ExitCode.UNEVALUATED)
    return int(ExitCode.OK)


def word(code: int) -> str:
    """The verdict's first word in text output."""
    return {0: "OK", 1: "FAIL", 3: "UNKNOWN"}.get(code, "FAIL")
