"""NCCL Inspector records (the profiler plugin in NCCL's ``plugins/profiler/inspector``): per-rank bus
bandwidth of each collective, and the ranks that lag.

Why: the Inspector plugin writes one JSON object per collective per communicator and rank
(``header``: ``id``, ``comm_name``, ``rank``, ``n_ranks``, ``nnodes``; ``metadata``: ``hostname``, ``pid``;
``coll_perf``: ``coll``, ``coll_sn``, ``coll_msg_size_bytes``, ``coll_exec_time_us``,
``coll_algobw_gbs``, ``coll_busbw_gbs``; the keys as ``inspector_json.cc`` writes them). Read across
the ranks of one communicator, the same collective of the same size should run at the same bus
bandwidth everywhere. A rank that is consistently slower has a slower path (a degraded link, a GPU
or NIC at reduced speed); a rank consistently much faster than the others is the one they wait for:
it arrives last, so its own time is short. Records stream from files of any size; only per-rank
medians per (communicator, collective, size) are kept.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable

from ccdiag.nccl.diagnose import INFO, WARN, LogFinding

INSPECTOR_README = "https://github.com/NVIDIA/nccl/tree/master/plugins/profiler/inspector"
SLOW = 0.75  # a rank below this share of the communicator's median bus bandwidth is slow
LATE = 1.33  # a rank above this share waits least: the others wait for it
MAX_SAMPLES = 512  # per rank and group


def looks_like_inspector(text: str) -> bool:
    head = text[:4096]
    return '"coll_perf"' in head or ('"header"' in head and '"inspector_output_format_version"' in head)


def records(texts: Iterable[str]) -> Iterable[dict]:
    """JSON objects written one after another (pretty-printed or one per line)."""
    dec = json.JSONDecoder()
    for text in texts:
        pos, n = 0, len(text)
        while pos < n:
            while pos < n and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= n:
                break
            try:
                obj, pos = dec.raw_decode(text, pos)
            except json.JSONDecodeError:
                nxt = text.find("\n{", pos)
                if nxt < 0:
                    break
                pos = nxt + 1
                continue
            if isinstance(obj, dict):
                yield obj


def judge(objs: Iterable[dict]) -> list[LogFinding]:
    groups: dict[tuple, dict[str, list[float]]] = {}
    where: dict[tuple, str] = {}
    n = 0
    for o in objs:
        h, m, c = o.get("header") or {}, o.get("metadata") or {}, o.get("coll_perf") or {}
        bw = c.get("coll_busbw_gbs")
        if not isinstance(bw, (int, float)) or "coll" not in c:
            continue
        n += 1
        key = (h.get("id"), h.get("comm_name") or "", c.get("coll"), c.get("coll_msg_size_bytes"))
        rank = f"rank {h.get('rank')}"
        samples = groups.setdefault(key, {}).setdefault(rank, [])
        if len(samples) < MAX_SAMPLES:
            samples.append(float(bw))
        where.setdefault(key + (rank,), f"{m.get('hostname', '?')} pid {m.get('pid', '?')}")
    out = []
    for key, per_rank in groups.items():
        if len(per_rank) < 2:
            continue
        med = {r: statistics.median(v) for r, v in per_rank.items()}
        center = statistics.median(med.values())
        if center <= 0:
            continue
        comm, name, coll, size = key
        label = f"{coll} of {size} bytes on communicator {name or comm}"
        slow = sorted((r for r, v in med.items() if v < SLOW * center), key=lambda r: med[r])
        late = sorted((r for r, v in med.items() if v > LATE * center), key=lambda r: -med[r])
        if slow:
            out.append(LogFinding(WARN, "Inspector: slow rank", f"{label}: " + ", ".join(
                f"{r} ({where[key + (r,)]}) {med[r]:.1f} GB/s" for r in slow) + f" against a median of {center:.1f} "
                f"GB/s across {len(med)} ranks", "these ranks move the same collective at a lower bus bandwidth: "
                "their GPU, NIC or link is slower (degraded link, lower PCIe/NVLink speed, congested port)",
                "run `ccdiag check` and `ccdiag bench` on those ranks' nodes", "node", "inspector-slow",
                refs=(INSPECTOR_README,)))
        if late:
            out.append(LogFinding(WARN, "Inspector: late rank (the others wait for it)", f"{label}: " + ", ".join(
                f"{r} ({where[key + (r,)]}) {med[r]:.1f} GB/s" for r in late) + f" against a median of {center:.1f} "
                "GB/s", "a rank whose collectives look fastest arrives last: the others start earlier and wait for "
                "it", "profile that rank's work between collectives (data loading, imbalance, a slower GPU clock)",
                "application", "inspector-late", refs=(INSPECTOR_README,)))
    if not out:
        out.append(LogFinding(INFO, "Inspector: ranks agree", f"{n} collective records in {len(groups)} groups: no rank "
                              f"below {SLOW:.0%} or above {LATE:.0%} of its communicator's median bus bandwidth", "", "",
                              None, "inspector-ok", refs=(INSPECTOR_README,)))
    return out


__all__ = ["judge", "looks_like_inspector", "records"]
