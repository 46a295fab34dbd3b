"""The node around the GPUs: kernel, OS, CPUs and NUMA, modules, fabric manager, limits, IOMMU."""

from __future__ import annotations

from dataclasses import dataclass

from ccdiag.model import ReadError

NAME = "system"
TIMEOUT_S = 8.0


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpulist: str | None = None  # "0-47,96-143"


@dataclass(frozen=True)
class SystemObservation:
    hostname: str | None = None
    kernel: str | None = None
    os_release: str | None = None  # PRETTY_NAME
    cpu_count: int | None = None
    numa_nodes: tuple[NumaNode, ...] = ()
    modules: tuple[str, ...] = ()  # loaded module names from /proc/modules
    nvidia_driver_version: str | None = None  # /proc/driver/nvidia/version or module version
    fabric_manager: str | None = None  # systemctl is-active nvidia-fabricmanager: "active", ...
    shm_bytes: int | None = None  # size of /dev/shm
    memlock_soft_bytes: int | None = None  # None with memlock_unlimited True means unlimited
    memlock_hard_bytes: int | None = None
    memlock_unlimited: bool | None = None
    iommu: str | None = None  # "off" | "passthrough" | "translated" | None when unknown
    cmdline: str | None = None
    environ: dict[str, str] | None = None  # NCCL_*/CUDA_* seen by the run
    errors: tuple[ReadError, ...] = ()


def collect(host) -> SystemObservation:  # implemented by the sysfs probes work
    raise NotImplementedError
