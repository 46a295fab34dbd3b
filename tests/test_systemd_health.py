"""The health loop's systemd units (``systemd/ccdiag-health.service`` and ``.timer``), checked with
systemd's own tools like the others (``tests/test_systemd.py`` verifies all units together): the
sandbox's exposure stays bounded for a unit that must run as root, the command line is one ccdiag
accepts, and the paths it writes are the ones the health loop uses."""

from __future__ import annotations

import pytest

from ccdiag.health.config import HealthConfig
from ccdiag.health.metrics import FILENAME
from test_systemd import SYSTEMD, _exposure, _local_copies, exec_start, needs_analyze, parse_unit

#: the health turn runs as root (Slurm drains, nvidia-bug-report.sh, the operator's commands): a
#: looser bound than the exporter's 3.0, still well below an unhardened unit
MAX_EXPOSURE = 5.5


@needs_analyze
@pytest.mark.slow  # systemd-analyze, a child process
def test_the_health_unit_keeps_its_sandbox(tmp_path):
    paths = {p.name: p for p in _local_copies(tmp_path)}
    score = _exposure(paths["ccdiag-health.service"])
    assert score <= MAX_EXPOSURE, f"exposure {score}"


def test_the_timer_starts_the_turn_and_the_turn_is_a_health_run():
    timer = parse_unit(SYSTEMD / "ccdiag-health.timer")["Timer"]
    assert timer["Unit"] == ["ccdiag-health.service"] and timer["Persistent"] == ["true"]
    argv = exec_start("ccdiag-health.service")
    assert argv[1:3] == ["health", "run"] and argv[argv.index("--config") + 1] == "/etc/ccdiag/health.toml"
    from cli_runner import run

    code, out, _ = run("health", "run", "--help")
    assert code == 0 and all(opt in out for opt in argv[3:] if opt.startswith("--"))


def test_the_unit_writes_where_the_loop_writes():
    svc = parse_unit(SYSTEMD / "ccdiag-health.service")["Service"]
    cfg = HealthConfig()
    assert f"/var/lib/{svc['StateDirectory'][0]}" == cfg.state_dir
    check_textfile = exec_start("ccdiag-check.service")
    textfile = check_textfile[check_textfile.index("--textfile") + 1]
    assert svc["ReadWritePaths"] == [f"-{textfile}"]  # ccdiag-health.prom beside ccdiag.prom
    assert FILENAME.endswith(".prom") and svc["Type"] == ["oneshot"] and svc["KillMode"] == ["mixed"]
    # the kernel log stays readable (the check reads XIDs), as in the other units
    assert "ProtectKernelLogs" not in svc and "PrivateDevices" not in svc
