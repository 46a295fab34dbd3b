"""Network interfaces: addresses, state, speed, MTU, driver, PCI device, virtual or physical.

Why both psutil and sysfs: psutil (through the door's ``net_interfaces()``) gives the addresses
and a portable up/MTU view; sysfs adds what NCCL's interface choice depends on: whether the
interface is virtual (its device path is under /sys/devices/virtual: docker0, bridges, lo),
which PCI function and driver carry it, and which RDMA device it belongs to (RoCE / IPoIB).
``speed`` reads -1 or fails with EINVAL when the link is down or the driver does not say; both
become None. For the interfaces of RDMA devices, two settings RoCE on several rails depends on are
read too: reverse-path filtering (``rp_filter``: strict filtering drops the replies of rails that
share a subnet) and, where the driver exposes it, ECN per priority (mlx5's ``ecn`` directory).
"""

from __future__ import annotations

from dataclasses import dataclass

from ccdiag.host.door import Host, HostReadError
from ccdiag.core.readings import ReadError
from ccdiag.probes.registry import PROBE_NETDEV, ProbeUnavailable, probe
from ccdiag.probes._sysfs import BDF_RE, attr, link_basename, listing, parse_int, read_error

NAME = PROBE_NETDEV
TIMEOUT_S = 5.0

NET_CLASS = "/sys/class/net"


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
    #: of an RDMA device's interface: /proc/sys/net/ipv4/conf/<name>/rp_filter (0 off, 1 strict, 2 loose)
    rp_filter: int | None = None
    #: /proc/sys/net/ipv4/conf/<name>/arp_ignore: 0 answers ARP for any local address on any interface
    #: (ARP flux when several rails share a subnet)
    arp_ignore: int | None = None
    #: of an RDMA device's interface, where the driver exposes it (mlx5: ecn/roce_np|roce_rp/enable/<prio>):
    #: {"roce_np": (priorities with ECN on), "roce_rp": (...)}; None where sysfs has no ecn directory
    ecn: dict[str, tuple[int, ...]] | None = None


@dataclass(frozen=True)
class NetdevObservation:
    interfaces: tuple[NetInterface, ...] = ()
    errors: tuple[ReadError, ...] = ()
    rp_filter_all: int | None = None  # /proc/sys/net/ipv4/conf/all/rp_filter: the kernel uses max(all, interface)
    arp_ignore_all: int | None = None  # /proc/sys/net/ipv4/conf/all/arp_ignore: likewise the larger applies


# -- parsers (pure) ------------------------------------------------------------------------------


def addresses_from_psutil(items: list[dict] | None) -> tuple[tuple[Address, ...], str | None]:
    """(inet/inet6 addresses, link-layer address) from the door's psutil facts of one interface."""
    addrs: list[Address] = []
    mac = None
    for item in items or []:
        family = item.get("family")
        address = item.get("address")
        if not address:
            continue
        if family in ("inet", "inet6"):
            addrs.append(Address(family, address, item.get("netmask") or None))
        elif family == "link":
            mac = address
    return tuple(addrs), mac


# -- reading -------------------------------------------------------------------------------------
def _number(host: Host, path: str, errors: list[ReadError], quiet_kinds: tuple[str, ...] = ("missing",)) -> int | None:
    """An integer attribute; a value that is not an integer is a parse error on that file."""
    try:
        text = host.read_attr(path)
    except HostReadError as exc:
        if exc.kind not in quiet_kinds:
            errors.append(read_error(exc))
        return None
    value = parse_int(text)
    if value is None:
        errors.append(ReadError(path, "parse", f"not an integer: {text[:40]!r}"))
    return value


def _speed(host: Host, path: str, errors: list[ReadError]) -> int | None:
    # EINVAL: link down or a virtual device without a speed; absence is normal too
    value = _number(host, path, errors, ("missing", "invalid"))
    return value if value is not None and value > 0 else None


def _read_interface(host: Host, name: str, facts: dict, in_sysfs: bool) -> NetInterface:
    errors: list[ReadError] = []
    addrs, psutil_mac = addresses_from_psutil(facts.get("addrs", {}).get(name))
    stats = facts.get("stats", {}).get(name) or {}
    operstate = mtu = speed = mac = driver = bdf = ib_device = None
    virtual = None
    if in_sysfs:
        base = f"{NET_CLASS}/{name}"
        operstate = attr(host, f"{base}/operstate", errors)
        mtu = _number(host, f"{base}/mtu", errors)
        speed = _speed(host, f"{base}/speed", errors)
        mac = attr(host, f"{base}/address", errors)
        try:
            real = host.realpath(base)
            virtual = real.startswith("/sys/devices/virtual/")
        except HostReadError as exc:
            errors.append(read_error(exc))
        if host.exists(f"{base}/device"):
            try:
                # the nearest PCI function on the device path (virtio: .../0000:00:03.0/virtio1)
                parts = host.realpath(f"{base}/device").split("/")
                bdf = next((p for p in reversed(parts) if BDF_RE.match(p)), None)
            except HostReadError as exc:
                errors.append(read_error(exc))
            driver = link_basename(host, f"{base}/device/driver")
            ib_names = listing(host, f"{base}/device/infiniband")
            ib_device = ib_names[0] if ib_names else None
    rp_filter = arp_ignore = ecn = None
    if ib_device:  # what RoCE on several rails depends on: reverse-path filtering and ECN
        rp_filter = _number(host, f"/proc/sys/net/ipv4/conf/{name}/rp_filter", errors)
        arp_ignore = _number(host, f"/proc/sys/net/ipv4/conf/{name}/arp_ignore", errors)
        ecn = _ecn(host, f"{NET_CLASS}/{name}/ecn", errors)
    up = stats.get("isup")
    if up is None and operstate is not None:
        up = operstate == "up"
    if mtu is None:
        mtu = stats.get("mtu") or None
    if speed is None and stats.get("speed_mbps"):
        speed = int(stats["speed_mbps"]) or None
    return NetInterface(
        name=name, up=up, operstate=operstate, speed_mbps=speed, mtu=mtu, mac=mac or psutil_mac,
        addresses=addrs, driver=driver, pci_bdf=bdf, virtual=virtual, ib_device=ib_device,
        errors=tuple(errors), rp_filter=rp_filter, arp_ignore=arp_ignore, ecn=ecn,
    )


def _ecn(host: Host, base: str, errors: list[ReadError]) -> dict[str, tuple[int, ...]] | None:
    """{"roce_np": (priorities with ECN on), "roce_rp": (...)} from mlx5's
    ``ecn/<roce_np|roce_rp>/enable/<priority>`` files (the notification point marks, the reaction
    point slows down); None when the driver has no such directory."""
    kinds = listing(host, base)
    if not kinds:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for kind in ("roce_np", "roce_rp"):
        if kind not in kinds:
            continue
        on = []
        for prio in sorted(listing(host, f"{base}/{kind}/enable") or [], key=lambda p: (len(p), p)):
            if prio.isdigit() and _number(host, f"{base}/{kind}/enable/{prio}", errors) == 1:
                on.append(int(prio))
        out[kind] = tuple(on)
    return out or None


#: the kernel's one plain file in /sys/class/net (present once the bonding module is loaded)
BONDING_MASTERS = "bonding_masters"


def _is_plain_file(host: Host, path: str) -> bool:
    """A file, not an interface's directory (or a link to one). A snapshot recorded before files
    here were told apart may not say what ``bonding_masters`` is: it is never an interface."""
    if host.exists(path):
        return not host.is_dir(path)
    return path.rsplit("/", 1)[-1] == BONDING_MASTERS


@probe(order=50, what="network interfaces")
def collect(host: Host) -> NetdevObservation:
    """Every interface psutil or /sys/class/net knows."""
    errors: list[ReadError] = []
    try:
        facts = host.net_interfaces() or {}
    except Exception as exc:  # noqa: BLE001 - psutil can fail in odd containers; sysfs may still answer
        errors.append(ReadError("net_interfaces", "io", f"{type(exc).__name__}: {exc}"))
        facts = {}
    # /sys/class/net also holds plain files (``bonding_masters`` once the bonding module is loaded)
    sysfs_names = [n for n in listing(host, NET_CLASS, errors) or [] if not _is_plain_file(host, f"{NET_CLASS}/{n}")]
    names = set(sysfs_names) | set(facts.get("addrs", {})) | set(facts.get("stats", {}))
    if not names:
        raise ProbeUnavailable(f"no network interfaces: {NET_CLASS} absent and no interface facts")
    in_sysfs = set(sysfs_names)
    interfaces = tuple(_read_interface(host, n, facts, n in in_sysfs) for n in sorted(names))
    rdma = any(i.ib_device for i in interfaces)
    rp_all = _number(host, "/proc/sys/net/ipv4/conf/all/rp_filter", errors) if rdma else None
    arp_all = _number(host, "/proc/sys/net/ipv4/conf/all/arp_ignore", errors) if rdma else None
    return NetdevObservation(interfaces=interfaces, errors=tuple(errors), rp_filter_all=rp_all, arp_ignore_all=arp_all)
