"""``check --gpu``: one GPU of the node, named the ways NVML and nvidia-smi name it, and the findings
that concern it.

A job that failed on one GPU, or a scheduler placing work on one, asks about that GPU, not the
node: "is GPU 3 fit?". The node is judged whole (a GPU's fitness depends on the node: its driver, its
shared memory, the NIC beside it), then the report keeps what concerns the GPU:

* the GPU's own findings: its checks, its NVLinks, its PCIe link, a pair it is one end of;
* the PCIe bridges and links on its path to the CPU (a switch port above it trained down, ACS
  on a bridge it crosses);
* findings about the node as a whole (driver, environment, kernel modules, limits, a probe that
  timed out): they affect every GPU, except those that follow from another device (the node's GPU
  count, short because another GPU fell off the bus, is that GPU's business);
* the root of any of those that follows from something else (the NIC that is down, for the
  GPU whose GPUDirect path it breaks), with its own findings left out.

The verdict and exit code follow the same rule as for the node, on those findings only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccdiag.core.errors import InputError
from ccdiag.core.findings import Finding
from ccdiag.core.readings import normalize_bdf

#: component kinds that are about the node as a whole, not one device
NODE_WIDE = ("node", "env", "module", "limit", "probe", "platform", "waiver")
_INDEX = re.compile(r"^\d{1,4}$")
_UUID = re.compile(r"^(GPU-)?[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
_MIG = re.compile(r"^MIG-", re.IGNORECASE)
_PCI = re.compile(r"^([0-9a-f]{1,8}:)?[0-9a-f]{1,2}:[0-9a-f]{1,2}\.[0-7]$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuSpelling:
    """What ``--gpu`` said: ``kind`` is ``index``, ``uuid`` or ``bdf``; ``value`` normalised (an
    int, ``GPU-...`` lower case, or ``dddd:bb:dd.f``)."""

    asked: str
    kind: str
    value: object


def parse_gpu(text: str) -> GpuSpelling:
    """``3``, ``GPU-4f0a3366-...`` or a PCI address in any of NVML's spellings (``00000000:5D:00.0``,
    ``0000:5d:00.0``, ``5d:00.0``). Raises :class:`InputError` (exit 2) for anything else, before the
    node is read."""
    s = (text or "").strip()
    if _INDEX.match(s):
        return GpuSpelling(text, "index", int(s))
    if _MIG.match(s):
        raise InputError(f"--gpu {text}: a MIG instance; name its GPU (index, UUID or PCI address)")
    if _UUID.match(s):
        return GpuSpelling(text, "uuid", ("" if s.upper().startswith("GPU-") else "gpu-") + s.lower())
    if _PCI.match(s):
        return GpuSpelling(text, "bdf", normalize_bdf(s))
    raise InputError(f"--gpu {text}: not a GPU index (3), UUID (GPU-xxxxxxxx-...) or PCI address "
                     f"(00000000:5D:00.0)")


def resolve_gpu(spelling: GpuSpelling, topology, hostname: str | None = None):
    """The node's GPU (a :class:`ccdiag.topology.model.GpuNode`) that ``spelling`` names; raises
    :class:`InputError` naming the GPUs the node has when none matches."""
    gpus = topology.gpus() if topology is not None else []
    for g in gpus:
        if spelling.kind == "index" and g.index == spelling.value:
            return g
        if spelling.kind == "uuid" and g.uuid and g.uuid.lower() == spelling.value:
            return g
        if spelling.kind == "bdf" and g.bdf and normalize_bdf(g.bdf) == spelling.value:
            return g
    node = f"node {hostname}" if hostname else "this node"
    have = ", ".join(f"{g.label} {g.bdf}" if g.bdf else g.label for g in gpus[:16])
    more = f" and {len(gpus) - 16} more" if len(gpus) > 16 else ""
    raise InputError(f"--gpu {spelling.asked}: no such GPU on {node} "
                     + (f"(it has {have}{more})" if gpus else "(it shows no GPU)"))


def _upstream(topology, bdf: str | None) -> set[str]:
    """The bridges on the GPU's path to the CPU (its own address left out)."""
    if topology is None or not bdf:
        return set()
    dev = topology.pcie_tree.get(bdf)
    path = tuple(getattr(dev, "path", ()) or ()) if dev is not None else ()
    return {normalize_bdf(b) or b for b in path if b != bdf}


def concerns(f: Finding, gpu, upstream: set[str]) -> bool:
    """Whether finding ``f`` is about GPU ``gpu``, a bridge above it, or the node as a whole."""
    c = f.component
    if c.kind in NODE_WIDE:
        return True
    return about_device(f, gpu, upstream)


def about_device(f: Finding, gpu, upstream: set[str]) -> bool:
    """Whether finding ``f`` names GPU ``gpu`` itself, its links, a pair it is in, or a bridge above it."""
    c = f.component
    if c.kind == "gpu_pair":
        return gpu.label in c.name.split("-")
    if c.gpu is not None:
        return c.gpu == gpu.index
    if gpu.uuid and c.uuid == gpu.uuid:
        return True
    bdf = normalize_bdf(c.bdf) if c.bdf else None
    if bdf and (bdf == gpu.bdf or bdf in upstream):
        return True
    named = f.details.get("gpus") if isinstance(f.details, dict) else None
    return isinstance(named, (list, tuple)) and (gpu.index in named or gpu.label in named)


def findings_for_gpu(findings: list[Finding], topology, gpu) -> list[Finding]:
    """The findings that concern ``gpu`` (module docstring), with the roots they follow from, in the
    order given."""
    upstream = _upstream(topology, gpu.bdf)
    by_key = {f.key: f for f in findings}

    def kept(f: Finding) -> bool:
        if f.component.kind not in NODE_WIDE:
            return about_device(f, gpu, upstream)
        root = by_key.get(f.caused_by or f.details.get("follows_waived") or "")
        return root is None or root.component.kind in NODE_WIDE or about_device(root, gpu, upstream)

    keep = {id(f) for f in findings if kept(f)}
    roots: set[str] = {f.caused_by for f in findings if id(f) in keep and f.caused_by}
    roots |= {str(f.details["follows_waived"]) for f in findings if id(f) in keep and f.details.get("follows_waived")}
    return [f for f in findings if id(f) in keep or f.key in roots]


def selection_json(spelling: GpuSpelling, gpu) -> dict:
    """The report's ``selection.gpu``."""
    return {"asked": spelling.asked, "label": gpu.label, "index": gpu.index, "uuid": gpu.uuid, "bdf": gpu.bdf}


def scope_text(gpu) -> str:
    """``GPU3 (GPU-..., 0000:5d:00.0) and what affects it``: what a ``--gpu`` verdict is about."""
    ids = ", ".join(x for x in (gpu.uuid, gpu.bdf) if x)
    return f"{gpu.label}{f' ({ids})' if ids else ''} and what affects it"


__all__ = ["GpuSpelling", "NODE_WIDE", "concerns", "findings_for_gpu", "parse_gpu", "resolve_gpu", "scope_text",
           "selection_json"]
