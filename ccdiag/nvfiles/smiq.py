"""``nvidia-smi -q`` (``--query``) text, read into one record per GPU.

The text is a tree written by indentation: ``GPU 00000000:3B:00.0`` opens a GPU, a line without a
colon opens a group (``ECC Errors``), ``Name : value`` is a field, and a field followed by deeper
lines is a group too (``HW Slowdown : Active`` over ``HW Thermal Slowdown``). Field names move
between driver versions (``Clocks Throttle Reasons`` became ``Clocks Event Reasons`` in R535,
``Ecc Mode`` became ``ECC Mode``, ``Power Readings`` became ``GPU Power Readings``, per-location
``Single Bit``/``Double Bit`` ECC counts became ``SRAM``/``DRAM`` ones); each GPU keeps every field
under its full path as printed (``ECC Errors/Volatile/DRAM Uncorrectable``), and
:mod:`ccdiag.nvfiles.smifields` names which paths of which versions mean the same value.

Indentation is read relative to the lines around it, so a paste shifted right (a markdown code
block) or cut to one GPU (``-i 0``) or one group (``-d ECC``, ``| grep``) reads the same; tabs are
expanded. Lines that are not fields are kept as messages (``Unable to determine the device handle
for GPU0000:3B:00.0: GPU is lost``, ``No devices were found``). One pass, linear in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GPU_HEADER = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
#: ``Name<pad>: value`` (the value may be empty); the name never starts with a blank
_FIELD = re.compile(r"^(?P<name>[^:\s][^:]*?)\s*:(?:\s(?P<value>.*))?$")
_TOP_FIELDS = {"Timestamp": "timestamp", "Driver Version": "driver_version", "CUDA Version": "cuda_version",
               "Attached GPUs": "attached_gpus", "Attached Units": "attached_units"}
#: lines nvidia-smi prints instead of a GPU's data, or instead of any data
_MESSAGE = re.compile(r"(Unable to determine the device handle|No devices were found|NVIDIA-SMI has failed"
                      r"|Failed to initialize NVML|couldn't communicate with the NVIDIA driver|Unknown Error"
                      r"|GPU is lost|Driver/library version mismatch|Insufficient Permissions|Unable to|failed)",
                      re.IGNORECASE)
#: lines that are always messages, whatever colons they hold
_MESSAGE_START = ("Unable to determine the device handle", "No devices were found", "NVIDIA-SMI has failed",
                  "Failed to initialize NVML", "Driver/library version mismatch", "Unable to query",
                  "Unable to get", "NVML library version")
#: a bus id inside a message: ``GPU0000:3B:00.0`` / ``GPU 00000000:3B:00.0``
_MESSAGE_BUS = re.compile(r"GPU\s?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
#: lines a ccdiag fixture carries in front of a captured output (its source and notes)
FIXTURE_PREFIX = "#ccdiag-"
#: a shell prompt and command pasted above the output (``$ nvidia-smi -q``, ``# nvidia-smi -q -d ECC``)
_PROMPT = re.compile(r"^(?:[$#❯>]|\S+@\S+[:~][^ ]*[$#])\s*\S*nvidia-smi")
#: a group header nvidia-smi -q prints, followed by an indented field of that group
_GROUP_FRAGMENT = re.compile(r"^(?P<ind> *)(?:ECC Errors|Retired Pages|Remapped Rows|Clocks (?:Event|Throttle) Reasons"
                             r"|GPU Link Info|Fabric|Temperature|GPU Power Readings|Power Readings)\s*\n"
                             r"(?P=ind) +\S[^\n:]*?(?:\s+:\s\S.*)?\n", re.M)
#: the most GPUs one log may describe (a garbled file cannot make millions)
MAX_GPUS = 1024


@dataclass
class SmiGpu:
    """One GPU's block. ``fields``: full path -> value as printed (first occurrence; a repeated
    path gets ``#2``, ``#3`` ...); ``processes``: one dict per listed process."""

    bus_id: str | None
    line_no: int
    fields: dict[str, str] = field(default_factory=dict)
    processes: list[dict[str, str]] = field(default_factory=list)

    def get(self, path: str) -> str | None:
        return self.fields.get(path)


@dataclass
class SmiLog:
    """What one ``nvidia-smi -q`` output says. ``fragment``: no ``==NVSMI LOG==`` banner and no GPU
    header were seen (a pasted group); its fields then sit on one GPU whose bus id is None."""

    timestamp: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None
    gpus: list[SmiGpu] = field(default_factory=list)
    messages: list[tuple[int, str]] = field(default_factory=list)
    banner: bool = False
    fragment: bool = False
    source: str = "nvidia-smi -q"

    def failed_bus_ids(self) -> dict[str, str]:
        """Bus id -> the message nvidia-smi printed instead of that GPU's data."""
        out: dict[str, str] = {}
        for _, text in self.messages:
            m = _MESSAGE_BUS.search(text)
            if m:
                out.setdefault(normalize_smi_bus(m.group(1)), text)
        return out


def normalize_smi_bus(bus: str) -> str:
    """``00000000:3B:00.0`` -> ``0000:3b:00.0`` (the form sysfs and ccdiag use)."""
    dom, rest = bus.split(":", 1)
    return f"{int(dom, 16):04x}:{rest.lower()}"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def parse_smi_q(text: str) -> SmiLog:
    """Read ``nvidia-smi -q`` output (whole, one GPU, one group, or a fragment)."""
    log = SmiLog()
    gpu: SmiGpu | None = None
    stack: list[tuple[int, str]] = []  # (indent, name) of the open groups inside the GPU
    pending: tuple[int, str, str] | None = None  # a field that may turn out to be a group
    seen: dict[str, int] = {}
    process: dict[str, str] | None = None

    def put(path: str, value: str) -> None:
        nonlocal process
        assert gpu is not None
        n = seen.get(path, 0) + 1
        seen[path] = n
        gpu.fields[path if n == 1 else f"{path}#{n}"] = value
        leaf = path.rsplit("/", 1)[-1]
        if path.startswith("Processes/") and leaf in ("GPU instance ID", "Process ID") and (
                process is None or leaf in process):
            process = {}
            gpu.processes.append(process)
        if path.startswith("Processes/") and process is not None:
            process.setdefault(leaf, value)

    def flush_pending(next_indent: int | None) -> None:
        """A field followed by deeper lines is a group too; otherwise it is a plain field."""
        nonlocal pending
        if pending is None:
            return
        ind, name, value = pending
        pending = None
        path = "/".join([n for _, n in stack] + [name])
        put(path, value)
        if next_indent is not None and next_indent > ind:
            stack.append((ind, name))

    def new_gpu(bus: str | None, n: int) -> None:
        nonlocal gpu, stack, seen, process
        if len(log.gpus) >= MAX_GPUS:
            return
        gpu = SmiGpu(bus, n)
        log.gpus.append(gpu)
        stack, seen, process = [], {}, None

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.expandtabs(8).rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith(FIXTURE_PREFIX) or _PROMPT.match(stripped):
            continue
        if stripped.startswith("=") and "NVSMI LOG" in stripped:
            log.banner = True
            continue
        ind = _indent(line)
        m = _GPU_HEADER.match(stripped)
        if m:
            flush_pending(None)
            new_gpu(m.group("bus"), n)
            continue
        f = _FIELD.match(stripped)
        if f is not None and gpu is None and f.group("name") in _TOP_FIELDS:
            attr = _TOP_FIELDS[f.group("name")]
            value = (f.group("value") or "").strip()
            if attr == "attached_gpus":
                log.attached_gpus = int(value) if value.isdigit() else None
            elif attr != "attached_units":
                setattr(log, attr, value or None)
            continue
        if stripped.startswith(_MESSAGE_START) or (_MESSAGE.search(stripped) and (f is None or gpu is None)):
            flush_pending(None)
            log.messages.append((n, stripped))
            continue
        if gpu is None:
            # a pasted group without its GPU header: read it as one GPU of unknown address
            new_gpu(None, n)
            log.fragment = not log.banner
        flush_pending(ind)
        while stack and stack[-1][0] >= ind:
            stack.pop()
        if f is None:
            stack.append((ind, stripped))
            continue
        pending = (ind, f.group("name").strip(), (f.group("value") or "").strip())
    flush_pending(None)
    return log


def looks_like_smi_q(text: str) -> bool:
    """Whether ``text`` is ``nvidia-smi -q`` output: its banner, or GPU headers with its fields."""
    head = text[:1 << 16]
    if "==NVSMI LOG==" in head:
        return True
    if re.search(r"^\s*GPU [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", head, re.M) and (
            "Product Name" in head or "GPU UUID" in head):
        return True
    # a pasted group (``-d ECC``, a grep): one of nvidia-smi's group headers over its own field lines
    return bool(_GROUP_FRAGMENT.search(head))
