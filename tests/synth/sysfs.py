"""Builders that put a SYNTHESIZED, kernel-shaped sysfs/procfs layout into a snapshot.

Nothing here was read from a machine. The *layout* (directories, symlinks and their relative
targets) and the *value formats* are the kernel's, as seen in real trees: link speeds
"32.0 GT/s PCIe" / "Unknown", widths as plain numbers, ``numa_node`` -1 when unknown, AER files of
"<name> <count>" lines, IB ``state`` "4: ACTIVE", ``phys_state`` "5: LinkUp", ``rate``
"400 Gb/sec (4X NDR)", LIDs in hex, GIDs as eight 4-hex-digit groups, /dev/kmsg records
"pri,seq,usec,flags;message". The values themselves (device ids, GUIDs, counters, addresses) are
made up and illustrative. Snapshots built with :func:`new_snapshot` say ``synthesized: true``.

Probes read the result through :class:`ccdiag.host.door.ReplayHost` exactly as they read a live
machine, symlinks included::

    snap = new_snapshot("hgx-synth-01")
    gpu = add_pci_device(snap, ["pci0000:17", "0000:17:01.0", "0000:18:00.0", "0000:19:00.0",
                                "0000:1b:00.0"], **H100_SXM, numa=0)
    nic = add_pci_device(snap, ["pci0000:17", "0000:17:01.0", "0000:18:00.0", "0000:19:01.0",
                                "0000:1c:00.0"], **CONNECTX7_IB, numa=0)
    add_ib_device(snap, "mlx5_0", "0000:1c:00.0", ports=[IbPortSpec(netdev="ib0")])
    add_netdev(snap, "ib0", pci_bdf="0000:1c:00.0", mtu=4092, speed=400000,
               addresses=[("inet", "10.10.0.11", "255.255.255.0")])
    add_system(snap, modules=DEFAULT_MODULES, nvidia_version="535.104.05")
    add_kmsg(snap, [(812.345678, "NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.")])
    host = ReplayHost(snap)

Bridges on a device's path that were not added explicitly are created with switch defaults
(healthy Gen5 x16, ACS control 0); add them first with :func:`add_pci_bridge` to make one trained
down or ACS-enabled.
"""

from __future__ import annotations

import errno
import posixpath
import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from ccdiag.host.door import resolve_path
from ccdiag.host.snapshot import SnapshotData, base_meta

SYS = "/sys"
PCI_BUS_DEVICES = "/sys/bus/pci/devices"
PCI_DRIVERS = "/sys/bus/pci/drivers"

# -- PCIe link speed strings exactly as sysfs prints them (PCI_SPEED_STRING in the kernel) ---------
GEN1 = "2.5 GT/s PCIe"
GEN2 = "5.0 GT/s PCIe"
GEN3 = "8.0 GT/s PCIe"
GEN4 = "16.0 GT/s PCIe"
GEN5 = "32.0 GT/s PCIe"
GEN6 = "64.0 GT/s PCIe"
LINK_UNKNOWN = "Unknown"  # what current_link_speed reads when the link is down

# -- class codes -----------------------------------------------------------------------------------
CLASS_3D_CONTROLLER = "0x030200"
CLASS_VGA = "0x030000"
CLASS_ETHERNET = "0x020000"
CLASS_INFINIBAND = "0x020700"
CLASS_BRIDGE_OTHER = "0x068000"  # what NVSwitches report
CLASS_PCI_BRIDGE = "0x060400"

# -- device identities (vendor/device ids from the public PCI id list; keyword sets for
#    add_pci_device(**...)) --------------------------------------------------------------------------
H100_SXM = {"vendor": "0x10de", "device": "0x2330", "pci_class": CLASS_3D_CONTROLLER, "driver": "nvidia"}
NVSWITCH_H100 = {"vendor": "0x10de", "device": "0x22a3", "pci_class": CLASS_BRIDGE_OTHER, "driver": "nvidia"}
CONNECTX7_IB = {"vendor": "0x15b3", "device": "0x1021", "pci_class": CLASS_INFINIBAND, "driver": "mlx5_core"}
CONNECTX7_ETH = {"vendor": "0x15b3", "device": "0x1021", "pci_class": CLASS_ETHERNET, "driver": "mlx5_core"}
SWITCH_PORT = {"vendor": "0x1000", "device": "0xc030"}  # a Broadcom PEX890xx-class Gen5 switch
ROOT_PORT = {"vendor": "0x8086", "device": "0x352a"}  # an Intel root port (illustrative id)

#: kernel names of the AER counters, in the order aer_dev_* lists them
AER_CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
AER_UNCORRECTABLE = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
                     "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP",
                     "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked")

#: ACS control bits (same order as ccdiag.probes.pcie.ACS_BITS)
ACS_SV, ACS_TB, ACS_RR, ACS_CR, ACS_UF, ACS_EC, ACS_DT = (1 << i for i in range(7))

#: port counters of an mlx5 InfiniBand port (names as in real trees)
IB_COUNTERS = ("VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
               "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
               "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
               "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
               "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets")
#: hw_counters of an mlx5 port (a subset of what real trees show)
MLX5_HW_COUNTERS = ("duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err",
                    "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
                    "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request",
                    "resp_cqe_error", "resp_cqe_flush_error", "resp_local_length_error",
                    "resp_remote_access_errors", "rnr_nak_retry_err", "rx_atomic_requests",
                    "rx_read_requests", "rx_write_requests")

DEFAULT_MODULES = ("nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia", "mlx5_ib",
                   "ib_uverbs", "ib_core", "mlx5_core", "mlxfw")
_TAINTED = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem")

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


# -- snapshot and primitives -----------------------------------------------------------------------
def new_snapshot(hostname: str = "synth-node", kernel: str = "5.15.0-105-generic", machine: str = "x86_64",
                 description: str | None = None, time_epoch: float | None = None) -> SnapshotData:
    """An empty snapshot whose metadata says it is synthesized. ``time_epoch`` fixes the recording
    time (for reproducible samples and golden files)."""
    meta = base_meta(hostname=hostname, kernel=kernel, machine=machine, source="synthesized", synthesized=True)
    if description:
        meta["description"] = description
    if time_epoch is not None:
        import time as _time

        meta["time_epoch"] = time_epoch
        meta["time"] = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(time_epoch))
    return SnapshotData(meta=meta)


def put_attr(snap: SnapshotData, path: str, value: object, epoch: int = 0) -> None:
    """A sysfs attribute as the kernel writes it: the value and one newline (bytes verbatim)."""
    if isinstance(value, bytes):
        snap.put_file(path, value, epoch)
    else:
        snap.put_file(path, f"{value}\n", epoch)


def put_unreadable(snap: SnapshotData, path: str, kind: str = "permission", epoch: int = 0) -> None:
    """A file that exists but fails to read (``permission``: EACCES, ``invalid``: EINVAL, ``io``)."""
    codes = {"permission": (errno.EACCES, "Permission denied"), "invalid": (errno.EINVAL, "Invalid argument"),
             "io": (errno.EIO, "Input/output error"), "missing": (errno.ENOENT, "No such file or directory")}
    code, message = codes.get(kind, (errno.EIO, "Input/output error"))
    snap.put_error(path, kind, code, message, epoch)


def put_link(snap: SnapshotData, path: str, target_real: str) -> None:
    """A symlink at ``path`` to the real path ``target_real``, written relative as the kernel does."""
    snap.put_link(path, posixpath.relpath(target_real, posixpath.dirname(path)))


def record_command(snap: SnapshotData, argv: Sequence[str], stdout: str = "", rc: int | None = 0,
                   stderr: str = "", duration_s: float = 0.02, timed_out: bool = False,
                   error: str | None = None, epoch: int = 0) -> None:
    """A command's outcome as a recording would hold it (``error="not found"`` for a missing tool)."""
    snap.commands.append({"argv": list(argv), "rc": rc, "stdout": stdout, "stderr": stderr,
                          "duration_s": duration_s, "timed_out": timed_out, "error": error, "epoch": epoch})


def pci_dir(snap: SnapshotData, bdf: str) -> str:
    """The real /sys/devices/... directory of a PCI function added earlier."""
    path = f"{PCI_BUS_DEVICES}/{bdf}"
    if path not in snap.links:
        raise KeyError(f"PCI function {bdf} was not added (add_pci_device first)")
    return resolve_path(path, snap.links.get)


# -- PCI -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Link:
    """A function's link attributes: current and maximum speed strings and widths."""

    cur_speed: str = GEN5
    cur_width: int = 16
    max_speed: str = GEN5
    max_width: int = 16


def _link(value: Link | tuple | None) -> Link | None:
    if value is None or isinstance(value, Link):
        return value
    return Link(*value)


def config_space(vendor: str, device: str, pci_class: str, bridge: bool, acs_ctrl: int | None,
                 size: int = 4096) -> bytes:
    """A configuration space image: header ids and class, and from 0x100 an extended capability
    list holding AER (id 0x0001) and, when ``acs_ctrl`` is given, ACS (id 0x000D) with that
    control value. ``size`` 64 is what a non-root reader gets."""
    buf = bytearray(max(size, 64))
    struct.pack_into("<HH", buf, 0, int(vendor, 16), int(device, 16))
    cls = int(pci_class, 16)
    struct.pack_into("<BBBB", buf, 8, 0xA1, cls & 0xFF, (cls >> 8) & 0xFF, (cls >> 16) & 0xFF)
    buf[0x0E] = 0x01 if bridge else 0x00
    if len(buf) >= 0x200:
        acs_at = 0x148
        struct.pack_into("<I", buf, 0x100, 0x0001 | (2 << 16) | ((acs_at if acs_ctrl is not None else 0) << 20))
        if acs_ctrl is not None:
            struct.pack_into("<IHH", buf, acs_at, 0x000D | (1 << 16), 0x005F, acs_ctrl)
    return bytes(buf[:size])


def _aer_text(names: Iterable[str], total_name: str, overrides: dict[str, int] | None) -> str:
    values = {n: 0 for n in names}
    values.update(overrides or {})
    lines = [f"{n} {v}" for n, v in values.items()]
    lines.append(f"{total_name} {sum(v for v in values.values() if isinstance(v, int))}")
    return "\n".join(lines) + "\n"


def _device_dir(chain: Sequence[str]) -> str:
    if len(chain) < 2 or not chain[0].startswith("pci"):
        raise ValueError("chain must start with the root complex ('pci0000:17') and name at least one BDF")
    return SYS + "/devices/" + "/".join(chain)


def _put_function(snap: SnapshotData, chain: Sequence[str], vendor: str, device: str, pci_class: str,
                  driver: str | None, numa: int | None, link: Link | None, aer: dict | bool | None,
                  acs_ctrl: int | None, config_size: int, bridge: bool,
                  local_cpulist: str | None) -> str:
    real = _device_dir(chain)
    bdf = chain[-1]
    put_attr(snap, f"{real}/vendor", vendor)
    put_attr(snap, f"{real}/device", device)
    put_attr(snap, f"{real}/class", pci_class)
    put_attr(snap, f"{real}/subsystem_vendor", vendor)
    put_attr(snap, f"{real}/numa_node", -1 if numa is None else numa)
    if local_cpulist:
        put_attr(snap, f"{real}/local_cpulist", local_cpulist)
    put_attr(snap, f"{real}/enable", 1)
    if link is not None:
        put_attr(snap, f"{real}/current_link_speed", link.cur_speed)
        put_attr(snap, f"{real}/current_link_width", link.cur_width)
        put_attr(snap, f"{real}/max_link_speed", link.max_speed)
        put_attr(snap, f"{real}/max_link_width", link.max_width)
    if aer is not False:
        aer = aer or {}
        put_attr(snap, f"{real}/aer_dev_correctable",
                 _aer_text(AER_CORRECTABLE, "TOTAL_ERR_COR", aer.get("correctable")).rstrip("\n"))
        put_attr(snap, f"{real}/aer_dev_fatal",
                 _aer_text(AER_UNCORRECTABLE, "TOTAL_ERR_FATAL", aer.get("fatal")).rstrip("\n"))
        put_attr(snap, f"{real}/aer_dev_nonfatal",
                 _aer_text(AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL", aer.get("nonfatal")).rstrip("\n"))
    snap.put_file(f"{real}/config", config_space(vendor, device, pci_class, bridge, acs_ctrl, config_size))
    if driver:
        drv = f"{PCI_DRIVERS}/{driver}"
        snap.put_dir(drv)
        put_link(snap, f"{real}/driver", drv)
        put_link(snap, f"{drv}/{bdf}", real)
    put_link(snap, f"{PCI_BUS_DEVICES}/{bdf}", real)
    return real


def add_pci_bridge(snap: SnapshotData, chain: Sequence[str], *, vendor: str | None = None,
                   device: str | None = None, link: Link | tuple | None = Link(), numa: int | None = 0,
                   acs_ctrl: int | None = 0, aer: dict | bool | None = None, config_size: int = 4096,
                   driver: str | None = "pcieport") -> str:
    """A root port (``len(chain) == 2``) or switch port. ``acs_ctrl`` 0 means ACS present but
    off (the usual GPU-server setting); ``None`` means no ACS capability; e.g.
    ``ACS_SV | ACS_RR | ACS_CR | ACS_UF`` is what a kernel enabling ACS for isolation sets.
    ``config_size=64`` stands for a snapshot recorded without root."""
    ids = ROOT_PORT if len(chain) == 2 else SWITCH_PORT
    return _put_function(snap, chain, vendor or ids["vendor"], device or ids["device"], CLASS_PCI_BRIDGE,
                         driver, numa, _link(link), aer, acs_ctrl, config_size, True, None)


def add_pci_device(snap: SnapshotData, chain: Sequence[str], *, vendor: str, device: str, pci_class: str,
                   driver: str | None = None, numa: int | None = 0,
                   link: Link | tuple | None = Link(), aer: dict | bool | None = None,
                   acs_ctrl: int | None = None, config_size: int = 4096,
                   local_cpulist: str | None = None, bridge_link: Link | tuple | None = None) -> str:
    """A PCI function at the end of ``chain`` = [root complex, root port BDF, switch ports..., BDF].

    ``link`` is (cur_speed, cur_width, max_speed, max_width) or a :class:`Link`; None leaves the
    link files out (a function without a PCIe capability). ``aer`` maps "correctable" / "fatal" /
    "nonfatal" to counter overrides ({"correctable": {"RxErr": 12}}); False leaves the AER files
    out. ``numa`` None writes -1. Bridges of the chain not added before are created with
    ``bridge_link`` (default: this device's max speed and width, fully trained).
    Returns the function's real directory under /sys/devices.
    """
    link = _link(link)
    if bridge_link is None:
        bridge_link = Link(link.max_speed, link.max_width, link.max_speed, link.max_width) if link else Link()
    for i in range(2, len(chain)):
        hop = _device_dir(chain[:i])
        if f"{hop}/class" not in snap.files.get(0, {}):
            add_pci_bridge(snap, chain[:i], link=bridge_link, numa=numa)
    return _put_function(snap, chain, vendor, device, pci_class, driver, numa, link, aer, acs_ctrl,
                         config_size, False, local_cpulist)


# -- InfiniBand ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IbPortSpec:
    """One port of an RDMA device. Counter maps override the defaults (all 0); a str value is
    written verbatim (e.g. "N/A (no PMA)"). ``gids`` entries are (gid, type, netdev); None builds
    the port's link-local GID from the node GUID (types "IB/RoCE v1", and for an Ethernet port a
    "RoCE v2" twin, with ``netdev`` as their ndev). Unused table entries up to ``gid_table_len``
    read as zero GIDs whose types/ndevs fail with EINVAL, as on real ports."""

    port: int = 1
    state: str = "4: ACTIVE"
    phys_state: str = "5: LinkUp"
    rate: str = "400 Gb/sec (4X NDR)"
    link_layer: str = "InfiniBand"
    lid: str = "0x1"
    sm_lid: str = "0x1"
    counters: dict | None = None
    hw_counters: dict | None = None
    with_hw_counters: bool = True
    gids: Sequence[tuple[str, str | None, str | None]] | None = None
    gid_table_len: int = 8
    netdev: str | None = None


def _default_gids(node_guid: str, spec: IbPortSpec) -> list[tuple[str, str | None, str | None]]:
    link_local = "fe80:0000:0000:0000:" + node_guid
    if spec.link_layer == "Ethernet":
        return [(link_local, "IB/RoCE v1", spec.netdev), (link_local, "RoCE v2", spec.netdev)]
    return [(link_local, "IB/RoCE v1", None)]


def add_ib_device(snap: SnapshotData, name: str, pci_bdf: str, *, ports: Sequence[IbPortSpec] = (IbPortSpec(),),
                  fw_ver: str = "28.39.1002", board_id: str = "MT_0000000838", hca_type: str = "MT4129",
                  node_guid: str = "a088:c203:0045:1a2c", node_type: str = "1: CA") -> str:
    """An RDMA device on the PCI function ``pci_bdf`` (added before): the device directory under
    the function, /sys/class/infiniband/<name> and the ``device`` link back to the function.
    Returns the device's real directory."""
    parent = pci_dir(snap, pci_bdf)
    real = f"{parent}/infiniband/{name}"
    put_attr(snap, f"{real}/fw_ver", fw_ver)
    put_attr(snap, f"{real}/board_id", board_id)
    put_attr(snap, f"{real}/hca_type", hca_type)
    put_attr(snap, f"{real}/node_guid", node_guid)
    put_attr(snap, f"{real}/node_type", node_type)
    put_attr(snap, f"{real}/sys_image_guid", node_guid)
    snap.put_link(f"{real}/device", f"../../../{pci_bdf}")
    put_link(snap, f"/sys/class/infiniband/{name}", real)
    for spec in ports:
        pdir = f"{real}/ports/{spec.port}"
        for attr_name in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid"):
            put_attr(snap, f"{pdir}/{attr_name}", getattr(spec, attr_name))
        counters = {n: 0 for n in IB_COUNTERS}
        counters.update(spec.counters or {})
        for cname, value in counters.items():
            put_attr(snap, f"{pdir}/counters/{cname}", value)
        if spec.with_hw_counters:
            hw = {n: 0 for n in MLX5_HW_COUNTERS}
            hw.update(spec.hw_counters or {})
            for cname, value in hw.items():
                put_attr(snap, f"{pdir}/hw_counters/{cname}", value)
        gids = list(spec.gids) if spec.gids is not None else _default_gids(node_guid, spec)
        for index in range(max(spec.gid_table_len, len(gids))):
            if index < len(gids):
                gid, gtype, ndev = gids[index]
                put_attr(snap, f"{pdir}/gids/{index}", gid)
                if gtype:
                    put_attr(snap, f"{pdir}/gid_attrs/types/{index}", gtype)
                else:
                    put_unreadable(snap, f"{pdir}/gid_attrs/types/{index}", "invalid")
                if ndev:
                    put_attr(snap, f"{pdir}/gid_attrs/ndevs/{index}", ndev)
                else:
                    put_unreadable(snap, f"{pdir}/gid_attrs/ndevs/{index}", "invalid")
            else:
                put_attr(snap, f"{pdir}/gids/{index}", ZERO_GID)
                put_unreadable(snap, f"{pdir}/gid_attrs/types/{index}", "invalid")
                put_unreadable(snap, f"{pdir}/gid_attrs/ndevs/{index}", "invalid")
    return real


# -- network interfaces ----------------------------------------------------------------------------
def add_netdev(snap: SnapshotData, name: str, *, pci_bdf: str | None = None, operstate: str = "up",
               mtu: int = 1500, speed: int | str | None = None, address: str = "02:00:00:00:00:01",
               addresses: Sequence[tuple[str, str, str | None]] = (), epoch: int = 0) -> str:
    """A network interface: on a PCI function (``pci_bdf``, which must be added first) or virtual
    (under /sys/devices/virtual/net, like lo, docker0, bridges). ``speed`` None makes the speed
    file fail with EINVAL (virtual devices, some drivers with the link down); -1 is written as
    such. ``addresses`` are (family "inet"/"inet6", address, netmask) for the psutil facts, which
    are added to the snapshot's epoch ``epoch``. Returns the real directory."""
    if pci_bdf is not None:
        real = f"{pci_dir(snap, pci_bdf)}/net/{name}"
        snap.put_link(f"{real}/device", f"../../../{pci_bdf}")
    else:
        real = f"{SYS}/devices/virtual/net/{name}"
    put_attr(snap, f"{real}/operstate", operstate)
    put_attr(snap, f"{real}/mtu", mtu)
    put_attr(snap, f"{real}/address", address)
    put_attr(snap, f"{real}/carrier", 1 if operstate == "up" else 0)
    if speed is None:
        put_unreadable(snap, f"{real}/speed", "invalid")
    else:
        put_attr(snap, f"{real}/speed", speed)
    put_link(snap, f"/sys/class/net/{name}", real)
    facts = snap.net.setdefault(epoch, {"addrs": {}, "stats": {}})
    facts.setdefault("addrs", {})[name] = (
        [{"family": fam, "address": addr, "netmask": mask, "broadcast": None} for fam, addr, mask in addresses]
        + [{"family": "link", "address": address, "netmask": None, "broadcast": None}])
    speed_mbps = speed if isinstance(speed, int) and speed > 0 else 0
    facts.setdefault("stats", {})[name] = {"isup": operstate in ("up", "unknown"), "duplex": 2,
                                           "speed_mbps": speed_mbps, "mtu": mtu, "flags": None}
    return real


# -- the node --------------------------------------------------------------------------------------
def add_system(snap: SnapshotData, *, kernel: str | None = None,
               os_pretty: str = "Ubuntu 22.04.4 LTS",
               numa_cpulists: Sequence[str] = ("0-55,112-167", "56-111,168-223"),
               modules: Sequence[str] = DEFAULT_MODULES, nvidia_version: str | None = "535.104.05",
               fabric_manager: str | None = "active", shm_bytes: int | None = 1 << 40,
               memlock: tuple[str, str] = ("unlimited", "unlimited"),
               cmdline: str = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt",
               iommu_class: Sequence[str] = ("dmar0", "dmar1"), iommu_group_type: str | None = "identity",
               environ: dict[str, str] | None = None, open_kernel_module: bool = False,
               libibverbs: str | None = None, nccl_conf: str | None = None) -> None:
    """The /proc and /sys facts the system probe reads, plus the fabric manager command, the
    /dev/shm size and the recorded environment. ``fabric_manager`` None records systemctl as not
    found; ``memlock`` is (soft, hard) as /proc/<pid>/limits prints them ("8388608" or
    "unlimited"); ``nvidia_version`` None leaves the driver out. ``open_kernel_module``: the banner
    of the open GPU kernel modules (the form of a real one: NVIDIA/NVSentinel#155); ``libibverbs``:
    the file libibverbs.so.1 links to (rdma-core names it ``libibverbs.so.1.14.<release>.0``);
    ``nccl_conf``: the text of /etc/nccl.conf."""
    kernel = kernel or snap.meta.get("kernel") or "5.15.0-105-generic"
    snap.meta.setdefault("kernel", kernel)
    put_attr(snap, "/proc/sys/kernel/osrelease", kernel)
    snap.put_file("/etc/os-release", f'PRETTY_NAME="{os_pretty}"\nNAME="{os_pretty.split()[0]}"\n')
    cpus = []
    for node, cpulist in enumerate(numa_cpulists):
        put_attr(snap, f"/sys/devices/system/node/node{node}/cpulist", cpulist)
        cpus.append(cpulist)
    put_attr(snap, "/sys/devices/system/node/online", f"0-{len(numa_cpulists) - 1}" if len(numa_cpulists) > 1 else "0")
    put_attr(snap, "/sys/devices/system/cpu/online", _merge_cpulists(cpus))
    lines = []
    for mod in modules:
        taint = " (POE)" if mod in _TAINTED else ""
        lines.append(f"{mod} {16384 * (len(mod) + 1)} 0 - Live 0x0000000000000000{taint}")
    snap.put_file("/proc/modules", "\n".join(lines) + ("\n" if lines else ""))
    if nvidia_version and open_kernel_module:
        snap.put_file("/proc/driver/nvidia/version",
                      f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {nvidia_version}  Release Build  "
                      "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025\n"
                      "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n")
    elif nvidia_version:
        snap.put_file("/proc/driver/nvidia/version",
                      f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {nvidia_version}  "
                      "Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n")
    if nvidia_version:
        put_attr(snap, "/sys/module/nvidia/version", nvidia_version)
    if libibverbs:
        snap.put_link("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", libibverbs)
    if nccl_conf is not None:
        snap.put_file("/etc/nccl.conf", nccl_conf)
    if fabric_manager is None:
        record_command(snap, ["systemctl", "is-active", "nvidia-fabricmanager"], "", None, error="not found",
                       duration_s=0.0)
    else:
        record_command(snap, ["systemctl", "is-active", "nvidia-fabricmanager"], fabric_manager + "\n",
                       0 if fabric_manager == "active" else 3)
    if shm_bytes is not None:
        snap.statvfs["/dev/shm"] = {"total_bytes": shm_bytes, "free_bytes": shm_bytes}
    snap.put_link("/proc/self", "4242")
    snap.put_file("/proc/4242/limits", _limits_text(*memlock))
    put_attr(snap, "/proc/cmdline", cmdline)
    snap.put_dir("/sys/class/iommu")
    for entry in iommu_class:
        snap.put_dir(f"/sys/devices/virtual/iommu/{entry}")
        put_link(snap, f"/sys/class/iommu/{entry}", f"/sys/devices/virtual/iommu/{entry}")
    if iommu_group_type:
        put_attr(snap, "/sys/kernel/iommu_groups/0/type", iommu_group_type)
    snap.environ = dict(environ or {})


def _merge_cpulists(lists: Sequence[str]) -> str:
    cpus: set[int] = set()
    for cpulist in lists:
        for part in cpulist.split(","):
            lo, sep, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    ranges, ordered = [], sorted(cpus)
    start = prev = None
    for c in ordered + [None]:
        if start is not None and (c is None or c != prev + 1):
            ranges.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = None
        if c is not None and start is None:
            start = c
        prev = c
    return ",".join(ranges)


def _limits_text(soft: str, hard: str) -> str:
    rows = [("Max cpu time", "unlimited", "unlimited", "seconds"),
            ("Max file size", "unlimited", "unlimited", "bytes"),
            ("Max data size", "unlimited", "unlimited", "bytes"),
            ("Max stack size", "8388608", "unlimited", "bytes"),
            ("Max core file size", "0", "unlimited", "bytes"),
            ("Max resident set", "unlimited", "unlimited", "bytes"),
            ("Max processes", "2063504", "2063504", "processes"),
            ("Max open files", "1048576", "1048576", "files"),
            ("Max locked memory", soft, hard, "bytes"),
            ("Max address space", "unlimited", "unlimited", "bytes")]
    out = [f"{'Limit':<26}{'Soft Limit':<21}{'Hard Limit':<21}{'Units':<10}"]
    out += [f"{a:<26}{b:<21}{c:<21}{d:<10}" for a, b, c, d in rows]
    return "\n".join(out) + "\n"


# -- kernel log --------------------------------------------------------------------------------------
def kmsg_record(time_s: float, message: str, seq: int, priority: int = 4) -> str:
    """One /dev/kmsg record: "pri,seq,usec,flags;message" (newlines escaped as \\x0a)."""
    return f"{priority},{seq},{int(round(time_s * 1e6))},-;{message.replace(chr(10), chr(92) + 'x0a')}"


def add_kmsg(snap: SnapshotData, events: Iterable[tuple[float, str] | tuple[float, str, int] | str],
             epoch: int = 0, uptime_s: float | None = None) -> list[str]:
    """Kernel-log records for ``read_kmsg()``: (seconds since boot, message[, priority]) tuples
    become /dev/kmsg records; strings are taken as ready-made records. Sequence numbers continue
    from the records already in the snapshot. ``uptime_s`` writes /proc/uptime (default: just after
    the last record). Returns all records of that epoch."""
    rec = snap.kmsg.setdefault(epoch, {"lines": []})
    lines: list[str] = rec.setdefault("lines", [])
    seq = len(lines)
    last = 0.0
    for item in events:
        if isinstance(item, str):
            lines.append(item)
        else:
            time_s, message, *rest = item
            lines.append(kmsg_record(time_s, message, seq, rest[0] if rest else 4))
            last = max(last, time_s)
        seq += 1
    up = uptime_s if uptime_s is not None else last + 60.0
    snap.put_file("/proc/uptime", f"{up:.2f} {up * 1.9:.2f}\n", epoch)
    return list(lines)
