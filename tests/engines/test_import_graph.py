"""No import circle inside engines/: every import counts, at the top of a module, inside
a function or under TYPE_CHECKING, so a circle cannot hide behind a late import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str = "engines") -> dict[str, set[str]]:
    """module -> the modules of `package` it imports (a package counts as its __init__)."""
    files = {_module_name(p): p for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:  # relative: resolved against this module's package
                    pkg = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                    base = ".".join([*pkg, node.module])
                targets.add(base)
                targets.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_late_and_type_only_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    from y import z\n"
    names = {
        n.names[0].name if isinstance(n, ast.Import) else n.module
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert {"x", "y"} <= names


def test_engines_has_no_import_circle():
    graph = import_graph("engines")
    assert "engines.rollout.lane" in graph and graph["engines.rollout.lane"], "the walk found no imports"
    found = circles(graph)
    assert not found, "import circles in engines/ (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_the_inference_engine_has_at_most_fourteen_modules():
    """One room per concern (engines/inference/__init__.py lists them): modules and subpackages."""
    folder = Path("engines/inference")
    rooms = [p.name for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    assert len(rooms) <= 14, sorted(rooms)
    listed = (folder / "__init__.py").read_text()
    missing = [r for r in rooms if r != "__init__.py" and r.removesuffix(".py") not in listed]
    assert not missing, f"engines/inference/__init__.py does not list {missing}"
