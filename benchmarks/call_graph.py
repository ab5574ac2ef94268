"""A static call graph of the source, read with ast (nothing is imported): which project
functions each function can run.

A node is a function: `pkg.mod:name`, a method `pkg.mod:Class.name`, a nested function
`pkg.mod:outer.inner`. A function's edges are the project functions its body (with its
default arguments and lambdas) names and the walk can resolve:

- a module's functions and classes, through imports and packages' re-exports; a class
  stands for its constructor and context-manager methods;
- a module's attributes (`checkpoints.latest`), a class's (`LaneConfig.from_file`);
- methods and properties of `self` and of values whose class is known: from a
  parameter's or a field's annotation, a constructor call, a function's return
  annotation, a `with ... as` target, or an attribute assigned on `self`;
- the `main` of a module started as `-m module` (a child process, torchrun's ranks).

Calls through values of unknown class are not followed: the graph is a floor, not a
ceiling, and it is the same floor at every commit it is read at.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# What constructing a class, or entering it as a context manager, runs.
CONSTRUCTION = ("__init__", "__post_init__", "model_post_init", "__enter__", "__exit__", "__aenter__", "__aexit__")
Graph = dict[str, set[str]]


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    imports: dict[str, str] = field(default_factory=dict)  # bound name -> "mod" or "mod:name"
    defs: dict[str, ast.AST] = field(default_factory=dict)  # top-level def, class or assignment


@dataclass
class Scope:
    """Where a function's names resolve: its module, class, nested functions and known value types."""

    module: Module
    cls: str | None
    qualname: str
    nested: dict[str, str] = field(default_factory=dict)
    types: dict[str, set[str]] = field(default_factory=dict)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class Source:
    """The modules of `packages` under `root`, their definitions and the call graph."""

    def __init__(self, root: Path, packages: Iterable[str]) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                name = module_name(path, root)
                tree = ast.parse(path.read_text(), str(path))
                self.modules[name] = Module(name, path, tree, path.name == "__init__.py")
        for module in self.modules.values():
            self._index(module)
        self.classes: dict[str, ast.ClassDef] = {}
        self.functions: dict[str, tuple[ast.AST, str | None]] = {}  # qualname -> (def, enclosing function)
        for module in self.modules.values():
            for node in module.tree.body:
                self._define(node, module, None, "")
        self._scopes: dict[str, Scope] = {}
        self._attributes: dict[tuple[str, str], set[str]] = {}
        self.graph: Graph = {name: self._edges(name) for name in self.functions}

    # -- what each module defines and binds -------------------------------------------

    def _index(self, module: Module) -> None:
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                module.defs[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        module.defs[target.id] = node
        for node in ast.walk(module.tree):  # imports inside functions bind too
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    module.imports[bound] = alias.name if alias.asname else bound
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.name.split(".")
                    package = parts[: len(parts) - node.level + module.is_package]
                    base = ".".join([*package, *([base] if base else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    module.imports[alias.asname or alias.name] = (
                        full if full in self.modules else f"{base}:{alias.name}"
                    )

    def lookup(self, module_name: str, name: str, seen: frozenset[str] = frozenset()) -> str | None:
        """What `name` is in a module: a function, class or assignment (`mod:name`), a module, or None."""
        module = self.modules.get(module_name)
        if module is None or (key := f"{module_name}:{name}") in seen:
            return None
        if name in module.defs:
            return key
        if f"{module_name}.{name}" in self.modules:
            return f"{module_name}.{name}"
        target = module.imports.get(name)
        if target is None:
            return None
        if ":" not in target:
            return target if target in self.modules else None
        mod, sym = target.split(":")
        return self.lookup(mod, sym, seen | {key})

    # -- functions and classes ---------------------------------------------------------

    def _define(self, node: ast.AST, module: Module, parent: str | None, prefix: str) -> None:
        if isinstance(node, ast.ClassDef) and parent is None:
            qual = f"{module.name}:{prefix}{node.name}"
            self.classes[qual] = node
            for inner in node.body:
                self._define(inner, module, None, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            qual = f"{module.name}:{prefix}{node.name}"
            self.functions[qual] = (node, parent)
            for inner in _own_nodes(node):
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    self._define(inner, module, qual, f"{qual.split(':')[1]}.")

    def _class_of(self, qual: str) -> str | None:
        owner = qual.rsplit(".", 1)[0]
        return owner if owner in self.classes else None

    def bases(self, cls: str) -> Iterator[str]:
        """`cls` and its project base classes, nearest first."""
        todo, seen = deque([cls]), set()
        while todo:
            current = todo.popleft()
            if current in seen or current not in self.classes:
                continue
            seen.add(current)
            yield current
            module = current.split(":")[0]
            for base in self.classes[current].bases:
                found = self._resolve_static(base, module)
                if found:
                    todo.append(found)

    def _resolve_static(self, expr: ast.AST, module: str) -> str | None:
        if isinstance(expr, ast.Name):
            return self.lookup(module, expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self._resolve_static(expr.value, module)
            return self.lookup(owner, expr.attr) if owner in self.modules else None
        return None

    def member(self, cls: str, name: str) -> str | None:
        """The method (or property) `name` of `cls` or of a base class."""
        for current in self.bases(cls):
            if f"{current}.{name}" in self.functions:
                return f"{current}.{name}"
        return None

    def annotation_classes(self, expr: ast.AST | None, module: str) -> set[str]:
        """The project classes an annotation names (`X | None`, `list[X]`, `AsyncIterator[X]`, "X")."""
        if expr is None:
            return set()
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            try:
                expr = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                return set()
        found = set()
        for node in ast.walk(expr):
            if isinstance(node, ast.Name | ast.Attribute):
                target = self._resolve_static(node, module)
                if target in self.classes:
                    found.add(target)
        return found

    def attribute_types(self, cls: str, name: str) -> set[str]:
        """Classes of `instance.name`: a field's annotation, `self.name = ...` in a method, a property's return."""
        key = (cls, name)
        if key not in self._attributes:
            self._attributes[key] = set()  # against recursion through `self.name = f(self.name)`
            self._attributes[key] = self._attribute_types(cls, name)
        return self._attributes[key]

    def _attribute_types(self, cls: str, name: str) -> set[str]:
        found: set[str] = set()
        for current in self.bases(cls):
            module = current.split(":")[0]
            for node in self.classes[current].body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                    found |= self.annotation_classes(node.annotation, module)
            prop = self.functions.get(f"{current}.{name}")
            if prop is not None:
                found |= self.annotation_classes(getattr(prop[0], "returns", None), module)
            for method in self.classes[current].body:
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                    found |= self._self_assigned(method, f"{current}.{method.name}", name)
        return found

    def _self_assigned(self, method: ast.AST, qual: str, name: str) -> set[str]:
        found: set[str] = set()
        for node in _own_nodes(method):
            for target, value in _assigned(node):
                if _is_self_attribute(target, name):
                    found |= self.value_types(value, self.scope(qual))
        return found

    # -- the edges of one function -----------------------------------------------------

    def scope(self, qual: str) -> Scope:
        """The names a function's body sees, with the classes of its values (cached)."""
        if qual not in self._scopes:
            node, parent = self.functions[qual]
            self._scopes[qual] = Scope(self.modules[qual.split(":")[0]], None, qual)  # a placeholder against recursion
            self._scopes[qual] = self._typed_scope(node, qual, None if parent is None else self.scope(parent))
        return self._scopes[qual]

    def _typed_scope(self, node: ast.AST, qual: str, parent: Scope | None) -> Scope:
        module = self.modules[qual.split(":")[0]]
        cls = parent.cls if parent else self._class_of(qual)
        scope = Scope(module, cls, qual, dict(parent.nested) if parent else {}, dict(parent.types) if parent else {})
        for inner in _own_nodes(node):
            if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                scope.nested[inner.name] = f"{qual}.{inner.name}"
        args = node.args  # type: ignore[attr-defined]
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.annotation is not None:
                scope.types[arg.arg] = self.annotation_classes(arg.annotation, module.name)
        if scope.cls and args.args and args.args[0].arg in ("self", "cls"):
            scope.types[args.args[0].arg] = {scope.cls}
        for inner in _own_nodes(node):  # in source order: a later assignment sees an earlier one's type
            if isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                scope.types[inner.target.id] = self.annotation_classes(inner.annotation, module.name)
            elif isinstance(inner, ast.Assign):
                for target, value in _assigned(inner):
                    if isinstance(target, ast.Name):
                        scope.types[target.id] = self.value_types(value, scope)
            elif isinstance(inner, ast.withitem) and isinstance(inner.optional_vars, ast.Name):
                scope.types[inner.optional_vars.id] = self.value_types(inner.context_expr, scope)
        return scope

    def value_types(self, expr: ast.AST, scope: Scope) -> set[str]:
        """The project classes `expr`'s value may be an instance of."""
        if isinstance(expr, ast.Await):
            return self.value_types(expr.value, scope)
        if isinstance(expr, ast.Name):
            return set(scope.types.get(expr.id, ()))
        if isinstance(expr, ast.Attribute):
            return {t for cls in self.value_types(expr.value, scope) for t in self.attribute_types(cls, expr.attr)}
        if isinstance(expr, ast.Call):
            found: set[str] = set()
            for callee in self.refers_to(expr.func, scope):
                if callee in self.classes:
                    found.add(callee)
                elif callee in self.functions:
                    node = self.functions[callee][0]
                    found |= self.annotation_classes(getattr(node, "returns", None), callee.split(":")[0])
            return found
        return set()

    def refers_to(self, expr: ast.AST, scope: Scope) -> set[str]:
        """The project functions, classes, assignments or modules `expr` names."""
        if isinstance(expr, ast.Name):
            if expr.id in scope.nested:
                return {scope.nested[expr.id]}
            if expr.id in scope.types:
                return set()  # a local value, not a definition
            found = self.lookup(scope.module.name, expr.id)
            return {found} if found else set()
        if isinstance(expr, ast.Attribute):
            found = set()
            for owner in self.refers_to(expr.value, scope):
                if owner in self.modules:
                    target = self.lookup(owner, expr.attr)
                    found |= {target} if target else set()
                elif owner in self.classes and (method := self.member(owner, expr.attr)):
                    found.add(method)
            for cls in self.value_types(expr.value, scope):
                if method := self.member(cls, expr.attr):
                    found.add(method)
            return found
        return set()

    def _edges(self, qual: str) -> set[str]:
        node, scope = self.functions[qual][0], self.scope(qual)
        edges: set[str] = set()
        for inner in _own_nodes(node, with_defaults=True):
            if isinstance(inner, ast.Name | ast.Attribute) and isinstance(inner.ctx, ast.Load):
                for target in self.refers_to(inner, scope):
                    edges |= self._runs(target)
            elif isinstance(inner, ast.List | ast.Tuple):
                edges |= self._started_modules(inner)
        return edges

    def _runs(self, target: str) -> set[str]:
        """What naming `target` may run: a function; a class's construction; a module-level
        constant's `-m module` (a process it starts)."""
        if target in self.functions:
            return {target}
        if target in self.classes:
            return {m for name in CONSTRUCTION if (m := self.member(target, name))}
        module, _, name = target.partition(":")
        if name and module in self.modules:
            node = self.modules[module].defs.get(name)
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                return {
                    m
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.List | ast.Tuple)
                    for m in self._started_modules(n)
                }
        return set()

    def _started_modules(self, node: ast.List | ast.Tuple) -> set[str]:
        """`main` of each module a `[..., "-m", "module", ...]` argv starts."""
        values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        mains = {
            f"{m}:main" for flag, m in zip(values, values[1:], strict=False) if flag == "-m" and isinstance(m, str)
        }
        return {m for m in mains if m in self.functions}


def _is_self_attribute(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr == name
    )


def _assigned(node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) of an assignment, tuples paired element by element (`a, b = x, y`)."""
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        yield node.target, node.value
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                if len(target.elts) == len(node.value.elts):
                    yield from zip(target.elts, node.value.elts, strict=True)
            else:
                yield target, node.value


def _own_nodes(node: ast.AST, with_defaults: bool = False) -> Iterator[ast.AST]:
    """The nodes of a function's body in source order, not descending into nested
    functions or classes (their names, not their bodies, belong here)."""
    roots: list[ast.AST] = list(getattr(node, "body", []))
    if with_defaults:
        args = node.args  # type: ignore[attr-defined]
        roots = [*args.defaults, *[d for d in args.kw_defaults if d is not None], *roots]
    todo = deque(roots)
    while todo:
        current = todo.popleft()
        yield current
        if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        todo.extendleft(reversed(list(ast.iter_child_nodes(current))))


def reach(graph: Graph, start: Iterable[str]) -> set[str]:
    """Every node reachable from `start`, `start` included."""
    seen, todo = set(), deque(s for s in start if s in graph)
    while todo:
        current = todo.popleft()
        if current not in seen:
            seen.add(current)
            todo.extend(graph.get(current, ()))
    return seen


def reversed_graph(graph: Graph) -> Graph:
    back: Graph = {name: set() for name in graph}
    for src, targets in graph.items():
        for dst in targets:
            back.setdefault(dst, set()).add(src)
    return back
