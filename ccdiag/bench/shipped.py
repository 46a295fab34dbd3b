"""Every benchmark ccdiag ships, registered: the engines' modules register theirs on import.

A module of its own so that the registry (:mod:`.registry`) never imports the engines that import it:
the registry is the base, this is the list.
"""

from __future__ import annotations

from ccdiag.bench import gpu_copy, ib_write  # noqa: F401 - registration side effect
from ccdiag.bench.registry import REGISTRY, Benchmark


def load_all() -> dict[str, Benchmark]:
    """Every registered benchmark by name (cheap: no engine library is imported)."""
    return dict(REGISTRY)
