"""``ccdiag topo``: the GPU/NIC/NVLink/PCIe topology, its links, and the bandwidth each path should give.

What an operator asks before blaming NCCL: which NIC is next to which GPU, did every link train
at its full width and speed, and what should a copy between two devices reach. The matrix is laid
out like ``nvidia-smi topo -m`` so it can be compared by eye, and is compared cell by cell with
nvidia-smi's own when that was recorded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import time

import click

from ccdiag.commands.examples import epilog
from ccdiag.commands.common import bug_report_option, host_options, make_host
from ccdiag.core.errors import InputError
from ccdiag.core.exitcodes import ExitCode
from ccdiag.core.output import sanitize_text
from ccdiag.core.probenames import PROBE_KMSG, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE, PROBE_SMI_TOPO
from ccdiag.topology.affinity import limiting_link
from ccdiag.topology.usable import blocked_by, gpu_states
from ccdiag.topology.dot import render_dot
from ccdiag.topology.levels import level_rank
from ccdiag.topology.matrix import compare as compare_with_smi, to_topo_matrix

DEFAULT_DEADLINE_S = 20.0


def topology_probes() -> tuple[str, ...]:
    """Every registered probe but the kernel log: what the topology and its cross-checks read."""
    from ccdiag.probes.registry import all_probes

    return tuple(n for n in all_probes() if n != PROBE_KMSG)


def _gbyte_s_text(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}"


def _read_text_file(path: str, what: str) -> str:
    from ccdiag.core.userfiles import read_user_text

    return read_user_text(path, what, 16 << 20)


# -- rendering -----------------------------------------------------------------------------------


def _matrix_table(m, title: str):
    from ccdiag.core.output import table
    from ccdiag.probes.smi_topo import rows_for_table

    rows = rows_for_table(m)
    return table(title, rows[0], rows[1:])


def _width() -> int:
    """Columns to fit: the terminal's, or $COLUMNS, or (piped, unset) wide enough for any matrix."""
    import shutil
    import sys

    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return 200


def _table_width(m) -> int:
    """Columns the whole matrix needs as a plain table (cells padded, two spaces between)."""
    from ccdiag.probes.smi_topo import rows_for_table

    rows = rows_for_table(m)
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return sum(widths) + 2 * (len(widths) - 1)


def _matrix_blocks(m) -> list:
    """The matrix as two narrow tables, GPU-GPU and GPU-NIC, for a terminal too narrow for the whole
    nvidia-smi layout (the affinity columns move to the GPU table)."""
    from ccdiag.core.output import table

    gpus = [d for d in m.devices if d in m.gpus()]
    nics = [d for d in m.devices if d not in gpus]
    blocks = []
    for title, cols in (("GPU - GPU", gpus), ("GPU - NIC", nics)):
        for part in _column_chunks(m, gpus, cols):
            name = title if len(part) == len(cols) else f"{title} ({part[0]}-{part[-1]})"
            blocks.append(table(name, ["", *part], [[a] + [m.raw_level(a, b) or "" for b in part] for a in gpus]))
    return blocks


def _column_chunks(m, rows: list[str], cols: list[str]) -> list[list[str]]:
    """``cols`` in runs that fit the terminal beside the row labels (16 NICs do not fit 80 columns)."""
    if not cols:
        return []
    cell = max(len(c) for c in cols)
    cell = max([cell] + [len(m.raw_level(a, b) or "") for a in rows for b in cols])
    label = max((len(a) for a in rows), default=0)
    per = max(1, (_width() - label - 4) // (cell + 2))  # 4: a table's edges on a terminal
    return [cols[i:i + per] for i in range(0, len(cols), per)]


def _print_narrow(out, m, rows: list[list[str]]) -> None:
    """A pasted matrix too wide for the terminal: GPU-GPU and GPU-NIC blocks, then the affinity
    columns as a table of their own, so no level, CPU list or device name is split."""
    from ccdiag.core.output import fit_table

    for block in _matrix_blocks(m):
        out.print(block)
    extra = rows[0][1 + len(m.devices):]
    if extra:
        gpu_rows = [[r[0], *r[1 + len(m.devices):]] for r in rows[1:] if r[0] in m.gpus()]
        out.print(fit_table("Affinity", ["GPU", *extra], gpu_rows, _width()))


def _gpu_rows(topo, m) -> list[list[str]]:
    rows = []
    for g in topo.gpus():
        rows.append([g.label, g.name or "?", g.uuid or "?", g.bdf or "?", "" if g.numa is None else str(g.numa),
                     m.cpu_affinity.get(g.label) or "", topo.gpu_state(g)])
    return rows


def _nic_legend_line(m) -> str | None:
    nic = [f"{d}={m.nic_legend[d]}" for d in m.devices if d in m.nic_legend]
    return ("NIC legend: " + ", ".join(nic)) if nic else None


def _nearest_text(a: dict, nstates: dict[str, dict]) -> str:
    """"mlx5_0 PIX"; "mlx5_4 PIX (down) -> mlx5_5 NODE" when every nearest NIC is down."""
    if a["nearest_down"]:
        text = f"{', '.join(a['nearest'])} {a['level']} (down) -> "
        return text + (f"{', '.join(a['usable'])} {a['usable_level']}" if a["usable"] else "no NIC with an active port")
    names = [n + (" (down)" if nstates.get(n, {}).get("usable") is False else "") for n in a["nearest"]]
    return f"{', '.join(names)} {a['level']}"


def _affinity_rows(topo) -> list[list[str]]:
    rows = []
    nstates = topo.nic_states()
    for g in topo.gpus():
        a = topo.gpudirect_nics(g, nstates)
        if not a["nearest"]:
            rows.append([g.label, a["state"], "(no RDMA NIC)", "", ""])
            continue
        cap = "-" if a["state"] != "ok" else _gbyte_s_text(a["gbyte_s"])
        rows.append([g.label, a["state"], _nearest_text(a, nstates), cap, _gbyte_s_text(a["current_gbyte_s"])])
    return rows


def _link_rows(topo) -> list[list[str]]:
    rows = []
    for l in topo.links():
        if l.kind == "smp":
            status = "-"
        elif l.kind in ("ib", "roce") and (l.state or "").upper() != "ACTIVE":
            status = "DOWN"
        elif l.degraded:
            status = "DEGRADED"
        elif l.current_gbyte_s is None and l.max_gbyte_s is None:
            status = "?"
        else:
            status = "ok"
        rows.append([l.name, l.kind, l.current_desc or "", l.max_desc or "", _gbyte_s_text(l.current_gbyte_s),
                     _gbyte_s_text(l.max_gbyte_s), status])
    return rows


def _expected_rows(topo) -> list[list[str]]:
    """Rows of the expected-bandwidth table. "expected" is what the path's links can carry and
    "as trained" what they carry now; a path ending at a failed GPU shows "-" and 0 with the GPU
    as its bottleneck, and a GPU whose nearest NIC is down also gets a row to the NIC it can use."""
    rows = []
    gpus = topo.gpus()
    gstates = gpu_states(topo)
    nstates = topo.nic_states()

    def numbers(cap, cur, *ends):
        blocked = blocked_by(gstates, *ends)
        if blocked:
            return "-", _gbyte_s_text(0.0), blocked
        return _gbyte_s_text(cap.gbyte_s), _gbyte_s_text(cur.gbyte_s), limiting_link(cap, cur)

    pairs = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            cap = topo.path_bandwidth(a.label, b.label)
            cur = topo.current_path_bandwidth(a.label, b.label)
            kind = cap.bottleneck.kind if cap.bottleneck else ""
            exp, trained, neck = numbers(cap, cur, a.label, b.label)
            pairs.append(((cap.level or "", exp, trained, kind), f"{a.label} <-> {b.label}", neck))
    # an HGX board has 28 identical pairs: show the common case once, the exceptions one by one
    counts: dict[tuple, int] = {}
    for key, _, _ in pairs:
        counts[key] = counts.get(key, 0) + 1
    common = max(counts, key=lambda k: counts[k]) if counts else None
    if common is not None and counts[common] <= 3:
        common = None
    for key, name, neck in pairs:
        if key != common:
            rows.append([name, "P2P", key[0], key[1], key[2], neck])
    if common is not None:
        n = counts[common]
        name = f"all {n} GPU pairs" if n == len(pairs) else f"the other {n} GPU pairs"
        neck = {"nvlink": "each GPU's NVLinks", "pcie": "PCIe links"}.get(common[3], common[3])
        rows.append([name, "P2P", common[0], common[1], common[2], neck])
    for g in gpus:
        cap, cur = topo.expected_h2d(g.label), topo.expected_h2d(g.label, current=True)
        rows.append([f"host -> {g.label}", "H2D", "", *numbers(cap, cur, g.label)])
    for g in gpus:
        near = topo.nearest_nics(g.label)[:1]
        targets = [n for n, _ in near]
        via = topo.gpudirect_nics(g, nstates)["via"] if near else None
        if via and via not in targets:
            targets.append(via)
        for nic in targets:
            cap = topo.expected_gpu_nic(g.label, nic)
            cur = topo.expected_gpu_nic(g.label, nic, current=True)
            name = f"{g.label} -> {nic}" + (" (DOWN)" if nstates.get(nic, {}).get("usable") is False else "")
            rows.append([name, "GPU->NIC", cap.level or "", *numbers(cap, cur, g.label)])
    return rows


def _netdev_rows(runs) -> list[list[str]]:
    run = runs.get(PROBE_NETDEV)
    data = getattr(run, "data", None)
    rows = []
    for itf in getattr(data, "interfaces", ()) or ():
        addrs = ",".join(a.address for a in itf.addresses if a.family == "inet")
        rows.append([itf.name, itf.operstate or ("up" if itf.up else "down" if itf.up is False else "?"),
                     "" if itf.speed_mbps is None else f"{itf.speed_mbps} Mb/s",
                     "" if itf.mtu is None else str(itf.mtu), itf.driver or "", itf.pci_bdf or "",
                     itf.ib_device or "", addrs])
    return rows


def _gpu_absence(runs) -> str:
    """Why there are no GPUs, in the words the probes gave."""
    nvml = runs.get(PROBE_NVML)
    why = []
    if nvml is not None and nvml.status != "ok":
        why.append(f"NVML {nvml.status}" + (f": {nvml.error}" if nvml.error else ""))
    pcie = runs.get(PROBE_PCIE)
    if pcie is not None and pcie.status not in ("ok", "partial"):
        why.append(f"PCIe {pcie.status}" + (f": {pcie.error}" if pcie.error else ""))
    return "; ".join(why)


def render_text(out, topo, runs, meta: dict, smi_diffs: list[str] | None, smi_matrix) -> None:
    from ccdiag.core.output import fit_table

    def table(title, columns, rows, to_rows=()):  # never splits an address, UUID or word
        return fit_table(title, columns, rows, _width(), to_rows)

    src = meta.get("source") or "live"
    if meta.get("synthesized"):
        src = "SYNTHESIZED sample, not a real machine"
    head = f"host {meta.get('hostname') or '?'} ({src})"
    if topo.driver_version:
        head += f", NVIDIA driver {topo.driver_version}"
    out.print(head)
    if not topo.gpus():
        why = _gpu_absence(runs)
        out.print(f"No NVIDIA driver/GPUs found on this host{': ' + why if why else ''}.")
    else:
        m = to_topo_matrix(topo)
        full = _matrix_table(m, "Topology (as nvidia-smi topo -m would show it)")
        if _table_width(m) > _width():
            for block in _matrix_blocks(m):
                out.print(block)
        else:
            out.print(full)
        legend = _nic_legend_line(m)
        if legend:
            out.print(legend)
        out.print("Levels: NV# = # NVLinks; PIX = one PCIe switch; PXB = several switches; PHB = host bridge; "
                  "NODE = across host bridges in a NUMA node; SYS = across sockets.")
        out.print(table("GPUs", ["GPU", "model", "UUID", "PCI", "NUMA", "CPU affinity", "state"], _gpu_rows(topo, m),
                        to_rows=("UUID", "CPU affinity")))
        out.print(table("NIC affinity (nearest RDMA NICs per GPU; GB/s to the NIC its traffic can use)",
                        ["GPU", "state", "nearest NIC(s) and level", "GPU->NIC GB/s", "as trained"],
                        _affinity_rows(topo)))
    if topo.nics():
        nstates = topo.nic_states()
        state_word = {"active": "active", "down": "DOWN", "unknown": "?"}
        out.print(table("RDMA NICs", ["NIC", "state", "PCI", "NUMA", "link layer", "rate", "ports", "netdevs",
                                      "serves GPUs"],
                        [[n.label, state_word[nstates[n.label]["state"]], n.bdf or "",
                          "" if n.numa is None else str(n.numa), n.link_layer or "",
                          "" if n.rate_gbit_s is None else f"{n.rate_gbit_s:g} Gb/s", ",".join(map(str, n.ports)),
                          ",".join(n.netdevs), ",".join(topo.gpus_near_nic(n.label))] for n in topo.nics()]))
    links = _link_rows(topo)
    if links:
        out.print(table("Links (GB/s per direction)", ["link", "type", "current", "max", "cur GB/s", "max GB/s",
                                                       "status"], links))
    if topo.gpus():
        out.print(table("Expected bandwidth (GB/s per direction, from the bottleneck link)",
                        ["path", "kind", "level", "expected", "as trained", "bottleneck"], _expected_rows(topo)))
    netdevs = _netdev_rows(runs)
    if netdevs:
        out.print(table("Network interfaces", ["name", "state", "speed", "MTU", "driver", "PCI", "RDMA dev", "IPv4"],
                        netdevs))
    if smi_diffs is not None:
        if smi_diffs:
            out.print(f"Mismatches with nvidia-smi topo -m ({len(smi_diffs)}):")
            for d in smi_diffs:
                out.print(f"  {d}")
        else:
            out.print("nvidia-smi topo -m agrees with this topology.")
        for w in getattr(smi_matrix, "warnings", ()) or ():
            out.print(f"  note (nvidia-smi output): {w}")
    for note in topo.notes:
        out.print(f"note: {note}")
    for name, run in runs.items():
        if run.status in ("failed", "timeout"):
            out.print(f"probe {name}: {run.status}: {run.error}")


# -- graphviz --------------------------------------------------------------------------------------


def _write_graphviz(dot_text: str, path: str, fmt: str) -> None:
    exe = shutil.which("dot")
    if exe is None:
        raise InputError(f"--{fmt} needs Graphviz's `dot` program, which is not installed "
                         f"(install the graphviz package, or use --dot FILE and render it elsewhere)")
    try:
        proc = subprocess.run([exe, f"-T{fmt}", "-o", path], input=dot_text.encode(), capture_output=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"dot could not render {path}: {exc}") from None
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InputError(f"dot could not render {path}: {msg[0] if msg else 'exit ' + str(proc.returncode)}")


def _write(path: str, text: str) -> None:
    from ccdiag.core.output import write_atomic

    try:
        write_atomic(path, sanitize_text(text))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- --from-smi ------------------------------------------------------------------------------------


def _from_smi(path: str, as_json: bool, output: str | None) -> int:
    from ccdiag.core.output import PLAIN_TABLE_CELLS, console, emit_json, plain_table, table
    from ccdiag.probes.smi_topo import TopoParseError, parse_topo_matrix, render_matrix, rows_for_table
    from ccdiag.report.document import build_report

    text = _read_text_file(path, "nvidia-smi topo -m")
    try:
        m = parse_topo_matrix(text)
    except TopoParseError as exc:
        p2p = _p2p_or_none(text)
        if p2p is not None:
            return _show_p2p(p2p, path, as_json, output)
        raise InputError(f"{path}: not an nvidia-smi topo -m matrix: {exc}") from None
    rows = rows_for_table(m)
    nic_aff: dict[str, list[list[str]]] = {}
    for g in m.gpus():
        levels = [(n, lv) for n in m.nics() if (lv := m.level(g, n))]
        if levels:
            levels.sort(key=lambda p: level_rank(p[1]))
            best = level_rank(levels[0][1])
            nic_aff[g] = [[m.nic_name(n), lv] for n, lv in levels if level_rank(lv) == best]
    if as_json:
        doc = build_report("topo", {"source": None}, run_info={"replayed_from": None, "from_smi": path},
                           extra={"pasted": {"tool": "nvidia-smi topo -m",
                                             "matrix": {"labels": list(m.devices),
                                                        "rows": [r[1:1 + len(m.devices)] for r in rows[1:]],
                                                        "table": rows, "nic_legend": dict(m.nic_legend)},
                                             "nic_affinity": nic_aff, "warnings": list(m.warnings),
                                             "truncated": m.truncated, "repaired": m.repaired,
                                             "repairs": list(m.repairs)}})
        emit_json(doc, output)
        return int(ExitCode.OK)
    if output:
        _write(output, render_matrix(m))
    out = console()
    parsed = (f"parsed {path}: {len(m.gpus())} GPU(s), {len(m.nics())} NIC(s)" + (" (cut short)" if m.truncated else ""))
    for line in textwrap.wrap(parsed, width=_width(), break_long_words=False, break_on_hyphens=False):
        out.print(line, soft_wrap=True)  # a long path stays one word, never folded mid-name
    if len(rows) * len(rows[0]) > PLAIN_TABLE_CELLS:
        # hundreds of devices: aligned text in one pass (a rich table of this size takes seconds)
        click.echo(plain_table("Topology (from pasted nvidia-smi topo -m)", rows[0], rows[1:]), nl=False)
    elif _table_width(m) > _width():
        _print_narrow(out, m, rows)
    else:
        out.print(table("Topology (from pasted nvidia-smi topo -m)", rows[0], rows[1:]))
    legend = _nic_legend_line(m)
    if legend:
        out.print(legend)
    if nic_aff:
        out.print(table("NIC affinity", ["GPU", "nearest NIC(s)", "level"],
                        [[g, ", ".join(n for n, _ in v), v[0][1]] for g, v in nic_aff.items()]))
    for w in m.warnings:
        out.print(f"note: {w}")
    if m.repaired:
        out.print(f"REPAIRED: {len(m.repairs)} cell(s) of the paste were damaged and recovered:")
        for r in m.repairs:
            out.print(f"  {r}")
    return int(ExitCode.OK)


def _p2p_or_none(text: str):
    """The text as an ``nvidia-smi topo -p2p`` matrix (OK/NS/CNS... cells), or None."""
    from ccdiag.probes.smi_topo import TopoParseError, parse_topo_p2p

    try:
        return parse_topo_p2p(text)
    except TopoParseError:
        return None


def _show_p2p(p, path: str, as_json: bool, output: str | None) -> int:
    from ccdiag.core.output import console, emit_json, table
    from ccdiag.report.document import build_report

    devices = list(p.devices)
    rows = [[a] + [p.status(a, b) or "" for b in devices] for a in devices]
    if as_json:
        # a pasted matrix is not a node's topology: it goes under "pasted", and "topology" is null
        doc = build_report("topo", {"source": None}, run_info={"replayed_from": None, "from_smi": path},
                           extra={"pasted": {"tool": "nvidia-smi topo -p2p",
                                             "p2p": {"mode": p.mode, "labels": devices, "rows": [r[1:] for r in rows],
                                                     "legend": dict(p.legend)},
                                             "warnings": list(p.warnings), "truncated": p.truncated,
                                             "repaired": bool(p.repairs), "repairs": list(p.repairs)}})
        emit_json(doc, output)
        return int(ExitCode.OK)
    out = console()
    mode = {"r": "read", "w": "write", "n": "NVLink", "a": "atomics", "p": "prop"}.get(p.mode or "", "mode unknown")
    out.print(f"parsed {path}: nvidia-smi topo -p2p ({mode}), {len(devices)} GPU(s)" + (" (cut short)" if p.truncated else ""))
    out.print(table("Peer-to-peer status (from pasted nvidia-smi topo -p2p)", ["", *devices], rows))
    blocked = sorted({f"{a}->{b} {p.status(a, b)}" for a in devices for b in devices
                      if a != b and p.status(a, b) not in (None, "OK", "X")})
    if blocked:
        out.print("no peer-to-peer: " + ", ".join(blocked))
    for w in p.warnings:
        out.print(f"note: {w}")
    return int(ExitCode.OK)


# -- the pipeline (also used by tests and other commands) -----------------------------------------------


def gather(host, timeout: float = DEFAULT_DEADLINE_S):
    """Observe ``host`` with the topology probes under one deadline (:func:`ccdiag.run.observe.observe`,
    which lets go of the host afterwards) and compare the topology with nvidia-smi's matrix.

    Returns (probe runs, topology, nvidia-smi's parsed matrix or None, mismatches or None)."""
    from ccdiag.run.observe import observe

    obs = observe(host, topology_probes(), time.monotonic() + timeout, close=True)
    runs, topo = obs.runs, obs.topology
    smi = runs.get(PROBE_SMI_TOPO)
    smi_matrix = getattr(getattr(smi, "data", None), "matrix", None)
    smi_diffs = compare_with_smi(topo, smi_matrix) if (smi_matrix is not None and topo.gpus()) else None
    return runs, topo, smi_matrix, smi_diffs


def topo_report(meta: dict, runs, topo, smi_diffs, started: float, replay: str | None = None,
                timeout: float = DEFAULT_DEADLINE_S) -> dict:
    """The ``kind: topo`` JSON report."""
    from ccdiag.report.document import build_report, now_info

    code = ExitCode.OK if topo.gpus() else ExitCode.UNEVALUATED
    timed_out = any(r.status == "timeout" for r in runs.values())
    return build_report("topo", meta, runs=runs, topology=topo.to_json(),
                        run_info=now_info(started, replayed_from=replay, deadline_s=timeout, timed_out=timed_out),
                        extra={"smi_mismatches": smi_diffs, "exit_code": int(code)})


#: options that describe a host or a graph of one: a pasted matrix has neither
_HOST_ONLY_OPTIONS = (("replay", "--replay"), ("root", "--root"), ("timeout", "--timeout"), ("dot_path", "--dot"),
                      ("svg_path", "--svg"), ("png_path", "--png"))


def _refuse_host_options_with_from_smi() -> None:
    """--from-smi reads a pasted matrix, never a host: an option given with it that it would
    ignore (--replay, --root, --timeout, --dot/--svg/--png) is a usage error, not a silent no-op."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = [flag for name, flag in _HOST_ONLY_OPTIONS
             if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
    if given:
        raise InputError(f"--from-smi cannot be combined with {', '.join(given)}: "
                         "it reads a pasted nvidia-smi topo -m, not a host")


# -- the command -----------------------------------------------------------------------------------


@click.command(name="topo", epilog=epilog("topo"))
@host_options
@bug_report_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report (kind \"topo\") on stdout.")
@click.option("-o", "--output", metavar="FILE", help="Write the report (text, or JSON with --json) to FILE.")
@click.option("--dot", "dot_path", metavar="FILE", help="Write the graph as Graphviz DOT to FILE.")
@click.option("--svg", "svg_path", metavar="FILE", help="Render the graph to an SVG file (needs Graphviz `dot`).")
@click.option("--png", "png_path", metavar="FILE", help="Render the graph to a PNG file (needs Graphviz `dot`).")
@click.option("--from-smi", "from_smi", metavar="FILE",
              help="Read a pasted `nvidia-smi topo -m` output instead of a host, and show it as ccdiag would "
                   "(not with --replay, --root, --timeout, --dot, --svg, --png).")
@click.option("--timeout", type=click.FloatRange(1, 600), default=DEFAULT_DEADLINE_S, show_default=True, metavar="S",
              help="Deadline for all probes together.")
def command(replay, root, as_json, output, dot_path, svg_path, png_path, from_smi, timeout, bug_report=None):
    """Show the GPU/NIC/NVLink/PCIe topology: the nvidia-smi style matrix, each GPU's nearest NIC,
    every link's trained vs maximum speed, the bandwidth each path should reach, and any mismatch
    with `nvidia-smi topo -m`.

    A NIC with no active port is marked down and the nearest NIC with one is shown next to it; a GPU
    NVML reports as lost or hung shows its state and carries 0 GB/s as trained.

    Exit codes: 0 shown; 2 bad input (unreadable --replay/--from-smi file, unwritable -o file,
    Graphviz missing for --svg/--png, --from-smi with an option that needs a host: --replay, --root,
    --timeout, --dot/--svg/--png); 3 no NVIDIA driver or GPU found (NICs and network interfaces are
    still listed).
    """
    if from_smi:
        _refuse_host_options_with_from_smi()
        return _from_smi(from_smi, as_json, output)
    from ccdiag.core.output import console, emit_json

    started = time.monotonic()
    if not replay and root != "/" and not os.path.isdir(root):
        raise InputError(f"--root {root}: not a directory")
    host = make_host(replay, root, bug_report=bug_report, deadline=started + timeout / 2)
    replay = replay or bug_report
    runs, topo, smi_matrix, smi_diffs = gather(host, timeout)
    code = ExitCode.OK if topo.gpus() else ExitCode.UNEVALUATED
    meta = host.meta()
    if dot_path or svg_path or png_path:
        dot_text = render_dot(topo)
        if dot_path:
            _write(dot_path, dot_text)
        if svg_path:
            _write_graphviz(dot_text, svg_path, "svg")
        if png_path:
            _write_graphviz(dot_text, png_path, "png")
    if as_json:
        emit_json(topo_report(meta, runs, topo, smi_diffs, started, replay, timeout), output)
    else:
        if output:
            import io

            from rich.console import Console

            buf = io.StringIO()
            render_text(Console(file=buf, no_color=True, width=200, force_terminal=False, soft_wrap=True),
                        topo, runs, meta, smi_diffs, smi_matrix)
            _write(output, buf.getvalue())
        else:
            render_text(console(), topo, runs, meta, smi_diffs, smi_matrix)
    return int(code)
