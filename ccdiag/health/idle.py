"""Is this node idle? No GPU process runs, and no Slurm job or Kubernetes GPU pod holds the node.

An active check (a PCIe link kept busy, a quick benchmark) must never take a GPU from a job, so
the loop asks before it starts and keeps asking while it runs; the first sign of a job makes it
stop (:mod:`ccdiag.health.runner`). The signs, cheapest first:

* a process holding a GPU device node open (``/dev/nvidia0`` ...: what ``fuser`` reads), found in
  ``/proc/<pid>/fd``. The running check's process tree is left out (it opens the GPUs itself), as
  are the node's GPU services that hold the devices all the time (persistence daemon, DCGM host
  engine and exporter, nvidia-smi, the display server): they run with or without a job;
* Slurm: the node's state as ``scontrol show node`` gives it (``ALLOCATED``, ``MIXED``, ``COMPLETING``,
  ``PLANNED``);
* Kubernetes: a pod bound to the node, running or about to, that requests the GPU resource.

The scheduler is asked every ``scheduler_poll`` seconds rather than every poll, to spare slurmctld and
the API server; a job's prolog need not wait for that: it tells a running check to stop at once
(``ccdiag health yield``).

Inside a container without the host's process namespace the first sign sees only the container;
the Kubernetes sign covers that case.
"""

from __future__ import annotations

import fnmatch
import os
import time
from dataclasses import dataclass, field
from typing import Callable

#: processes that keep GPU device nodes open whether or not a job runs
GPU_SERVICES = ("nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "dcgmi", "nvidia-smi", "Xorg", "Xwayland",
                "gnome-shell", "nvidia-powerd")


@dataclass(frozen=True)
class Busy:
    source: str  # "gpu_process", "slurm", "kubernetes", "told"
    detail: str


def _ppid_and_comm(proc: str, pid: int) -> tuple[int, str] | None:
    try:
        with open(f"{proc}/{pid}/stat", "rb") as fh:
            text = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    # comm is in parentheses and may itself hold spaces or parentheses: the last ")" ends it
    lpar, rpar = text.find("("), text.rfind(")")
    if lpar < 0 or rpar < 0:
        return None
    rest = text[rpar + 2:].split()
    try:
        return int(rest[1]), text[lpar + 1:rpar]
    except (IndexError, ValueError):
        return None


def _pids(proc: str) -> list[int]:
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


def descendants(proc: str, root: int, table: dict[int, tuple[int, str]]) -> set[int]:
    """``root`` and every process below it in ``table`` (pid -> (ppid, comm))."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def gpu_processes(patterns: tuple[str, ...], proc: str = "/proc", exclude_tree: int | None = None,
                  ignore: tuple[str, ...] = GPU_SERVICES) -> list[tuple[int, str, str]]:
    """(pid, name, device) of each process holding a file matching ``patterns`` open; the tree of
    ``exclude_tree`` and the services in ``ignore`` left out."""
    table = {pid: info for pid in _pids(proc) if (info := _ppid_and_comm(proc, pid)) is not None}
    skip = descendants(proc, exclude_tree, table) if exclude_tree is not None else set()
    found = []
    for pid, (_, comm) in sorted(table.items()):
        if pid in skip or comm in ignore:
            continue
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or a process we may not look into
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if any(fnmatch.fnmatchcase(target, p) for p in patterns):
                found.append((pid, comm, target))
                break
    return found


@dataclass
class IdleWatch:
    """The signs of a job, asked together; each source can be left out (``None``)."""

    patterns: tuple[str, ...] = ("/dev/nvidia[0-9]*",)
    proc: str = "/proc"
    exclude_tree: int | None = None  # the running check's pid: it and its benchmark workers are no job
    slurm_node: str | None = None
    scheduler_poll_s: float = 5.0
    kube_pods: Callable[[], list[str]] | None = None  # GPU pods bound to this node
    clock: Callable[[], float] = time.monotonic
    _asked_at: float = field(default=-1e18, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    def busy(self, every_source: bool = True) -> Busy | None:
        """The first sign of a job, or None when the node is idle. ``every_source``: ask the scheduler
        even if it was asked less than ``scheduler_poll_s`` ago (the first question of a run)."""
        procs = gpu_processes(self.patterns, self.proc, self.exclude_tree)
        if procs:
            pid, comm, dev = procs[0]
            more = f" (+{len(procs) - 1} more)" if len(procs) > 1 else ""
            return Busy("gpu_process", f"process {pid} ({comm}) holds {dev} open{more}")
        if not (every_source or self.clock() - self._asked_at >= self.scheduler_poll_s):
            return None
        self._asked_at = self.clock()
        if self.slurm_node:
            from ccdiag.health.slurm import SlurmError, allocated

            try:
                why = allocated(self.slurm_node)
            except SlurmError as exc:
                # no answer from Slurm is no sign of a job: the GPU-process sign still guards the job
                self.errors.append(str(exc))
                why = None
            if why:
                return Busy("slurm", why)
        if self.kube_pods is not None:
            from ccdiag.health.kube import KubeError

            try:
                pods = self.kube_pods()
            except KubeError as exc:
                self.errors.append(str(exc))
                pods = []
            if pods:
                return Busy("kubernetes", f"GPU pod {pods[0]} on the node" + (f" (+{len(pods) - 1} more)" if len(pods) > 1 else ""))
        return None


__all__ = ["Busy", "GPU_SERVICES", "IdleWatch", "descendants", "gpu_processes"]
