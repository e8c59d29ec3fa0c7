"""mybackend's import graph (issue 34): no module needs another imported
first, and no import circle holds modules together.

The graph is built with ``ast`` from each module's top-level imports (the
ones that run when the module is imported, in ``if``/``try`` blocks too,
but not under ``if TYPE_CHECKING:``, which never runs). A module imported
inside a function is not an edge: importing mybackend modules there is
what hid the circles, so it is refused outright; third-party imports in a
function (an optional dependency, a heavy one) stay allowed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.testing import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "mybackend"


def _dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every Python module of the package, by dotted name."""
    return {_dotted(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}


# The compiled extension (its stub stands for it): a leaf of the graph.
EXTENSIONS = frozenset(_dotted(path) for path in (ROOT / PACKAGE).rglob("*.pyi"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(statements: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module body runs."""
    for statement in statements:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            yield statement
        elif isinstance(statement, ast.If):
            if not _is_type_checking(statement.test):
                yield from _top_level_imports(statement.body)
            yield from _top_level_imports(statement.orelse)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, statement.orelse, statement.finalbody):
                yield from _top_level_imports(block)
            for handler in statement.handlers:
                yield from _top_level_imports(handler.body)
        elif isinstance(statement, ast.With):
            yield from _top_level_imports(statement.body)


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement asks for (``from a import b``: a.b and a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".")
        package = package if is_package else package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The package module ``name`` runs: itself, or the longest module prefix of it."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules its top-level imports run."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = set()
        for node in _top_level_imports(tree.body):
            names = _imported_names(node, module, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                # `from a import b` runs a.b when it is a module, else only a
                # (a's package __init__ runs first either way: not an edge,
                # or every module would sit in a circle with mybackend's).
                submodules = [n for n in names[:-1] if n in modules or n in EXTENSIONS]
                names = submodules or names[-1:]
            for name in names:
                if name in EXTENSIONS:
                    continue
                if name == PACKAGE or name.startswith(PACKAGE + "."):
                    target = _target(name, modules)
                    if target is not None and target != module:
                        edges.add(target)
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_import_graph_sees_the_pipeline() -> None:
    graph = import_graph()
    assert "mybackend.aot" in graph["mybackend.backend"]
    assert "mybackend.passes.pipeline" in graph["mybackend.aot"]
    assert "mybackend.lowering" in graph["mybackend.aot"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_import_circle_inside_mybackend() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, f"import circles: {cycles}"


def test_no_mybackend_import_inside_a_function() -> None:
    found = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                names = _imported_names(node, module, path.name == "__init__.py")
                if any(n == PACKAGE or n.startswith(PACKAGE + ".") for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"mybackend modules imported inside functions: {found}"


# Imports torch and the other third-party modules mybackend's modules import
# at their top level, then forks one child per module, which imports that
# module alone: a fresh interpreter as far as mybackend goes (no mybackend
# module is loaded in the parent), without paying torch's import each time.
_CHILD_SCRIPT = r"""
import importlib, json, os, sys, traceback
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # a third-party module that needs more than an import: the child will say
assert not any(m == "mybackend" or m.startswith("mybackend.") for m in sys.modules)
failures = {}
for module in json.loads(sys.argv[2]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        status = 0
        try:
            importlib.import_module(module)
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            status = 1
        os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        output = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failures[module] = output or f"exit status {status}"
print(json.dumps(failures))
"""


def _third_party_imports() -> list[str]:
    names = set()
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _top_level_imports(tree.body):
            for name in _imported_names(node, module, path.name == "__init__.py")[-1:]:
                if name and name != PACKAGE and not name.startswith(PACKAGE + "."):
                    names.add(name)
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    names.discard("__future__")
    return sorted(n for n in names if n.split(".")[0] != PACKAGE)


def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    modules = sorted(_modules())
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_SCRIPT, json.dumps(_third_party_imports()),
         json.dumps(modules)],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"{m}:\n{text}" for m, text in failures.items())
