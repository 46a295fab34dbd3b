"""Writes the reference pages docs/metrics.md and docs/report.md from the files that define them
(exporters/metrics.json, ccdiag/schema/report.schema.json), so the pages cannot drift from the
code: tests/test_docs.py fails when a page differs from what this script writes.

    python scripts/gen_docs.py           # rewrite both pages
    python scripts/gen_docs.py --check   # exit 1 if either page is out of date
"""

from __future__ import annotations

import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
MAX_DEPTH = 4


def metrics_page() -> str:
    metrics = json.loads((REPO / "exporters" / "metrics.json").read_text())["metrics"]
    out = ["# Metrics reference", "",
           "Every series `ccdiag daemon` serves and `ccdiag check --textfile` writes, from",
           "`exporters/metrics.json` (written by `scripts/gen_docs.py`; do not edit by hand). Labels join with",
           "dcgm-exporter (`gpu`, `UUID`, `pci_bus_id`) and node_exporter (`device`, `port`).", "",
           f"{len(metrics)} metrics.", "", "| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in metrics:
        labels = ", ".join(f"`{l}`" for l in m.get("labels", [])) or "-"
        text = m.get("help", "").replace("|", "\\|")
        out.append(f"| `{m['name']}` | {m['type']} | {labels} | {text} |")
    return "\n".join(out) + "\n"


def _resolve(node: dict, schema: dict) -> dict:
    if isinstance(node, dict) and "anyOf" in node:  # a definition or null: document the definition
        refs = [o for o in node["anyOf"] if "$ref" in o]
        if refs:
            node = {**refs[0], **{k: v for k, v in node.items() if k != "anyOf"}}
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"].split("/")[-1]
        node = {**schema["$defs"][ref], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type(node: dict) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in node["enum"])
    t = node.get("type", "")
    t = " or ".join(t) if isinstance(t, list) else t
    if t == "array" or "array" in str(t):
        item = node.get("items", {})
        ref = item.get("$ref", "").split("/")[-1]
        return f"{t} of {ref or item.get('type', 'values')}"
    return t or "any"


def _fields(node: dict, schema: dict, path: str, depth: int, rows: list) -> None:
    node = _resolve(node, schema)
    required = set(node.get("required", []))
    for name, sub in node.get("properties", {}).items():
        sub = _resolve(sub, schema)
        where = f"{path}.{name}" if path else name
        desc = (sub.get("description") or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{where}` | {_type(sub)} | {'yes' if name in required else ''} | {desc} |")
        target = sub.get("items", {}) if "array" in str(sub.get("type", "")) else sub
        if depth < MAX_DEPTH:
            _fields(target, schema, where + ("[]" if target is not sub else ""), depth + 1, rows)


def report_page() -> str:
    schema = json.loads((REPO / "ccdiag" / "schema" / "report.schema.json").read_text())
    rows: list[str] = []
    _fields(schema, schema, "", 1, rows)
    out = ["# JSON report reference", "",
           "The document `--json` prints on stdout (exactly one) and `--output FILE` writes, from",
           "`ccdiag/schema/report.schema.json` (written by `scripts/gen_docs.py`; do not edit by hand).",
           "Validate a report with any JSON Schema validator against that file; `schema_version` is 1.x, and",
           "a minor version only adds fields.", "",
           (schema.get("description") or "").strip(), "",
           "| field | type | required | meaning |", "|---|---|---|---|", *rows]
    return "\n".join(out) + "\n"


PAGES = {"docs/metrics.md": metrics_page, "docs/report.md": report_page}


def main(argv: list[str]) -> int:
    stale = []
    for rel, make in PAGES.items():
        path = REPO / rel
        text = make()
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(rel)
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python scripts/gen_docs.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
