"""Daemon settings: the config file is held to the command line's ranges (refused at start-up with
exit 2 naming the file and key, kept out on SIGHUP), ``--once`` exits 3 when its cycle could not
complete, and the TOML reader falls back to ``tomli`` where ``tomllib`` is missing."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

import exporter_cases as C
from ccdiag.core.exitcodes import ExitCode
from ccdiag.exporters.daemon import ConfigError, Daemon, DaemonConfig, load_config
from ccdiag.host.door import ReplayHost
from test_metrics import value

pytestmark = pytest.mark.skipif(not C.HEALTHY.exists(), reason="bundled samples missing")


from cli_runner import run  # noqa: E402


# each of these was accepted before and ran a cycle with exit 0
BAD_FILE_VALUES = [
    ("interval = inf", "interval"),
    ("interval = -inf", "interval"),
    ("interval = nan", "interval"),
    ("interval = 1e-9", "interval"),  # a busy loop
    ("interval = 0", "interval"),
    ("interval = 1" + "0" * 400, "interval"),  # a TOML integer with no float
    ("deadline = 1e309", "deadline"),  # inf: overflowed the first timed wait of the cycle
    ("deadline = 0.1", "deadline"),
    ("deadline = nan", "deadline"),
    ("max_stale = -5", "max_stale"),
    ("max_stale = nan", "max_stale"),
    ("max_stale = inf", "max_stale"),
    ("probes = []", "probes"),
    ("probes = ['nvml', 'gpu']", "probes"),
]


@pytest.mark.parametrize("text,key", BAD_FILE_VALUES)
def test_bad_config_file_value_exits_2_naming_file_and_key(tmp_path, text, key):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(text + "\n")
    code, out, err = run("daemon", "--once", "--replay", str(C.HEALTHY), "--config", str(cfg))
    assert code == ExitCode.USAGE, err
    assert out == ""  # refused before any cycle ran
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"{cfg}: {key}" in lines[0]


@pytest.mark.parametrize("text,key", BAD_FILE_VALUES)
def test_bad_config_file_value_raises_config_error(tmp_path, text, key):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(text + "\n")
    with pytest.raises(ConfigError, match=f"^{cfg}: {key}"):
        load_config(str(cfg), {})


def test_bounds_themselves_are_accepted(tmp_path):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 0.1\ndeadline = 0.5\nmax_stale = 0\nprobes = ['system']\n")
    config = load_config(str(cfg), {})
    assert (config.interval_s, config.deadline_s, config.max_stale_s, config.probes) == (0.1, 0.5, 0.0, ("system",))


def test_a_bad_file_value_is_blamed_on_the_file_even_when_an_option_overrides_it(tmp_path):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 1e-9\n")
    with pytest.raises(ConfigError, match=f"^{cfg}: interval"):
        load_config(str(cfg), {"interval_s": 5.0})


def test_a_bad_option_is_blamed_on_the_command_line(tmp_path):
    # click's FloatRange(min=0.1) lets nan and inf through; the daemon's own check does not
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 5\n")
    with pytest.raises(ConfigError, match="^command line: --interval"):
        load_config(str(cfg), {"interval_s": float("nan")})
    code, out, err = run("daemon", "--once", "--replay", str(C.HEALTHY), "--deadline", "inf")
    assert code == ExitCode.USAGE and out == ""
    assert "command line: --deadline must be a finite number" in err


# -- SIGHUP reload ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["interval = 1e-9", "max_stale = nan", "probes = []", "deadline = 1e309"])
def test_reload_with_an_out_of_range_value_keeps_the_running_settings(tmp_path, caplog, text):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text("interval = 600\nmax_stale = 60\n")
    config = load_config(str(cfg), {"listen": "127.0.0.1:0"})
    d = Daemon(config, reload_config=lambda: load_config(str(cfg), {"listen": "127.0.0.1:0"}),
               host=ReplayHost(str(C.HEALTHY)))
    try:
        cfg.write_text(text + "\n")
        with caplog.at_level(logging.ERROR, logger="ccdiag.daemon"):
            assert d.reload() is False
        assert "reload failed" in caplog.text and str(cfg) in caplog.text
        assert d.config is config
        assert (d.collector.interval_s, d.state.max_stale_s) == (600.0, 60.0)
        assert d.run_cycle() is True  # the running settings still collect
        # and a good file afterwards is taken
        cfg.write_text("interval = 300\n")
        assert d.reload() is True
        assert d.collector.interval_s == 300.0
    finally:
        d.stop()


# -- --once and a cycle that cannot complete -----------------------------------------------------
def test_run_cycle_reports_a_cycle_that_broke_and_keeps_the_last_published(caplog):
    """An infinite deadline (what ``deadline = 1e309`` used to let in) breaks the cycle for real:
    the deadline's timestamp overflows. Built here without :meth:`DaemonConfig.validate`."""
    d = Daemon(DaemonConfig(listen="127.0.0.1:0"), host=ReplayHost(str(C.HEALTHY)))
    try:
        assert d.run_cycle() is True and d.last_error is None
        first = d.collector.cycle
        d.config = DaemonConfig(listen="127.0.0.1:0", deadline_s=float("inf"))
        with caplog.at_level(logging.ERROR, logger="ccdiag.daemon"):
            assert d.run_cycle() is False
        assert d.last_error is not None and "OverflowError" in d.last_error
        assert "collection cycle failed" in caplog.text
        assert d.collector.cycle is first and d.collector.cycles_total == 1
        d.config = DaemonConfig(listen="127.0.0.1:0")
        assert d.run_cycle() is True and d.last_error is None
        assert d.collector.cycles_total == 2
    finally:
        d.stop()


def test_once_exits_3_when_the_cycle_cannot_complete(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise OverflowError("timestamp out of range for platform time_t")

    monkeypatch.setattr("ccdiag.exporters.daemon.evaluate", broken)
    with caplog.at_level(logging.ERROR, logger="ccdiag.daemon"):
        code, out, err = run("daemon", "--once", "--replay", str(C.HEALTHY))
    assert code == ExitCode.UNEVALUATED
    assert "collection cycle failed: OverflowError" in caplog.text
    assert value(out, "ccdiag_collection_cycles_total") == 0  # the exposition says no cycle was made
    assert value(out, "ccdiag_verdict_severity") is None


def test_once_exits_0_when_the_cycle_completes_even_if_probes_failed(monkeypatch):
    def boom(host):
        raise RuntimeError("simulated probe bug")

    monkeypatch.setattr("ccdiag.probes.kmsg.collect", boom)
    code, out, err = run("daemon", "--once", "--replay", str(C.HEALTHY))
    assert code == ExitCode.OK, err
    assert value(out, "ccdiag_collection_cycles_total") == 1
    assert value(out, "ccdiag_probe_success", probe="kmsg") == 0
    assert value(out, "ccdiag_probe_success", probe="nvml") == 1


def test_once_exit_codes_are_in_the_help():
    code, out, _ = run("daemon", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "3 when the cycle itself could not complete" in flat
    assert "3 when it could not" in flat


# -- TOML reader fallback --------------------------------------------------------------------------
_FALLBACK = textwrap.dedent("""
    import sys
    {setup}
    sys.modules["tomllib"] = None  # as on Python 3.10: `import tomllib` raises ModuleNotFoundError
    from ccdiag.exporters import daemon
    from ccdiag.exporters.daemon import ConfigError, parse_config
    {check}
""")


def _fallback(setup: str, check: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _FALLBACK.format(setup=setup, check=check)],
                          capture_output=True, text=True, timeout=60)


def test_config_is_read_with_tomli_where_tomllib_is_missing():
    """Where ``tomllib`` is missing the reader takes ``tomli``. On Python 3.10 that is the installed
    ``tomli`` itself; on 3.11+, where ``tomli`` is not installed, the standard library's ``tomllib``
    (the same parser, merged into 3.11) stands in for it under the name ``tomli``."""
    proc = _fallback("try:\n"
                     "    import tomllib as stand_in\n"
                     "except ModuleNotFoundError:\n"
                     "    import tomli as stand_in\n"
                     "sys.modules['tomli'] = stand_in",
                     "import ccdiag.inputs.tomlread as reader; assert reader._toml is stand_in\n"
                     "print(parse_config('interval = 30\\nprobes = [\"nvml\"]\\n'))\n"
                     "try:\n"
                     "    parse_config('interval = [')\n"
                     "except ConfigError as exc:\n"
                     "    print(exc)\n")
    assert proc.returncode == 0, proc.stderr
    assert "{'interval_s': 30.0, 'probes': ('nvml',)}" in proc.stdout
    assert "not valid TOML" in proc.stdout


def test_without_any_toml_reader_the_config_is_an_input_error():
    proc = _fallback("sys.modules['tomli'] = None",
                     "try:\n"
                     "    parse_config('interval = 30', 'd.toml')\n"
                     "except ConfigError as exc:\n"
                     "    print(exc)\n")
    assert proc.returncode == 0, proc.stderr
    assert "d.toml: reading TOML needs Python 3.11 or the 'tomli' package" in proc.stdout
