"""What the node can carry now, added to the topology's JSON: each GPU's and NIC's state, each
GPU's GPUDirect affinity (the nearest NICs and the NIC its traffic can use), and on every expected
path whether it is usable and, when not, what blocks it.

Why here: ``ccdiag topo --json`` and every report's ``topology`` are one shape (the report schema's
``topology``), so these derived fields are computed once, in the topology room, from the same
answers the checks and the recommender use (:mod:`ccdiag.topology.affinity`).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class Topology(Protocol):
    """What the usable-now fields are computed from (:class:`ccdiag.topology.model.Topology`, which
    calls :func:`add_usable` from its ``to_json``: a Protocol here keeps the import one-way)."""

    def gpus(self) -> Sequence[Any]: ...
    def gpu_state(self, gpu: Any) -> str: ...
    def nic_states(self) -> dict[str, dict]: ...
    def gpudirect_nics(self, gpu: Any, nic_states: dict[str, dict] | None = None) -> dict: ...
    def expected_gpu_nic(self, gpu: str, nic: str, current: bool = False) -> Any: ...


def gpu_states(topo: Topology) -> dict[str, str]:
    """Per GPU label: "ok", or what NVML said about a GPU it cannot use ("lost", "hung", ...)."""
    return {g.label: topo.gpu_state(g) for g in topo.gpus()}


def blocked_by(gstates: dict[str, str], *ends: str | None) -> str | None:
    """Why a path between ``ends`` carries nothing now: the first end that is a failed GPU."""
    for e in ends:
        st = gstates.get(e or "", "ok")
        if st != "ok":
            return f"{e} {st}"
    return None


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def add_usable(topo: Topology, doc: dict) -> dict:
    """Add the usable-now fields to ``doc`` (the topology's own JSON) and return it.

    A failed GPU or a NIC with no ACTIVE port gives its paths ``current_gbyte_s`` 0 (``gbyte_s``
    stays what the links can carry); a GPU whose nearest NICs are all down gets a second
    ``gpu_nic`` path, ``role: nearest_usable``, to the NIC it can use."""
    gstates = gpu_states(topo)
    nstates = topo.nic_states()
    for g in doc.get("gpus", []):
        st = gstates.get(g.get("label"), "ok")
        g["state"], g["usable"] = st, st == "ok"
    gstates = {label: st for label, st in gstates.items() if st != "ok"}  # 256 GPUs: 32,640 pairs to look up
    for n in doc.get("nics", []):
        ns = nstates.get(n.get("label"), {"state": "unknown", "usable": None, "ports": {}})
        n["state"], n["usable"], n["port_states"] = ns["state"], ns["usable"], dict(ns["ports"])
    affinity = {}
    for g in topo.gpus():
        a = topo.gpudirect_nics(g, nstates)
        affinity[g.label] = {**a, "gbyte_s": _round(a["gbyte_s"]), "current_gbyte_s": _round(a["current_gbyte_s"])}
    doc["affinity"] = affinity
    expected = []
    for e in doc.get("expected", []):
        blocked = blocked_by(gstates, e.get("a"), e.get("b"))
        if e.get("kind") == "gpu_nic":
            ns = nstates.get(e.get("b"), {})
            e["role"], e["nic_state"] = "nearest", ns.get("state", "unknown")
            if blocked is None and ns.get("usable") is False:
                blocked = f"{e.get('b')} down"
        e["usable"] = blocked is None
        e["blocked_by"] = blocked
        if blocked:
            e["current_gbyte_s"] = 0.0
        expected.append(e)
        via = affinity.get(e.get("a"), {}).get("via") if e.get("kind") == "gpu_nic" else None
        if via and via != e.get("b"):
            cap = topo.expected_gpu_nic(e["a"], via)
            blocked_via = blocked_by(gstates, e["a"])
            cur = 0.0 if blocked_via else _round(topo.expected_gpu_nic(e["a"], via, current=True).gbyte_s)
            expected.append({"a": e["a"], "b": via, "kind": "gpu_nic", **cap.to_json(), "current_gbyte_s": cur,
                             "role": "nearest_usable", "nic_state": nstates.get(via, {}).get("state", "unknown"),
                             "usable": blocked_via is None, "blocked_by": blocked_via})
    doc["expected"] = expected
    return doc
