"""Kernel-log events that matter to GPU and fabric health: XIDs, "fallen off the bus", link flaps."""

from __future__ import annotations

from dataclasses import dataclass

from ccdiag.model import ReadError

NAME = "kmsg"
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # "xid" | "fallen_off_bus" | "ib_link_down" | "ib_link_up" | "aer" | "nvlink"
    message: str
    time_s: float | None = None  # seconds since boot, as the kernel stamps it
    bdf: str | None = None
    code: int | None = None  # the XID number
    device: str | None = None  # "mlx5_0", "ib0", ...
    pid: int | None = None


@dataclass(frozen=True)
class KmsgObservation:
    events: tuple[KernelEvent, ...] = ()
    lines_scanned: int = 0
    source: str | None = None  # "/dev/kmsg" | "dmesg" | "journalctl"
    uptime_s: float | None = None  # from /proc/uptime at read time, to place events in time
    errors: tuple[ReadError, ...] = ()


def collect(host) -> KmsgObservation:  # implemented by the sysfs probes work
    raise NotImplementedError
