"""One NCCL setting as ccdiag recommends it: the value, why, what it was read from, how sure.

``action`` says what to do with the variable:

* ``set``: put it in the job environment or ``/etc/nccl.conf`` (system configuration in the NCCL
  user guide's sense);
* ``default``: considered and left to NCCL's own choice, with the reason (often the expert answer);
* ``experiment``: a debugging knob (the guide says these "should generally not be set for
  production code"), offered only as a labelled measurement to try;
* ``remove``: a setting present today that should go, with the reason;
* ``info``: a fact for the job script rather than an NCCL variable (the GPU ring order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SET, DEFAULT, EXPERIMENT, REMOVE, INFO = "set", "default", "experiment", "remove", "info"
ACTIONS = (SET, DEFAULT, EXPERIMENT, REMOVE, INFO)
HIGH, MEDIUM, LOW = "high", "medium", "low"


@dataclass(frozen=True)
class Fact:
    """One piece of evidence: what, the value read, and where it was read."""

    what: str
    value: Any
    source: str

    def to_json(self) -> dict:
        return {"what": self.what, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class Knob:
    name: str  # "NCCL_IB_HCA", or "GPU ring order" for action info
    action: str
    value: str | None
    reason: str
    evidence: tuple[Fact, ...] = ()
    confidence: str = HIGH
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "action": self.action, "value": self.value, "reason": self.reason,
                "confidence": self.confidence, "evidence": [e.to_json() for e in self.evidence],
                "details": self.details}


@dataclass(frozen=True)
class Recommendation:
    """Everything the recommender says about one node, plus files to write (a topology XML)."""

    knobs: tuple[Knob, ...]
    source: str  # "node" (topology and probes), "smi" (a pasted matrix alone)
    notes: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # path -> content

    def get(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    def settings(self) -> dict[str, str]:
        """The variables to set: name -> value."""
        return {k.name: k.value for k in self.knobs if k.action == SET and k.value is not None}

    def to_json(self) -> dict:
        return {"source": self.source, "settings": self.settings(),
                "knobs": [k.to_json() for k in self.knobs], "notes": list(self.notes),
                "files": dict(self.files)}
