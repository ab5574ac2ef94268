"""The static call graph behind benchmarks/step_files.py follows what it says it follows,
and the step's figures come out of this tree."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.call_graph import Source, reach
from benchmarks.step_files import main

FILES = {
    "pkg/__init__.py": "from pkg.store import open_store\n",
    "pkg/store.py": (
        "class Store:\n    def read(self) -> int:\n        return 1\ndef open_store() -> Store:\n    return Store()\n"
    ),
    "pkg/lane.py": (
        "from pkg import open_store\n"
        "from pkg.store import Store\n"
        "class Lane:\n"
        "    def __init__(self, store: Store) -> None:\n"
        "        self.store = store\n"
        "    def step(self) -> int:\n"
        "        return self.store.read()\n"
        "def run(lane: Lane) -> int:\n"
        "    def report() -> None:\n"
        "        pass\n"
        "    report()\n"
        "    return lane.step()\n"
        "def start() -> None:\n"
        "    run(Lane(open_store()))\n"
        "    cmd = ['python', '-m', 'pkg.child']\n"
        "def unused() -> None:\n"
        "    pass\n"
    ),
    "pkg/child.py": "def main() -> int:\n    return 0\n",
}


def _source(tmp_path: Path) -> Source:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return Source(tmp_path, ["pkg"])


def test_the_graph_follows_imports_reexports_typed_values_nested_functions_and_started_modules(tmp_path: Path) -> None:
    graph = _source(tmp_path).graph
    assert graph["pkg.lane:start"] == {
        "pkg.lane:run",
        "pkg.lane:Lane.__init__",  # a class named: its constructor
        "pkg.store:open_store",  # through the package's re-export
        "pkg.child:main",  # started as `-m pkg.child`
    }
    assert graph["pkg.lane:run"] == {"pkg.lane:run.report", "pkg.lane:Lane.step"}  # `lane: Lane`
    assert graph["pkg.lane:Lane.step"] == {"pkg.store:Store.read"}  # `self.store = store: Store`
    assert "pkg.lane:unused" not in reach(graph, ["pkg.lane:start"])


def test_the_step_files_of_this_tree(capsys) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    figures = json.loads(out[-1])
    assert figures["bench"] == "step_files" and 0 < figures["spine"] < figures["files"]
    spine = out[1 : out.index("side trips:")]
    assert {"flows/rl.py", "flows/rollout_lane.py", "engines/trainer/lane.py"} <= {s.strip() for s in spine}
