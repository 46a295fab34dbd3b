"""Which NIC a GPU's network traffic can use for GPUDirect, given what is up right now.

The PCIe tree says which NICs are *nearest* to a GPU; NCCL only sends through a NIC with an ACTIVE
port, so when every nearest NIC is down the GPU falls back to the nearest one that is up, at that
NIC's (worse) level. The ``topo`` command, the GPUDirect check, the benchmarks and the NCCL
recommender all need this answer; it lives here so they give the same one.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from ccdiag.topology.levels import level_rank


# What these answers read of the model (ccdiag.topology.model, which asks them): Protocols keep the
# import one-way, as topology/fastrows.py does.
class GpuNode(Protocol):
    @property
    def label(self) -> str: ...
    @property
    def failed(self) -> str | None: ...


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class PathBandwidth(Protocol):
    @property
    def gbyte_s(self) -> float | None: ...
    @property
    def bottleneck(self) -> _Named | None: ...


class Topology(Protocol):
    def links(self) -> Sequence[Any]: ...
    def nics(self) -> Sequence[Any]: ...
    def nearest_nics(self, gpu: str) -> list[tuple[str, str]]: ...
    def expected_gpu_nic(self, gpu: str, nic: str, current: bool = False) -> Any: ...

_GPU_STATE_WORDS = {"gpu_lost": "lost", "hung": "hung", "timeout": "hung", "reset_required": "reset required",
                    "unknown_error": "failed"}


def gpu_state(gpu: GpuNode) -> str:
    """"ok", or what NVML said about a GPU it cannot use ("lost" for GPU_IS_LOST).

    A path that starts or ends at such a GPU moves no data, whatever its links could carry."""
    if not gpu.failed:
        return "ok"
    return _GPU_STATE_WORDS.get(gpu.failed, "failed")


def nic_states(topo: Topology) -> dict[str, dict]:
    """Per RDMA NIC: ``state`` ("active" when a port is ACTIVE, "down" when port states were read
    and none is ACTIVE, "unknown" when none was read), ``usable`` (True / False / None) and the
    state of each port."""
    out: dict[str, dict] = {}
    wires_by_nic: dict[str, list[Any]] = {}
    for l in topo.links():
        if l.kind in ("ib", "roce"):
            wires_by_nic.setdefault(l.a, []).append(l)
    for n in topo.nics():
        wires = wires_by_nic.get(n.node, [])
        ports = {l.name.rsplit(" port ", 1)[-1]: l.state for l in wires}
        if any((l.state or "").upper() == "ACTIVE" for l in wires):
            state, usable = "active", True
        elif any(l.state for l in wires):
            state, usable = "down", False
        else:
            state, usable = "unknown", None
        out[n.label] = {"state": state, "usable": usable, "ports": ports}
    return out


def limiting_link(cap: PathBandwidth, cur: PathBandwidth) -> str:
    """The link that limits a path: the trained-down one when the path runs below capability."""
    if (cur.bottleneck is not None and cap.gbyte_s is not None and cur.gbyte_s is not None
            and cur.gbyte_s < cap.gbyte_s):
        return cur.bottleneck.name
    return cap.bottleneck.name if cap.bottleneck else ""


def gpu_affinity(topo: Topology, gpu: GpuNode, nstates: dict[str, dict] | None = None) -> dict:
    """One GPU's NIC affinity: the nearest NICs by level, and the NIC its traffic can use.

    ``nearest``/``level`` are the closest NICs whatever their state (what the PCIe tree says);
    when every one of them is down, ``usable``/``usable_level`` are the closest NICs with an
    active port (empty when there is none), and ``via`` is the NIC the bandwidth is computed to.
    ``gbyte_s`` is what the path to ``via`` can carry, ``current_gbyte_s`` what it carries as
    trained; for a failed GPU ``current_gbyte_s`` is 0: it moves nothing until it is reset."""
    nstates = nic_states(topo) if nstates is None else nstates
    state = gpu_state(gpu)
    near = topo.nearest_nics(gpu.label)
    entry: dict[str, Any] = {"state": state, "nearest": [], "level": None, "nearest_down": False, "usable": [],
             "usable_level": None, "via": None, "gbyte_s": None, "current_gbyte_s": None, "bottleneck": None}
    if not near:
        return entry
    best = level_rank(near[0][1])
    group = [n for n, lv in near if level_rank(lv) == best]
    entry.update(nearest=group, level=near[0][1])
    not_down = [n for n in group if nstates.get(n, {}).get("usable") is not False]
    if not_down:
        entry.update(usable=not_down, usable_level=near[0][1], via=not_down[0])
    else:
        entry["nearest_down"] = True
        active = [(n, lv) for n, lv in near if nstates.get(n, {}).get("usable") is True]
        if active:
            ub = level_rank(active[0][1])
            entry.update(usable=[n for n, lv in active if level_rank(lv) == ub], usable_level=active[0][1],
                         via=active[0][0])
    target = entry["via"] or group[0]
    cap = topo.expected_gpu_nic(gpu.label, target)
    cur = topo.expected_gpu_nic(gpu.label, target, current=True)
    entry["gbyte_s"] = cap.gbyte_s
    if state != "ok":
        entry["current_gbyte_s"], entry["bottleneck"] = 0.0, f"{gpu.label} {state}"
    else:
        entry["current_gbyte_s"], entry["bottleneck"] = cur.gbyte_s, limiting_link(cap, cur) or None
    return entry
