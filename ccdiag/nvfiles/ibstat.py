"""``ibstat`` output: each RDMA device (``CA 'mlx5_0'``) and its ports' state.

ibstat prints, per device, ``CA type``, ``Firmware version``, ``Node GUID`` and per port
``State``, ``Physical state``, ``Rate`` (a number of Gb/s, without the width and speed name that
sysfs's ``rate`` carries), ``Base lid``, ``SM lid`` and ``Link layer``. The bug report runs it from
R580 on. Formats: infiniband-diags ``ibstat.c`` (state and physical-state words are the same names
sysfs prints after the number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_KV = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")
#: ib_core's numbers for the words ibstat prints (include/rdma/ib_verbs.h, ib_port_state / phys state)
STATE_CODES = {"Down": 1, "Initializing": 2, "Armed": 3, "Active": 4, "Active_defer": 5}
STATE_SYSFS = {"Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED", "Active": "ACTIVE", "Active_defer": "ACTIVE_DEFER"}
PHYS_CODES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
              "LinkErrorRecovery": 6, "Phy Test": 7}
MAX_DEVICES = 4096


@dataclass
class IbstatPort:
    port: int
    values: dict[str, str] = field(default_factory=dict)


@dataclass
class IbstatDevice:
    name: str
    values: dict[str, str] = field(default_factory=dict)
    ports: list[IbstatPort] = field(default_factory=list)


def parse_ibstat(lines: list[str]) -> list[IbstatDevice]:
    devices: list[IbstatDevice] = []
    dev: IbstatDevice | None = None
    port: IbstatPort | None = None
    for line in lines:
        m = _CA.match(line.strip())
        if m:
            if len(devices) >= MAX_DEVICES:
                break
            dev = IbstatDevice(m.group("name"))
            devices.append(dev)
            port = None
            continue
        if dev is None:
            continue
        p = _PORT.match(line)
        if p:
            port = IbstatPort(int(p.group("port")))
            dev.ports.append(port)
            continue
        kv = _KV.match(line)
        if kv:
            (port.values if port is not None else dev.values)[kv.group("key")] = kv.group("value")
    return devices
