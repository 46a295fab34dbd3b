"""``ccdiag daemon``: a collection loop on its own interval and an endpoint that serves its result.

Collection and scrapes are decoupled. A background thread runs one evaluation per interval (the same
:func:`ccdiag.run.checkrun.evaluate` that ``ccdiag check`` runs, bounded by its deadline) and publishes
the finished cycle; scrapes only ever read the last published cycle and its age, so Prometheus'
scrape timeout is never spent waiting on NVML.

Each cycle runs in a forked child process (:mod:`.isolation` says why, with measurements): nothing
a probe does there (a parse that holds the interpreter lock for minutes, memory it allocates, a
thread that never returns) reaches the process that serves scrapes. The child is killed at the
cycle's deadline; what it delivered by then is published, the rest marked ``timeout``; a probe
that kept a child from finishing then runs in a child of its own until it delivers again. Each
probe's observation is checked before it is published (:mod:`.sanity`): a value that cannot be
exported fails that probe (``ccdiag_probe_success 0``, its last good data served stale), never the
cycle.

A child that cannot exit (a probe in an uninterruptible kernel call, a wedged GPU) keeps its probes
from being started again until it is gone, as does, where cycles run in-process (no ``fork``), a
probe thread from an earlier cycle that is still alive: starting them every interval would pile
up stuck calls. Such probes are reported as ``timeout`` until they return.

Signals: SIGTERM/SIGINT stop cleanly (exit 0), SIGHUP re-reads the config file, policy and web
config (a bad new file is logged and the old settings stay), SIGUSR1 starts a cycle now.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ccdiag.host import procgroups
from ccdiag.run.checkrun import CheckResult, close_host, evaluate
from ccdiag.core.errors import UserInputError
from ccdiag.exporters import isolation, sanity, sdnotify
from ccdiag.exporters.collection import REPLY_GRACE_S, CollectionProcess
from ccdiag.exporters.collector import CycleCollector
from ccdiag.exporters.cycle import DEFAULT_MAX_STALE_S, CycleState
from ccdiag.exporters.server import DEFAULT_MAX_REQUESTS, MetricsServer, parse_listen
from ccdiag.exporters.webconfig import WebConfig, load_web_config
from ccdiag.core.findings import UNKNOWN, Component, Evidence, Finding
from ccdiag.host.door import Host, LiveHost, ReplayHost
from ccdiag.inputs.policy import DEFAULT_POLICY, Policy, load_policy
from ccdiag.probes.registry import ALL_PROBES, FAILED, TIMEOUT, ProbeRun

from ccdiag.inputs.tomlread import TomlError
from ccdiag.inputs.tomlread import loads as toml_loads

log = logging.getLogger("ccdiag.daemon")

#: loopback by default: exposing node internals to the network is an explicit decision. 9643 is a
#: port no exporter commonly run on GPU/HPC nodes uses (the survey is in docs/metrics.md); 9835, the
#: default of earlier releases, is nvidia_gpu_exporter's.
DEFAULT_LISTEN = "127.0.0.1:9643"
DEFAULT_INTERVAL_S = 15.0
DEFAULT_DEADLINE_S = 30.0
CONFIG_KEYS = {"listen": str, "interval": float, "policy": str, "web_config": str, "deadline": float,
               "max_stale": float, "probes": list, "telemetry_path": str, "max_requests": int}
#: the lower bound of each duration; the command line enforces the same ones. A tiny interval would be
#: a busy loop and a tiny deadline abandons every probe, so both are refused rather than clamped.
MIN_INTERVAL_S = 0.1
MIN_DEADLINE_S = 0.5
#: the most --web.max-requests may be: each admitted request may take a thread, and threads count
#: against the unit's TasksMax (systemd/ccdiag-exporter.service)
MAX_REQUESTS_LIMIT = 1024
#: seconds the HTTP server's loop may go without stamping its liveness before the daemon is unhealthy
#: (it stamps every quarter second; a loop blocked this long answers no scrape within a timeout)
SERVER_SILENCE_S = 5.0
#: seconds a collection child gets beyond the cycle's deadline to start and send its result
CHILD_GRACE_S = 3.0
#: how a setting is named in messages, per source: the file's key or the command line's option
FILE_KEYS = {"listen": "listen", "interval_s": "interval", "deadline_s": "deadline",
             "max_stale_s": "max_stale", "probes": "probes", "telemetry_path": "telemetry_path",
             "max_requests": "max_requests"}
OPTION_KEYS = {"listen": "--web.listen-address", "interval_s": "--interval", "deadline_s": "--deadline",
               "max_stale_s": "max_stale", "probes": "probes", "telemetry_path": "--web.telemetry-path",
               "max_requests": "--web.max-requests"}


class CycleError(RuntimeError):
    """The evaluation of a cycle raised (in the collection child); the message is its error."""


class ConfigError(UserInputError, ValueError):
    """A daemon configuration that cannot be used; the message names the file and key."""


@dataclass(frozen=True)
class DaemonConfig:
    listen: str = DEFAULT_LISTEN
    interval_s: float = DEFAULT_INTERVAL_S
    policy: str | None = None
    web_config: str | None = None
    deadline_s: float = DEFAULT_DEADLINE_S
    max_stale_s: float = DEFAULT_MAX_STALE_S
    probes: tuple[str, ...] = ALL_PROBES
    replay: str | None = None
    root: str = "/"
    telemetry_path: str = "/metrics"
    max_requests: int = DEFAULT_MAX_REQUESTS

    def validate(self, source: str = "configuration", keys: dict[str, str] = FILE_KEYS) -> "DaemonConfig":
        """``self`` when every setting is usable, else :class:`ConfigError` naming ``source`` and the key.

        The ranges are the command line's, applied to whatever the value came from: a config file
        must not be a way around them (an infinite deadline overflows the first timed wait, a
        negative staleness bound hides every probe's last values).
        """
        try:
            parse_listen(self.listen)
        except ValueError as exc:
            raise ConfigError(f"{source}: {keys['listen']}: {exc}") from None
        for name, low in (("interval_s", MIN_INTERVAL_S), ("deadline_s", MIN_DEADLINE_S), ("max_stale_s", 0.0)):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= low):
                raise ConfigError(f"{source}: {keys[name]} must be a finite number of seconds >= {low:g}, "
                                  f"not {value!r}")
        path = self.telemetry_path
        if not path.startswith("/") or path in ("/", "/-/healthy", "/-/ready") or any(c.isspace() for c in path):
            raise ConfigError(f"{source}: {keys['telemetry_path']} must be a path like /metrics, not {path!r}")
        if isinstance(self.max_requests, bool) or not (1 <= self.max_requests <= MAX_REQUESTS_LIMIT):
            raise ConfigError(f"{source}: {keys['max_requests']} must be a whole number from 1 to "
                              f"{MAX_REQUESTS_LIMIT}, not {self.max_requests!r}")
        if not self.probes:
            raise ConfigError(f"{source}: {keys['probes']} must name at least one probe "
                              f"(known: {', '.join(ALL_PROBES)})")
        unknown = [p for p in self.probes if p not in ALL_PROBES]
        if unknown:
            raise ConfigError(f"{source}: {keys['probes']}: unknown probe {unknown[0]!r} "
                              f"(known: {', '.join(ALL_PROBES)})")
        return self


def parse_config(text: str, source: str = "<config>") -> dict[str, Any]:
    """The settings of a daemon TOML file, as ``DaemonConfig`` field values (types checked, ranges
    left to :meth:`DaemonConfig.validate`)."""
    try:
        doc = toml_loads(text, source)
    except TomlError as exc:
        raise ConfigError(str(exc)) from None
    out: dict[str, Any] = {}
    for key, value in doc.items():
        kind = CONFIG_KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # TOML integers are unbounded here; 10**400 has no float
                raise ConfigError(f"{source}: {key} must be a finite number of seconds, not {value}") from None
        elif kind is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = tuple(value)
        elif not isinstance(value, kind):
            raise ConfigError(f"{source}: {key} must be a {kind.__name__}, not {value!r}")
        field = {"interval": "interval_s", "deadline": "deadline_s", "max_stale": "max_stale_s"}.get(key, key)
        out[field] = value
    return out


def load_config(path: str | None, overrides: dict[str, Any]) -> DaemonConfig:
    """The file's settings with the command line's on top (``None`` values do not override)."""
    values: dict[str, Any] = {}
    if path:
        from ccdiag.core.userfiles import UserFileError, read_user_text

        try:
            text = read_user_text(path, "daemon config", 1 << 20)  # /dev/zero must not grow the daemon
        except UserFileError as exc:
            raise ConfigError(str(exc)) from None
        values.update(parse_config(text, path))
        # the file on its own first: a bad value in it is an error, blamed on the file, even where an
        # option overrides it (the same file is re-read on SIGHUP)
        DaemonConfig(**values).validate(path)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return DaemonConfig(**values).validate("command line", OPTION_KEYS)


def _probe_thread_alive(name: str) -> bool:
    """Whether a thread of the probe runner for ``name`` (named ``probe-<name>``) is still running."""
    return any(t.name == f"probe-{name}" and t.is_alive() for t in threading.enumerate())


def _hung_finding(name: str, why: str = "blocked") -> Finding:
    summary = (f"probe {name} did not finish before the cycle's deadline; its collection process was killed"
               if why == "killed" else f"probe {name} is still blocked since an earlier cycle; not started again")
    return Finding(
        check="probe.timeout", status=UNKNOWN, component=Component("probe", name, device=name),
        summary=summary,
        evidence=(Evidence("probe thread" if why == "blocked" else "collection process",
                           "alive" if why == "blocked" else "killed", f"probe {name}"),),
        expected="every probe finishes within its deadline",
        remedy=("A driver call or command that never returns usually means a wedged GPU or driver: check "
                "`dmesg` for XIDs, then drain and reset or reboot the node."))


def _with_hung(result: CheckResult | None, hung: list[str]) -> CheckResult:
    """``result`` plus a ``timeout`` run and an ``unknown`` finding for each probe left out."""
    runs = dict(result.runs) if result else {}
    findings = list(result.findings) if result else []
    for name in hung:
        runs[name] = ProbeRun(name, TIMEOUT, 0.0, None, f"probe {name} still blocked since an earlier cycle")
        findings.append(_hung_finding(name))
    findings.sort(key=Finding.sort_key)
    if result is None:
        return CheckResult(runs=runs, later=None, topology=None, findings=findings, exit_code=3, timed_out=True)
    return dataclasses.replace(result, runs=runs, findings=findings, timed_out=True)


def _runner(cfg: DaemonConfig, host: Host, policy: Policy, probes: list[str]) -> Callable[[], CheckResult]:
    """What one collection child runs: the evaluation ``ccdiag check`` runs, of ``probes``."""
    def go() -> CheckResult:
        if isinstance(host, ReplayHost):
            host.epoch = 0  # every cycle replays the snapshot from its first sample
        env: dict[str, str] | None = None if not host.live else {}
        return evaluate(host, policy, 0.0, cfg.deadline_s, env,
                        None if env is None else "none (the daemon has no job environment)", probes=probes)
    return go


def _merge(result: CheckResult | None, runs: dict[str, ProbeRun]) -> CheckResult:
    """The main child's ``result`` with the runs of every child (``runs``) in it, and an unknown
    finding for each probe that did not deliver; without a result (no checks ran), the runs that
    were delivered are still served."""
    if result is None:
        findings = [_hung_finding(n, why="killed") for n, r in runs.items() if r.status == TIMEOUT]
        return CheckResult(runs=runs, later=None, topology=None, findings=sorted(findings, key=Finding.sort_key),
                           exit_code=3, timed_out=True)
    if set(runs) != set(result.runs) or any(runs[n] is not result.runs.get(n) for n in runs):
        extra = [_hung_finding(n, why="killed") for n in runs
                 if n not in result.runs and runs[n].status == TIMEOUT]
        findings = sorted(list(result.findings) + extra, key=Finding.sort_key)
        result = dataclasses.replace(result, runs={**result.runs, **runs}, findings=findings)
    return result


class Daemon:
    """The collection loop, the endpoint and the signal handling around them."""

    def __init__(self, config: DaemonConfig, reload_config: Callable[[], DaemonConfig] | None = None,
                 host: Host | None = None, clock: Callable[[], float] = time.time,
                 isolate: bool | None = None):
        self.config = config
        self._reload_config = reload_config
        self.clock = clock
        self.host = host if host is not None else self._open_host(config)
        self.policy = self._load_policy(config)
        self.web = load_web_config(config.web_config) if config.web_config else WebConfig()
        self.collector = CycleCollector(interval_s=config.interval_s, clock=clock)
        self.state = CycleState(max_stale_s=config.max_stale_s)
        self.server: MetricsServer | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reload = threading.Event()
        self._loop: threading.Thread | None = None
        self._server_thread: threading.Thread | None = None
        self._started = time.monotonic()
        self._last_cycle_mono: float | None = None
        self._cycle_lock = threading.Lock()  # one cycle at a time
        self._config_lock = threading.Lock()  # config/host/policy swapped together on reload
        self._retired: list[Host] = []
        #: cycles run in a forked child (see :mod:`.isolation`); in-process where fork is missing
        if isolate is None:  # CCDIAG_DAEMON_IN_PROCESS=1: the old way, for comparing (bench_daemon_stall)
            isolate = isolation.supported() and os.environ.get("CCDIAG_DAEMON_IN_PROCESS", "") in ("", "0")
        self.isolate = isolate
        self._quarantine: set[str] = set()  # probes that kept a child from finishing in time
        #: forks the cycles' children; started before the server's threads (see :mod:`.collection`)
        self._collection = CollectionProcess(_runner, self._open_host, self.host)
        self.last_error: str | None = None  # why the latest cycle was not published, if it was not

    # -- configuration ----------------------------------------------------------------------
    @staticmethod
    def _open_host(config: DaemonConfig) -> Host:
        return ReplayHost(config.replay) if config.replay else LiveHost(config.root)

    @staticmethod
    def _load_policy(config: DaemonConfig) -> Policy:
        return load_policy(config.policy) if config.policy else DEFAULT_POLICY

    def reload(self) -> bool:
        """Re-read the configuration; keep the running one when the new one is unusable."""
        if self._reload_config is None:
            return False
        sdnotify.notify(f"RELOADING=1\nMONOTONIC_USEC={sdnotify.monotonic_usec()}")
        try:
            new = self._reload_config()
            policy = self._load_policy(new)
            web = load_web_config(new.web_config) if new.web_config else WebConfig()
            host = self._open_host(new) if (new.replay, new.root) != (self.config.replay, self.config.root) else None
        except Exception as exc:  # noqa: BLE001 - a bad reload must never stop a running exporter
            log.error("reload failed, keeping the running configuration: %s", exc)
            sdnotify.notify("READY=1\nSTATUS=reload failed; running the previous configuration")
            return False
        if new.listen != self.config.listen:
            log.warning("listen address changed to %s: takes effect after a restart", new.listen)
        with self._config_lock:  # never waits for a running cycle: the main thread must stay responsive
            if host is not None:
                self._retired.append(self.host)  # closed by the next cycle, once nothing uses it
                self.host = host
            self.config, self.policy, self.web = new, policy, web
            self.collector.interval_s = new.interval_s
            self.state.max_stale_s = new.max_stale_s
        log.warning("configuration reloaded")
        sdnotify.notify("READY=1\nSTATUS=configuration reloaded")
        self._wake.set()
        return True

    # -- collection -------------------------------------------------------------------------
    def _blocked(self, cfg: DaemonConfig) -> list[str]:
        """Probes not to start this cycle: a probe thread still alive in this process (cycles run
        in-process), or a probe of an earlier child that could not exit (stuck in the kernel)."""
        held = set(self._collection.request(("held",), REPLY_GRACE_S)) if self.isolate else set()
        return [n for n in cfg.probes if n in held or _probe_thread_alive(n)]

    def _evaluate(self, cfg: DaemonConfig, host: Host, policy: Policy, names: list[str]) -> CheckResult | None:
        """One evaluation of ``names``; in a child process where possible (see :mod:`.isolation`).

        Probes that kept an earlier child from finishing are *quarantined*: each runs in a child
        of its own, beside the main one, until one delivers in time, so one pathological input costs
        that probe its fresh data but no longer every other probe's, nor the checks'.
        """
        if not self.isolate:
            return _runner(cfg, host, policy, names)() if names else None
        main = [n for n in names if n not in self._quarantine]
        # one child each for the quarantined: a probe that stalls its child stalls only itself
        groups = ([main] if main else []) + [[n] for n in names if n in self._quarantine]
        # the budget the evaluation keeps to, and a margin for starting and sending the result
        budget = cfg.deadline_s + CHILD_GRACE_S
        jobs = self._collection.request(("cycle", cfg, policy, groups, budget), budget + REPLY_GRACE_S)
        runs = self._delivered(jobs, cfg.deadline_s)
        main_job = jobs[0] if main else None
        if main_job is not None and main_job.result is None and main_job.error and not main_job.killed:
            raise CycleError(main_job.error)  # the evaluation itself broke: a bug, not a probe's failure
        return _merge(main_job.result if main_job is not None else None, runs)

    def _delivered(self, jobs: list[isolation.Job], deadline_s: float) -> dict[str, ProbeRun]:
        """Each probe's run as its child delivered it, or a ``timeout`` run; updates the quarantine."""
        runs: dict[str, ProbeRun] = {}
        for job in jobs:
            delivered = dict(job.runs)
            if job.result is not None:
                delivered.update(job.result.runs)
            for name in job.probes:
                if name in delivered:
                    self._quarantine.discard(name)
                    runs[name] = delivered[name]
                    continue
                why = "killed at the cycle's deadline" if job.killed else (job.error or "no result")
                runs[name] = ProbeRun(name, TIMEOUT, deadline_s, None,
                                      f"probe {name} did not deliver: collection child {why}")
                if job.killed:
                    self._quarantine.add(name)
        return runs

    @staticmethod
    def _sane(result: CheckResult) -> CheckResult:
        """``result`` with each probe whose observation holds an unexportable value turned into
        that probe's failure (see :mod:`.sanity`)."""
        bad = {}
        for name, run in result.runs.items():
            why = sanity.bad_value(run.data) if run.usable else None
            later = (result.later or {}).get(name)
            why = why or (sanity.bad_value(later.data) if later is not None and later.usable else None)
            if why:
                bad[name] = ProbeRun(name, FAILED, run.duration_s, None, f"bad value in {name}: {why}")
        if not bad:
            return result
        for name, run in bad.items():
            log.warning("probe %s failed: %s", name, run.error)
        kept_later = {n: r for n, r in (result.later or {}).items() if n not in bad} if result.later else result.later
        return dataclasses.replace(result, runs={**result.runs, **bad}, later=kept_later)

    def run_cycle(self) -> bool:
        """One evaluation, published for scrapes. Never raises.

        Returns whether a cycle was published. ``False`` means the evaluation itself broke (the
        error is logged and :attr:`last_error` says what): scrapes keep the previous cycle, and
        ``--once`` has nothing to report on. Probes that failed, timed out or held a bad value do
        not make it ``False``; they are part of what the cycle publishes.
        """
        with self._cycle_lock:
            with self._config_lock:
                cfg, host, policy = self.config, self.host, self.policy
                retired, self._retired = self._retired, []
            for old in retired:
                close_host(old)
            try:
                hung = self._blocked(cfg)
                names = [n for n in cfg.probes if n not in hung]
                result = self._evaluate(cfg, host, policy, names)
                if hung or result is None:
                    result = _with_hung(result, hung)
                result = self._sane(result)
                cycle = self.state.advance(result, completed_at=self.clock())
                self.collector.publish(cycle)
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything a cycle does
                self.last_error = str(exc) if isinstance(exc, CycleError) else f"{type(exc).__name__}: {exc}"
                log.error("collection cycle failed: %s", self.last_error)
                return False
            self.last_error = None
            self._last_cycle_mono = time.monotonic()
            return True

    def _collect_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self._wake.clear()  # a request arriving during this cycle starts the next one at once
            self.run_cycle()
            wait = max(0.0, started + self.config.interval_s - time.monotonic())
            while wait > 0 and not self._stop.is_set() and not self._wake.is_set():
                self._wake.wait(min(wait, 1.0))
                wait = started + self.config.interval_s - time.monotonic()

    def request_cycle(self) -> None:
        self._wake.set()

    # -- health -------------------------------------------------------------------------------
    def _max_age(self) -> float:
        return 2 * self.config.interval_s + self.config.deadline_s + 5.0

    def health(self) -> tuple[bool, str]:
        """Healthy while the loop keeps completing cycles (it may still be serving stale probes:
        those show in ``ccdiag_probe_success``) and the HTTP server's loop keeps stamping its
        liveness with its listener open. systemd's watchdog is fed only while this holds: a daemon
        that collects but no longer serves is restarted, as is one that serves a frozen cycle."""
        if self._loop is None or not self._loop.is_alive():
            return False, "collection loop not running"
        since = self._last_cycle_mono if self._last_cycle_mono is not None else self._started
        age = time.monotonic() - since
        if age > self._max_age():
            return False, f"no collection cycle completed for {age:.0f}s"
        if self.server is not None and not self.server.alive(SERVER_SILENCE_S):
            return False, f"the HTTP server's loop has not answered for more than {SERVER_SILENCE_S:g}s"
        return True, "ok"

    def ready(self) -> bool:
        return self.collector.cycle is not None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> MetricsServer:
        """Bind the endpoint and start the collection loop (returns at once, with the server)."""
        if self.isolate and not self._collection.alive:
            self._collection.start()  # before the server starts a thread
        self.server = server = MetricsServer(parse_listen(self.config.listen), self.collector, lambda: self.web,
                                    self.health, self.ready, metrics_path=self.config.telemetry_path,
                                    max_requests=self.config.max_requests)
        self._server_thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                               name="ccdiag-http", daemon=True)
        self._server_thread.start()
        self._loop = threading.Thread(target=self._collect_loop, name="ccdiag-collect", daemon=True)
        self._loop.start()
        return server

    def restart_collection(self) -> None:
        """End the collection process (killing what it runs) and fork a fresh one from this
        process as it is now. Only while no cycle runs: the daemon itself never needs it (a
        collection process that ended is started again by the next cycle), but a test that patched
        a probe in this process reaches the collection children only through a fresh fork."""
        with self._cycle_lock:
            self._collection.stop()
            if self.isolate:
                self._collection.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        sdnotify.notify("STOPPING=1")
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self._collection.stop()  # kills the children of a cycle still running, and their commands
        if self._loop is not None:
            self._loop.join(2.0)  # a cycle in a hung call is abandoned: its thread is a daemon
        close_host(self.host)
        procgroups.kill_all()  # commands of in-process cycles still running

    def serve(self, on_started: Callable[[], None] | None = None) -> int:
        """Start, then run until SIGTERM/SIGINT (main thread only). Returns the exit status."""
        handlers = {signal.SIGTERM: lambda *_: self._stop.set(), signal.SIGINT: lambda *_: self._stop.set(),
                    signal.SIGHUP: lambda *_: self._reload.set(),
                    signal.SIGUSR1: lambda *_: self.request_cycle()}
        previous = {sig: signal.signal(sig, h) for sig, h in handlers.items()}
        try:
            server = self.start()
            if on_started is not None:
                on_started()
            watchdog = sdnotify.watchdog_interval()
            announced = False
            while not self._stop.is_set():
                self._stop.wait(min(watchdog or 1.0, 1.0))
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
                if not announced and self.ready():
                    announced = True
                    sdnotify.notify(f"READY=1\nSTATUS=serving {server.url}")
                if watchdog and self.health()[0]:
                    sdnotify.notify("WATCHDOG=1")
        finally:
            self.stop()
            for sig, h in previous.items():
                signal.signal(sig, h)
        return 0
