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
import time

import click

from ccdiag.commands.common import host_options, make_host
from ccdiag.errors import InputError
from ccdiag.exitcodes import ExitCode

PROBES = ("system", "pcie", "nvml", "infiniband", "netdev", "smi_topo")
DEFAULT_DEADLINE_S = 20.0


def _gbs(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}"


def _read_text_file(path: str, what: str) -> str:
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a {what} file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(16 << 20)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    return data.decode("utf-8", "replace")


# -- rendering -----------------------------------------------------------------------------------


def _matrix_table(m, title: str):
    from ccdiag.output import table
    from ccdiag.probes.smi_topo import rows_for_table

    rows = rows_for_table(m)
    return table(title, rows[0], rows[1:])


def _nic_legend_line(m) -> str | None:
    nic = [f"{d}={m.nic_legend[d]}" for d in m.devices if d in m.nic_legend]
    return ("NIC legend: " + ", ".join(nic)) if nic else None


def _affinity_rows(topo) -> list[list[str]]:
    rows = []
    for g in topo.gpus():
        near = topo.nearest_nics(g.label)
        if not near:
            rows.append([g.label, "(no RDMA NIC)", "", ""])
            continue
        best = topo.level_rank(near[0][1])
        nics = [n for n, lv in near if topo.level_rank(lv) == best]
        bw = topo.expected_gpu_nic(g.label, nics[0])
        rows.append([g.label, ", ".join(nics), near[0][1], _gbs(bw.gbps)])
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
        elif l.current_gbs is None and l.max_gbs is None:
            status = "?"
        else:
            status = "ok"
        rows.append([l.name, l.kind, l.current_desc or "", l.max_desc or "", _gbs(l.current_gbs),
                     _gbs(l.max_gbs), status])
    return rows


def _neck(cap, cur) -> str:
    """The link that limits the path: the trained-down one when the path runs below capability."""
    if cur.bottleneck is not None and cap.gbps is not None and cur.gbps is not None and cur.gbps < cap.gbps:
        return cur.bottleneck.name
    return cap.bottleneck.name if cap.bottleneck else ""


def _expected_rows(topo) -> list[list[str]]:
    rows = []
    gpus = topo.gpus()
    pairs = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            cap = topo.path_bandwidth(a.label, b.label)
            cur = topo.current_path_bandwidth(a.label, b.label)
            kind = cap.bottleneck.kind if cap.bottleneck else ""
            pairs.append(((cap.level or "", _gbs(cap.gbps), _gbs(cur.gbps), kind), f"{a.label} <-> {b.label}",
                          _neck(cap, cur)))
    # an HGX board has 28 identical pairs: show the common case once, the exceptions one by one
    counts: dict[tuple, int] = {}
    for key, _, _ in pairs:
        counts[key] = counts.get(key, 0) + 1
    common = max(counts, key=counts.get) if counts else None
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
        rows.append([f"host -> {g.label}", "H2D", "", _gbs(cap.gbps), _gbs(cur.gbps), _neck(cap, cur)])
    for g in gpus:
        for nic, _lvl in topo.nearest_nics(g.label)[:1]:
            cap = topo.expected_gpu_nic(g.label, nic)
            cur = topo.expected_gpu_nic(g.label, nic, current=True)
            rows.append([f"{g.label} -> {nic}", "GPU->NIC", cap.level or "", _gbs(cap.gbps), _gbs(cur.gbps),
                         _neck(cap, cur)])
    return rows


def _netdev_rows(runs) -> list[list[str]]:
    run = runs.get("netdev")
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
    nvml = runs.get("nvml")
    why = []
    if nvml is not None and nvml.status != "ok":
        why.append(f"NVML {nvml.status}" + (f": {nvml.error}" if nvml.error else ""))
    pcie = runs.get("pcie")
    if pcie is not None and pcie.status not in ("ok", "partial"):
        why.append(f"PCIe {pcie.status}" + (f": {pcie.error}" if pcie.error else ""))
    return "; ".join(why)


def render_text(out, topo, runs, meta: dict, smi_diffs: list[str] | None, smi_matrix) -> None:
    from ccdiag.output import table

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
        m = topo.matrix()
        out.print(_matrix_table(m, "Topology (as nvidia-smi topo -m would show it)"))
        legend = _nic_legend_line(m)
        if legend:
            out.print(legend)
        out.print("Levels: NV# = # NVLinks; PIX = one PCIe switch; PXB = several switches; PHB = host bridge; "
                  "NODE = across host bridges in a NUMA node; SYS = across sockets.")
        out.print(table("NIC affinity (nearest RDMA NICs per GPU)", ["GPU", "nearest NIC(s)", "level", "GPU->NIC GB/s"],
                        _affinity_rows(topo)))
    if topo.nics():
        out.print(table("RDMA NICs", ["NIC", "PCI", "NUMA", "link layer", "rate", "ports", "netdevs", "serves GPUs"],
                        [[n.label, n.bdf or "", "" if n.numa is None else str(n.numa), n.link_layer or "",
                          "" if n.rate_gbps is None else f"{n.rate_gbps:g} Gb/s", ",".join(map(str, n.ports)),
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
    from ccdiag.output import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- --from-smi ------------------------------------------------------------------------------------


def _from_smi(path: str, as_json: bool, output: str | None) -> int:
    from ccdiag.output import console, emit_json, table
    from ccdiag.probes.smi_topo import TopoParseError, parse_topo_matrix, render_matrix, rows_for_table
    from ccdiag.report import build_report

    text = _read_text_file(path, "nvidia-smi topo -m")
    try:
        m = parse_topo_matrix(text)
    except TopoParseError as exc:
        raise InputError(f"{path}: not an nvidia-smi topo -m matrix: {exc}") from None
    rows = rows_for_table(m)
    nic_aff = {}
    for g in m.gpus():
        levels = [(n, m.level(g, n)) for n in m.nics() if m.level(g, n)]
        if levels:
            from ccdiag.topology import Topology

            levels.sort(key=lambda p: Topology.level_rank(p[1]))
            best = Topology.level_rank(levels[0][1])
            nic_aff[g] = [[m.nic_name(n), lv] for n, lv in levels if Topology.level_rank(lv) == best]
    if as_json:
        doc = build_report("topo", {"source": None}, run_info={"replayed_from": None, "from_smi": path},
                           topology={"matrix": {"labels": list(m.devices), "rows": [r[1:1 + len(m.devices)]
                                                                                     for r in rows[1:]],
                                                "table": rows, "nic_legend": dict(m.nic_legend)},
                                     "nic_affinity": nic_aff, "warnings": list(m.warnings),
                                     "truncated": m.truncated})
        emit_json(doc, output)
        return int(ExitCode.OK)
    if output:
        _write(output, render_matrix(m))
    out = console()
    out.print(f"parsed {path}: {len(m.gpus())} GPU(s), {len(m.nics())} NIC(s)"
              + (" (cut short)" if m.truncated else ""))
    out.print(table("Topology (from pasted nvidia-smi topo -m)", rows[0], rows[1:]))
    legend = _nic_legend_line(m)
    if legend:
        out.print(legend)
    if nic_aff:
        out.print(table("NIC affinity", ["GPU", "nearest NIC(s)", "level"],
                        [[g, ", ".join(n for n, _ in v), v[0][1]] for g, v in nic_aff.items()]))
    for w in m.warnings:
        out.print(f"note: {w}")
    return int(ExitCode.OK)


# -- the pipeline (also used by tests and other commands) -----------------------------------------------


def gather(host, timeout: float = DEFAULT_DEADLINE_S):
    """Run the topology probes on ``host`` under one deadline and build the topology.

    Returns (probe runs, topology, nvidia-smi's parsed matrix or None, mismatches or None)."""
    from ccdiag.probing import run_probes
    from ccdiag.topology import build_topology

    try:
        runs = run_probes(host, PROBES, deadline=time.monotonic() + timeout)
    finally:
        try:
            host.close()
        except Exception:  # noqa: BLE001 - closing NVML must not hide the result
            pass
    topo = build_topology(runs)
    smi = runs.get("smi_topo")
    smi_matrix = getattr(getattr(smi, "data", None), "matrix", None)
    smi_diffs = topo.compare_smi(smi_matrix) if (smi_matrix is not None and topo.gpus()) else None
    return runs, topo, smi_matrix, smi_diffs


def topo_report(meta: dict, runs, topo, smi_diffs, started: float, replay: str | None = None,
                timeout: float = DEFAULT_DEADLINE_S) -> dict:
    """The ``kind: topo`` JSON report."""
    from ccdiag.report import build_report, now_info

    code = ExitCode.OK if topo.gpus() else ExitCode.UNEVALUATED
    timed_out = any(r.status == "timeout" for r in runs.values())
    return build_report("topo", meta, runs=runs, topology=topo,
                        run_info=now_info(started, replayed_from=replay, deadline_s=timeout, timed_out=timed_out),
                        extra={"smi_mismatches": smi_diffs, "exit_code": int(code)})


# -- the command -----------------------------------------------------------------------------------


@click.command(name="topo")
@host_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report (kind \"topo\") on stdout.")
@click.option("-o", "--output", metavar="FILE", help="Write the report (text, or JSON with --json) to FILE.")
@click.option("--dot", "dot_path", metavar="FILE", help="Write the graph as Graphviz DOT to FILE.")
@click.option("--svg", "svg_path", metavar="FILE", help="Render the graph to an SVG file (needs Graphviz `dot`).")
@click.option("--png", "png_path", metavar="FILE", help="Render the graph to a PNG file (needs Graphviz `dot`).")
@click.option("--from-smi", "from_smi", metavar="FILE",
              help="Read a pasted `nvidia-smi topo -m` output instead of a host, and show it as ccdiag would.")
@click.option("--timeout", type=click.FloatRange(1, 600), default=DEFAULT_DEADLINE_S, show_default=True, metavar="S",
              help="Deadline for all probes together.")
def command(replay, root, as_json, output, dot_path, svg_path, png_path, from_smi, timeout):
    """Show the GPU/NIC/NVLink/PCIe topology: the nvidia-smi style matrix, each GPU's nearest NIC,
    every link's trained vs maximum speed, the bandwidth each path should reach, and any mismatch
    with `nvidia-smi topo -m`.

    Exit codes: 0 shown; 2 bad input (unreadable --replay/--from-smi file, Graphviz missing for
    --svg/--png); 3 no NVIDIA driver or GPU found (NICs and network interfaces are still listed).
    """
    if from_smi:
        return _from_smi(from_smi, as_json, output)
    from ccdiag.output import console, emit_json

    started = time.monotonic()
    if not replay and root != "/" and not os.path.isdir(root):
        raise InputError(f"--root {root}: not a directory")
    host = make_host(replay, root)
    runs, topo, smi_matrix, smi_diffs = gather(host, timeout)
    code = ExitCode.OK if topo.gpus() else ExitCode.UNEVALUATED
    meta = host.meta()
    if dot_path or svg_path or png_path:
        dot_text = topo.to_dot()
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
