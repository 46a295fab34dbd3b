"""Small reading helpers shared by the sysfs/procfs probes.

Every probe reads many tiny attributes, and each read can fail on its own (a file the running
kernel does not have, a counter the firmware refuses with EINVAL, a file only root may read).
These helpers turn one failed read into one :class:`ReadError` beside the data, so that a single
bad file never hides the rest, and keep the "absent is normal here" decision in one place.
"""

from __future__ import annotations

import re

from ccdiag.host.door import Host, HostReadError
from ccdiag.core.readings import ReadError

#: a PCI function address as sysfs spells it: domain:bus:device.function
BDF_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def read_error(exc: HostReadError) -> ReadError:
    """The door's exception as the observation's error record (same kinds, path as source)."""
    return ReadError(exc.path, exc.kind, exc.message)


def attr(host: Host, path: str, errors: list[ReadError], optional: bool = True) -> str | None:
    """Read one attribute; None when it cannot be read.

    ``optional`` attributes may simply not exist on this kernel or device (``hca_type`` on an
    Omni-Path HFI, AER files on a device without the capability): their absence is not an error.
    Any other failure (permission, EIO, EINVAL) is recorded, because it hides a value that exists.
    """
    try:
        return host.read_attr(path)
    except HostReadError as exc:
        if not (optional and exc.kind == "missing"):
            errors.append(read_error(exc))
        return None


def listing(host: Host, path: str, errors: list[ReadError] | None = None) -> list[str] | None:
    """Names in a directory, or None when it is absent (recorded when ``errors`` is given and the
    failure is more than absence)."""
    try:
        return host.list_dir(path)
    except HostReadError as exc:
        if errors is not None and exc.kind != "missing":
            errors.append(read_error(exc))
        return None


def link_basename(host: Host, path: str) -> str | None:
    """Last component of a symlink's target (``driver`` -> ``nvidia``), None when not a link."""
    try:
        target = host.read_link(path)
    except HostReadError:
        return None
    name = target.rstrip("/").rsplit("/", 1)[-1]
    return name or None


#: the most digits a decimal value read from a file or a log may have (2**64 has 20); int() of more
#: than 4300 raises ValueError, and no counter, index or time is that long
MAX_DECIMAL_DIGITS = 24


def decimal(text: str | None) -> int | None:
    """``text`` as a non-negative decimal of ASCII digits (at most :data:`MAX_DECIMAL_DIGITS`), else
    None. ``str.isdigit`` is no guard: it accepts "²", which ``int()`` refuses."""
    if text is None:
        return None
    s = text.strip()
    if not s or len(s) > MAX_DECIMAL_DIGITS or not s.isascii() or not s.isdigit():
        return None
    return int(s)


def parse_int(text: str | None) -> int | None:
    """A decimal or 0x-hex integer; None for anything else (empty, "N/A", garbage)."""
    if text is None:
        return None
    s = text.strip()
    if not s or len(s) > MAX_DECIMAL_DIGITS + 2:
        return None
    try:
        return int(s, 16) if s.lower().startswith("0x") else int(s, 10)
    except ValueError:
        return None
