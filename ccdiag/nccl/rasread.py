"""NCCL's RAS client output (``ncclras``, NCCL 2.24+): dead, unresponsive and lagging ranks, judged.

Why: when a job hangs, ``ncclras`` (or ``echo verbose status | nc localhost 28028``) asks NCCL's own
RAS threads which processes are dead or unresponsive and which ranks are behind. Its text output has
fixed sections (``Job summary``, ``Communicators``, ``Errors``, ``Warnings``) whose entries name the
condition (``DEAD``, ``INCOMPLETE``, ``MISMATCH``, ``TIMEOUT``) and the processes (``Process 3487984
on node 172.16.64.213 managing GPU 5``, ``Rank 0 -- GPU 0 managed by process 483072 on node ...``);
since NCCL 2.28.7 ``ncclras -f json`` prints the raw data (``communicators[].missing_ranks`` with
``unresponsive``/``considered_dead``, per-rank ``collective_counts``, ``init_state``, ``async_error``),
and since 2.29 ``ncclras -m`` prints one event a line (``PEER_DEAD: Process ... on node ...``).
Both shapes are taken from NCCL's source (``src/ras/client_support.cc``) and its RAS guide
(``docs/userguide/source/troubleshooting/ras.rst``), and read here into findings: a dead process is a
failure of that process's node or application; ranks whose operation counts lag the others are the
ones to look at in a hang.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ccdiag.nccl.diagnose import FAIL, INFO, WARN, LogFinding

RAS_GUIDE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html"
_PROCESS = re.compile(r"Process (\d+) on node (\S+) managing GPUs? ([\d, ]+)")
_RANK = re.compile(r"Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)")
_LAUNCHED = re.compile(r"(?<!\d)(\d{1,9}) ranks? ha(?:s|ve) (?:launched up to operation|status) (\S+)")
_ENTRY = re.compile(r"^\s{0,4}(#\d+-\d+ \(\w+\) )?([A-Z]{3,})\s*$")
_SECTION = re.compile(r"(?m)^(?:Errors|Warnings)\n={4,}$")
_COMM_ENTRY = re.compile(r"#\d+-\d+ \([0-9a-f]{8,}\) [A-Z]{4,}")
_JOB = re.compile(r"^\s*(\d+)\s+(\d+(?:-\d+)?)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s*$")


@dataclass
class RasEntry:
    section: str  # "Errors" | "Warnings"
    what: str  # DEAD, INCOMPLETE, MISMATCH, TIMEOUT...
    comm: str | None
    lines: list[str] = field(default_factory=list)


def looks_like_ras(text: str) -> bool:
    head = text[:4096]
    return ("Job summary" in head or "Communicators..." in head or "RAS Monitor Mode" in head
            or "PEER_DEAD:" in head or "Group     Comms" in head or _SECTION.search(head) is not None
            or _COMM_ENTRY.search(head) is not None) or ('"communicators"' in head and ('"missing_ranks"' in text or '"ras"' in text))


def read_ras(text: str) -> list[LogFinding]:
    """Findings from one ``ncclras`` output (text or JSON)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _from_json(json.loads(stripped))
    return _from_text(text)


def _from_text(text: str) -> list[LogFinding]:
    entries: list[RasEntry] = []
    section = None
    job = None
    for raw in text.splitlines():
        line = raw.rstrip()
        title = line.strip()
        if "PEER_DEAD:" in title:  # monitor mode (ncclras -m): one event per line
            entries.append(RasEntry("Errors", "DEAD", None, ["a process died (monitor mode)",
                                                             title.split("PEER_DEAD:", 1)[1].strip()]))
            continue
        if title in ("Errors", "Warnings"):
            section = title
            continue
        if title in ("Job summary", "Communicators") or title.startswith("Communicators..."):
            section = None
            continue
        m = _JOB.match(line)
        if m and job is None:
            job = {"nodes": int(m.group(1)), "processes": int(m.group(4)), "gpus": int(m.group(5))}
        if section is None or not title or set(title) == {"="}:
            continue
        e = _ENTRY.match(line)
        if e:
            entries.append(RasEntry(section, e.group(2), (e.group(1) or "").strip() or None))
        elif entries:
            entries[-1].lines.append(title)
    return _judge(entries, job)


def _dead(e: RasEntry) -> LogFinding:
    """A process RAS gave up on: a failure of that process or its node, which hangs its communicators."""
    procs = [m.groups() for l in e.lines for m in [_PROCESS.search(l)] if m]
    who = "; ".join(f"process {p} on node {n} (GPU {g.strip()})" for p, n, g in procs) or "; ".join(e.lines[:3])
    return LogFinding(FAIL, "RAS: process dead", f"{' '.join(e.lines[:1])}: {who}",
                      "NCCL's RAS network lost this process for more than 60 s: it crashed, was killed (OOM "
                      "killer, scheduler) or its node went down; every communicator it belongs to hangs",
                      "read that process's own log and its node's kernel log (dmesg: OOM killer, Xid errors); "
                      "restart the job without that node if the node is at fault", "node", "ras-dead",
                      refs=(RAS_GUIDE,), debug_subsys="INIT,NET")


def _incomplete(e: RasEntry, anyone_dead: bool) -> LogFinding:
    """Ranks that did not answer RAS: a failure, or a warning when a dead process already explains them."""
    procs = [m.groups() for l in e.lines for m in [_PROCESS.search(l)] if m]
    missing = [l for l in e.lines if l.startswith("The missing rank")]
    text = (f"{e.comm + ': ' if e.comm else ''}{'; '.join(e.lines[:2])}" +
            (f" ({', '.join(f'process {p} on node {n}' for p, n, _ in procs)})" if procs else ""))
    return LogFinding(WARN if anyone_dead else FAIL, "RAS: data missing from ranks", text + (
        f"; {'; '.join(missing)}" if missing and missing[0] not in text else ""),
        "these ranks did not answer RAS: unresponsive (stopped, stuck in a system call, or overloaded) or "
        "already gone", "query again: a rank that stays missing is hung or dead (`ncclras -v`); attach a "
        "debugger to it (py-spy dump, gdb) to see where it is stuck", "application", "ras-incomplete",
        refs=(RAS_GUIDE,))


def _mismatch(e: RasEntry, anyone_dead: bool) -> LogFinding:
    """Ranks whose operation counts differ: the lowest count and the ranks named are where a hang sits."""
    groups = [(int(m.group(1)), m.group(2)) for l in e.lines for m in [_LAUNCHED.search(l)] if m]
    ranks = [m.groups() for l in e.lines for m in [_RANK.search(l)] if m]
    behind = ""
    if groups and all(v.isdigit() for _, v in groups):
        low = min(int(v) for _, v in groups)
        behind = f"; the ranks at operation {low} are behind"
    named = ", ".join(f"rank {r} (process {p} on {n}, GPU {g})" for r, g, p, n in ranks[:8])
    return LogFinding(WARN, "RAS: ranks disagree", f"{e.comm + ': ' if e.comm else ''}"
                      f"{'; '.join(l for l in e.lines if not l.startswith('Rank '))[:300]}{behind}" +
                      (f" ({named})" if named else ""),
                      "the communicator's ranks report different operation counts or states; transient "
                      "while collectives run, a hang when repeated queries show the same numbers",
                      "query again; if the counts do not move, the lagging ranks named are where the job is "
                      "stuck (one stopped calling collectives, or a code path differs)", "application",
                      "ras-mismatch", refs=(RAS_GUIDE,))


def _timeout(e: RasEntry, anyone_dead: bool) -> LogFinding:
    """Late answers while RAS collected: a note, since its later queries route around them."""
    return LogFinding(INFO, "RAS: timeouts while collecting", "; ".join(e.lines[:2]),
                      "some processes answered RAS late; repeated queries route around unresponsive ones",
                      "query again", "network", "ras-timeout", refs=(RAS_GUIDE,))


#: the conditions judged after the dead processes, in the output's own order (others, ERROR among them, are
#: judged by the reader that made them)
_CONDITIONS = {"INCOMPLETE": _incomplete, "MISMATCH": _mismatch, "TIMEOUT": _timeout}


def _judge(entries: list[RasEntry], job: dict | None) -> list[LogFinding]:
    """The findings of the entries: dead processes first (the cause of everything else in a hang), then the
    other conditions in order; a job summary with nothing wrong is a healthy job, said so."""
    anyone_dead = any(e.what == "DEAD" for e in entries)
    out = [_dead(e) for e in entries if e.what == "DEAD"]
    out += [_CONDITIONS[e.what](e, anyone_dead) for e in entries if e.what in _CONDITIONS]
    if not out and job is not None:
        out.append(LogFinding(INFO, "RAS: job healthy", f"{job['processes']} processes on {job['nodes']} nodes, "
                              f"{job['gpus']} GPUs: no errors or warnings", "", "", None, "ras-ok", refs=(RAS_GUIDE,)))
    return out


def _from_json(doc: dict) -> list[LogFinding]:
    entries: list[RasEntry] = []
    for c in doc.get("communicators", []) or []:
        comm = f"comm {c.get('hash')}"
        dead = [r for r in c.get("missing_ranks", []) or [] if (r.get("status") or {}).get("considered_dead")]
        stuck = [r for r in c.get("missing_ranks", []) or [] if not (r.get("status") or {}).get("considered_dead")]
        if dead:
            entries.append(RasEntry("Errors", "DEAD", comm, [f"{len(dead)} rank(s) considered dead"] + [
                f"Process {r.get('pid')} on node {r.get('host')} managing GPU {r.get('nvml_dev')}" for r in dead]))
        if stuck:
            entries.append(RasEntry("Errors", "INCOMPLETE", comm, [f"Missing communicator data from {len(stuck)} rank(s)"]
                                    + [f"Process {r.get('pid')} on node {r.get('host')} managing GPU {r.get('nvml_dev')}"
                                       for r in stuck] + [f"The missing rank: {r.get('rank')}" for r in stuck]))
        counts: dict[int, list[dict]] = {}
        for r in c.get("ranks", []) or []:
            total = sum(v for v in (r.get("collective_counts") or {}).values() if isinstance(v, int))
            counts.setdefault(total, []).append(r)
            st = r.get("status") or {}
            if st.get("async_error") or st.get("init_state") not in (None, 0, 7):
                entries.append(RasEntry("Errors", "ERROR", comm, [f"rank {r.get('rank')} on {r.get('host')} reports "
                                                                 f"init_state {st.get('init_state')} async_error "
                                                                 f"{st.get('async_error')}"]))
        if len(counts) > 1:
            lines = [f"{len(rs)} ranks have launched up to operation {n}" for n, rs in sorted(counts.items())]
            low = min(counts)
            lines += [f"Rank {r.get('rank')} -- GPU {r.get('nvml_dev')} managed by process {r.get('pid')} on node "
                      f"{r.get('host')}" for r in counts[low][:8]]
            entries.append(RasEntry("Warnings", "MISMATCH", comm, lines))
    out = _judge(entries, None)
    for e in entries:
        if e.what == "ERROR":
            out.insert(0, LogFinding(FAIL, "RAS: rank in error", e.lines[0], "a rank's communicator is in an error "
                                     "state (a non-zero asynchronous error or failed initialisation)", "read that "
                                     "rank's NCCL log for the WARN that set it", "application", "ras-error",
                                     refs=(RAS_GUIDE,)))
    if not out:
        out.append(LogFinding(INFO, "RAS: job healthy", f"{doc.get('communicators_count', 0)} communicator(s), NCCL "
                              f"{doc.get('nccl_version', '?')}: no missing, dead or lagging ranks", "", "", None,
                              "ras-ok", refs=(RAS_GUIDE,)))
    return out


__all__ = ["looks_like_ras", "read_ras"]
