"""PCIe links of every GPU, NIC and NVSwitch and of every bridge on their path to the root port.

Why the whole path: a GPU can report a healthy Gen5 x16 link while the switch port above it trained
at Gen4 (the kernel's "limited by 16.0 GT/s PCIe x16 link at 0000:01:00.0" message), and P2P
traffic between two GPUs is routed up to the first common bridge, where ACS redirection can send
it through the root complex. So the probe follows the sysfs device path (the realpath of
``/sys/bus/pci/devices/<bdf>``) from the root complex down and reads every hop.

Sysfs facts used (values as the kernel formats them):

* ``current_link_speed`` / ``max_link_speed``: "32.0 GT/s PCIe", "2.5 GT/s PCIe", older kernels
  "8 GT/s", and "Unknown" when the link is down;
* ``current_link_width`` / ``max_link_width``: lane count, 0 when the link is down;
* ``numa_node``: -1 when the platform does not say;
* ``aer_dev_correctable`` / ``_fatal`` / ``_nonfatal``: lines "RxErr 0" ... "TOTAL_ERR_COR 2";
* ``config``: the configuration space; without root it reads as the first 64 bytes only, so the
  extended capabilities (ACS lives there, from offset 0x100) are only visible to root.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ccdiag.host.door import Host, HostReadError
from ccdiag.core.readings import ReadError
from ccdiag.probes.registry import PROBE_PCIE, ProbeUnavailable, probe
from ccdiag.probes._sysfs import BDF_RE, attr, link_basename, parse_int, read_error

NAME = PROBE_PCIE
TIMEOUT_S = 10.0

PCI_DEVICES = "/sys/bus/pci/devices"

NVIDIA_VENDOR = "0x10de"

#: ACS control register bits (PCIe base spec, ACS Extended Capability), in bit order
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
ACS_CAP_ID = 0x000D
EXT_CAP_START = 0x100

_ROOT_COMPLEX_RE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s\b")


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


# -- parsers (pure) ------------------------------------------------------------------------------
def parse_link_speed(text: str | None) -> float | None:
    """GT/s from "16.0 GT/s PCIe" / "8 GT/s" / "2.5 GT/s PCIe"; None for "Unknown" or garbage."""
    if not text:
        return None
    m = _SPEED_RE.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return value if value > 0 else None


def parse_link_width(text: str | None) -> int | None:
    """Lane count; None when the link is down (0) or the value is not a real PCIe width
    (a config space read as all ones gives 63 or 255)."""
    value = parse_int(text)
    if value is None or value <= 0 or value > 32:
        return None
    return value


#: parsed AER texts: almost every function of a node reports the same all-zero counters, so one
#: dict serves them all (read-only, like the frozen records holding it); bounded for the daemon
_AER_PARSED: dict[str, dict[str, int]] = {}
_AER_PARSED_MAX = 4096


def parse_aer_counters(text: str) -> dict[str, int]:
    """``aer_dev_*`` text ("RxErr 0" per line, "TOTAL_ERR_COR 2") to a dict (shared between equal
    texts: never modify it).

    Lines that are not "<name> <integer>" are skipped; the caller records a parse error when
    nothing at all could be read.
    """
    done = _AER_PARSED.get(text)
    if done is None:
        done = _parse_aer_counters(text)
        if len(_AER_PARSED) < _AER_PARSED_MAX:
            _AER_PARSED[text] = done
    return done


def _parse_aer_counters(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        value = parse_int(parts[1])
        if value is not None:
            out[parts[0]] = value
    return out


def parse_acs_ctrl(config: bytes) -> int | None:
    """The ACS control register from a configuration space dump, None when the device has no ACS
    capability. Walks the extended capability list from 0x100 (header: id in bits 0-15, next
    offset in bits 20-31); the control register sits at capability + 6.
    """
    offset = EXT_CAP_START
    seen: set[int] = set()
    while EXT_CAP_START <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            (ctrl,) = struct.unpack_from("<H", config, offset + 6)
            return ctrl
        offset = (header >> 20) & 0xFFC
    return None


def acs_names(ctrl: int | None) -> tuple[str, ...]:
    """Names of the ACS features enabled in a control register value."""
    if not ctrl:
        return ()
    return tuple(name for bit, name in enumerate(ACS_BITS) if ctrl & (1 << bit))


def split_device_path(real: str) -> tuple[str | None, tuple[str, ...]]:
    """("pci0000:17", (BDFs from the root complex down)) from a sysfs device realpath.

    The root complex is the last ``pciDDDD:BB`` component: on Hyper-V guests it sits below
    VMBus nodes, not directly under /sys/devices.
    """
    parts = [p for p in real.split("/") if p]
    rc_index = None
    for i, part in enumerate(parts):
        if _ROOT_COMPLEX_RE.match(part):
            rc_index = i
    if rc_index is None:
        return None, tuple(p for p in parts if BDF_RE.match(p))
    return parts[rc_index], tuple(p for p in parts[rc_index + 1:] if BDF_RE.match(p))


def kind_of(vendor: str | None, class_code: str | None) -> str:
    """Device kind from vendor and class code: what this tool cares about, else "other"."""
    cls = parse_int(class_code)
    if cls is None:
        return "other"
    base, sub = cls >> 16, (cls >> 8) & 0xFF
    if vendor == NVIDIA_VENDOR and base == 0x03:
        return "gpu"
    if vendor == NVIDIA_VENDOR and base == 0x06 and sub == 0x80:
        return "nvswitch"
    if base == 0x02 and sub in (0x00, 0x07):  # Ethernet and InfiniBand controllers
        return "nic"
    if base == 0x06 and sub == 0x04:
        return "bridge"
    return "other"


# -- reading -------------------------------------------------------------------------------------
def _read_device(host: Host, bdf: str, real: str, root_complex: str | None, path: tuple[str, ...],
                 kind: str | None) -> PcieDevice:
    errors: list[ReadError] = []
    vendor = attr(host, f"{real}/vendor", errors, optional=False)
    device_id = attr(host, f"{real}/device", errors, optional=False)
    class_code = attr(host, f"{real}/class", errors, optional=False)
    if kind is None:
        kind = kind_of(vendor, class_code)
    numa = parse_int(attr(host, f"{real}/numa_node", errors))
    cur_raw = attr(host, f"{real}/current_link_speed", errors)
    max_raw = attr(host, f"{real}/max_link_speed", errors)
    cur_w = attr(host, f"{real}/current_link_width", errors)
    max_w = attr(host, f"{real}/max_link_width", errors)
    aer: dict[str, dict[str, int] | None] = {}
    for name in ("correctable", "fatal", "nonfatal"):
        text = attr(host, f"{real}/aer_dev_{name}", errors)
        counters = parse_aer_counters(text) if text is not None else None
        if text is not None and not counters:
            errors.append(ReadError(f"{real}/aer_dev_{name}", "parse", f"no counters in {text[:60]!r}"))
            counters = None
        aer[name] = counters
    acs = None
    if kind in ("bridge", "root_port"):
        acs = _read_acs(host, real, errors)
    return PcieDevice(
        bdf=bdf, kind=kind, vendor_id=vendor, device_id=device_id, class_code=class_code,
        driver=link_basename(host, f"{real}/driver"),
        numa_node=numa if numa is not None and numa >= 0 else None,
        parent=path[-2] if len(path) > 1 else None, root_complex=root_complex, path=path,
        current_link_speed_gts=parse_link_speed(cur_raw), max_link_speed_gts=parse_link_speed(max_raw),
        current_link_width=parse_link_width(cur_w), max_link_width=parse_link_width(max_w),
        current_link_speed_raw=cur_raw, max_link_speed_raw=max_raw,
        aer_correctable=aer["correctable"], aer_fatal=aer["fatal"], aer_nonfatal=aer["nonfatal"],
        acs_ctrl=acs, acs_enabled=acs_names(acs), errors=tuple(errors),
    )


def _read_acs(host: Host, real: str, errors: list[ReadError]) -> int | None:
    source = f"{real}/config"
    try:
        config = host.read_bytes(source, 4096)
    except HostReadError as exc:
        if exc.kind != "missing":
            errors.append(read_error(exc))
        return None
    if len(config) < EXT_CAP_START + 8:
        errors.append(ReadError(source, "permission",
                                f"extended config space not readable ({len(config)} bytes; needs root)"))
        return None
    return parse_acs_ctrl(config)


def _is_endpoint_of_interest(host: Host, bdf: str, errors: list[ReadError]) -> bool:
    base = f"{PCI_DEVICES}/{bdf}"
    vendor = attr(host, f"{base}/vendor", errors, optional=False)
    cls = attr(host, f"{base}/class", errors, optional=False)
    if kind_of(vendor, cls) not in ("gpu", "nic", "nvswitch"):
        return False
    # SR-IOV virtual functions share their parent's link; listing hundreds of them adds nothing
    return not host.exists(f"{base}/physfn")


@probe(order=20, what="PCIe links", counters=True)
def collect(host: Host) -> PcieObservation:
    """Every GPU, NIC and NVSwitch function and every bridge above them."""
    errors: list[ReadError] = []
    try:
        names = host.list_dir(PCI_DEVICES)
    except HostReadError as exc:
        raise ProbeUnavailable(f"no PCI bus: {PCI_DEVICES} unreadable ({exc.message})") from None
    if not names:
        raise ProbeUnavailable(f"no PCI devices under {PCI_DEVICES}")
    devices: dict[str, PcieDevice] = {}
    for bdf in names:
        if not BDF_RE.match(bdf) or not _is_endpoint_of_interest(host, bdf, errors):
            continue
        try:
            real = host.realpath(f"{PCI_DEVICES}/{bdf}")
        except HostReadError as exc:
            errors.append(read_error(exc))
            continue
        root_complex, chain = split_device_path(real)
        if not chain or chain[-1] != bdf:
            errors.append(ReadError(f"{PCI_DEVICES}/{bdf}", "parse", f"unexpected device path {real}"))
            chain = (bdf,)
        for i, hop in enumerate(chain[:-1]):
            if hop not in devices:
                # an ancestor's directory is the prefix of the device's path ending at its BDF
                hop_real = real[: real.index(f"/{hop}/") + len(hop) + 1]
                devices[hop] = _read_device(host, hop, hop_real, root_complex, chain[: i + 1],
                                            "root_port" if i == 0 else "bridge")
        devices[bdf] = _read_device(host, bdf, real, root_complex, chain, None)
    return PcieObservation(devices=tuple(devices[k] for k in sorted(devices)), errors=tuple(errors))

