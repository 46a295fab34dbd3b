"""Reading an NCCL log stays linear in its length: a line of 50,000 '-' before the NCCL mark (what
the reader fuzz produced from the corpus log net-ib-completion-error-status4-vendor-err-81-hang.txt
by repeating one character) took over 10 s in the host-prefix search and takes milliseconds now."""

from __future__ import annotations

import time

from ccdiag.nccl.logread import parse_nccl_log


def test_a_long_run_before_the_mark_is_read_quickly():
    line = "[2026-03-03 12:" + "-" * 50000 + "t_ib.cc:2453 NCCL WARN NET/IB: Got completion with status=4"
    t0 = time.process_time()
    log = parse_nccl_log(line)
    assert time.process_time() - t0 < 1.0
    assert log.warnings and "status=4" in log.warnings[0][1]


def test_the_host_prefix_is_still_read():
    log = parse_nccl_log("gpu-node-17.cluster:4711:4711 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n")
    assert log.hosts == {"gpu-node-17.cluster"}
