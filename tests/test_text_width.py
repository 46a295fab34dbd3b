"""Every text output fits 80 columns (or the terminal, or $COLUMNS), and nothing a reader copies is
split: a command in backticks, a path, an exact list of ports.

Two layers: :mod:`ccdiag.core.textfit` on its own (wrapping, column blocks), then every command of
the CLI rendered piped with ``COLUMNS=80`` (and a narrower width), each line held to
:func:`ccdiag.core.textfit.fits`: at most 80 columns, or a single unbreakable word standing alone.
What is left out, and why: ``--json`` documents and the metrics exposition (machine formats),
``check --quiet`` piped (one syslog record per problem, by design), a one-line error message (the
error convention), and the first line of ``--version`` (it ends with the install path).
"""

from __future__ import annotations

import re
import shutil

import pytest

from ccdiag.core import textfit
from ccdiag.core.textfit import column_blocks, fits, matrix_text, wrap
from cli_runner import run
from conftest import REPO

SAMPLES = REPO / "samples"
DEGRADED = str(SAMPLES / "hgx-h100-8gpu-degraded.snap.tar.gz")
HEALTHY = str(SAMPLES / "hgx-h100-8gpu-healthy.snap.tar.gz")
CORPUS = REPO / "tests" / "fixtures" / "corpus"
ACS_COMMAND = re.compile(r"`setpci -s [0-9a-f:.]+ ECAP_ACS\+0x6\.w=0000`")


# -- the module ----------------------------------------------------------------------------------------
def test_a_backtick_span_is_one_word_and_never_split():
    text = ("Disable ACS on this port: `setpci -s 0000:29:00.0 ECAP_ACS+0x6.w=0000` (not persistent: "
            "run it at boot), or turn ACS off in the BIOS.")
    for width in range(20, 120):
        lines = wrap(text, width, indent="  ")
        assert sum("`setpci -s 0000:29:00.0 ECAP_ACS+0x6.w=0000`" in line for line in lines) == 1, width
        assert all(fits(line, width) for line in lines), (width, lines)
        assert " ".join(" ".join(lines).split()) == " ".join(text.split())  # nothing lost or added


def test_a_word_longer_than_the_line_stands_alone_unbroken():
    path = "/sys/class/infiniband/mlx5_1/ports/1/counters/link_error_recovery"
    lines = wrap(f"evidence: link_error_recovery = 0 -> 2 ({path})", 40, indent="      ", first="")
    assert lines == ["evidence: link_error_recovery = 0 -> 2", f"      ({path})"]
    assert all(fits(line, 40) for line in lines) and not fits("two words " + path, 40)


def test_blanks_between_words_stay_as_written_on_a_line():
    assert wrap("expected: 400 Gb/s  (policy)", 80) == ["expected: 400 Gb/s  (policy)"]
    assert wrap("  ", 80, first="# ") == ["#"]


def test_an_unmatched_backtick_is_an_ordinary_character():
    assert textfit.words("a `b c") == ["a", "`b", "c"]
    assert textfit.words("`x` `y z`, w") == ["`x`", "`y z`,", "w"]


def test_columns_split_into_blocks_that_fit_and_keep_every_column():
    blocks = column_blocks(6, [13] * 8, 80, gap=0, margin=2)
    assert [list(b) for b in blocks] == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert column_blocks(4, [200, 3], 80) == [range(0, 1), range(1, 2)]  # a wide column stays, alone
    assert column_blocks(4, [3, 3], 80) == [range(0, 2)]


def test_a_matrix_repeats_its_row_labels_and_says_which_columns_each_block_holds():
    names = [f"GPU{i}" for i in range(8)]
    cells = [["-" if i == j else f"{370 + i}.{j} (82%)" for j in range(8)] for i in range(8)]
    lines = matrix_text(names, names, cells, 80, indent="  ", title="read uni GB/s")
    assert all(len(line) <= 80 for line in lines)
    heads = [line for line in lines if line.startswith("  read uni")]
    assert len(heads) >= 2 and "(columns GPU0-" in heads[0] and "of 8)" in heads[-1]
    # every cell is printed exactly once
    text = "\n".join(lines)
    assert all(text.count(f"{370 + i}.{j} (82%)") == 1 for i in range(8) for j in range(8) if i != j)


def test_width_comes_from_columns_then_the_terminal_then_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "132")
    assert textfit.text_width() == 132
    monkeypatch.setenv("COLUMNS", "10")
    assert textfit.text_width() == textfit.MIN_WIDTH
    monkeypatch.delenv("COLUMNS")
    assert textfit.text_width() == 80  # pytest captures stdout: not a terminal


# -- every command ------------------------------------------------------------------------------------
def _help_paths() -> list[str]:
    from ccdiag.commands.examples import EXAMPLES

    return ["", *sorted(EXAMPLES)]


def _commands(tmp) -> list[list[str]]:
    """Every command, on the bundled samples and the real corpus: the wide cases of each."""
    reports = []
    for name, snap in (("d", DEGRADED), ("h", HEALTHY)):
        path = str(tmp / f"{name}.json")
        run("check", "--replay", snap, "--json", "--output", path)
        reports.append(path)
    policy = str(tmp / "p.toml")
    run("policy", "init", "--replay", HEALTHY, "-o", policy)
    cmds = [
        ["check", "--replay", DEGRADED], ["check", "--replay", HEALTHY],
        ["topo", "--replay", DEGRADED],
        ["topo", "--from-smi", str(CORPUS / "topo-m" / "b200-x8-nv18-16nic-fused-pxbnode-syssys-nccl-tests-333.txt")],
        ["bench", "list", "--replay", DEGRADED], ["bench", "run", "--replay", DEGRADED],
        ["policy", "init", "--replay", DEGRADED], ["policy", "show", policy],
        ["nccl", "--replay", DEGRADED],
        ["nccl", "--replay", DEGRADED, "--log", str(CORPUS / "nccl-log" / "net-ib-completion-error-status4-vendor-err-81-hang.txt")],
        ["compare", *reports], ["compare", reports[0], reports[1], reports[0]],
        ["snapshot", "--replay", DEGRADED, "--redact", "-o", str(tmp / "r.snap.tar.gz")],
        ["health", "status", "--state-dir", str(tmp / "health")],
    ]
    for sub in ("nvbandwidth", "nccl-tests", "perftest"):
        for f in sorted((CORPUS / sub).glob("*.txt")):
            cmds.append(["bench", "import", str(f), "--replay", DEGRADED])
    return cmds


def _help_commands() -> list[list[str]]:
    # in-process, click lays help out at 80 columns whatever $COLUMNS says (CliRunner forces it),
    # which is what `ccdiag ... --help` does on an 80-column terminal
    return [[*p.split(), "--help"] for p in _help_paths()]


def _commands_alone() -> set[str]:
    """Commands a reader pastes, which stand whole on a line of their own when longer than it: the
    --help examples."""
    from ccdiag.commands.examples import EXAMPLES

    return {cmd for examples in EXAMPLES.values() for cmd, _ in examples}


#: a shell line printed to be pasted as it is (``ccdiag nccl``'s exports)
EXPORT_RE = re.compile(r"^\s*export [A-Z0-9_]+=\S+$")


def _unfit(text: str, width: int) -> list[str]:
    alone = _commands_alone()
    return [line for line in text.splitlines()
            if not fits(line, width) and line.strip() not in alone and not EXPORT_RE.match(line)]


@pytest.mark.slow  # every command, in-process, on the samples (about 10 s)
@pytest.mark.parametrize("width", [80, 60])
def test_every_command_fits_the_width(width, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmds = _commands(tmp_path)
    if width == 80:
        cmds += _help_commands()
    else:  # a policy file is laid out at 80 columns whatever the terminal: it is a file, not a report
        cmds = [c for c in cmds if c[:2] != ["policy", "init"]]
    monkeypatch.setenv("COLUMNS", str(width))
    bad = {}
    covered = set()
    for argv in cmds:
        code, out, err = run(*argv)
        assert "Traceback" not in err, argv
        name = " ".join(a for a in argv[:2] if not a.startswith(("-", "/")))
        covered.add(name.split()[0] if name else "")
        wide = _unfit(out, width)
        if code in (0, 1):  # an error is one line by convention; warnings and notes must fit
            wide += _unfit(err, width)
        if wide:
            bad[" ".join(argv)] = wide
    assert bad == {}
    from ccdiag.commands.cli import cli

    assert set(cli.list_commands(None)) - covered <= {"daemon", "cluster"}  # their text is their --help


@pytest.mark.slow  # one replay per width
def test_the_acs_remedy_command_is_never_split_at_any_width(monkeypatch):
    for width in (100, 80, 60, 50, 40):
        monkeypatch.setenv("COLUMNS", str(width))
        code, out, _ = run("check", "--replay", DEGRADED)
        assert code == 1
        assert ACS_COMMAND.search(out), f"the setpci command is split at {width} columns"
        assert _unfit(out, width) == []


def test_help_epilogs_keep_each_example_command_whole(monkeypatch):
    """At 80 columns an example command that does not fit stands alone, on one line."""
    from ccdiag.commands.examples import EXAMPLES

    monkeypatch.setenv("COLUMNS", "80")
    for path, examples in EXAMPLES.items():
        code, out, _ = run(*path.split(), "--help")
        assert code == 0
        lines = [line.strip() for line in out.splitlines()]
        for cmd, _what in examples:
            assert cmd in lines, (path, cmd)
        assert _unfit(out, 80) == [], path


def test_no_shutil_fallback_decides_piped_width(monkeypatch):
    """Piped, the width is $COLUMNS or 80: never what shutil guesses from a parent terminal."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert textfit.text_width() == 80
