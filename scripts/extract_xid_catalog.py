#!/usr/bin/env python3
"""Re-extracts NVIDIA's XID catalogue into ccdiag/data/xid_catalog.json (changes only that file).

NVIDIA publishes the catalogue of XID codes for Ampere and later GPUs as a web page with one table
("Analyzing Xid Errors with the Xid Catalog", docs.nvidia.com/deploy/xid-errors/
analyzing-xid-catalog.html) and as a spreadsheet (Xid-Catalog.xlsx, sheet "Catalog"). Each row
names a code, its mnemonic, a description, the GPUs it applies to and two resolution buckets
(immediate and investigatory action). This script reads one of:

* the spreadsheet (``.xlsx``), with the standard library's zipfile and XML parser;
* the page saved as HTML (``.html``/``.htm``), its catalogue table;
* a generated transcription of the spreadsheet in the form ``{Code: 1, Mnemonic: "...",
  Description: "...", ImmediateResolution: "...", InvestigatoryResolution: "..."}`` (one row per
  line; leptonai/gpud keeps one as components/accelerator/nvidia/xid/catalog_generated.go).

It rewrites the ``codes`` and ``catalogue`` sections of the JSON file and keeps its ``decisions``
section (ccdiag's own judgement where it departs from NVIDIA's bucket, each with its reason), then
prints the coverage: codes written / codes the source documents.

    python scripts/extract_xid_catalog.py Xid-Catalog.xlsx --version 2025-10-29
    python scripts/extract_xid_catalog.py saved-page.html --version 2025-11-20 --check
"""

from __future__ import annotations

import argparse
import html.parser
import json
import pathlib
import re
import sys
import xml.etree.ElementTree as ET
import zipfile

REPO = pathlib.Path(__file__).resolve().parent.parent
TARGET = REPO / "ccdiag" / "data" / "xid_catalog.json"
PAGE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
SHEET = "https://docs.nvidia.com/deploy/xid-errors/Xid-Catalog.xlsx"

#: column headings of the catalogue (page and sheet alike) -> field
COLUMNS = {
    "code": "code",
    "mnemonic": "mnemonic",
    "description": "description",
    "applies to a100": "a100",
    "applies to h100": "h100",
    "applies to b100": "b100",
    "applies to gb200": "gb200",
    "resolution bucket (immediate action)": "immediate",
    "resolution bucket (investigatory action)": "investigatory",
}
GPUS = ("a100", "h100", "b100", "gb200")


def _clean(text: str | None) -> str:
    return " ".join((text or "").replace("\u2013", "-").split())


def _rows_to_entries(rows: list[list[str]]) -> dict[int, dict]:
    """Catalogue rows (the first that names "Code" and "Mnemonic" is the heading) as entries."""
    head: dict[int, str] | None = None
    out: dict[int, dict] = {}
    for row in rows:
        cells = [_clean(c) for c in row]
        if head is None:
            low = [c.lower() for c in cells]
            if "code" in low and "mnemonic" in low:
                head = {i: COLUMNS[c] for i, c in enumerate(low) if c in COLUMNS}
            continue
        rec = {field: cells[i] for i, field in head.items() if i < len(cells)}
        if not re.fullmatch(r"[0-9]{1,4}", rec.get("code", "")):
            continue
        out[int(rec["code"])] = rec
    return out


# -- the spreadsheet ---------------------------------------------------------------------------------
_NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
       "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships"}


def _col_index(ref: str) -> int:
    n = 0
    for ch in re.match(r"[A-Z]+", ref).group(0):  # type: ignore[union-attr]
        n = n * 26 + ord(ch) - 64
    return n - 1


def read_xlsx(path: pathlib.Path, sheet: str = "Catalog") -> dict[int, dict]:
    with zipfile.ZipFile(path) as z:
        shared = []
        if "xl/sharedStrings.xml" in z.namelist():
            for si in ET.fromstring(z.read("xl/sharedStrings.xml")).findall("m:si", _NS):
                shared.append("".join(t.text or "" for t in si.iter(f"{{{_NS['m']}}}t")))
        book = ET.fromstring(z.read("xl/workbook.xml"))
        rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
        targets = {r.get("Id"): r.get("Target") for r in rels}
        rid = next((s.get(f"{{{_NS['r']}}}id") for s in book.iter(f"{{{_NS['m']}}}sheet") if s.get("name") == sheet),
                   None)
        if rid is None:
            raise SystemExit(f"{path}: no sheet named {sheet!r}")
        target = targets[rid].lstrip("/")
        data = ET.fromstring(z.read(target if target.startswith("xl/") else f"xl/{target}"))
    rows = []
    for row in data.iter(f"{{{_NS['m']}}}row"):
        cells: dict[int, str] = {}
        for c in row.findall("m:c", _NS):
            v = c.find("m:v", _NS)
            text = "".join(t.text or "" for t in c.iter(f"{{{_NS['m']}}}t")) if c.get("t") == "inlineStr" else (
                v.text if v is not None else "")
            if c.get("t") == "s" and text:
                text = shared[int(text)]
            cells[_col_index(c.get("r", "A1"))] = text or ""
        rows.append([cells.get(i, "") for i in range(max(cells, default=-1) + 1)])
    return _rows_to_entries(rows)


# -- the page --------------------------------------------------------------------------------------
class _Tables(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def read_html(path: pathlib.Path) -> dict[int, dict]:
    parser = _Tables()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return _rows_to_entries(parser.rows)


# -- a generated transcription -----------------------------------------------------------------------
_GO_ROW = re.compile(r'\{Code: ([0-9]+), Mnemonic: "((?:[^"\\]|\\.)*)", Description: "((?:[^"\\]|\\.)*)", '
                     r'ImmediateResolution: "((?:[^"\\]|\\.)*)", InvestigatoryResolution: "((?:[^"\\]|\\.)*)"\}')


def read_transcription(path: pathlib.Path) -> dict[int, dict]:
    out = {}
    for m in _GO_ROW.finditer(path.read_text(encoding="utf-8")):
        def unq(s: str) -> str:
            return _clean(s.replace("\\n", " ").replace('\\"', '"'))
        out[int(m.group(1))] = {"code": m.group(1), "mnemonic": unq(m.group(2)), "description": unq(m.group(3)),
                                "immediate": unq(m.group(4)), "investigatory": unq(m.group(5))}
    return out


def read_any(path: pathlib.Path) -> dict[int, dict]:
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        return read_xlsx(path)
    if suffix in (".html", ".htm"):
        return read_html(path)
    return read_transcription(path)


# -- writing -----------------------------------------------------------------------------------------
def entry(rec: dict) -> dict:
    """One code as the data file keeps it: NVIDIA's words, nothing of ccdiag's."""
    out = {"mnemonic": rec.get("mnemonic") or None,
           "description": rec.get("description") or None,
           "immediate": rec.get("immediate") or None,
           "investigatory": rec.get("investigatory") or None}
    applies = [g.upper() for g in GPUS if rec.get(g, "").upper() == "YES"]
    if any(g in rec for g in GPUS):
        out["applies_to"] = applies
    out["unused"] = (rec.get("description") or "").strip().lower() == "unused"
    return out


def build(entries: dict[int, dict], old: dict, version: str, source: str) -> dict:
    doc = dict(old)
    doc["catalogue"] = {
        "publisher": "NVIDIA",
        "title": "Analyzing Xid Errors with the Xid Catalog (Ampere and later GPUs)",
        "page": PAGE,
        "spreadsheet": SHEET,
        "version": version,
        "read_from": source,
        "codes_documented": len(entries),
    }
    doc["codes"] = {str(code): entry(entries[code]) for code in sorted(entries)}
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=pathlib.Path, help="Xid-Catalog.xlsx, the saved page (.html) or a transcription")
    ap.add_argument("--version", required=True, help="the catalogue's date (the page or sheet as read)")
    ap.add_argument("--source-note", default=None, help="how the source was obtained (written into the file)")
    ap.add_argument("-o", "--output", type=pathlib.Path, default=TARGET)
    ap.add_argument("--check", action="store_true", help="exit 1 when the output would change")
    args = ap.parse_args(argv)
    entries = read_any(args.source)
    if not entries:
        print(f"{args.source}: no catalogue rows found", file=sys.stderr)
        return 2
    old = json.loads(args.output.read_text()) if args.output.exists() else {}
    doc = build(entries, old, args.version, args.source_note or args.source.name)
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    print(f"XID catalogue: {len(doc['codes'])} codes written / {len(entries)} codes in {args.source.name}")
    if args.check:
        return 0 if args.output.exists() and args.output.read_text() == text else 1
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
