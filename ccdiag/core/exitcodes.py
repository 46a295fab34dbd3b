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
    ExitCode.OK: "The command ran; `check`: no failure (warnings allowed unless `--strict`; a waived problem is "
                 "no failure).",
    ExitCode.FAIL: "`check`, `bench`: at least one finding failed (or warned, with `--strict`).",
    ExitCode.USAGE: "Bad command line, unreadable or malformed input file (snapshot, policy, a waiver of a check "
                    "no check has, pasted output); `check --gpu` naming a GPU the node does not have; an "
                    "unsupported Python (ccdiag needs 3.10 or newer).",
    ExitCode.UNEVALUATED: "Could not evaluate the node: no NVIDIA driver / no GPU data, a probe timed out, "
                          "or the deadline came before a verdict; `bench`: nothing could be measured here, or a "
                          "benchmark ran out of its budget.",
    ExitCode.INTERNAL: "A bug in ccdiag: an unexpected exception, reported in one line naming the stage it "
                       "broke (`internal error in the judge stage: ...`; set `CCDIAG_DEBUG=1` for the "
                       "traceback). Also ccdiag run from a source tree that was never installed "
                       "(`ccdiag is not installed here: ...`).",
}

#: the codes of a command ended by a signal (not an :class:`ExitCode`: one per signal). SIGTERM and
#: SIGHUP are handled: every process group ccdiag started is killed first, then ccdiag exits
#: 128 + the signal's number, as a shell reports a process the signal ended. ``ccdiag daemon``
#: handles both itself (SIGTERM stops it with 0, SIGHUP reloads its settings).
SIGNAL_EXIT_CODES = {"SIGTERM": 143, "SIGHUP": 129, "SIGINT": 130}
SIGNAL_EXIT_DOC = ("Ended by a signal: 128 + its number (143 SIGTERM, 129 SIGHUP, 130 SIGINT/Ctrl-C); every "
                   "command ccdiag had started (`nvidia-smi`, benchmarks) is killed first. `ccdiag daemon` "
                   "stops with 0 on SIGTERM and reloads on SIGHUP.")
