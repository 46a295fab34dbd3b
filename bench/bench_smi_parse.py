"""Wall time of the ``nvidia-smi topo`` text parsers on pathological pastes.

    python bench/bench_smi_parse.py [--limit-s 60]

Why: ccdiag parses whatever strangers paste into a ticket (``ccdiag topo --from-smi FILE``). Fuzzing
found inputs whose parse time grew with the square of their size (a 20,000-character legend, a
header of 20,000 labels, a 1-2 MB matrix of many devices). Each input here is one of those shapes;
the target is under 1 s per input on a 2-core machine, whether the parser reads it or refuses it
with :class:`TopoParseError`. Wall and CPU time are both reported: on a shared machine the CPU
time is the steadier figure to compare before/after. Each input runs under an alarm of ``--limit-s`` so a regression
reports "timeout" instead of hanging. Writes bench/results/smi_parse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
RESULTS = os.path.join(REPO, "bench", "results", "smi_parse.json")
TARGET_S = 1.0


def matrix_text(n_gpus: int, tabs: bool = True) -> str:
    """A well-formed ``topo -m`` of ``n_gpus`` GPUs (all NV18), tab separated or tab-expanded."""
    labels = [f"GPU{i}" for i in range(n_gpus)]
    rows = ["\t" + "\t".join(labels + ["CPU Affinity", "NUMA Affinity"])]
    for i in range(n_gpus):
        rows.append("\t".join([labels[i]] + [" X " if j == i else "NV18" for j in range(n_gpus)] + ["0-47", "0"]))
    text = "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    return text.expandtabs(8) if not tabs else text


def p2p_text(n: int, legend_body: str = "") -> str:
    labels = [f"GPU{i}" for i in range(n)]
    rows = ["\t" + "\t".join(labels)]
    for i in range(n):
        rows.append("\t".join([labels[i]] + ["X" if j == i else "OK" for j in range(n)]))
    return "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n" + legend_body


def cases() -> dict[str, tuple[str, str]]:
    """name -> (parser, text)."""
    out: dict[str, tuple[str, str]] = {}
    for n in (20_000, 100_000):
        out[f"p2p legend of {n} newlines"] = ("p2p", p2p_text(2, "\n" * n))
        out[f"p2p legend of {n} spaces in one entry"] = ("p2p", p2p_text(2, "  X" + " " * n + "= y\n"))
        out[f"p2p legend of {n} blank-space lines"] = ("p2p", p2p_text(2, " \n" * (n // 2)))
        out[f"topo-m legend of {n} spaces in one entry"] = ("m", matrix_text(2) + "  SYS =" + " " * n + "x \n")
        out[f"topo-m legend value of {n} spaces then x"] = ("m", matrix_text(2) + "  SYS = a" + " " * n + "x\n")
    for n in (20_000,):
        out[f"header of {n} labels"] = ("m", "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\nGPU0\tX\n")
        out[f"header of {n} labels, spaces"] = ("m", "        " + "".join(f"GPU{i}".ljust(8) for i in range(n)) + "\n")
        out[f"p2p header of {n} labels"] = ("p2p", "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\n")
    for n in (300, 450):
        text = matrix_text(n)
        out[f"matrix {n} GPUs tabs ({len(text) // 1000} kB)"] = ("m", text)
        text = matrix_text(n, tabs=False)
        out[f"matrix {n} GPUs tab-expanded ({len(text) // 1000} kB)"] = ("m", text)
        out[f"p2p {n} GPUs"] = ("p2p", p2p_text(n))
        out[f"matrix {n} GPUs parsed and rendered (topo --from-smi)"] = ("m+render", matrix_text(n))
    for n, rows in ((5000, 40), (2000, 100)):
        labels = [f"GPU{i}" for i in range(n)]
        body = ["\t" + "\t".join(labels)]
        for i in range(rows):
            body.append("\t".join([labels[i]] + ["X" if j == i else "SYS" for j in range(n)]))
        text = "\n".join(body) + "\n\nLegend:\n\n  X = Self\n"
        out[f"wide matrix {n} labels x {rows} rows tabs ({len(text) // 1000} kB)"] = ("m", text)
        out[f"wide matrix {n} labels x {rows} rows tab-expanded"] = ("m", text.expandtabs(8))
        out[f"wide matrix {n} labels x {rows} rows collapsed"] = ("m", re.sub(r"[ \t]+", " ", text))
        nic = ["\t" + "\t".join(["GPU0"] + [f"NIC{i}" for i in range(n)])]
        legend = "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(n))
        out[f"NIC legend of {n} entries"] = ("m", nic[0] + "\nGPU0\tX" + "\tSYS" * n + "\n\nLegend:\n\n  X = Self\n\nNIC Legend:\n\n" + legend)
    out["cpu query with a 5000-digit CPU"] = ("c", "The GPUs that have an affinity with CPU 0 are:\n" + "9" * 5000 + "\n")
    out["matrix with NV and 5000 digits"] = ("m", "\tGPU0\tGPU1\nGPU0\tX\tNV" + "9" * 5000 + "\nGPU1\tNV1\tX\n\nLegend:\n")
    # at the bounds: the largest inputs the parsers still read
    from ccdiag.probes.smi_topo import MAX_DEVICES, MAX_LINE_CHARS, MAX_LINES, MAX_TEXT_BYTES
    text = matrix_text(MAX_DEVICES, tabs=False)
    out[f"at the bound: {MAX_DEVICES} GPUs tab-expanded ({len(text) // 1000} kB)"] = ("m", text)
    out[f"at the bound: {MAX_DEVICES} GPUs parsed and rendered"] = ("m+render", matrix_text(MAX_DEVICES))
    out[f"at the bound: {MAX_DEVICES} GPUs collapsed"] = ("m", re.sub(r"[ \t]+", " ", matrix_text(MAX_DEVICES)))
    fill = MAX_TEXT_BYTES - 10_000
    many = MAX_LINES - 1000
    out[f"at the bound: legend of {many} newlines"] = ("p2p", p2p_text(2, "\n" * many))
    out[f"at the bound: legend of {many} lines of 60 spaces"] = ("p2p", p2p_text(2, (" " * 60 + "\n") * many))
    line = "  SYS = a" + " " * (MAX_LINE_CHARS - 20) + "x\n"
    out["at the bound: legend of longest lines of spaces"] = ("m", matrix_text(2) + line * (fill // len(line)))
    out[f"at the bound: {many} prompt lines before the header"] = ("m", ("$ nvidia-smi topo -m\n" * many) + matrix_text(8))
    out[f"at the bound: cpu query of {many} lines"] = ("c", "The GPUs that have an affinity with CPU 0 are:\n0,1\n" * (many // 2))
    row = "GPU0\t" + "PXBNODE\t" * 512
    out["at the bound: rows of merged cells"] = ("m", "\t" + "\t".join(f"GPU{i}" for i in range(512)) + "\n" + (row + "\n") * 500)
    out["one line of 2 MB without a newline"] = ("m", "GPU0 " + "x" * 2_000_000)
    out["2 MB of merged cells"] = ("m", "\tGPU0\tGPU1\nGPU0\t" + "PXBNODE" * 300_000 + "\n")
    out["cpu query of 50,000 lines"] = ("c", "The GPUs that have an affinity with CPU 0 are:\n0,1\n" * 25_000)
    return out


class _Timeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise _Timeout()


def run_one(parser: str, text: str, limit_s: int) -> tuple[float, float, str]:
    from ccdiag.probes.smi_topo import TopoParseError, parse_topo_cpu_query, parse_topo_matrix, parse_topo_p2p

    from ccdiag.probes.smi_topo import render_matrix, rows_for_table

    def parse_and_render(text: str) -> None:
        m = parse_topo_matrix(text)
        rows_for_table(m)
        render_matrix(m)

    fn = {"m": parse_topo_matrix, "p2p": parse_topo_p2p, "c": parse_topo_cpu_query,
          "m+render": parse_and_render}[parser]
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    start, start_cpu = time.perf_counter(), time.process_time()
    try:
        fn(text)
        outcome = "parsed"
    except TopoParseError as exc:
        outcome = f"refused: {str(exc)[:140]}"
    except _Timeout:
        outcome = f"timeout after {limit_s} s"
    except Exception as exc:  # noqa: BLE001 - a bench reports every outcome
        outcome = f"INTERNAL {type(exc).__name__}: {str(exc)[:100]}"
    finally:
        signal.alarm(0)
    return time.perf_counter() - start, time.process_time() - start_cpu, outcome


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-s", type=int, default=60)
    ap.add_argument("--only", default="", help="run only cases whose name contains this")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    results = []
    for name, (parser, text) in cases().items():
        if args.only and args.only not in name:
            continue
        elapsed_s, cpu_s, outcome = run_one(parser, text, args.limit_s)
        results.append({"case": name, "parser": parser, "input_bytes": len(text.encode()),
                        "elapsed_s": round(elapsed_s, 4), "cpu_s": round(cpu_s, 4), "outcome": outcome})
        flag = "" if elapsed_s < TARGET_S else "  <-- over target"
        print(f"{elapsed_s:8.3f} s ({cpu_s:6.3f} s CPU)  {name}: {outcome[:90]}{flag}", flush=True)
    worst = max(results, key=lambda r: r["elapsed_s"]) if results else None
    # the load says how far wall times on a shared machine can be trusted; CPU times are steadier
    doc = {"target_s": TARGET_S, "python": platform.python_version(), "cpus": os.cpu_count(),
           "load_avg_1min": round(os.getloadavg()[0], 2),
           "slowest": worst, "all_under_target": all(r["elapsed_s"] < TARGET_S for r in results),
           "cases": results}
    if not args.no_write:
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        with open(RESULTS, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0 if doc["all_under_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
