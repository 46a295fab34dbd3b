"""``ccdiag daemon``: serve Prometheus metrics from a background collection loop.

Settings come from ``--config FILE`` (TOML: ``listen``, ``interval``, ``policy``, ``web_config``,
``deadline``, ``max_stale``, ``probes``) with the command line on top; SIGHUP re-reads them.
"""

from __future__ import annotations

import sys

import click

from ccdiag.commands.examples import epilog
from ccdiag.commands.common import host_options
from ccdiag.core.errors import InputError
from ccdiag.core.exitcodes import ExitCode


@click.command(name="daemon", epilog=epilog("daemon"))
@host_options
@click.option("--web.listen-address", "--listen", "listen", metavar="ADDR:PORT",
              help="Address to serve on [default: 127.0.0.1:9643]; port 0 picks a free port (the URL is printed "
                   "on stderr). --listen is the same option.")
@click.option("--web.telemetry-path", "telemetry_path", metavar="PATH",
              help="Path under which to expose metrics [default: /metrics].")
@click.option("--web.max-requests", "max_requests", type=click.IntRange(1, 1024), metavar="N",
              help="Requests served at once [default: 40]; one more is answered 503 at once. Connections "
                   "that have not sent a whole request header hold no thread and are closed after 10 s.")
@click.option("--interval", type=click.FloatRange(min=0.1), metavar="S",
              help="Seconds between collection cycles [default: 15].")
@click.option("--config", "config_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="TOML settings file (re-read on SIGHUP).")
@click.option("--web.config.file", "--web-config", "web_config", metavar="FILE", type=click.Path(dir_okay=False),
              help="TLS and basic-auth settings in the Prometheus exporter-toolkit format (--web-config is the "
                   "same option).")
@click.option("--policy", metavar="FILE", type=click.Path(dir_okay=False), help="Policy file the checks use.")
@click.option("--deadline", type=click.FloatRange(min=0.5), metavar="S",
              help="Bound on one collection cycle [default: 30].")
@click.option("--once", is_flag=True, help="Run one cycle, print the exposition on stdout and exit: 0 when "
              "the cycle completed (whatever it found), 3 when it could not.")
def command(replay, root, listen, telemetry_path, max_requests, interval, config_file, web_config, policy, deadline, once):
    """Serve Prometheus metrics for GPUs, NVLinks, PCIe links and RDMA ports, and every check's status.

    Probes run on their own interval, each cycle in a child process killed at the deadline; a
    scrape serves the last completed cycle and its age (ccdiag_collection_age_seconds) and never
    waits on a probe. A failing or hung probe shows as
    ccdiag_probe_success 0 while its last good values stay served (ccdiag_probe_data_stale 1) for up
    to max_stale seconds. Endpoints: /metrics, /-/healthy, /-/ready.

    Signals: SIGTERM/SIGINT stop (exit 0), SIGHUP reloads the configuration, SIGUSR1 collects now.

    Exit codes: 2 for a bad option or config file (at start-up; on SIGHUP a bad file is logged and
    the running settings stay). With --once: 0 when the cycle completed, even if checks failed or
    probes timed out (that is in the exposition: ccdiag_verdict_severity, ccdiag_probe_success);
    3 when the cycle itself could not complete (the error is on stderr and the exposition printed
    has no cycle in it).
    """
    from ccdiag.exporters.daemon import Daemon, load_config
    overrides = {"listen": listen, "telemetry_path": telemetry_path, "max_requests": max_requests,
                 "interval_s": interval,
                 "web_config": web_config, "policy": policy,
                 "deadline_s": deadline, "replay": replay, "root": root if root != "/" else None}
    config = load_config(config_file, overrides)
    daemon = Daemon(config, reload_config=lambda: load_config(config_file, overrides))
    if once:
        completed = daemon.run_cycle()
        sys.stdout.buffer.write(daemon.collector.exposition())
        sys.stdout.flush()
        # a caller scripting --once (a textfile cron job, a smoke test) must not take an exposition
        # without a cycle for a node that was looked at
        return int(ExitCode.OK if completed else ExitCode.UNEVALUATED)

    def started() -> None:
        click.echo(f"ccdiag daemon: serving {daemon.server.url} (collecting every {config.interval_s:g}s)",
                   err=True)

    try:
        return daemon.serve(on_started=started)
    except OSError as exc:
        raise InputError(f"cannot listen on {config.listen}: {exc.strerror or exc}") from None
