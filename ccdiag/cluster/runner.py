"""One bounded life cycle for every cluster command: work, gather, report, end.

Why: the rules "every wait has a deadline", "rank 0 names the ranks that did not answer" and
"Abort only after printing the report" are the same for the benchmark, the pairwise matrix and
the cluster check, so they live here once. The budget is split: the work gets all but a reserve;
the gather of per-rank results gets most of the reserve; a watchdog thread fires a little after
the whole budget in case a blocking MPI call (the reference MPI_Allreduce) never returns.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ccdiag.cluster.mpictx import (Deadline, DeadlineExpired, Liveness, Watchdog, finish, gather_to_root,
                                   host_identity, load_mpi)
from ccdiag.core.errors import NotEvaluated
from ccdiag.core.exitcodes import ExitCode

#: what launchers set to the number of tasks they started (Slurm's step, Slurm's job, OpenMPI, PMI)
LAUNCHER_SIZE_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")


@dataclass
class RankOutcome:
    """What rank 0 knows at the end: every answer, the silent ranks, the errors ranks reported."""

    size: int
    answers: dict[int, dict] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)
    waited_on: dict[int, list[int]] = field(default_factory=dict)

    def idents(self) -> dict[int, dict]:
        return {r: a.get("ident", {}) for r, a in self.answers.items()}

    def results(self) -> dict[int, Any]:
        return {r: a.get("result") for r, a in self.answers.items() if a.get("result") is not None}

    def fault_lines(self) -> list[str]:
        lines = []
        for r in self.missing:
            who = [o for o, peers in self.waited_on.items() if r in peers]
            extra = f" (ranks {', '.join(map(str, who))} were waiting on it)" if who else ""
            lines.append(f"rank {r} did not answer by the deadline: dead, hung or unreachable{extra}")
        for r, err in sorted(self.errors.items()):
            host = self.answers.get(r, {}).get("ident", {}).get("host", "?")
            lines.append(f"rank {r} ({host}): {err}")
        return lines

    def to_json(self) -> dict:
        return {"size": self.size, "missing_ranks": self.missing,
                "rank_errors": {str(k): v for k, v in sorted(self.errors.items())},
                "hosts": {str(r): a.get("ident", {}).get("host") for r, a in sorted(self.answers.items())}}


def _last_resort(seconds: float) -> None:
    """End this process ``seconds`` from now whatever it is doing, from a C-level thread that
    needs no Python lock: the backstop for a rank stuck where no Python code runs (MPI_Init waiting
    for a host that hung at start-up). Its traceback dump goes to /dev/null, never to the user."""
    import faulthandler
    import os

    global _DEVNULL
    _DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - must stay open for the life of the process
    faulthandler.dump_traceback_later(seconds, exit=True, file=_DEVNULL)


_DEVNULL = None


def alone_reason(comm_size: int, env: dict) -> str | None:
    """Why a run over ``comm_size`` ranks cannot judge anything across hosts, or None.

    One rank measures nothing between hosts (its "busbw" is a memory copy), so it must never print
    a passing report. A launcher that says it started more tasks than the communicator holds means
    every task came up alone: the MPI library found no process-management interface (PMI) to join
    them, the classic ``srun`` without ``--mpi=pmix``."""
    if comm_size >= 2:
        return None
    for var in LAUNCHER_SIZE_VARS:
        try:
            launched = int(str(env.get(var, "")).split("(")[0] or 0)
        except ValueError:
            continue
        if launched > comm_size:
            return (f"the launcher started {launched} tasks ({var}={env.get(var)}) but MPI sees {comm_size} "
                    f"rank: each task runs alone because MPI found no process-management interface (PMI); "
                    f"under Slurm run `srun --mpi=pmix ...` (see `srun --mpi=list`), under OpenMPI use its mpirun")
    return "needs at least 2 ranks under mpirun or srun (one rank alone measures nothing between hosts)"


def reserve_for(budget_s: float) -> float:
    """Seconds kept back from the work for gathering and reporting."""
    return min(10.0, max(2.0, 0.15 * budget_s))


def run_ranks(budget_s: float, body: Callable, report: Callable[[RankOutcome], int],
              label: str = "ccdiag", on_expire: Callable[[], str | None] | None = None) -> int:
    """Run ``body(comm, work_deadline, ident)`` on every rank, gather its result on rank 0, call
    ``report(outcome) -> exit code`` there (which prints), then end every rank without hanging.
    ``on_expire``: on rank 0, the report of what it has, printed by the watchdog before it aborts a
    run stuck in a call that takes no deadline.

    Returns the exit code on a rank that finalizes normally (rank 0: the report's; others 0);
    a run with a silent rank ends in ``comm.Abort`` after rank 0's report."""
    t0 = time.monotonic()
    end = t0 + budget_s
    reserve = reserve_for(budget_s)
    _last_resort(budget_s + 3 * reserve)
    MPI = load_mpi()
    comm = MPI.COMM_WORLD
    import os

    why = alone_reason(comm.size, dict(os.environ))
    if why:
        raise NotEvaluated(why)
    work = Deadline(end - reserve, budget_s)
    gather_dl = Deadline(end - reserve * 0.3, budget_s)
    final_dl = Deadline(end + reserve, budget_s)
    live = Liveness(comm)
    ident = host_identity()
    ident["rank"] = comm.rank

    def expire() -> None:
        # a blocking call outlived the whole budget: name who is silent, then end the job
        try:
            if comm.rank == 0:
                if on_expire is not None:
                    try:
                        text = on_expire()
                    except Exception as exc:  # noqa: BLE001 - the abort below must still happen
                        text = f"{label}: could not report what was measured: {type(exc).__name__}: {exc}"
                    if text:
                        print(text, flush=True)
                silent = live.roll_call(min(2.0, reserve / 2))
                # the same line a run that reached its gather prints, so a reader of stdout finds the
                # silent rank named alike whichever way the budget ran out
                for r in silent:
                    print(f"rank {r} did not answer by the deadline: dead, hung or unreachable", flush=True)
                print(f"{label}: the run did not finish within its budget of {budget_s:g} s; "
                      f"ranks that did not answer: {', '.join(map(str, silent)) or 'none (all alive but slow)'}",
                      file=sys.stderr, flush=True)
            else:
                time.sleep(reserve)
                print(f"{label}: rank {comm.rank}: budget of {budget_s:g} s passed; aborting", file=sys.stderr,
                      flush=True)
        finally:
            comm.Abort(int(ExitCode.UNEVALUATED))

    dog = Watchdog(budget_s + reserve * 0.5 + (0 if comm.rank == 0 else reserve), expire)
    answer: dict[str, Any] = {"ident": ident}
    try:
        answer["result"] = body(comm, work, ident)
    except DeadlineExpired as exc:
        answer["error"] = str(exc)
        answer["waiting_on"] = exc.waiting_on
    except Exception as exc:  # noqa: BLE001 - a rank's failure is reported by rank 0, never a traceback
        answer["error"] = f"{type(exc).__name__}: {exc}"
    got = gather_to_root(comm, answer, gather_dl)
    code = 0
    ok = True
    if comm.rank == 0:
        assert got is not None  # the root holds every rank's answer
        out = RankOutcome(size=comm.size, answers=got.objs, missing=got.missing)
        for r, a in got.objs.items():
            if a.get("error"):
                out.errors[r] = a["error"]
            if a.get("waiting_on"):
                out.waited_on[r] = a["waiting_on"]
        try:
            code = report(out)
        except Exception as exc:  # noqa: BLE001
            print(f"{label}: internal error while reporting: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = int(ExitCode.INTERNAL)
        ok = not out.missing and not out.errors
        if ok and comm.size > 1:
            # a rank that stops after answering would hang MPI_Finalize on every rank: ask once more
            late = live.roll_call(min(2.0, reserve / 3))
            if late:
                for r in late:
                    print(f"{label}: rank {r} did not answer the final roll call (it stopped after reporting); "
                          f"aborting", file=sys.stderr, flush=True)
                ok = False
        if not ok and code == 0:
            code = int(ExitCode.UNEVALUATED)
    if comm.rank == 0:
        live.stop()
    finish(comm, ok, final_dl, code or int(ExitCode.UNEVALUATED))
    # non-root ranks answer roll calls until rank 0's word has come
    live.stop()
    dog.disarm()
    return code
