"""Checks: pure rules ``(observations, topology, policy) -> findings``.

Each check is a function registered with :func:`check` under a stable id prefix. It receives a
:class:`CheckContext` and yields :class:`~ccdiag.core.findings.Finding` objects. Checks never read the
host: everything they judge is in the context, which is what makes a replayed snapshot give the same
verdict anywhere. A check that raises is isolated and becomes an ``unknown`` finding naming it.
"""

from __future__ import annotations

import importlib
from typing import Iterable

from ccdiag.checks.common import gate
from ccdiag.checks.context import REGISTRY, CheckContext, CheckSpec, check
from ccdiag.core.findings import UNKNOWN, Component, Finding

__all__ = ["REGISTRY", "CheckContext", "CheckSpec", "check", "load_all", "run_checks", "CHECK_MODULES"]

#: modules holding checks, imported on first use
CHECK_MODULES = ("probes", "gpu", "xid", "nvlink", "nvswitch", "pcie", "infiniband", "environment", "platform",
                 "peers", "consistency", "rails", "imex", "drift")


def load_all() -> dict[str, CheckSpec]:
    for mod in CHECK_MODULES:
        try:
            importlib.import_module(f"ccdiag.checks.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"ccdiag.checks.{mod}":
                raise
    return REGISTRY


def run_checks(ctx: CheckContext, only: Iterable[str] | None = None) -> list[Finding]:
    """Run every registered check (or those whose id starts with one of ``only``)."""
    specs = load_all()
    prefixes = tuple(only or ())
    findings: list[Finding] = []
    for name, spec in sorted(specs.items()):
        if prefixes and not name.startswith(prefixes):
            continue
        gated = gate(ctx, name, spec.what, spec.needs)
        if gated is not None:
            findings.append(gated)
            continue
        try:
            findings.extend(spec.func(ctx))
        except Exception as exc:  # noqa: BLE001 - one broken rule must not hide the others
            findings.append(Finding(
                check=f"{name}", status=UNKNOWN,
                component=Component("node", "ccdiag"),
                summary=f"check {name} could not be evaluated: {type(exc).__name__}: {exc}",
                remedy="This is a ccdiag bug: attach `ccdiag snapshot` output to a bug report."))
    findings.sort(key=Finding.sort_key)
    return findings
