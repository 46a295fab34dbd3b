"""Every format of ccdiag/benchparse/formats.json (derived from the tools' print code, re-extracted by
scripts/extract_bench_formats.py into printed.json) is read by its reader and recognised as itself, or
refused as the list says: on a real output where tests/fixtures holds one, else on a SYNTHESIZED file
tests/benchformats_synth.py renders from the printed format strings. Coverage (formats read / listed,
per tool) is measured here and printed in the test output."""

from __future__ import annotations

import ast
import json
import pathlib

import pytest
from benchformats_synth import c_unescape, cprintf, synthesized

from ccdiag.benchparse import BenchParseError, detect, parse_any
from ccdiag.benchparse import formats as F

TESTS = pathlib.Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
PKG = TESTS.parent / "ccdiag" / "benchparse"
DOC = json.loads((PKG / "formats.json").read_text(encoding="utf-8"))
PRINTED = json.loads((PKG / "printed.json").read_text(encoding="utf-8"))
ALL = [(tool, f) for tool, entry in DOC["tools"].items() for f in entry["formats"]]
SYNTH = synthesized()
#: the tool name detect() returns for each list
KIND = {"perftest": "perftest", "nvbandwidth": "nvbandwidth", "nccl-tests": "nccl-tests", "bandwidthTest": "bandwidthTest",
        "p2pBandwidthLatencyTest": "p2plat"}


def _within(tool: str, text: str, first: str, last: str) -> bool:
    refs = PRINTED["tools"][tool]["refs"]
    lo, hi = refs.index(first), refs.index(last)
    return any(refs.index(a) <= hi and refs.index(b) >= lo for a, b in PRINTED["tools"][tool]["strings"].get(text, []))


@pytest.mark.parametrize("tool,fmt", ALL, ids=[f["id"] for _, f in ALL])
def test_a_listed_format_is_printed_by_its_tool_in_its_versions(tool, fmt):
    assert fmt["status"] in ("read", "refused") and (fmt["status"] == "read" or fmt.get("why"))
    if not fmt.get("extracted", True):
        assert fmt.get("real"), f"{fmt['id']}: a format outside the extracted history needs a real output"
        return
    refs = PRINTED["tools"][tool]["refs"]
    assert fmt["versions"][0] in refs and fmt["versions"][1] in refs
    for line in fmt["lines"]:
        assert _within(tool, line, *fmt["versions"]), (fmt["id"], line)


def _outputs(fmt: dict) -> list[tuple[str, str]]:
    out = [(name, (FIXTURES / name).read_text(encoding="utf-8")) for name in fmt.get("real", [])]
    if fmt.get("synth_fixture"):
        out.append((fmt["synth_fixture"], (FIXTURES / fmt["synth_fixture"]).read_text(encoding="utf-8")))
    if fmt["id"] in SYNTH:
        out.append((f"SYNTHESIZED {fmt['id']}", SYNTH[fmt["id"]][1]))
    return out


def _outcome(tool: str, fmt: dict) -> tuple[bool, str]:
    """(as listed, why not): read and recognised as itself, or refused naming a line."""
    outputs = _outputs(fmt)
    if not outputs and fmt["status"] == "refused":
        return True, "refused format without output (a bare number): nothing to read"
    if not outputs:
        return False, "no real output and no template"
    for name, text in outputs:
        if fmt["status"] == "refused":
            try:
                detect(text) == KIND[tool] and parse_any(text)
            except BenchParseError as e:
                if "line " not in str(e):
                    return False, f"{name}: refusal without its line"
                continue
            return False, f"{name}: read, but the list says refused"
        if detect(text) != KIND[tool]:
            return False, f"{name}: detected as {detect(text)}"
        ids = getattr(parse_any(text), "format_ids", ())
        if fmt["id"] not in ids:
            return False, f"{name}: read as {ids}"
    return True, ""


@pytest.mark.parametrize("tool,fmt", ALL, ids=[f["id"] for _, f in ALL])
def test_each_format_is_read_as_itself_or_refused_as_listed(tool, fmt):
    ok, why = _outcome(tool, fmt)
    assert ok, f"{fmt['id']}: {why}"


def test_coverage_per_tool_is_measured_and_printed(capsys):
    measured: dict[str, list[int]] = {}
    for tool, fmt in ALL:
        ok, _ = _outcome(tool, fmt)
        row = measured.setdefault(tool, [0, 0, 0])
        row[0] += ok and fmt["status"] == "read"
        row[1] += 1
        row[2] += bool(fmt.get("real"))
    with capsys.disabled():
        print("\nbenchmark-output formats (formats.json): read / listed, with a real output")
        for tool, (read, listed, real) in measured.items():
            print(f"  {tool:26} {read:3} / {listed:3} read   {real:3} with a real output")
    listed = F.coverage()
    assert {t: (r, n) for t, (r, n, _) in measured.items()} == listed  # the list says what the readers do
    assert all(n >= 3 for _, n in listed.values())


def test_every_read_format_has_an_output_to_test_it_on():
    for _, fmt in ALL:
        if fmt["status"] == "read":
            assert _outputs(fmt), fmt["id"]


def test_synthesized_files_say_so():
    for fid, (_, text) in SYNTH.items():
        assert text.startswith("#ccdiag-synthesized: SYNTHESIZED ")


def test_the_renderer_follows_c_printf():
    assert cprintf(c_unescape(" %-7lu    %-10lu       %-7.2lf\\n"), [65536, 5000, 1.5]) == " 65536      5000             1.50   \n"
    assert cprintf("%*s|%6g|%%", [4, "ab", 1e6]) == "  ab| 1e+06|%"


def test_the_formats_page_is_the_list():
    """docs/bench-formats.md is generated from formats.json; regenerate it with
    ``python -m ccdiag.benchparse.formats > docs/bench-formats.md``."""
    page = (TESTS.parent / "docs" / "bench-formats.md").read_text(encoding="utf-8")
    assert page == F.markdown(), "docs/bench-formats.md is stale: python -m ccdiag.benchparse.formats > docs/bench-formats.md"


def test_describe_names_tool_version_and_format():
    text = F.describe(("perftest.bw.mib", "perftest.bw.bidir"))
    assert text.startswith("perftest 24.07.0-0.44..26.04.17, bandwidth table in MiB/sec")
    assert "bidirectional" in text and F.describe(()) is None


def _imports(path: pathlib.Path) -> set[str]:
    """The modules ``path`` imports: ``from P import m`` counts as P.m when that is a module of this
    room, else as P."""
    mods = {p.stem for p in PKG.glob("*.py")}
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ccdiag.benchparse"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if node.module == "ccdiag.benchparse" and alias.name in mods else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("ccdiag.benchparse")}
    return out


def test_the_room_has_no_import_cycle():
    """benchparse's __init__ imports its parsers; no parser may import the package (or anything that
    imports it back)."""
    graph = {}
    for p in PKG.glob("*.py"):
        name = "ccdiag.benchparse" if p.stem == "__init__" else f"ccdiag.benchparse.{p.stem}"
        graph[name] = _imports(p)
    seen: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if seen.get(n) == 1:
            raise AssertionError("import cycle: " + " -> ".join(path + [n]))
        if seen.get(n) == 2:
            return
        seen[n] = 1
        for m in graph.get(n, ()):
            visit(m, path + [n])
        seen[n] = 2

    for n in graph:
        visit(n, [])
