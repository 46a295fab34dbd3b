"""The custom collector a scrape reads: the last completed cycle plus its age, nothing else.

A scrape never runs a probe. The collection loop :meth:`publishes <CycleCollector.publish>` each
finished cycle by swapping one reference; a scrape takes that reference and renders it. The text of
everything except the age is rendered once per cycle and reused by every scrape until the next
cycle, so a scrape costs a dictionary lookup and one line of formatting whatever the node's size.

The collector lives on a private :class:`~prometheus_client.CollectorRegistry` (no global state, no
``process_``/``python_`` series mixed in), and :meth:`describe` returns nothing so registering it
never triggers a collection.
"""

from __future__ import annotations

import gzip
import threading
import time
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from ccdiag.exporters import metrics as M
from ccdiag.exporters import spec as S
from ccdiag.exporters.cycle import Cycle


class StaticCollector:
    """A Collector over a fixed list of families (what ``generate_latest`` renders)."""

    def __init__(self, fams: list[Metric]):
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


class CycleCollector:
    """Serves the last published :class:`Cycle`. ``clock`` is the wall clock used for the age (tests
    fix it so the exposition is reproducible)."""

    def __init__(self, interval_s: float | None = None, clock: Callable[[], float] = time.time):
        self.interval_s = interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._cycle: Cycle | None = None
        self._cycles_total = 0
        self._static: bytes | None = None
        self._static_gz: bytes | None = None

    def publish(self, cycle: Cycle) -> None:
        """Render ``cycle`` and make it the one served. Rendering happens here, in the collection
        loop, not in the first scrape after it: a scrape then only copies bytes, and a cycle that
        cannot be rendered raises here and is not published (the previous one stays served)."""
        with self._lock:
            total = self._cycles_total + 1
        static = generate_latest(StaticCollector(self._families(cycle, total)))
        static_gz = gzip.compress(static, compresslevel=6)
        with self._lock:
            self._cycle = cycle
            self._cycles_total = total
            self._static, self._static_gz = static, static_gz

    @property
    def cycle(self) -> Cycle | None:
        return self._cycle

    @property
    def cycles_total(self) -> int:
        return self._cycles_total

    def describe(self) -> list:
        return []

    def _families(self, cycle: Cycle | None, total: int) -> list[Metric]:
        if cycle is None:
            fams: list[Metric] = []
            sp = S.BY_NAME["ccdiag_collection_cycles_total"]
            fams.append(CounterMetricFamily(sp.family_name, sp.help, value=0))
            return fams
        return M.families(cycle, interval_s=self.interval_s, cycles_total=total)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            cycle, total = self._cycle, self._cycles_total
        yield from self._families(cycle, total)
        if cycle is not None:
            yield M.age_family(cycle, self.clock())

    def _rendered(self, compressed: bool) -> tuple[Cycle | None, bytes]:
        with self._lock:
            cycle, total, static, static_gz = self._cycle, self._cycles_total, self._static, self._static_gz
        if static is None:
            static = generate_latest(StaticCollector(self._families(cycle, total)))
        body = static
        if compressed:
            if static_gz is None:
                static_gz = gzip.compress(static, compresslevel=6)
            body = static_gz
        with self._lock:
            if self._cycle is cycle and self._cycles_total == total:
                self._static = static
                if static_gz is not None:
                    self._static_gz = static_gz
        return cycle, body

    def _age_text(self, cycle: Cycle) -> bytes:
        return generate_latest(StaticCollector([M.age_family(cycle, self.clock())]))

    def exposition(self) -> bytes:
        """The whole text exposition; equal to ``generate_latest`` over a registry holding this
        collector, but with the per-cycle part rendered once."""
        cycle, static = self._rendered(False)
        return static if cycle is None else static + self._age_text(cycle)

    def exposition_gzip(self) -> bytes:
        """:meth:`exposition`, gzip-compressed: the cached per-cycle part and the age as two gzip
        members, which RFC 1952 readers (Prometheus' among them) decode as one stream."""
        cycle, static_gz = self._rendered(True)
        if cycle is None:
            return static_gz
        return static_gz + gzip.compress(self._age_text(cycle), compresslevel=1)


def make_registry(collector: CycleCollector) -> CollectorRegistry:
    """A private registry holding only ``collector``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
