"""One evaluation of a node: probes, a second counter sample, topology, checks, and the exit code.

``ccdiag check`` and the daemon both call :func:`evaluate`, so a node gets the same verdict from a
prolog, from a Prometheus scrape and from the replay of its snapshot.

The run is bounded and split into stages (:mod:`ccdiag.stages`): the probes (both samples of the
window) share the probing stage, which ends before the deadline by the judge's reserve
(:func:`ccdiag.probing.run_probes` abandons a probe still running at its end, and the sampling
window is shortened to fit); topology plus checks then run on a worker until the judging stage's
end. A hung ``nvidia-smi`` or NVML call therefore costs at most the probing share, becomes an
``unknown`` finding naming the call the probe was blocked in, and the checks still judge what the
other probes read. A stage that raises is a ccdiag bug: :class:`ccdiag.stages.StageError` (exit 4).

Exit code rule (see :mod:`ccdiag.exitcodes`):

* ``1`` when any finding failed (or warned, with ``strict``): a failure found before the deadline
  is still a failure, whatever else timed out;
* else ``3`` when anything could not be evaluated: an ``unknown`` finding (a probe timed out, a read
  was refused, a check broke) or the deadline was reached before the checks finished;
* else ``0``. Findings that ``skip`` (no NVIDIA GPU on the PCI bus and no policy expecting one) do
  not prevent ``0``: a box without GPUs is honestly fine for what ccdiag checks. A node whose PCI bus
  shows NVIDIA GPUs but whose driver is absent is a *failure* (the GPU checks say so), not a ``3``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ccdiag.exitcodes import ExitCode
from ccdiag.findings import FAIL, STATUSES, UNKNOWN, WARN, Component, Evidence, Finding, worst
from ccdiag.host import Host
from ccdiag.policy import DEFAULT_POLICY, Policy
from ccdiag.probing import ALL_PROBES, FAILED, TIMEOUT, ProbeRun, run_probes
from ccdiag.stages import Budget, StageTimeout, run_stage

#: probes whose counters are judged by their change over the window; re-read in the second epoch
COUNTER_PROBES = ("nvml", "infiniband", "pcie")

#: default bound on a whole evaluation, well inside Slurm's 60 s health-check/prolog budgets
DEFAULT_DEADLINE_S = 30.0
#: default sampling window on a live node: long enough to see an error counter move, short enough
#: for a prolog
DEFAULT_WINDOW_S = 2.0


@dataclass(frozen=True)
class CheckResult:
    """What one evaluation found, with everything a caller needs to report or export it.

    ``runs``/``later``: the probe runs of the first and second sample (``later`` is None without a
    window). ``timed_out``: a probe was abandoned at its deadline, or the deadline was reached
    before the checks finished. ``exit_code`` follows the rule in this module's docstring.
    """

    runs: dict[str, ProbeRun]
    later: dict[str, ProbeRun] | None
    topology: Any
    findings: list[Finding]
    exit_code: int
    timed_out: bool
    window_s: float = 0.0
    deadline_s: float = DEFAULT_DEADLINE_S
    duration_s: float = 0.0
    started_at: float = 0.0  # wall-clock time the evaluation began
    observed_at: float = 0.0  # wall-clock time of the observation (the recording time on replay)
    meta: dict = field(default_factory=dict)
    policy: Policy = DEFAULT_POLICY
    env_source: str = "environment"
    strict: bool = False
    budget: Budget | None = None
    bench: list = field(default_factory=list)  # ccdiag.bench results when `check --bench` ran

    @property
    def status(self) -> str:
        """The worst finding status (``pass`` when there are none)."""
        return worst(self.findings)

    @property
    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in STATUSES}
        for f in self.findings:
            counts[f.status] = counts.get(f.status, 0) + 1
        return counts

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.status == FAIL]

    @property
    def hostname(self) -> str | None:
        return self.meta.get("hostname")

    def probe_durations(self) -> dict[str, float]:
        """Seconds each probe of the first sample took (the daemon exports these)."""
        return {name: run.duration_s for name, run in self.runs.items()}

    def probe_success(self) -> dict[str, bool]:
        """Whether each probe delivered data (``ok`` or ``partial``), for ``ccdiag_probe_success``."""
        return {name: run.usable for name, run in self.runs.items()}

    def run_info(self, replayed_from: str | None = None) -> dict:
        """The report's ``run`` section."""
        info = {"replayed_from": replayed_from, "duration_s": round(self.duration_s, 4),
                "deadline_s": self.deadline_s, "timed_out": self.timed_out, "window_s": self.window_s,
                "strict": self.strict, "env_source": self.env_source}
        if self.budget is not None:
            info["stages"] = self.budget.to_json()
        return info


def exit_code_for(findings: Iterable[Finding], timed_out: bool = False, strict: bool = False) -> ExitCode:
    """The process exit code of a verdict (rule in the module docstring)."""
    statuses = {f.status for f in findings}
    if FAIL in statuses or (strict and WARN in statuses):
        return ExitCode.FAIL
    if UNKNOWN in statuses or timed_out:
        return ExitCode.UNEVALUATED
    return ExitCode.OK


# -- where a probe hung ----------------------------------------------------------------------------
def _blocked_in(thread_ident: int) -> str | None:
    """The host-door call a stuck probe thread is waiting in (an NVML call, a command, a file).

    Best effort, CPython only: walks the thread's current stack from the innermost frame outwards
    and names the first door operation found, so the finding says ``nvmlDeviceGetUUID(6)`` or
    ```nvidia-smi topo -m``` instead of only "the nvml probe timed out".
    """
    frames = getattr(sys, "_current_frames", None)
    if frames is None:
        return None
    frame = frames().get(thread_ident)
    while frame is not None:
        code = frame.f_code
        fname = os.path.basename(code.co_filename)
        loc = frame.f_locals
        if fname == "nvmlcall.py":
            if code.co_name == "_run" and "label" in loc:
                from ccdiag.nvmlcall import call_name

                return f"NVML call {call_name(loc['label'], tuple(loc.get('args') or ()))}"
            if code.co_name == "_ensure_init":
                return "NVML call nvmlInit()"
            if code.co_name == "call" and "fn" in loc:
                from ccdiag.nvmlcall import call_name

                return f"NVML call {call_name(loc['fn'], tuple(loc.get('args') or ()))}"
        elif fname == "host.py":
            if code.co_name == "run" and "argv" in loc:
                return "command `" + " ".join(str(a) for a in loc["argv"]) + "`"
            if code.co_name in ("_read_real", "_list_real") and "real" in loc:
                return f"read of {loc['real']}"
            if code.co_name == "read_kmsg":
                return "read of /dev/kmsg"
        frame = frame.f_back
    return None


def _probe_threads() -> set[threading.Thread]:
    # Thread objects, not idents: an abandoned thread that exits frees its ident for a new one
    return {t for t in threading.enumerate() if t.name.startswith("probe-") and t.ident}


def _run_probes_traced(host: Host, names: list[str], deadline: float) -> dict[str, ProbeRun]:
    """:func:`run_probes`, then for each probe abandoned at the deadline add to its error what it
    was blocked in (threads started by this call only, told apart from earlier abandoned ones)."""
    before = _probe_threads()
    runs = run_probes(host, names, deadline=deadline)
    if any(r.status == TIMEOUT for r in runs.values()):
        fresh = {t.ident: t.name[len("probe-"):] for t in _probe_threads() - before}
        by_probe = {probe: ident for ident, probe in fresh.items()}
        for name, run in runs.items():
            if run.status != TIMEOUT or name not in by_probe:
                continue
            where = _blocked_in(by_probe[name])
            if where:
                runs[name] = dataclasses.replace(run, error=f"{run.error}; blocked in {where}")
    return runs


# -- the evaluation --------------------------------------------------------------------------------
def _replay_window(host: Host) -> tuple[bool, float]:
    """(has a second epoch, its window) for a replayed snapshot."""
    meta = host.meta()
    try:
        epochs = int(meta.get("epochs") or 1)
    except (TypeError, ValueError):
        epochs = 1
    try:
        window = float(meta.get("window_s") or 0.0)
    except (TypeError, ValueError):
        window = 0.0
    return epochs >= 2, window


def _timeout_findings(runs: dict[str, ProbeRun], findings: list[Finding], sample: str) -> list[Finding]:
    """An ``unknown`` finding for every probe abandoned at its deadline (or broken by a bug) that the
    checks did not already report, so neither can ever pass silently."""
    extra = []
    for name, run in runs.items():
        if run.status not in (TIMEOUT, FAILED):
            continue
        named = any(f.status in (UNKNOWN, FAIL) and f.component.kind == "probe"
                    and name in (f.component.name, f.component.device) for f in findings)
        named = named or any(f.status in (UNKNOWN, FAIL) and f.check.startswith("probe")
                             and f"probe {name}" in f.summary for f in findings)
        if named:
            continue
        if run.status == FAILED:
            extra.append(Finding(
                check="probe.failed", status=UNKNOWN, component=Component("probe", name, device=name),
                summary=f"probe {name} ({sample} sample) broke: {run.error}",
                expected="every probe returns its observation",
                remedy="This is a ccdiag bug: attach `ccdiag snapshot` output to a bug report."))
            continue
        extra.append(Finding(
            check="probe.timeout", status=UNKNOWN, component=Component("probe", name, device=name),
            summary=f"probe {name} ({sample} sample) did not finish: {run.error}",
            evidence=(Evidence("duration_s", round(run.duration_s, 3), f"probe {name}"),),
            expected="every probe finishes within its deadline",
            remedy=("A GPU driver call or command that never returns usually means a wedged GPU or driver: "
                    "check `dmesg` for XIDs, then drain and reset or reboot the node.")))
    return extra


def _deadline_finding(deadline_s: float, judge_s: float) -> Finding:
    return Finding(
        check="check.deadline", status=UNKNOWN, component=Component("node", "ccdiag"),
        summary=f"the checks did not finish within the {deadline_s:g}s deadline (judging had "
                f"{judge_s:.2g}s of it); no verdict for the rest",
        expected=f"a verdict within {deadline_s:g}s",
        remedy="Re-run with a larger --timeout; if it recurs, attach `ccdiag snapshot` output to a bug report.")


def evaluate(host: Host, policy: Policy | None = None, window_s: float = 0.0,
             deadline_s: float = DEFAULT_DEADLINE_S, env: dict[str, str] | None = None,
             env_source: str | None = None, *, strict: bool = False, only: Iterable[str] | None = None,
             probes: Iterable[str] | None = None, budget: Budget | None = None,
             load_links: bool = False) -> CheckResult:
    """Probe ``host``, sample counters again after ``window_s``, build the topology, run the checks.

    On a replayed snapshot with two epochs the recorded window is used and nothing sleeps; on one
    with a single epoch there is no second sample. ``env`` defaults to the host's NCCL/CUDA
    environment. ``only``: check-id prefixes to run. ``probes``: probe names (default: all).
    ``budget``: the stage ends to keep (default: :meth:`Budget.plan` of ``deadline_s``; a caller
    adding a benchmark stage plans one with its share). ``load_links``: on a live host, keep every
    GPU's PCIe link busy (:mod:`ccdiag.linkload`) while the first sample is read, so link speeds
    are judged under load. Returns within ``deadline_s`` plus about a
    second whatever the host does; raises :class:`ccdiag.stages.StageError` when a stage raised.
    """
    policy = policy or DEFAULT_POLICY
    budget = budget or Budget.plan(deadline_s)
    t0 = budget.start
    started_at = time.time()
    if hasattr(host, "deadline"):
        # commands started by probes never outlive the probing stage, even ones a probe starts late
        host.deadline = budget.probe_end
    names = list(probes or ALL_PROBES)
    load = None
    if load_links:
        from ccdiag.linkload import LinkLoad

        load = LinkLoad(max_s=max(0.5, min(5.0, budget.left(budget.probe_end) / 2)))
        load.start(bool(host.live))
    try:
        runs = _run_probes_traced(host, names, budget.probe_end)
    finally:
        load_state = load.stop() if load is not None else None
    timed_out = any(r.status == TIMEOUT for r in runs.values())

    later: dict[str, ProbeRun] | None = None
    effective_window = 0.0
    counter_names = [n for n in COUNTER_PROBES if n in runs and runs[n].usable]
    if host.live:
        # the window and the second pass share what is left of the probing stage
        room = budget.left(budget.probe_end)
        if window_s > 0 and counter_names and room > 0.2:
            effective_window = min(float(window_s), room / 2)
            host.next_epoch(effective_window)
            later = _run_probes_traced(host, counter_names, budget.probe_end)
    else:
        has_later, recorded_window = _replay_window(host)
        if has_later and counter_names:
            host.next_epoch(0.0)
            effective_window = recorded_window
            later = _run_probes_traced(host, counter_names, budget.probe_end)
    if later is not None:
        timed_out = timed_out or any(r.status == TIMEOUT for r in later.values())

    meta = host.meta()
    if load_state is not None:
        meta = {**meta, "link_load": load_state.to_json()}
    if env is None:
        env = host.environ()
        # a replay judges the settings the recording run judged, and names them the same way
        env_source = env_source or meta.get("env_source") or "environment"
    env_source = env_source or "environment"
    ctx_kwargs = dict(runs=runs, later=later, window_s=effective_window, policy=policy, env=dict(env),
                      env_source=env_source, now=host.now(), meta=meta)

    def judge() -> tuple[Any, list[Finding]]:
        from ccdiag.checks import CheckContext, run_checks
        from ccdiag.topology import build_topology

        from ccdiag.causes import link_causes

        topology = build_topology(runs)
        return topology, link_causes(list(run_checks(CheckContext(topology=topology, **ctx_kwargs), only=only)))

    topology: Any = None
    findings: list[Finding]
    try:
        topology, findings = run_stage("judge", judge, budget.judge_end)
        if not findings and not only:
            findings.append(Finding(
                check="check.none", status=UNKNOWN, component=Component("node", "ccdiag"),
                summary="no check ran, so there is no verdict",
                remedy="The ccdiag installation is incomplete: reinstall it (`pip install ccdiag`)."))
    except StageTimeout as exc:
        timed_out = True
        findings = [_deadline_finding(deadline_s, exc.budget_s)]
    findings += _timeout_findings(runs, findings, "first")
    if later:
        findings += _timeout_findings(later, findings, "second")
    findings.sort(key=Finding.sort_key)
    code = exit_code_for(findings, timed_out, strict)
    return CheckResult(runs=runs, later=later, topology=topology, findings=findings,
                       exit_code=int(code), timed_out=timed_out, window_s=effective_window,
                       deadline_s=float(deadline_s), duration_s=time.monotonic() - t0, started_at=started_at,
                       observed_at=host.now(), meta=meta, policy=policy, env_source=env_source, strict=strict,
                       budget=budget)


#: seconds of a check's deadline that ``--bench quick`` asks for (Budget.plan caps it at half of
#: what the probes and the judge leave)
QUICK_BENCH_S = 12.0


def add_benchmarks(result: CheckResult, host: Host, names: Iterable[str] = (), env: dict | None = None) -> CheckResult:
    """Run the applicable benchmarks in quick mode until the budget's bench stage ends; returns the
    result with their findings folded into the verdict. Benchmarks that cannot run here skip (no finding), so a node
    without GPUs or RDMA ports gets the same verdict as without ``--bench``."""
    from ccdiag.bench.registry import BenchContext
    from ccdiag.bench.runner import run_benchmarks

    budget = result.budget
    if budget is None or budget.left(budget.bench_end) < 1.0:
        return result
    ctx = BenchContext(host=host, topology=result.topology, runs=result.runs, policy=result.policy, quick=True,
                       deadline=budget.bench_end, env=env)
    try:
        benches = run_stage("bench", lambda: run_benchmarks(list(names), ctx), budget.bench_end, grace_s=3.0)
    except StageTimeout:
        benches = []
    findings = sorted(result.findings + [f for b in benches for f in b.findings], key=Finding.sort_key)
    return dataclasses.replace(result, bench=benches, findings=findings,
                               exit_code=int(exit_code_for(findings, result.timed_out, result.strict)))


def close_host(host: Host, timeout: float = 0.5, result: CheckResult | None = None) -> None:
    """``host.close()`` bounded in time: NVML shutdown waits on a lock a hung call may still hold.
    After a run that timed out nothing is called at all: a driver that hung once is not poked again."""
    if result is not None and result.timed_out:
        return
    t = threading.Thread(target=host.close, name="ccdiag-close", daemon=True)
    t.start()
    t.join(timeout)


__all__ = ["CheckResult", "COUNTER_PROBES", "DEFAULT_DEADLINE_S", "close_host", "evaluate", "exit_code_for"]
