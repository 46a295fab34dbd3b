"""Wall time of ``ccdiag check --replay`` and ``ccdiag topo --replay --json`` on synthesized nodes
with many RDMA devices (100, 1,000, 3,000) and many GPUs (8, 64, 256).

Why: the hostile-input issue found report building after 3,000 RDMA devices outside the deadline.
Each size is built with tests/synth/scale.py, saved, and run as a subprocess (what an operator
runs); results go to bench/results/scale.json. Usage: python bench/bench_scale.py [--quick]
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from synth.scale import build_scale_node  # noqa: E402


def _time_s(args: list[str]) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ccdiag", *args], capture_output=True, timeout=600)
    return round(time.monotonic() - start, 2), proc.returncode


def main() -> None:
    quick = "--quick" in sys.argv
    sizes = [(100, 8), (1000, 8)] + ([] if quick else [(3000, 8)]) + [(8, 64)] + ([] if quick else [(8, 256)])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for nics, gpus in sizes:
            path = f"{tmp}/scale-{nics}-{gpus}.snap.tar.gz"
            build_scale_node(nics, gpus).save(path)
            check_s, check_rc = _time_s(["check", "--replay", path])
            topo_s, topo_rc = _time_s(["topo", "--replay", path, "--json"])
            row = {"rdma_devices": nics, "gpus": gpus, "check_s": check_s, "check_exit": check_rc,
                   "topo_json_s": topo_s, "topo_exit": topo_rc}
            print(row, flush=True)
            out.append(row)
    dest = ROOT / "bench" / "results" / "scale.json"
    dest.write_text(json.dumps({"synthesized": True, "python": sys.version.split()[0], "runs": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
