"""The list of formats the readers of this room read, as data (``formats.json``), and the words a
report uses to say which tool, version and format a file was read as.

Why a list: a reader written from samples reads the samples; one written from the tool's print code
reads what the tool prints. ``formats.json`` names every format (tool x version range x flags that
print distinct columns or lines) found in the tools' print code (``printed.json``, re-extracted by
``scripts/extract_bench_formats.py``), and says whether it is read or refused and why. Each parser
returns the ids of the formats it recognised (``format_ids``); coverage is formats read / formats
listed, per tool, and ``tests/test_benchparse_formats.py`` prints it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

FORMATS_FILE = "formats.json"


@dataclass(frozen=True)
class Format:
    id: str
    tool: str
    name: str
    versions: tuple[str, str]
    flags: str
    status: str  # "read" | "refused"
    why: str | None = None  # the reason a refused format is refused

    @property
    def read(self) -> bool:
        return self.status == "read"

    def describe(self) -> str:
        """``perftest 24.07.0-0.44..26.04.17, bandwidth table in MiB/sec (ib_*_bw (default units))``."""
        first, last = self.versions
        span = first if first == last else f"{first}..{last}"
        return f"{self.tool} {span}, {self.name} ({self.flags})"


def _load(name: str) -> dict:
    text = resources.files("ccdiag.benchparse").joinpath(name).read_text(encoding="utf-8")
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: not a JSON object")
    return doc


@functools.lru_cache(maxsize=1)
def formats() -> dict[str, Format]:
    """Every listed format by id (read once per process)."""
    doc = _load(FORMATS_FILE)
    out: dict[str, Format] = {}
    for tool, entry in doc["tools"].items():
        for f in entry["formats"]:
            v = f["versions"]
            out[f["id"]] = Format(f["id"], tool, f["name"], (str(v[0]), str(v[1])), f["flags"], f["status"], f.get("why"))
    return out


def describe(format_ids: tuple[str, ...] | list[str]) -> str | None:
    """The first id's description, then the other ids' names: what a report says it read the file as.
    None when no id is listed (a parser that named none)."""
    known = formats()
    listed = [known[i] for i in format_ids if i in known]
    if not listed:
        return None
    head = listed[0].describe()
    rest = "; ".join(f.name for f in listed[1:])
    return f"{head}" + (f"; {rest}" if rest else "")


def coverage() -> dict[str, tuple[int, int]]:
    """Per tool: (formats read, formats listed)."""
    out: dict[str, tuple[int, int]] = {}
    for f in formats().values():
        read, listed = out.get(f.tool, (0, 0))
        out[f.tool] = (read + f.read, listed + 1)
    return out


def markdown() -> str:
    """``docs/bench-formats.md``: every listed format, per tool, with its versions, flags, status and the
    real outputs that print it (``python -m ccdiag.benchparse.formats > docs/bench-formats.md``)."""
    doc = _load(FORMATS_FILE)
    cov = coverage()
    out = ["# The benchmark output formats `ccdiag bench import` reads", "",
           "Generated from `ccdiag/benchparse/formats.json` by `python -m ccdiag.benchparse.formats`; "
           "a test fails when this file and the list differ. " + doc["about"], ""]
    for what, where in doc.get("elsewhere", {}).items():
        out += [f"Not here: {what}: {where}.", ""]
    for tool, entry in doc["tools"].items():
        read, listed = cov[tool]
        out += [f"## {tool}: {read} / {listed} read", "", f"Print code: {entry['repository']}.", "",
                "| id | format | versions | flags | status | tested on |", "|---|---|---|---|---|---|"]
        for f in entry["formats"]:
            first, last = f["versions"]
            span = first if first == last else f"{first} .. {last}"
            status = "read: " + f.get("reads", "") if f["status"] == "read" else "refused: " + (f.get("why") or "")
            tested = ", ".join(f"`{r.rsplit('/', 1)[-1]}`" for r in f.get("real", [])) or (
                f"`{f['synth_fixture']}` (written from the print code)" if f.get("synth_fixture") else
                "SYNTHESIZED from the printed formats" if f.get("synth") else "none")
            cells = [f"`{f['id']}`", f["name"], span, f["flags"], status, tested]
            out.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
