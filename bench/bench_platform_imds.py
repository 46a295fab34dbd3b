#!/usr/bin/env python3
"""What reading the instance type costs: the platform probe on this machine, and the metadata read's
bound when a service is silent or absent.

Why: the platform probe runs in every ``ccdiag check`` (a Slurm prolog) and every exporter cycle. It
asks a cloud's metadata service only when DMI names Azure, Google or Oracle (:mod:`ccdiag.host.imds`), so on
a machine whose DMI names no such cloud it must cost what it cost before: this measures the probe live
here and checks that no service was asked. The read itself is measured against a local listener that
accepts and never answers (the worst case: the bound, about 1 s) and a closed local port (a refusal:
immediate), each in a fresh cache. Writes ``bench/results/platform_imds.json``.

    python bench/bench_platform_imds.py [-n 20]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import socket
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from results_file import write_result  # noqa: E402


def probe_here(n: int) -> dict:
    import ccdiag.probes.platform as P
    from ccdiag.host import imds
    from ccdiag.host.door import LiveHost

    times = []
    obs = None
    for _ in range(n):
        t0 = time.perf_counter()
        obs = P.collect(LiveHost("/"))
        times.append(time.perf_counter() - t0)
    assert obs is not None
    return {"runs": n, "median_s": round(statistics.median(times), 5), "max_s": round(max(times), 5),
            "provider": obs.provider, "instance_type_source": obs.instance_type_source,
            "metadata_services_asked": sorted(imds._CACHE)}


def read_against(sock_setup) -> dict:
    from ccdiag.host import imds
    from ccdiag.host.door import HostReadError, LiveHost

    sock, port = sock_setup()
    saved = (imds.ADDRESS, imds.PORT)
    imds.ADDRESS, imds.PORT = "127.0.0.1", port
    imds._CACHE.clear()
    try:
        t0 = time.perf_counter()
        try:
            LiveHost("/").cloud_metadata("azure")
            error = None
        except HostReadError as exc:
            error = exc.message
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            LiveHost("/").cloud_metadata("azure")
        except HostReadError:
            pass
        second_s = time.perf_counter() - t0
    finally:
        imds.ADDRESS, imds.PORT = saved
        imds._CACHE.clear()
        if sock is not None:
            sock.close()
    return {"first_read_s": round(first_s, 4), "second_read_s": round(second_s, 6), "error": error}


def _silent():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def _closed():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return None, port


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20)
    args = ap.parse_args()
    from ccdiag.host import imds

    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "bounds": {"connect_s": imds.CONNECT_S, "total_s": imds.TOTAL_S},
              "platform_probe_here": probe_here(args.n),
              "read_silent_service": read_against(_silent),
              "read_closed_port": read_against(_closed)}
    write_result(str(pathlib.Path(__file__).resolve().parent / "results" / "platform_imds.json"), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
