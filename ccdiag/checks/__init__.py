"""Checks: pure rules ``(observations, topology, policy) -> findings``.

Each check is a function registered with :func:`check` under a stable id prefix. It receives a
:class:`CheckContext` and yields :class:`~ccdiag.findings.Finding` objects. Checks never read the
host: everything they judge is in the context, which is what makes a replayed snapshot give the same
verdict anywhere. A check that raises is isolated and becomes an ``unknown`` finding naming it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ccdiag.findings import UNKNOWN, Component, Finding
from ccdiag.policy import DEFAULT_POLICY, Policy
from ccdiag.probing import ProbeRun

#: modules holding checks, imported on first use
CHECK_MODULES = ("probes", "gpu", "xid", "nvlink", "pcie", "infiniband", "environment")


@dataclass(frozen=True)
class CheckSpec:
    name: str  # the id prefix its findings use, e.g. "pcie.link_downtrained"
    func: Callable[["CheckContext"], Iterable[Finding]]
    needs: tuple[str, ...]  # probes it reads; if one is unusable the check's own logic decides
    doc: str


REGISTRY: dict[str, CheckSpec] = {}


def check(name: str, needs: tuple[str, ...] = ()) -> Callable:
    """Register a check function under ``name`` (its stable id)."""

    def deco(func: Callable) -> Callable:
        REGISTRY[name] = CheckSpec(name, func, tuple(needs), (func.__doc__ or "").strip())
        return func

    return deco


@dataclass(frozen=True)
class CheckContext:
    """Everything checks may look at.

    ``runs`` is the first sample; ``later`` the second one taken ``window_s`` seconds later (counters
    are judged by their change between the two; ``later`` is None without a window).
    """

    runs: dict[str, ProbeRun]
    later: dict[str, ProbeRun] | None = None
    window_s: float = 0.0
    topology: Any = None  # ccdiag.topology.Topology or None
    policy: Policy = DEFAULT_POLICY
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* etc. from the environment or --env-file
    env_source: str = "environment"
    now: float = 0.0  # wall time of the observation (recording time on replay)
    meta: dict = field(default_factory=dict)

    def data(self, probe: str) -> Any:
        run = self.runs.get(probe)
        return run.data if run is not None and run.usable else None

    def later_data(self, probe: str) -> Any:
        if not self.later:
            return None
        run = self.later.get(probe)
        return run.data if run is not None and run.usable else None


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
