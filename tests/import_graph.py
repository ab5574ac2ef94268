"""The source's import graph, read with ast, and the rules it keeps: no import circle,
and the layering (flows -> tasks -> engines -> storage; the trainer lane never imports
the rollout lane, at any layer; no generic env module imports a task source, and the
sandbox imports only the env's foundations).

Every import counts: at the top of a module, inside a function or under
TYPE_CHECKING, so neither a circle nor a layering breach can hide behind a late import.
The rules take a plain graph (module -> modules it imports), so a test can feed them
a violating one."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Outermost first: a module may import its own layer or one further down, never up.
LAYERS = ("benchmarks", "flows", "tasks", "engines", "storage")
SOURCE = LAYERS
Graph = dict[str, set[str]]
Breach = tuple[str, str, str]  # (importer, imported, the rule it breaks)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(tree: ast.AST, name: str, is_package: bool, files: Iterable[str]) -> set[str]:
    """The modules an already parsed module imports, relative imports resolved."""
    known = set(files)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: against this module's package (a package is its own)
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*package, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return {t for t in found if t in known and t != name}


def import_graph(packages: Iterable[str] = SOURCE, root: Path = ROOT) -> Graph:
    """module -> the modules of `packages` it imports (a package counts as its __init__)."""
    files = {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    return {
        name: _targets(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", files)
        for name, path in files.items()
    }


def circles(graph: Graph) -> list[list[str]]:
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
        for w in sorted(graph.get(v, ())):
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


def _layer(module: str) -> int | None:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# Each lane at every layer: its flow, its Prefect tasks, its engine. They meet in the
# lake (engines/handoff.py, engines/step_metrics.py), not through each other's modules.
TRAINER_LANE = ("flows.trainer_lane", "flows.trainer_ranks", "tasks.trainer", "engines.trainer")
ROLLOUT_LANE = ("flows.rollout_lane", "tasks.rollout", "engines.rollout")


def in_lane(module: str, lane: tuple[str, ...]) -> bool:
    return any(_in(module, package) for package in lane)


TASK_SOURCES = "engines.env.task_sources"  # micro tasks, real projects, imports, corpora
SANDBOX = "engines.env.sandbox"
# What the sandbox may use of the env beside itself: plain data and file handling, never
# the session, the grader or a task family.
SANDBOX_FOUNDATIONS = tuple(f"engines.env.{m}" for m in ("config", "errors", "types", "parse", "workspace"))


def env_breach(src: str, dst: str) -> str | None:
    """Why the import `src -> dst` breaks the env's neighbourhoods, or None."""
    if _in(src, "engines.env") and not _in(src, TASK_SOURCES) and _in(dst, TASK_SOURCES):
        return "a generic env module imports a task source"
    allowed = (SANDBOX, *SANDBOX_FOUNDATIONS)
    if _in(src, SANDBOX) and _in(dst, "engines.env") and dst != "engines.env" and not any(_in(dst, a) for a in allowed):
        return "the sandbox imports the env beyond its foundations"
    return None


def reached(graph: Graph, start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def breaches(graph: Graph) -> list[Breach]:
    """Every import that breaks a layering rule, sorted."""
    found: list[Breach] = []
    for src, targets in graph.items():
        for dst in targets:
            low, high = _layer(src), _layer(dst)
            if low is not None and high is not None and high < low:
                found.append((src, dst, f"{LAYERS[low]} imports {LAYERS[high]}, a layer above it"))
            if in_lane(src, TRAINER_LANE) and in_lane(dst, ROLLOUT_LANE):
                found.append((src, dst, "the trainer lane imports the rollout lane (lanes meet in the lake)"))
            if why := env_breach(src, dst):
                found.append((src, dst, why))
    return sorted(found)
