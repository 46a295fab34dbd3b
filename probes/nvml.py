"""GPU inventory and health through NVML (driver/CUDA versions, per-GPU health, NVLinks, P2P)."""

from __future__ import annotations

from dataclasses import dataclass

from ccdiag.model import ReadError

NAME = "nvml"
TIMEOUT_S = 15.0


@dataclass(frozen=True)
class NvLink:
    """One NVLink of one GPU. Counters are lifetime totals; checks judge their change."""

    link: int
    active: bool | None
    version: int | None = None
    remote_bus_id: str | None = None  # normalised BDF of the far end (a GPU or an NVSwitch)
    remote_device_type: str | None = None  # "gpu" | "switch" | "ibmnpu" | None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class ComputeProcess:
    pid: int
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML sees it. ``failed`` is set (with the error class) when the GPU is lost or
    hung; the fields read before that stay filled."""

    index: int
    uuid: str | None = None
    name: str | None = None
    serial: str | None = None
    bus_id: str | None = None  # normalised BDF, e.g. "0000:18:00.0"
    numa_node: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    persistence_mode: bool | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    ecc_mode_current: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    clock_event_reasons: int | None = None  # raw bitmask
    clock_event_names: tuple[str, ...] = ()  # e.g. ("hw_slowdown", "sw_thermal_slowdown")
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # of the link (GPU and host side together)
    pcie_gen_device_max: int | None = None  # of the GPU alone
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_counter: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    compute_processes: tuple[ComputeProcess, ...] = ()
    fabric_state: str | None = None  # "not_supported" | "not_started" | "in_progress" | "completed"
    fabric_status: str | None = None  # NVML return status of fabric registration, as text
    recovery_action: str | None = None  # "none" | "reset" | "reboot" | "drain_p2p" | "drain_and_reset"
    failed: str | None = None  # error class when the GPU is lost/hung (see ccdiag.nvmlcall)
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class P2PStatus:
    """One ordered GPU pair from nvmlDeviceGetP2PStatus: "OK", "NS" (not supported), "CNS",
    "GNS", "TNS", "DR" (disabled by registry), "U" (unknown)."""

    gpu_a: int
    gpu_b: int
    read: str | None = None
    write: str | None = None
    nvlink: str | None = None
    atomics: str | None = None
    prop: str | None = None


@dataclass(frozen=True)
class NvmlObservation:
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.8"
    nvml_version: str | None = None
    device_count: int | None = None
    gpus: tuple[Gpu, ...] = ()
    p2p: tuple[P2PStatus, ...] = ()
    errors: tuple[ReadError, ...] = ()


def collect(host) -> NvmlObservation:  # implemented by the nvml probe work
    raise NotImplementedError
