"""``ccdiag policy init|show``: write the standard of a healthy node, or show the one a file sets.

A fleet is held to one standard by running ``ccdiag policy init -o fleet.toml`` on a node known to
be healthy and ``ccdiag check --policy fleet.toml`` everywhere else; a node that lost a GPU or
trained a link down then fails against the fleet, not only against itself.
"""

from __future__ import annotations

import time

import click

from ccdiag.commands.examples import epilog
from ccdiag.commands.common import host_options, make_host
from ccdiag.core.errors import InputError, NotEvaluated
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.output import sanitize, sanitize_text
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NVML, PROBE_PCIE, PROBE_PLATFORM, PROBE_SYSTEM
from ccdiag.inputs.policy import FIELD_HELP, Policy, file_keys, init_header, load_policy, \
    policy_from_observations, to_toml

#: what a policy is made from: the GPUs, their PCIe links and the RDMA ports; the node's versions
#: (driver, firmware, NCCL, kernel: system and platform) for its known-good set
POLICY_PROBES = (PROBE_NVML, PROBE_PCIE, PROBE_INFINIBAND, PROBE_SYSTEM, PROBE_PLATFORM)
HARDWARE_PROBES = (PROBE_NVML, PROBE_PCIE, PROBE_INFINIBAND)


@click.group(name="policy", epilog=epilog("policy"))
def group() -> None:
    """Write (init) or show the expectations `ccdiag check --policy FILE` holds a node to."""


@group.command(name="init", epilog=epilog("policy init"))
@host_options
@click.option("-o", "--output", "output", metavar="FILE", help="Write the policy here instead of stdout.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=30.0, show_default=True, metavar="S",
              help="Deadline for reading the node.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@click.option("--known-good/--no-known-good", "known_good", default=True, show_default=True,
              help="Record this node's versions (driver, CUDA, VBIOS, ConnectX firmware, NCCL and its network "
                   "plugin, fabric manager, kernel, /etc/nccl.conf) as its machine type's known-good set.")
def init(replay, root, output, timeout, force, known_good):
    """Write a TOML policy from this node (or a snapshot of one) known to be healthy.

    It sets the GPU count and model, the lowest PCIe generation and width the GPU links are capable
    of, and the rate and number of active RDMA ports; thresholds keep their defaults. The node's
    versions become its machine type's known-good set: `check --policy` names every node that differs.
    """
    import os

    from ccdiag.run.observe import observe

    if output and os.path.exists(output) and not force:
        raise InputError(f"{output} exists; pass --force to overwrite it")
    obs = observe(make_host(replay, root), POLICY_PROBES, time.monotonic() + timeout, close=True)
    runs, meta = obs.runs, obs.meta
    # the versions of the node (system, platform) alone make no policy: its GPUs, links and ports do
    if not any(runs[p].usable for p in HARDWARE_PROBES if p in runs):
        why = "; ".join(f"{n}: {r.status}{' (' + r.error + ')' if r.error else ''}" for n, r in runs.items()
                        if n in HARDWARE_PROBES)
        raise NotEvaluated(f"nothing to make a policy from ({why})")
    topology = obs.topology
    policy = policy_from_observations(runs, topology)
    if known_good:
        policy = _with_known_good(policy, runs)
    from ccdiag.core.textfit import text_width, wrap

    for line in _unhealthy_signs(runs):
        for part in wrap(sanitize(f"ccdiag: warning: {line}; a policy should come from a healthy node - review it"),
                         text_width(), indent="    ", first=""):
            click.echo(part, err=True)
    # the header names the host the snapshot says it came from: shown, never acted on by a terminal
    text = sanitize_text(to_toml(policy, init_header(meta)))
    if output:
        from ccdiag.core.output import write_atomic

        try:
            write_atomic(output, text)
        except OSError as exc:
            raise InputError(f"cannot write {output}: {exc.strerror or exc}") from None
        unset = [k for k in ("expected_gpu_count", "gpu_model", "min_pcie_gen", "min_pcie_width",
                             "ib_rate_gbit_s", "expected_ib_ports") if getattr(policy, k) is None]
        for part in wrap(sanitize(f"wrote {output}" + (f" (not observed, left unset: {', '.join(unset)})" if unset else "")),
                         text_width(), indent="    ", first=""):
            click.echo(part, err=True)
    else:
        click.echo(text, nl=False)
    return int(ExitCode.OK)


def _with_known_good(policy: Policy, runs) -> Policy:
    """The policy with this node's versions as its machine type's known-good set."""
    import dataclasses

    from ccdiag.inputs.knowngood import data_of_runs, from_data

    return dataclasses.replace(policy, known_good=(from_data(data_of_runs(runs)),))


def _unhealthy_signs(runs) -> list[str]:
    """What in the observations says this node is not the healthy reference a policy assumes."""
    signs = []
    nvml = runs.get(PROBE_NVML)
    if nvml is not None and nvml.usable:
        lost = [f"GPU{g.index} {g.failed}" for g in nvml.data.gpus if g.failed]
        if lost:
            signs.append("failed GPUs counted: " + ", ".join(lost))
    ib = runs.get(PROBE_INFINIBAND)
    if ib is not None and ib.usable:
        down = [f"{d.name} port {p.port} {p.state or '?'}" for d in ib.data.devices for p in d.ports
                if p.link_layer != "Ethernet" and p.state != "ACTIVE"]
        if down:
            signs.append("RDMA ports not active (left out of expected_ib_ports): " + ", ".join(down))
    return signs


@group.command(name="show", epilog=epilog("policy show"))
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the effective policy as JSON.")
def show(file, as_json):
    """Show the effective policy FILE sets: each value, whether it comes from the file or the default."""
    import dataclasses

    policy = load_policy(file)
    in_file = file_keys(file) | ({"waivers"} if policy.waivers else set())
    rows = []
    for name in Policy.field_names():
        if name in ("source", "known_good"):
            continue
        value = getattr(policy, name)
        origin = "file" if name in in_file else "default"
        rows.append((name, value, origin, FIELD_HELP.get(name, "")))
    waivers = [w.to_json() for w in policy.waivers]
    if as_json:
        from ccdiag.core.output import emit_json
        from ccdiag.report.document import build_report

        emit_json(build_report("policy", {}, run_info={},
                               extra={"policy": {"source": file,
                                                 "values": {n: (waivers if n == "waivers" else
                                                                list(v) if isinstance(v, tuple) else v)
                                                            for n, v, _, _ in rows},
                                                 "origin": {n: o for n, _, o, _ in rows},
                                                 "known_good": [dataclasses.asdict(k) for k in policy.known_good]}}))
        return int(ExitCode.OK)
    from ccdiag.core.output import console, table

    out = console()
    out.print(f"policy {file}")
    out.print(table(None, ("key", "value", "from", "meaning"),
                    [(n, _shown(n, v, policy), o, h) for n, v, o, h in rows]))
    for k in policy.known_good:
        out.print(table(f"known good: {k.machine_type or 'every machine type'} (on drift: {k.on_drift})",
                        ("key", "value"), [(key, value) for key, value in k.values.items()]))
    return int(ExitCode.OK)


def _shown(name: str, value, policy) -> object:
    """A policy value as ``policy show`` prints it; each waiver as one sentence with its line."""
    if value is None:
        return "(none)"
    if name == "waivers":
        return "; ".join(f"{w.names()} until {w.until} by {w.by}: {w.reason}"
                         + (f" (line {w.line})" if w.line else "") for w in policy.waivers) or "(none)"
    return list(value) if isinstance(value, tuple) else value
