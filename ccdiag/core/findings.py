"""What a check says about one component: status, evidence, expectation, remedy.

A finding is the unit operators act on, so it always names the component precisely (GPU index +
UUID + BDF, NIC + port, link, bridge), shows the values that were read and where, says what was
expected and why, and says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS = "pass"
WARN = "warn"
FAIL = "fail"
SKIP = "skip"  # the check does not apply here (no NVLink on this GPU model, no IB ports)
UNKNOWN = "unknown"  # the check applies but could not be evaluated (probe timed out, no permission)
#: a problem the policy excuses until a date (ccdiag.checks.waiving): shown, counted apart, never
#: failing the node; ``Finding.waived`` keeps the status it was judged with and who waived it why
WAIVED = "waived"

STATUSES = (FAIL, UNKNOWN, WARN, WAIVED, SKIP, PASS)
#: sort key: failures first, passes last
STATUS_RANK = {s: i for i, s in enumerate(STATUSES)}


@dataclass(frozen=True)
class Component:
    """The thing a finding is about. ``kind``: node, gpu, nvlink, pcie_link, bridge, nic, ib_port,
    netdev, gpu_pair, probe, env, module, limit."""

    kind: str
    name: str  # human label: "GPU3", "GPU3 NVLink 7", "mlx5_0 port 1", "bridge 0000:17:01.0"
    gpu: int | None = None
    uuid: str | None = None
    bdf: str | None = None
    device: str | None = None  # "mlx5_0", "ib0", "nvidia_peermem"
    port: int | None = None
    link: int | None = None
    peer: str | None = None  # the other end: a BDF, "GPU5", "NVSwitch 0000:05:00.0"

    def label(self) -> str:
        """Name plus the identifiers an operator needs to find the part."""
        extra = [x for x in (self.uuid, self.bdf) if x]
        return f"{self.name} ({', '.join(extra)})" if extra else self.name


@dataclass(frozen=True)
class Evidence:
    """One observed value and where it was read (a sysfs path, an NVML call, a command, a log line)."""

    what: str
    value: Any
    source: str


@dataclass(frozen=True)
class Finding:
    check: str  # stable id, e.g. "pcie.link_downtrained"; never renamed once released
    status: str
    component: Component
    summary: str
    evidence: tuple[Evidence, ...] = ()
    expected: str | None = None
    expected_source: str | None = None  # "topology", "policy <file>", "GPU max (NVML)", "NVIDIA XID catalogue"
    remedy: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    caused_by: str | None = None  # key ("check|component") of the finding this one follows from
    #: one word of :data:`ccdiag.core.actions.ACTIONS` (None: the status's default, see actions.action_of)
    action: str | None = None
    #: what within the component, where a check reports one component more than once ("XID 79")
    subject: str | None = None
    #: set on a ``waived`` finding: the status it was judged with, its action, and the waiver
    #: (check, component, until, by, reason); see :mod:`ccdiag.checks.waiving`
    waived: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        """``check|component name`` (``|subject`` where there is one): unique in one report."""
        base = f"{self.check}|{self.component.name}"
        return f"{base}|{self.subject}" if self.subject else base

    def sort_key(self) -> tuple:
        c = self.component
        return (STATUS_RANK.get(self.status, 9), self.check, c.gpu if c.gpu is not None else -1, c.name)


def worst(findings) -> str:
    """The most severe status among ``findings`` (``pass`` when there are none)."""
    best = PASS
    for f in findings:
        if STATUS_RANK[f.status] < STATUS_RANK[best]:
            best = f.status
    return best


def verdict_status(findings) -> str:
    """The node's verdict: the worst status, where a skipped check counts as nothing. A skip says a
    check does not apply here (no IB port, no NVLink, nothing in the policy to compare with), so a
    node whose other checks all pass is healthy: ``pass``, never ``skip``. A waived problem counts
    as nothing either (the policy excuses it; it was judged, so a node with nothing else is
    ``pass``). Only when nothing at all was judged is the verdict ``skip``."""
    findings = list(findings)
    judged = [f for f in findings if f.status not in (SKIP, WAIVED)]
    if not judged:
        return PASS if not findings or any(f.status == WAIVED for f in findings) else SKIP
    return worst(judged)
