"""Reading a bug report: MB/s against size (is it linear?), and how a huge one ends under --timeout.

    python bench/bench_bugreport.py [--max-mb 200] [--repeat 2] [--huge-mb 500]

Why: an nvidia-bug-report.log inflates to hundreds of megabytes (kernel logs, base64 blobs of
nvidia-debugdump and acpidump, X logs); its reader must be linear in it and stop at the deadline
with what it read. Inputs are SYNTHESIZED from real sections: the R580 layout of
tests/synth/bugreport.py around gpud's real H100 `nvidia-smi -q` and `lspci -vvv` and the R510
report's sections, padded with a kernel log of real-format lines (the part that grows in real
reports) to each size. For each size, the best of ``--repeat`` times of
:func:`ccdiag.host.bugreport.read_bug_report` (gzip, as the script writes it) gives MB/s of
inflated text, and the least-squares slope of log(time) over log(bytes) says linear (~1.0) or not.
Then ``ccdiag check --bug-report`` on a ``--huge-mb`` report with ``--timeout 10``: its exit code,
wall time and whether the verdict says what was not read. Writes bench/results/bugreport.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.results_file import write_result  # noqa: E402
from ccdiag.host.bugreport import read_bug_report  # noqa: E402
from tests.synth import bugreport as synth  # noqa: E402

FIX = pathlib.Path(REPO) / "tests" / "fixtures" / "nvfiles"
RESULTS = os.path.join(REPO, "bench", "results", "bugreport.json")
KERNEL_LINE = ("[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 13, pid=4242, name=python3, Graphics Exception: "
               "ESR 0x514648=0x2000000 0x514650=0x0 0x514644=0xd3eff2 0x51464c=0x17f")


def report_text(size: int) -> bytes:
    smi = synth.strip_fixture_header((FIX / "smi-q-h100x8-535.161.08-hw-power-brake-gpud.txt").read_text())
    lspci = gzip.decompress((FIX / "lspci-vvv-h100x8-gpud.txt.gz").read_bytes()).decode()
    before = synth.command_block(("/usr/bin/lspci -nnDvvvxxxx", lspci))  # the R580 script's order:
    after = synth.command_block(("/usr/bin/nvidia-smi --query", smi))  # lspci, dmesg, then nvidia-smi
    fixed = len(synth.report(before + after).encode())
    lines, n, t = [], fixed, 1.0
    while n < size:
        line = KERNEL_LINE.format(t=t, b=0x19 + int(t) % 8)
        lines.append(line)
        n += len(line) + 1
        t += 0.25
    return synth.report(before, synth.titled("dmesg:", "\n".join(lines)), after).encode()


def timed(path: str, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        read_bug_report(path)
        best = min(best, time.perf_counter() - start)
    return best


def slope(points: list[tuple[int, float]]) -> float:
    xs = [math.log(b) for b, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _says_what_was_not_read(out: str) -> bool:
    """The verdict's probe.record finding is unknown and names the deadline (reading stopped there)."""
    try:
        findings = json.loads(out)["findings"]
    except (ValueError, KeyError, TypeError):
        return False
    return any(f["check"] == "probe.record" and f["status"] == "unknown" and "deadline" in f["summary"]
               for f in findings)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--huge-mb", type=int, default=500, help="0: skip the --timeout run")
    args = ap.parse_args(argv)
    sizes = [s for s in (5, 20, 50, 100, 200, 400) if s <= args.max_mb]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            text = report_text(mb << 20)
            path = os.path.join(tmp, f"r{mb}.log.gz")
            with open(path, "wb") as fh:
                fh.write(gzip.compress(text, compresslevel=1))
            seconds = timed(path, args.repeat)
            rows.append({"mb": round(len(text) / 1e6, 1), "gz_mb": round(os.path.getsize(path) / 1e6, 1),
                         "seconds": round(seconds, 3), "mb_per_s": round(len(text) / 1e6 / seconds, 1)})
            print(f"{rows[-1]['mb']:8.1f} MB  {seconds:7.3f} s  {rows[-1]['mb_per_s']:7.1f} MB/s", flush=True)
            os.unlink(path)
        huge = None
        if args.huge_mb:
            text = report_text(args.huge_mb << 20)
            path = os.path.join(tmp, "huge.log.gz")
            with open(path, "wb") as fh:
                fh.write(gzip.compress(text, compresslevel=1))
            del text
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "ccdiag", "check", "--bug-report", path, "--timeout", "10",
                                   "--json"], capture_output=True, text=True, cwd=REPO)
            wall = time.perf_counter() - start
            said = _says_what_was_not_read(proc.stdout)
            huge = {"mb": args.huge_mb, "gz_mb": round(os.path.getsize(path) / 1e6, 1), "timeout_s": 10,
                    "exit_code": proc.returncode, "wall_s": round(wall, 1), "says_what_was_not_read": said,
                    "stderr": proc.stderr.strip()[:200]}
            print(f"huge {args.huge_mb} MB with --timeout 10: exit {proc.returncode} in {wall:.1f} s; "
                  f"deadline said: {said}")
    result = {"what": "read_bug_report on SYNTHESIZED R580-layout reports (real nvidia-smi -q and lspci -vvv "
                      "sections, a kernel log of real-format lines grown to each size), gzip",
              "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
              "loadavg_1m": round(os.getloadavg()[0], 1), "sizes": rows,
              "loglog_slope": round(slope([(r["mb"], r["seconds"]) for r in rows]), 3) if len(rows) > 1 else None,
              "huge_with_timeout": huge}
    write_result(RESULTS, result, echo=False)
    print(f"slope {result['loglog_slope']} (1.0 linear); written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
