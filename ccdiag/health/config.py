"""The settings of the health loop, read from one TOML file (``/etc/ccdiag/health.toml``).

The loop runs on every node, from a systemd timer or as a container beside the exporter, and acts on
the scheduler (a Slurm drain, a Kubernetes node condition) and on the node (an operator's remediation
command). Every one of those powers is off until this file turns it on: with no file the loop only
judges, records the validity window and exports it. Reading is strict, as for a policy: an unknown
key or a wrong type is an input error naming the file and the key, because a typo that silently
turned the drain cap off would take a fleet out.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ccdiag.core.actions import DRAIN, REBOOT, RESET_GPU, SERVICE
from ccdiag.core.errors import UserInputError

DEFAULT_PATH = "/etc/ccdiag/health.toml"
#: who may act on a failure: nobody (judge and export only), Slurm's scontrol, the Kubernetes API
SCHEDULERS = ("none", "slurm", "kubernetes")
#: the rungs an operator's remediation command may be given for (ccdiag/core/actions.py's ladder)
REMEDIATION_ACTIONS = (DRAIN, RESET_GPU, REBOOT, SERVICE)
#: what the operator's command may name; anything else in braces is refused when the file is read
PLACEHOLDERS = ("node", "gpus", "action", "reason", "root")


class HealthConfigError(UserInputError, ValueError):
    """A health-loop setting that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class CapConfig:
    """How much of the fleet ccdiag may hold out of service at once (drained or condition False)."""

    max_out_fraction: float = 0.1  # of the nodes the scheduler counts
    max_out_nodes: int | None = None  # an absolute bound as well (the lower of the two applies)
    min_out_nodes: int = 1  # always allowed, so a small fleet can still take one bad node out


@dataclass(frozen=True)
class EvidenceConfig:
    """``nvidia-bug-report.sh`` beside the failure snapshot: opt-in, bounded in time and disk."""

    bug_report: bool = False
    command: str = "nvidia-bug-report.sh"
    timeout_s: float = 300.0
    max_bytes: int = 256 << 20
    keep: int = 3  # failure sets kept in the evidence directory, oldest removed first
    safe_mode: bool = False  # --safe-mode: skip nvidia-smi and the driver's /proc files (a wedged GPU)


@dataclass(frozen=True)
class KubernetesConfig:
    condition: str = "CcdiagHealthy"
    taint: bool = False  # also taint a failing node NoSchedule (within the cap)
    taint_key: str = "ccdiag/unhealthy"
    gpu_resource: str = "nvidia.com/gpu"  # a running pod that requests it makes the node busy
    api: str | None = None  # the API server; None: in-cluster (KUBERNETES_SERVICE_HOST, service account)
    node_selector: str = "nvidia.com/gpu.present=true"  # the fleet the cap counts


@dataclass(frozen=True)
class HealthConfig:
    cadence_s: float = 3600.0  # an idle node is checked again once its last check is this old
    validity_s: float = 4 * 3600.0  # a pass stays valid this long for the pre-job check
    bench: bool = True  # `check --bench quick` when no GPU process runs
    check_args: tuple[str, ...] = ()  # more `ccdiag check` arguments (--policy FILE ...)
    timeout_s: float = 120.0  # the check's --timeout
    state_dir: str = "/var/lib/ccdiag"
    textfile_dir: str | None = None  # node_exporter's textfile directory for ccdiag-health.prom
    scheduler: str = "none"
    report_only: bool = False  # decide and log every step, take none (the roll-out switch)
    node: str | None = None  # the scheduler's name of this node (default: NODE_NAME, then hostname -s)
    gpu_devices: tuple[str, ...] = ("/dev/nvidia[0-9]*",)  # a process holding one open is a GPU process
    poll_s: float = 1.0  # how often a running check looks for a job starting
    scheduler_poll_s: float = 5.0  # how often it asks Slurm or the API server (not every poll: their load)
    ladder_window_s: float = 7 * 86400.0  # a root that fails again within this climbs one rung
    remediation: dict[str, tuple[str, ...]] = field(default_factory=dict)
    remediation_timeout_s: float = 600.0
    cap: CapConfig = CapConfig()
    evidence: EvidenceConfig = EvidenceConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    source: str | None = None

    @property
    def state_path(self) -> str:
        return os.path.join(self.state_dir, "health.json")

    @property
    def evidence_dir(self) -> str:
        return os.path.join(self.state_dir, "evidence")

    @property
    def pid_path(self) -> str:
        return os.path.join(self.state_dir, "health.pid")

    def with_overrides(self, **values: Any) -> "HealthConfig":
        return replace(self, **{k: v for k, v in values.items() if v is not None})


#: file key -> (field, kind, low bound) of the top level
_TOP: dict[str, tuple[str, str, float | None]] = {
    "cadence": ("cadence_s", "seconds", 60.0), "validity": ("validity_s", "seconds", 0.0),
    "bench": ("bench", "bool", None), "check_args": ("check_args", "strings", None),
    "timeout": ("timeout_s", "seconds", 5.0), "state_dir": ("state_dir", "path", None),
    "textfile_dir": ("textfile_dir", "path", None), "scheduler": ("scheduler", "scheduler", None),
    "report_only": ("report_only", "bool", None), "node": ("node", "text", None),
    "gpu_devices": ("gpu_devices", "strings", None), "poll": ("poll_s", "seconds", 0.05),
    "scheduler_poll": ("scheduler_poll_s", "seconds", 0.5), "ladder_window": ("ladder_window_s", "seconds", 0.0),
}
_CAP: dict[str, tuple[str, str, float | None]] = {
    "max_out_fraction": ("max_out_fraction", "fraction", None), "max_out_nodes": ("max_out_nodes", "count", None),
    "min_out_nodes": ("min_out_nodes", "count", None),
}
_EVIDENCE: dict[str, tuple[str, str, float | None]] = {
    "bug_report": ("bug_report", "bool", None), "command": ("command", "text", None),
    "timeout": ("timeout_s", "seconds", 5.0), "max_bytes": ("max_bytes", "count", None),
    "keep": ("keep", "count", None), "safe_mode": ("safe_mode", "bool", None),
}
_KUBERNETES: dict[str, tuple[str, str, float | None]] = {
    "condition": ("condition", "name", None), "taint": ("taint", "bool", None), "taint_key": ("taint_key", "name", None),
    "gpu_resource": ("gpu_resource", "name", None), "api": ("api", "text", None),
    "node_selector": ("node_selector", "text", None),
}
_TABLES = ("cap", "evidence", "kubernetes", "remediation")


def _coerce(where: str, kind: str, low: float | None, value: Any) -> Any:
    if kind in ("seconds", "fraction"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise HealthConfigError(f"{where} must be a number, not {value!r}")
        value = float(value)
        if kind == "fraction" and not 0.0 <= value <= 1.0:
            raise HealthConfigError(f"{where} must be a fraction from 0 to 1, not {value!r}")
        if low is not None and value < low:
            raise HealthConfigError(f"{where} must be at least {low:g} seconds, not {value!r}")
        return value
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise HealthConfigError(f"{where} must be a whole number >= 0, not {value!r}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise HealthConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if kind == "strings":
        if isinstance(value, str):
            value = shlex.split(value)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise HealthConfigError(f"{where} must be a list of strings, not {value!r}")
        return tuple(value)
    if kind == "scheduler":
        if value not in SCHEDULERS:
            raise HealthConfigError(f"{where} must be one of {', '.join(SCHEDULERS)}, not {value!r}")
        return value
    if kind in ("text", "path", "name"):
        if not isinstance(value, str) or not value.strip():
            raise HealthConfigError(f"{where} must be a non-empty string, not {value!r}")
        if kind == "name" and any(c.isspace() for c in value):
            raise HealthConfigError(f"{where} must be one word, not {value!r}")
        return value
    raise AssertionError(kind)  # pragma: no cover


def _table(doc: dict, keys: dict[str, tuple[str, str, float | None]], source: str, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key not in keys:
            raise HealthConfigError(f"{source}: unknown key {prefix}{key!r} (known: {', '.join(sorted(keys))})")
        name, kind, low = keys[key]
        out[name] = _coerce(f"{source}: {prefix}{key}", kind, low, value)
    return out


def remediation_command(argv: tuple[str, ...], where: str) -> tuple[str, ...]:
    """An operator's command as argv; refuses a placeholder it would not fill and a shell string
    (the command runs without a shell: what looks like a pipe would be passed as an argument)."""
    if not argv:
        raise HealthConfigError(f"{where} must name a command")
    import string

    for arg in argv:
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as exc:
            raise HealthConfigError(f"{where}: {arg!r}: {exc}") from None
        unknown = [n for n in names if n not in PLACEHOLDERS]
        if unknown:
            raise HealthConfigError(f"{where}: unknown placeholder {{{unknown[0]}}} (known: "
                                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
    return argv


def parse_health_config(text: str, source: str = "<health config>") -> HealthConfig:
    from ccdiag.inputs.tomlread import loads

    doc = loads(text, source)
    top: dict[str, Any] = {}
    tables: dict[str, Any] = {}
    for key, value in doc.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise HealthConfigError(f"{source}: [{key}] must be a table")
            tables[key] = value
        elif key in _TOP:
            name, kind, low = _TOP[key]
            top[name] = _coerce(f"{source}: {key}", kind, low, value)
        else:
            raise HealthConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(list(_TOP) + list(_TABLES)))})")
    remediation: dict[str, tuple[str, ...]] = {}
    for key, value in (tables.get("remediation") or {}).items():
        if key == "timeout":
            top["remediation_timeout_s"] = _coerce(f"{source}: remediation.timeout", "seconds", 1.0, value)
            continue
        if key not in REMEDIATION_ACTIONS:
            raise HealthConfigError(f"{source}: unknown key remediation.{key!r} (the ladder's rungs: "
                                    f"{', '.join(REMEDIATION_ACTIONS)}, and timeout)")
        argv = _coerce(f"{source}: remediation.{key}", "strings", None, value)
        remediation[key] = remediation_command(argv, f"{source}: remediation.{key}")
    cap = CapConfig(**_table(tables.get("cap") or {}, _CAP, source, "cap."))
    evidence = EvidenceConfig(**_table(tables.get("evidence") or {}, _EVIDENCE, source, "evidence."))
    kube = KubernetesConfig(**_table(tables.get("kubernetes") or {}, _KUBERNETES, source, "kubernetes."))
    return HealthConfig(**top, remediation=remediation, cap=cap, evidence=evidence, kubernetes=kube, source=source)


def load_health_config(path: str | None) -> HealthConfig:
    """The settings in ``path``; the defaults when ``path`` is None, or is the default path and absent."""
    if path is None:
        if not os.path.exists(DEFAULT_PATH):
            return HealthConfig()
        path = DEFAULT_PATH
    from ccdiag.core.userfiles import UserFileError, read_user_text

    try:
        text = read_user_text(path, "health config", 1 << 20)
    except UserFileError as exc:
        raise HealthConfigError(str(exc)) from None
    return parse_health_config(text, path)


def field_names() -> list[str]:
    return [f.name for f in fields(HealthConfig)]


__all__ = ["CapConfig", "DEFAULT_PATH", "EvidenceConfig", "HealthConfig", "HealthConfigError", "KubernetesConfig",
           "REMEDIATION_ACTIONS", "SCHEDULERS", "load_health_config", "parse_health_config"]
