"""Copy drills: the hint names what the answer views, the names are real ones of the
installed code, and there are too many of them for any to repeat often enough to be recalled."""

from __future__ import annotations

from collections import Counter

import pytest

from engines.env.task_sources.copy_drills import NamePool, copy_drills, installed_code
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


def test_the_installed_code_gives_too_many_names_to_recall() -> None:
    pool = NamePool(installed_code())  # the standard library and site-packages, tests left out
    assert len(pool.functions) > 20_000 and len(pool.classes) > 5_000
    assert not any(f.startswith("test") for f in pool.functions)
    drills = copy_drills(500, seed=0)
    counts = Counter(d[1]["content"] for d in drills)
    assert len(counts) == 500  # no answer twice: lowering the loss takes copying
    functions = Counter(parse_action(a).scope.split(".")[-1] for a in counts)
    assert functions.most_common(1)[0][1] <= 3
