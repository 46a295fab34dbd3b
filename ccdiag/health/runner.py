"""One turn of the health loop: on an idle node, an active check; its verdict, validity window,
evidence, and what the scheduler and the operator's hook should do about it.

A turn (``ccdiag health run``, from ``ccdiag-health.timer`` or ``ccdiag health loop``):

1. not due (the last verdict is younger than ``cadence``): recorded, nothing run;
2. busy (:mod:`ccdiag.health.idle`: a GPU process, a Slurm job, a GPU pod): recorded, nothing run;
3. ``ccdiag check`` (``--bench quick`` when ``bench = true``; the node was just found without a GPU
   process) runs as a child in a session of its own, with ``--output`` for its JSON report and
   ``--snapshot-on-fail`` into a fresh evidence directory. While it runs the loop keeps looking for a
   job; at the first sign (or ``ccdiag health yield``, which a job's prolog sends) the child is told
   to stop (SIGTERM: it kills its own benchmark workers), killed a moment later if it has not, and
   the turn is recorded as ``yielded`` - no verdict, the last one stands. The loop never waits for
   its check to finish before a job may start;
4. the verdict: a pass opens a validity window (``validity``); a failure, or no verdict, closes it.
   A failure keeps its report (and, opt-in, ``nvidia-bug-report.sh``'s) beside the snapshot;
5. with a scheduler configured, the decision of :mod:`ccdiag.health.act` is carried out: Slurm
   drains under ``ccdiag-idle:`` and resumes only those drains; Kubernetes gets the ``CcdiagHealthy``
   condition (and taint); the operator's command for the rung runs when it is due;
6. the state is written and ``ccdiag-health.prom`` with it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ccdiag.health import act as A
from ccdiag.health import conditions as C
from ccdiag.health.config import HealthConfig
from ccdiag.health.idle import Busy, IdleWatch
from ccdiag.health.state import HealthState, check_digest, load_state, locked_state

log = logging.getLogger("ccdiag.health")

#: the Slurm reason prefix of the idle-time loop's drains (the health check's is "ccdiag-hc:")
SLURM_PREFIX = "ccdiag-idle:"
#: seconds a check told to stop gets to kill its own workers before its group is killed
STOP_GRACE_S = 3.0
#: seconds past its own --timeout after which a check that has not ended is killed
OVERRUN_S = 30.0


def node_name(cfg: HealthConfig) -> str:
    return cfg.node or os.environ.get("NODE_NAME") or os.environ.get("SLURMD_NODENAME") or \
        socket.gethostname().split(".")[0]


@dataclass
class TurnResult:
    outcome: str
    detail: str
    report: dict[str, Any] | None = None
    decision: A.Decision | None = None
    evidence_dir: str | None = None
    lines: list[str] = field(default_factory=list)


class Runner:
    """The loop's turns for one node. ``ccdiag`` is the command line that runs ``ccdiag check``
    (this interpreter's ccdiag unless a test puts a stand-in there)."""

    def __init__(self, cfg: HealthConfig, *, ccdiag: list[str] | None = None, clock: Callable[[], float] = time.time,
                 kube=None, proc: str = "/proc"):
        self.cfg = cfg
        self.node = node_name(cfg)
        self.ccdiag = ccdiag or [sys.executable, "-m", "ccdiag"]
        self.clock = clock
        self.proc = proc
        self._told: str | None = None
        self._kube = kube
        self.lines: list[str] = []

    # -- logging ------------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        self.lines.append(line)
        log.warning("%s", line)

    # -- the signs of a job -------------------------------------------------------------------------
    @property
    def kube(self):
        if self._kube is None and self.cfg.scheduler == "kubernetes":
            from ccdiag.health.kube import KubeClient

            self._kube = KubeClient(self.cfg.kubernetes.api)
        return self._kube

    def watch(self) -> IdleWatch:
        kube_pods = None
        if self.cfg.scheduler == "kubernetes":
            from ccdiag.health.kube import gpu_pods

            client = self.kube
            kube_pods = lambda: gpu_pods(client.pods_on_node(self.node), self.cfg.kubernetes.gpu_resource)  # noqa: E731
        return IdleWatch(patterns=self.cfg.gpu_devices, proc=self.proc,
                         slurm_node=self.node if self.cfg.scheduler == "slurm" else None,
                         scheduler_poll_s=self.cfg.scheduler_poll_s, kube_pods=kube_pods)

    def tell(self, why: str) -> None:
        """Stop the running check at the next poll (a signal handler calls this)."""
        self._told = why

    # -- one turn -----------------------------------------------------------------------------------
    def due(self, st: HealthState, now: float) -> tuple[bool, str]:
        at = st.verdict.get("at")
        if not isinstance(at, (int, float)):
            return True, "no verdict recorded yet"
        age = now - at
        if age >= self.cfg.cadence_s or age < 0:
            return True, f"the last verdict is {age:.0f}s old (cadence {self.cfg.cadence_s:g}s)"
        return False, f"the last verdict is {age:.0f}s old, the cadence is {self.cfg.cadence_s:g}s"

    def turn(self, force: bool = False) -> TurnResult:
        os.makedirs(self.cfg.state_dir, exist_ok=True)
        now = self.clock()
        st = load_state(self.cfg.state_path)
        if st.problem:
            self.say(f"state started afresh: {st.problem}")
        due, why = self.due(st, now)
        if not due and not force:
            return self._finish(TurnResult("not_due", why))
        watch = self.watch()
        busy = watch.busy(every_source=True)
        for err in watch.errors:
            self.say(f"while looking for a job: {err}")
        if busy is not None:
            result = TurnResult("busy", f"{busy.source}: {busy.detail}")
            self._expire_condition(now)
            return self._finish(result)
        return self._finish(self._check(watch))

    def _check(self, watch: IdleWatch) -> TurnResult:
        cfg = self.cfg
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
        set_dir = os.path.join(cfg.evidence_dir, stamp)
        report_path = os.path.join(cfg.state_dir, "last-check.json")
        mode = "check --bench quick" if cfg.bench else "check"
        argv = [*self.ccdiag, "check", "--quiet", "--output", report_path, "--timeout", f"{cfg.timeout_s:g}",
                "--snapshot-on-fail", set_dir, *(["--bench", "quick"] if cfg.bench else []), *cfg.check_args]
        try:
            os.unlink(report_path)
        except FileNotFoundError:
            pass
        self._write_pid()
        started = time.monotonic()
        err_path = os.path.join(cfg.state_dir, "last-check.err")
        with open(err_path, "wb") as err:
            try:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
            except OSError as exc:
                self._remove_pid()
                return TurnResult("error", f"could not start {argv[0]}: {exc.strerror or exc}")
            busy: Busy | None = None
            watch.exclude_tree = child.pid  # the check opens the GPUs itself, as do its benchmark workers
            try:
                while True:
                    try:
                        child.wait(cfg.poll_s)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if self._told:
                        busy = Busy("told", self._told)
                    else:
                        busy = watch.busy(every_source=False)
                    if busy is None and time.monotonic() - started > cfg.timeout_s + OVERRUN_S:
                        busy = Busy("overrun", f"the check ran past its {cfg.timeout_s:g}s deadline")
                    if busy is not None:
                        break
            finally:
                if child.poll() is None:
                    _stop(child)
                self._remove_pid()
        if busy is not None and busy.source != "overrun":
            return TurnResult("yielded", f"{busy.source}: {busy.detail}; the check was stopped "
                                         f"{time.monotonic() - started:.1f}s in, the last verdict stands")
        if busy is not None:
            return TurnResult("error", busy.detail)
        report = _read_json(report_path)
        rc = child.returncode
        outcome = {0: "pass", 1: "fail", 3: "unknown"}.get(rc, "error")
        if report is None and outcome != "error":
            outcome = "error"
        detail = _detail(report, rc, err_path)
        result = TurnResult(outcome, detail, report=report)
        if outcome == "fail":
            result.evidence_dir = self._evidence(set_dir, report)
        result.lines.append(f"{mode}: {outcome}: {detail}")
        return result

    # -- evidence -----------------------------------------------------------------------------------
    def _evidence(self, set_dir: str, report: dict | None) -> str:
        from ccdiag.core.output import write_atomic
        from ccdiag.health.evidence import prune, run_bug_report

        os.makedirs(set_dir, exist_ok=True)
        if report is not None:
            write_atomic(os.path.join(set_dir, "report.json"), json.dumps(report, indent=1, sort_keys=True) + "\n",
                         mode=0o600)
        if self.cfg.evidence.bug_report:
            res = run_bug_report(self.cfg.evidence, set_dir)
            self.say(res.line())
        for gone in prune(self.cfg.evidence_dir, max(1, self.cfg.evidence.keep)):
            self.say(f"evidence {gone} removed (keep = {self.cfg.evidence.keep})")
        return set_dir

    # -- the record and the scheduler ---------------------------------------------------------------
    def _finish(self, result: TurnResult) -> TurnResult:
        cfg = self.cfg
        now = self.clock()
        mode = "check --bench quick" if cfg.bench else "check"
        dec = None
        with locked_state(cfg.state_path) as st:
            st.count_run(result.outcome)
            st.last_run = {"at": now, "outcome": result.outcome, "detail": result.detail[:500]}
            if result.outcome in ("pass", "fail", "unknown"):
                verdict = (result.report or {}).get("verdict") or {}
                st.verdict = {"at": now, "status": verdict.get("status"), "reason": verdict.get("reason"),
                              "action": verdict.get("action"), "mode": mode, "evidence": result.evidence_dir}
                if result.outcome == "pass":
                    st.record_pass(now, cfg.validity_s, mode, check_digest(cfg.check_args))
                else:
                    st.invalidate(now)
                if result.evidence_dir:
                    st.evidence = ([p for p in st.evidence if os.path.isdir(p) and p != result.evidence_dir]
                                   + [result.evidence_dir])[-max(1, cfg.evidence.keep):]
            elif result.outcome == "error":
                st.invalidate(now)
            if result.report is not None and result.outcome in ("pass", "fail") and cfg.scheduler != "none":
                dec = self._decide(result.report, st, now)
        if dec is not None:
            result.decision = dec
            self._carry_out(dec, result, now)
        for line in result.lines:
            self.say(line)
        self._write_metrics()
        return result

    def _node_view(self) -> tuple[bool, bool, bool, dict | None, str | None]:
        """(out, ours, idle_out, the node's ccdiag condition, an error) as the scheduler says now."""
        if self.cfg.scheduler == "slurm":
            from ccdiag.health import slurm

            try:
                ns = slurm.node_state(self.node)
            except slurm.SlurmError as exc:
                return False, False, False, None, str(exc)
            ours = ns.drained and ns.reason.startswith(SLURM_PREFIX)
            return ns.drained, ours, ns.idle_drained, None, None
        from ccdiag.health.kube import KubeError, gpu_pods

        try:
            node = self.kube.get_node(self.node)
            cond = C.find(node, self.cfg.kubernetes.condition)
            out = bool(cond and cond.get("status") == C.FALSE)
            idle = out and not gpu_pods(self.kube.pods_on_node(self.node), self.cfg.kubernetes.gpu_resource)
        except KubeError as exc:
            return False, False, False, None, str(exc)
        return out, out, idle, cond, None

    def _count(self):
        if self.cfg.scheduler == "slurm":
            from ccdiag.health.slurm import fleet_count

            return fleet_count
        from ccdiag.health.cap import FleetCount

        def count() -> FleetCount:
            nodes = self.kube.list_nodes(self.cfg.kubernetes.node_selector or None)
            out = tuple(sorted((n.get("metadata") or {}).get("name", "") for n in nodes
                               if (C.find(n, self.cfg.kubernetes.condition) or {}).get("status") == C.FALSE))
            return FleetCount(total=len(nodes), out=len(out), out_nodes=out, source="kubernetes API")

        return count

    def _decide(self, report: dict, st: HealthState, now: float) -> A.Decision | None:
        out, ours, idle_out, cond, error = self._node_view()
        if error:
            self.say(f"{self.cfg.scheduler}: cannot read node {self.node}: {error}; nothing changed")
            return None
        self._condition = cond
        prefix = SLURM_PREFIX if self.cfg.scheduler == "slurm" else "ccdiag:"
        return A.decide(report, st, self.cfg, prefix=prefix, node=self.node, out=out, ours=ours, idle_out=idle_out,
                        count=self._count(), now=now)

    def _carry_out(self, dec: A.Decision, result: TurnResult, now: float) -> None:
        for note in dec.notes:
            self.say(f"{self.node}: {note}")
        step = None
        if self.cfg.scheduler == "slurm":
            step = self._slurm(dec)
        else:
            step = self._kubernetes(dec, result, now)
        hook = None
        if dec.hook and not self.cfg.report_only:
            # the hook runs outside the state's lock (it may take minutes); its record goes in below
            from ccdiag.health.remedy import run_hook

            hook = run_hook(dec.hook, self.cfg.remediation[dec.hook], A.hook_values(dec, self.node),
                            self.cfg.remediation_timeout_s)
            self.say(hook.line())
        elif dec.hook:
            self.say(f"report only: would run the {dec.hook} command: {' '.join(self.cfg.remediation[dec.hook])}")
        with locked_state(self.cfg.state_path) as st:
            if step:
                st.count_step(*step, now)
            if hook is not None and dec.rung is not None:
                from ccdiag.health import ladder

                ladder.record_remedy(st.ladder, dec.rung.root.key, dec.hook or "", now, hook.outcome == "ok")
                st.count_step(dec.hook or "", hook.outcome, now)
            elif dec.hook and dec.rung is not None:
                st.count_step(dec.hook, "report_only", now)

    def _slurm(self, dec: A.Decision) -> tuple[str, str] | None:
        from ccdiag.health import slurm

        if dec.verb == A.HOLD:
            self.say(f"{self.node}: held in service: {dec.reason}")
            return ("drain", "held")
        if dec.verb not in (A.DRAIN_VERB, A.RESUME):
            return None
        what = f"drain ({dec.reason})" if dec.verb == A.DRAIN_VERB else "resume"
        if self.cfg.report_only:
            self.say(f"report only: would {what}")
            return ("drain", "report_only") if dec.verb == A.DRAIN_VERB and dec.cap else None
        try:
            if dec.verb == A.DRAIN_VERB:
                slurm.drain(self.node, dec.reason or SLURM_PREFIX)
            else:
                slurm.resume(self.node)
        except slurm.SlurmError as exc:
            self.say(f"{self.node}: {what} failed: {exc}")
            return ("drain", "failed") if dec.verb == A.DRAIN_VERB else None
        self.say(f"{self.node}: {'drained: ' + (dec.reason or '') if dec.verb == A.DRAIN_VERB else 'resumed'}")
        return ("drain", "ok") if dec.verb == A.DRAIN_VERB and dec.cap else None

    def _kubernetes(self, dec: A.Decision, result: TurnResult, now: float) -> tuple[str, str] | None:
        from ccdiag.health.kube import KubeError

        k = self.cfg.kubernetes
        prev = getattr(self, "_condition", None)
        st = load_state(self.cfg.state_path)
        taint: str | None
        if dec.verb == A.RESUME or (dec.verb == A.NOTHING and result.outcome == "pass"):
            cond = C.passed(k.condition, now, st.valid_until or now, st.last_pass_mode or "check", prev)
            taint = "remove"
        elif dec.verb == A.DRAIN_VERB and dec.rung is not None:
            r = dec.rung
            cond = C.failed(k.condition, r.action, f"{r.root.check} {r.root.component}", r.root.summary,
                            len(dec.roots) - 1, r.why, now, prev)
            taint = "set" if k.taint else None
        elif dec.verb == A.HOLD and dec.rung is not None:
            r = dec.rung
            cond = C.held(k.condition, r.action, f"{r.root.check} {r.root.component}", r.root.summary,
                          dec.cap.why if dec.cap else "", now, prev)
            taint = None
        else:
            return None
        if self.cfg.report_only:
            self.say(f"report only: would set {k.condition}={cond['status']} ({cond['reason']}): {cond['message']}")
            return ("drain", "report_only") if dec.verb == A.DRAIN_VERB and dec.cap else \
                ("drain", "held") if dec.verb == A.HOLD else None
        try:
            self.kube.patch_conditions(self.node, [cond])
            self.say(f"{self.node}: {k.condition}={cond['status']} ({cond['reason']})")
            if taint == "set" and dec.rung is not None:
                value = dec.rung.action
                self.kube.set_taints(self.node, lambda ts: C.with_taint(ts, k.taint_key, value))
                self.say(f"{self.node}: tainted {k.taint_key}={value}:NoSchedule")
            elif taint == "remove":
                self.kube.set_taints(self.node, lambda ts: C.without_taint(ts, k.taint_key))
        except KubeError as exc:
            self.say(f"{self.node}: Kubernetes API: {exc}")
            return ("drain", "failed") if dec.verb == A.DRAIN_VERB and dec.cap else None
        if dec.verb == A.HOLD:
            return ("drain", "held")
        return ("drain", "ok") if dec.verb == A.DRAIN_VERB and dec.cap else None

    def _expire_condition(self, now: float) -> None:
        """A busy node whose pass ran out: its condition says Unknown (VerdictExpired), not True."""
        if self.cfg.scheduler != "kubernetes" or self.cfg.report_only:
            return
        st = load_state(self.cfg.state_path)
        if st.last_pass is None or st.valid_until is None or st.valid_until > now or \
                st.verdict.get("status") not in ("pass", "warn"):
            return
        from ccdiag.health.kube import KubeError

        try:
            node = self.kube.get_node(self.node)
            prev = C.find(node, self.cfg.kubernetes.condition)
            if prev is None or prev.get("status") != C.TRUE:
                return
            self.kube.patch_conditions(self.node, [C.expired(self.cfg.kubernetes.condition, st.last_pass,
                                                             st.valid_until, now, prev)])
            self.say(f"{self.node}: {self.cfg.kubernetes.condition}=Unknown (VerdictExpired)")
        except KubeError as exc:
            self.say(f"{self.node}: Kubernetes API: {exc}")

    # -- files --------------------------------------------------------------------------------------
    def _write_metrics(self) -> None:
        if not self.cfg.textfile_dir:
            return
        from ccdiag.health import metrics

        try:
            metrics.write(self.cfg.textfile_dir, load_state(self.cfg.state_path))
        except OSError as exc:
            self.say(f"cannot write {os.path.join(self.cfg.textfile_dir, metrics.FILENAME)}: {exc.strerror or exc}")

    def _write_pid(self) -> None:
        from ccdiag.core.output import write_atomic

        write_atomic(self.cfg.pid_path, f"{os.getpid()}\n", mode=0o644)

    def _remove_pid(self) -> None:
        try:
            with open(self.cfg.pid_path, encoding="ascii") as fh:
                if fh.read().strip() == str(os.getpid()):
                    os.unlink(self.cfg.pid_path)
        except (OSError, ValueError):
            pass


def _stop(child: subprocess.Popen) -> None:
    """Tell the check to stop (it kills its own workers' groups), then kill its group."""
    try:
        child.send_signal(signal.SIGTERM)
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    except OSError:
        pass
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _read_json(path: str) -> dict | None:
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read(256 << 20))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _detail(report: dict | None, rc: int | None, err_path: str) -> str:
    if report is not None:
        verdict = report.get("verdict") or {}
        counts = verdict.get("counts") or {}
        said = verdict.get("reason") or ", ".join(f"{counts[k]} {k}" for k in ("fail", "unknown", "warn") if counts.get(k))
        return f"exit {rc}, {verdict.get('status')}" + (f": {said}" if said else "")
    try:
        with open(err_path, "rb") as fh:
            tail = fh.read()[-300:].decode("utf-8", "replace")
    except OSError:
        tail = ""
    return f"exit {rc}, no report" + (f": {' '.join(tail.split())}" if tail else "")


def install_yield_handler(runner: Runner) -> None:
    """SIGUSR1 (``ccdiag health yield``, a job's prolog) stops the running check at the next poll."""
    signal.signal(signal.SIGUSR1, lambda *_: runner.tell("told to yield (SIGUSR1: a job is starting)"))


def signal_running(pid_path: str) -> str:
    """Tell the turn running on this node, if any, to yield; returns what was done, in words."""
    try:
        with open(pid_path, encoding="ascii") as fh:
            pid = int(fh.read().strip())
    except FileNotFoundError:
        return "no health check is running"
    except (OSError, ValueError) as exc:
        return f"cannot read {pid_path}: {exc}"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return f"no health check is running (pid {pid} from {pid_path} is gone)"
    if "health" not in cmdline or "ccdiag" not in cmdline:
        return f"pid {pid} from {pid_path} is not a ccdiag health turn ({cmdline.strip()[:80]!r}); not signalled"
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return f"cannot signal pid {pid}: {exc.strerror or exc}"
    return f"told the health check (pid {pid}) to yield"


__all__ = ["Runner", "SLURM_PREFIX", "TurnResult", "install_yield_handler", "node_name", "signal_running"]

