#!/usr/bin/env python3
"""List the field paths of real ``nvidia-smi -q`` outputs and which of them ccdiag reads.

Usage::

    python3 scripts/extract_smi_fields.py OUTPUT [OUTPUT ...]          # one JSON line per path
    python3 scripts/extract_smi_fields.py --summary OUTPUT [OUTPUT ...] # coverage per file

nvidia-smi's source is not public; what it prints is known from its outputs (text, and ``-x`` XML
whose element names the ``nvsmi_device_v*.dtd`` fixes). Give this script real outputs from the
driver versions to cover (``nvidia-smi -q > out.txt``, ``nvidia-smi -q -x > out.xml``, or a bug
report's ``nvidia-smi --query`` section): it prints each GPU field path with the driver version and
the ``ccdiag/data/smi_fields.json`` key that reads it (``null``: printed, not read), so a new
driver's renamed field shows up as an unread path next to the key that should read it. It reads
files only and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys


def paths(text: str) -> tuple[str | None, dict[str, str | None]]:
    """(driver version, {path: the key reading it or None}) over every GPU of one output."""
    from ccdiag.nvfiles import smifields as sf
    from ccdiag.nvfiles.smiq import parse_smi_q
    from ccdiag.nvfiles.smixml import looks_like_smi_xml, parse_smi_xml

    log = parse_smi_xml(text) if looks_like_smi_xml(text) else parse_smi_q(text)
    reader = {p: f.key for f in sf.fields() for p in (*f.text, *f.xml)}
    out: dict[str, str | None] = {}
    for gpu in log.gpus:
        for path in gpu.fields:
            base = path.split("#", 1)[0]
            out.setdefault(base, reader.get(base))
    return log.driver_version, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outputs", nargs="+")
    ap.add_argument("--summary", action="store_true", help="one line per file: paths printed and read")
    args = ap.parse_args(argv)
    for name in args.outputs:
        with open(name, encoding="utf-8", errors="replace") as fh:
            driver, found = paths(fh.read())
        if args.summary:
            read = sum(1 for k in found.values() if k)
            print(json.dumps({"file": name, "driver": driver, "paths": len(found), "read": read,
                              "keys": len({k for k in found.values() if k})}))
            continue
        for path, key in sorted(found.items()):
            print(json.dumps({"file": name, "driver": driver, "path": path, "key": key}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
