import ast

from engines.env.mutations import mutations

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
