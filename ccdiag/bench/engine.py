"""Run an engine (the CuPy copies of :mod:`.cuda_worker`, the verbs writes of :mod:`.rdma_worker`)
in a child process under a hard budget.

The child is started in its own process group and killed with the group when the budget ends, so
a copy that never completes (a wedged GPU, a hung driver call) costs the budget and no more. Each
JSON line it prints is taken as it comes; what arrived before a kill is kept and the result says
the budget ran out.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from ccdiag.host import procgroups

#: bytes of one line the child may print (a line longer than this is cut and ignored)
MAX_LINE_BYTES = 1 << 20
#: seconds between SIGTERM and SIGKILL, and for reaping after SIGKILL
KILL_GRACE_S = 1.0


@dataclass
class WorkerRun:
    """What the child printed, parsed: info, measurements, per-measurement errors and how it ended."""

    info: dict = field(default_factory=dict)
    lines: list[dict] = field(default_factory=list)
    fatal: str | None = None
    timed_out: bool = False
    budget_ran_out: bool = False
    done: bool = False
    returncode: int | None = None
    stderr_tail: str = ""
    duration_s: float = 0.0


#: how a worker child starts. ``python -m`` would put the child's current directory first on its
#: path, and run from a source checkout after ``pip install .`` that directory's ``ccdiag/`` (which
#: has no ``probes/``: ``pyproject.toml`` maps it from the top-level folder) shadows the installed
#: package and the worker dies on ``ModuleNotFoundError: ccdiag.probes``. ``-P`` would stop that
#: but needs Python 3.11, and ccdiag supports 3.10. So the child drops the directory Python put
#: first and loads ``ccdiag`` from the very file this process imported it from (argv[1]); every
#: other module resolves as the parent's would (``PYTHONPATH`` first, then the environment's
#: site directories).
WORKER_BOOT = """\
import importlib.util, os, runpy, sys
init, module = sys.argv[1], sys.argv[2]
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]
spec = importlib.util.spec_from_file_location("ccdiag", init, submodule_search_locations=[os.path.dirname(init)])
pkg = importlib.util.module_from_spec(spec)
sys.modules["ccdiag"] = pkg
spec.loader.exec_module(pkg)
sys.argv = [module]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def package_init() -> str:
    """The ``__init__.py`` of the ``ccdiag`` package this process runs (installed or editable)."""
    import ccdiag

    return os.path.abspath(ccdiag.__file__ or "")


def worker_command(module: str) -> list[str]:
    """The child's command line: this interpreter, the boot code above, this process's package."""
    return [sys.executable, "-c", WORKER_BOOT, package_init(), module]


def run_worker(request: dict, budget_s: float, on_line: Callable[[dict], None] | None = None,
               env: dict | None = None, module: str = "ccdiag.bench.cuda_worker") -> WorkerRun:
    """Start the worker ``module`` with ``request``; read its lines until it ends or ``budget_s``
    passes."""
    run = WorkerRun()
    t0 = time.monotonic()
    deadline = t0 + max(0.1, budget_s)
    # the child keeps a little less than the whole budget, so it can say so itself
    request = {**request, "budget_s": max(0.1, budget_s - 1.0)}
    try:
        with procgroups.starting():
            proc = subprocess.Popen(worker_command(module), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    env=env if env is not None else dict(os.environ))
            procgroups.register(proc.pid)
    except OSError as exc:
        run.fatal = f"cannot start {module}: {exc.strerror or exc}"
        return run
    # the three pipes were asked for above
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except OSError:
        pass
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    buf = {"out": b"", "err": b""}
    open_streams = 2
    while open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            run.timed_out = True
            break
        for key, _ in sel.select(timeout=min(left, 0.5)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            if key.data == "err":
                buf["err"] = (buf["err"] + chunk)[-4096:]
                continue
            buf["out"] += chunk
            while b"\n" in buf["out"]:
                line, buf["out"] = buf["out"].split(b"\n", 1)
                _take(run, line, on_line)
            if len(buf["out"]) > MAX_LINE_BYTES:
                buf["out"] = b""
    sel.close()
    _stop(proc, run)
    run.stderr_tail = buf["err"].decode("utf-8", "replace").strip()[-1000:]
    run.duration_s = time.monotonic() - t0
    return run


def _take(run: WorkerRun, raw: bytes, on_line: Callable[[dict], None] | None) -> None:
    try:
        msg = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return  # a library printed to stdout: not ours
    if not isinstance(msg, dict):
        return
    kind = msg.get("type")
    if kind == "info":
        run.info = msg
    elif kind == "fatal":
        run.fatal = str(msg.get("error"))
    elif kind == "budget":
        run.budget_ran_out = True
    elif kind == "done":
        run.done = True
    elif kind in ("measure", "error", "latency"):
        run.lines.append(msg)
    if on_line is not None:
        on_line(msg)


def _stop(proc: subprocess.Popen, run: WorkerRun) -> None:
    if proc.poll() is None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                proc.wait(KILL_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                continue
    try:
        run.returncode = proc.wait(KILL_GRACE_S)
        procgroups.forget(proc.pid)
    except subprocess.TimeoutExpired:
        run.returncode = None  # stuck in the kernel: abandoned, never waited on forever
    for f in (proc.stdout, proc.stderr):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass
