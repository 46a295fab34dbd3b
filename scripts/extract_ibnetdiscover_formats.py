#!/usr/bin/env python3
"""Re-extract the print formats of ibnetdiscover's topology dump from rdma-core's source.

The layout reader (ccdiag/cluster/layout_ibnet.py) is written from these formats; the list is kept
in tests/fixtures/layouts/ibnetdiscover-print-formats.json and tests/test_layout.py holds every
entry to what the reader does with that line (read, or passed over on purpose). Run it against a
newer rdma-core to see what changed:

    python scripts/extract_ibnetdiscover_formats.py path/to/rdma-core/infiniband-diags/ibnetdiscover.c \
        > tests/fixtures/layouts/ibnetdiscover-print-formats.json

Reads the C file only; changes nothing on the machine. Only the default output is covered (the
functions from ``out_ids`` to the end of ``dump_topology``): the ``-l`` node list, the ``-p`` ports
report and the ``--diff`` output are other formats.
"""

from __future__ import annotations

import json
import re
import sys

FIRST, LAST = "static void out_ids(", "static void dump_ports_report("
_FUNC = re.compile(r"^static [^(]*?\b(\w+)\(", re.M)
_CALL = re.compile(r"fprintf\(\s*f\s*,\s*((?:\"(?:[^\"\\]|\\.)*\"|\s|PRI[xud]64)+)")
_LIT = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|PRI([xud])64")


def formats(source: str) -> list[dict]:
    start, end = source.index(FIRST), source.index(LAST)
    body = source[start:end]
    funcs = [(m.start(), m.group(1)) for m in _FUNC.finditer(body)]
    out = []
    for call in _CALL.finditer(body):
        fmt = "".join(m.group(1) if m.group(1) is not None else f"ll{m.group(2)}" for m in _LIT.finditer(call.group(1)))
        fmt = fmt.encode().decode("unicode_escape")
        func = [name for pos, name in funcs if pos <= call.start()][-1]
        out.append({"function": func, "format": fmt})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: extract_ibnetdiscover_formats.py path/to/ibnetdiscover.c", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as fh:
        source = fh.read()
    doc = {"source": "rdma-core infiniband-diags/ibnetdiscover.c (default topology dump)",
           "formats": formats(source)}
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
