"""InfiniBand / RoCE devices and ports from /sys/class/infiniband."""

from __future__ import annotations

from dataclasses import dataclass

from ccdiag.model import ReadError

NAME = "infiniband"
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None = None  # "IB/RoCE v1" | "RoCE v2"
    netdev: str | None = None


@dataclass(frozen=True)
class IbPort:
    port: int
    state: str | None = None  # "ACTIVE", "DOWN", "INIT", "ARMED" (text part of "4: ACTIVE")
    state_code: int | None = None
    phys_state: str | None = None  # "LinkUp", "Polling", "Disabled", ...
    phys_state_code: int | None = None
    rate_gbps: float | None = None  # 400.0 from "400 Gb/sec (4X NDR)"
    rate_raw: str | None = None
    width: int | None = None  # lanes, 4 from "4X"
    speed_name: str | None = None  # "NDR", "HDR", ...
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    lid: int | None = None
    sm_lid: int | None = None
    gids: tuple[Gid, ...] = ()
    counters: dict[str, int] | None = None  # ports/N/counters/*
    hw_counters: dict[str, int] | None = None  # ports/N/hw_counters/*
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class IbDevice:
    name: str  # "mlx5_0"
    pci_bdf: str | None = None
    fw_ver: str | None = None
    board_id: str | None = None
    hca_type: str | None = None
    node_guid: str | None = None
    node_type: str | None = None
    netdevs: tuple[str, ...] = ()
    ports: tuple[IbPort, ...] = ()
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class IbObservation:
    devices: tuple[IbDevice, ...] = ()
    errors: tuple[ReadError, ...] = ()


def collect(host) -> IbObservation:  # implemented by the sysfs probes work
    raise NotImplementedError
