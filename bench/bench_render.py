"""Rendering the metrics of 8, 16, 32 and 64-GPU nodes: time per render, and how it grows.

    python bench/bench_render.py [--sizes 8,16,32,64] [--repeat 3]

Why: the exposition is rendered once per collection cycle, in the daemon's process; a rendering
that grows faster than the node (it once grew with the cube: 39 ms at 8 GPUs, 1.7 s at 64) turns
large nodes into slow cycles and, with rendering done by a scrape, slow scrapes.

Each node is synthesized with the sample builders' pieces (tests/synth): per GPU its own PCI
domain with a root port, a Gen5 switch, the GPU and its ConnectX-7 NIC (the PIX pair of the
bundled sample), NVSwitches, one InfiniBand port and IPoIB netdev per NIC, and NVML records of
``n`` healthy H100s with all NVLinks up. One evaluation builds the cycle (not timed); the render
(``metrics.families`` and the text exposition) is timed, best of ``--repeat``. Writes
bench/results/render.json with each size's time, series count, and the growth exponent between
sizes (1.0 is linear). Floor: exponent from 8 to 64 GPUs <= 1.3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

from results_file import write_result  # bench/results_file.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
RESULTS = os.path.join(REPO, "bench", "results", "render.json")
FLOOR_EXPONENT = 1.3


def node(n: int):
    """A synthesized ``n``-GPU node as a snapshot (see the module docstring)."""
    from synth import nvml as snv
    from synth import sysfs as ssf

    snap = ssf.new_snapshot(f"synth-{n}gpu", kernel="5.15.0-131-generic",
                            description=f"SYNTHESIZED {n}x H100 node for bench/bench_render.py", time_epoch=1735732800.0)
    full = ssf.Link(ssf.GEN5, 16, ssf.GEN5, 16)
    cpus = ("0-47", "48-95")
    gpus = []
    for i in range(n):
        d = f"{i + 1:04x}"
        numa = 0 if i < n // 2 else 1
        rc, rp, up = f"pci{d}:15", f"{d}:15:01.0", f"{d}:16:00.0"
        dg, dn, gpu, nic = f"{d}:17:00.0", f"{d}:17:01.0", f"{d}:18:00.0", f"{d}:19:00.0"
        ssf.add_pci_bridge(snap, [rc, rp], link=full, numa=numa)
        ssf.add_pci_bridge(snap, [rc, rp, up], link=full, numa=numa)
        ssf.add_pci_bridge(snap, [rc, rp, up, dg], link=full, numa=numa)
        ssf.add_pci_bridge(snap, [rc, rp, up, dn], link=full, numa=numa)
        ssf.add_pci_device(snap, [rc, rp, up, dg, gpu], **ssf.H100_SXM, numa=numa, link=full, local_cpulist=cpus[numa])
        ssf.add_pci_device(snap, [rc, rp, up, dn, nic], **ssf.CONNECTX7_IB, numa=numa, link=full,
                           local_cpulist=cpus[numa])
        port = ssf.IbPortSpec(state="4: ACTIVE", phys_state="5: LinkUp", rate="400 Gb/sec (4X NDR)",
                              lid=hex(100 + i), sm_lid="0x1", counters={"port_xmit_data": 1000 * i}, netdev=f"ib{i}")
        ssf.add_ib_device(snap, f"mlx5_{i}", nic, ports=[port], fw_ver="28.41.1000", hca_type="MT4129",
                          node_guid=f"a088:c203:00da:{i:04x}")
        ssf.add_netdev(snap, f"ib{i}", pci_bdf=nic, mtu=4092, speed=400000, address=f"00:00:10:29:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:da:00:{i:02x}",
                       addresses=[("inet", f"10.{i // 250}.{i % 250}.11", "255.255.255.0")])
        gpus.append(snv.SynthGpu(bus_id=gpu))
    nvs_rc, nvs_rp, nvs_up = "pci0000:02", "0000:02:01.0", "0000:03:00.0"
    ssf.add_pci_bridge(snap, [nvs_rc, nvs_rp], numa=0)
    ssf.add_pci_bridge(snap, [nvs_rc, nvs_rp, nvs_up], numa=0)
    for k, bdf in enumerate(snv.SYNTH_NVSWITCH_BUS_IDS):
        down = f"0000:04:{k:02x}.0"
        ssf.add_pci_bridge(snap, [nvs_rc, nvs_rp, nvs_up, down], numa=0)
        ssf.add_pci_device(snap, [nvs_rc, nvs_rp, nvs_up, down, bdf], **ssf.NVSWITCH_H100, numa=0)
    ssf.add_system(snap, numa_cpulists=cpus, modules=tuple(ssf.DEFAULT_MODULES), nvidia_version=snv.DRIVER,
                   fabric_manager="active", shm_bytes=1 << 40, memlock=("unlimited", "unlimited"))
    ssf.add_kmsg(snap, [(0.0, "Linux version 5.15.0-131-generic", 5)], uptime_s=1000.0)
    snap.nvml = snv.nvml_records(gpus)
    return snap


def cycle_of(n: int):
    from ccdiag.run.checkrun import evaluate
    from ccdiag.exporters.cycle import CycleState
    from ccdiag.host.door import ReplayHost

    result = evaluate(ReplayHost(node(n)), deadline_s=120.0)
    bad = {k: r.status for k, r in result.runs.items() if r.status not in ("ok", "partial", "unavailable")}
    if bad:
        raise SystemExit(f"{n}-GPU node: probes did not deliver: {bad}")
    return CycleState().advance(result, completed_at=1735732800.0)


def render(cycle) -> bytes:
    from prometheus_client.exposition import generate_latest

    from ccdiag.exporters import metrics as M
    from ccdiag.exporters.collector import StaticCollector

    return generate_latest(StaticCollector(M.families(cycle, interval_s=15.0, cycles_total=1)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,16,32,64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output", default=RESULTS)
    ap.add_argument("--baseline", help="an earlier run's JSON: its times are kept as before_render_ms")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        cycle = cycle_of(n)
        gpus = len(cycle.data["nvml"].gpus)
        best, text = math.inf, b""
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            text = render(cycle)
            best = min(best, time.perf_counter() - t0)
        series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
        rows.append({"gpus": n, "nvml_gpus": gpus, "render_ms": round(best * 1000, 2), "series": series,
                     "bytes": len(text)})
        print(f"{n:3d} GPUs: {best * 1000:8.1f} ms  {series} series", file=sys.stderr)
    if args.baseline:
        with open(args.baseline) as fh:
            before = {r["gpus"]: r["render_ms"] for r in json.load(fh)["sizes"]}
        for row in rows:
            row["before_render_ms"] = before.get(row["gpus"])
    for a, b in zip(rows, rows[1:]):
        b["exponent_from_previous"] = round(math.log(b["render_ms"] / a["render_ms"]) / math.log(b["gpus"] / a["gpus"]), 2)
    overall = round(math.log(rows[-1]["render_ms"] / rows[0]["render_ms"]) / math.log(rows[-1]["gpus"] / rows[0]["gpus"]), 2)
    result = {"sizes": rows, "exponent_overall": overall, "floor_exponent": FLOOR_EXPONENT,
              "pass": overall <= FLOOR_EXPONENT,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}}
    write_result(args.output, result)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
