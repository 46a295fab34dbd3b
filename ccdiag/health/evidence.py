"""Evidence on failure: NVIDIA's ``nvidia-bug-report.sh`` beside the failure snapshot, bounded.

A support case with NVIDIA starts with ``nvidia-bug-report.log.gz``, and the state that made a check
fail (an XID storm, a GPU that fell off the bus) may be gone after the reset or reboot the ladder asks
for. So, when ``[evidence] bug_report = true`` and the script is installed, a failing idle-time check
runs it once, into the failure's evidence directory beside the snapshot and the JSON report.

The script can hang on a wedged GPU (NVIDIA's own usage text says so and offers ``--safe-mode``) and
writes a log that grows with the kernel log, so it runs in a process group of its own, killed at
``timeout`` or as soon as its output passes ``max_bytes`` (a partial report is kept and said so); it
is not started when the directory's file system has less than twice ``max_bytes`` free; and only the
newest ``keep`` failure sets are kept. The script wants root (``lspci -vvv``, the kernel log) and
writes ``<name>.gz`` when gzip is there (``--output-file <name>``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from ccdiag.health.config import EvidenceConfig

#: how often the output's size is looked at while the script runs
WATCH_S = 0.25


@dataclass(frozen=True)
class EvidenceResult:
    outcome: str  # "written", "timeout", "too_large", "failed", "not_installed", "no_space", "not_started"
    path: str | None
    size_bytes: int
    duration_s: float
    detail: str = ""

    def line(self) -> str:
        where = f" {self.path}" if self.path else ""
        return f"nvidia-bug-report: {self.outcome}{where} ({self.size_bytes} bytes, {self.duration_s:.0f}s)" + \
            (f": {self.detail}" if self.detail else "")


def _size(paths: list[str]) -> int:
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total


def run_bug_report(cfg: EvidenceConfig, directory: str, clock=time.monotonic) -> EvidenceResult:
    """Run the script into ``directory`` within ``cfg``'s bounds."""
    command = shutil.which(cfg.command)
    if command is None:
        return EvidenceResult("not_installed", None, 0, 0.0, f"{cfg.command} not found on PATH")
    try:
        free = shutil.disk_usage(directory).free
    except OSError as exc:
        return EvidenceResult("not_started", None, 0, 0.0, exc.strerror or str(exc))
    if free < 2 * cfg.max_bytes:
        return EvidenceResult("no_space", None, 0, 0.0, f"{free} bytes free in {directory}, less than twice "
                                                        f"max_bytes ({cfg.max_bytes})")
    base = os.path.join(directory, "nvidia-bug-report.log")
    outputs = [base, base + ".gz"]
    argv = [command, "--output-file", base] + (["--safe-mode"] if cfg.safe_mode else [])
    started = clock()
    log = open(os.path.join(directory, "nvidia-bug-report.out"), "wb")
    try:
        try:
            proc = subprocess.Popen(argv, cwd=directory, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=dict(os.environ, TMPDIR=directory))
        except OSError as exc:
            return EvidenceResult("not_started", None, 0, 0.0, exc.strerror or str(exc))
        outcome = None
        while proc.poll() is None:
            if clock() - started > cfg.timeout_s:
                outcome = "timeout"
            elif _size(outputs) > cfg.max_bytes:
                outcome = "too_large"
            if outcome:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()
                break
            time.sleep(WATCH_S)
    finally:
        log.close()
    path = next((p for p in reversed(outputs) if os.path.exists(p)), None)
    size = _size(outputs)
    duration = clock() - started
    if outcome == "too_large":
        return EvidenceResult(outcome, path, size, duration, f"stopped past max_bytes ({cfg.max_bytes}); partial")
    if outcome == "timeout":
        return EvidenceResult(outcome, path, size, duration, f"stopped after {cfg.timeout_s:g}s; partial")
    if proc.returncode != 0 or path is None:
        return EvidenceResult("failed", path, size, duration, f"exit {proc.returncode}")
    return EvidenceResult("written", path, size, duration)


def prune(directory: str, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` failure sets (subdirectories) of ``directory``; returns those removed."""
    try:
        sets = sorted((e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)), key=lambda e: e.name)
    except OSError:
        return []
    gone = []
    for entry in sets[: max(0, len(sets) - keep)]:
        shutil.rmtree(entry.path, ignore_errors=True)
        gone.append(entry.path)
    return gone


__all__ = ["EvidenceResult", "prune", "run_bug_report"]
