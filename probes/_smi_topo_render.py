"""A parsed ``nvidia-smi topo -m`` matrix laid out again (as a table, as the tool prints it) and two
matrices compared.

Why apart from the parser: ``ccdiag topo`` renders matrices that came from the topology graph as
well as from pastes, and the comparison is how a paste is checked against the graph; neither needs
to know how the text was read.
"""

from __future__ import annotations

from typing import Callable

from ccdiag.probes._smi_topo_parse import EXTRA_COLUMNS, TopoMatrix
from ccdiag.probes._smi_topo_text import GPU_RE, NIC_LABEL_RE

#: level meanings, for rendering a matrix that came without a legend (NCCL's path levels)
_DEFAULT_LEGEND = {
    "X": "Self",
    "SYS": "Path crosses PCIe and the inter-socket (SMP) link between NUMA nodes",
    "NODE": "Path crosses PCIe and the link between host bridges inside one NUMA node",
    "PHB": "Path crosses PCIe and one PCIe host bridge (the CPU)",
    "PXB": "Path crosses several PCIe switches, no host bridge",
    "PIX": "Path crosses at most one PCIe switch",
    "NV#": "Path is a bonded set of # NVLinks",
}


def _column_data(m: TopoMatrix, col: str) -> dict[str, str | None]:
    return {"CPU Affinity": m.cpu_affinity, "NUMA Affinity": m.numa_affinity, "GPU NUMA ID": m.gpu_numa_id}[col]


def _has_column(m: TopoMatrix, col: str) -> bool:
    return col in m.extra_columns or bool(_column_data(m, col))


def rows_for_table(m: TopoMatrix) -> list[list[str]]:
    """The matrix as strings, header first: ``["", GPU0, ..., "CPU Affinity", ...]``, then one list
    per device. Unknown cells and absent values are ``""``."""
    extras = [c for c in EXTRA_COLUMNS if _has_column(m, c)]
    table = [["", *m.devices, *extras]]
    for a in m.devices:
        row = [a] + [m.raw_level(a, b) or "" for b in m.devices]
        for col in extras:
            value = _column_data(m, col).get(a)
            if col == "GPU NUMA ID" and value is None and GPU_RE.match(a):
                value = "N/A"
            row.append(value or "")
        table.append(row)
    return table


def render_matrix(m: TopoMatrix) -> str:
    """The matrix laid out as nvidia-smi prints it (tab separated, `` X `` on the diagonal, the empty
    field before GPU NUMA ID), then the legend and, when NICk labels exist, the NIC legend."""
    table = rows_for_table(m)
    header, body = table[0], table[1:]
    extras = header[1 + len(m.devices):]
    out = ["\t".join(header)]
    for row in body:
        cells = [" X " if c == "X" else c for c in row[1:1 + len(m.devices)]]
        tail = row[1 + len(m.devices):]
        if extras and extras[-1] == "GPU NUMA ID":
            tail = tail[:-1] + [""] + tail[-1:]
        out.append("\t".join([row[0], *cells, *tail]))
    out += ["", "Legend:", ""]
    legend = m.legend or _DEFAULT_LEGEND
    width = max(len(k) for k in legend)
    out += [f"  {k:<{width}} = {v}" for k, v in legend.items()]
    nic_labels = [d for d in m.devices if NIC_LABEL_RE.match(d)]
    if nic_labels:
        out += ["", "NIC Legend:", ""]
        out += [f"  {d}: {m.nic_legend[d]}" for d in nic_labels if d in m.nic_legend]
    return "\n".join(out) + "\n"


def cells_equal(a: TopoMatrix, b: TopoMatrix) -> list[str]:
    """Differences between two matrices as lines for a human; empty when they agree.

    Devices are matched by GPU label and by NIC *name* (``NIC0`` with legend ``mlx5_0`` equals a
    column labelled ``mlx5_0``). Levels compare after ``SOC`` -> ``SYS``; a pair unknown on either
    side (a cut-short matrix) is not a difference. Affinity is compared only where both have it.
    """
    names_a = {a.nic_name(d): d for d in a.devices}
    names_b = {b.nic_name(d): d for d in b.devices}
    diffs: list[str] = []
    only_a = [n for n in names_a if n not in names_b]
    only_b = [n for n in names_b if n not in names_a]
    if only_a:
        diffs.append(f"only in the first matrix: {', '.join(only_a)}")
    if only_b:
        diffs.append(f"only in the second matrix: {', '.join(only_b)}")
    common = [n for n in names_a if n in names_b]
    diffs += _level_diffs(a, b, common, names_a, names_b)
    for col in EXTRA_COLUMNS:
        if _has_column(a, col) and _has_column(b, col):
            diffs += _affinity_diffs(col, lambda n: _column_data(a, col).get(names_a[n]),
                                     lambda n: _column_data(b, col).get(names_b[n]), common)
    return diffs


def _level_diffs(a: TopoMatrix, b: TopoMatrix, common: list[str], names_a: dict[str, str],
                 names_b: dict[str, str]) -> list[str]:
    diffs = []
    for i, x in enumerate(common):
        for y in common[i + 1:]:
            la, lb = a.level(names_a[x], names_a[y]), b.level(names_b[x], names_b[y])
            if la is not None and lb is not None and la != lb:
                diffs.append(f"{x} - {y}: {la} vs {lb}")
    return diffs


def _affinity_diffs(col: str, get_a: Callable[[str], str | None], get_b: Callable[[str], str | None],
                    common: list[str]) -> list[str]:
    return [f"{n} {col}: {get_a(n) or '(blank)'} vs {get_b(n) or '(blank)'}"
            for n in common if get_a(n) != get_b(n)]
