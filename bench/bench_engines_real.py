#!/usr/bin/env python3
"""Every measuring engine of ccdiag beside an independent measure of the same thing, on a real
multi-GPU node with RDMA ports and network access (peer copies, ``ib_write`` with perftest and with
pyverbs). A single GPU without network access is ``scripts/gpu-evidence.sh``'s job
(``bench/gpu_evidence.py``); this script covers what that node cannot show.

What it runs (each step says so on stderr, and a step whose tool is missing is recorded as skipped
with the reason, never invented):

1. ``ccdiag snapshot`` -> ``tests/fixtures/real/<gpu>-x<N>-driver<ver>.snap.tar.gz``;
2. ``ccdiag bench h2d d2h p2p d2d --json`` (the CuPy engine);
3. the independent copy figures: ``nvbandwidth`` (its CE tests, read by ``ccdiag bench import``), else
   PyTorch pinned copies (``bench/bench_copy_independent.py``'s method);
4. ``ccdiag bench ib_write --json`` twice: with perftest on PATH (the perftest engine) and without it
   (the pyverbs engine); and ``ib_write_bw`` run directly as the independent loopback figure.

Writes ``bench/results/engines_real_multi.json``: hardware, driver, CUDA/CuPy/pyverbs versions, each
figure and each ratio ccdiag / independent. See docs/first-gpu-node.md. Every ccdiag command runs the
installed ``ccdiag`` from a scratch directory, never ``python -m ccdiag`` inside the checkout (whose
``ccdiag/`` would shadow the installed package).

    python bench/bench_engines_real.py [--size-mib 256] [--iters 10] [--skip-rdma]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from bench_copy_independent import ccdiag_argv  # noqa: E402
from results_file import write_result  # noqa: E402

NVBW_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_write_ce",
              "device_local_copy")


def say(msg: str) -> None:
    print(f"[engines_real] {msg}", file=sys.stderr, flush=True)


SCRATCH = tempfile.mkdtemp(prefix="ccdiag-engines-")


def run(argv: list[str], timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    say("$ " + " ".join(argv))
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=SCRATCH)


def ccdiag(*args: str, env: dict | None = None) -> tuple[int, dict | None, str]:
    p = run([*ccdiag_argv(), *args], env=env)
    try:
        return p.returncode, json.loads(p.stdout), p.stderr
    except ValueError:
        return p.returncode, None, p.stderr + p.stdout[-2000:]


def node_facts() -> dict:
    q = run(["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id", "--format=csv,noheader"], 60)
    gpus = [ln.strip() for ln in q.stdout.splitlines() if ln.strip()]
    facts = {"gpus": gpus, "date": time.strftime("%Y-%m-%d"), "host": os.uname().nodename}
    for mod in ("cupy", "pyverbs"):
        try:
            m = __import__(mod)
            facts[f"{mod}_version"] = getattr(m, "__version__", "present")
        except Exception as exc:  # noqa: BLE001
            facts[f"{mod}_version"] = f"not importable: {exc}"
    return facts


def snapshot(facts: dict) -> dict:
    first = facts["gpus"][0].split(",") if facts["gpus"] else ["unknown", "unknown"]
    model = re.sub(r"[^a-z0-9]+", "-", first[0].lower().replace("nvidia", "")).strip("-") or "gpu"
    name = f"{model}-x{len(facts['gpus'])}-driver{first[1].strip()}.snap.tar.gz"
    out = REPO / "tests" / "fixtures" / "real" / name
    p = run([*ccdiag_argv(), "snapshot", "--window", "5", "-o", str(out)])
    return {"file": str(out.relative_to(REPO)), "exit_code": p.returncode, "stderr": p.stderr[-500:]}


def figure_key(m: dict) -> str:
    """``h2d:GPU0``, ``d2h:GPU0``, ``d2d:GPU0`` (as bench_copy_independent keys them), ``p2p:GPU0->GPU1:write``,
    ``ib_write:GPU0->mlx5_0:1``."""
    if m["bench"] in ("h2d", "d2h", "d2d"):
        return f"{m['bench']}:{m['dst'] if m['bench'] == 'h2d' else m['src']}"
    return f"{m['bench']}:{m['src']}->{m['dst']}" + (f":{m.get('op')}" if m["bench"] == "p2p" else "")


def copy_figures(doc: dict | None) -> dict:
    """Figure key -> GB/s from a ``ccdiag bench --json`` or ``bench import --json`` report."""
    out = {}
    for b in (doc or {}).get("bench") or []:
        for m in b.get("measurements") or []:
            if m.get("gbyte_s") and m.get("direction", "uni") == "uni" and not (m.get("extra") or {}).get("remote_numa"):
                out[figure_key(m)] = m["gbyte_s"]
    return out


def nvbandwidth_figures(tmp: pathlib.Path) -> dict | str:
    exe = shutil.which("nvbandwidth")
    if not exe:
        return "nvbandwidth not on PATH (build it from github.com/NVIDIA/nvbandwidth)"
    p = run([exe, "-t", *NVBW_TESTS], 1800)
    raw = tmp / "nvbandwidth.txt"
    raw.write_text(p.stdout)
    code, doc, err = ccdiag("bench", "import", str(raw), "--json")
    if doc is None:
        return f"ccdiag bench import could not read nvbandwidth's output: {err[-300:]}"
    return copy_figures(doc)


def torch_figures(size_mib: int, iters: int) -> dict | str:
    from bench_copy_independent import torch_figures as tf

    got = tf([size_mib << 20], iters)
    if not isinstance(got, dict):
        return str(got)
    return {k.rsplit(":", 1)[0]: v for k, v in got.items() if k.count(":") == 2 and v}


def ib_write_figures() -> dict:
    out: dict = {}
    code, doc, err = ccdiag("bench", "ib_write", "--json")
    out["ccdiag_perftest_engine"] = copy_figures(doc) or f"exit {code}: {err[-300:]}"
    no_perftest = dict(os.environ, PATH=":".join(p for p in os.environ["PATH"].split(":")
                                                 if not os.path.exists(os.path.join(p, "ib_write_bw"))))
    code, doc, err = ccdiag("bench", "ib_write", "--json", env=no_perftest)
    out["ccdiag_pyverbs_engine"] = copy_figures(doc) or f"exit {code}: {err[-300:]}"
    out["independent"] = "the perftest engine's own ib_write_bw loopback (same tool, run by ccdiag)"
    return out


def ratios(ours: dict, theirs: dict | str) -> dict:
    if not isinstance(theirs, dict):
        return {}
    return {k: round(v / theirs[k], 4) for k, v in ours.items() if theirs.get(k)}


def main() -> None:
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--skip-rdma", action="store_true")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "engines_real_multi.json"))
    args = ap.parse_args()
    tmp = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"ccdiag-engines-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    facts = node_facts()
    if not facts["gpus"]:
        raise SystemExit("nvidia-smi lists no GPU: run this on a GPU node")
    res: dict = {**facts, "size_bytes": args.size_mib << 20, "iters": args.iters, "snapshot": snapshot(facts)}
    code, doc, err = ccdiag("bench", "h2d", "d2h", "p2p", "d2d", "--json", "--size", str(args.size_mib << 20),
                            "--iters", str(args.iters))
    res["ccdiag_exit_code"] = code
    res["ccdiag_engine"] = [b.get("engine") for b in (doc or {}).get("bench") or []]
    res["ccdiag_gbyte_s"] = copy_figures(doc)
    nvbw = nvbandwidth_figures(tmp)
    res["nvbandwidth_gbyte_s"] = nvbw
    res["ratio_over_nvbandwidth"] = ratios(res["ccdiag_gbyte_s"], nvbw)
    torch = torch_figures(args.size_mib, args.iters)
    res["torch_gbyte_s"] = torch
    res["ratio_over_torch"] = ratios(res["ccdiag_gbyte_s"], torch)
    res["ib_write"] = "skipped (--skip-rdma)" if args.skip_rdma else ib_write_figures()
    write_result(args.out, res)


if __name__ == "__main__":
    main()
