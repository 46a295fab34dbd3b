"""The systemd units, sysusers and tmpfiles files, checked with systemd's own tools.

``systemd-analyze verify`` and ``security --offline`` work on unit files without systemd running as
init; ``systemd-sysusers`` and ``systemd-tmpfiles`` apply the files to a scratch root. The command
lines in the units are checked against the real CLI, so a renamed option fails here rather than on
a node at boot.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import struct
import subprocess

import pytest
from ccdiag.exporters.daemon import CONFIG_KEYS, load_config

from conftest import REPO

SYSTEMD = REPO / "systemd"
UNITS = ("ccdiag-exporter.service", "ccdiag-check.service", "ccdiag-check.timer", "ccdiag-health.service",
         "ccdiag-health.timer")
SERVICES = ("ccdiag-exporter.service", "ccdiag-check.service")
MAX_EXPOSURE = 3.0

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def parse_unit(path: pathlib.Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values in order (keys such as DeviceAllow= repeat); comments dropped."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = out.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return out


def exec_start(unit: str) -> list[str]:
    return shlex.split(parse_unit(SYSTEMD / unit)["Service"]["ExecStart"][-1])


def _ccdiag_binary() -> str:
    path = shutil.which("ccdiag")
    assert path, "the ccdiag console script is not installed (pip install -e .)"
    return path


def _local_copies(tmp_path: pathlib.Path, edit=lambda name, text: text) -> list[pathlib.Path]:
    """The units with their binary path pointed at this machine's ccdiag (verify insists it exists)."""
    out = []
    for name in UNITS:
        text = (SYSTEMD / name).read_text(encoding="utf-8")
        binary = exec_start(name)[0] if name.endswith(".service") else None
        if binary:
            text = text.replace(binary, _ccdiag_binary())
        path = tmp_path / name
        path.write_text(edit(name, text), encoding="utf-8")
        out.append(path)
    return out


def _verify(paths: list[pathlib.Path]) -> tuple[int, list[str]]:
    """Exit status and the diagnostics about these files (verify only warns about unknown keys)."""
    res = subprocess.run([ANALYZE, "verify", *map(str, paths)], capture_output=True, text=True, timeout=120)
    names = [p.name for p in paths]
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if any(n in ln for n in names)]
    return res.returncode, lines


# -- systemd-analyze ---------------------------------------------------------------------------------
@needs_analyze
def test_units_pass_systemd_analyze_verify(tmp_path):
    rc, complaints = _verify(_local_copies(tmp_path))
    assert rc == 0, complaints
    assert complaints == []


@needs_analyze
def test_verify_check_would_catch_a_misspelt_directive(tmp_path):
    """The verify test above relies on reading warnings; make sure one is reported for a typo."""
    def typo(name: str, text: str) -> str:
        return text.replace("ProtectClock=yes", "ProtectClok=yes") if name == "ccdiag-exporter.service" else text

    rc, complaints = _verify(_local_copies(tmp_path, typo))
    assert any("ProtectClok" in c for c in complaints), complaints


@needs_analyze
def test_verify_rejects_a_binary_that_does_not_exist(tmp_path):
    path = tmp_path / "ccdiag-exporter.service"
    shutil.copy(SYSTEMD / "ccdiag-exporter.service", path)
    text = path.read_text(encoding="utf-8").replace(exec_start("ccdiag-exporter.service")[0],
                                                    str(tmp_path / "no-such-ccdiag"))
    path.write_text(text, encoding="utf-8")
    rc, complaints = _verify([path])
    assert rc != 0


def _exposure(path: pathlib.Path) -> float:
    res = subprocess.run([ANALYZE, "security", "--offline=true", str(path)], capture_output=True, text=True,
                         timeout=120)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", res.stdout)
    assert m, res.stdout[-2000:] + res.stderr
    return float(m.group(1))


@needs_analyze
@pytest.mark.parametrize("unit", SERVICES)
def test_exposure_score_is_at_most_three(tmp_path, unit):
    paths = {p.name: p for p in _local_copies(tmp_path)}
    score = _exposure(paths[unit])
    assert score <= MAX_EXPOSURE, f"{unit}: exposure {score} (systemd-analyze security --offline=true)"


@needs_analyze
def test_exposure_score_rises_without_the_sandbox(tmp_path):
    """The score parsed above moves with the unit: stripping the hardening makes it worse."""
    keep = ("[", "Description", "ExecStart", "Type", "User", "Group")
    stripped = tmp_path / "bare.service"
    text = (SYSTEMD / "ccdiag-exporter.service").read_text(encoding="utf-8")
    stripped.write_text("\n".join(ln for ln in text.splitlines() if ln.startswith(keep)) + "\n", encoding="utf-8")
    assert _exposure(stripped) > MAX_EXPOSURE + 3


# -- the command lines against the CLI ------------------------------------------------------------------
def _options(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--")]


@pytest.mark.parametrize("unit", SERVICES)
def test_execstart_uses_the_ccdiag_console_script_and_real_options(unit):
    argv = exec_start(unit)
    assert pathlib.PurePath(argv[0]).name == "ccdiag"
    sub = argv[1]
    res = subprocess.run([_ccdiag_binary(), sub, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    offered = set(re.findall(r"(--[a-z][a-z0-9-]*)", res.stdout))
    for opt in _options(argv[2:]):
        assert opt in offered, f"{unit}: `ccdiag {sub}` has no option {opt}"


def test_exporter_unit_reads_the_example_config_path():
    argv = exec_start("ccdiag-exporter.service")
    assert argv[1] == "daemon"
    assert argv[argv.index("--config") + 1] == "/etc/ccdiag/daemon.toml"


def test_check_unit_writes_where_it_may_write():
    argv = exec_start("ccdiag-check.service")
    target = argv[argv.index("--textfile") + 1]
    assert parse_unit(SYSTEMD / "ccdiag-check.service")["Service"]["ReadWritePaths"] == [target]
    assert target in (SYSTEMD / "ccdiag.tmpfiles").read_text(encoding="utf-8")


def test_example_config_loads_and_documents_every_key():
    cfg = load_config(str(SYSTEMD / "daemon.toml"), {})
    assert cfg.listen.startswith("127.0.0.1:"), "the example must not open the endpoint to the network silently"
    text = (SYSTEMD / "daemon.toml").read_text(encoding="utf-8")
    for key in CONFIG_KEYS:
        assert re.search(rf"^#?{key} = ", text, re.M), f"daemon.toml does not show {key}"


def test_reload_sends_sighup_and_readiness_is_notified():
    svc = parse_unit(SYSTEMD / "ccdiag-exporter.service")["Service"]
    assert svc["Type"] == ["notify"] and svc["NotifyAccess"] == ["main"]
    assert re.fullmatch(r"\S*kill -HUP \$MAINPID", svc["ExecReload"][0])
    assert int(svc["WatchdogSec"][0]) > 0


# -- the sandbox ---------------------------------------------------------------------------------------
def test_kernel_log_stays_readable_and_nothing_else_privileged():
    """ProtectKernelLogs= would hide /dev/kmsg and with it every XID; the only capability is CAP_SYSLOG."""
    for unit in SERVICES:
        svc = parse_unit(SYSTEMD / unit)["Service"]
        assert "ProtectKernelLogs" not in svc, unit
        assert "PrivateDevices" not in svc, unit
        assert "DynamicUser" not in svc, unit
        assert svc["User"] == ["ccdiag"] and svc["Group"] == ["ccdiag"], unit
        assert svc["CapabilityBoundingSet"] == ["CAP_SYSLOG"], unit
        assert svc["AmbientCapabilities"] == ["CAP_SYSLOG"], unit
        allowed = dict(v.split() for v in svc["DeviceAllow"])
        assert svc["DevicePolicy"] == ["closed"], unit
        assert allowed["/dev/kmsg"] == "r", f"{unit}: the kernel log must be read-only"
        assert allowed["char-nvidia-frontend"] == "rw", unit
        assert not any("infiniband" in k or "uvm" in k for k in allowed), unit


#: [Service] keys allowed to differ between the daemon and the one-shot check
RUN_SPECIFIC = {"Type", "NotifyAccess", "WatchdogSec", "ExecStart", "ExecReload", "Restart", "RestartSec",
                "TimeoutStopSec", "TimeoutStartSec", "SuccessExitStatus", "RestrictAddressFamilies",
                "IPAddressDeny", "UMask", "ReadWritePaths",
                # the exporter serves connections (a descriptor each, a thread per request served)
                "TasksMax", "LimitNOFILE"}


def test_check_service_keeps_the_exporters_sandbox():
    exporter = parse_unit(SYSTEMD / "ccdiag-exporter.service")["Service"]
    check = parse_unit(SYSTEMD / "ccdiag-check.service")["Service"]
    common = {k: v for k, v in exporter.items() if k not in RUN_SPECIFIC}
    assert {k: check.get(k) for k in common} == common
    assert "AF_INET" not in check["RestrictAddressFamilies"][0]
    assert check["IPAddressDeny"] == ["any"]


def test_timer_runs_the_check_service():
    timer = parse_unit(SYSTEMD / "ccdiag-check.timer")
    assert timer["Timer"]["Unit"] == ["ccdiag-check.service"]
    assert timer["Timer"]["Persistent"] == ["true"]
    assert (SYSTEMD / timer["Timer"]["Unit"][0]).exists()


# -- sysusers and tmpfiles -----------------------------------------------------------------------------
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="systemd-tmpfiles --root needs root to chown")


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers is not installed")
def test_sysusers_creates_an_unprivileged_system_user(tmp_path):
    (tmp_path / "etc").mkdir()
    res = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(SYSTEMD / "ccdiag.sysusers")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    users = {ln.split(":")[0]: ln.split(":") for ln in (tmp_path / "etc/passwd").read_text().splitlines()}
    name, _, uid, gid, _, home, shell = users["ccdiag"]
    assert 0 < int(uid) < 1000, "a system user"
    assert shell.endswith("nologin")
    groups = {ln.split(":")[0]: ln.split(":")[2] for ln in (tmp_path / "etc/group").read_text().splitlines()}
    assert groups["ccdiag"] == gid


def _acl_entries(path: pathlib.Path) -> list[tuple[int, int, int]]:
    """(tag, perm, id) of a POSIX access ACL (the kernel's xattr layout: u32 version, then u16/u16/u32)."""
    raw = os.getxattr(path, "system.posix_acl_access")
    return [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]


@needs_root
@pytest.mark.skipif(shutil.which("systemd-tmpfiles") is None or shutil.which("systemd-sysusers") is None,
                    reason="systemd-tmpfiles/systemd-sysusers are not installed")
def test_tmpfiles_makes_the_config_dir_and_grants_the_textfile_dir(tmp_path):
    (tmp_path / "etc").mkdir()
    subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(SYSTEMD / "ccdiag.sysusers")],
                   check=True, capture_output=True, timeout=60)
    # ACL entries are resolved with this machine's user database, which has no ccdiag user: grant
    # the same entry to "nobody" and check it lands
    text = (SYSTEMD / "ccdiag.tmpfiles").read_text(encoding="utf-8")
    assert "u:ccdiag:rwx" in text
    conf = tmp_path / "ccdiag.conf"
    conf.write_text(text.replace("u:ccdiag:rwx", "u:nobody:rwx"), encoding="utf-8")
    res = subprocess.run(["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and not re.search(r"Failed|Ignoring|Unknown", res.stderr), res.stderr

    etc = (tmp_path / "etc/ccdiag").stat()
    gid = int(next(ln.split(":")[2] for ln in (tmp_path / "etc/group").read_text().splitlines()
                   if ln.startswith("ccdiag:")))
    assert (etc.st_mode & 0o777, etc.st_uid, etc.st_gid) == (0o750, 0, gid)

    textfile_dir = tmp_path / "var/lib/prometheus/node-exporter"
    st = textfile_dir.stat()
    # with an ACL the group bits of the mode show the ACL mask; owner and others stay as packaged
    assert (st.st_mode & 0o707, st.st_uid, st.st_gid) == (0o705, 0, 0)
    try:
        entries = _acl_entries(textfile_dir)
    except OSError as exc:
        pytest.skip(f"this filesystem keeps no POSIX ACLs ({exc})")
    import pwd

    acl_user, acl_group_obj = 0x02, 0x04
    assert (acl_user, 0o7, pwd.getpwnam("nobody").pw_uid) in entries
    assert [perm for tag, perm, _ in entries if tag == acl_group_obj] == [0o5]
