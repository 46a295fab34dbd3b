"""What each NCCL message means: families of messages with the part at fault and the remedy.

Why: echoing NCCL's ``WARN`` text tells a user nothing they had not read. ``ccdiag/data/
nccl_catalogue.json`` groups the messages NCCL and its network plugins print
(:mod:`ccdiag.nccl.messages`, extracted from their sources) into families; each family says what
the message means, which part is at fault (node, NIC, GPU, container, network, rank
configuration, application, NCCL itself), whether it is a root cause or the consequence of another
failure, what to do, which ``NCCL_DEBUG_SUBSYS`` shows the lines that decide it, and where that
knowledge comes from (NCCL's troubleshooting guide, a maintainer's answer in a public thread).

A message belongs to the first family whose patterns find it and whose ``files`` (the source file
NCCL prints before ``WARN``) and ``sources`` allow it; the generic families at the end take what is
left by the file it came from (internal asserts of the proxy, the IB transport, ...), and
``unknown-warn`` the rest. A ``derived`` family has no message: the reader gives it to what the log
shows NCCL chose (an interface no other host reaches, sockets between hosts, settings that differ
between ranks), with the same meaning, part at fault and remedy. :func:`coverage` counts, per source, how many extracted formats map to a
family with a meaning and a remedy.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ccdiag.nccl.messages import Message

DATA = "nccl_catalogue.json"
COMPONENTS = ("node", "nic", "gpu", "container", "network", "rank-config", "application", "nccl")
ROLES = ("root", "consequence", "either")
UNKNOWN = "unknown-warn"


@dataclass(frozen=True)
class Family:
    id: str
    title: str
    match: tuple[re.Pattern, ...]
    component: str
    role: str
    priority: int
    meaning: str
    remedy: str
    subsys: str
    refs: tuple[str, ...]
    files: tuple[re.Pattern, ...] = ()
    sources: tuple[str, ...] = ()
    generic: bool = False
    derived: bool = False  # no message of its own: given by the reader's rules from what NCCL chose

    def allows(self, source: str | None) -> bool:
        """A source known (extraction) must be listed; at run time (source None) a family of plugins only is
        left to messages that name their plugin."""
        if not self.sources:
            return True
        return (source or "nccl") in self.sources

    def fits(self, text: str, file: str | None, source: str | None) -> bool:
        if self.derived or not self.allows(source):
            return False
        if self.files:
            if not file or not any(f.search(file) for f in self.files):
                return False
        return not self.match or any(p.search(text) for p in self.match)

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "component": self.component, "role": self.role,
                "meaning": self.meaning, "remedy": self.remedy, "debug_subsys": self.subsys, "refs": list(self.refs)}


@functools.lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    raw = json.loads(resources.files("ccdiag.data").joinpath(DATA).read_text(encoding="utf-8"))
    out = []
    for f in raw["families"]:
        out.append(Family(f["id"], f["title"], tuple(re.compile(p) for p in f["match"]), f["component"], f["role"],
                          int(f["priority"]), f["meaning"], f["remedy"], f["subsys"], tuple(f["refs"]),
                          tuple(re.compile(p) for p in f.get("files", ())), tuple(f.get("sources", ())),
                          bool(f.get("generic")), bool(f.get("derived"))))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def by_id() -> dict[str, Family]:
    return {f.id: f for f in families()}


def source_of(text: str, file: str | None = None) -> str | None:
    """The plugin a printed message names (``NET/OFI`` is aws-ofi-nccl), or None (NCCL or not known)."""
    if text.startswith("NET/OFI") or (file or "").startswith(("nccl_net_ofi", "nccl_ofi")):
        return "aws-ofi-nccl"
    if "tcpx" in (file or "").lower() or "GPUDirectTCPX" in text or "TCPXO" in text:
        return "nccl-plugin-gpudirecttcpx"
    return None


def _norm_file(file: str | None) -> str | None:
    if not file:
        return None
    return file[4:] if file.startswith("src/") else file


def family_of(text: str, file: str | None = None, source: str | None = None, *, unknown: bool = True) -> Family | None:
    """The family of a message (printed text or extracted format). ``file`` is the source file it came
    from; ``source`` the project when known. ``unknown``: fall back to :data:`UNKNOWN` (else None)."""
    file = _norm_file(file)
    if source is None:
        source = source_of(text, file)
    for fam in families():
        if fam.id == UNKNOWN:
            continue
        if fam.fits(text, file, source):
            return fam
    return by_id()[UNKNOWN] if unknown else None


def explain(text: str, file: str | None = None) -> tuple[Family, Message | None]:
    """(family, extracted message or None) of one printed message; the message's own file refines the
    family when the line did not name one. Only the first 1024 characters are read (no message NCCL prints
    is longer; the patterns and the cache stay bounded on a line of any length)."""
    return _explain(text[:1024], file)


@functools.lru_cache(maxsize=4096)
def _explain(text: str, file: str | None) -> tuple[Family, Message | None]:
    from ccdiag.nccl.messages import index

    msg = index().find(text, file)
    fam = family_of(text, file) or by_id()[UNKNOWN]  # never None: unknown=True falls back to UNKNOWN
    if msg is not None and (fam.generic or fam.id == UNKNOWN) and not file:
        better = family_of(text, msg.file, msg.source)
        if better is not None:
            fam = better
    return fam, msg


def coverage() -> dict:
    """Per source and level: formats extracted at the pinned release, how many map to a family (and how
    many of those to a specific, non-generic one), and the formats left unmapped."""
    from ccdiag.nccl.messages import in_release, load

    sources, msgs = load()
    out: dict = {}
    for m in msgs:
        src = sources[m.source]
        if not in_release(m, src["releases"][-1]):
            continue
        fam = family_of(m.format, m.file, m.source, unknown=False)
        row = out.setdefault(f"{m.source} {m.level}", {"source": m.source, "level": m.level, "release": src["pinned"],
                                                       "extracted": 0, "mapped": 0, "specific": 0, "unmapped": []})
        row["extracted"] += 1
        if fam is None:
            row["unmapped"].append(f"{m.file}:{m.line} {m.format}")
        else:
            row["mapped"] += 1
            row["specific"] += 0 if fam.generic else 1
    return out


__all__ = ["COMPONENTS", "Family", "ROLES", "UNKNOWN", "by_id", "coverage", "explain", "families", "family_of",
           "source_of"]
