"""Exit codes, defined once; the table of docs/commands.md is checked against :data:`EXIT_CODE_DOCS` by a
test (and the README's short table for the same codes).

Scripts (Slurm prolog, HealthCheckProgram, cron) branch on these numbers, so they never change
meaning between releases.
"""

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit status of every ccdiag command."""

    OK = 0
    FAIL = 1
    USAGE = 2
    UNEVALUATED = 3
    INTERNAL = 4


#: what each code means, as the "Exit codes" table of docs/commands.md says it
EXIT_CODE_DOCS = {
    ExitCode.OK: "The command ran; `check`: no failure (warnings allowed unless `--strict`).",
    ExitCode.FAIL: "`check`, `bench`: at least one finding failed (or warned, with `--strict`).",
    ExitCode.USAGE: "Bad command line, unreadable or malformed input file (snapshot, policy, pasted output); "
                    "an unsupported Python (ccdiag needs 3.10 or newer).",
    ExitCode.UNEVALUATED: "Could not evaluate the node: no NVIDIA driver / no GPU data, a probe timed out, "
                          "or the deadline came before a verdict; `bench`: nothing could be measured here, or a "
                          "benchmark ran out of its budget.",
    ExitCode.INTERNAL: "A bug in ccdiag: an unexpected exception, reported in one line naming the stage it "
                       "broke (`internal error in the judge stage: ...`; set `CCDIAG_DEBUG=1` for the "
                       "traceback). Also ccdiag run from a source tree that was never installed "
                       "(`ccdiag is not installed here: ...`).",
}
