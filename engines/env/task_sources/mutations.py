"""AST mutations of real source files, SWE-smith style, spliced into the original text.

Each `Mutation` changes one node and leaves every other byte of the file as it
was, so the gold patch (mutant -> original) is a one- or few-line diff. Kinds:
operator swap, comparison flip, boolean operator swap, constant +-1, swapped
operands, removed `not`, inverted `if` condition, removed statement. Only code
inside functions is mutated (module-level code rarely fails a test in a useful way).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from engines.env.parse import parse_module

_ARITH = {ast.Add: "-", ast.Sub: "+", ast.Mult: "//", ast.FloorDiv: "*", ast.Mod: "//", ast.BitAnd: "|", ast.BitOr: "&"}
_ARITH_SYM = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.BitAnd: "&",
    ast.BitOr: "|",
}
_CMP = {
    ast.Lt: ("<", ">="),
    ast.LtE: ("<=", ">"),
    ast.Gt: (">", "<="),
    ast.GtE: (">=", "<"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
_ATOMS = (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)


@dataclass(frozen=True)
class Mutation:
    kind: str
    line: int  # 1-based first line touched
    start: int  # character offsets into the file text
    end: int
    replacement: str

    def apply(self, text: str) -> str:
        data = text.encode()  # offsets are UTF-8 byte offsets, like ast's columns
        return (data[: self.start] + self.replacement.encode() + data[self.end :]).decode()


def mutations(text: str) -> list[Mutation]:
    """Every mutation this module knows for `text` (empty when it does not parse)."""
    try:
        tree = parse_module(text)
    except SyntaxError:
        return []
    data = text.encode()
    offsets = _line_offsets(data)
    out: list[Mutation] = []
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in _walk_body(func):
                out.extend(_node_mutations(node, data, offsets))
    # A nested function is walked from its parent and from itself: keep one of each.
    return sorted(set(out), key=lambda m: (m.start, m.kind, m.replacement))


def enclosing_name(text: str, line: int) -> str | None:
    """Qualified name of the innermost function or class around 1-based `line` of `text`
    (`Class.method`, `outer.inner`), or None at module level or when `text` does not
    parse. A hint may name where the bug is without giving the fix; it is computed on
    the original source, whose line numbers the mutant shares.
    Decorator lines count as part of the definition they decorate."""
    try:
        tree = parse_module(text)
    except SyntaxError:
        return None
    names: list[str] = []
    node = _scope_at(tree, line)
    while node is not None:
        names.append(node.name)
        node = _scope_at(node, line)
    return ".".join(names) or None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def function_starts(text: str) -> list[int | None]:
    """For each line of `text` (index = line - 1), the first line of the innermost
    function whose definition holds it (its first decorator's line, as `co_firstlineno`
    gives it), or None outside every function; [] when `text` does not parse. The code of
    that function must run for a mutation on the line to change anything (builder.py
    skips mutants of functions the suite never calls). One parse per file."""
    try:
        tree = parse_module(text)
    except SyntaxError:
        return []
    lines: list[int | None] = [None] * (text.count("\n") + 1)
    # ast.walk goes outer before inner, so an inner function overwrites its lines last.
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            for i in range(first - 1, node.end_lineno or node.lineno):
                lines[i] = first
    return lines


def _scope_at(scope: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None:
    """The definition around `line` directly below `scope`, possibly inside compound
    statements (if, for, with, try), without looking into other definitions."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            decorators = [d.lineno for d in node.decorator_list]
            if min([node.lineno, *decorators]) <= line <= (node.end_lineno or node.lineno):
                return node
            continue
        stack.extend(ast.iter_child_nodes(node))
    return None


def _walk_body(func: ast.AST) -> Iterator[ast.AST]:
    yield func  # its own body: statements that may be removed
    for stmt in func.body:
        yield from ast.walk(stmt)


def _node_mutations(node: ast.AST, data: bytes, off: list[int]) -> Iterator[Mutation]:
    pos = lambda n: off[n.lineno - 1] + n.col_offset  # noqa: E731
    end = lambda n: off[n.end_lineno - 1] + n.end_col_offset  # noqa: E731
    text = _Text(data)
    seg = lambda n: text[pos(n) : end(n)]  # noqa: E731
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        gap = text[end(node.left) : pos(node.right)]
        sym = _ARITH_SYM[type(node.op)]
        if gap.count(sym) == 1:
            yield Mutation(
                "operator", node.lineno, end(node.left), pos(node.right), gap.replace(sym, _ARITH[type(node.op)])
            )
        if isinstance(node.op, (ast.Sub, ast.FloorDiv, ast.Mod)):
            yield Mutation(
                "swapped_operands", node.lineno, pos(node), end(node), f"{seg(node.right)}{gap}{seg(node.left)}"
            )
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        gap = text[end(node.left) : pos(node.comparators[0])]
        old, new = _CMP[type(node.ops[0])]
        if gap.strip() == old:
            yield Mutation("comparison", node.lineno, end(node.left), pos(node.comparators[0]), gap.replace(old, new))
        if type(node.ops[0]) in (ast.Lt, ast.LtE, ast.Gt, ast.GtE):
            yield Mutation(
                "swapped_operands",
                node.lineno,
                pos(node),
                end(node),
                f"{seg(node.comparators[0])}{gap}{seg(node.left)}",
            )
    elif isinstance(node, ast.BoolOp) and len(node.values) >= 2:
        gap = text[end(node.values[0]) : pos(node.values[1])]
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        if gap.strip() == old:
            yield Mutation(
                "boolean_operator",
                node.values[0].end_lineno,
                end(node.values[0]),
                pos(node.values[1]),
                gap.replace(old, new),
            )
    elif isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 10**6:
        yield Mutation("constant", node.lineno, pos(node), end(node), str(node.value + (1 if node.value <= 1 else -1)))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = seg(node.operand)
        yield Mutation(
            "removed_not",
            node.lineno,
            pos(node),
            end(node),
            inner if isinstance(node.operand, _ATOMS) else f"({inner})",
        )
    if isinstance(node, (ast.If, ast.While)) and not isinstance(node.test, ast.UnaryOp):
        yield Mutation("inverted_condition", node.lineno, pos(node.test), end(node.test), f"not ({seg(node.test)})")
    for field in ("body", "orelse"):
        body = getattr(node, field, None)
        if isinstance(body, list) and len(body) > 1:
            for stmt in body:
                if isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.Return, ast.If)) and not _is_docstring(
                    stmt
                ):
                    start, stop = (
                        off[stmt.lineno - 1],
                        off[stmt.end_lineno] if stmt.end_lineno < len(off) else len(data),
                    )
                    if text[start : pos(stmt)].strip() == "" and text[end(stmt) : stop].strip() == "":
                        yield Mutation("removed_statement", stmt.lineno, start, stop, "")


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


class _Text:
    """Slices of UTF-8 bytes by byte offsets, returned as text."""

    def __init__(self, data: bytes):
        self.data = data

    def __getitem__(self, s: slice) -> str:
        return self.data[s].decode()


def _line_offsets(data: bytes) -> list[int]:
    """Byte offset of the start of each line (ast columns are UTF-8 byte offsets)."""
    offsets, total = [], 0
    for line in data.splitlines(keepends=True):
        offsets.append(total)
        total += len(line)
    return offsets
