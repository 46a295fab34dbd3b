"""One evaluation of a node: probes, a second counter sample, topology, checks, and the exit code.

``ccdiag check`` and the daemon both call :func:`evaluate`, so a node gets the same verdict from a
prolog, from a Prometheus scrape and from the replay of its snapshot.

The run is bounded and split into stages (:mod:`ccdiag.run.stages`): the probes (both samples of the
window, both read by :func:`ccdiag.run.observe.observe`) share the probing stage, which ends before the
deadline by the judge's reserve (a probe still running at its end is abandoned, and the sampling
window is shortened to fit); topology plus checks then run on a worker until the judging stage's
end. A hung ``nvidia-smi`` or NVML call therefore costs at most the probing share, becomes an
``unknown`` finding naming the call the probe was blocked in, and the checks still judge what the
other probes read. A stage that raises is a ccdiag bug: :class:`ccdiag.run.stages.StageError` (exit 4).

Exit code rule (see :mod:`ccdiag.core.exitcodes`):

* ``1`` when any finding failed (or warned, with ``strict``): a failure found before the deadline
  is still a failure, whatever else timed out;
* else ``3`` when anything could not be evaluated: an ``unknown`` finding (a probe timed out, a read
  was refused, a check broke) or the deadline was reached before the checks finished;
* else ``0``. Findings that ``skip`` (no NVIDIA GPU on the PCI bus and no policy expecting one) do
  not prevent ``0``: a box without GPUs is honestly fine for what ccdiag checks. A node whose PCI bus
  shows NVIDIA GPUs but whose driver is absent is a *failure* (the GPU checks say so), not a ``3``.
  Findings the policy ``waived`` (:mod:`ccdiag.checks.waiving`, applied after the root causes) do
  not count either; what follows from them on another component does.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.findings import FAIL, STATUSES, UNKNOWN, WARN, Component, Evidence, Finding, verdict_status
from ccdiag.host.door import Host
from ccdiag.run.observe import Observation, observe
from ccdiag.run.observe import close_host as observe_close_host
from ccdiag.inputs.policy import DEFAULT_POLICY, Policy
from ccdiag.probes.registry import FAILED, NOT_RECORDED_PREFIX, TIMEOUT, ProbeRun
from ccdiag.run.stages import Budget, StageTimeout, run_stage

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

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
    topology: Topology | None
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
    #: what each of the policy's waivers did (ccdiag.checks.waiving.WaiverOutcome), in policy order
    waivers: tuple = ()

    @property
    def status(self) -> str:
        """The verdict: the worst finding status, skips not counted (:func:`verdict_status`)."""
        return verdict_status(self.findings)

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

    def run_info(self, replayed_from: str | None = None) -> dict:
        """The report's ``run`` section."""
        info: dict[str, Any] = {"replayed_from": replayed_from, "duration_s": round(self.duration_s, 4),
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


# -- the evaluation --------------------------------------------------------------------------------
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
            unrecorded = (run.error or "").startswith(NOT_RECORDED_PREFIX)
            extra.append(Finding(
                check="probe.failed", status=UNKNOWN, component=Component("probe", name, device=name),
                summary=f"probe {name} ({sample} sample) " + ("not judged" if unrecorded else "broke") + f": {run.error}",
                expected="every probe returns its observation",
                remedy=("What was read holds nothing this probe reads: run `ccdiag check` on the node." if unrecorded
                        else "This is a ccdiag bug: attach `ccdiag snapshot` output to a bug report.")))
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
             load_links: bool = False, release_files: bool = False) -> CheckResult:
    """Observe ``host`` (:func:`ccdiag.run.observe.observe`: probes, a second counter sample after
    ``window_s``), then build the topology and run the checks.

    On a replayed snapshot with two epochs the recorded window is used and nothing sleeps; on one
    with a single epoch there is no second sample. ``env`` defaults to the host's NCCL/CUDA
    environment. ``only``: check-id prefixes to run. ``probes``: probe names (default: all).
    ``budget``: the stage ends to keep (default: :meth:`Budget.plan` of ``deadline_s``; a caller
    adding a benchmark stage plans one with its share). ``load_links``: on a live host, keep every
    GPU's PCIe link busy (:mod:`ccdiag.host.busy_pcie_links`) while the first sample is read, so link speeds
    are judged under load. ``release_files``: a replay host lets go of its recorded files once the
    probes have read them (a caller that reads the host no more). Returns within ``deadline_s`` plus about a
    second whatever the host does; raises :class:`ccdiag.run.stages.StageError` when a stage raised.
    """
    policy = policy or DEFAULT_POLICY
    budget = budget or Budget.plan(deadline_s)
    started_at = time.time()
    # commands started by probes never outlive the probing stage, even ones a probe starts late
    obs = observe(host, probes, budget.probe_end, window_s=window_s, load_links=load_links)
    release = getattr(host, "release_files", None) if release_files else None
    if callable(release):
        # also when a probe was abandoned at the deadline: on a replay it would otherwise go on
        # reading (pure Python, it cannot be stopped) and take the processor from the judging and
        # the report; with the files gone its reads fail at once and it ends (its result is dropped)
        release()
    if env is None:
        env = host.environ()
        # a replay judges the settings the recording run judged, and names them the same way
        env_source = env_source or obs.meta.get("env_source")
    env_source = env_source or "environment"
    now = host.now()
    findings, timed_out = _judge(obs, policy, dict(env), env_source, now, only, budget, deadline_s)
    findings, waivers = _waive(findings, policy, now, only)
    code = exit_code_for(findings, timed_out, strict)
    return CheckResult(runs=obs.runs, later=obs.later, topology=obs.built_topology, findings=findings,
                       exit_code=int(code), timed_out=timed_out, window_s=obs.window_s,
                       deadline_s=float(deadline_s), duration_s=time.monotonic() - budget.start,
                       started_at=started_at, observed_at=host.now(), meta=obs.meta, policy=policy,
                       env_source=env_source, strict=strict, budget=budget, waivers=tuple(waivers))


def _waive(findings: list[Finding], policy: Policy, now: float, only: Iterable[str] | None,
           lapse_findings: bool = True) -> tuple[list[Finding], list]:
    """The policy's waivers applied after judging and root-cause folding (:mod:`ccdiag.checks.waiving`)."""
    if not policy.waivers:
        return findings, []
    from ccdiag.checks.waiving import apply_waivers

    return apply_waivers(findings, policy.waivers, now, warn_s=policy.waiver_warn_days * 86400.0, only=only,
                         source=policy.source, lapse_findings=lapse_findings)


def _judge(obs: Observation, policy: Policy, env: dict[str, str], env_source: str, now: float,
           only: Iterable[str] | None, budget: Budget, deadline_s: float) -> tuple[list[Finding], bool]:
    """The topology and the checks, on a worker bounded by the judging stage's end; returns the
    sorted findings (with one for each probe that timed out or broke) and whether time ran out."""
    def judge() -> list[Finding]:
        from ccdiag.checks.causes import link_causes
        from ccdiag.checks import CheckContext, run_checks

        ctx = CheckContext(topology=obs.topology, runs=obs.runs, later=obs.later, window_s=obs.window_s,
                           policy=policy, env=env, env_source=env_source, now=now, meta=obs.meta)
        return link_causes(list(run_checks(ctx, only=only)))

    timed_out = obs.timed_out
    findings: list[Finding]
    try:
        findings = run_stage("judge", judge, budget.judge_end)
        if not findings and not only:
            findings.append(Finding(
                check="check.none", status=UNKNOWN, component=Component("node", "ccdiag"),
                summary="no check ran, so there is no verdict",
                remedy="The ccdiag installation is incomplete: reinstall it (`pip install ccdiag`)."))
    except StageTimeout as exc:
        timed_out = True
        findings = [_deadline_finding(deadline_s, exc.budget_s)]
    findings += _timeout_findings(obs.runs, findings, "first")
    if obs.later:
        findings += _timeout_findings(obs.later, findings, "second")
    findings.sort(key=Finding.sort_key)
    return findings, timed_out


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
    # the benchmarks' findings are waived as the checks' were (a lapsed waiver is already reported)
    extra, _ = _waive([f for b in benches for f in b.findings], result.policy, result.observed_at, None,
                      lapse_findings=False)
    findings = sorted(result.findings + extra, key=Finding.sort_key)
    return dataclasses.replace(result, bench=benches, findings=findings,
                               exit_code=int(exit_code_for(findings, result.timed_out, result.strict)))


def close_host(host: Host, timeout: float = 0.5, result: CheckResult | None = None) -> None:
    """:func:`ccdiag.run.observe.close_host` after an evaluation: nothing is called on a host whose run
    timed out."""
    observe_close_host(host, timeout, timed_out=result is not None and result.timed_out)


__all__ = ["CheckResult", "DEFAULT_DEADLINE_S", "close_host", "evaluate", "exit_code_for"]
