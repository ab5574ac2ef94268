"""A small real-shaped Python project for the corpus tests: a package whose classes repeat
method names (`get` twice, `__init__` twice), a pytest suite, and tasks built on it the
way the builder and a SWE-bench import build theirs (a snapshot folder, a bug patch, a
test command and log parser, FAIL_TO_PASS / PASS_TO_PASS from a real pytest run).
"""

from __future__ import annotations

import json
from pathlib import Path

from engines.env.task_sources.builder import LOG_PARSER, test_command
from engines.env.types import Task
from engines.env.workspace import tree_hash, unified_diff

SOURCE = "shop/inventory.py"
TESTS = "tests/test_inventory.py"
HIDDEN_FILE = "tests/test_unpriced.py"
VISIBLE_TESTS = (
    "test_add_counts_up",
    "test_get_of_a_missing_item_is_zero",
    "test_price_of_an_item",
    "test_total_of_the_stock",
)

INVENTORY = '''"""Stock and prices of a small shop."""


class Stock:
    def __init__(self):
        self.items = {}

    def add(self, name, count):
        self.items[name] = self.items.get(name, 0) + count
        return self.items[name]

    def get(self, name):
        return self.items.get(name, 0)


class Prices:
    def __init__(self):
        self.table = {}

    def set(self, name, price):
        self.table[name] = price

    def get(self, name):
        return self.table.get(name, 0)

    def total(self, stock):
        return sum(self.get(n) * stock.get(n) for n in stock.items)
'''

TEST_INVENTORY = """from shop.inventory import Prices, Stock


def test_add_counts_up():
    s = Stock()
    s.add("pear", 2)
    assert s.add("pear", 3) == 5


def test_get_of_a_missing_item_is_zero():
    assert Stock().get("fig") == 0


def test_price_of_an_item():
    p = Prices()
    p.set("pear", 4)
    assert p.get("pear") == 4


def test_total_of_the_stock():
    s, p = Stock(), Prices()
    s.add("pear", 2)
    p.set("pear", 3)
    assert p.total(s) == 6
"""

# A test the hidden test_patch of the imported task adds (SWE-bench keeps it from the agent).
HIDDEN_TEST = """from shop.inventory import Prices, Stock


def test_an_item_without_a_price_costs_nothing():
    s, p = Stock(), Prices()
    s.add("pear", 1)
    s.add("fig", 2)
    p.set("pear", 5)
    assert p.total(s) == 5
"""

# Two mutations in two methods: a fix needs an edit in each.
ADD_BUG = ("+ count", "- count")
TOTAL_BUG = ("self.get(n) * stock.get(n)", "self.get(n) + stock.get(n)")
# Caught only by the hidden test: every visible test prices each item it stocks.
PRICE_BUG = ("self.table.get(name, 0)", "self.table.get(name, 1)")


def write_project(root: Path) -> Path:
    """The clean project at `root`."""
    (root / "shop").mkdir(parents=True, exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / SOURCE).write_text(INVENTORY)
    (root / TESTS).write_text(TEST_INVENTORY)
    return root


def _task(
    root: Path,
    ident: str,
    mutant: str,
    f2p: list[str],
    p2p: list[str],
    test_patch: str = "",
    function: str = "Stock.add",
) -> Task:
    statement = (
        "Prices.total charges for stocked items that have no price; they should cost nothing."
        if test_patch
        else "Some tests of shop 1.0 fail. Fix the source code so they pass.\nFailing tests:\n"
        + "\n".join(f"FAILED {t}" for t in f2p)
    )
    bug = unified_diff({SOURCE: INVENTORY.encode()}, {SOURCE: mutant.encode()})
    gold = unified_diff({SOURCE: mutant.encode()}, {SOURCE: INVENTORY.encode()})
    meta = {"bug_patch": bug, "file": SOURCE, "function": function, "test_files": [TESTS]}
    return Task(
        instance_id=ident,
        repo="shop",
        version="1.0",
        base_commit=tree_hash({SOURCE: mutant.encode()}),
        problem_statement=statement,
        patch=gold,
        test_patch=test_patch,
        FAIL_TO_PASS=tuple(f2p),
        PASS_TO_PASS=tuple(p2p),
        test_cmd=test_command(root),
        log_parser=LOG_PARSER,
        env_name="swe",
        split="train",
        snapshot_uri=str(root),
        metadata=json.dumps(meta),
    )


def two_edit_task(root: Path) -> Task:
    """A task whose fix needs two edits (Stock.add and Prices.total), its tests in the repository."""
    mutant = INVENTORY.replace(*ADD_BUG).replace(*TOTAL_BUG)
    f2p = [f"{TESTS}::test_add_counts_up", f"{TESTS}::test_total_of_the_stock"]
    p2p = [f"{TESTS}::test_get_of_a_missing_item_is_zero", f"{TESTS}::test_price_of_an_item"]
    return _task(root, "shop-two-edits", mutant, f2p, p2p)


def hidden_test_task(root: Path) -> Task:
    """An imported (SWE-bench-format) task: the failing test arrives in a test_patch the agent never sees."""
    mutant = INVENTORY.replace(*PRICE_BUG)
    test_patch = unified_diff({}, {HIDDEN_FILE: HIDDEN_TEST.encode()})
    f2p = [f"{HIDDEN_FILE}::test_an_item_without_a_price_costs_nothing"]
    p2p = [f"{TESTS}::{name}" for name in VISIBLE_TESTS]
    return _task(root, "shop-hidden-test", mutant, f2p, p2p, test_patch, function="Prices.get")


# The builder's `operator` kind on Prices.total (`*` -> `//`): one edit fixes it.
TOTAL_OPERATOR_BUG = ("self.get(n) * stock.get(n)", "self.get(n) // stock.get(n)")


def one_bug_task(root: Path) -> Task:
    """A builder-shaped task of one mutation in Prices.total, its tests in the repository."""
    mutant = INVENTORY.replace(*TOTAL_OPERATOR_BUG)
    f2p = [f"{TESTS}::test_total_of_the_stock"]
    p2p = [f"{TESTS}::{name}" for name in VISIBLE_TESTS if name != "test_total_of_the_stock"]
    return _task(root, "shop-one-bug", mutant, f2p, p2p, function="Prices.total")
