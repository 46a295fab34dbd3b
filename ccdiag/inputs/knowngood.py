"""The known-good set of a node class: the versions a fleet's nodes of one machine type should run.

A fleet drifts one upgrade at a time: a node reimaged with last month's driver, a ConnectX card
replaced with older firmware, an NCCL package left behind. Each node still passes on its own, and
the job that spans them fails. ``ccdiag policy init`` records, on a node known to be good, what
this module calls the node's versions - the driver, the CUDA driver API, each GPU's VBIOS, each
ConnectX model's firmware, the NCCL library and its network plugin, the fabric manager, the kernel
and the NCCL settings of ``/etc/nccl.conf`` - under its machine type, as a ``[[known_good]]`` table
of the policy file. ``ccdiag check --policy`` names every value of a node that differs from its
machine type's set (``ccdiag/checks/drift.py``), and ``ccdiag compare`` every host of a machine
type that differs (``ccdiag/cluster/drift.py``), each with both values.

The versions are read from probe observations, as objects (a check run) or as the JSON of a
report's ``probes`` section (compare): one reader for both, so a node and its report agree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ccdiag.core.errors import UserInputError
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NVML, PROBE_PLATFORM, PROBE_SYSTEM

#: what a known-good set may name, in the order a policy file lists them, with what each is
KEYS: dict[str, str] = {
    "driver": "NVIDIA driver (NVML)",
    "cuda": "CUDA driver API version (NVML)",
    "vbios": "every GPU's VBIOS (NVML)",
    "connectx_firmware": "firmware per RDMA adapter model (sysfs fw_ver by hca_type)",
    "nccl": "the NCCL release of the node's libnccl.so.2",
    "nccl_net_plugin": "NCCL network plugins installed (libnccl-net*.so) and NCCL_NET_PLUGIN",
    "fabric_manager": "nvidia-fabricmanager version (NVSwitch systems)",
    "kernel": "the running kernel",
    "nccl_env": "NCCL settings of /etc/nccl.conf",
}
#: keys whose value is a list (compared as a set), and keys whose value is a table
LIST_KEYS = ("vbios", "nccl_net_plugin")
TABLE_KEYS = ("connectx_firmware", "nccl_env")
DRIFT_STATUSES = ("warn", "fail")
PROBES = (PROBE_NVML, PROBE_SYSTEM, PROBE_INFINIBAND, PROBE_PLATFORM)


class KnownGoodError(UserInputError, ValueError):
    """A ``[[known_good]]`` table that cannot be used; the message names the file and, where known, the line."""


@dataclass(frozen=True)
class KnownGood:
    machine_type: str | None
    values: dict[str, Any] = field(default_factory=dict)
    on_drift: str = "warn"  # the status of a difference: "warn" or "fail"


@dataclass(frozen=True)
class Difference:
    key: str  # "driver", "connectx_firmware.MT4129", "nccl_env.NCCL_IB_HCA"
    expected: Any  # None: the node has a value the set does not name
    found: Any  # None: the node lacks it (or it could not be read: ``unread``)
    unread: bool = False


# -- reading the node ------------------------------------------------------------------------------
def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def data_of_runs(runs: dict) -> dict[str, Any]:
    """Probe name -> observation, for the usable runs of a check."""
    return {name: run.data for name, run in (runs or {}).items() if getattr(run, "usable", False)}


def data_of_report(report: dict) -> dict[str, Any]:
    """Probe name -> observation JSON, for a report's ``probes`` section."""
    probes = report.get("probes") if isinstance(report, dict) else None
    if not isinstance(probes, dict):
        return {}
    return {name: run.get("data") for name, run in probes.items()
            if isinstance(run, dict) and isinstance(run.get("data"), dict)}


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _nccl_conf_settings(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    from ccdiag.probes._ncclconf import parse_nccl_conf

    return {k: str(v) for k, v in sorted(parse_nccl_conf(text).items()) if k.startswith("NCCL_")}


def versions(data: dict[str, Any]) -> dict[str, Any]:
    """The node's values of :data:`KEYS` (a key whose source was not read is left out)."""
    nvml, system, ib, platform = (data.get(p) for p in PROBES)
    out: dict[str, Any] = {}
    driver = _text(_get(nvml, "driver_version")) or _text(_get(system, "nvidia_driver_version"))
    if driver:
        out["driver"] = driver
    if _text(_get(nvml, "cuda_driver_version")):
        out["cuda"] = _text(_get(nvml, "cuda_driver_version"))
    gpus = _get(nvml, "gpus") or ()
    vbios = sorted({v for g in gpus if (v := _text(_get(g, "vbios_version")))})
    if vbios:
        out["vbios"] = vbios
    if ib is not None:
        firmware: dict[str, set[str]] = {}
        for dev in _get(ib, "devices") or ():
            fw = _text(_get(dev, "fw_ver"))
            if fw:
                model = _text(_get(dev, "hca_type")) or "unknown model"
                firmware.setdefault(model, set()).add(fw)
        if firmware:
            out["connectx_firmware"] = {m: ",".join(sorted(v)) for m, v in sorted(firmware.items())}
    for key, name in (("nccl", "nccl_version"), ("fabric_manager", "fabric_manager_version"), ("kernel", "kernel")):
        if _text(_get(system, name)):
            out[key] = _text(_get(system, name))
    if platform is not None:
        plugins = {os.path.basename(p) for p in _get(platform, "net_plugins") or () if isinstance(p, str)}
        named = _text(_get(platform, "net_plugin_env"))
        if named:
            plugins.add(f"NCCL_NET_PLUGIN={named}")
        out["nccl_net_plugin"] = sorted(plugins)
    if system is not None:
        settings = _nccl_conf_settings(_get(system, "nccl_conf_text"))
        out["nccl_env"] = settings or {}
    return out


def machine_type(data: dict[str, Any]) -> str | None:
    """The node's class: the cloud instance type where the platform names one, else its GPUs (count
    and model) and, where DMI names it, the server model. None when none of these was read."""
    nvml, platform = data.get(PROBE_NVML), data.get(PROBE_PLATFORM)
    instance = _text(_get(platform, "instance_type"))
    if instance:
        return instance
    gpus = _get(nvml, "gpus") or ()
    names = sorted({n for g in gpus if (n := _text(_get(g, "name")))})
    product = _text(_get(_get(platform, "dmi"), "product_name"))
    parts = []
    if gpus and names:
        parts.append(f"{len(gpus)}x {'/'.join(names)}")
    if product:
        parts.append(f"({product})" if parts else product)
    return " ".join(parts) or None


def from_data(data: dict[str, Any], on_drift: str = "warn") -> KnownGood:
    """The known-good set of the node ``data`` describes (``policy init``)."""
    return KnownGood(machine_type(data), versions(data), on_drift)


# -- comparing ------------------------------------------------------------------------------------------
def differences(known: KnownGood, found: dict[str, Any]) -> list[Difference]:
    """Every value the set names that the node does not have, with both values."""
    out: list[Difference] = []
    for key in KEYS:
        if key not in known.values:
            continue
        want, have = known.values[key], found.get(key)
        if have is None:
            out.append(Difference(key, want, None, unread=True))
        elif key in LIST_KEYS:
            if sorted(set(want)) != sorted(set(have)):
                out.append(Difference(key, sorted(set(want)), sorted(set(have))))
        elif key in TABLE_KEYS:
            for sub in sorted(set(want) | set(have)):
                if want.get(sub) != have.get(sub):
                    out.append(Difference(f"{key}.{sub}", want.get(sub), have.get(sub)))
        elif want != have:
            out.append(Difference(key, want, have))
    return out


def pick(sets: tuple[KnownGood, ...], mtype: str | None) -> KnownGood | None:
    """The set of machine type ``mtype``; a set that names no machine type holds for every node."""
    for k in sets:
        if k.machine_type is not None and k.machine_type == mtype:
            return k
    for k in sets:
        if k.machine_type is None:
            return k
    return None


# -- the policy file ---------------------------------------------------------------------------------------
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


#: the width of the file's lines (what policy init writes reads in an 80-column editor)
TOML_WIDTH = 80


def _comment(text: str) -> list[str]:
    from ccdiag.core.textfit import wrap

    return wrap(text, TOML_WIDTH, indent="#   ", first="# ")


def to_toml(sets: tuple[KnownGood, ...]) -> list[str]:
    """``[[known_good]]`` tables as TOML lines, each key's meaning in a comment above it (a value not
    read on the node is itself a comment), every line within 80 columns but a long value."""
    lines: list[str] = []
    for k in sets:
        lines += _comment("The versions of this node class: check --policy names every node of its machine type "
                          "that differs (a warning; on_drift = \"fail\" fails it). Delete a key to stop holding "
                          "nodes to it.")
        lines.append("[[known_good]]")
        lines += ([f"machine_type = {_string(k.machine_type)}"] if k.machine_type else
                  _comment("machine_type = (not read on this node: the set holds for every node)"))
        lines.append(f"on_drift = {_string(k.on_drift)}")
        tables = []
        for key, what in KEYS.items():
            value = k.values.get(key)
            if value is None:
                lines += _comment(f"{key} = (not read on this node: {what})")
            elif key in TABLE_KEYS:
                tables.append((key, what, value))
            elif key in LIST_KEYS:
                lines += _comment(what) + [f"{key} = [{', '.join(_string(v) for v in value)}]"]
            else:
                lines += _comment(what) + [f"{key} = {_string(value)}"]
        for key, what, value in tables:
            lines += _comment(what) + [f"[known_good.{key}]"]
            lines += [f"{_key(sub)} = {_string(str(v))}" for sub, v in sorted(value.items())]
        lines.append("")
    return lines


def _line(text: str, needle: str) -> int | None:
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n
    return None


def parse(value: Any, source: str, text: str = "") -> tuple[KnownGood, ...]:
    """The sets of a policy's ``known_good`` value (one table or an array of tables)."""
    tables = [value] if isinstance(value, dict) else value
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise KnownGoodError(f"{source}: known_good must be a table ([known_good]) or tables ([[known_good]])")
    out = []
    seen: set[str | None] = set()
    for t in tables:
        mtype = t.get("machine_type")
        line = (_line(text, _string(mtype)) if isinstance(mtype, str) else None) or _line(text, "known_good")
        where = f"{source}:{line}" if text and line else source
        if mtype is not None and (not isinstance(mtype, str) or not mtype.strip()):
            raise KnownGoodError(f"{where}: known_good.machine_type must be a non-empty string, not {mtype!r}")
        if mtype in seen:
            raise KnownGoodError(f"{where}: two known_good sets for machine type {mtype!r}")
        seen.add(mtype)
        on_drift = t.get("on_drift", "warn")
        if on_drift not in DRIFT_STATUSES:
            raise KnownGoodError(f"{where}: known_good.on_drift must be \"warn\" or \"fail\", not {on_drift!r}")
        values: dict[str, Any] = {}
        for key, v in t.items():
            if key in ("machine_type", "on_drift"):
                continue
            if key not in KEYS:
                raise KnownGoodError(f"{where}: unknown key known_good.{key} (known: machine_type, on_drift, "
                                     f"{', '.join(KEYS)})")
            if key in LIST_KEYS:
                ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
                kind = "a list of strings"
            elif key in TABLE_KEYS:
                ok = isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
                kind = "a table of strings"
            else:
                ok = isinstance(v, str) and bool(v.strip())
                kind = "a non-empty string"
            if not ok:
                raise KnownGoodError(f"{where}: known_good.{key} must be {kind}, not {v!r}")
            values[key] = sorted(v) if key in LIST_KEYS else dict(v) if key in TABLE_KEYS else v
        out.append(KnownGood(mtype, values, on_drift))
    return tuple(out)


__all__ = ["Difference", "KEYS", "KnownGood", "KnownGoodError", "data_of_report", "data_of_runs", "differences",
           "from_data", "machine_type", "parse", "pick", "to_toml", "versions"]
