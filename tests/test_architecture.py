"""The package's shape: no import circles (counting imports inside functions and under TYPE_CHECKING), only the
commands import typer, and figures and renderers read typed results without reaching into the analyzers."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "atbprof"
EXTENSIONS = {"atbprof.importers._native"}  # compiled from native_src: a leaf, not the package it sits in


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ours that `name` (a module or a name inside one) lives in."""
    if name in EXTENSIONS:
        return None
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {o for a in node.names if (o := _owner(a.name))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if not base.startswith("atbprof"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                owner = full if full in MODULES else None if full in EXTENSIONS else _owner(base)
                if owner:
                    found.add(owner)
    found.discard(module)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    assert "atbprof.sweep.api" in GRAPH["atbprof.target"]  # a function-level import
    assert "atbprof.sweep.report" in GRAPH["atbprof.target"]  # under TYPE_CHECKING


def test_no_import_circles() -> None:
    assert _cycles() == []


def test_only_the_commands_import_typer() -> None:
    users = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "typer" or n.startswith("typer.") for n in names):
                users.add(module)
    assert users and all(m.startswith("atbprof.commands") for m in users), sorted(users)


def test_figures_and_pages_read_typed_results_only() -> None:
    """plots/ and render/ take results; of the analyzers they import only the modules that define results
    (`report`, `*_report`, `spec`), never the code that reads or analyses."""
    analyzers = ("atbprof.analyze", "atbprof.diff", "atbprof.sweep", "atbprof.predict", "atbprof.importers")
    result_modules = ("report", "spec")
    wrong = []
    for module, deps in GRAPH.items():
        if not module.startswith(("atbprof.plots", "atbprof.render")):
            continue
        for dep in deps:
            if dep.startswith(analyzers) and not dep.rpartition(".")[2].endswith(result_modules):
                wrong.append(f"{module} -> {dep}")
            # atbprof.target defines the typed targets figures are drawn from; it is the loading that is off limits
            if dep in ("atbprof.report", "atbprof.plot") or dep.startswith("atbprof.commands"):
                wrong.append(f"{module} -> {dep}")
    assert wrong == []
