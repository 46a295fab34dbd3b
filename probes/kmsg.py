"""Kernel-log events that matter to GPU and fabric health: XIDs, "fallen off the bus", link flaps.

Why the kernel log: an XID 79 or a GPU that fell off the bus may leave NVML answering "GPU lost"
or nothing at all, while the kernel log still says which PCI address failed and when. Sources, in
order: ``/dev/kmsg`` through the door (records "pri,seq,usec,flags;message", readable without
``dmesg`` installed), then ``dmesg --kernel --raw``, then ``journalctl -k``. Lines from any of
them, and pasted lines from tickets (``[12345.678] msg``, ``[Fri Aug 30 11:43:09 2024] msg``,
``Oct 02 10:41:07 host kernel: msg``), go through the same :func:`parse_lines`.

Message formats vary across driver generations and are matched loosely:

* ``NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``
  (``pid='<unknown>', name=<unknown>``, or neither, in other versions);
* ``NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.`` and the multi-line
  ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``... fallen off the bus and is not responding``;
* ``NVRM: GPU at PCI:0000:18:00: GPU-<uuid>`` (maps the address to the UUID);
* ``NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x11:0x45:2540)`` (the driver could not
  initialise the GPU; older drivers leave the address out);
* ``nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 20034, Fatal, Link 50 LTSSM Fault Up`` (NVSwitch
  errors, with the driver's severity word and the switch port; the ``nvidia-nvswitchN:`` prefix is
  missing from some pasted logs, and continuation lines carry ``Severity ...`` or ``Data {...}``);
* ``mlx5_core 0000:0c:00.0 ib0: Link down`` / ``mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE``;
* ``pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0``;
* ``NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build ...`` (the
  driver was loaded: every GPU was initialised afresh, so an XID logged before it no longer
  describes the GPU; "Open" marks the open GPU kernel modules, which GPUDirect over DMA-BUF needs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccdiag.host.door import Host, HostReadError
from ccdiag.core.readings import ReadError, normalize_bdf
from ccdiag.probes.registry import PROBE_KMSG, probe
from ccdiag.probes._sysfs import read_error

NAME = PROBE_KMSG
TIMEOUT_S = 5.0

DMESG_ARGV = ("dmesg", "--kernel", "--raw")
JOURNAL_ARGV = ("journalctl", "-k", "-o", "short-monotonic", "--no-pager")
COMMAND_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class KernelEvent:
    # "xid" | "sxid" | "fallen_off_bus" | "rm_init_failed" | "gpu_uuid" | "ib_link_down" | "ib_link_up" |
    # "aer" | "nvlink" | "driver_load"
    kind: str
    message: str
    time_s: float | None = None  # seconds since boot, as the kernel stamps it
    bdf: str | None = None
    code: int | None = None  # the XID / SXID number
    device: str | None = None  # "mlx5_0", "ib0", "GPU-<uuid>", the reporting port of an AER event
    pid: int | None = None
    port: int | None = None  # the RDMA port number of an mlx5 port event
    link: int | None = None  # the NVSwitch port ("Link 48") an SXid names
    severity: str | None = None  # the driver's own word in an SXid: "Fatal", "Non-fatal"; "open" for a
    # driver_load of the open GPU kernel modules, "proprietary" for the others


@dataclass(frozen=True)
class KmsgObservation:
    events: tuple[KernelEvent, ...] = ()
    lines_scanned: int = 0
    source: str | None = None  # "/dev/kmsg" | "dmesg" | "journalctl"
    uptime_s: float | None = None  # from /proc/uptime at read time, to place events in time
    errors: tuple[ReadError, ...] = ()


# -- line framing ----------------------------------------------------------------------------------
# numbers of ASCII digits, at most 20 (a u64): ``\d`` takes any script's digits and int() of
# thousands of digits raises ValueError
_KMSG_RECORD = re.compile(r"^([0-9]{1,20}),([0-9]{1,20}),([0-9]{1,20}),[^;]*;(.*)$")
_RAW_PRI = re.compile(r"^<\d+>")
_MONO_STAMP = re.compile(r"^\[\s*([0-9]{1,20}\.[0-9]{1,20})\]\s?")
_CTIME_STAMP = re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\s?")
_SYSLOG_PREFIX = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: ")
_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"


def split_line(line: str) -> tuple[float | None, str] | None:
    """(seconds since boot or None, message) from one log line in any supported framing;
    None for kmsg continuation lines (" SUBSYSTEM=pci") and blank lines."""
    line = line[:MAX_MESSAGE_CHARS + 64]  # room for the framing before the message
    if not line.strip() or line[:1] == " " and "=" in line and "NVRM" not in line:
        return None
    m = _KMSG_RECORD.match(line)
    if m:
        # /dev/kmsg escapes a newline inside a record as \x0a
        return int(m.group(3)) / 1e6, m.group(4).replace("\\x0a", " ")
    text = _RAW_PRI.sub("", line, count=1)
    text = _SYSLOG_PREFIX.sub("", text, count=1)
    m = _MONO_STAMP.match(text)
    if m:
        rest = text[m.end():]
        # journalctl short-monotonic: "[  12.34] host kernel: msg"
        rest = re.sub(r"^\S+ kernel: ", "", rest, count=1)
        return float(m.group(1)), rest.strip()
    m = _CTIME_STAMP.match(text)
    if m:
        return None, text[m.end():].strip()
    return None, text.strip()


# -- event matching --------------------------------------------------------------------------------
#: "NVRM: Xid (PCI:0000:01:00): 79, ..." and, on a MIG GPU, "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, ..."
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?({_BDF})(?: GPU-I:[0-9]{{1,4}})?\): ([0-9]{{1,9}})\b(.*)$")
_SXID = re.compile(rf"(?:(nvidia-nvswitch[0-9]{{0,4}}): )?SXid \((?:PCI:)?({_BDF})\): ([0-9]{{1,9}})\b(.*)$")
_SXID_SEVERITY = re.compile(r"^,\s*(Fatal|Non-fatal|Nonfatal)\b", re.IGNORECASE)
_SXID_LINK = re.compile(r"\bLink ([0-9]{1,4})\b")
_PID = re.compile(r"\bpid='?([0-9]{1,12})'?")
_FALLEN = re.compile(rf"NVRM: GPU ({_BDF}): GPU has fallen off the bus")
_FALLEN_HEAD = re.compile(rf"NVRM: The NVIDIA GPU ({_BDF})")
_FALLEN_TAIL = re.compile(r"fallen off the bus and is not responding")
_RM_INIT = re.compile(rf"NVRM: (?:GPU ({_BDF}): )?RmInitAdapter failed!")
_GPU_UUID = re.compile(rf"NVRM: GPU at (?:PCI:)?({_BDF}): (GPU-[0-9a-fA-F-]+)")
_NETDEV_LINK = re.compile(rf"^(mlx\w*?)(?: ({_BDF}))?:? (\S+?):? [Ll]ink (up|down|Up|Down)\b")
_PORT_LINK = re.compile(rf"^(?:mlx\w* ({_BDF}) )?(\S+?):? ?[Pp]ort:? ?([0-9]{{1,9}}) (?:.*?)?[Ll]ink (\w+)")
# "error ... received" is checked after the match: ``(.*error.*received.*)`` backtracks over every
# "error" in a long line, quadratic in it
_AER = re.compile(rf"^\S+ ({_BDF}): AER: (.*)$", re.IGNORECASE)
#: the longest message read: the kernel prints at most 1024 bytes a record (PRINTK_MESSAGE_MAX);
#: longer lines come from a damaged paste or snapshot, and their tail is not read
MAX_MESSAGE_CHARS = 2048
#: "NVRM: loading NVIDIA UNIX [Open ]<arch> Kernel Module  <version>  ..." (arch before or after)
_DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX (Open )?.{0,40}?Kernel Module\b.{0,40}?"
                          r"\s([0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)(?:\s|$)")
_AER_SOURCE = re.compile(rf"(?:from|received:)\s+({_BDF})")


def match_event(message: str, time_s: float | None, context: dict | None = None) -> KernelEvent | None:
    """The event one message stands for, or None. ``context`` carries state across lines (the
    multi-line "The NVIDIA GPU ... fallen off the bus" form)."""
    ctx = context if context is not None else {}
    message = message[:MAX_MESSAGE_CHARS]
    m = _XID.search(message)
    if m:
        pid = _PID.search(m.group(3))
        return KernelEvent("xid", message, time_s, normalize_bdf(m.group(1)), int(m.group(2)),
                           None, int(pid.group(1)) if pid else None)
    m = _SXID.search(message)
    if m:
        sev, link = _SXID_SEVERITY.match(m.group(4)), _SXID_LINK.search(m.group(4))
        return KernelEvent("sxid", message, time_s, normalize_bdf(m.group(2)), int(m.group(3)), m.group(1),
                           link=int(link.group(1)) if link else None, severity=sev.group(1) if sev else None)
    m = _FALLEN.search(message)
    if m:
        return KernelEvent("fallen_off_bus", message, time_s, normalize_bdf(m.group(1)))
    m = _FALLEN_HEAD.search(message)
    if m:
        ctx["fallen_bdf"] = normalize_bdf(m.group(1))
        if not _FALLEN_TAIL.search(message):
            return None
    if _FALLEN_TAIL.search(message) and ctx.get("fallen_bdf"):
        return KernelEvent("fallen_off_bus", message, time_s, ctx.pop("fallen_bdf"))
    m = _RM_INIT.search(message)
    if m:
        return KernelEvent("rm_init_failed", message, time_s, normalize_bdf(m.group(1)) if m.group(1) else None)
    m = _DRIVER_LOAD.search(message)
    if m:
        return KernelEvent("driver_load", message, time_s, device=m.group(2),
                           severity="open" if m.group(1) else "proprietary")
    m = _GPU_UUID.search(message)
    if m:
        return KernelEvent("gpu_uuid", message, time_s, normalize_bdf(m.group(1)), None, m.group(2))
    m = _NETDEV_LINK.match(message)
    if m:
        kind = "ib_link_up" if m.group(4).lower() == "up" else "ib_link_down"
        return KernelEvent(kind, message, time_s, normalize_bdf(m.group(2)), None, m.group(3))
    if message.startswith("mlx"):
        m = _PORT_LINK.match(message)
        if m:
            state = m.group(4).upper()
            port_kind = {"ACTIVE": "ib_link_up", "UP": "ib_link_up", "DOWN": "ib_link_down"}.get(state)
            if port_kind:
                return KernelEvent(port_kind, message, time_s, normalize_bdf(m.group(1)), None, m.group(2),
                                   port=int(m.group(3)))
    m = _AER.match(message)
    low = m.group(2).lower() if m else ""
    if m and "error" in low and "received" in low[low.index("error") + 5:]:
        src = _AER_SOURCE.search(m.group(2))
        port = normalize_bdf(m.group(1))
        return KernelEvent("aer", message, time_s, normalize_bdf(src.group(1)) if src else port, None, port)
    return None


def parse_lines(lines: list[str]) -> tuple[list[KernelEvent], int]:
    """(events, lines scanned) from kernel-log lines of any supported framing."""
    events: list[KernelEvent] = []
    ctx: dict = {}
    scanned = 0
    for line in lines:
        split = split_line(line)
        if split is None:
            continue
        scanned += 1
        event = match_event(split[1], split[0], ctx)
        if event is not None:
            events.append(event)
    return events, scanned


def lines_used(lines: list[str]) -> list[str]:
    """The lines this probe reads anything from (events, and the lines that name a GPU for later
    ones): what a redacted snapshot keeps of the kernel log. USB and transceiver serials, NFS
    servers, filesystem UUIDs and user names in the rest never leave the site."""
    kept: list[str] = []
    ctx: dict = {}
    for line in lines:
        split = split_line(line)
        if split is None:
            continue
        message = split[1]
        if match_event(message, split[0], ctx) is not None or _FALLEN_HEAD.search(message) \
                or _FALLEN_TAIL.search(message) or _GPU_UUID.search(message):
            kept.append(line)
    return kept


def parse_uptime(text: str) -> float | None:
    """Seconds since boot from /proc/uptime ("12345.67 54321.00")."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


# -- reading -----------------------------------------------------------------------------------------
def _read_lines(host: Host, errors: list[ReadError]) -> tuple[list[str] | None, str | None]:
    try:
        return host.read_kmsg(), "/dev/kmsg"
    except HostReadError as exc:
        errors.append(read_error(exc))
    for argv, name in ((DMESG_ARGV, "dmesg"), (JOURNAL_ARGV, "journalctl")):
        result = host.run(list(argv), timeout=COMMAND_TIMEOUT_S)
        if result.ok:
            return result.stdout.splitlines(), name
        errors.append(ReadError(" ".join(argv), "timeout" if result.timed_out else "command", result.describe()))
    return None, None


@probe(order=60, what="kernel log (XIDs)", log=True)
def collect(host: Host) -> KmsgObservation:
    """Events from the first kernel-log source that answers."""
    errors: list[ReadError] = []
    uptime = None
    try:
        uptime = parse_uptime(host.read_text("/proc/uptime", 4096))
    except HostReadError as exc:
        errors.append(read_error(exc))
    lines, source = _read_lines(host, errors)
    if lines is None:
        return KmsgObservation(source=None, uptime_s=uptime, errors=tuple(errors))
    events, scanned = parse_lines(lines)
    return KmsgObservation(events=tuple(events), lines_scanned=scanned, source=source, uptime_s=uptime,
                           errors=tuple(errors))
