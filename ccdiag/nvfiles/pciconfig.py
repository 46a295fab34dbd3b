"""PCI configuration space, decoded: the few registers a link's state lives in.

Older bug reports (``lspci -d "10de:*" -v -xxx``) print NVIDIA devices with a single ``-v``, which
omits the ``LnkCap``/``LnkSta`` lines, but always with the hex dump of the configuration space.
The PCI Express capability sits in the first 256 bytes (found by walking the capability list from
offset 0x34), and its Link Capabilities (+0x0C) and Link Status (+0x12) registers hold the maximum
and current speed and width, so the dump alone gives what sysfs's ``max_link_speed``,
``current_link_speed`` and widths give. Offsets and encodings: PCI Express Base Specification,
"PCI Express Capability Structure" (Supported Link Speeds: 1 = 2.5 GT/s ... 6 = 64 GT/s).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

PCIE_CAP_ID = 0x10
#: Link Capabilities / Link Status speed codes -> GT/s
SPEED_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
_HEX_LINE = re.compile(r"^\s*([0-9a-f]{2,3}):((?: [0-9a-f]{2}){1,16})\s*$")


@dataclass(frozen=True)
class LinkState:
    max_speed_gts: float | None
    max_width: int | None
    speed_gts: float | None
    width: int | None


def hex_dump_line(line: str) -> tuple[int, bytes] | None:
    """``"40: de 10 97 10 ..."`` -> (0x40, the bytes); None for any other line."""
    m = _HEX_LINE.match(line.lower())
    if m is None:
        return None
    return int(m.group(1), 16), bytes(int(b, 16) for b in m.group(2).split())


def assemble(rows: list[tuple[int, bytes]]) -> bytes:
    """The configuration space from its dump rows (gaps filled with 0xff, as an unread register reads)."""
    if not rows:
        return b""
    size = max(off + len(data) for off, data in rows)
    buf = bytearray(b"\xff" * size)
    for off, data in rows:
        buf[off:off + len(data)] = data
    return bytes(buf)


def _u16(cfg: bytes, off: int) -> int | None:
    return struct.unpack_from("<H", cfg, off)[0] if off + 2 <= len(cfg) else None


def _u32(cfg: bytes, off: int) -> int | None:
    return struct.unpack_from("<I", cfg, off)[0] if off + 4 <= len(cfg) else None


def ids(cfg: bytes) -> tuple[int, int, int, int] | None:
    """(vendor, device, class code (24 bits), header type) of a dump of at least 16 bytes."""
    if len(cfg) < 16:
        return None
    vendor, device = struct.unpack_from("<HH", cfg, 0)
    return vendor, device, cfg[9] | cfg[10] << 8 | cfg[11] << 16, cfg[14] & 0x7F


def bridge_buses(cfg: bytes) -> tuple[int, int, int] | None:
    """(primary, secondary, subordinate) bus of a type-1 (bridge) header."""
    head = ids(cfg)
    if head is None or head[3] != 1 or len(cfg) < 0x1B:
        return None
    return cfg[0x18], cfg[0x19], cfg[0x1A]


def pcie_capability(cfg: bytes) -> int | None:
    """Offset of the PCI Express capability, walking the list from 0x34 (at most 48 hops)."""
    status = _u16(cfg, 0x06)
    if status is None or not status & 0x10 or len(cfg) < 0x40:
        return None
    off = cfg[0x34] & 0xFC
    for _ in range(48):
        if off < 0x40 or off + 2 > len(cfg):
            return None
        if cfg[off] == PCIE_CAP_ID:
            return off
        off = cfg[off + 1] & 0xFC
    return None


def link_state(cfg: bytes) -> LinkState | None:
    """Maximum and current link speed and width from the PCI Express capability; None without one."""
    cap = pcie_capability(cfg)
    if cap is None:
        return None
    lnkcap, lnksta = _u32(cfg, cap + 0x0C), _u16(cfg, cap + 0x12)
    if lnkcap is None or lnksta is None or lnkcap == 0xFFFFFFFF:
        return None
    max_w, cur_w = (lnkcap >> 4) & 0x3F, (lnksta >> 4) & 0x3F
    return LinkState(SPEED_GTS.get(lnkcap & 0xF), max_w or None, SPEED_GTS.get(lnksta & 0xF), cur_w)
