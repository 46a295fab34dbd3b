"""``ccdiag health run|loop|act|status|yield``: health as a loop (``ccdiag/health/``).

``run`` is one turn (the systemd timer's), ``loop`` runs turns until stopped (a container beside the
exporter), ``act`` turns a check's JSON report into a scheduler decision for the Slurm scripts,
``status`` shows the state, ``yield`` tells a running turn to stop because a job is starting.
"""

from __future__ import annotations

import json
import sys
import time

import click

from ccdiag.commands.examples import epilog
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.textfit import text_width, wrap

_config_option = click.option("--config", "config_path", metavar="FILE", type=click.Path(dir_okay=False),
                              help="Health-loop settings (TOML; default /etc/ccdiag/health.toml when it exists).")
_state_dir_option = click.option("--state-dir", metavar="DIR", help="Where the state lives (default: the config's, "
                                                                    "/var/lib/ccdiag).")


def _config(config_path, **overrides):
    from ccdiag.health.config import load_health_config

    return load_health_config(config_path).with_overrides(**overrides)


def _logging() -> None:
    import logging

    logger = logging.getLogger("ccdiag.health")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("ccdiag-health: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.INFO)


@click.group(name="health", epilog=epilog("health"))
def group() -> None:
    """Active checks on idle nodes with a validity window; the escalation ladder, drain cap and
    Kubernetes node condition that act on their verdicts."""


@group.command(name="run", epilog=epilog("health run"))
@_config_option
@_state_dir_option
@click.option("--force", is_flag=True, help="Run the check even when the last verdict is younger than the cadence.")
@click.option("--json", "as_json", is_flag=True, help="Print the turn's outcome as JSON.")
def run(config_path, state_dir, force, as_json):
    """One turn: on an idle node, `ccdiag check` (with `--bench quick` when allowed); record the verdict
    and its validity window, act on it as configured, and write ccdiag-health.prom.

    Exit 0: the turn ran (whatever the node's verdict; it is in the state and the metrics), 2: bad
    settings, 4: a ccdiag bug.
    """
    from ccdiag.health.runner import Runner, install_yield_handler

    _logging()
    cfg = _config(config_path, state_dir=state_dir)
    runner = Runner(cfg)
    install_yield_handler(runner)
    result = runner.turn(force=force)
    if as_json:
        from ccdiag.core.output import emit_json

        emit_json({"outcome": result.outcome, "detail": result.detail, "node": runner.node,
                   "decision": result.decision.line() if result.decision else None,
                   "evidence": result.evidence_dir, "log": runner.lines})
    else:
        click.echo(f"{result.outcome}: {result.detail}")
    return int(ExitCode.OK)


@group.command(name="loop", epilog=epilog("health loop"))
@_config_option
@_state_dir_option
@click.option("--every", type=click.FloatRange(5, 86400), default=60.0, show_default=True, metavar="S",
              help="Seconds between turns (the cadence decides when a check is due).")
def loop(config_path, state_dir, every):
    """Turns until SIGTERM: the health loop as a long-running process (a container beside the exporter)."""
    from ccdiag.health.runner import Runner, install_yield_handler

    _logging()
    cfg = _config(config_path, state_dir=state_dir)
    runner = Runner(cfg)
    install_yield_handler(runner)
    while True:
        started = time.monotonic()
        runner._told = None
        result = runner.turn()
        if result.outcome not in ("not_due",):
            click.echo(f"{result.outcome}: {result.detail}", err=True)
        time.sleep(max(1.0, every - (time.monotonic() - started)))


@group.command(name="act", epilog=epilog("health act"))
@_config_option
@_state_dir_option
@click.option("--report", "report_path", required=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="The JSON report of the `ccdiag check` just run.")
@click.option("--prefix", default="ccdiag-hc:", show_default=True, help="The reason prefix of the caller's drains.")
@click.option("--node", help="The node's name in Slurm (default: the config's, SLURMD_NODENAME, hostname -s).")
@click.option("--node-state", default="", help="The node's state as sinfo %T gives it (idle, drained, draining, ...).")
@click.option("--node-reason", default="", help="The node's drain reason as sinfo %E gives it.")
@click.option("--no-cap", "no_cap", is_flag=True, help="Count no fleet: no drain cap (a node without sinfo).")
@click.option("--report-only", is_flag=True, help="Decide and log; run no remediation command.")
@click.option("--hook-timeout", type=click.FloatRange(1, 3600), default=None, metavar="S",
              help="Bound the remediation command below the config's (a Slurm health check has 60 s in all).")
def act_command(config_path, state_dir, report_path, prefix, node, node_state, node_reason, no_cap, report_only,
                hook_timeout):
    """Decide what the scheduler does about a check's verdict (ladder, drain cap) and run the operator's
    remediation command when due; print one line `VERB|TEXT` for the calling script:
    `drain|<reason>`, `resume|`, `hold|<why>` (the cap: report instead of draining), `keep|<why>`, `none|`.
    """
    from ccdiag.core.errors import InputError
    from ccdiag.health import act as A
    from ccdiag.health import slurm
    from ccdiag.health.runner import node_name
    from ccdiag.health.state import locked_state

    _logging()
    cfg = _config(config_path, state_dir=state_dir, node=node)
    try:
        with open(report_path, "rb") as fh:
            report = json.loads(fh.read(256 << 20))
    except (OSError, ValueError) as exc:
        raise InputError(f"{report_path}: not a readable JSON report: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(report, dict) or "verdict" not in report:
        raise InputError(f"{report_path}: not a `ccdiag check` JSON report (no verdict)")
    name = node_name(cfg)
    ns = slurm.NodeState(node_state.strip().lower(), node_reason.strip())
    now = time.time()
    with locked_state(cfg.state_path) as st:
        dec = A.decide(report, st, cfg, prefix=prefix, node=name, out=ns.drained,
                       ours=ns.drained and ns.reason.startswith(prefix), idle_out=ns.idle_drained,
                       count=None if no_cap else slurm.fleet_count, now=now)
        if dec.verb == A.HOLD:
            st.count_step("drain", "held", now)
        elif dec.verb == A.DRAIN_VERB and dec.cap is not None:
            st.count_step("drain", "report_only" if report_only else "ok", now)
    logger = __import__("logging").getLogger("ccdiag.health")
    for note in dec.notes:
        logger.warning("%s: %s", name, note)
    if dec.hook and report_only:
        logger.warning("%s: report only: would run the %s command", name, dec.hook)
    elif dec.hook:
        result = A.run_hook(dec.hook, cfg.remediation[dec.hook], A.hook_values(dec, name),
                            hook_timeout or cfg.remediation_timeout_s)
        logger.warning("%s: %s", name, result.line())
        from ccdiag.health import ladder

        with locked_state(cfg.state_path) as st:
            if dec.rung is not None:
                ladder.record_remedy(st.ladder, dec.rung.root.key, dec.hook, time.time(), result.outcome == "ok")
            st.count_step(dec.hook, result.outcome, time.time())
    if cfg.textfile_dir:
        from ccdiag.health import metrics
        from ccdiag.health.state import load_state

        try:
            metrics.write(cfg.textfile_dir, load_state(cfg.state_path))
        except OSError as exc:
            logger.warning("cannot write the health textfile: %s", exc)
    click.echo(dec.line())
    return int(ExitCode.OK)


@group.command(name="status", epilog=epilog("health status"))
@_config_option
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(config_path, state_dir, as_json):
    """The validity window, the last run, the ladder and the drain cap as the state holds them."""
    from ccdiag.health.state import load_state

    cfg = _config(config_path, state_dir=state_dir)
    st = load_state(cfg.state_path)
    if as_json:
        from ccdiag.core.output import emit_json

        emit_json({**st.to_json(), "problem": st.problem, "path": cfg.state_path})
        return int(ExitCode.OK)
    now = time.time()
    ok, why = st.valid_pass(now, None)
    lines = [f"state {cfg.state_path}" + (f" ({st.problem})" if st.problem else ""),
             f"pass valid: {'yes' if ok else 'no'}: {why}"]
    if st.last_run:
        lines.append(f"last run: {st.last_run.get('outcome')}: {st.last_run.get('detail')}")
    for key, record in sorted(st.ladder.items()):
        lines.append(f"ladder: {key}: {record.get('action')} ({len(record.get('steps') or [])} step(s))")
    if st.cap:
        lines.append(f"drain cap: {'held' if st.cap.get('held') else 'not held'}; {st.cap.get('why', '')}".rstrip("; "))
    width = text_width()
    for line in lines:  # a path longer than the line stands whole on a line of its own
        for part in wrap(line, width, indent="    "):
            click.echo(part)
    return int(ExitCode.OK)


@group.command(name="yield", epilog=epilog("health yield"))
@_config_option
@_state_dir_option
def yield_command(config_path, state_dir):
    """Tell the health check running on this node, if any, to stop now: a job is starting."""
    from ccdiag.health.runner import signal_running

    cfg = _config(config_path, state_dir=state_dir)
    click.echo(signal_running(cfg.pid_path))
    return int(ExitCode.OK)
