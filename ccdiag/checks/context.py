"""The check registry and the context checks read: what a check declares, and what it may look at.

Kept apart from :mod:`ccdiag.checks` (which loads and runs the checks) and from
:mod:`ccdiag.checks.common` (the toolkit), so the toolkit can consult declarations without an
import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ccdiag.core.findings import Finding
from ccdiag.inputs.policy import DEFAULT_POLICY, Policy
from ccdiag.core.probenames import (PROBE_INFINIBAND, PROBE_KMSG, PROBE_NETDEV, PROBE_NVML, PROBE_PCIE, PROBE_SMI_TOPO,
                               PROBE_SYSTEM)
from ccdiag.probes.registry import ProbeRun

if TYPE_CHECKING:  # pragma: no cover
    from ccdiag.probes.infiniband import IbObservation
    from ccdiag.probes.kmsg import KmsgObservation
    from ccdiag.probes.netdev import NetdevObservation
    from ccdiag.probes.nvml import NvmlObservation
    from ccdiag.probes.pcie import PcieObservation
    from ccdiag.probes.smi_topo import SmiTopoObservation
    from ccdiag.probes.system import SystemObservation
    from ccdiag.topology.model import Topology


@dataclass(frozen=True)
class CheckSpec:
    name: str  # the id prefix its findings use, e.g. "pcie.link_downtrained"
    func: Callable[["CheckContext"], Iterable[Finding]]
    needs: tuple[str, ...]  # probes it cannot judge without: run_checks gates on them before calling it
    doc: str
    uses: tuple[str, ...] = ()  # probes it reads when usable, deciding itself what their absence means
    what: str | None = None  # what it judges, in words ("PCIe AER counters"), for gate findings


REGISTRY: dict[str, CheckSpec] = {}


def check(name: str, needs: tuple[str, ...] = (), uses: tuple[str, ...] = (),
          what: str | None = None) -> Callable:
    """Register a check function under ``name`` (its stable id).

    ``needs``: probes without which the check cannot judge; :func:`ccdiag.checks.run_checks` turns an
    unusable one into the check's skip/unknown finding (:func:`ccdiag.checks.common.gate`) and does
    not call it. ``uses``: probes it reads when they are usable, handling their absence itself."""

    def deco(func: Callable) -> Callable:
        REGISTRY[name] = CheckSpec(name, func, tuple(needs), (func.__doc__ or "").strip(), tuple(uses), what)
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
    topology: "Topology | None" = None
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

    # typed access to the first sample's observations (None when that probe gave nothing usable)
    @property
    def nvml(self) -> "NvmlObservation | None":
        return self.data(PROBE_NVML)

    @property
    def pcie(self) -> "PcieObservation | None":
        return self.data(PROBE_PCIE)

    @property
    def infiniband(self) -> "IbObservation | None":
        return self.data(PROBE_INFINIBAND)

    @property
    def netdev(self) -> "NetdevObservation | None":
        return self.data(PROBE_NETDEV)

    @property
    def kmsg(self) -> "KmsgObservation | None":
        return self.data(PROBE_KMSG)

    @property
    def system(self) -> "SystemObservation | None":
        return self.data(PROBE_SYSTEM)

    @property
    def smi_topo(self) -> "SmiTopoObservation | None":
        return self.data(PROBE_SMI_TOPO)
