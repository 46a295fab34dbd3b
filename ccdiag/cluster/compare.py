"""Outliers among many hosts' JSON reports with no baseline file, and a two-report diff.

Why no baseline: in a fleet of identical nodes, the fleet itself is the baseline: a value that
differs from what most hosts report (driver, firmware, a link's trained rate, a finding's status)
or a number far from the fleet's median by a robust measure (MAD: one broken node cannot move it)
is worth a look. Why streaming: thousands of reports of ~0.5 MB each do not fit in memory at once,
so each file is read, reduced to flat facts, folded into per-key aggregates and dropped:

* a text value: a count per distinct value (at most :data:`MAX_TEXT_VALUES`), and the first
  :data:`KEEP_TEXT_HOSTS` hosts of each;
* a number: exact counts while there are few distinct values (hardware facts), else a fixed
  reservoir sample for the median and MAD; plus the :data:`KEEP_HOSTS` lowest and highest values
  with their hosts, since an outlier is by definition in a tail.

Memory is bounded by keys x (:data:`RESERVOIR` + 2 x :data:`KEEP_HOSTS` + host names of the
minority text values), whatever the number of reports.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from ccdiag.cluster import reportfields as rf
from ccdiag.cluster.gather import facts_from_report

KEEP_HOSTS = 50
#: hosts kept per distinct text value (a minority driver on 100 hosts should name all 100)
KEEP_TEXT_HOSTS = 1000
RESERVOIR = 256
EXACT_DISTINCT = 64
MAX_TEXT_VALUES = 256
#: robust z-score (|x - median| / (1.4826 MAD)) above which a number is an outlier
DEFAULT_Z = 5.0
#: per-GPU numbers worth comparing (counters that only grow with uptime are left out)
GPU_NUMBERS = ("memory_total_bytes", "temperature_c", "memory_temperature_c", "power_w", "power_limit_w",
               "pcie_gen_current", "pcie_width_current", "ecc_aggregate_uncorrected",
               "remapped_rows_uncorrectable", "temp_slowdown_c")
#: readings of a moment, not of the machine: a GPU's temperature and power follow its load, and its
#: PCIe link drops to a lower generation when idle (power saving). Reported, never gating the exit.
MOMENTARY = ("temperature_c", "memory_temperature_c", "power_w", "pcie_gen_current")
#: the smallest difference worth a robust deviation, per metric (absolute, relative to the median):
#: a fleet whose values agree exactly (MAD 0) would otherwise make any 1-unit difference an outlier
TOLERANCE = {"temperature_c": (2.0, 0.0), "memory_temperature_c": (2.0, 0.0), "power_w": (5.0, 0.05),
             "power_limit_w": (0.0, 0.01), "memory_total_bytes": (0.0, 0.001), "temp_slowdown_c": (1.0, 0.0),
             "pcie_gen_current": (1.0, 0.0)}
#: the largest report read (a check report of a large node is well under 1 MB)
MAX_REPORT_BYTES = 32 << 20


def metric_of(key: str) -> str:
    """``gpu3 temperature_c`` -> ``temperature_c``; other keys are their own metric."""
    return key.split(" ", 1)[1] if key.startswith("gpu") and " " in key else key


def tolerance(key: str, median: float) -> float:
    abs_tol, rel_tol = TOLERANCE.get(metric_of(key), (0.0, 0.0))
    return max(abs_tol, rel_tol * abs(median))


def gating(key: str) -> bool:
    return metric_of(key) not in MOMENTARY


def report_paths(inputs: Iterable[str]) -> Iterator[str]:
    """Files as given; directories expanded to their ``*.json`` files, sorted, not recursive."""
    for p in inputs:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                if name.endswith(".json"):
                    yield os.path.join(p, name)
        else:
            yield p


def flatten(doc: dict) -> dict:
    """One report as flat comparable facts: the fleet facts of :mod:`gather`, the verdict, each
    finding's status, and per-GPU numbers; every field read by its type (a wrong-typed one is a
    :class:`ccdiag.cluster.reportfields.FieldError` naming its path)."""
    out = dict(facts_from_report(doc))
    verdict = rf.obj(doc.get("verdict"), "verdict")
    if "status" in verdict:
        out["verdict"] = rf.text(verdict["status"], "verdict/status")
    for i, f in enumerate(rf.objs(doc.get("findings"), "findings")):
        comp = rf.obj(f.get("component"), f"findings/{i}/component")
        key = rf.text(f.get("key"), f"findings/{i}/key") or \
            f"{rf.text(f.get('check'), f'findings/{i}/check')}|{rf.text(comp.get('name'), f'findings/{i}/component/name')}"
        out[f"finding {key}"] = rf.text(f.get("status"), f"findings/{i}/status")
    out.update(nccl_facts(doc))
    nvml = rf.obj(rf.obj(rf.obj(doc.get("probes"), "probes").get("nvml"), "probes/nvml").get("data"), "probes/nvml/data")
    for i, g in enumerate(rf.objs(nvml.get("gpus"), "probes/nvml/data/gpus")):
        index = rf.text(g.get("index"), f"probes/nvml/data/gpus/{i}/index")
        for name in GPU_NUMBERS:
            v = rf.number(g.get(name), f"probes/nvml/data/gpus/{i}/{name}")
            if v is not None:
                out[f"gpu{index} {name}"] = v
    return out


def nccl_facts(doc: dict) -> dict:
    """The NCCL settings a report's host would write (``cluster check --reports-dir`` reports carry
    them): one key per setting, plus the names of those set, so a host that leaves out a setting its
    peers set differs too (a missing key names no host). The same comparison ``cluster check`` makes
    live (:mod:`ccdiag.cluster.nccl_agree`); here it is kept out of :func:`facts_from_report`, which
    that check also reads, so a live run does not say it twice."""
    nccl = doc.get("nccl")
    settings = nccl.get("settings") if isinstance(nccl, dict) else None
    if not isinstance(settings, dict):
        return {}
    out: dict = {f"nccl_setting {k}": rf.text(v, f"nccl/settings/{k}") for k, v in settings.items()}
    out["nccl_settings_set"] = ",".join(sorted(settings)) or "(none)"
    return out


def host_of(doc: dict, path: str) -> str:
    host: dict = doc["host"] if isinstance(doc.get("host"), dict) else {}
    return str(host.get("rank_host") or host.get("hostname") or os.path.basename(path))


@dataclass
class KeyAgg:
    """Everything kept about one key across the fleet."""

    n: int = 0
    text: Counter = field(default_factory=Counter)
    text_hosts: dict = field(default_factory=dict)
    nums: Counter = field(default_factory=Counter)
    reservoir: list = field(default_factory=list)
    exact: bool = True
    low: list = field(default_factory=list)   # max-heap by -value: the KEEP_HOSTS lowest
    high: list = field(default_factory=list)  # min-heap: the KEEP_HOSTS highest
    n_num: int = 0
    out_of_range: list = field(default_factory=list)  # (literal, host) of numbers beyond a float

    def add(self, value, host: str, rng: random.Random) -> None:
        self.n += 1
        if isinstance(value, rf.OutOfRange):
            # beyond any float: never in a median, always named (the first KEEP_HOSTS of them)
            if len(self.out_of_range) < KEEP_HOSTS:
                self.out_of_range.append((str(value), host))
            return
        if rf.is_number(value):
            self._add_num(float(value), host, rng)
            return
        v = json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)
        if v not in self.text and len(self.text) >= MAX_TEXT_VALUES:
            return
        self.text[v] += 1
        hosts = self.text_hosts.setdefault(v, [])
        if len(hosts) < KEEP_TEXT_HOSTS:
            hosts.append(host)

    def _add_num(self, x: float, host: str, rng: random.Random) -> None:
        self.n_num += 1
        if self.exact:
            self.nums[x] += 1
            if len(self.nums) > EXACT_DISTINCT:
                self.exact = False
                self.reservoir = list(self.nums.elements())[:RESERVOIR]
                self.nums = Counter()
        else:
            if len(self.reservoir) < RESERVOIR:
                self.reservoir.append(x)
            else:
                j = rng.randrange(self.n_num)
                if j < RESERVOIR:
                    self.reservoir[j] = x
        item = (x, host)
        if len(self.low) < KEEP_HOSTS:
            heapq.heappush(self.low, (-x, host))
        elif x < -self.low[0][0]:
            heapq.heapreplace(self.low, (-x, host))
        if len(self.high) < KEEP_HOSTS:
            heapq.heappush(self.high, item)
        elif x > self.high[0][0]:
            heapq.heapreplace(self.high, item)

    def median_mad(self) -> tuple[float, float] | None:
        if self.n_num == 0:
            return None
        values = list(self.nums.elements()) if self.exact else self.reservoir
        med = _median(values)
        mad = _median([_gap(v, med) for v in values])
        return med, mad


def _median(values: list[float]) -> float:
    """The median without overflow: two middle values near the float maximum are halved before
    they are added (``statistics.median`` adds first, which makes an infinity, then NaNs)."""
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else xs[mid - 1] / 2 + xs[mid] / 2


def _gap(x: float, y: float) -> float:
    """|x - y|, at most the largest float (the difference of two huge values of opposite sign
    would be an infinity)."""
    d = abs(x - y)
    return d if math.isfinite(d) else sys.float_info.max


@dataclass
class Fleet:
    """The aggregates of every report read so far."""

    keys: dict = field(default_factory=dict)
    hosts: int = 0
    unreadable: list = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def add_facts(self, facts: dict, host: str) -> None:
        self.hosts += 1
        for key, value in facts.items():
            agg = self.keys.get(key)
            if agg is None:
                agg = self.keys[key] = KeyAgg()
            agg.add(value, host, self.rng)

    def outliers(self, z: float = DEFAULT_Z) -> list[dict]:
        out = []
        # a key some reports lack (a GPU fewer) names no host by its absence: the count facts
        # (gpu_count, gpu_usable) do
        for key, agg in sorted(self.keys.items()):
            major, nmaj = agg.text.most_common(1)[0] if agg.text else (None, 0)
            if agg.text and nmaj * 2 > agg.n and len(agg.text) > 1:  # a majority to stand out from
                for v, cnt in agg.text.items():
                    if v == major:
                        continue
                    out.append({"key": key, "value": v, "fleet": major, "hosts": agg.text_hosts.get(v, []),
                                "count": cnt, "of": agg.n, "kind": "differs from the majority",
                                "gating": gating(key)})
            out += _numeric_outliers(key, agg, z)
            out += [{"key": key, "value": literal, "fleet": None, "hosts": [h], "count": 1, "of": agg.n,
                     "kind": "a number beyond any float (a broken reading)", "gating": True}
                    for literal, h in agg.out_of_range]
        return out

    def without_gpu_data(self) -> list[str]:
        """Hosts whose report has no NVML data (the probe failed, or no driver), up to
        :data:`KEEP_TEXT_HOSTS`: nothing of their GPUs was compared, so they never pass silently."""
        agg = self.keys.get("gpu_data")
        return list(agg.text_hosts.get("missing", [])) if agg else []


def _numeric_outliers(key: str, agg: KeyAgg, z: float) -> list[dict]:
    """Values in the tails more than ``z`` robust deviations from the median, the deviation never
    smaller than the metric's tolerance (so integer noise in a fleet that otherwise agrees exactly
    is not an outlier); a momentary reading is reported with ``gating`` False."""
    mm = agg.median_mad()
    if mm is None:
        return []
    med, mad = mm
    scale = min(max(1.4826 * mad, tolerance(key, med)), sys.float_info.max)
    out = []
    seen = set()
    for x, h in sorted([(-nx, h) for nx, h in agg.low] + list(agg.high)):
        if (x, h) in seen or x == med:
            continue
        seen.add((x, h))
        rz = _gap(x, med) / scale if scale > 0 else math.inf
        if rz <= z:
            continue
        out.append({"key": key, "value": x, "fleet": med, "hosts": [h], "count": 1, "of": agg.n_num,
                    "kind": "far from the median", "gating": gating(key),
                    "robust_z": round(rz, 1) if math.isfinite(rz) else None})
    return out


_VALIDATOR = None
#: sections validated by type only: their full schema costs ~0.3 s per report (thousands of nodes),
#: 100x the reading; compare reads few fields of them, each checked by :func:`_shallow_errors`
_SHALLOW = ("findings", "probes", "topology", "bench", "nccl", "nccl_log")


def _validator():
    """The published report schema, with the large sections checked by their type only."""
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema

        from ccdiag.report.document import load_schema

        schema = load_schema()
        props = dict(schema["properties"])
        for key in _SHALLOW:
            if key in props:
                props[key] = {"type": props[key].get("type", ["object", "array", "null"])}
        schema = dict(schema, properties=props)
        _VALIDATOR = jsonschema.validators.validator_for(schema)(schema)
    return _VALIDATOR


def _shallow_errors(doc: dict) -> str | None:
    """What the full schema says of the fields compare reads in the large sections, checked by hand."""
    for i, f in enumerate(doc.get("findings") or []):
        if not isinstance(f, dict) or not isinstance(f.get("check"), str) or not isinstance(f.get("status"), str) \
                or not isinstance(f.get("component"), dict):
            return f"at findings/{i}: not a finding (check, status and component required)"
    for name, run in (doc.get("probes") or {}).items():
        if not isinstance(run, dict) or not isinstance(run.get("data"), (dict, type(None))):
            return f"at probes/{name}: not a probe run (an object whose data is an object or null)"
    gpus = (((doc.get("probes") or {}).get("nvml") or {}).get("data") or {}).get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus)):
        return "at probes/nvml/data/gpus: not a list of GPU objects"
    return None


def load(path: str) -> dict:
    """One ``ccdiag check --json`` report whose every field compare reads has its type (see
    :func:`read_report`); or ValueError naming the file and why not."""
    return read_report(path)[0]


def read_report(path: str) -> tuple[dict, dict]:
    """One report and its flat facts (:func:`flatten`); ValueError naming the file when it is not
    JSON, not a check report, not valid by the schema, or has a field of the wrong type."""
    doc = _load_doc(path)
    try:
        return doc, flatten(doc)
    except rf.FieldError as exc:  # valid by the schema's shallow check, a field of the wrong type
        raise ValueError(f"{path}: not a usable ccdiag report: at {exc}") from None


def _load_doc(path: str) -> dict:
    """One ``ccdiag check --json`` report, read through the bounded reader (a FIFO, a device or a
    file over :data:`MAX_REPORT_BYTES` is refused) and validated against the published schema; or
    ValueError saying, in one line naming the file, why it is not one."""
    from ccdiag.core.userfiles import UserFileError, read_user_bytes

    try:
        raw = read_user_bytes(path, "ccdiag JSON report", MAX_REPORT_BYTES)
        doc = rf.loads(raw.decode("utf-8"))
    except UserFileError as exc:
        raise ValueError(str(exc)) from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, NaN/Infinity
        raise ValueError(f"{path}: not JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise ValueError(f"{path}: not a ccdiag report: nested too deeply to be one") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a ccdiag JSON report (top level is not an object)")
    if doc.get("kind") != "check":
        raise ValueError(f"{path}: not a ccdiag check report (kind {str(doc.get('kind'))[:60]!r}; "
                         f"compare reads `ccdiag check --json` and `cluster check --reports-dir` files)")
    try:
        err = next(iter(sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))), None)
    except RecursionError:
        raise ValueError(f"{path}: not a ccdiag report: nested too deeply to be one") from None
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ValueError(f"{path}: not a valid ccdiag report: at {where}: {err.message[:200]}")
    why = _shallow_errors(doc)
    if why:
        raise ValueError(f"{path}: not a valid ccdiag report: {why}")
    return doc


def scan(inputs: Iterable[str], also: Callable[[dict, str], None] | None = None) -> Fleet:
    """Every report folded into the fleet; one that cannot be read or does not fit the schema is
    named in ``unreadable`` and the rest are still compared. ``also(doc, host)`` sees each readable
    report too, before it is dropped (the drift of versions per machine type: ccdiag/cluster/drift.py)."""
    fleet = Fleet()
    for path in report_paths(inputs):
        try:
            doc, facts = read_report(path)
        except ValueError as exc:
            fleet.unreadable.append(str(exc))
            continue
        fleet.add_facts(facts, host_of(doc, path))
        if also is not None:
            also(doc, host_of(doc, path))
    return fleet


def diff(a: dict, b: dict) -> list[dict]:
    """Every fact that differs between two reports (or is in only one)."""
    fa, fb = flatten(a), flatten(b)
    rows = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key), fb.get(key)
        if va != vb:
            rows.append({"key": key, "a": va, "b": vb})
    return rows
