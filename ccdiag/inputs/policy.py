"""Expectations a node is held to, beyond what its own topology implies.

Without a policy file every expectation comes from the node itself (each link against its own
capability, each GPU against its model). With one (``ccdiag policy init`` on a node known to be
healthy, then ``ccdiag check --policy FILE`` elsewhere) the fleet's standard applies: GPU count and
model, minimum PCIe generation and width, IB rate, XIDs to ignore, thresholds.

The file is TOML with one top-level key per :class:`Policy` field. TOML has no null, so a field
left out means "no expectation" (or the default shown by ``ccdiag policy show``). Reading is strict:
an unknown key or a value of the wrong type is an input error naming the line, because a typo in a
fleet policy that silently relaxes a check is worse than a refused run.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ccdiag.core.errors import UserInputError
from ccdiag.inputs.tomlread import TomlError
from ccdiag.inputs.tomlread import loads as toml_loads
from ccdiag.inputs.waivers import DEFAULT_WARN_DAYS, WAIVER_KEY, Waiver, WaiverError, parse_waivers, waiver_toml
from ccdiag.inputs.waivers import EXAMPLE as WAIVER_EXAMPLE
from ccdiag.inputs.waivers import HELP as WAIVER_HELP
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NVML, PROBE_PCIE


@dataclass(frozen=True)
class Policy:
    expected_gpu_count: int | None = None
    gpu_model: str | None = None  # substring of the NVML name, e.g. "H100 80GB HBM3"
    min_pcie_gen: int | None = None
    min_pcie_width: int | None = None
    ib_rate_gbit_s: float | None = None  # every active IB port at least this
    expected_ib_ports: int | None = None
    ignore_xids: tuple[int, ...] = ()
    xid_window_s: float = 24 * 3600.0  # XIDs older than this (by kernel timestamp) are history, not health
    temperature_warn_c: float = 85.0
    min_shm_bytes: int = 1 << 30  # NCCL needs shared memory; Docker's 64 MiB default is the classic trap
    min_memlock_bytes: int | None = None  # None: require unlimited for RDMA
    require_persistence_mode: bool = True
    require_peermem: bool | None = None  # None: required only when GPUs and RDMA ports are both present
    require_idle_gpus: bool = False  # a compute process on a GPU fails (a job prolog wants empty GPUs)
    nvlink_error_rate_warn: int = 1  # counter increase over the window that warns
    ib_error_rate_warn: int = 1
    # ccdiag bench: thresholds as fractions of a path's bottleneck link (None: the defaults of
    # ccdiag.bench.thresholds, each with its public source)
    bench_pcie_warn_fraction: float | None = None
    bench_pcie_fail_fraction: float | None = None
    bench_pcie_bidir_warn_fraction: float | None = None
    bench_pcie_bidir_fail_fraction: float | None = None
    bench_nvlink_warn_fraction: float | None = None
    bench_nvlink_fail_fraction: float | None = None
    bench_rdma_warn_fraction: float | None = None
    bench_rdma_fail_fraction: float | None = None
    bench_busbw_warn_fraction: float | None = None
    bench_busbw_fail_fraction: float | None = None
    # -- waivers (ccdiag.inputs.waivers): known problems excused by name until a date, written as
    # [[waiver]] tables after the keys; applied by ccdiag.checks.waiving
    waivers: tuple[Waiver, ...] = ()
    waiver_warn_days: float = DEFAULT_WARN_DAYS  # the report says a waiver lapses soon this many days ahead
    source: str | None = None  # where the policy came from (file path), for evidence
    #: the versions of each node class ([[known_good]] tables: ccdiag/inputs/knowngood.py)
    known_good: tuple = ()

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


DEFAULT_POLICY = Policy()

#: what each key means, written as comments by :func:`to_toml` (and shown by ``policy show``)
FIELD_HELP: dict[str, str] = {
    "expected_gpu_count": "GPUs NVML must see; fewer is a failure (a GPU fell off the bus or is hidden)",
    "gpu_model": "substring every GPU's NVML name must contain",
    "min_pcie_gen": "lowest PCIe generation a GPU link may be capable of (judged on max, not idle current)",
    "min_pcie_width": "lowest PCIe link width (lanes) a GPU link may be capable of",
    "ib_rate_gbit_s": "every active RDMA port (InfiniBand or RoCE) must run at least this rate, Gb/s",
    "expected_ib_ports": "number of RDMA ports that must be ACTIVE",
    "ignore_xids": "XID codes never reported (e.g. 13, 31, 43: application faults, not hardware)",
    "xid_window_s": "XIDs older than this many seconds are history, not health",
    "temperature_warn_c": "GPU temperature that warns, degrees C",
    "min_shm_bytes": "smallest /dev/shm that passes (NCCL's intra-node transport lives there)",
    "min_memlock_bytes": "smallest locked-memory limit that passes; absent means 'unlimited' is required",
    "require_persistence_mode": "GPUs must have persistence mode on",
    "require_peermem": "nvidia_peermem must be loaded; absent means 'when GPUs and RDMA ports are both present'",
    "require_idle_gpus": "a compute process on a GPU fails (set it for a job prolog); otherwise processes are information",
    "nvlink_error_rate_warn": "NVLink error counter increase over the window that warns",
    "ib_error_rate_warn": "IB error counter increase over the window that warns",
    "bench_pcie_warn_fraction": "ccdiag bench: pcie figures below this fraction of the path's bottleneck link warn",
    "bench_pcie_fail_fraction": "ccdiag bench: pcie figures below this fraction of the path's bottleneck link fail",
    "bench_pcie_bidir_warn_fraction": "ccdiag bench: pcie_bidir figures below this fraction of the path's bottleneck link warn",
    "bench_pcie_bidir_fail_fraction": "ccdiag bench: pcie_bidir figures below this fraction of the path's bottleneck link fail",
    "bench_nvlink_warn_fraction": "ccdiag bench: nvlink figures below this fraction of the path's bottleneck link warn",
    "bench_nvlink_fail_fraction": "ccdiag bench: nvlink figures below this fraction of the path's bottleneck link fail",
    "bench_rdma_warn_fraction": "ccdiag bench: rdma figures below this fraction of the path's bottleneck link warn",
    "bench_rdma_fail_fraction": "ccdiag bench: rdma figures below this fraction of the path's bottleneck link fail",
    "bench_busbw_warn_fraction": "ccdiag bench: busbw figures below this fraction of the path's bottleneck link warn",
    "bench_busbw_fail_fraction": "ccdiag bench: busbw figures below this fraction of the path's bottleneck link fail",
    "waivers": "known problems excused until a date: [[waiver]] tables at the end of the file",
    "waiver_warn_days": "days before a waiver lapses that the report starts saying so",
}

#: fields never read from or written to a file as one key (known_good is its own tables, at the end)
_INTERNAL = ("source", "known_good")
#: fields read from and written to a file in their own form (``[[waiver]]`` tables, at the end)
_TABLES = {"waivers": WAIVER_KEY}


class PolicyError(UserInputError, ValueError):
    """A policy file that cannot be used; the message names the file and, where known, the line."""


# -- reading -----------------------------------------------------------------------------------
def _expected_type(name: str) -> str:
    defaults = {
        "expected_gpu_count": "int", "min_pcie_gen": "int", "min_pcie_width": "int", "expected_ib_ports": "int",
        "min_shm_bytes": "int", "min_memlock_bytes": "int", "nvlink_error_rate_warn": "int",
        "ib_error_rate_warn": "int", "gpu_model": "str", "ib_rate_gbit_s": "float", "xid_window_s": "float",
        "temperature_warn_c": "float", "require_persistence_mode": "bool", "require_peermem": "bool",
        "require_idle_gpus": "bool", "waiver_warn_days": "float",
        "ignore_xids": "int list",
    }
    if name.startswith("bench_") and name.endswith("_fraction"):
        return "float"
    return defaults[name]


def _line_of(text: str, key: str) -> int | None:
    pat = re.compile(r"^\s*(?:" + re.escape(key) + r"\s*=|\[+\s*" + re.escape(key) + r"\s*[\].])")
    for n, line in enumerate(text.splitlines(), 1):
        if pat.match(line):
            return n
    return None


def _coerce(name: str, value: Any) -> Any:
    """The value as the field's type, or raise ValueError saying what was expected."""
    kind = _expected_type(name)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("an integer")
        if value < 0:
            raise ValueError("a non-negative integer")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("a number")
        try:
            number = float(value)  # an integer of 400 digits has no float
        except OverflowError:
            raise ValueError("a number within the range of a float") from None
        if not math.isfinite(number):
            raise ValueError("a number")
        if number < 0:
            raise ValueError("a non-negative number")
        return number
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise ValueError("a non-empty string")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("true or false")
        return value
    if kind == "int list":
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ValueError("a list of integers, e.g. [13, 31]")
        return tuple(sorted(set(value)))
    raise AssertionError(kind)  # pragma: no cover


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """A :class:`Policy` from TOML text. Raises :class:`PolicyError` naming ``source`` and the line."""
    try:
        doc = toml_loads(text, source)
    except TomlError as exc:
        raise PolicyError(str(exc)) from None
    known = set(Policy.field_names()) - set(_INTERNAL) - set(_TABLES)
    values: dict[str, Any] = {}
    if "known_good" in doc:
        values["known_good"] = _known_good(doc.pop("known_good"), source, text)
    for key, value in doc.items():
        line = _line_of(text, key)
        where = f"{source}:{line}" if line else source
        if key == WAIVER_KEY:
            values["waivers"] = _read_waivers(value, text, source)
            continue
        if key in _TABLES:
            raise PolicyError(f"{where}: write {key} as [[{_TABLES[key]}]] tables (see `ccdiag policy init`)")
        if key in RENAMED_KEYS:
            if RENAMED_KEYS[key] in doc:
                raise PolicyError(f"{where}: {key} is the old name of {RENAMED_KEYS[key]}; set only one")
            key = RENAMED_KEYS[key]
        if key not in known:
            if isinstance(value, dict):
                raise PolicyError(f"{where}: unknown section [{key}] (policy keys are top level; "
                                  f"see `ccdiag policy show`)")
            raise PolicyError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        try:
            values[key] = _coerce(key, value)
        except ValueError as exc:
            raise PolicyError(f"{where}: {key} must be {exc}, not {value!r}") from None
        bounds = _BOUNDS.get(key)
        v = values[key]
        if bounds is not None and v is not None and not (bounds[0] <= v <= bounds[1]):
            raise PolicyError(f"{where}: {key} = {v!r} is outside {bounds[0]}..{bounds[1]}")
    return Policy(**values, source=source)


def _read_waivers(value: Any, text: str, source: str) -> tuple[Waiver, ...]:
    """The ``[[waiver]]`` tables; an error names the file and the waiver's line."""
    try:
        return parse_waivers(value, text)
    except WaiverError as exc:
        msg = str(exc)
        line, sep, rest = msg.partition(": ")
        if sep and line.isdigit():
            raise PolicyError(f"{source}:{line}: {rest}") from None
        raise PolicyError(f"{source}: {msg}") from None


def _known_good(value: Any, source: str, text: str) -> tuple:
    from ccdiag.inputs.knowngood import KnownGoodError, parse

    try:
        return parse(value, source, text)
    except KnownGoodError as exc:
        raise PolicyError(str(exc)) from None


#: keys of earlier releases, still read: old name -> current name (units spelled out in names)
RENAMED_KEYS = {"ib_rate_gbps": "ib_rate_gbit_s"}

#: plausible ranges: a typo (min_pcie_gen = 55) must be refused, not fail every node
_BOUNDS: dict[str, tuple[float, float]] = {
    "expected_gpu_count": (0, 256), "min_pcie_gen": (1, 6), "min_pcie_width": (1, 32),
    "ib_rate_gbit_s": (1, 3200), "expected_ib_ports": (0, 256), "xid_window_s": (0, 365 * 86400),
    "temperature_warn_c": (20, 150), "min_shm_bytes": (0, 1 << 50), "min_memlock_bytes": (0, 1 << 62),
    "nvlink_error_rate_warn": (0, 1 << 40), "ib_error_rate_warn": (0, 1 << 40), "waiver_warn_days": (0, 365),
    **{f"bench_{k}_{w}_fraction": (0.0, 1.0) for k in ("pcie", "pcie_bidir", "nvlink", "rdma", "busbw")
       for w in ("warn", "fail")},
}


def load_policy(path: str) -> Policy:
    """Read a policy file. Raises :class:`PolicyError` (missing, unreadable, malformed)."""
    from ccdiag.core.userfiles import UserFileError, read_user_bytes

    try:
        data = read_user_bytes(path, "policy", 1 << 20)
    except UserFileError as exc:
        raise PolicyError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{path}: not a text file (policy files are UTF-8 TOML)") from None
    return parse_policy(text, source=path)


def file_keys(path: str) -> set[str]:
    """The keys a (valid) policy file sets itself, to tell them from defaults."""
    with open(path, encoding="utf-8") as fh:
        return set(toml_loads(fh.read(), path))


# -- writing -----------------------------------------------------------------------------------
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(int(value)) + ".0" if value.is_integer() else repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")  # pragma: no cover


def to_toml(policy: Policy, header: list[str] | None = None) -> str:
    """The policy as commented TOML. Absent values are written as comments, so the file shows every
    knob an operator can set without setting it."""
    from ccdiag.core.textfit import wrap

    lines = [part for h in (header or []) for part in wrap(h, TOML_WIDTH, indent="#   ", first="# ")]
    if lines:
        lines.append("")
    for name in Policy.field_names():
        if name in _INTERNAL or name in _TABLES:
            continue
        value = getattr(policy, name)
        lines.extend(wrap(FIELD_HELP.get(name, name), TOML_WIDTH, indent="#   ", first="# "))
        if value is None:
            lines.append(f"# {name} =")
        else:
            lines.extend(_toml_assignment(name, value))
        lines.append("")
    lines.extend(_waiver_tables(policy.waivers))
    if policy.known_good:
        from ccdiag.inputs.knowngood import to_toml as known_good_toml

        lines += known_good_toml(policy.known_good)
    return "\n".join(lines).rstrip("\n") + "\n"


def _waiver_tables(waivers: tuple[Waiver, ...]) -> list[str]:
    """The waivers as ``[[waiver]]`` tables (TOML tables come after every key), or, with none, how
    to write one, commented out."""
    from ccdiag.core.textfit import wrap

    lines = wrap(WAIVER_HELP, TOML_WIDTH, indent="# ", first="# ")
    if not waivers:
        return lines + list(WAIVER_EXAMPLE)
    for w in waivers:
        lines.extend(waiver_toml(w) + [""])
    return lines


#: a written policy file's lines fit this many columns (a long array spreads over lines)
TOML_WIDTH = 80


def _toml_assignment(name: str, value: Any) -> list[str]:
    """``name = value``; an array too long for one line as one item per line (TOML allows it)."""
    line = f"{name} = {_toml_value(value)}"
    if len(line) <= TOML_WIDTH or not isinstance(value, (list, tuple)):
        return [line]
    return [f"{name} = ["] + [f"  {_toml_value(v)}," for v in value] + ["]"]


# -- from a healthy node ------------------------------------------------------------------------
from ccdiag.core.linkrates import pcie_gen  # noqa: E402 - re-exported for callers of this module

if TYPE_CHECKING:
    from ccdiag.topology.model import Topology


def _min(values: list) -> Any:
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _usable(runs: dict, name: str) -> Any:
    run = (runs or {}).get(name)
    if run is None or not getattr(run, "usable", False):
        return None
    return run.data


#: device kinds the fleet PCIe minimum applies to (the pcie checks judge the same kinds)
POLICY_PCIE_KINDS = ("gpu",)


def _link_caps(pcie_obs: Any, nvml_obs: Any) -> tuple[list, list]:
    """(gens, widths) each GPU and NIC link is capable of: the lower of the device's and its
    upstream port's maximum. Maxima, not current values: an idle GPU legitimately drops its link
    to Gen1, and a policy must not encode that."""
    gens: list = []
    widths: list = []
    devices = {d.bdf: d for d in getattr(pcie_obs, "devices", ())} if pcie_obs is not None else {}
    for dev in devices.values():
        if dev.kind not in POLICY_PCIE_KINDS:
            continue
        parent = devices.get(dev.parent) if dev.parent else None
        gen = pcie_gen(dev.max_link_speed_gts)
        width = dev.max_link_width
        if parent is not None:
            pgen, pwidth = pcie_gen(parent.max_link_speed_gts), parent.max_link_width
            gen = _min([gen, pgen]) if gen is not None else None
            width = _min([width, pwidth]) if width is not None else None
        gens.append(gen)
        widths.append(width)
    if not any(g is not None for g in gens) and nvml_obs is not None:
        gens = [g.pcie_gen_max for g in nvml_obs.gpus]
        widths = [g.pcie_width_max for g in nvml_obs.gpus]
    return gens, widths


def policy_from_observations(runs: dict, topology: Topology | None = None) -> Policy:
    """The standard a fleet of nodes like this healthy one is held to.

    GPU count and model come from NVML; minimum PCIe generation and width from what each GPU and NIC
    link is capable of (pcie probe, NVML as fallback), so the node it was made from always passes it;
    IB rate and port count from the ports that are ACTIVE.
    ``topology`` is accepted for symmetry with the checks; everything needed is in the probe runs.
    """
    nvml = _usable(runs, PROBE_NVML)
    pcie = _usable(runs, PROBE_PCIE)
    ib = _usable(runs, PROBE_INFINIBAND)
    values: dict[str, Any] = {}
    if nvml is not None:
        gpus = [g for g in nvml.gpus if g.failed is None]
        values["expected_gpu_count"] = len(nvml.gpus) if nvml.gpus else nvml.device_count
        names = {g.name for g in gpus if g.name}
        if len(names) == 1:
            values["gpu_model"] = names.pop()
    gens, widths = _link_caps(pcie, nvml)
    values["min_pcie_gen"] = _min(gens)
    values["min_pcie_width"] = _min(widths)
    if ib is not None:
        active = [p for d in ib.devices for p in d.ports if (p.state or "").upper() == "ACTIVE"]
        if active:
            values["expected_ib_ports"] = len(active)
            values["ib_rate_gbit_s"] = _min([p.rate_gbit_s for p in active])
    return Policy(**{k: v for k, v in values.items() if v is not None})


def init_header(meta: dict) -> list[str]:
    """Comment lines saying where a generated policy came from."""
    host = meta.get("hostname") or "unknown host"
    when = meta.get("time") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [
        f"ccdiag policy written by `ccdiag policy init` from {host} at {when}.",
        "Every node checked with `ccdiag check --policy THIS_FILE` is held to these values.",
        "Edit freely; a key left out (or commented) means no expectation / the default.",
    ]


__all__ = ["DEFAULT_POLICY", "FIELD_HELP", "file_keys", "Policy", "PolicyError", "init_header", "load_policy",
           "parse_policy", "pcie_gen", "policy_from_observations", "to_toml"]
