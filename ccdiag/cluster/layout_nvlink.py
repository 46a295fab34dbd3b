"""NVLink domains (a GB200 NVL72 rack, or a partition of one) from NVML, as a layout.

NVML gives every GPU that registered with the NVLink fabric a clique id and a cluster UUID
(``nvmlDeviceGetGpuFabricInfoV``: ``cliqueId``, ``clusterUuid``); GPUs of one NVLink domain share
both, and the clique id alone is not unique (NCCL's maintainers, NVIDIA/nccl#1301), so the domain is
``<cluster UUID>.<clique id>``, the value the GPU operator writes into ``nvidia.com/gpu.clique``. They
mean something only once registration completed; an all-zero cluster UUID (what an H100 without a
multi-node NVLink fabric can report as "completed", meta-pytorch/torchcomms#1385) is no domain. The
nvml probe records exactly that (``fabric_clique_id``, ``fabric_cluster_uuid``, None otherwise).

Read from what ccdiag already writes per host: a ``ccdiag check --json`` report (or any report with
the nvml probe's data) or a snapshot (``ccdiag snapshot``), one file per host; or live, on each
rank of the run (``--layout nvml``), through :func:`domain_of_gpus` on the probe's GPUs.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ccdiag.cluster.layout import Layout
from ccdiag.core.errors import InputError, UserInputError


def _field(gpu: Any, name: str) -> Any:
    return gpu.get(name) if isinstance(gpu, dict) else getattr(gpu, name, None)


def domain_of_gpus(gpus: list) -> tuple[str | None, str | None]:
    """(domain id, note) of a host from its GPUs' fabric identity: the domain most of its
    registered GPUs share; a note when they disagree or none registered."""
    ids = []
    for g in gpus or []:
        clique, cluster = _field(g, "fabric_clique_id"), _field(g, "fabric_cluster_uuid")
        if clique is not None and cluster:
            ids.append(f"{cluster}.{clique}")
    if not ids:
        return None, "no GPU registered with an NVLink fabric (no clique id and cluster UUID)"
    counts = Counter(ids).most_common()
    note = None
    if len(counts) > 1:
        note = (f"GPUs in {len(counts)} NVLink domains ({', '.join(f'{d} x{c}' for d, c in counts)}); "
                f"taken as in {counts[0][0]}")
    return counts[0][0], note


def from_report(doc: Any, path: str) -> tuple[str, str | None, str | None]:
    """(host, domain, note) of one ccdiag JSON report."""
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a ccdiag report (a JSON object with host and probes)")
    host = (doc.get("host") or {}).get("hostname") if isinstance(doc.get("host"), dict) else None
    if not isinstance(host, str) or not host:
        raise InputError(f"{path}: the report names no host (host.hostname)")
    probes = doc.get("probes")
    nvml = probes.get("nvml") if isinstance(probes, dict) else None
    data = nvml.get("data") if isinstance(nvml, dict) else None
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, list):
        return host, None, "the report has no nvml probe data (run `ccdiag check --json` on the host)"
    domain, note = domain_of_gpus(gpus)
    return host, domain, note


def from_snapshot(path: str) -> tuple[str, str | None, str | None]:
    """(host, domain, note) of one snapshot, read by the nvml probe as `check --replay` would."""
    import time

    from ccdiag.core.probenames import PROBE_NVML
    from ccdiag.host.door import ReplayHost
    from ccdiag.run.observe import observe

    try:
        host = ReplayHost(path)
    except UserInputError:
        raise
    except OSError as exc:
        raise InputError(f"{path}: cannot read the snapshot: {exc.strerror or exc}") from None
    obs = observe(host, [PROBE_NVML], time.monotonic() + 30, close=True)
    name = obs.meta.get("hostname")
    if not isinstance(name, str) or not name:
        raise InputError(f"{path}: the snapshot names no host")
    run = obs.runs.get(PROBE_NVML)
    gpus = getattr(getattr(run, "data", None), "gpus", None)
    if gpus is None:
        return name, None, f"the nvml probe read nothing ({getattr(run, 'error', None) or 'no data'})"
    domain, note = domain_of_gpus(list(gpus))
    return name, domain, note


def is_snapshot(path: str) -> bool:
    """A snapshot is a tar archive, gzipped or not (``ccdiag snapshot``'s file, whatever its name)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(262)
    except OSError:
        return path.endswith((".tar", ".tar.gz", ".tgz"))
    return head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar"


def read_files(paths: list[str]) -> Layout:
    from ccdiag.core.userfiles import read_user_text

    per_host: dict[str, tuple[str | None, str | None]] = {}
    for p in paths:
        if is_snapshot(p):
            host, domain, note = from_snapshot(p)
        else:
            text = read_user_text(p, "layout file")
            try:
                doc = json.loads(text)
            except ValueError as exc:
                raise InputError(f"{p}: not valid JSON: {exc}") from None
            host, domain, note = from_report(doc, p)
        if host in per_host:
            raise InputError(f"{p}: host {host} is named by two files")
        per_host[host] = (domain, note)
    return from_domains(per_host, tuple(paths))


def from_domains(per_host: dict[str, tuple[str | None, str | None]], sources: tuple[str, ...]) -> Layout:
    """The layout of hosts by NVLink domain; hosts without one are left out, and said so."""
    group_of = {h: d for h, (d, _) in per_host.items() if d}
    notes = [f"{h}: {n}" for h, (_, n) in per_host.items() if n]
    if not group_of:
        raise InputError(f"{', '.join(sources)[:200]}: no host has an NVLink domain id "
                         f"({notes[0] if notes else 'no GPU data'})")
    return Layout(fmt="nvlink-domains", sources=sources, group_of=group_of, group_kind="NVLink domain",
                  notes=tuple(notes))
