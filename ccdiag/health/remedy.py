"""The remediation hook: an operator's own command per rung of the ladder, run bounded and recorded.

ccdiag never resets a GPU, reboots or opens a ticket itself: what a reset or a reboot means on a site
(``nvidia-smi -r`` after stopping the persistence daemon and DCGM, a BMC power cycle, a cloud API
call, a ticket in the site's tracker) is the site's. The health configuration names a command per
rung (``[remediation] reset_gpu = ["/usr/local/sbin/site-reset-gpu", "{gpus}"]``); it runs once per
root cause and rung, only once the node is out of scheduling and idle, without a shell, in a process
group of its own that is killed at ``remediation.timeout``, with the placeholders filled and the same
values in its environment (``CCDIAG_NODE``, ``CCDIAG_GPUS``, ``CCDIAG_ACTION``, ``CCDIAG_REASON``,
``CCDIAG_ROOT``). Its exit status is the step's outcome; the last lines of its output are logged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

#: bytes of the command's output kept for the log
OUTPUT_TAIL_BYTES = 2000


@dataclass(frozen=True)
class HookResult:
    action: str
    argv: tuple[str, ...]
    outcome: str  # "ok", "failed", "timeout", "not_started"
    returncode: int | None
    duration_s: float
    output: str

    def line(self) -> str:
        what = {"ok": "succeeded", "failed": f"failed (exit {self.returncode})",
                "timeout": f"killed after {self.duration_s:.0f}s", "not_started": "could not be started"}[self.outcome]
        tail = " ".join(self.output.split())[-300:]
        return f"remediation {self.action}: {' '.join(self.argv)} {what}" + (f": {tail}" if tail else "")


def fill(argv: tuple[str, ...], values: dict[str, str]) -> tuple[str, ...]:
    """``argv`` with ``{node}``, ``{gpus}``, ``{action}``, ``{reason}`` and ``{root}`` filled in."""
    return tuple(a.format(**values) for a in argv)


def run_hook(action: str, argv: tuple[str, ...], values: dict[str, str], timeout_s: float) -> HookResult:
    cmd = fill(argv, values)
    env = dict(os.environ, **{f"CCDIAG_{k.upper()}": v for k, v in values.items()})
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        except OSError as exc:
            return HookResult(action, cmd, "not_started", None, 0.0, exc.strerror or str(exc))
        try:
            rc: int | None = proc.wait(timeout_s)
            outcome = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            rc, outcome = None, "timeout"
        out.seek(0, os.SEEK_END)
        size = out.tell()
        out.seek(max(0, size - OUTPUT_TAIL_BYTES))
        tail = out.read().decode("utf-8", "replace")
    return HookResult(action, cmd, outcome, rc, time.monotonic() - started, tail)


__all__ = ["HookResult", "fill", "run_hook"]
