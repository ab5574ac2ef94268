"""Renamed repository demonstrations: the hinted names replaced everywhere, consistently,
so each edit's OLD still stands in its view and nothing of the old names is left to recall."""

from __future__ import annotations

import random
import re

from engines.env.task_sources.copy_drills import installed_pool
from engines.env.task_sources.renamed_demos import hinted_names, renamed, renamed_share

STATEMENT = "Some tests of shop 1.0 fail.\nFAILED tests/test_shop.py::test_total\nThe bug is in Prices._total of shop/prices.py."
DEMO = [
    {"role": "user", "content": STATEMENT},
    {"role": "assistant", "content": "view shop/prices.py Prices._total"},
    {
        "role": "tool",
        "content": "12     def _total(self, stock):\n13         return sum(self.get(n) // 2 for n in stock)",
    },
    {"role": "assistant", "content": "change shop/prices.py Prices._total\n) //\n) *"},
    {"role": "tool", "content": "3 passed, 0 failed"},
]


def test_the_hint_names_the_package_module_class_and_function_but_not_dunders() -> None:
    assert hinted_names(STATEMENT) == ["shop", "prices", "Prices", "_total"]
    assert hinted_names("The bug is in src/pkg/__init__.py.") == ["pkg"]
    assert hinted_names("The bug is in Table.__getitem__ of tinydb/utils.py.") == ["tinydb", "utils", "Table"]
    assert hinted_names("Some tests fail.") == []


def test_a_renamed_demonstration_replaces_every_hinted_name_and_keeps_its_edits_valid() -> None:
    out = renamed(DEMO, random.Random(0))
    text = "\n".join(m["content"] for m in out)
    for old in ("shop/prices.py", "Prices", "def _total"):
        assert old not in text
    hint = out[0]["content"].splitlines()[-1]
    (function, path) = hint.removeprefix("The bug is in ").removesuffix(".").split(" of ")
    cls, name = function.split(".")
    assert cls[0].isupper() and "_" not in cls and name.startswith("_") and path.endswith(".py")
    assert out[1]["content"] == f"view {path} {function}"  # copied from the statement, in the action
    assert f"def {name}(self, stock)" in out[2]["content"]  # and in the code the view shows
    assert out[3]["content"].startswith(f"change {path} {function}\n")
    old = out[3]["content"].splitlines()[1]
    assert old in out[2]["content"]  # the edit's OLD still stands in its view
    assert "tests/test_shop.py" in text  # a longer identifier holding a name is left whole
    assert [m["role"] for m in out] == [m["role"] for m in DEMO]


def test_the_share_is_drawn_by_seed_and_a_statement_without_a_hint_is_left_as_it_is() -> None:
    plain = [{**DEMO[0], "content": "Some tests fail."}, *DEMO[1:]]
    assert renamed(plain, random.Random(0)) == plain
    demos = [DEMO] * 40
    once, again = renamed_share(demos, 0.5, seed=3), renamed_share(demos, 0.5, seed=3)
    assert once == again and 8 < sum(d != DEMO for d in once) < 32
    assert renamed_share(demos, 0.0, seed=3) == demos
    assert all(d != DEMO for d in renamed_share(demos, 1.0, seed=3))
    names = {d[1]["content"] for d in renamed_share(demos, 1.0, seed=3)}
    assert len(names) > 30  # made up afresh for each demonstration: nothing to recall


def test_made_up_names_join_given_words_or_else_the_installed_codes() -> None:
    view = renamed(DEMO, random.Random(0), ["alpha", "beta", "gamma"])[1]["content"]
    names = re.findall(r"[a-z]+", view.lower().removeprefix("view ").replace(".py", ""))
    assert names and all(re.fullmatch("(alpha|beta|gamma)+", n) for n in names)
    pool = set(installed_pool().words)
    assert len(pool) > 5_000  # renamed from about a hundred words, a model learned their joins, not copying
    functions = [renamed(DEMO, random.Random(s))[1]["content"].split()[2].split(".")[1] for s in range(50)]
    words = [w for f in functions for w in f.strip("_").split("_")]
    assert set(words) <= pool and len(set(words)) > 60
