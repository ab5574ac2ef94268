"""No import circle inside engines/: every import counts, at the top of a module, inside
a function or under TYPE_CHECKING, so a circle cannot hide behind a late import."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.import_graph import circles
from tests.import_graph import import_graph as source_graph


def import_graph(package: str = "engines") -> dict[str, set[str]]:
    """module -> the modules of `package` it imports (a package counts as its __init__)."""
    return source_graph((package,))


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
