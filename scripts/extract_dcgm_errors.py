#!/usr/bin/env python3
"""Extract DCGM's diagnostic error catalogue (``dcgm_errors.h`` / ``dcgm_errors.c``) as JSON data.

Usage::

    python3 scripts/extract_dcgm_errors.py DCGM_GIT_DIR --git-ref v2.4.7 --git-ref v3.3.9 --git-ref v4.6.0 \
        > ccdiag/data/dcgm_errors.json

``DCGM_CHECKOUT`` is a clone of https://github.com/NVIDIA/DCGM (or its bare git directory, read with
``git show REF:path``; several refs merge: the newest ref's text first, every distinct older wording
of a message kept under ``message_variants``, since ``dcgmi diag`` text from an older DCGM prints
the older wording). Every ``DCGM_FR_*`` code becomes one entry: its number, name, message format
(``DCGM_FR_*_MSG``, the printf text ``dcgmi diag`` prints in its warnings), DCGM's suggested next
step (``DCGM_FR_*_NEXT``), severity and category (the ``DCGM_ERROR_TABLE_ENTRY`` rows of
``dcgm_errors.c``). ccdiag maps a warning to its code by ``error_id`` (``dcgmi diag -j``) or by
matching the message against these formats (text output). The script reads text only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

_ENUM = re.compile(r"^\s*(DCGM_FR_\w+)\s*=\s*(\d+)\s*,", re.M)
_DEFINE = re.compile(r"^#define\s+(\w+)\s+((?:[^\n\\]|\\\n)*)", re.M)
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_TABLE = re.compile(r"DCGM_ERROR_TABLE_ENTRY\(\s*(DCGM_FR_\w+)\s*,\s*(DCGM_ERROR_\w+)\s*,\s*(DCGM_FR_EC_\w+)\s*\)")
_SEVERITY = re.compile(r"^\s*(DCGM_ERROR_\w+)\s*=\s*(\d+)", re.M)
_CATEGORY = re.compile(r"^\s*(DCGM_FR_EC_\w+)\s*=\s*(\d+)", re.M)


def _read(root: str, path: str, ref: str | None) -> str:
    if ref:
        return subprocess.run(["git", "-C", root, "show", f"{ref}:{path}"], check=True, capture_output=True,
                              text=True).stdout
    with open(os.path.join(root, path), encoding="utf-8") as fh:
        return fh.read()


def _strings(defines: dict[str, str], name: str, depth: int = 0) -> str | None:
    """The string a macro expands to (adjacent literals joined, other macros followed)."""
    body = defines.get(name)
    if body is None or depth > 8:
        return None
    body = body.replace("\\\n", " ")
    literals = _STRING.findall(body)
    if literals:
        return "".join(bytes(s, "utf-8").decode("unicode_escape") for s in literals)
    token = body.split("/*")[0].strip()
    return _strings(defines, token, depth + 1) if re.fullmatch(r"\w+", token) else None


def extract(header: str, table_c: str) -> list[dict]:
    defines = {m.group(1): m.group(2) for m in _DEFINE.finditer(header)}
    severity = {m.group(1): int(m.group(2)) for m in _SEVERITY.finditer(header)}
    category = {m.group(1): int(m.group(2)) for m in _CATEGORY.finditer(header)}
    rows = {m.group(1): (m.group(2), m.group(3)) for m in _TABLE.finditer(table_c)}
    out = []
    seen: set[int] = set()
    for m in _ENUM.finditer(header):
        name, code = m.group(1), int(m.group(2))
        if code in seen or name.endswith("_SENTINEL"):
            continue
        seen.add(code)
        sev, cat = rows.get(name, (None, None))
        out.append({"code": code, "name": name, "message": _strings(defines, f"{name}_MSG"),
                    "next_steps": _strings(defines, f"{name}_NEXT"),
                    "severity": sev.removeprefix("DCGM_ERROR_").lower() if sev else None,
                    "severity_code": severity.get(sev) if sev else None,
                    "category": cat.removeprefix("DCGM_FR_EC_").lower() if cat else None,
                    "category_code": category.get(cat) if cat else None})
    return out


_PLUGIN = re.compile(r'#define\s+(\w+)_PLUGIN_NAME\s+"([^"]+)"')
_PLUGIN_CAT = re.compile(r"#define\s+(\w+)_PLUGIN_CATEGORY\s+(\w+)")
_CATEGORY_NAME = re.compile(r'#define\s+(PLUGIN_CATEGORY_\w+)\s+"([^"]+)"')
_DISPLAY = re.compile(r'const std::string DISPLAY_(\w+)\("([^"]+)"\)')
_SW_TEST = re.compile(r'\{\s*"([^"]+)",\s*"(\w+)"\s*\}')


def extract_tests(plugin_strings: str, diag_cpp: str, software: str) -> list[dict]:
    """Every diagnostic test: the plugin name (``dcgmi diag`` 4.x prints it, and ``-j`` always), its
    category, and the display name older ``dcgmi`` text printed; the software plugin's sub-tests."""
    cat_names = {m.group(1): m.group(2) for m in _CATEGORY_NAME.finditer(plugin_strings)}
    cats = {m.group(1): m.group(2) for m in _PLUGIN_CAT.finditer(plugin_strings)}
    display = {m.group(1): m.group(2) for m in _DISPLAY.finditer(diag_cpp)}
    out = []
    for m in _PLUGIN.finditer(plugin_strings):
        prefix, name = m.group(1), m.group(2)
        if name == "name":
            continue  # a parameter's name, not a plugin's
        cat = cats.get(prefix)
        while cat and cat not in cat_names and cat.endswith("_PLUGIN_CATEGORY"):
            cat = cats.get(cat.removesuffix("_PLUGIN_CATEGORY"))
        shown = {"SW": None, "MEMORY": "MEMORY", "PCIE": "PCIE", "TP": "TP", "TS": "TS", "SMSTRESS": "SM_STRESS",
                 "DIAGNOSTIC": "DIAGNOSTIC", "CTXCREATE": "CTXCREATE", "MEMBW": "MEMBW", "MEMTEST": "MEMTEST",
                 "PULSE_TEST": "PULSE_TEST", "EUD": "EUD_TEST"}.get(prefix)
        out.append({"name": name, "category": cat_names.get(cat or "", None),
                    "display": display.get(shown) if shown else None, "software_subtest": False})
    for m in _SW_TEST.finditer(software):
        out.append({"name": m.group(2), "category": "Deployment", "display": m.group(1), "software_subtest": True})
    for key in ("DENYLIST", "NVML_LIB", "CUDA_MAIN_LIB", "CUDA_TOOLKIT", "PERMISSIONS", "PERSISTENCE", "ENVIRONMENT",
                "PAGE_RETIREMENT", "GRAPHICS", "INFOROM"):
        if key in display and not any(t["display"] == display[key] for t in out):
            out.append({"name": key.lower(), "category": "Deployment", "display": display[key],
                        "software_subtest": True})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dcgm", help="a DCGM checkout or git directory")
    ap.add_argument("--git-ref", action="append", default=[],
                    help="read the files at this git ref (repeatable, oldest first) instead of the work tree")
    args = ap.parse_args(argv)
    merged: dict[int, dict] = {}
    for ref in reversed(args.git_ref or [None]):
        header = _read(args.dcgm, "dcgmlib/dcgm_errors.h", ref)
        try:
            table = _read(args.dcgm, "dcgmlib/src/dcgm_errors.c", ref)
        except (OSError, subprocess.CalledProcessError):
            table = ""  # older DCGM keeps the table elsewhere: severities from the newest ref only
        for e in extract(header, table):
            have = merged.setdefault(e["code"], dict(e, message_variants=[]))
            for key in ("severity", "severity_code", "category", "category_code", "next_steps"):
                if have.get(key) is None and e.get(key) is not None:
                    have[key] = e[key]
            if e["message"] and e["message"] != have["message"] and e["message"] not in have["message_variants"]:
                have["message_variants"].append(e["message"])
    entries = [merged[k] for k in sorted(merged)]
    tests: list[dict] = []
    def quiet(path: str, ref: str | None) -> str:
        try:
            return _read(args.dcgm, path, ref)
        except (OSError, subprocess.CalledProcessError):
            return ""  # not in this version

    for ref in reversed(args.git_ref or [None]):
        found = extract_tests(quiet("nvvs/include/PluginStrings.h", ref), quiet("dcgmi/Diag.cpp", ref),
                              quiet("nvvs/src/SoftwarePluginFramework.cpp", ref))
        for t in found:
            same = next((x for x in tests if x["name"] == t["name"]), None)
            if same is None:
                tests.append(t)
            elif t["display"] and not same["display"]:
                same["display"] = t["display"]
    version = ", ".join(args.git_ref) if args.git_ref else None
    json.dump({"about": "DCGM diagnostic error codes (DCGM_FR_*): message formats, DCGM's next steps, severity "
                        "and category, from NVIDIA/DCGM dcgmlib/dcgm_errors.h and dcgmlib/src/dcgm_errors.c; "
                        "re-extract with scripts/extract_dcgm_errors.py",
               "source": f"NVIDIA/DCGM {version or 'work tree'}",
               "errors": entries, "tests": tests}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
