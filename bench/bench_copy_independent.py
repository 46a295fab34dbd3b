#!/usr/bin/env python3
"""ccdiag's copy figures against an independent measurement of the same GPU, in the same run.

Run on a node with an NVIDIA GPU (and CuPy, ``pip install '.[gpu]'``). For each GPU it runs
``ccdiag bench h2d d2h d2d --json`` and then times the same copies with PyTorch (pinned host
tensor, ``copy_`` with ``non_blocking=True``, CUDA events, median of N), a code path that shares
nothing with ccdiag's engine but the driver. The ratio ccdiag / PyTorch should be close to 1 (the
issue's floor is 0.97). Without PyTorch it says so and records ccdiag's figures alone. Writes
``bench/results/copy_independent.json`` with the GPU, driver and date.

    python bench/bench_copy_independent.py [--size-mib 256] [--iters 10]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent


def ccdiag_figures(size: int, iters: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "ccdiag", "bench", "h2d", "d2h", "d2d", "--json", "--size", str(size),
                           "--iters", str(iters), "--budget", "300"], capture_output=True, text=True, timeout=600)
    if not proc.stdout.strip():
        raise SystemExit(f"ccdiag bench printed nothing (exit {proc.returncode}): {proc.stderr[-500:]}")
    doc = json.loads(proc.stdout)
    out: dict = {"engine": {}, "figures": {}}
    for b in doc["bench"]:
        out["engine"][b["name"]] = b.get("engine")
        for m in b["measurements"]:
            if m["direction"] == "uni" and not m["extra"].get("remote_numa") and m["gbyte_s"]:
                gpu = m["dst"] if m["bench"] == "h2d" else m["src"]
                out["figures"][f"{m['bench']}:{gpu}"] = m["gbyte_s"]
    return out


def torch_figures(size: int, iters: int) -> dict | str:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return f"PyTorch not available ({exc})"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    out = {}
    n = size // 4
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        host = torch.empty(n, dtype=torch.float32).pin_memory()
        d1 = torch.empty(n, dtype=torch.float32, device=dev)
        d2 = torch.empty(n, dtype=torch.float32, device=dev)
        label = f"GPU{i}"  # PCI order when CUDA_DEVICE_ORDER=PCI_BUS_ID (set below)
        for name, fn in (("h2d", lambda: d1.copy_(host, non_blocking=True)),
                         ("d2h", lambda: host.copy_(d1, non_blocking=True)),
                         ("d2d", lambda: d2.copy_(d1, non_blocking=True))):
            with torch.cuda.device(dev):
                fn()
                torch.cuda.synchronize(dev)
                samples = []
                for _ in range(iters):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    for _ in range(4):
                        fn()
                    b.record()
                    b.synchronize()
                    samples.append(size * 4 / (a.elapsed_time(b) / 1e3) / 1e9)
            out[f"{name}:{label}"] = statistics.median(samples)
    return out


def main() -> None:
    import os

    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "copy_independent.json"))
    args = ap.parse_args()
    size = args.size_mib << 20
    ours = ccdiag_figures(size, args.iters)
    theirs = torch_figures(size, args.iters)
    ratios = {}
    if isinstance(theirs, dict):
        ratios = {k: round(v / theirs[k], 4) for k, v in ours["figures"].items() if theirs.get(k)}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    res = {"date": time.strftime("%Y-%m-%d"), "gpus": smi, "size_bytes": size, "iters": args.iters,
           "ccdiag_gbyte_s": ours["figures"], "independent": "PyTorch pinned copy_, CUDA events",
           "independent_gbyte_s": theirs, "ratio_ccdiag_over_independent": ratios,
           "min_ratio": min(ratios.values()) if ratios else None}
    pathlib.Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
