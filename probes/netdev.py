"""Network interfaces: addresses, state, speed, MTU, driver, PCI device, virtual or physical."""

from __future__ import annotations

from dataclasses import dataclass

from ccdiag.model import ReadError

NAME = "netdev"
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Address:
    family: str  # "inet" | "inet6"
    address: str
    netmask: str | None = None


@dataclass(frozen=True)
class NetInterface:
    name: str
    up: bool | None = None
    operstate: str | None = None  # "up", "down", "unknown" ...
    speed_mbps: int | None = None  # None when unknown (psutil 0, sysfs -1)
    mtu: int | None = None
    mac: str | None = None
    addresses: tuple[Address, ...] = ()
    driver: str | None = None
    pci_bdf: str | None = None
    virtual: bool | None = None
    ib_device: str | None = None  # the RDMA device this netdev belongs to, if any
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class NetdevObservation:
    interfaces: tuple[NetInterface, ...] = ()
    errors: tuple[ReadError, ...] = ()


def collect(host) -> NetdevObservation:  # implemented by the sysfs probes work
    raise NotImplementedError
