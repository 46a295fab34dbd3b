"""A node rebuilt from NVIDIA's support files: the door's replaying face over a bug report.

``nvidia-bug-report.sh`` collects most of what ccdiag's probes read, in its own layout: the files
(``/proc/modules``, ``/proc/cmdline``, ``/proc/driver/nvidia/*``), the kernel log, ``lspci``,
``nvidia-smi --query``, ``ibstat``, ``dmidecode``, ``systemctl status nvidia-fabricmanager``. This
module reads those sections (:mod:`ccdiag.nvfiles`) and writes them into a
:class:`~ccdiag.host.snapshot.SnapshotData` as a recording would have held them: files at their
paths, the sysfs subsets the lspci/ibstat/dmidecode output stands for
(:mod:`ccdiag.host.bugreport_tree`), the NVML answers ``nvidia-smi -q`` printed
(:mod:`ccdiag.nvfiles.smi_nvml`), the kernel log, and the answer of ``systemctl is-active
nvidia-fabricmanager``. Replayed through :class:`~ccdiag.host.door.ReplayHost`, every probe and
check runs unchanged; the snapshot is marked a *partial record*, so a read the report cannot answer
is "not recorded" (unknown), never "absent", and a probe with nothing to read is reported as not
judged (``meta["not_recorded"]``), never as a subsystem the node lacks.

``snapshot --bug-report FILE -o S`` saves the same snapshot, so the report replays like any other.
An ``nvidia-smi -q`` output (text or ``-x`` XML) alone is read the same way, as a report holding
that one section.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Iterator

from ccdiag.core.errors import UserInputError
from ccdiag.core.probenames import (PROBE_INFINIBAND, PROBE_KMSG, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE,
                                    PROBE_SMI_TOPO)
from ccdiag.host.door import NOT_RECORDED_META, PARTIAL_RECORD_META, ReplayHost
from ccdiag.host.bugreport_tree import put_dmi, put_infiniband, put_pci_tree
from ccdiag.host.snapshot import SnapshotData, base_meta
from ccdiag.nvfiles import dmidecode, ibstat, lspci, sections, services
from ccdiag.nvfiles.nvlinktext import parse_nvlink
from ccdiag.nvfiles.smi_nvml import nvml_records
from ccdiag.nvfiles.smiq import looks_like_smi_q, parse_smi_q
from ccdiag.nvfiles.smixml import looks_like_smi_xml, parse_smi_xml
from ccdiag.nvfiles.supportfile import SupportFile

FABRIC_MANAGER_ARGV = ["systemctl", "is-active", "nvidia-fabricmanager"]
#: lines looked at to tell a bug report from an nvidia-smi output and from anything else
SNIFF_LINES = 400
#: what a probe reads that no nvidia-bug-report.sh writes
NEVER_IN_A_REPORT = {
    PROBE_SMI_TOPO: "nvidia-bug-report.sh does not run `nvidia-smi topo -m` (R384 to R580)",
    PROBE_NETDEV: "a bug report lists no network interfaces",
}


class BugReportError(UserInputError):
    """A file that is neither an nvidia-bug-report log nor an nvidia-smi -q output (exit 2)."""


@dataclass
class Built:
    """What reading the report came to, for the snapshot's metadata and the report's notes."""

    kind: str  # "bug-report" | "nvidia-smi -q" | "nvidia-smi -q -x"
    sections_total: int = 0
    sections_read: dict[str, int] = field(default_factory=dict)
    sections_unknown: list[str] = field(default_factory=list)
    derived: list[str] = field(default_factory=list)
    not_recorded: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    written: str | None = None  # a pasted nvidia-smi -q's Timestamp line


def _sniff(lines: Iterator[str]) -> tuple[list[str], str]:
    head: list[str] = []
    for line in lines:
        head.append(line)
        if len(head) >= SNIFF_LINES:
            break
    text = "\n".join(head)
    if "NVIDIA bug report log file" in text or "nvidia-bug-report.sh Version" in text or (
            "____________________" in text and "\n*** /" in text):
        return head, "bug-report"
    if looks_like_smi_xml(text):
        return head, "nvidia-smi -q -x"
    if looks_like_smi_q(text):
        return head, "nvidia-smi -q"
    return head, "unknown"


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


def _time_epoch(date: str | None) -> float | None:
    if not date:
        return None
    try:
        return parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError, IndexError):
        pass
    try:  # `date`'s default form: "Fri Jun 21 02:03:08 UTC 2024"
        parts = date.split()
        return time.mktime(time.strptime(" ".join(parts[:4] + parts[-1:]), "%a %b %d %H:%M:%S %Y"))
    except (ValueError, IndexError):
        return None


def _kernel_lines(secs: dict[str, list[sections.Section]], built: Built) -> list[str] | None:
    """The kernel log: dmesg; else the NVRM lines the script grepped from this boot's journal or the
    system logs (earlier boots' lines are left out: their XIDs are not this boot's)."""
    dmesg = [ln for s in secs.get("dmesg", []) for ln in s.lines]
    if any(ln.strip() for ln in dmesg):
        return dmesg
    scan = [ln for s in secs.get("kernel-log-scan", []) for ln in s.lines]
    kept: list[str] = []
    current = None
    for line in scan:
        stripped = line.strip()
        if stripped.endswith(":") and (stripped.startswith("journalctl -b") or stripped.startswith("/var/log/")):
            current = stripped[:-1]
            continue
        if current is not None and (current in ("journalctl -b -0", "journalctl -b 0")
                                    or current.startswith("/var/log/")) and stripped:
            kept.append(line.rstrip())
    if kept:
        built.notes.append("kernel log: dmesg is empty in the report; read the NVIDIA lines the script found in "
                           "this boot's journal and the system logs")
        return kept
    return None


def _nvml(secs: dict[str, list[sections.Section]], snap: SnapshotData, built: Built, report: str) -> None:
    query = secs.get("nvidia-smi-query") or secs.get("nvidia-smi-query-old")
    if not query:
        built.not_recorded[PROBE_NVML] = ("the report has no `nvidia-smi --query` output "
                                          "(written with --safe-mode, or nvidia-smi was missing)")
        return
    log = parse_smi_q("\n".join(query[0].lines))
    links: dict = {}
    for entry in ("nvidia-smi-nvlink-status", "nvidia-smi-nvlink-errors"):
        for s in secs.get(entry, []):
            parse_nvlink("\n".join(s.lines), links)
    snap.nvml = nvml_records(log, links, source=f"nvidia-smi --query in {report}")
    built.derived.append(f"NVML answers from nvidia-smi --query ({len(log.gpus)} GPU block(s)"
                         + (f", NVLink states of {len(links)} GPU(s)" if links else "") + ")")
    if log.messages:
        built.notes.append("nvidia-smi said: " + "; ".join(m for _, m in log.messages[:4]))


def _pci(secs: dict[str, list[sections.Section]], snap: SnapshotData, built: Built) -> None:
    listing = lspci.PciListing()
    for s in secs.get("lspci-tree", []):
        lspci.read_tree(s.lines, listing)
    for s in secs.get("lspci-nn", []):
        lspci.read_list(s.lines, listing)
    for s in secs.get("lspci-verbose", []):
        lspci.read_verbose(s.lines, listing)
    if not listing.functions:
        built.not_recorded[PROBE_PCIE] = "the report has no lspci output"
        return
    lspci.link_parents(listing)
    n = put_pci_tree(snap, listing)
    if n == 0:
        built.not_recorded[PROBE_PCIE] = "the report's lspci output does not say where devices sit (no tree)"
        return
    linked = sum(1 for f in listing.functions.values() if f.link_from)
    built.derived.append(f"PCI tree from lspci ({n} functions, link state of {linked})")


def _files(secs: dict[str, list[sections.Section]], snap: SnapshotData) -> int:
    n = 0
    for group in secs.values():
        for s in group:
            if s.path is None:
                continue
            if s.kind == "file" and s.kept:
                body = "\n".join(s.lines).rstrip("\n") + "\n"
                snap.put_file(s.path, body)
                n += 1
            elif s.kind == "file_missing":
                snap.put_error(s.path, "missing", 2, "does not exist (the bug report says)")
            elif s.kind == "file_unreadable":
                snap.put_error(s.path, "permission", 13, "not readable when the bug report was written")
    return n


def _collect(lines: Iterator[str], built: Built) -> tuple[sections.Prologue, dict[str, list[sections.Section]], bool]:
    secs: dict[str, list[sections.Section]] = {}
    prologue = sections.Prologue()
    ended = False
    for s in sections.iter_sections(lines):
        built.sections_total += 1
        if s.entry is None:
            if len(built.sections_unknown) < 20:
                built.sections_unknown.append(f"line {s.line_no}: {s.header[:120]}")
            continue
        if s.entry == "prologue":
            prologue = sections.parse_prologue(s.lines)
        if s.entry == "epilogue":
            ended = True
        if s.kept:
            secs.setdefault(s.entry, []).append(s)
            built.sections_read[s.entry] = built.sections_read.get(s.entry, 0) + 1
        elif s.kind in ("file_missing", "file_unreadable"):
            # the report says the file is absent (or unreadable): that is recorded, whatever the file
            secs.setdefault("(absent files)", []).append(s)
        if s.cut:
            built.notes.append(f"section {s.header[:60]!r} has {s.n_lines} lines: "
                               + (f"its last {sections.MAX_KERNEL_LINES} were read" if s.entry in sections.TAIL_KEPT
                                  else f"its first {sections.MAX_KEPT_LINES} were read"))
    return prologue, secs, ended


def _from_report(lines: Iterator[str], report: str, built: Built) -> tuple[SnapshotData, sections.Prologue]:
    snap = SnapshotData()
    prologue, secs, ended = _collect(lines, built)
    if not ended:
        built.notes.append("the report does not end with its closing line: the script was stopped or the file "
                           "is cut; what it would have written later is not recorded")
    if prologue.safe_mode:
        built.notes.append("written with --safe-mode: nvidia-smi, InfiniBand and other queries were skipped")
    _files(secs, snap)
    if prologue.kernel:
        snap.put_file("/proc/sys/kernel/osrelease", prologue.kernel + "\n")
    _nvml(secs, snap, built, report)
    _pci(secs, snap, built)
    kernel = _kernel_lines(secs, built)
    if kernel is not None:
        snap.kmsg[0] = {"lines": kernel}
        built.derived.append(f"kernel log ({len(kernel)} lines)")
    else:
        built.not_recorded[PROBE_KMSG] = "the report holds no kernel log lines"
    ib_sections = secs.get("ibstat", [])
    devices = ibstat.parse_ibstat([ln for s in ib_sections for ln in s.lines])
    if devices:
        ports = put_infiniband(snap, devices)
        built.derived.append(f"RDMA ports from ibstat ({len(devices)} devices, {ports} ports; rates not recorded)")
    else:
        built.not_recorded[PROBE_INFINIBAND] = ("the report has no ibstat output (R580 scripts run it where "
                                                "infiniband-diags is installed)")
    dmi = dmidecode.dmi_files([ln for s in secs.get("dmidecode", []) for ln in s.lines])
    if dmi:
        put_dmi(snap, dmi)
        built.derived.append("DMI identity from dmidecode")
    fm = secs.get("fabricmanager-status")
    state = services.active_state(fm[0].lines) if fm else None
    if state is not None:
        snap.commands.append({"epoch": 0, "argv": FABRIC_MANAGER_ARGV, "rc": 0 if state == "active" else 3,
                              "stdout": state + "\n", "stderr": "", "duration_s": 0.0, "timed_out": False,
                              "error": None})
        built.derived.append(f"nvidia-fabricmanager {state} (from systemctl status)")
    built.not_recorded.update({k: v for k, v in NEVER_IN_A_REPORT.items() if k not in built.not_recorded})
    return snap, prologue


def _from_smi(text: str, kind: str, report: str, built: Built) -> SnapshotData:
    snap = SnapshotData()
    log = parse_smi_xml(text, report) if kind == "nvidia-smi -q -x" else parse_smi_q(text)
    if not log.gpus and not log.messages:
        raise BugReportError(f"{report}: no GPU in this {kind} output")
    snap.nvml = nvml_records(log, source=f"{kind} in {report}")
    built.written = log.timestamp
    built.derived.append(f"NVML answers from {kind} ({len(log.gpus)} GPU block(s))")
    if log.fragment:
        built.notes.append("a part of an nvidia-smi -q output (no banner and no GPU header): read as one GPU")
    why = f"only an {kind} output was given"
    for probe in (PROBE_PCIE, PROBE_KMSG, PROBE_INFINIBAND, PROBE_SMI_TOPO, PROBE_NETDEV):
        built.not_recorded[probe] = why
    return snap


def read_bug_report(path: str, deadline: float | None = None) -> SnapshotData:
    """The snapshot a bug report (or an ``nvidia-smi -q`` output) stands for; :class:`BugReportError`
    or :class:`~ccdiag.nvfiles.supportfile.SupportFileError` (exit 2) for a file that is neither.
    ``deadline`` (``time.monotonic()``) stops the reading; what was read by then is used and the
    snapshot says the rest was not read."""
    name = os.path.basename(path)
    report = f"the bug report {name}"
    with SupportFile(path, "an nvidia-bug-report log or an nvidia-smi -q output", deadline) as f:
        lines = f.lines()
        head, kind = _sniff(lines)
        if kind == "unknown":
            if not any(ln.strip() for ln in head):
                raise BugReportError(f"{path}: empty, expected an nvidia-bug-report log or an nvidia-smi -q output")
            first = next((ln.strip() for ln in head if ln.strip()), "")[:80]
            raise BugReportError(f"{path}: not an nvidia-bug-report log nor an nvidia-smi -q output "
                                 f"(no section separators, no NVSMI banner; starts {first!r})")
        built = Built(kind)
        if kind == "bug-report":
            snap, prologue = _from_report(_chain(head, lines), report, built)
        else:
            report = f"the {kind} output {name}"
            snap = _from_smi("\n".join(_chain(head, lines)), kind, report, built)
            prologue = sections.Prologue(date=built.written)
        reading = f.reading
    if not reading.complete:
        built.notes.extend(reading.notes)
    gen = sections.generator_versions().get(prologue.version or "")
    epoch = _time_epoch(prologue.date)  # when the report was written, not when it is read
    snap.meta = base_meta(hostname=prologue.hostname, kernel=prologue.kernel, machine=prologue.machine,
                          source="bug-report", environ_recorded=[], time_epoch=epoch,
                          time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)) if epoch else None)
    snap.meta[PARTIAL_RECORD_META] = report
    snap.meta[NOT_RECORDED_META] = dict(sorted(built.not_recorded.items()))
    snap.meta["bug_report"] = {
        "file": name, "kind": built.kind, "bytes_read": reading.bytes_read, "compressed": reading.compressed,
        "complete": reading.complete and not any("closing line" in n for n in built.notes),
        "generator_version": prologue.version, "generator": (gen or {}).get("driver"), "date": prologue.date,
        "uname": prologue.uname, "safe_mode": prologue.safe_mode,
        "sections": {"total": built.sections_total, "read": dict(sorted(built.sections_read.items())),
                     "unknown_headers": built.sections_unknown},
        "derived": built.derived, "notes": built.notes,
    }
    snap.environ = {}
    return snap


def open_bug_report(path: str, deadline: float | None = None) -> ReplayHost:
    """The replaying door over :func:`read_bug_report`'s snapshot."""
    return ReplayHost(read_bug_report(path, deadline))
