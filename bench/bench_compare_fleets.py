#!/usr/bin/env python3
"""``ccdiag compare`` on healthy fleets of 3 to 80 reports: how often does it name a healthy host?

Why: with no baseline, the fleet is the baseline; in a small fleet whose hosts agree exactly on most
numbers (median absolute deviation 0), any one-unit difference used to be "far from the median".
Each draw builds a fleet from the healthy sample's own ``ccdiag check --replay ... --json`` report
with per-host readings that vary in any real fleet (SYNTHESIZED noise: each GPU's temperature
~N(37, 3) C and memory temperature ~N(45, 3) C, power ~N(120 W, 10 %), the PCIe generation of an
idle GPU dropped to Gen1 for 30 % of GPUs), then counts the outliers that fail the comparison
(exit 1) and the momentary readings reported beside them. A second fleet of the same draw has one
host with a real fault planted (GPU3's link trained x8, an older driver): it must be the one named.

    python bench/bench_compare_fleets.py [--sizes 3,5,10,20,40,80] [--draws 10] [--out FILE]

Writes ``bench/results/compare_fleets.json``. Run it with another checkout's interpreter to get
that version's figures (the script uses only ``compare.scan`` and ``Fleet.outliers``).
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import random
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from results_file import write_result  # noqa: E402

SAMPLE = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"


def base_report() -> dict:
    p = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--replay", str(SAMPLE), "--json"],
                       capture_output=True, text=True, timeout=300)
    return json.loads(p.stdout)


def host_report(base: dict, name: str, rng: random.Random, fault: bool = False) -> dict:
    d = copy.deepcopy(base)
    d["host"]["hostname"] = name
    for g in d["probes"]["nvml"]["data"]["gpus"]:
        g["temperature_c"] = round(rng.gauss(37, 3))
        g["memory_temperature_c"] = round(rng.gauss(45, 3))
        g["power_w"] = round(rng.gauss(120, 12), 1)
        if rng.random() < 0.3:
            g["pcie_gen_current"] = 1
    if fault:
        d["probes"]["nvml"]["data"]["driver_version"] = "550.54.15"
        d["probes"]["nvml"]["data"]["gpus"][3]["pcie_width_current"] = 8
    return d


def judge(dirpath: pathlib.Path) -> tuple[list[str], int]:
    from ccdiag.cluster import compare

    outs = compare.scan([str(dirpath)]).outliers()
    gating = sorted({h for o in outs if o.get("gating", True) for h in o["hosts"]})
    return gating, sum(1 for o in outs if not o.get("gating", True))


def draw(base: dict, n: int, seed: int) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        for i in range(n):
            (t / f"h{i:03d}.json").write_text(json.dumps(host_report(base, f"h{i:03d}", rng)))
        named, momentary = judge(t)
        bad = rng.randrange(n)
        (t / f"h{bad:03d}.json").write_text(json.dumps(host_report(base, f"h{bad:03d}", rng, fault=True)))
        planted, _ = judge(t)
    return {"n": n, "seed": seed, "healthy_named": named, "momentary_reported": momentary,
            "planted": f"h{bad:03d}", "planted_fleet_named": planted}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3,5,10,20,40,80")
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "compare_fleets.json"))
    args = ap.parse_args()
    import ccdiag

    base = base_report()
    rows = []
    summary = {}
    t0 = time.monotonic()
    for n in [int(x) for x in args.sizes.split(",")]:
        got = [draw(base, n, 1000 * n + k) for k in range(args.draws)]
        rows += got
        summary[str(n)] = {
            "draws": len(got),
            "draws_naming_a_healthy_host": sum(1 for g in got if g["healthy_named"]),
            "draws_naming_exactly_the_planted_host": sum(1 for g in got if g["planted_fleet_named"] == [g["planted"]]),
            "momentary_readings_reported": sum(g["momentary_reported"] for g in got)}
        print(f"n={n}: {summary[str(n)]}", file=sys.stderr, flush=True)
    write_result(args.out, {"bench": "compare_fleets", "ccdiag": str(pathlib.Path(ccdiag.__file__).parent),
                            "noise": "SYNTHESIZED per-host readings on the healthy sample's report (see docstring)",
                            "summary": summary, "draws": rows, "seconds": round(time.monotonic() - t0, 1),
                            "date": time.strftime("%Y-%m-%d")}, echo=False)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
