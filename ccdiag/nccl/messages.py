"""The message formats NCCL and its network plugins can print, as extracted from their sources.

Why: a log line is explained by the message it was printed from. ``ccdiag/data/nccl_messages.json``
holds every ``WARN`` format (and the ``INFO`` formats that carry a failure or fallback fact) of the NCCL
releases 2.18 to the pinned one, and of aws-ofi-nccl, Google's GPUDirect-TCPX plugin and the
Mellanox RDMA/SHARP plugin, each with its source file and line and the releases that print it
(``scripts/extract_nccl_messages.py`` re-extracts it from the projects' git repositories). This module
loads that list and finds the format a printed message came from: each ``printf`` format becomes a
regular expression (``%s`` any text, ``%d`` a number, ``%p`` a pointer), indexed by its leading words
so a message is tried against a handful of formats, not two thousand.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

DATA = "nccl_messages.json"

_CONV = re.compile(r"%(?:%|[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t|q)?([diouxXeEfgGcspnma]))")


@dataclass(frozen=True)
class Message:
    source: str  # "nccl", "aws-ofi-nccl", "nccl-plugin-gpudirecttcpx", "nccl-rdma-sharp-plugins"
    level: str  # "WARN" | "INFO"
    format: str
    file: str  # at the newest release that prints it
    line: int
    versions: tuple[str, ...]  # runs of releases, "2.18.1..2.30.7"
    also: tuple[str, ...] = ()  # earlier places, "src/misc/shmutils.cc:112 (2.18.1..2.21.5)"

    @property
    def where(self) -> str:
        here = f"{self.source} {self.file}:{self.line} ({', '.join(self.versions)})"
        return here + "".join(f"; {a}" for a in self.also)


@functools.lru_cache(maxsize=1)
def load() -> tuple[dict, tuple[Message, ...]]:
    """(the sources' metadata, every extracted message)."""
    raw = json.loads(resources.files("ccdiag.data").joinpath(DATA).read_text(encoding="utf-8"))
    msgs = tuple(Message(e["source"], e["level"], e["format"], e["file"], e["line"], tuple(e["versions"]),
                         tuple(e.get("also", ()))) for e in raw["entries"])
    return raw["sources"], msgs


def pinned(source: str = "nccl") -> str:
    """The newest release of ``source`` the list was extracted from."""
    return load()[0][source]["pinned"]


def in_release(msg: Message, release: str) -> bool:
    """Whether ``msg`` is printed by ``release`` (a version as the list writes it, "2.30.7")."""
    key = _vkey(release)
    for run in msg.versions:
        lo, _, hi = run.partition("..")
        if _vkey(lo) <= key <= _vkey(hi or lo):
            return True
    return False


def _vkey(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.\-]", v.lstrip("v")))


def format_regex(fmt: str) -> str:
    """A regular expression matching what ``printf(fmt, ...)`` prints. Adjacent ``%s`` are one wildcard and
    messages are at most a line, so matching stays bounded."""
    out, pos = [], 0
    for m in _CONV.finditer(fmt):
        if m.start() > pos:
            out.append(re.escape(fmt[pos:m.start()]))
        spec = m.group(1)
        if spec is None:
            out.append("%")
        elif spec in "diu":
            out.append(r"[-+]?\d+")
        elif spec in "oxX":
            out.append(r"(?:0[xX])?[0-9a-fA-F]+")
        elif spec == "p":
            out.append(r"(?:0x[0-9a-fA-F]+|\(nil\)|0)")
        elif spec in "eEfgG":
            out.append(r"(?:[-+]?[\d.]+(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan))")
        elif spec == "c":
            out.append(".")
        elif out and out[-1] == ".*?":
            pass  # adjacent any-text conversions are one wildcard (no nested backtracking)
        else:  # s, m, a, n: any text (lazy, so a format's later literals anchor it)
            out.append(".*?")
        pos = m.end()
    out.append(re.escape(fmt[pos:]))
    return "".join(out)


def _lead(fmt: str) -> str:
    """The literal text a format starts with, up to its first conversion (may be empty)."""
    m = _CONV.search(fmt)
    return fmt[:m.start()] if m else fmt


KEY = 6  # characters of the leading literal used as the index key
MIN_LITERAL = 4  # a format with less literal text than this identifies nothing


class Index:
    """Formats by the first :data:`KEY` characters of their leading literal; shorter leads apart."""

    def __init__(self, messages: tuple[Message, ...]) -> None:
        self.by_key: dict[str, list[Message]] = {}
        self.short: list[Message] = []  # leading literal shorter than KEY (often a leading %s)
        for m in messages:
            if len(_CONV.sub("", m.format).strip()) < MIN_LITERAL:
                continue  # "%s" alone (a message built at run time) would match any text
            lead = _lead(m.format).lstrip()
            if len(lead) >= KEY:
                self.by_key.setdefault(lead[:KEY], []).append(m)
            else:
                self.short.append(m)
        self._rx: dict[str, re.Pattern] = {}
        self._pieces: dict[str, list[str]] = {}

    def _compiled(self, fmt: str) -> re.Pattern:
        rx = self._rx.get(fmt)
        if rx is None:
            rx = self._rx[fmt] = re.compile(format_regex(fmt.strip()) + r"\s*", re.DOTALL)
        return rx

    def _could(self, fmt: str, text: str) -> bool:
        """The format's literal pieces appear in ``text`` in order: a cheap test before any regex is compiled."""
        pieces = self._pieces.get(fmt)
        if pieces is None:
            pieces = self._pieces[fmt] = [p for i, p in enumerate(_CONV.split(fmt.strip())) if i % 2 == 0 and p]
        pos = 0
        for piece in pieces:
            i = text.find(piece, pos)
            if i < 0:
                return False
            pos = i + len(piece)
        return True

    def find(self, text: str, file: str | None = None) -> Message | None:
        """The format ``text`` was printed from (the one from ``file`` when several fit), or None."""
        text = text.strip()
        if len(text) > 1024:
            return None  # no format prints more than a line; a longer text is not one message
        cands = self.by_key.get(text[:KEY], [])
        found = [m for m in cands if self._could(m.format, text) and self._compiled(m.format).fullmatch(text)]
        if not found:
            found = [m for m in self.short if self._could(m.format, text) and self._compiled(m.format).fullmatch(text)]
        if not found:
            return None
        if file:
            base = file.rsplit("/", 1)[-1]
            same = [m for m in found if m.file.endswith(file) or m.file.rsplit("/", 1)[-1] == base]
            if same:
                found = same
        # the most specific: the longest literal text wins over a format of mostly %s
        return max(found, key=lambda m: len(_CONV.sub("", m.format)))


@functools.lru_cache(maxsize=1)
def index() -> Index:
    return Index(load()[1])


__all__ = ["Index", "Message", "format_regex", "in_release", "index", "load", "pinned"]
