"""Was a rank kept off the CPU while it measured? Its CPU time against the wall time of its exchanges.

Why: a rank that is stopped (SIGSTOP, a debugger, a checkpointing tool) or throttled (its cgroup's
``cpu.max`` / ``cpu.cfs_quota_us`` quota spent) moves no data while it is off the CPU, so every pair
it takes part in reads slow: a healthy network named as two or three slow links. The rank itself
can tell: while it waits for an exchange it polls (``sched_yield``), so it is always either running
or ready to run, unless something holds it off the CPU.

Three readings per exchange, all of this thread:

* wall time (``time.perf_counter``) and CPU time (``time.thread_time``), the plain ratio;
* ``/proc/thread-self/schedstat``: time on a CPU plus time *waiting* for one. A busy host (more
  runnable threads than cores) makes a rank wait, not stop: this sum stays at the wall time, so a
  loaded machine is not a starved rank. A stopped rank is neither running nor waiting: the sum falls;
* the rank's cgroup ``cpu.stat`` throttled time, where it can be read: a throttled thread counts as
  waiting in ``schedstat``, so its throttled time is taken off the sum.

Threshold (:data:`STARVED_BELOW`): a rank that was on or ready for a CPU less than half of the wall
time of its exchanges was held off it. Half: a healthy polling rank reads above 0.95 on a loaded
machine; a rank stopped or throttled a tenth of the time is not what made a pair slow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: below this fraction of an exchange's wall time on a CPU or waiting for one, the rank was starved
STARVED_BELOW = 0.5
#: less wall time than this in exchanges is too little to judge (a few small messages)
MIN_WALL_S = 0.2


def _schedstat_s() -> float | None:
    """Seconds this thread ran on a CPU plus seconds it waited for one."""
    for path in ("/proc/thread-self/schedstat", "/proc/self/schedstat"):
        try:
            with open(path) as fh:
                run_ns, wait_ns = fh.read().split()[:2]
            return (int(run_ns) + int(wait_ns)) / 1e9
        except (OSError, ValueError):
            continue
    return None


def parse_throttled_s(cpu_stat: str) -> float | None:
    """Seconds throttled from a cgroup's ``cpu.stat``: v2 ``throttled_usec``, v1 ``throttled_time``
    (nanoseconds); None when neither is there."""
    fields = {}
    for line in cpu_stat.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1])
    if "throttled_usec" in fields:
        return fields["throttled_usec"] / 1e6
    if "throttled_time" in fields:
        return fields["throttled_time"] / 1e9
    return None


def cgroup_cpu_stat_path(proc_cgroup: str, root: str = "/sys/fs/cgroup") -> list[str]:
    """Where this process's cgroup keeps ``cpu.stat``, from ``/proc/self/cgroup``: the v1 ``cpu``
    controller's hierarchy, else the v2 unified one (``0::/path``)."""
    out = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "cpu" in controllers.split(","):
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                out.append(f"{root}/{mount}{path.rstrip('/')}/cpu.stat")
        elif controllers == "":
            out.append(f"{root}{path.rstrip('/')}/cpu.stat")
            out.append(f"{root}/unified{path.rstrip('/')}/cpu.stat")
    return out


def _throttled_s() -> float | None:
    try:
        with open("/proc/self/cgroup") as fh:
            paths = cgroup_cpu_stat_path(fh.read())
    except OSError:
        return None
    for path in paths:
        try:
            with open(path) as fh:
                value = parse_throttled_s(fh.read())
        except OSError:
            continue
        if value is not None:
            return value
    return None


@dataclass
class CpuTally:
    """Sums over this rank's exchanges: wall, CPU, on-or-waiting-for-a-CPU, throttled seconds
    (None where the reading is not available here)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    sched_s: float | None = 0.0
    throttled_s: float | None = 0.0

    def start(self) -> tuple:
        return time.perf_counter(), time.thread_time(), _schedstat_s(), _throttled_s()

    def stop(self, began: tuple) -> None:
        w0, c0, s0, t0 = began
        w1, c1, s1, t1 = self.stop_readings()
        self.wall_s += w1 - w0
        self.cpu_s += c1 - c0
        self.sched_s = None if self.sched_s is None or s0 is None or s1 is None else self.sched_s + (s1 - s0)
        self.throttled_s = None if self.throttled_s is None or t0 is None or t1 is None else \
            self.throttled_s + max(0.0, t1 - t0)

    @staticmethod
    def stop_readings() -> tuple:
        return time.perf_counter(), time.thread_time(), _schedstat_s(), _throttled_s()

    def add(self, other: "CpuTally") -> None:
        self.wall_s += other.wall_s
        self.cpu_s += other.cpu_s
        self.sched_s = None if self.sched_s is None or other.sched_s is None else self.sched_s + other.sched_s
        self.throttled_s = None if self.throttled_s is None or other.throttled_s is None else \
            self.throttled_s + other.throttled_s

    def to_json(self) -> dict:
        return {"wall_s": round(self.wall_s, 6), "cpu_s": round(self.cpu_s, 6),
                "sched_s": None if self.sched_s is None else round(self.sched_s, 6),
                "throttled_s": None if self.throttled_s is None else round(self.throttled_s, 6)}


def available_fraction(t: dict) -> float | None:
    """Of the wall time of a tally (:meth:`CpuTally.to_json`), the fraction the rank was on a CPU
    or ready for one and not throttled; None when it cannot be told (no schedstat, too little time)."""
    wall = t.get("wall_s") or 0.0
    if wall < MIN_WALL_S or t.get("sched_s") is None:
        return None
    avail = t["sched_s"] - (t.get("throttled_s") or 0.0)
    return max(0.0, min(1.0, avail / wall))


def starved(t: dict) -> bool:
    frac = available_fraction(t)
    return frac is not None and frac < STARVED_BELOW
