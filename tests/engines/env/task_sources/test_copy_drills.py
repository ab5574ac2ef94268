"""Copy drills: the hint names what the answer views, names are drawn from the training
code's own and new joins of their words, and none repeats often enough to be recalled."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from engines.env.task_sources.copy_drills import NamePool, copy_drills
from engines.env.task_sources.renamed_demos import hinted_names
from engines.protocol import parse_action

CODE = [
    "class LRUCache:\n    def __getitem__(self, key):\n        pass\n    def _evict_oldest(self):\n        pass\n",
    "def compile_mapping(schema):\n    pass\n\ndef test_compile_mapping():\n    pass\n\nclass RowIndex:\n    pass\n",
    "def merge_with(*dicts):\n    pass\ndef sliding_window(n, seq):\n    pass\n",
]


def test_the_pool_holds_the_codes_names_and_their_words_but_no_dunders_or_tests() -> None:
    pool = NamePool(CODE)
    assert pool.functions == ["_evict_oldest", "compile_mapping", "merge_with", "sliding_window"]
    assert pool.classes == ["LRUCache", "RowIndex"]
    assert {"lru", "cache", "evict", "oldest", "row", "index", "sliding", "window"} <= set(pool.words)
    with pytest.raises(ValueError, match="copy drills need names"):
        NamePool(["def f(): pass"])


def test_each_drill_views_exactly_what_its_hint_names() -> None:
    drills = copy_drills(200, seed=0, code=CODE)
    for statement, answer in ((d[0]["content"], d[1]["content"]) for d in drills):
        assert statement.startswith("Some tests of ") and "\nFailing tests:\nFAILED tests/" in statement
        hint = statement.splitlines()[-1]
        scope, path = hint.removeprefix("The bug is in ").removesuffix(".").split(" of ")
        action = parse_action(answer)
        assert (action.tool, action.path, action.scope) == ("view", path, scope)
        assert path.endswith(".py") and hinted_names(statement)  # the shape renamed demonstrations parse
    # Made up afresh: the answers seldom repeat, so a model lowers its loss only by copying.
    counts = Counter(d[1]["content"] for d in drills)
    assert len(counts) > 190 and counts.most_common(1)[0][1] <= 2
    assert copy_drills(5, seed=0, code=CODE) == drills[:5]  # drawn by seed
    assert copy_drills(5, seed=1, code=CODE) != drills[:5]


def test_names_are_the_codes_own_now_and_then_else_joined_from_its_words_and_random_letters() -> None:
    pool, rng = NamePool(CODE), random.Random(0)
    functions = [pool.function(rng) for _ in range(500)]
    own = [f for f in functions if f in pool.functions]
    assert 50 < len(own) < 150
    words = [w for f in functions if f not in pool.functions for w in f.strip("_").split("_")]
    assert all(w.isalpha() and w.islower() for w in words)
    from_code = [w for w in words if w in pool.words]
    assert 0.15 * len(words) < len(from_code) < 0.5 * len(words)  # the rest: letters no code holds
