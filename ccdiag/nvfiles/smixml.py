"""``nvidia-smi -q -x`` XML, read into the same per-GPU records as the text form.

The XML carries the same values as ``nvidia-smi -q`` under element names fixed by the
``nvsmi_device_v*.dtd`` that the document's DOCTYPE names (v10 on R440, v11-v12 on R470-R575,
v13 on R580). Each GPU's leaf elements become fields under their element path
(``ecc_errors/volatile/dram_uncorrectable``); :mod:`ccdiag.nvfiles.smifields` maps those paths and
the text paths to one set of values.

Parsed with the standard library's expat parser; a document that declares entities is refused
before parsing (nvidia-smi never writes one, and entity expansion is how an XML file becomes a
memory bomb). The DTD named in the DOCTYPE is never fetched.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ccdiag.core.errors import UserInputError
from ccdiag.nvfiles.smiq import MAX_GPUS, SmiGpu, SmiLog


class SmiXmlError(UserInputError):
    """An ``nvidia-smi -q -x`` document that cannot be read (exit 2)."""


def looks_like_smi_xml(text: str) -> bool:
    return "<nvidia_smi_log" in text[:1 << 14]


def _leaves(elem: ET.Element, prefix: str, out: dict[str, str], seen: dict[str, int]) -> None:
    for child in elem:
        path = f"{prefix}/{child.tag}" if prefix else child.tag
        if len(child):
            _leaves(child, path, out, seen)
            continue
        n = seen.get(path, 0) + 1
        seen[path] = n
        out[path if n == 1 else f"{path}#{n}"] = (child.text or "").strip()


def parse_smi_xml(text: str, source: str = "nvidia-smi -q -x") -> SmiLog:
    """Read the document; :class:`SmiXmlError` naming the line when it is not well-formed."""
    start = text.find("<")
    if start < 0:
        raise SmiXmlError(f"{source}: no XML element")
    if "<!ENTITY" in text:
        raise SmiXmlError(f"{source}: declares XML entities, which nvidia-smi never writes: not read")
    body = text[start:]
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        line = getattr(exc, "position", (0, 0))[0] + text[:start].count("\n")
        raise SmiXmlError(f"{source}: not well-formed XML at line {line} ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise SmiXmlError(f"{source}: the root element is <{root.tag}>, not <nvidia_smi_log>")
    log = SmiLog(banner=True, source=source)
    log.timestamp = (root.findtext("timestamp") or "").strip() or None
    log.driver_version = (root.findtext("driver_version") or "").strip() or None
    log.cuda_version = (root.findtext("cuda_version") or "").strip() or None
    attached = (root.findtext("attached_gpus") or "").strip()
    log.attached_gpus = int(attached) if attached.isdigit() else None
    for elem in root.findall("gpu")[:MAX_GPUS]:
        gpu = SmiGpu(elem.get("id"), 0)
        _leaves(elem, "", gpu.fields, {})
        for proc in elem.findall("processes/process_info"):
            gpu.processes.append({"Process ID": (proc.findtext("pid") or "").strip(),
                                  "Type": (proc.findtext("type") or "").strip(),
                                  "Used GPU Memory": (proc.findtext("used_memory") or "").strip()})
        log.gpus.append(gpu)
    return log
