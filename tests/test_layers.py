"""The rooms and the one-way flow of data: host -> probes -> topology -> (nccl) -> checks -> report/exporters.

Read from the source with ``ast``: each module's imports of other ccdiag modules (at any depth,
including imports inside functions) must point to its own room or to a room upstream of it, and
the modules that implement the model (topology, checks) never reach the command line or the
exporters. A cycle between rooms would fail here before it confuses a reader.
"""

from __future__ import annotations

import ast
import pathlib

import ccdiag
from ccdiag.core.rooms import MAY_IMPORT

PKG = pathlib.Path(ccdiag.__file__).resolve().parent

#: room -> the rooms it may import from (besides itself and ``core``): ccdiag/core/rooms.py
ALLOWED = {room: set(targets) for room, targets in MAY_IMPORT.items()}
#: modules at the top of the package, outside every room: the version, and ``python -m ccdiag``
#: (which only starts the command line)
TOP = {"ccdiag": "core", "ccdiag.__main__": "commands"}


def room_of(module: str) -> str | None:
    """The room of ``module``: its folder under ``ccdiag/`` (None outside ccdiag)."""
    if module in TOP:
        return TOP[module]
    parts = module.split(".")
    if parts[0] != "ccdiag" or len(parts) < 2:
        return None
    if parts[1] == "__version__":
        return "core"
    return parts[1]


def test_every_folder_is_a_room_and_no_module_is_loose():
    """Each sub-package is a room named in ALLOWED; no module sits loose beside them."""
    folders = {p.parent.name for p in PKG.glob("*/__init__.py")} | {"probes", "exporters"}
    assert folders == set(ALLOWED)
    loose = {p.stem for p in PKG.glob("*.py")} - {"__init__", "__main__"}
    assert loose == set()


def modules():
    import ccdiag.exporters
    import ccdiag.probes

    roots = {"ccdiag": PKG, "ccdiag.probes": pathlib.Path(ccdiag.probes.__path__[0]),
             "ccdiag.exporters": pathlib.Path(ccdiag.exporters.__path__[0])}
    seen = {}
    for prefix, base in roots.items():
        if not base.exists():
            continue
        for path in base.rglob("*.py"):
            if prefix == "ccdiag" and path.relative_to(base).parts[0] in ("probes", "exporters"):
                continue  # an installed tree holds them inside; they are walked under their own prefix
            rel = path.relative_to(base).with_suffix("")
            name = ".".join([prefix, *rel.parts])
            seen.setdefault(name.removesuffix(".__init__"), path)
    return seen


def from_module(node: ast.ImportFrom, path: pathlib.Path, name: str) -> str:
    """The module a ``from X import ...`` in module ``name`` (at ``path``) reads, relative ones resolved."""
    if not node.level:
        return node.module or ""
    base = name.split(".")[: -node.level] if not path.name == "__init__.py" else name.split(".")
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: pathlib.Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = from_module(node, path, name)
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("ccdiag.")}


def test_every_import_points_upstream():
    mods = modules()
    assert "ccdiag.topology.model" in mods and "ccdiag.checks.common" in mods
    wrong = []
    for name, path in sorted(mods.items()):
        src = room_of(name)
        if src is None:
            continue
        for target in sorted(imports_of(path, name)):
            dst = room_of(target)
            if dst in (None, "core", src) or target not in mods and dst not in ALLOWED:
                continue
            if dst not in ALLOWED.get(src, set()):
                wrong.append(f"{name} ({src}) imports {target} ({dst})")
    assert wrong == []


def test_the_topology_and_the_checks_never_reach_the_command_line_or_the_exporters():
    mods = modules()
    for name, path in mods.items():
        if room_of(name) in ("topology", "checks", "probes", "host", "nccl"):
            reached = {room_of(t) for t in imports_of(path, name)}
            assert not reached & {"commands", "exporters", "report", "run"}, name


def test_every_package_of_the_source_tree_is_in_the_wheel():
    """A sub-package missing from pyproject's list works in an editable install and is absent
    from a regular one; name each one there."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    repo = pathlib.Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(("ccdiag",) + p.parent.relative_to(repo / "ccdiag").parts).rstrip(".")
             for p in (repo / "ccdiag").rglob("__init__.py") if "__pycache__" not in p.parts}
    found |= {"ccdiag.probes", "ccdiag.exporters"}
    assert found - listed == set()


def test_tests_import_their_helpers_as_ci_runs_them():
    """CI runs the suite from tests/ against a regular install, where the repository root is not on
    sys.path: a helper imported as ``tests.cli_runner`` or ``tests.synth`` breaks collection there
    even though it works from the root. Helpers are imported by their own names."""
    import re
    pattern = re.compile(r"^\s*(from tests(\.| import)|import tests\b)", re.MULTILINE)
    tests = pathlib.Path(__file__).resolve().parent
    offenders = [str(path.relative_to(tests)) for path in sorted(tests.rglob("*.py"))
                 if "fixtures" not in path.parts and pattern.search(path.read_text(encoding="utf-8"))]
    assert offenders == [], f"import helpers by their own names (cli_runner, synth): {offenders}"


def module_level_imports_of(path: pathlib.Path, name: str, mods) -> set[str]:
    """The modules of ``mods`` that importing ``name`` imports at once: statements run at import time
    (the module's body, class bodies, ``try``/``if``/``with`` blocks), not function bodies, nor the
    ``if TYPE_CHECKING:`` branch. ``from package import submodule`` reads the submodule, not the
    package's ``__init__``; ``from module import name`` reads the module."""
    out: set[str] = set()

    def visit(stmts):
        for node in stmts:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                mod = from_module(node, path, name)
                out.update(f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            else:
                for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
                    visit(getattr(node, attr, None) or [])

    visit(ast.parse(path.read_text()).body)
    return {m for m in out if m in mods and m != name}


def test_no_module_imports_itself_back():
    """No import cycle among ccdiag's modules at import time: a cycle works or fails by which module
    happens to be imported first, and leaves its names half-defined to the other. What two modules
    both need goes into a lower module; an import hidden in a function to dodge a cycle is not the fix.
    A parent package's ``__init__`` importing its children is no cycle (Python imports it first)."""
    import networkx as nx

    mods = modules()
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in module_level_imports_of(path, name, mods))
    assert len(graph) > 100 and graph.number_of_edges() > 100  # the walk found the package
    cycles = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            cycle = [a for a, _ in nx.find_cycle(graph.subgraph(component))]
            cycles.append(" -> ".join([*cycle, cycle[0]]))
    assert cycles == [], "import cycles: " + "; ".join(sorted(cycles))


REPO = pathlib.Path(__file__).resolve().parent.parent


def test_every_code_folder_has_a_readme_that_says_what_it_may_import():
    """A reader entering a folder finds what it holds in its README.md; a room's README names the
    rooms it may import (``May import:``), as ``MAY_IMPORT`` has them."""
    from ccdiag.core.rooms import TOP_LEVEL_FOLDERS

    tops = [REPO / "ccdiag", *(REPO / name for name in TOP_LEVEL_FOLDERS)]
    folders = {p.parent for top in tops for p in top.rglob("*.py") if "__pycache__" not in p.parts}
    assert REPO / "ccdiag" / "core" in folders
    missing = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "README.md").is_file())
    assert missing == [], f"folders with code and no README.md: {missing}"
    unnamed = []
    for room, allowed in sorted(MAY_IMPORT.items()):
        folder = REPO / room if room in TOP_LEVEL_FOLDERS else REPO / "ccdiag" / room
        paragraphs = (folder / "README.md").read_text(encoding="utf-8").split("\n\n")
        said = next((p.partition("May import:")[2] for p in paragraphs if "May import:" in p), "")
        unnamed += [f"{room}: {other}" for other in sorted(allowed) if not said or f"`{other}`" not in said
                    and f"`ccdiag.{other}`" not in said]
        if not said:
            unnamed.append(f"{room}: no 'May import:'")
    assert unnamed == [], f"room READMEs that do not name what the room may import: {unnamed}"
