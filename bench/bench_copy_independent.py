#!/usr/bin/env python3
"""ccdiag's copy figures against an independent measurement of the same GPU, in the same run: PyTorch.

Run on a node with an NVIDIA GPU (CuPy for ccdiag, PyTorch for the other side). PyTorch times the
same copies through its own code path (pinned host tensor allocated by a thread bound to the GPU's
own CPUs, ``copy_`` with ``non_blocking=True``, CUDA events around four copies, median of N rounds)
and a dense GEMM (``torch.matmul``, FP16 and BF16, n x n x n), sharing nothing with ccdiag's engine
but the driver. Two ways to run it:

    python bench/bench_copy_independent.py [--size-mib 256] [--iters 10]
        # ccdiag bench h2d d2h d2d and PyTorch, ratios in bench/results/copy_independent.json
    python bench/bench_copy_independent.py --torch-only --gpu GPU0=0000:18:00.0 --sizes-mib 1 256 --gemm-n 8192 -o F
        # PyTorch alone, as the evidence script calls it (figures keyed "h2d:GPU0:<bytes>", "gemm:GPU0:fp16")

A key is ``<bench>:<GPU label>:<bytes per copy>`` (``gemm:<GPU label>:<dtype>`` for the GEMM), as
``bench/gpu_evidence.py`` keys ccdiag's and the driver API's figures. Without PyTorch or a GPU it
says so in the document (``error``). GB/s is 10^9 bytes per second; TFLOPS 10^12 operations.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
COPIES_PER_ROUND = 4


def ccdiag_argv() -> list[str]:
    """The installed ``ccdiag`` beside this interpreter (never ``python -m ccdiag``, which would take
    a source checkout in the current directory first)."""
    exe = pathlib.Path(sys.executable).parent / "ccdiag"
    return [str(exe)] if exe.exists() else [shutil.which("ccdiag") or "ccdiag"]


def ccdiag_figures(size: int, iters: int) -> dict:
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run([*ccdiag_argv(), "bench", "h2d", "d2h", "d2d", "--json", "--size", str(size),
                               "--iters", str(iters), "--budget", "300"], capture_output=True, text=True, timeout=600,
                              cwd=cwd)
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


def _local_cpus(bdf: str | None) -> set[int]:
    if not bdf:
        return set()
    try:
        text = pathlib.Path(f"/sys/bus/pci/devices/{bdf.lower()}/local_cpulist").read_text().strip()
    except OSError:
        return set()
    cpus: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part.strip():
            cpus.add(int(part))
    return cpus


def _timed(torch, fn, rounds: int, reps: int) -> list[float]:
    """Milliseconds of each of ``rounds`` timed rounds of ``reps`` calls (events on the current stream)."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def torch_figures(sizes: list[int], iters: int, gpus: list[tuple[str, str | None]] | None = None,
                  gemm_n: int = 0, gemm_seconds: float = 2.0) -> dict | str:
    """``{key: median}`` plus ``"samples"``, or why PyTorch could not measure. ``gpus``: (label, PCI
    address); default every device PyTorch sees, labelled GPU<i> in PCI order."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return f"PyTorch not available ({exc})"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    if gpus is None:
        gpus = [(f"GPU{i}", None) for i in range(torch.cuda.device_count())]
    by_bus = {}
    for i in range(torch.cuda.device_count()):
        bus = getattr(torch.cuda.get_device_properties(i), "pci_bus_id", None)
        if bus is not None:
            by_bus[int(bus)] = i
    out: dict = {"samples": {}, "torch_version": torch.__version__, "cuda": torch.version.cuda}
    before = os.sched_getaffinity(0)
    for n, (label, bdf) in enumerate(gpus):
        index = by_bus.get(int(bdf.split(":")[1], 16), n) if bdf else n
        dev = torch.device("cuda", index)
        cpus = _local_cpus(bdf) & before
        if cpus:
            os.sched_setaffinity(0, cpus)
        try:
            with torch.cuda.device(dev):
                for size in sizes:
                    count = size // 4
                    host = torch.empty(count, dtype=torch.float32).pin_memory()
                    d1 = torch.empty(count, dtype=torch.float32, device=dev)
                    d2 = torch.empty(count, dtype=torch.float32, device=dev)
                    for name, fn in (("h2d", lambda h=host, a=d1: a.copy_(h, non_blocking=True)),
                                     ("d2h", lambda h=host, a=d1: h.copy_(a, non_blocking=True)),
                                     ("d2d", lambda a=d1, b=d2: b.copy_(a, non_blocking=True))):
                        ms = _timed(torch, fn, iters, COPIES_PER_ROUND)
                        samples = [size * COPIES_PER_ROUND / (t / 1e3) / 1e9 for t in ms if t > 0]
                        key = f"{name}:{label}:{size}"
                        out["samples"][key] = [round(x, 3) for x in samples]
                        out[key] = round(statistics.median(samples), 3) if samples else None
                    host = d1 = d2 = None
                    torch.cuda.empty_cache()
                if gemm_n:
                    for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
                        a = torch.randn(gemm_n, gemm_n, device=dev, dtype=dtype)
                        b = torch.randn(gemm_n, gemm_n, device=dev, dtype=dtype)
                        c = torch.empty(gemm_n, gemm_n, device=dev, dtype=dtype)
                        def gemm(a=a, b=b, c=c):
                            return torch.matmul(a, b, out=c)

                        (one,) = _timed(torch, gemm, 1, 2)
                        reps = max(1, min(256, int(250.0 / max(one / 2, 1e-3))))
                        rounds = max(1, int(gemm_seconds / 0.25))
                        ms = _timed(torch, gemm, rounds, reps)
                        samples = [2.0 * gemm_n ** 3 * reps / (t / 1e3) / 1e12 for t in ms if t > 0]
                        key = f"gemm:{label}:{name}"
                        out["samples"][key] = [round(x, 3) for x in samples]
                        out[key] = round(statistics.median(samples), 3) if samples else None
                        a = b = c = gemm = None
                        torch.cuda.empty_cache()
        finally:
            os.sched_setaffinity(0, before)
    return out


def main() -> None:
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--sizes-mib", type=int, nargs="+")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--torch-only", action="store_true", help="PyTorch's figures alone, keyed by size")
    ap.add_argument("--gpu", action="append", default=[], metavar="LABEL=BDF")
    ap.add_argument("--gemm-n", type=int, default=0, help="also time an n x n x n GEMM (FP16 and BF16)")
    ap.add_argument("--gemm-seconds", type=float, default=2.0)
    ap.add_argument("-o", "--out", default=str(REPO / "bench" / "results" / "copy_independent.json"))
    args = ap.parse_args()
    if args.torch_only:
        gpus = [tuple(g.split("=", 1)) for g in args.gpu] or None
        sizes = [m << 20 for m in (args.sizes_mib or [args.size_mib])]
        got = torch_figures(sizes, args.iters, gpus, args.gemm_n, args.gemm_seconds)  # type: ignore[arg-type]
        doc = {"engine": "PyTorch (pinned copy_, torch.matmul, CUDA events)",
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "iters": args.iters,
               **({"figures": {k: v for k, v in got.items() if ":" in k}, "samples": got.get("samples"),
                   "torch_version": got.get("torch_version"), "cuda": got.get("cuda")}
                  if isinstance(got, dict) else {"error": got})}
        pathlib.Path(args.out).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        sys.exit(0 if isinstance(got, dict) else 3)
    size = args.size_mib << 20
    ours = ccdiag_figures(size, args.iters)
    theirs = torch_figures([size], args.iters)
    ratios = {}
    if isinstance(theirs, dict):
        flat = {k.rsplit(":", 1)[0]: v for k, v in theirs.items() if k.count(":") == 2 and v}
        ratios = {k: round(v / flat[k], 4) for k, v in ours["figures"].items() if flat.get(k)}
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
