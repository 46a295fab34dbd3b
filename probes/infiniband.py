"""InfiniBand / RoCE devices and ports from /sys/class/infiniband.

Why sysfs and not ``ibstat``: the attributes are there without infiniband-diags installed, they
read without root, and the counters can be sampled twice cheaply to judge their change over a
window. Formats, as the kernel's ib_core writes them (and as recorded in real trees):

* ``state`` "4: ACTIVE", ``phys_state`` "5: LinkUp" (some mlx5 trees show "4: ACTIVE" there too);
* ``rate`` "400 Gb/sec (4X NDR)", "100 Gb/sec (2X HDR)" (a 4X HDR port trained at 2X width),
  "40 Gb/sec (4X QDR)", "25 Gb/sec (1X EDR)"; the speed name is absent for plain SDR;
* ``lid`` / ``sm_lid`` in hex ("0x1a");
* ``gids/<i>`` 39-character GIDs, all zeros for unused entries; ``gid_attrs/types/<i>`` and
  ``gid_attrs/ndevs/<i>`` fail with EINVAL for unused entries (and ndevs for every IB-link GID);
* ``counters/*`` and ``hw_counters/*`` integers; a counter the device cannot provide fails with
  EINVAL or reads "N/A (no PMA)". ``port_xmit_data``/``port_rcv_data`` count 4-byte words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccdiag.host.door import Host, HostReadError
from ccdiag.core.readings import ReadError
from ccdiag.probes.registry import PROBE_INFINIBAND, ProbeUnavailable, probe
from ccdiag.probes._sysfs import BDF_RE, MAX_DECIMAL_DIGITS, attr, decimal, listing, parse_int, read_error

NAME = PROBE_INFINIBAND
TIMEOUT_S = 10.0

IB_CLASS = "/sys/class/infiniband"

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"

_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec\s*\((\d+)X(?:\s+([A-Za-z0-9]+))?\)")
# greedy and stripped after: a lazy ``(\S.*?)\s*$`` is quadratic in a run of trailing spaces
_STATE_RE = re.compile(r"^\s*([0-9]+)\s*:\s*(\S.*)$")


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
    rate_gbit_s: float | None = None  # 400.0 from "400 Gb/sec (4X NDR)"
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


# -- parsers (pure) ------------------------------------------------------------------------------
def parse_state(text: str | None) -> tuple[int | None, str | None]:
    """(4, "ACTIVE") from "4: ACTIVE"; (None, text) when there is no numeric prefix."""
    if text is None or not text.strip():
        return None, None
    m = _STATE_RE.match(text)
    if not m or decimal(m.group(1)) is None:
        return None, text.strip()
    return decimal(m.group(1)), m.group(2).strip()


def parse_rate(text: str | None) -> tuple[float | None, int | None, str | None]:
    """(Gb/s, lanes, speed name) from "400 Gb/sec (4X NDR)"; Nones when unparseable."""
    if not text:
        return None, None, None
    m = _RATE_RE.match(text)
    if not m or decimal(m.group(2)) is None or len(m.group(1)) > MAX_DECIMAL_DIGITS:
        return None, None, None
    return float(m.group(1)), decimal(m.group(2)), (m.group(3).upper() if m.group(3) else None)


def parse_counter(text: str) -> tuple[int | None, str | None]:
    """(value, None) for an integer counter, else (None, why): "N/A (no PMA)" is a counter the
    port management agent does not provide; anything else non-numeric is garbage."""
    s = text.strip()
    if decimal(s) is not None:
        return decimal(s), None
    if s.upper().startswith("N/A"):
        return None, f"counter not provided: {s!r}"
    return None, f"not an integer: {s[:40]!r}"


def parse_hex_int(text: str | None) -> int | None:
    """LIDs are written in hex ("0x1a"); accept decimal too."""
    if text is None:
        return None
    s = text.strip().lower()
    if len(s) > MAX_DECIMAL_DIGITS + 2:
        return None
    try:
        return int(s, 16) if s.startswith("0x") else int(s)
    except ValueError:
        return None


# -- reading -------------------------------------------------------------------------------------
def _read_counters(host: Host, directory: str, errors: list[ReadError], required: bool) -> dict[str, int] | None:
    names = listing(host, directory, errors)
    if names is None:
        if required:
            errors.append(ReadError(directory, "missing", "no counters directory"))
        return None
    values: dict[str, int] = {}
    for name in names:
        path = f"{directory}/{name}"
        try:
            text = host.read_attr(path)
        except HostReadError as exc:
            errors.append(read_error(exc))
            continue
        value, why = parse_counter(text)
        if value is None:
            kind = "not_supported" if why and why.startswith("counter not provided") else "parse"
            errors.append(ReadError(path, kind, why or ""))
            continue
        values[name] = value
    return values


def _read_gids(host: Host, port_dir: str, errors: list[ReadError]) -> tuple[Gid, ...]:
    names = listing(host, f"{port_dir}/gids", errors)
    if not names:
        return ()
    gids: list[Gid] = []
    for name in sorted(names, key=lambda n: (len(n), n)):
        index = parse_int(name)
        if index is None:
            continue
        gid = attr(host, f"{port_dir}/gids/{name}", errors)
        if not gid or gid == ZERO_GID:
            continue
        # an IB-link GID has no netdev (EINVAL): absence, not a fault
        gtype = _attr_quiet(host, f"{port_dir}/gid_attrs/types/{name}")
        ndev = _attr_quiet(host, f"{port_dir}/gid_attrs/ndevs/{name}")
        gids.append(Gid(index=index, gid=gid, type=gtype or None, netdev=ndev or None))
    return tuple(gids)


def _attr_quiet(host: Host, path: str) -> str | None:
    try:
        return host.read_attr(path)
    except HostReadError:
        return None


def _read_port(host: Host, dev_dir: str, name: str) -> IbPort:
    port_dir = f"{dev_dir}/ports/{name}"
    errors: list[ReadError] = []
    state_code, state = parse_state(attr(host, f"{port_dir}/state", errors, optional=False))
    phys_code, phys = parse_state(attr(host, f"{port_dir}/phys_state", errors))
    rate_raw = attr(host, f"{port_dir}/rate", errors)
    rate, width, speed = parse_rate(rate_raw)
    if rate_raw and rate is None:
        errors.append(ReadError(f"{port_dir}/rate", "parse", f"unrecognised rate {rate_raw!r}"))
    return IbPort(
        port=int(name), state=state, state_code=state_code, phys_state=phys, phys_state_code=phys_code,
        rate_gbit_s=rate, rate_raw=rate_raw, width=width, speed_name=speed,
        link_layer=attr(host, f"{port_dir}/link_layer", errors),
        lid=parse_hex_int(attr(host, f"{port_dir}/lid", errors)),
        sm_lid=parse_hex_int(attr(host, f"{port_dir}/sm_lid", errors)),
        gids=_read_gids(host, port_dir, errors),
        counters=_read_counters(host, f"{port_dir}/counters", errors, required=True),
        hw_counters=_read_counters(host, f"{port_dir}/hw_counters", errors, required=False),
        errors=tuple(errors),
    )


def _pci_bdf(host: Host, dev_dir: str) -> str | None:
    try:
        real = host.realpath(f"{dev_dir}/device")
    except HostReadError:
        return None
    if not host.exists(real):
        return None
    name = real.rsplit("/", 1)[-1]
    return name if BDF_RE.match(name) else None


def _read_device(host: Host, name: str) -> IbDevice:
    dev_dir = f"{IB_CLASS}/{name}"
    errors: list[ReadError] = []
    ports: list[IbPort] = []
    port_names = listing(host, f"{dev_dir}/ports", errors)
    if port_names is None:
        errors.append(ReadError(f"{dev_dir}/ports", "missing", "device has no ports directory"))
    for pname in sorted(port_names or [], key=lambda n: (len(n), n)):
        if decimal(pname) is not None:  # "²" passes isdigit() and fails int()
            ports.append(_read_port(host, dev_dir, pname))
    netdevs = set(listing(host, f"{dev_dir}/device/net") or [])
    for port in ports:
        netdevs.update(g.netdev for g in port.gids if g.netdev)
    return IbDevice(
        name=name, pci_bdf=_pci_bdf(host, dev_dir),
        fw_ver=attr(host, f"{dev_dir}/fw_ver", errors),
        board_id=attr(host, f"{dev_dir}/board_id", errors),
        hca_type=attr(host, f"{dev_dir}/hca_type", errors),
        node_guid=attr(host, f"{dev_dir}/node_guid", errors),
        node_type=attr(host, f"{dev_dir}/node_type", errors),
        netdevs=tuple(sorted(netdevs)), ports=tuple(ports), errors=tuple(errors),
    )


@probe(order=40, what="InfiniBand ports", counters=True)
def collect(host: Host) -> IbObservation:
    """Every RDMA device and port the kernel knows."""
    try:
        names = host.list_dir(IB_CLASS)
    except HostReadError as exc:
        if exc.kind == "missing":
            raise ProbeUnavailable(f"no RDMA devices: {IB_CLASS} absent") from None
        raise ProbeUnavailable(f"no RDMA devices readable: {IB_CLASS}: {exc.message}") from None
    # a name the kernel cannot give a device ("", ".", "..", one with a "/": only a corrupted
    # snapshot or tree lists one) would name the class directory or another path: read as an error
    bad = [n for n in names if not n or n in (".", "..") or "/" in n]
    names = [n for n in names if n not in bad]
    errors = tuple(ReadError(f"{IB_CLASS}/{n}", "invalid", f"not a device name: {n!r}") for n in bad)
    if not names:
        raise ProbeUnavailable(f"no RDMA devices: {IB_CLASS} is empty" if not bad else
                               f"no RDMA devices: {IB_CLASS} lists only invalid names {bad!r}")
    return IbObservation(devices=tuple(_read_device(host, n) for n in names), errors=errors)
