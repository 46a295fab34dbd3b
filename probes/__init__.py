"""Probes: one module per source of facts, each a pure function of the host door.

Installed as ``ccdiag.probes`` (never as a top-level ``probes`` package). Each module exposes
``NAME``, ``TIMEOUT_S`` and ``collect(host)``, returning a frozen dataclass in which absent values
are ``None`` and per-device / per-file problems are :class:`ccdiag.core.readings.ReadError` entries.
Parsing is kept apart from reading: ``parse_*`` functions take text and are tested from tables.

Adding a probe is one new module here: decorate its ``collect`` with
:func:`ccdiag.probes.registry.probe` (its place in reports, what it reads in words, whether its counters
are judged over a window). Every probe list (``ccdiag snapshot --probe``, the daemon's probes, the
checks' ``needs=``, the probe labels of the metrics) derives from that registry.
"""
