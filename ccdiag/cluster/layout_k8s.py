"""Kubernetes node labels that say where a node sits in the fabric, as a layout.

Input: what ``kubectl`` prints for the nodes: ``kubectl get nodes -o json`` (a NodeList, or one
Node), the same as YAML (``-o yaml``, read when PyYAML is installed), ``kubectl describe nodes``
(the ``Name:`` and ``Labels:`` blocks), or ``kubectl get nodes --show-labels`` (the LABELS column).

Which labels, closest to the node first (:data:`LEAF_LABELS`), from NVIDIA Topograph's reference of
node labels (docs/reference/node-labels.md, which also tables the clouds' own labels): Topograph's
``network.topology.nvidia.com/leaf`` (its ``spine`` above), AWS's ``topology.k8s.aws/network-node-layer-N``
(the highest N present is the layer nearest the instance), GKE's
``cloud.google.com/gce-topology-subblock`` (its ``gce-topology-block`` above), OCI's
``oci.oraclecloud.com/host.rack_id`` (``host.network_block_id`` above), and Topograph's earlier
``topology.kubernetes.io/network-level-1`` (``-2`` above). The NVLink domain, where no switch
label is present (or ``group_by="nvlink"``): the GPU operator's ``nvidia.com/gpu.clique``
(``<ClusterUUID>.<CliqueID>``), Topograph's ``network.topology.nvidia.com/accelerator``, AWS's
``topology.k8s.aws/ultraserver-id``.
"""

from __future__ import annotations

import json
import re

from ccdiag.cluster.layout import Layout
from ccdiag.core.errors import InputError

#: (label of the group a node is in, label of the switch above that group or None, what a group is)
LEAF_LABELS = (
    ("network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine", "leaf switch (Topograph)"),
    ("topology.k8s.aws/network-node-layer-*", None, "network node (AWS, nearest layer)"),
    ("cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-block", "sub-block (GKE)"),
    ("oci.oraclecloud.com/host.rack_id", "oci.oraclecloud.com/host.network_block_id", "rack (OCI)"),
    ("topology.kubernetes.io/network-level-1", "topology.kubernetes.io/network-level-2", "network level 1 (Topograph)"),
)
NVLINK_LABELS = (
    ("nvidia.com/gpu.clique", None, "NVLink domain (nvidia.com/gpu.clique)"),
    ("network.topology.nvidia.com/accelerator", None, "NVLink domain (Topograph accelerator)"),
    ("topology.k8s.aws/ultraserver-id", None, "NVLink domain (AWS UltraServer)"),
)
_AWS_LAYER = re.compile(r"^topology\.k8s\.aws/network-node-layer-(\d+)$")


def nodes_from_text(text: str, path: str) -> list[tuple[str, dict[str, str]]]:
    """(node name, labels) of every node in ``text``, whichever of kubectl's outputs it is."""
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith(("{", "[")):
        try:
            return _from_objects(json.loads(text), path)
        except ValueError as exc:
            raise InputError(f"{path}: not valid JSON: {exc}") from None
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    if first.startswith("Name:"):
        return _from_describe(text, path)
    if first.split()[:1] == ["NAME"] and "LABELS" in first.split():
        return _from_show_labels(text, path)
    try:
        import yaml  # noqa: PLC0415 - optional: only for -o yaml
    except ImportError:
        raise InputError(f"{path}: looks like YAML; install PyYAML, or give `kubectl get nodes -o json`") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    return _from_objects(doc, path)


def _from_objects(doc, path: str) -> list[tuple[str, dict[str, str]]]:
    items = doc.get("items") if isinstance(doc, dict) and "items" in doc else [doc] if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise InputError(f"{path}: expected a NodeList (kubectl get nodes -o json) or a Node")
    out = []
    for k, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise InputError(f"{path}: item {k} has no metadata.name: not a Node")
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            raise InputError(f"{path}: node {meta['name']}: metadata.labels is not a mapping")
        out.append((meta["name"], {str(a): str(b) for a, b in labels.items()}))
    return out


def _from_describe(text: str, path: str) -> list[tuple[str, dict[str, str]]]:
    out: list[tuple[str, dict[str, str]]] = []
    in_labels = False
    for no, raw in enumerate(text.splitlines(), 1):
        if raw.startswith("Name:"):
            out.append((raw[5:].strip(), {}))
            in_labels = False
            continue
        if raw.startswith("Labels:"):
            if not out:
                raise InputError(f"{path}:{no}: Labels: before any Name:")
            in_labels = True
            raw = " " * 7 + raw[7:]
        elif raw[:1] not in (" ", "\t"):
            in_labels = False
            continue
        if not in_labels:
            continue
        item = raw.strip()
        if not item or item == "<none>":
            continue
        key, eq, value = item.partition("=")
        if not eq:
            in_labels = False  # an indented line of the next field's block
            continue
        out[-1][1][key] = value
    if not out:
        raise InputError(f"{path}: no Name: line (not `kubectl describe nodes` output)")
    return out


def _from_show_labels(text: str, path: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for no, raw in enumerate(text.splitlines()[1:], 2):
        cols = raw.split()
        if not cols:
            continue
        if len(cols) < 2:
            raise InputError(f"{path}:{no}: a row without its LABELS column")
        labels = {}
        for item in cols[-1].split(","):
            key, eq, value = item.partition("=")
            if eq:
                labels[key] = value
        out.append((cols[0], labels))
    return out


def _aws_nearest(labels: dict[str, str]) -> tuple[str, str | None] | None:
    layers = sorted((int(m.group(1)), k) for k in labels if (m := _AWS_LAYER.match(k)))
    if not layers:
        return None
    parent = layers[-2][1] if len(layers) > 1 else None
    return layers[-1][1], parent


def parse(text: str, path: str = "nodes", group_by: str = "auto") -> Layout:
    """The layout the labels give: leaf-level labels first (``group_by`` "leaf"), else (or with
    "nvlink") the NVLink domain labels."""
    nodes = nodes_from_text(text, path)
    if not nodes:
        raise InputError(f"{path}: no nodes")
    tables = {"leaf": LEAF_LABELS, "nvlink": NVLINK_LABELS, "auto": LEAF_LABELS + NVLINK_LABELS}[group_by]
    for key, parent_key, kind in tables:
        group_of: dict[str, str] = {}
        parent_of: dict[str, str] = {}
        for name, labels in nodes:
            if key.endswith("*"):
                got = _aws_nearest(labels)
                if got is None:
                    continue
                gk, pk = got
            else:
                gk, pk = key, parent_key
            if gk not in labels:
                continue
            group_of[name] = labels[gk]
            if pk and pk in labels:
                parent_of.setdefault(labels[gk], labels[pk])
        if group_of:
            missing = [n for n, _ in nodes if n not in group_of]
            notes = [f"grouped by {key}" + (f" (above it {parent_key})" if parent_key else "")]
            if missing:
                notes.append(f"{len(missing)} node(s) without that label: {', '.join(missing[:8])}"
                             + (" ..." if len(missing) > 8 else ""))
            return Layout(fmt="k8s-labels", sources=(path,), group_of=group_of, group_kind=kind,
                          parent_of=parent_of, notes=tuple(notes))
    keys = ", ".join(k for k, _, _ in tables)
    raise InputError(f"{path}: none of {len(nodes)} nodes carries a topology label ({keys})")
