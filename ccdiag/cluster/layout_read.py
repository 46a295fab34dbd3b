"""Which reader a layout file needs, and the layout it holds: ``bench locate --layout``'s entry.

Why a module of its own: the readers (one per format) build a :class:`~ccdiag.cluster.layout.Layout`,
and the choice among them needs every reader; kept beside ``Layout`` it would import the readers that
import it back.
"""

from __future__ import annotations

import json

from ccdiag.cluster import layout_ibnet, layout_k8s, layout_slurm
from ccdiag.cluster.layout import Layout
from ccdiag.cluster.layout_nvlink import is_snapshot, read_files
from ccdiag.core.errors import InputError
from ccdiag.core.userfiles import read_user_text

#: the formats ``--layout-format`` accepts; ``auto`` tells them apart by their content
FORMATS = ("auto", "slurm", "k8s", "ibnetdiscover", "nvlink")


def detect(text: str) -> str | None:
    """The format of ``text`` by its first meaningful lines, or None."""
    head = text.lstrip("\ufeff \t\r\n")[:4096]
    if head.startswith(("{", "[")):
        return "json"
    for raw in head.splitlines()[:80]:
        line = raw.strip()
        if not line or line.startswith("#"):
            if "Topology file:" in line:
                return "ibnetdiscover"
            continue
        low = line.lower()
        if low.startswith(("switchname=", "blockname=", "blocksizes=", "ringname=")):
            return "slurm"
        if line.startswith(("Switch\t", "Ca\t", "Rt\t", "vendid=", "switchguid=", "caguid=", "sysimgguid=")):
            return "ibnetdiscover"
        if line.startswith(("Name:", "apiVersion:", "kind:", "items:")) or (
                line.split()[:1] == ["NAME"] and "LABELS" in line.split()):
            return "k8s"
    return None


def read_layout(paths: list[str], fmt: str = "auto") -> Layout:
    """The layout in ``paths`` (one file, or one report/snapshot per host for NVLink domains)."""
    if not paths:
        raise InputError("--layout: no file given")
    if fmt not in FORMATS:
        raise InputError(f"--layout-format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "nvlink" or (fmt == "auto" and all(is_snapshot(p) for p in paths)):
        return read_files(paths)
    if len(paths) > 1:
        kinds = {detect(read_user_text(p, "layout file")) for p in paths}
        if kinds == {"json"}:
            return read_files(paths)
        raise InputError(f"--layout: {len(paths)} files given; only NVLink domain ids (one ccdiag report or "
                         f"snapshot per host) come in several files")
    path = paths[0]
    text = read_user_text(path, "layout file")
    kind = fmt if fmt != "auto" else detect(text)
    if kind == "json":
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InputError(f"{path}: not valid JSON: {exc}") from None
        if isinstance(doc, dict) and ("items" in doc or doc.get("kind") in ("NodeList", "List", "Node")):
            kind = "k8s"
        else:
            kind = "nvlink"
    if kind == "slurm":
        return layout_slurm.parse(text, path)
    if kind == "ibnetdiscover":
        return layout_ibnet.parse(text, path)
    if kind == "k8s":
        return layout_k8s.parse(text, path)
    if kind == "nvlink":
        return read_files(paths)
    raise InputError(f"{path}: not a layout this reads (a Slurm topology.conf, kubectl nodes as JSON/YAML or "
                     f"`kubectl describe nodes`, ibnetdiscover output, ccdiag reports or snapshots); "
                     f"name the format with --layout-format")
