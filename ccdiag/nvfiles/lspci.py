"""``lspci`` output as a bug report holds it: the device list, the tree, and the verbose blocks.

Which forms, by script version (``ccdiag/data/bugreport_sections.json``): R384-R535 print
``lspci -d "10de:*" -v -xxx`` and ``-d "10b5:*"`` (NVIDIA and PLX devices only, one ``-v``, 256
bytes of configuration space), ``lspci -t`` and ``lspci -nn``; R580 prints ``lspci -nntv``,
``lspci -nn`` and ``lspci -nnDvvvxxxx`` (every device, full verbosity, 4096 bytes). Pasted
``lspci -vvv`` output has the verbose form without dumps. From them, per PCI function: ids and
class, the bridge above it, link capability and status (the ``LnkCap``/``LnkSta`` text where
printed, else decoded from the dump, :mod:`ccdiag.nvfiles.pciconfig`), NUMA node, the driver in use
and the configuration space. The tree (``-t``) gives each device's bridge where the verbose blocks
do not cover the bridges (older reports).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccdiag.nvfiles import pciconfig

#: a device line: ``[dddd:]bb:dd.f <class text>[ [cccc]]: <name>[ [vvvv:dddd]]...``
_DEVICE = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<rest>.*)$")
_CLASS_NN = re.compile(r"\[(?P<cls>[0-9a-fA-F]{4})\]:")
_IDS_NN = re.compile(r"\[(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})\]")
_PROG_IF = re.compile(r"\(prog-if ([0-9a-fA-F]{2})")
_REV = re.compile(r"\(rev ([0-9a-fA-F]{2})\)")
_LNK = re.compile(r"^\s*(?P<reg>LnkCap|LnkSta):\s*(?P<rest>.*)$")
_SPEED = re.compile(r"Speed (?P<speed>[0-9.]+)GT/s")
_SPEED_UNKNOWN = re.compile(r"Speed unknown", re.IGNORECASE)
_WIDTH = re.compile(r"Width x(?P<width>\d+)")
_NUMA = re.compile(r"^\s*NUMA node:\s*(-?\d+)\s*$")
_DRIVER = re.compile(r"^\s*Kernel driver in use:\s*(\S+)\s*$")
_BUS = re.compile(r"^\s*Bus: primary=([0-9a-f]{2}), secondary=([0-9a-f]{2}), subordinate=([0-9a-f]{2})")
#: tree tokens: a root bus ``[dddd:bb]`` or a device ``+-dd.f``/``\-dd.f``/``--dd.f`` with an
#: optional bridge range ``-[bb]`` / ``-[bb-ss]``
_TREE_ROOT = re.compile(r"\[(?P<dom>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2})\]")
_TREE_DEV = re.compile(r"(?P<branch>[+\\-])-(?P<dev>[0-9a-fA-F]{2}\.[0-7])(?:-\[(?P<sec>[0-9a-fA-F]{2})(?:-[0-9a-fA-F]{2})?\])?")
#: class names lspci prints without ``-nn`` (pci.ids class and subclass names) -> class << 8
CLASS_NAMES = {"vga compatible controller": 0x0300, "3d controller": 0x0302, "display controller": 0x0380,
               "pci bridge": 0x0604, "host bridge": 0x0600, "isa bridge": 0x0601, "bridge": 0x0680,
               "ethernet controller": 0x0200, "infiniband controller": 0x0207, "network controller": 0x0280,
               "non-volatile memory controller": 0x0108, "sata controller": 0x0106, "raid bus controller": 0x0104,
               "serial attached scsi controller": 0x0107, "usb controller": 0x0c03, "audio device": 0x0403,
               "system peripheral": 0x0880, "processing accelerators": 0x1200}
#: vendor names lspci prints without ``-nn`` -> PCI vendor id
VENDOR_NAMES = {"nvidia corporation": 0x10DE, "mellanox technologies": 0x15B3, "intel corporation": 0x8086,
                "advanced micro devices, inc.": 0x1022, "plx technology, inc.": 0x10B5,
                "broadcom / lsi": 0x1000, "broadcom inc. and subsidiaries": 0x14E4, "amazon.com, inc.": 0x1D0F}
_NAMED = re.compile(r"^(?P<cls>[^:\[]+?)(?: \[[0-9a-fA-F]{4}\])?: (?P<name>.*)$")
_DEVICE_WORD = re.compile(r"\bDevice ([0-9a-fA-F]{4})\b")
#: the most functions one report may list
MAX_FUNCTIONS = 65536


@dataclass
class PciFunction:
    bdf: str  # dddd:bb:dd.f, lower case
    vendor: int | None = None
    device: int | None = None
    class_code: int | None = None  # 24 bits: class, subclass, prog-if
    name: str | None = None
    numa_node: int | None = None
    driver: str | None = None
    secondary_bus: int | None = None  # a bridge's secondary bus
    max_speed_gts: float | None = None
    max_width: int | None = None
    speed_gts: float | None = None
    width: int | None = None
    link_from: str | None = None  # "text" (LnkCap/LnkSta lines) or "config" (decoded from the dump)
    config: bytes = b""
    verbose: bool = False


@dataclass
class PciListing:
    """Every function the report's lspci sections name, and the bridge above each (from the tree
    or the bridges' bus numbers); ``parents[bdf]`` is None for a device on a root bus."""

    functions: dict[str, PciFunction] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    roots: dict[str, str] = field(default_factory=dict)  # bdf -> "pci0000:00" of its root bus
    tree_seen: bool = False

    def get(self, bdf: str) -> PciFunction:
        fn = self.functions.get(bdf)
        if fn is None:
            fn = self.functions[bdf] = PciFunction(bdf)
        return fn


def _bdf(text: str) -> str:
    text = text.lower()
    if text.count(":") == 1:
        text = "0000:" + text
    dom, rest = text.split(":", 1)
    return f"{int(dom, 16):04x}:{rest}"


def _head(fn: PciFunction, rest: str) -> None:
    m = _CLASS_NN.search(rest)
    if m and fn.class_code is None:
        prog = _PROG_IF.search(rest)
        fn.class_code = int(m.group("cls"), 16) << 8 | (int(prog.group(1), 16) if prog else 0)
    ids = list(_IDS_NN.finditer(rest))
    if ids and fn.vendor is None:
        fn.vendor, fn.device = int(ids[-1].group("ven"), 16), int(ids[-1].group("dev"), 16)
    named = _NAMED.match(rest)
    if named:
        if fn.class_code is None and named.group("cls").strip().lower() in CLASS_NAMES:
            prog = _PROG_IF.search(rest)
            fn.class_code = CLASS_NAMES[named.group("cls").strip().lower()] << 8 | (
                int(prog.group(1), 16) if prog else 0)
        if fn.vendor is None:
            low = named.group("name").lower()
            for vname, vid in VENDOR_NAMES.items():
                if low.startswith(vname):
                    fn.vendor = vid
                    word = _DEVICE_WORD.search(named.group("name"))
                    fn.device = int(word.group(1), 16) if word else None
                    break
    if fn.name is None:
        fn.name = rest.split(": ", 1)[-1].strip() or None


def read_list(lines: list[str], into: PciListing) -> None:
    """``lspci -nn`` (or plain ``lspci``): one line per function."""
    for line in lines:
        m = _DEVICE.match(line.strip())
        if m and len(into.functions) < MAX_FUNCTIONS:
            _head(into.get(_bdf(m.group("bdf"))), m.group("rest"))


def read_verbose(lines: list[str], into: PciListing) -> None:
    """``lspci -v``/``-vvv`` blocks, with or without ``-nn``, ``-D`` and hex dumps."""
    fn: PciFunction | None = None
    rows: list[tuple[int, bytes]] = []

    def finish() -> None:
        if fn is None:
            return
        cfg = pciconfig.assemble(rows)
        if cfg:
            fn.config = cfg
            head = pciconfig.ids(cfg)
            if head is not None:
                fn.vendor, fn.device, fn.class_code = head[0], head[1], head[2]
            buses = pciconfig.bridge_buses(cfg)
            if buses is not None and fn.secondary_bus is None:
                fn.secondary_bus = buses[1]
            link = pciconfig.link_state(cfg)
            if link is not None and fn.link_from is None:
                fn.max_speed_gts, fn.max_width, fn.speed_gts, fn.width = (
                    link.max_speed_gts, link.max_width, link.speed_gts, link.width)
                fn.link_from = "config"

    for line in lines:
        if not line.strip():
            continue
        m = _DEVICE.match(line) if not line[0].isspace() else None
        if m:
            finish()
            if len(into.functions) >= MAX_FUNCTIONS:
                fn = None
                continue
            fn = into.get(_bdf(m.group("bdf")))
            fn.verbose = True
            rows = []
            _head(fn, m.group("rest"))
            continue
        if fn is None:
            continue
        dump = pciconfig.hex_dump_line(line)
        if dump is not None and not line[0].isspace():
            rows.append(dump)
            continue
        lnk = _LNK.match(line)
        if lnk:
            rest = lnk.group("rest")
            speed = _SPEED.search(rest)
            width = _WIDTH.search(rest)
            gts = float(speed.group("speed")) if speed else None
            w = int(width.group("width")) if width else None
            if lnk.group("reg") == "LnkCap":
                fn.max_speed_gts, fn.max_width = gts, w
            else:
                fn.speed_gts, fn.width = gts, w if w is not None else (0 if _SPEED_UNKNOWN.search(rest) else None)
            fn.link_from = "text"
            continue
        numa = _NUMA.match(line)
        if numa:
            fn.numa_node = int(numa.group(1))
            continue
        drv = _DRIVER.match(line)
        if drv:
            fn.driver = drv.group(1)
            continue
        bus = _BUS.match(line)
        if bus:
            fn.secondary_bus = int(bus.group(2), 16)
    finish()


def read_tree(lines: list[str], into: PciListing) -> None:
    """``lspci -t`` / ``-tv`` / ``-nntv``: which bus every device sits on, and each bridge's
    secondary bus. Siblings on later lines are placed by the column of their branch mark."""
    col_bus: dict[int, tuple[str, int]] = {}
    for line in lines:
        current: tuple[str, int] | None = None
        pos = 0
        while True:
            root = _TREE_ROOT.search(line, pos)
            dev = _TREE_DEV.search(line, pos)
            if root is not None and (dev is None or root.start() < dev.start()):
                current = (f"{int(root.group('dom'), 16):04x}", int(root.group("bus"), 16))
                pos = root.end()
                continue
            if dev is None:
                break
            col = dev.start("branch")
            bus = current if current is not None else col_bus.get(col)
            if bus is None:
                break  # a line whose bus cannot be placed: a cut paste
            col_bus[col] = bus
            bdf = f"{bus[0]}:{bus[1]:02x}:{dev.group('dev').lower()}"
            if len(into.functions) < MAX_FUNCTIONS or bdf in into.functions:
                fn = into.get(bdf)
                into.tree_seen = True
                if dev.group("sec"):
                    fn.secondary_bus = int(dev.group("sec"), 16)
            if dev.group("sec"):
                current = (bus[0], int(dev.group("sec"), 16))
            pos = dev.end()


def link_parents(listing: PciListing) -> None:
    """Fill ``parents`` and ``roots``: a device's parent is the bridge whose secondary bus is its
    bus (within its domain); a bus no bridge leads to is a root bus."""
    bridge_of: dict[tuple[str, int], str] = {}
    for bdf, fn in listing.functions.items():
        if fn.secondary_bus is not None and fn.secondary_bus != int(bdf[5:7], 16):
            bridge_of.setdefault((bdf[:4], fn.secondary_bus), bdf)
    for bdf in listing.functions:
        listing.parents[bdf] = bridge_of.get((bdf[:4], int(bdf[5:7], 16)))
    for bdf in listing.functions:
        top, hops = bdf, 0
        while listing.parents.get(top) and hops < 64:
            top = listing.parents[top] or top
            hops += 1
        listing.roots[bdf] = f"pci{top[:4]}:{top[5:7]}"


def chain(listing: PciListing, bdf: str) -> list[str]:
    """The functions from the root bus down to ``bdf`` (itself last)."""
    out = [bdf]
    while len(out) < 64:
        parent = listing.parents.get(out[-1])
        if not parent or parent in out:
            break
        out.append(parent)
    return list(reversed(out))
