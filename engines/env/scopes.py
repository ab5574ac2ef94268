"""Names of a file's functions and classes, as `view PATH NAME` and `change PATH NAME` take them.

A real module repeats names (`__init__` in every class, `get` in several), so a name
may be qualified by its enclosing classes and functions: `Class.method`,
`outer.inner`. A name resolves when exactly one definition's qualified name is it or
ends with `.NAME`; otherwise the refusal lists the candidates, each with its line, so
the next turn can name one. The one-definition case gives the same span and the same
messages as the unqualified lookup micro tasks were measured with.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from engines.env.parse import parse_module

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LISTED = 30  # definitions named in a refusal


@dataclass(frozen=True)
class Definition:
    qualname: str  # "Class.method", "outer.inner", "name"
    first: int  # 1-based line of `def` / `class` (decorators above it are not included)
    last: int  # 1-based last line of its body


def definitions(source: str) -> list[Definition]:
    """Every function and class of `source` in line order, with its qualified name. Raises SyntaxError."""
    found: list[Definition] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _DEFS):
                name = f"{prefix}{child.name}"
                found.append(Definition(name, child.lineno, child.end_lineno or child.lineno))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(parse_module(source), "")
    return sorted(found, key=lambda d: d.first)


def resolve(lines: list[str], name: str) -> Definition | str:
    """The one definition `name` names in `lines`, or why there is none (a message for the model)."""
    try:
        defs = definitions("\n".join(lines))
    except SyntaxError:
        return "the file does not parse, so its functions cannot be found; use a line number"
    exact = [d for d in defs if d.qualname == name]
    matches = exact or [d for d in defs if d.qualname.endswith("." + name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        names = sorted({d.qualname for d in defs})
        shown = ", ".join(names[:_LISTED]) + (f", ... ({len(names) - _LISTED} more)" if len(names) > _LISTED else "")
        return f"no function named {name!r}; functions: {shown or 'none'}"
    candidates = ", ".join(f"{d.qualname} (line {d.first})" for d in matches[:_LISTED])
    return f"{len(matches)} functions named {name!r}: {candidates}; name one of them as shown"


def innermost(lines: list[str], line: int) -> Definition | None:
    """The innermost function or class holding 1-based `line`, or None at module level."""
    try:
        return holding(definitions("\n".join(lines)), line)
    except SyntaxError:
        return None


def holding(defs: list[Definition], line: int) -> Definition | None:
    """The innermost of `defs` (a file's `definitions`) holding 1-based `line`, or None."""
    around = [d for d in defs if d.first <= line <= d.last]
    return max(around, key=lambda d: d.first) if around else None
