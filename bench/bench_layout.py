#!/usr/bin/env python3
"""The layout readers of ``bench locate`` on growing inputs: time against size, so a reader that is
not linear in its input shows.

Why: a topology.conf, a cluster's kubectl nodes or an ibnetdiscover dump of a large fabric is read on
every run, and a reader with a quadratic step would take minutes at ten thousand hosts. Each
format is grown from the shape of a real sample in tests/fixtures/layouts (the ibnetdiscover dump is
the real DGX SuperPOD one, repeated with fresh GUIDs and host names); the figure kept is the time
per input byte at each size and its ratio to the smallest size's (about 1 when linear).

    python bench/bench_layout.py

Writes ``bench/results/layout_readers.json``.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import platform
import re
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from results_file import write_result  # noqa: E402

from ccdiag.cluster import layout_ibnet, layout_k8s, layout_slurm  # noqa: E402

LAYOUTS = REPO / "tests" / "fixtures" / "layouts"


def slurm_tree(leaves: int) -> str:
    lines = [f"SwitchName=leaf{k} Nodes=n{k}-[0001-0032]" for k in range(leaves)]
    lines += [f"SwitchName=spine{s} Switches=leaf[{s * 16}-{s * 16 + 15}]" for s in range(max(1, leaves // 16))]
    return "\n".join(lines) + "\n"


def k8s_nodes(n: int) -> str:
    items = [{"metadata": {"name": f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}", "labels": {
        "topology.k8s.aws/network-node-layer-1": "nn-a", "topology.k8s.aws/network-node-layer-2": f"nn-b{i // 512}",
        "topology.k8s.aws/network-node-layer-3": f"nn-c{i // 32}", "kubernetes.io/os": "linux"}}} for i in range(n)]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def ibnet(copies: int) -> str:
    real = gzip.decompress((LAYOUTS / "ibnetdiscover-dgx-superpod-rail-optimised.out.gz").read_bytes()).decode()
    out = []
    for k in range(copies):
        # fresh GUIDs and host names per copy: another scalable unit of the same shape
        out.append(re.sub(r"([0-9a-f]{12})([0-9a-f]{4})\b", lambda m: m.group(1)[:-4] + f"{k:04x}" + m.group(2),
                          real).replace("-dgx-", f"-dgx{k}-"))
    return "".join(out)


def measure(name: str, make, sizes: list[int], parse) -> dict:
    rows = []
    for n in sizes:
        text = make(n)
        t0 = time.process_time()
        lay = parse(text)
        dt = time.process_time() - t0
        rows.append({"size": n, "bytes": len(text), "hosts": len(lay.group_of), "cpu_s": round(dt, 4),
                     "us_per_kib": round(dt / (len(text) / 1024) * 1e6, 2)})
    base = rows[0]["us_per_kib"] or 1e-9
    for r in rows:
        r["per_byte_ratio_to_smallest"] = round(r["us_per_kib"] / base, 2)
    print(name, [(r["size"], r["hosts"], r["cpu_s"], r["per_byte_ratio_to_smallest"]) for r in rows], file=sys.stderr)
    return {"reader": name, "rows": rows}


def main() -> int:
    results = [
        measure("slurm topology.conf (tree)", slurm_tree, [32, 320, 3200], lambda t: layout_slurm.parse(t)),
        measure("kubectl nodes JSON (AWS layers)", k8s_nodes, [1000, 10000, 100000], lambda t: layout_k8s.parse(t)),
        measure("ibnetdiscover (DGX SuperPOD dump repeated)", ibnet, [1, 4, 16], lambda t: layout_ibnet.parse(t)),
    ]
    doc = {"bench": "layout_readers", "python": platform.python_version(), "cpus": os.cpu_count(),
           "machine": platform.machine(), "command": "python bench/bench_layout.py",
           "goal": "time per input byte about constant as the input grows (ratio to the smallest size near 1)",
           "results": results,
           "linear": all(r["per_byte_ratio_to_smallest"] < 3 for x in results for r in x["rows"])}
    write_result(str(REPO / "bench" / "results" / "layout_readers.json"), doc, echo=False)
    print(f"linear: {doc['linear']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
