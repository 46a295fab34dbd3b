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


def test_a_line_of_whitespace_after_the_mark_is_read_quickly():
    """The repeat-suffix pattern starts with ``\\s*``: over a line of 20,000 no-break spaces it was
    quadratic (over 10 s); only the line's tail is searched now."""
    line = "9cce34ff6c6c:505250:505433 [1] NCCL INFO /mnt/build/x" + "\u00a0" * 20000 + "x"
    t0 = time.process_time()
    parse_nccl_log(line)
    assert time.process_time() - t0 < 1.0
    log = parse_nccl_log("h:1:1 [0] NCCL WARN NET/IB : something failed  [message repeated 3 times]\n")
    assert log.warnings[0][1] == "NET/IB : something failed"


def test_a_5000_digit_count_is_not_a_count():
    huge = "9" * 5000
    log = parse_nccl_log(f"h:1:1 [0] NCCL INFO Channel 00/{huge} :    0   1\n"
                         f"h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks {huge} nNodes 1 localRanks 8\n")
    assert log.channels is None and log.ranks is None


def test_a_10_mb_bootstrap_line_is_read_to_the_end_of_the_file(tmp_path):
    """One ``Bootstrap : Using`` line of 10 MB (SYNTHESIZED from the real line's form) took 31-95 s in a
    quadratic regex; it is read now, and the line after it too (bench/bench_nccl_log.py times the ratio of a
    10 MB to a 1 MB line)."""
    from ccdiag.nccl.logread import read_nccl_log

    line = "node1:1:1 [0] NCCL INFO Bootstrap : Using " + "eth0:10.0.0.1<0> " * (10_000_000 // 17)
    path = tmp_path / "long.log"
    path.write_text(line + "\nnode1:1:1 [0] NCCL INFO Using network Socket\n")
    log = read_nccl_log(str(path))
    assert log.network == "Socket" and log.bootstrap == {"eth0": {"10.0.0.1"}}
    assert parse_nccl_log(line).bootstrap == {"eth0": {"10.0.0.1"}}
