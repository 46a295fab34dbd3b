"""Reading an NCCL log stays linear in its length. Each input here is a class the reader fuzz
(bench/bench_fuzz_readers.py) found taking over 10 s on one line through a quadratic regex; they run
in milliseconds now. The tests time nothing: each input is long enough that a quadratic pattern would
take minutes, and bench/bench_nccl_log.py reports the time ratio of a 10 MB to a 1 MB line."""

from __future__ import annotations

import pytest

from ccdiag.nccl.logread import parse_nccl_log

#: the real line the fuzz mutated (tests/fixtures/corpus nccl-log, RCCL in Docker), before its long run
RCCL_BOOTSTRAP = "9cce34ff6c6c:505250:505250 [1] NCCL INFO Bootstrap : Using eth0"


def test_a_long_run_before_the_mark_is_read():
    """50,000 '-' before the NCCL mark (from net-ib-completion-error-status4-vendor-err-81-hang.txt): the
    host-prefix search was quadratic."""
    line = "[2026-03-03 12:" + "-" * 50000 + "t_ib.cc:2453 NCCL WARN NET/IB: Got completion with status=4"
    log = parse_nccl_log(line)
    assert log.warnings and "status=4" in log.warnings[0][1]


@pytest.mark.parametrize("run", ["9" * 200_000, "a" * 200_000, "a." * 100_000, "1.-" * 60_000, "0x" * 100_000])
def test_a_bootstrap_interface_name_that_never_ends_is_read(run):
    """The fuzz input: the interface of a ``Bootstrap : Using`` line followed by 199,183 '9' and no ':'
    (took over 10 s at load 9: every position of the run started the interface pattern over). The
    interface and address patterns are bounded now; the run names no interface, and the real line before it
    is still read."""
    text = "9cce34ff6c6c:504930:504930 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>\n" + RCCL_BOOTSTRAP + run
    log = parse_nccl_log(text)
    assert log.bootstrap == {"eth0": {"172.17.0.2"}}


@pytest.mark.parametrize("run", ["a:" * 60_000, "9:" * 60_000, "fe80::" * 20_000])
def test_an_address_that_never_ends_is_read(run):
    """The same class with ':' inside the run: each segment starts a candidate interface, each bounded."""
    log = parse_nccl_log("node1:1:1 [0] NCCL INFO Bootstrap : Using eth0:" + run + "\n"
                         "node1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth1:10.0.0.2<0>\n")
    assert log.net_devices == {"eth1": "Socket"} and log.hosts == {"node1"}


@pytest.mark.parametrize("run", ["9" * 100_000, "a" * 100_000, "1:" * 50_000, "a:1:" * 30_000])
def test_a_host_prefix_that_never_ends_is_read(run):
    """A run in the place of NCCL's ``host:pid:tid`` prefix: the host, pid and thread patterns are bounded."""
    log = parse_nccl_log(run + " [0] NCCL WARN NET/IB : Got completion from peer with status=12\n")
    assert log.warnings and "status=12" in log.warnings[0][1]


def test_a_warn_of_a_whole_line_of_repeated_words_is_explained_from_its_head():
    """A WARN whose text is 60,000 characters of a message repeated: classified from its first 1024
    characters (the catalogue's patterns and its cache stay bounded)."""
    text = "node1:1:1 [0] NCCL WARN " + "Cuda failure 'out of memory' " * 2000 + "\n"
    log = parse_nccl_log(text)
    assert log.events[0].family == "cuda-oom" and len(log.events[0].text) <= 400


def test_a_ras_mismatch_line_of_digits_is_read():
    """ncclras's ``N ranks have launched up to operation`` pattern started over at every digit of a run."""
    from ccdiag.nccl.rasread import _LAUNCHED

    assert _LAUNCHED.search("9" * 200_000) is None
    assert _LAUNCHED.search("  3 ranks have launched up to operation 17").groups() == ("3", "17")


def test_the_host_prefix_is_still_read():
    log = parse_nccl_log("gpu-node-17.cluster:4711:4711 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n")
    assert log.hosts == {"gpu-node-17.cluster"}


def test_a_line_of_whitespace_after_the_mark_is_read():
    """The repeat-suffix pattern starts with ``\\s*``: over a line of 20,000 no-break spaces it was
    quadratic (over 10 s); only the line's tail is searched now."""
    line = "9cce34ff6c6c:505250:505433 [1] NCCL INFO /mnt/build/x" + "\u00a0" * 20000 + "x"
    parse_nccl_log(line)
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


def test_every_framework_marker_has_its_reader():
    """The log reader finds a framework's failure by a marker and reads its line by the marker's own
    method: a marker added to the list without a reader would raise on the first log that has it."""
    from ccdiag.nccl import logread

    assert set(logread._ANCHORS) == set(logread._ANCHOR_READERS)
