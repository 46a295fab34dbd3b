"""The rooms of ccdiag and what each may import: the one-way flow of data, as data.

A room is a folder (a sub-package of ``ccdiag``; ``probes`` and ``exporters`` sit at the top of the
source tree and are installed as ``ccdiag.probes`` and ``ccdiag.exporters``). Every room may use
``core``, whose modules import only each other. ``tests/test_layers.py`` holds every import of the
source to this table, and ``docs/architecture.md`` is drawn from it (``scripts/gen_docs.py``).
"""

from __future__ import annotations

#: room -> the rooms it may import from (besides itself and ``core``), upstream first
MAY_IMPORT: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "nvfiles": frozenset(),
    "host": frozenset({"nvfiles"}),
    "probes": frozenset({"host"}),
    "topology": frozenset({"probes"}),
    "inputs": frozenset({"probes", "topology"}),
    "nccl": frozenset({"probes", "topology"}),
    "checks": frozenset({"probes", "topology", "host", "nccl", "inputs"}),
    "benchparse": frozenset(),
    "bench": frozenset({"host", "probes", "topology", "inputs", "checks", "nccl", "benchparse", "nvfiles"}),
    "run": frozenset({"host", "probes", "topology", "checks", "nccl", "bench", "inputs"}),
    "report": frozenset({"probes", "topology", "checks", "nccl", "host", "bench"}),
    "cluster": frozenset({"host", "probes", "topology", "checks", "nccl", "bench", "run", "report", "inputs"}),
    "exporters": frozenset({"probes", "topology", "checks", "report", "host", "run", "nccl", "inputs"}),
    "health": frozenset({"host", "probes", "topology", "checks", "nccl", "bench", "run", "inputs", "report",
                         "exporters"}),
    "commands": frozenset({"host", "probes", "topology", "checks", "report", "exporters", "run", "nccl", "bench",
                           "benchparse", "cluster", "inputs", "nvfiles", "health"}),
}

#: rooms whose folder is at the top of the source tree rather than inside ``ccdiag/``
TOP_LEVEL_FOLDERS = ("probes", "exporters")
