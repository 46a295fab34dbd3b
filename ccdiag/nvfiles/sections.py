"""The sections of an ``nvidia-bug-report.log``, as the script that wrote it separates them.

``nvidia-bug-report.sh`` appends one block per thing it collects, each opened by a line of 44
underscores, a blank line and a header: ``*** /proc/modules`` (a file, then ``*** ls: ...`` and its
contents; ``*** /path does not exist`` when absent), the command line it ran (``/usr/bin/nvidia-smi
--query``), or a title (``dmesg:``). Within one block several commands may follow each other, each
after a blank line (R580's ``report_command`` writes the six ``nvidia-smi`` commands under one
separator). The headers every script version writes are listed in
``ccdiag/data/bugreport_sections.json`` (re-extracted from the script by
``scripts/extract_bugreport_sections.py``); each section found is matched to one entry there, so
what ccdiag reads and what it leaves is a table, not a guess.

One pass, line by line, constant work per line; only the bodies of the sections a caller keeps
(:func:`iter_sections`'s ``keep``) are held, so a report inflated to hundreds of megabytes by
X logs and base64 blobs costs the memory of the sections ccdiag reads.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Callable, Iterable, Iterator

#: a section separator: the script prints 44 underscores; any run of 20 or more counts
_SEPARATOR = re.compile(r"^_{20,}\s*$")
#: ``*** /path``, ``*** /path does not exist``, ``*** /path is not readable``
_FILE_HEADER = re.compile(r"^\*\*\* (?P<path>/\S*|\S+)(?P<state> does not exist| is not readable)?\s*$")
#: a command line as the script echoes it: optional ``timeout N``, the tool (maybe with its path), arguments
_COMMAND = re.compile(r"^(?:timeout \d+ )?(?P<path>(?:/[\w.+-]+)*/)?(?P<tool>[\w.+-]+)(?:\s+(?P<args>.*))?$")
#: the lines of the prologue ccdiag reads
_PROLOGUE = re.compile(r"^(nvidia-bug-report\.sh Version|Date|uname|command line flags):\s*(.*)$")
#: a row of R580's versions table: "NVIDIA GPU Details                  | NVIDIA H100 ..., 570.86.15, ..."
_TABLE_ROW = re.compile(r"^(?P<name>[A-Za-z][\w /.-]{1,40}?)\s*\|\s?(?P<value>.*)$")
#: lines one kept section may hold (a larger one is cut, with a note)
MAX_KEPT_LINES = 2_000_000
#: kernel logs keep their last lines, the most recent events, up to this many: a distribution
#: kernel's ring buffer (log_buf_len 256 KiB plus 4 KiB a CPU) holds about 10,000 lines, and this
#: covers one of several MiB; more is a log gone wild, and the kmsg probe must read it, and the
#: JSON report carry what it read, within --timeout
MAX_KERNEL_LINES = 50_000
TAIL_KEPT = frozenset({"dmesg", "kernel-log-scan"})
#: the Bottlerocket copy prefixes host files with this root; the node's own paths are without it
HOST_ROOT_PREFIXES = ("/.bottlerocket/rootfs",)


@dataclass(frozen=True)
class Entry:
    """One kind of section the script writes (a row of ``bugreport_sections.json``)."""

    id: str
    kind: str  # file | command | title | skip | error | base64 | untitled
    pattern: str
    read: str | None
    seen_in: tuple[str, ...]


@dataclass
class Section:
    """One block of the report. ``lines`` holds the body only when the caller kept it."""

    kind: str  # file | file_missing | file_unreadable | command | title | skip | error | base64 | untitled | unknown
    header: str
    line_no: int  # of the header, 1-based
    entry: str | None = None  # the catalogue entry's id (None: a header no entry knows)
    path: str | None = None  # a file section's path, normalised
    command: str | None = None  # a command section's command line, the tool without its directory
    lines: list[str] = field(default_factory=list)
    n_lines: int = 0
    kept: bool = False
    cut: bool = False  # more lines than MAX_KEPT_LINES: the rest was not kept


@lru_cache(maxsize=1)
def catalogue() -> tuple[Entry, ...]:
    """Every entry of ``ccdiag/data/bugreport_sections.json``, in its order (specific before general)."""
    raw = json.loads(resources.files("ccdiag").joinpath("data/bugreport_sections.json").read_text(encoding="utf-8"))
    return tuple(Entry(e["id"], e["kind"], e["pattern"], e.get("read"), tuple(e.get("seen_in", ())))
                 for e in raw["sections"])


@lru_cache(maxsize=1)
def generator_versions() -> dict[str, dict]:
    raw = json.loads(resources.files("ccdiag").joinpath("data/bugreport_sections.json").read_text(encoding="utf-8"))
    return dict(raw["generator_versions"])


@lru_cache(maxsize=1)
def _tools() -> frozenset[str]:
    """The tools whose command lines head sections (``nvidia-smi``, ``lspci`` ...)."""
    return frozenset(e.pattern.split()[0] for e in catalogue() if e.kind in ("command", "base64"))


def normalize_path(path: str) -> str:
    """``/proc/driver/nvidia/./gpus/X`` -> ``/proc/driver/nvidia/gpus/X``; a host-root prefix dropped."""
    for prefix in HOST_ROOT_PREFIXES:
        if path.startswith(prefix + "/"):
            path = path[len(prefix):]
    while "/./" in path:
        path = path.replace("/./", "/")
    while "//" in path:
        path = path.replace("//", "/")
    return path


def normalize_command(line: str) -> str | None:
    """The command line with the tool's directory and a ``timeout N`` dropped, blanks collapsed;
    None when the line is not a command of a tool the script runs."""
    m = _COMMAND.match(line.strip())
    if m is None or m.group("tool") not in _tools():
        return None
    args = " ".join((m.group("args") or "").split())
    return f"{m.group('tool')} {args}".strip()


@lru_cache(maxsize=4096)
def catalogue_entry_for(kind: str, header: str) -> Entry | None:
    """The first entry of ``kind`` whose pattern matches ``header`` (a path, a command, a title)."""
    kinds = ("file",) if kind in ("file", "file_missing", "file_unreadable") else (kind,)
    for e in catalogue():
        if e.kind in kinds and fnmatch.fnmatchcase(header, e.pattern):
            return e
    return None


def classify(line: str) -> Section:
    """The section a header line opens (its body still empty)."""
    text = line.strip()
    if text.startswith("*** ls:"):
        return Section("untitled", text, 0, "drm-driver-map")
    m = _FILE_HEADER.match(text)
    if m:
        path = normalize_path(m.group("path"))
        kind = {None: "file", " does not exist": "file_missing", " is not readable": "file_unreadable"}[m.group("state")]
        entry = catalogue_entry_for("file", path)
        return Section(kind, text, 0, entry.id if entry else None, path=path)
    if text.startswith("Skipping"):
        entry = catalogue_entry_for("skip", text)
        return Section("skip", text, 0, entry.id if entry else None)
    if text.startswith("Error: "):
        return Section("error", text, 0, "error")
    if text.startswith("base64 "):
        entry = catalogue_entry_for("base64", text)
        return Section("base64", text, 0, entry.id if entry else None)
    command = normalize_command(text)
    if command is not None:
        entry = catalogue_entry_for("command", command)
        return Section("command", text, 0, entry.id if entry else None, command=command)
    entry = catalogue_entry_for("title", text)
    if entry is not None:
        return Section("title", text, 0, entry.id)
    entry = catalogue_entry_for("untitled", text)
    if entry is not None:
        return Section("untitled", text, 0, entry.id)
    return Section("unknown", text, 0, None)


def _starts_subsection(line: str) -> bool:
    """Whether a line after a blank line opens a new section inside the same block: a command of a
    tool the script runs (R580 writes several ``report_command`` outputs under one separator)."""
    return bool(line) and not line[0].isspace() and normalize_command(line) is not None


def _trimmed(section: Section) -> Section:
    if section.entry in TAIL_KEPT and len(section.lines) > MAX_KERNEL_LINES:
        del section.lines[:-MAX_KERNEL_LINES]
        section.cut = True
    return section


def iter_sections(lines: Iterable[str], keep: Callable[[Section], bool] | None = None) -> Iterator[Section]:
    """Every section, in order. ``keep(section)`` (called once its header is known) says whether
    its body lines are held; by default the bodies of the sections ccdiag reads are."""
    if keep is None:
        keep = kept_by_default
    current: Section | None = None
    awaiting_header = True  # right after a separator (or at the start)
    previous_blank = False
    n = 0
    for line in lines:
        n += 1
        if line[:1] == "_" and _SEPARATOR.match(line):
            if current is not None:
                yield _trimmed(current)
            current = None
            awaiting_header = True
            previous_blank = False
            continue
        blank = not line.strip()
        if awaiting_header:
            if blank:
                continue
            current = classify(line)
            current.line_no = n
            current.kept = keep(current)
            awaiting_header = False
            previous_blank = False
            continue
        assert current is not None
        if previous_blank and current.kind in ("command", "title", "untitled", "unknown", "skip") \
                and _starts_subsection(line):
            yield _trimmed(current)
            current = classify(line)
            current.line_no = n
            current.kept = keep(current)
            previous_blank = False
            continue
        previous_blank = blank
        if current.kind == "file" and current.n_lines == 0 and line.startswith("*** ls:"):
            continue  # the file's metadata line, not its contents
        current.n_lines += 1
        if current.kept:
            if current.entry in TAIL_KEPT:
                current.lines.append(line)
                if len(current.lines) >= 2 * MAX_KERNEL_LINES:
                    del current.lines[:-MAX_KERNEL_LINES]  # amortised: the last lines are kept
                    current.cut = True
            elif len(current.lines) < MAX_KEPT_LINES:
                current.lines.append(line)
            else:
                current.cut = True
    if current is not None:
        yield _trimmed(current)


def kept_by_default(section: Section) -> bool:
    """Keep what ccdiag reads: the sections whose catalogue entry has a ``read``."""
    if section.entry is None:
        return False
    entry = _by_id().get(section.entry)
    return entry is not None and entry.read is not None


@lru_cache(maxsize=1)
def _by_id() -> dict[str, Entry]:
    return {e.id: e for e in catalogue()}


def entry(entry_id: str) -> Entry | None:
    return _by_id().get(entry_id)


@dataclass(frozen=True)
class Prologue:
    """What the report says of itself: the script's change number, date, ``uname -a`` and flags;
    R580's versions table rows (component -> first line of its details)."""

    version: str | None = None
    date: str | None = None
    uname: str | None = None
    flags: str | None = None
    table: tuple[tuple[str, str], ...] = ()

    @property
    def hostname(self) -> str | None:
        parts = (self.uname or "").split()
        return parts[1] if len(parts) > 2 and parts[0] == "Linux" else None

    @property
    def kernel(self) -> str | None:
        parts = (self.uname or "").split()
        return parts[2] if len(parts) > 2 and parts[0] == "Linux" else None

    @property
    def machine(self) -> str | None:
        parts = (self.uname or "").split()
        for p in reversed(parts):
            if p in ("x86_64", "aarch64", "ppc64le", "arm64"):
                return p
        return None

    @property
    def safe_mode(self) -> bool:
        return "--safe-mode" in (self.flags or "")


def parse_prologue(lines: list[str]) -> Prologue:
    found: dict[str, str] = {}
    table: list[tuple[str, str]] = []
    in_table = False
    for line in lines:
        m = _PROLOGUE.match(line.strip())
        if m and m.group(1) not in found:
            found[m.group(1)] = m.group(2).strip()
            continue
        if line.startswith("Component") and "|" in line:
            in_table = True
            continue
        if in_table:
            row = _TABLE_ROW.match(line)
            if row and row.group("name").strip():
                table.append((row.group("name").strip(), row.group("value").strip()))
    return Prologue(found.get("nvidia-bug-report.sh Version"), found.get("Date"), found.get("uname"),
                    found.get("command line flags"), tuple(table))
