"""Copy drills: the hint names what the answer views, the names are real ones of the
installed code, there are too many of them for any to repeat often enough to be recalled,
and the statements are as long as the builder's."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from engines.env.task_sources.copy_drills import (
    NamePool,
    copy_drills,
    drill_statement,
    installed_files,
    installed_pool,
    installed_sample,
)
from engines.env.task_sources.renamed_demos import hinted_names
from engines.protocol import parse_action

CODE = [
    "class LRUCache:\n    def __getitem__(self, key):\n        pass\n    def _evict_oldest(self):\n        pass\n",
    "def compile_mapping(schema):\n    pass\n\ndef test_compile_mapping():\n    pass\n\nclass RowIndex:\n    pass\n",
    "def merge_with(*dicts):\n    pass\ndef sliding_window(n, seq):\n    pass\n",
]


def test_the_pool_holds_the_codes_functions_classes_and_words_but_no_tests() -> None:
    pool = NamePool(CODE)
    assert pool.functions == ["__getitem__", "_evict_oldest", "compile_mapping", "merge_with", "sliding_window"]
    assert pool.classes == ["LRUCache", "RowIndex"]
    assert {"lru", "cache", "evict", "oldest", "row", "index", "sliding", "window"} <= set(pool.words)
    assert "class LRUCache:" in pool.lines and "pass" not in pool.lines  # code lines, not the shortest
    with pytest.raises(ValueError, match="copy drills need names"):
        NamePool(["def f(): pass"])


def test_each_drill_views_exactly_what_its_hint_names() -> None:
    pool = NamePool(CODE)
    drills = copy_drills(200, seed=0, code=CODE)
    for statement, answer in ((d[0]["content"], d[1]["content"]) for d in drills):
        assert statement.startswith("Some tests of ") and "\nFailing tests:\nFAILED tests/" in statement
        hint = statement.splitlines()[-1]
        scope, path = hint.removeprefix("The bug is in ").removesuffix(".").split(" of ")
        action = parse_action(answer)
        assert (action.tool, action.path, action.scope) == ("view", path, scope)
        assert path.endswith(".py") and hinted_names(statement)  # the shape renamed demonstrations parse
        *owner, function = scope.split(".")
        assert function in pool.functions and all(o in pool.classes for o in owner)  # real names, not made up
    assert copy_drills(5, seed=0, code=CODE) == drills[:5]  # drawn by seed
    assert copy_drills(5, seed=1, code=CODE) != drills[:5]


def test_a_hint_drill_is_the_hint_line_alone_and_a_short_one_a_single_failure_before_it() -> None:
    hints, shorts = (copy_drills(50, seed=0, code=CODE, statement=s) for s in ("hint", "short"))
    for drill in hints:
        statement, answer = drill[0]["content"], drill[1]["content"]
        assert "\n" not in statement and statement.startswith("The bug is in ")
        scope, path = statement.removeprefix("The bug is in ").removesuffix(".").split(" of ")
        assert answer == f"view {path} {scope}"
    for drill in shorts:
        lines = drill[0]["content"].splitlines()
        assert len(lines) == 4 and lines[2].startswith("FAILED tests/") and lines[3].startswith("The bug is in ")
    assert {d[1]["content"] for d in hints}.isdisjoint(d[1]["content"] for d in copy_drills(50, seed=1, code=CODE))


def test_the_installed_code_gives_too_many_names_to_recall() -> None:
    pool = installed_pool()  # the standard library and site-packages, tests left out
    assert len(pool.functions) > 20_000 and len(pool.classes) > 5_000
    assert not any(f.startswith("test") for f in pool.functions)
    drills = copy_drills(500, seed=0)
    counts = Counter(d[1]["content"] for d in drills)
    assert len(counts) == 500  # no answer twice: lowering the loss takes copying
    functions = Counter(parse_action(a).scope.split(".")[-1] for a in counts)
    assert functions.most_common(1)[0][1] <= 3


def test_a_sample_of_the_installed_code_is_whole_files_drawn_by_seed_up_to_its_size() -> None:
    sample = installed_sample(200_000, seed=0)
    assert 200_000 <= sum(map(len, sample)) < 200_000 + 60_000  # stops at the first file past the size
    texts = {path.read_text(encoding="utf-8", errors="ignore") for _, path in installed_files()}
    assert all(text in texts for text in sample)  # whole files, as installed
    assert installed_sample(200_000, seed=0) == sample and installed_sample(200_000, seed=1) != sample


def test_statements_hold_failures_and_output_of_real_code_up_to_the_builders_cut() -> None:
    pool = installed_pool()
    rng = random.Random(0)
    hint = "The bug is in Schema.validate of voluptuous/schema_builder.py."
    statements = [drill_statement(pool, rng, "voluptuous", "schema_builder", "validate", hint) for _ in range(200)]
    for text in statements:
        head, *lines = text.split("\n")
        assert head.startswith("Some tests of voluptuous ") and lines[0] == "Failing tests:" and lines[-1] == hint
        failed = [line for line in lines if line.startswith("FAILED ")]
        assert 1 <= len(failed) <= 8 and all(len(line) <= 80 for line in failed)
        assert failed[0].startswith("FAILED tests/test_schema_builder.py::test_validate - ")
        assert len(text) <= 1500 + 1 + len(hint)  # the builder's cut, then the hint
    lengths = sorted(len(t) for t in statements)
    assert lengths[20] < 600 < lengths[100] and lengths[-1] > 1400  # short and long, as the corpus's are
    assert sum("\nAssertion output:\nE   " in t for t in statements) > 150
