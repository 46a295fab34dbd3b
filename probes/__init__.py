"""Probes: one module per source of facts, each a pure function of the host door.

Installed as ``ccdiag.probes`` (never as a top-level ``probes`` package). Each module exposes
``NAME``, ``TIMEOUT_S`` and ``collect(host)``, returning a frozen dataclass in which absent values
are ``None`` and per-device / per-file problems are :class:`ccdiag.readings.ReadError` entries.
Parsing is kept apart from reading: ``parse_*`` functions take text and are tested from tables.
"""
