"""The package's layers (docs/architecture.md, "Layers"): no module imports from a layer above
its own, and no two files import each other, directly or around a loop.

Imports are read from the source (``ast``), lazy imports inside functions included, and so
are calls of ``importlib.import_module`` and ``__import__`` whose module is a string literal
(``called_imports``); imports under ``if TYPE_CHECKING:`` are annotations only and are left out.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "offline_iaas"
BASE = {"__init__", "errors", "atomic", "logs", "modes", "network_streaming", "config",
        "config_checks", "config_numbers", "config_section_rules", "digests", "full_disk_exit",
        "closed_stdout", "stretches", "records", "manifest", "completeness",
        "binding", "rundir", "hooks", "physics", "resources", "lifetime", "summaries",
        "local_state", "summary_physics", "config_sections", "geometry", "mode_packages", "gps",
        "json_values", "bounded_read", "job_specs"}
TOP = {"cli", "cli_parser", "demo"}
LAYERS: tuple[tuple[str, ...], ...] = (
    ("base",), ("data", "search"), ("models",), ("repository",), ("rendezvous",), ("serve",),
    ("client",), ("report",), ("merge",), ("workflow",), ("bench",), ("sizing",), ("top",),
    ("science",),
)
"""Bottom to top; a module may import its own layer and those below. ``science/`` (the
built-in mode packages) is above everything: the core finds them by entry point and imports
none of them."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


IMPORT_CALLS = ("importlib.import_module", "import_module", "__import__")
"""Calls that import the module their first argument names."""


def called_imports(call: ast.Call) -> list[str]:
    """The modules a call of ``IMPORT_CALLS`` imports where its module is a string literal, not
    relative: the module, and for ``__import__`` each name of a literal ``fromlist`` below it
    (``import_graph`` keeps those that are modules). A name computed at run time (an f-string,
    a variable) cannot be read from the source and is not counted."""
    if ast.unparse(call.func) not in IMPORT_CALLS or not call.args:
        return []
    name = call.args[0]
    level = next((k.value for k in call.keywords if k.arg == "level"),
                 call.args[4] if len(call.args) > 4 else None)
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)
            and name.value and not name.value.startswith(".")) or (
            isinstance(level, ast.Constant) and level.value != 0):
        return []
    fromlist = next((k.value for k in call.keywords if k.arg == "fromlist"),
                    call.args[3] if len(call.args) > 3 else None)
    below = ([e.value for e in fromlist.elts if isinstance(e, ast.Constant)]
             if ast.unparse(call.func) == "__import__"
             and isinstance(fromlist, ast.Tuple | ast.List) else [])
    return [name.value, *(f"{name.value}.{b}" for b in below if isinstance(b, str))]


def _runtime_imports(tree: ast.AST) -> list[str]:
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from package import module`` depends on the module; ``from module import name``
            # on the module (import_graph keeps the names that are the package's modules)
            found.extend([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.Call):
            found.extend(called_imports(node))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def module_imports(name: str, source: str, modules: Iterable[str]) -> set[str]:
    """The ``modules`` (the package's) that module ``name``, of ``source``, imports."""
    imported = {m for m in _runtime_imports(ast.parse(source)) if m in modules}
    # a package counts only where nothing below it was named (``from pkg import module``
    # runs pkg/__init__, which Python resolves whatever it imports)
    return {m for m in imported - {name} if not any(o.startswith(m + ".") for o in imported)}


def import_graph() -> dict[str, set[str]]:
    """Module → the package's modules it imports."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: module_imports(name, path.read_text(), paths) for name, path in paths.items()}


def layer_of(module: str) -> int:
    parts = module.split(".")[1:]
    if parts and (PACKAGE / parts[0]).is_dir():  # in a folder (or the folder's __init__)
        group = parts[0]
    elif not parts or parts[0] in BASE:  # the package, or a file at its root
        group = "base"
    elif parts[0] in TOP:
        group = "top"
    else:
        raise AssertionError(f"{module}: a file at the package root in no layer")
    for index, layer in enumerate(LAYERS):
        if group in layer:
            return index
    raise AssertionError(f"{module}: folder {group!r} is in no layer")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} imports {b}" for a, deps in graph.items() for b in deps
                  if layer_of(b) > layer_of(a))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    assert upward_imports(import_graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_checks_catch_an_upward_import_and_a_cycle() -> None:  # negative controls
    graph = import_graph()
    graph["offline_iaas.data.frames"] = {"offline_iaas.merge.merge"}
    assert upward_imports(graph) == ["offline_iaas.data.frames imports offline_iaas.merge.merge"]
    graph["offline_iaas.merge.merge"].add("offline_iaas.data.frames")
    assert any({"offline_iaas.data.frames", "offline_iaas.merge.merge"} <= set(group)
               for group in cycles(graph))


IMPORTING_THE_MERGE = {
    "import_module": 'import importlib\n\n\ndef f():\n'
                     '    return importlib.import_module("offline_iaas.merge.merge")\n',
    "from importlib": 'from importlib import import_module\n\n'
                      'MERGE = import_module("offline_iaas.merge.merge")\n',
    "__import__": 'merge = __import__("offline_iaas.merge.merge").merge.merge\n',
    "__import__ fromlist": 'merge = __import__("offline_iaas.merge", None, None, ["merge"])\n',
}
"""Sources that import ``merge/merge.py`` by a call, with no import statement."""


@pytest.mark.parametrize("way", IMPORTING_THE_MERGE)
def test_an_import_by_a_call_breaking_a_layer_is_caught(way: str) -> None:
    graph = import_graph()
    frames = "offline_iaas.data.frames"
    graph[frames] = module_imports(frames, IMPORTING_THE_MERGE[way], graph)
    assert upward_imports(graph) == [f"{frames} imports offline_iaas.merge.merge"]
    # the controls: the same source with the module named at run time, or relative, or not
    # imported (a string that is not a call's module)
    for control in (IMPORTING_THE_MERGE[way].replace('"offline_iaas.merge', 'PREFIX + "'),
                    IMPORTING_THE_MERGE[way].replace('"offline_iaas.merge', '".merge'),
                    'NAME = "offline_iaas.merge.merge"\n'):
        graph[frames] = module_imports(frames, control, graph)
        assert upward_imports(graph) == [], control


def data_modules_reading_the_search(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The ``data/`` modules other than ``synth`` (which bakes the search's injections into
    its frames) that import ``search/``: what every mode reads must not need the search."""
    return {name: sorted(m for m in imported if m.startswith("offline_iaas.search."))
            for name, imported in graph.items()
            if name.startswith("offline_iaas.data.") and name != "offline_iaas.data.synth"
            and any(m.startswith("offline_iaas.search.") for m in imported)}


def test_what_every_mode_reads_does_not_need_the_search() -> None:
    graph = import_graph()
    assert data_modules_reading_the_search(graph) == {}
    # the negative control: preflight reading the injection list again
    graph["offline_iaas.data.preflight"].add("offline_iaas.search.injection_list")
    assert data_modules_reading_the_search(graph) == {
        "offline_iaas.data.preflight": ["offline_iaas.search.injection_list"]}


def mode_name_comparisons(source: str) -> list[int]:
    """Lines of ``source`` that compare a mode's name (``model.mode``, ``mode.name``,
    ``mode_name``) with a string or a collection of strings: code must ask the mode's record
    (``modes.Mode``) instead, so that a mode package's mode runs the same code."""
    def literal(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(ast.unparse(o).endswith(("model.mode", "mode.name", "mode_name"))
                   for o in operands) and any(literal(o) for o in operands):
                found.append(node.lineno)
    return found


def test_no_module_compares_a_mode_name() -> None:
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := mode_name_comparisons(path.read_text()))}
    assert found == {}
    # the negative controls
    assert mode_name_comparisons('if config.model.mode == "bbhnet":\n    pass\n') == [1]
    assert mode_name_comparisons('x = run.mode.name in ("e2e", "deepclean")\n') == [1]
    assert mode_name_comparisons("x = config.mode.triggers == True\n") == []


TESTS = Path(__file__).resolve().parent
ORACLES = ("oracle", "sensitivity_oracle", "search_spans")
"""The test oracles: they recompute what the project writes and must share no code with it."""


def project_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """The ``offline_iaas`` modules that ``tests/<module>.py`` imports anywhere (in functions
    and under ``TYPE_CHECKING`` too, by a call with a literal name too: ``called_imports``),
    through the ``tests.*`` modules it imports as well."""
    seen = set() if seen is None else seen
    seen.add(module)
    found = set()
    for node in ast.walk(ast.parse((TESTS / f"{module}.py").read_text())):
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                 else [a.name for a in node.names] if isinstance(node, ast.Import)
                 else called_imports(node) if isinstance(node, ast.Call) else [])
        if isinstance(node, ast.ImportFrom) and node.module in ("tests", None):
            names = [f"tests.{a.name}" for a in node.names]  # from tests import x; from . import x
        for name in names:
            if name.split(".")[0] == "offline_iaas":
                found.add(name)
            elif name.startswith("tests.") and name[len("tests."):] not in seen:
                found |= project_imports(name[len("tests."):], seen)
    return found


def test_the_test_oracles_import_nothing_of_the_project(tmp_path: Path,
                                                        monkeypatch) -> None:
    assert {name: project_imports(name) for name in ORACLES} == {name: set() for name in ORACLES}
    # the negative control: an oracle importing the project's ASD in a function, through a
    # module of tests/ it imports
    (tmp_path / "bent.py").write_text("from tests import helper_of_bent\n")
    (tmp_path / "helper_of_bent.py").write_text(
        "def f():\n    from offline_iaas.physics import asd_ratio\n    return asd_ratio\n")
    monkeypatch.setattr(sys.modules[__name__], "TESTS", tmp_path)
    assert project_imports("bent") == {"offline_iaas.physics"}
    # and by calls: importlib's of the project, __import__'s of a module of tests/ that imports
    # it; the control names the module at run time
    (tmp_path / "bent_by_call.py").write_text(
        'import importlib\n\n\ndef f():\n'
        '    return importlib.import_module("offline_iaas.gps").to_gps\n')
    (tmp_path / "bent_through.py").write_text('helper = __import__("tests.helper_of_bent")\n')
    (tmp_path / "straight.py").write_text(
        'import importlib\n\n\ndef f(name):\n    return importlib.import_module(name)\n')
    assert {name: project_imports(name) for name in ("bent_by_call", "bent_through", "straight")
            } == {"bent_by_call": {"offline_iaas.gps"}, "bent_through": {"offline_iaas.physics"},
                  "straight": set()}
