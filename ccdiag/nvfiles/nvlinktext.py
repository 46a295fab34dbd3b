"""``nvidia-smi nvlink --status`` and ``--errorcounters`` text, read per GPU and link.

``--status`` prints ``GPU 0: <name> (UUID: GPU-...)`` then one ``Link k: 26.562 GB/s`` per link
(``Link k: <inactive>`` for a link down); a GPU without NVLink prints ``NVML: Unable to retrieve
NVLink information as all links are inActive`` instead. ``--errorcounters`` prints
``Link k: Replay Errors: N``, ``Recovery Errors``, ``CRC Errors`` (newer drivers add
``Effective Errors`` and others, not read). The bug report runs both (R5xx and later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GPU = re.compile(r"^\s*GPU (?P<index>\d+): (?P<name>.*?)(?: \(UUID: (?P<uuid>[^)]*)\))?\s*$")
_STATUS = re.compile(r"^\s*Link (?P<link>\d+): (?P<state>.+?)\s*$")
_COUNTER = re.compile(r"^\s*Link (?P<link>\d+): (?P<what>Replay|Recovery|CRC) Errors: (?P<n>\d+)\s*$")
_NONE = re.compile(r"all links are inactive|unable to retrieve nvlink", re.IGNORECASE)
MAX_LINKS = 64


@dataclass
class GpuLinks:
    index: int
    name: str | None = None
    uuid: str | None = None
    #: link -> True (active, with its speed), False (inactive)
    active: dict[int, bool] = field(default_factory=dict)
    speed_text: dict[int, str] = field(default_factory=dict)
    #: link -> {"replay": n, "recovery": n, "crc": n}
    counters: dict[int, dict[str, int]] = field(default_factory=dict)
    none: bool = False  # the driver said this GPU has no active NVLink


def parse_nvlink(text: str, into: dict[int, GpuLinks] | None = None) -> dict[int, GpuLinks]:
    """GPU index -> its links, from ``--status`` and/or ``--errorcounters`` output."""
    out = into if into is not None else {}
    gpu: GpuLinks | None = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            index = int(m.group("index"))
            gpu = out.setdefault(index, GpuLinks(index))
            gpu.name = gpu.name or m.group("name").strip() or None
            gpu.uuid = gpu.uuid or m.group("uuid")
            continue
        if gpu is None:
            continue
        if _NONE.search(line):
            gpu.none = True
            continue
        c = _COUNTER.match(line)
        if c:
            link = int(c.group("link"))
            if link < MAX_LINKS:
                gpu.counters.setdefault(link, {})[c.group("what").lower()] = int(c.group("n"))
            continue
        s = _STATUS.match(line)
        if s and int(s.group("link")) < MAX_LINKS and ":" not in s.group("state"):
            state = s.group("state")
            gpu.active[int(s.group("link"))] = "inactive" not in state.lower()
            gpu.speed_text[int(s.group("link"))] = state
    return out
