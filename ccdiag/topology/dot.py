"""Graphviz DOT rendering of a :class:`ccdiag.topology.model.Topology`.

A picture of the tree answers "which NIC sits beside which GPU" faster than a matrix does, and a
link trained down is drawn red so it stands out in a support ticket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology

SHAPES = {"numa": "box3d", "host_bridge": "box", "root_port": "box", "switch": "box",
          "gpu": "box", "nic": "box", "nvswitch": "hexagon", "wire": "plaintext", "pci": "ellipse"}
FAILED_FILL = "#f4b6b6"
FAILED_WORDS = {"gpu_lost": "LOST", "hung": "HUNG", "timeout": "HUNG", "reset_required": "RESET REQUIRED"}
FILL = {"gpu": "#d9f2d9", "nic": "#dde8fb", "nvswitch": "#f9ecd0", "numa": "#eeeeee", "switch": "#f5f5f5"}


def _q(s: Any) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(topo: Topology) -> str:
    g = topo.graph
    out = ["graph ccdiag_topology {", "  graph [rankdir=TB, fontname=Helvetica];",
           "  node [fontname=Helvetica, fontsize=10, style=filled, fillcolor=white];",
           "  edge [fontname=Helvetica, fontsize=9];"]
    for n, a in sorted(g.nodes(data=True)):
        kind = a.get("kind", "pci")
        text = a.get("label", n)
        if a.get("bdf") and a.get("bdf") != text:
            text += f"\n{a['bdf']}"
        if kind == "numa" and a.get("cpus"):
            text += f"\nCPUs {a['cpus']}"
        fill, border = FILL.get(kind, "white"), "black"
        if a.get("failed"):
            # a lost or hung GPU moves no data: drawn as failed, whatever its links could carry
            text += f"\n{FAILED_WORDS.get(a['failed'], 'FAILED')} ({a['failed']})"
            fill, border = FAILED_FILL, "red"
        out.append(f"  {_q(n)} [label={_q(text)}, shape={SHAPES.get(kind, 'ellipse')}, "
                   f"fillcolor={_q(fill)}, color={border}];")
    for link in topo.links():
        if link.kind == "nvlink":
            continue  # drawn per switch / per peer below, from the graph edges
        if link.a not in g or link.b not in g:
            continue
        text = link.current_desc if link.degraded else link.max_desc
        if link.degraded:
            text = f"{link.current_desc} (max {link.max_desc})"
        color = "red" if link.degraded else {"smp": "gray40", "ib": "navy", "roce": "navy"}.get(link.kind, "black")
        style = "dashed" if link.kind == "smp" else "solid"
        out.append(f"  {_q(link.a)} -- {_q(link.b)} [label={_q(text or '')}, color={color}, style={style}];")
    for a, b, d in g.edges(data=True):
        if d.get("kind") == "host":
            out.append(f"  {_q(b)} -- {_q(a)} [color=gray60];")
        elif d.get("kind") == "nvlink":
            tot, act = d.get("links_total", 0), d.get("links_active", 0)
            text = f"NV{act}" if act == tot else f"NV{act}/{tot}"
            color = "darkgreen" if act == tot else "red"
            out.append(f"  {_q(a)} -- {_q(b)} [label={_q(text)}, color={color}, penwidth=2];")
    out.append("}")
    return "\n".join(out) + "\n"
