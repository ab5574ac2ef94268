import ast

from engines.env.task_sources.mutations import mutations

SOURCE = '''"""A module."""

def f(xs, n=0):
    """Docstring."""
    total = 0
    for x in xs:
        if x > n and not x == 3:
            total += x - 1
    return total * 2


def g(a, b):
    print("h\u00e9")
    return a if a <= b else b
'''


def test_every_mutation_changes_one_spot_and_still_parses():
    found = mutations(SOURCE)
    kinds = {m.kind for m in found}
    assert {
        "operator",
        "comparison",
        "boolean_operator",
        "constant",
        "swapped_operands",
        "removed_not",
        "inverted_condition",
        "removed_statement",
    } <= kinds
    for m in found:
        mutant = m.apply(SOURCE)
        assert mutant != SOURCE
        ast.parse(mutant)
        # untouched text before the mutation point is byte-identical
        assert mutant.encode()[: m.start] == SOURCE.encode()[: m.start]


def test_examples_of_each_kind():
    by_kind = {}
    for m in mutations(SOURCE):
        by_kind.setdefault(m.kind, []).append(m.apply(SOURCE))
    assert any("x - 1" not in s and "x + 1" in s for s in by_kind["operator"])
    assert any("x <= n" in s for s in by_kind["comparison"])
    assert any("x > n or not x == 3" in s for s in by_kind["boolean_operator"])
    assert any("(x == 3)" in s and "not x == 3" not in s for s in by_kind["removed_not"])
    assert any("print(" not in s for s in by_kind["removed_statement"])
    assert any("1 - x" in s for s in by_kind["swapped_operands"])


def test_module_level_code_and_unparsable_files_are_left_alone():
    assert mutations("X = 1 + 2\n") == []
    assert mutations("def broken(:\n") == []


NESTED = """import functools

X = 1


class Box:
    size = 2

    @functools.cache
    def grow(self, n):
        def helper(k):
            return k + 1

        return helper(n) * self.size

    if True:
        def maybe(self):
            return 3


async def fetch():
    return 4
"""


def test_enclosing_name_is_the_innermost_qualified_scope():
    from engines.env.task_sources.mutations import enclosing_name

    lines = NESTED.splitlines()
    at = lambda text: lines.index(text) + 1  # noqa: E731
    assert enclosing_name(NESTED, at("X = 1")) is None  # module level
    assert enclosing_name(NESTED, at("    size = 2")) == "Box"
    assert enclosing_name(NESTED, at("    @functools.cache")) == "Box.grow"  # a decorator belongs to its def
    assert enclosing_name(NESTED, at("            return k + 1")) == "Box.grow.helper"
    assert enclosing_name(NESTED, at("        return helper(n) * self.size")) == "Box.grow"
    assert enclosing_name(NESTED, at("            return 3")) == "Box.maybe"  # inside an if of the class body
    assert enclosing_name(NESTED, at("    return 4")) == "fetch"
    assert enclosing_name("def broken(:\n", 1) is None
    # every mutation of the sample lies inside a named function
    assert {enclosing_name(SOURCE, m.line) for m in mutations(SOURCE)} == {"f", "g"}
