"""``ccdiag nccl``: the NCCL settings an expert would write for this node, each with its evidence.

Reads the node (live or ``--replay``), or only a pasted ``nvidia-smi topo -m`` (``--from-smi``,
saying what needs the node), judges the NCCL settings already present (``--env-file``, else the
environment and ``/etc/nccl.conf``), and with ``--log`` reads what NCCL really chose and names
every difference. Exit codes as everywhere: 0 ok, 2 bad input, 3 nothing read.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from ccdiag.commands.examples import epilog
from ccdiag.commands.common import bug_report_option, host_options, make_host
from ccdiag.core.errors import InputError, NotEvaluated
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.output import sanitize_text
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE, PROBE_PLATFORM, PROBE_SYSTEM

if TYPE_CHECKING:
    from ccdiag.nccl.diagnose import LogFinding
    from ccdiag.nccl.knobs import Recommendation
    from ccdiag.nccl.logread import NcclLog

FORMATS = ("text", "env", "nccl.conf", "json")
#: what the recommender reads: devices, links, ports, interfaces and modules (no kernel log, no
#: nvidia-smi matrix: the topology is built from the node itself)
NCCL_PROBES = (PROBE_SYSTEM, PROBE_PCIE, PROBE_NVML, PROBE_INFINIBAND, PROBE_NETDEV, PROBE_PLATFORM)


def _read(path: str, what: str) -> str:
    from ccdiag.core.userfiles import read_user_text

    return read_user_text(path, what, 64 << 20)


def _env_file_settings(env_file: str | None) -> tuple[dict[str, str], str]:
    """The settings an env file (shell syntax) sets, or none."""
    from ccdiag.inputs.envfile import parse_env_file

    if env_file:
        return parse_env_file(_read(env_file, "environment"), env_file), f"env file {env_file}"
    return {}, "environment"


def node_recommendation(host, env: dict[str, str], env_source: str, timeout: float = 30.0,
                        env_unread: tuple[str, ...] = (), platform: str | None = None):
    """(recommendation, runs, topology) of a host door: the probes the recommender reads, then the topology."""
    from ccdiag.nccl.recommend import recommend
    from ccdiag.run.observe import observe

    obs = observe(host, NCCL_PROBES, time.monotonic() + timeout)
    rec = recommend(obs.topology, obs.runs, env=env, env_source=env_source, env_unread=env_unread, platform=platform)
    return rec, obs.runs, obs.topology


@click.command(name="nccl", epilog=epilog("nccl"))
@host_options
@bug_report_option
@click.option("--from-smi", "from_smi", metavar="FILE", type=click.Path(dir_okay=False),
              help="Recommend from a pasted `nvidia-smi topo -m` alone (rails and ring order).")
@click.option("--log", "log_files", metavar="PATH", multiple=True, type=click.Path(),
              help="An NCCL_DEBUG=INFO log (repeat it, or give a directory, for per-rank logs read as one job), an "
                   "ncclras output or NCCL Inspector records: the failure first, explained, then what NCCL chose.")
@click.option("--env-file", "env_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Judge these KEY=VALUE settings instead of the environment and /etc/nccl.conf.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text (with evidence), env (a file to source), nccl.conf, or json.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("-o", "--output", metavar="FILE", help="Write the output to FILE instead of stdout.")
@click.option("--write-topo-file", "topo_out", metavar="FILE",
              help="Write the generated NCCL topology XML (when one is recommended) to FILE.")
@click.option("--platform", "platform_key", metavar="KEY", default=None,
              help="Name the platform where the node cannot say (a key of ccdiag's platform table, e.g. "
                   "coreweave-ib, azure-ndv5, aws-p5): its documented settings are kept and labelled.")
@click.option("--timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True, metavar="S")
def command(replay: str | None, root: str, from_smi: str | None, log_files: tuple[str, ...], env_file: str | None,
            fmt: str, as_json: bool, output: str | None, topo_out: str | None, platform_key: str | None,
            timeout: float, bug_report: str | None = None) -> int:
    """NCCL settings for this node with their evidence (exit 0 ok, 2 bad input, 3 nothing read)."""
    fmt = "json" if as_json else fmt
    if from_smi and (replay or bug_report):
        raise InputError("--from-smi and --replay/--bug-report read different things; give one")
    if platform_key is not None:
        from ccdiag.nccl.platforms import by_key

        if platform_key not in by_key():
            raise InputError(f"--platform {platform_key}: not in the platform table; one of {', '.join(sorted(by_key()))}")
    deadline = time.monotonic() + timeout
    log, extra_findings = _load_logs(log_files, deadline)
    log_file = ", ".join(log_files) if log_files else None
    meta: dict = {}
    if from_smi:
        rec, subject = _from_matrix(from_smi, env_file, platform_key)
    elif log_files and not replay and not bug_report and root == "/" and not env_file:
        rec, subject = None, f"the log {log_file}"
    else:
        rec, meta = _from_node(replay, root, env_file, max(1.0, deadline - time.monotonic()), platform_key,
                               bug_report)
        subject = meta.get("hostname") or ("the snapshot " + replay if replay
                                           else f"the node in {bug_report}" if bug_report else "this node")
    findings = None
    if log_files:
        from ccdiag.nccl.diagnose import diagnose

        findings = (diagnose(log, rec) if log is not None else []) + extra_findings
    if topo_out:
        _write_topo(topo_out, rec)
    text = _formatted(fmt, rec, subject, meta, log, log_file, findings, replay, from_smi)
    if text is None:
        _print_text(rec, subject, log, log_file, findings)
    elif output:
        _write(output, text)
    else:
        click.echo(sanitize_text(text), nl=False)
    return int(ExitCode.OK)


def _load_logs(paths: tuple[str, ...], deadline: float) -> tuple[NcclLog | None, list[LogFinding]]:
    """(the NCCL log read as one job or None, findings of ncclras outputs and Inspector records), each file
    told apart by its content; reading stops at ``deadline`` (the command's --timeout)."""
    if not paths:
        return None, []
    from ccdiag.nccl.logread import LogError, log_files, read_nccl_logs

    try:
        files = log_files(paths)
        logs: list[str] = []
        extra: list[LogFinding] = []
        for path in files:
            kind = _kind(path)
            if kind == "log":
                logs.append(path)
            else:
                extra += _structured(path, kind)
        log = read_nccl_logs(logs, deadline) if logs else None
    except TimeoutError as exc:  # an OSError too: caught first
        raise NotEvaluated(f"reading the NCCL log {exc} took longer than --timeout; give a larger --timeout or a "
                           "shorter excerpt") from None
    except OSError as exc:
        raise InputError(f"cannot read NCCL log {exc.filename or ', '.join(paths)}: {exc.strerror or exc}") from None
    except LogError:
        raise
    return log, extra


def _kind(path: str) -> str:
    from ccdiag.nccl.inspector import looks_like_inspector
    from ccdiag.nccl.rasread import looks_like_ras

    with open(path, "rb") as fh:
        head = fh.read(20000).decode("utf-8", "replace")
    if looks_like_inspector(head):
        return "inspector"
    if looks_like_ras(head):
        return "ras"
    return "log"


def _structured(path: str, kind: str) -> list[LogFinding]:
    """Findings of an ncclras output or of Inspector records (read whole: RAS is small; Inspector records
    stream through the judge keeping medians only)."""
    import json

    from ccdiag.nccl import inspector, rasread
    from ccdiag.nccl.logread import LogError

    try:
        if kind == "ras":
            return rasread.read_ras(_read(path, "ncclras output"))
        with open(path, encoding="utf-8", errors="replace") as fh:
            return inspector.judge(inspector.records(_chunks(fh)))
    except (json.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
        raise LogError(f"{path}: not a readable {kind} output: {exc}") from None


def _chunks(fh, size: int = 4 << 20):
    """A file of JSON objects in pieces that end between objects (a '}' at the end of a line)."""
    carry = ""
    while True:
        piece = fh.read(size)
        if not piece:
            if carry.strip():
                yield carry
            return
        data = carry + piece
        cut = data.rfind("}\n") + 2
        if cut < 2:
            carry = data
            continue
        yield data[:cut]
        carry = data[cut:]


def _from_matrix(from_smi: str, env_file: str | None, platform: str | None = None) -> tuple[Recommendation, str]:
    from ccdiag.nccl.recommend import recommend_from_matrix
    from ccdiag.probes.smi_topo import TopoParseError, parse_topo_matrix

    try:
        matrix = parse_topo_matrix(_read(from_smi, "nvidia-smi topo -m"))
    except TopoParseError as exc:
        raise InputError(f"{from_smi}: not an nvidia-smi topo -m matrix: {exc}") from None
    env, env_source = _env_file_settings(env_file)
    rec = recommend_from_matrix(matrix, f"pasted nvidia-smi topo -m ({from_smi})", env=env, env_source=env_source,
                                platform=platform)
    return rec, f"the matrix in {from_smi}"


def _from_node(replay: str | None, root: str, env_file: str | None, timeout: float, platform: str | None = None,
               bug_report: str | None = None) -> tuple[Recommendation, dict]:
    from ccdiag.nccl.present import NCCL_CONF
    from ccdiag.run.observe import close_host, nccl_settings_seen
    from ccdiag.probes._ncclconf import conf_problems

    host = make_host(replay, root, bug_report=bug_report, deadline=time.monotonic() + timeout / 2)
    try:
        # the settings a job would see: an env file, else the environment and then /etc/nccl.conf
        conf = None
        if env_file:
            env, env_source = _env_file_settings(env_file)
            unread: tuple[str, ...] = ()
        else:
            seen = nccl_settings_seen(host)
            env, env_source, unread, conf = seen.env, seen.source, seen.unread, seen.conf
        rec, runs, topo = node_recommendation(host, env, env_source, timeout, unread, platform)
        meta = host.meta()
        # lines NCCL reads differently from what a shell would (``export``, quotes)
        conf_notes = [f"{NCCL_CONF} {p}" for p in conf_problems(conf)] if conf else []
    finally:
        close_host(host)
    if conf_notes:
        import dataclasses

        rec = dataclasses.replace(rec, notes=rec.notes + tuple(conf_notes))
    if not topo.gpus() and not topo.nics() and not any(r.usable for r in runs.values()):
        raise NotEvaluated("nothing could be read from this node: " +
                           "; ".join(f"{n}: {r.status}" for n, r in runs.items()))
    return rec, meta


def _formatted(fmt: str, rec: Recommendation | None, subject: str, meta: dict, log: NcclLog | None,
               log_file: str | None, findings: list[LogFinding] | None, replay: str | None,
               from_smi: str | None) -> str | None:
    """The output in a file format, or None for the terminal table."""
    from ccdiag.nccl import render

    header = f"NCCL settings for {subject}, written by ccdiag nccl. Each line says why; experiments are commented out."
    if fmt == "env":
        return render.env_file(rec, header) if rec else ""
    if fmt == "nccl.conf":
        return render.nccl_conf(rec, header) if rec else ""
    if fmt != "json":
        return None
    from ccdiag.report.document import build_report, dumps

    extra = {"nccl": rec.to_json() if rec else None}
    if findings is not None:
        body = log.to_json() if log is not None else {"network": None, "net_devices": {}, "warnings": []}
        extra["nccl_log"] = {"file": log_file, **body, "differences": [f.render() for f in findings],
                             "findings": [f.to_json() for f in findings]}
    doc = build_report("nccl", meta, run_info={"replayed_from": replay, "from_smi": from_smi}, extra=extra)
    return dumps(doc) + "\n"


def _write_topo(path: str, rec: Recommendation | None) -> None:
    """Write the topology XML when one is recommended; either way say so on stderr."""
    if rec is None:
        click.echo(f"--write-topo-file: nothing written to {path}: no node was read (a log alone)", err=True)
        return
    if not rec.files:
        knob = rec.get("NCCL_TOPO_FILE")
        why = knob.reason if knob is not None else "no topology file is recommended"
        click.echo(f"--write-topo-file: nothing written to {path}: {why}", err=True)
        return
    name, content = next(iter(rec.files.items()))
    _write(path, content)
    gpus, nics = content.count('class="0x030200"'), content.count('class="0x020700"')
    switches = content.count('busid="ffff:')
    click.echo(f"--write-topo-file: wrote {path} ({gpus} GPUs and {nics} NICs paired under {switches} synthetic "
               f"PCI switches); install it as {name}, the NCCL_TOPO_FILE the recommendation sets", err=True)


def _write(path: str, text: str) -> None:
    from ccdiag.core.output import write_atomic

    try:
        write_atomic(path, sanitize_text(text))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _print_text(rec: Recommendation | None, subject: str, log: NcclLog | None, log_file: str | None,
                findings: list[LogFinding] | None) -> None:
    from ccdiag.nccl.render import text_rows
    from ccdiag.core.output import console, fit_table, sanitize
    from ccdiag.core.textfit import text_width, wrap

    out = console()
    width = text_width()
    if rec is not None:
        # a value (an exact list of ports) is never split: the reasons move under their row instead
        out.print(fit_table(f"NCCL settings for {subject}", ["do", "variable", "value", "confidence", "why"],
                            text_rows(rec), width, to_rows=["why"]))
        for note in rec.notes:
            for line in wrap(sanitize(f"note: {note}"), width, indent="      ", first=""):
                out.print(line, soft_wrap=True)
        settings = rec.settings()
        if settings:
            from ccdiag.nccl.render import shell_assignment

            # one export per line: pasted into a job script as printed, each line its own command
            out.print("In a job script:")
            for k, v in settings.items():
                out.print(f"  export {shell_assignment(k, v, settings)}", soft_wrap=True)
    if findings is None:
        return
    if log is not None:
        devs = ", ".join(f"{d} ({k})" for d, k in log.net_devices.items()) or "-"
        head = (f"{log_file}: {log.flavour} {log.version or '(version not in the log)'}, network "
                f"{log.network or '?'} [{devs}], transports {dict(log.transports) or '-'}, "
                f"{log.warning_count} WARN line(s), {len(log.comms) or '?'} communicator(s), "
                f"{log.lines} lines read")
        for line in wrap(sanitize(head), width, indent="    ", first=""):
            out.print(line, soft_wrap=True)
    for f in findings:
        for line in wrap(sanitize(f"[{f.severity.upper()}] {f.title}: {f.text}"), width,
                         indent="      ", first="  "):
            out.print(line, soft_wrap=True)
        if f.meaning:
            for line in wrap(sanitize(f"what it means: {f.meaning}"), width, indent="        ", first="      "):
                out.print(line, soft_wrap=True)
        if f.remedy:
            for line in wrap(sanitize(f"what to do: {f.remedy}"), width, indent="        ", first="      "):
                out.print(line, soft_wrap=True)
        for c in f.consequences:
            for line in wrap(sanitize(f"follow-on: {c}"), width, indent="        ", first="      "):
                out.print(line, soft_wrap=True)
