"""PCIe links of every GPU, NIC and NVSwitch and of every bridge on their path to the root port."""

from __future__ import annotations

from dataclasses import dataclass, field

from ccdiag.model import ReadError

NAME = "pcie"
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PcieDevice:
    """One PCI function. Link values are those of the link *above* this function (its upstream
    port); for a root port they are the link below it, as sysfs reports them."""

    bdf: str  # "0000:18:00.0"
    kind: str  # "gpu" | "nic" | "nvswitch" | "bridge" | "root_port" | "other"
    vendor_id: str | None = None  # "0x10de"
    device_id: str | None = None
    class_code: str | None = None  # "0x030200"
    driver: str | None = None
    numa_node: int | None = None  # None when sysfs says -1
    parent: str | None = None  # BDF of the bridge above, None under a host bridge
    root_complex: str | None = None  # "pci0000:17"
    path: tuple[str, ...] = ()  # BDFs from the root port down to this device (inclusive)
    current_link_speed_gts: float | None = None
    max_link_speed_gts: float | None = None
    current_link_width: int | None = None
    max_link_width: int | None = None
    current_link_speed_raw: str | None = None  # "16.0 GT/s PCIe" exactly as read
    max_link_speed_raw: str | None = None
    aer_correctable: dict[str, int] | None = None  # aer_dev_correctable counters
    aer_fatal: dict[str, int] | None = None
    aer_nonfatal: dict[str, int] | None = None
    acs_ctrl: int | None = None  # ACS control register (bridges), None when absent/unreadable
    acs_enabled: tuple[str, ...] = ()  # names of enabled ACS features (e.g. "SrcValid", "ReqRedir")
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class PcieObservation:
    devices: tuple[PcieDevice, ...] = ()
    errors: tuple[ReadError, ...] = ()


def collect(host) -> PcieObservation:  # implemented by the sysfs probes work
    raise NotImplementedError
