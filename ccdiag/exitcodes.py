"""Exit codes, defined once. The README's table is generated from this module's docstrings.

Scripts (Slurm prolog, HealthCheckProgram, cron) branch on these numbers, so they never change
meaning between releases.
"""

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit status of every ccdiag command."""

    OK = 0
    """The command ran; ``check``: no failure (warnings allowed unless ``--strict``)."""
    FAIL = 1
    """``check``: at least one finding failed (or warned, with ``--strict``)."""
    USAGE = 2
    """Bad command line, unreadable or malformed input file (snapshot, policy, pasted output)."""
    UNEVALUATED = 3
    """The command could not evaluate the node: no NVIDIA driver / no GPU data, a probe timed out
    or the run hit its deadline before a verdict could be reached."""
    INTERNAL = 4
    """A bug in ccdiag: an unexpected exception (reported in one line, never as a traceback)."""


EXIT_CODE_DOCS = {code: (code.__doc__ or "") for code in ExitCode}
