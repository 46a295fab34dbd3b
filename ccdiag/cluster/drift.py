"""Drift across a fleet: per machine type, every host whose versions differ, with both values.

``ccdiag compare`` reads many hosts' check reports. A fleet drifts one upgrade at a time, and a
host of one machine type must only be held to its own type: an A100 node's driver is no outlier
among H100 nodes. So each report is reduced to its machine type and its versions (the same reader
``check --policy`` uses, :mod:`ccdiag.inputs.knowngood`), folded into per-type counts and dropped
(the reports stream; memory grows with the distinct values and the hosts named for each, at most
:data:`KEEP_HOSTS` per value). The reference of a type is its known-good set where the policy given
to ``compare --policy`` has one, else the value most of the type's hosts report; every host with
another value is named, with its value and the reference's. A type split without a majority and
without a set names each value with its hosts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ccdiag.inputs.knowngood import KEYS, LIST_KEYS, TABLE_KEYS, KnownGood, data_of_report, machine_type, pick, versions

#: hosts named per distinct value of a key within a type
KEEP_HOSTS = 1000
NOT_READ = "(not read)"


def flat(key: str, value: Any) -> str:
    """One comparable text per key: a list as its sorted items, a table as its sorted ``k=v`` pairs."""
    if value is None:
        return NOT_READ
    if key in LIST_KEYS:
        return ", ".join(sorted(set(value))) or "(none)"
    if key in TABLE_KEYS:
        return " ".join(f"{k}={v}" for k, v in sorted(value.items())) or "(none)"
    return str(value)


@dataclass
class _Type:
    hosts: int = 0
    values: dict[str, Counter] = field(default_factory=dict)
    named: dict[tuple[str, str], list[str]] = field(default_factory=dict)


@dataclass
class DriftFleet:
    known: tuple[KnownGood, ...] = ()
    types: dict[str, _Type] = field(default_factory=dict)

    def add_report(self, doc: dict, host: str) -> None:
        data = data_of_report(doc)
        mtype = machine_type(data) or "(machine type not read)"
        found = versions(data)
        t = self.types.setdefault(mtype, _Type())
        t.hosts += 1
        for key in KEYS:
            text = flat(key, found.get(key))
            t.values.setdefault(key, Counter())[text] += 1
            named = t.named.setdefault((key, text), [])
            if len(named) < KEEP_HOSTS:
                named.append(host)

    def drifts(self) -> list[dict]:
        """One entry per (machine type, key, differing value): the hosts, both values and the basis."""
        out = []
        for mtype, t in sorted(self.types.items()):
            known = pick(self.known, mtype) if self.known else None
            for key in KEYS:
                counts = t.values.get(key) or Counter()
                if known is not None and key in known.values:
                    ref, basis = flat(key, known.values[key]), f"the known-good set of {known.machine_type or 'every type'}"
                else:
                    top, n = counts.most_common(1)[0] if counts else (None, 0)
                    if top is None or len(counts) == 1:
                        continue
                    if n * 2 <= t.hosts:
                        out.append({"machine_type": mtype, "key": key, "kind": "no majority", "of": t.hosts,
                                    "values": {v: {"count": c, "hosts": t.named.get((key, v), [])}
                                               for v, c in counts.most_common()}})
                        continue
                    ref, basis = top, f"the majority of its {t.hosts} hosts"
                for value, count in counts.most_common():
                    if value == ref:
                        continue
                    out.append({"machine_type": mtype, "key": key, "value": value, "expected": ref, "basis": basis,
                                "hosts": t.named.get((key, value), []), "count": count, "of": t.hosts})
        return out


def lines(drifts: list[dict], limit: int) -> list[str]:
    """The text of ``compare``'s drift section."""
    if not drifts:
        return []
    out = [f"versions apart within their machine type: {len(drifts)}"]
    for d in drifts[:limit]:
        if d.get("kind") == "no majority":
            split = "; ".join(f"{v!r} on {', '.join(x['hosts'][:5])}" + (f" (+{x['count'] - 5})" if x["count"] > 5 else "")
                              for v, x in d["values"].items())
            out.append(f"  {d['machine_type']}: {d['key']} has no majority among {d['of']} hosts: {split}")
            continue
        more = f" (+{d['count'] - len(d['hosts'])} more)" if d["count"] > len(d["hosts"]) else ""
        out.append(f"  {d['machine_type']}: {d['key']}: {', '.join(d['hosts'])}{more} has {d['value']!r}; "
                   f"{d['basis']}: {d['expected']!r}")
    if len(drifts) > limit:
        out.append(f"  ... {len(drifts) - limit} more (--limit, --json)")
    return out


__all__ = ["DriftFleet", "KEEP_HOSTS", "flat", "lines"]
