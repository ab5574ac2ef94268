"""The README and the pages under docs/ name only modules, files and names that exist,
and the README stays short enough to read: moved or renamed code fails here, not in a
newcomer's first hour.

Two kinds of mention are checked: paths under the repository's own folders
(`engines/env/session.py`, `tests/assets/golden/`, `engines/env/micro*.py`) and dotted
names (`flows.rl`, `engines.inference.launch.secondary_node_command`), whose part after
the longest existing module must be a name defined there (read with ast, nothing is
imported). `tasks.X` and `storage.X` are also the run configuration's sections: one whose
X is no module of that package is a configuration key, not checked here."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_README_LINES = 400
FOLDERS = ("flows", "tasks", "engines", "storage", "benchmarks", "tests", "scripts", "configs", "docs", "requirements")
PACKAGES = ("flows", "tasks", "engines", "storage", "benchmarks", "tests")
CONFIG_SECTIONS = ("tasks", "storage")  # package names that are also sections of RunConfig
_EDGE = r"(?<![\w./~<>$-])"  # not inside a longer path, URL, placeholder or option
PATH = re.compile(_EDGE + r"((?:" + "|".join(FOLDERS) + r")/[\w./*-]*)")
DOTTED = re.compile(_EDGE + r"((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)")


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")  # a markdown link's target, without its anchor


def pages() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def broken_links(text: str, folder: Path) -> list[str]:
    """Relative markdown links in a page at `folder` whose target does not exist."""
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]
    return [t for t in targets if not (folder / t).exists()]


def path_mentions(text: str) -> set[str]:
    """Repository paths named in `text`, without a sentence's closing punctuation."""
    return {m.rstrip(".") for m in PATH.findall(text) if not m.endswith(("/.", "/-"))}


def dotted_mentions(text: str) -> set[str]:
    return {m for m in DOTTED.findall(text) if not m.endswith((".py", ".md", ".json", ".toml", ".txt"))}


def path_exists(path: str, root: Path = REPO) -> bool:
    return any(root.glob(path.rstrip("/"))) if "*" in path else (root / path).exists()


@cache
def _defined(module_file: Path) -> dict[str, ast.AST]:
    """Top-level names a module defines or imports, each with its node."""
    names: dict[str, ast.AST] = {}
    for node in ast.parse(module_file.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({t.id: node for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
    return names


def _module_file(parts: list[str], root: Path) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_exists(name: str, root: Path = REPO) -> bool:
    """Whether `name` is a module, or a module followed by a name it defines (and a
    class's attribute after that: `flows.rl.rl`, `engines.trainer.lane.TrainerLane.train`)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(parts[:cut], root)
        if module is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        node = _defined(module).get(rest[0])
        if node is None or len(rest) == 1:
            return node is not None
        return isinstance(node, ast.ClassDef) and any(
            getattr(n, "name", None) == rest[1]
            or rest[1] in {getattr(t, "id", None) for t in getattr(n, "targets", [])}
            for n in node.body
        )
    return False


def is_config_key(name: str, root: Path = REPO) -> bool:
    head, second = name.split(".")[:2]
    return head in CONFIG_SECTIONS and _module_file([head, second], root) is None


def missing(text: str, root: Path = REPO) -> list[str]:
    """The mentions in `text` that name nothing in the repository at `root`."""
    paths = [p for p in sorted(path_mentions(text)) if not path_exists(p, root)]
    names = [n for n in sorted(dotted_mentions(text)) if not is_config_key(n, root) and not dotted_exists(n, root)]
    return paths + names


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_module_a_page_names_exists(page: Path) -> None:
    text = page.read_text()
    assert missing(text) == [], f"{page.relative_to(REPO)} names what does not exist"
    assert broken_links(text, page.parent) == [], f"{page.relative_to(REPO)} links to what does not exist"


def test_the_readme_stays_short() -> None:
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move measurements into a dated page "
        "under docs/ (docs/YYYY-MM-DD-topic.md, with the commit they were measured at) and link it"
    )


def test_dated_pages_say_their_commit() -> None:
    for page in sorted((REPO / "docs").glob("*.md")):
        assert re.match(r"\d{4}-\d{2}-\d{2}-[\w-]+\.md$", page.name), f"docs/{page.name}: name it YYYY-MM-DD-topic.md"
        assert re.search(r"\b[0-9a-f]{7,40}\b", page.read_text()), f"docs/{page.name} names no commit"


def test_the_check_catches_what_is_gone() -> None:
    text = (
        "see `engines/env/session.py`, `engines/env/gone.py`, `engines/env/task_sources/micro*.py`, "
        "`engines.inference.wide_ep.secondary_node_command`, `engines.inference.launch.secondary_node_command`, "
        "`flows.rl`, `flows.nowhere`, `engines.trainer.lane.TrainerLane.train`, `engines.trainer.lane.TrainerLane.fly`, "
        "`tasks.corpus_path` (a configuration key), `tasks.build`, `~/.cache/tandem-rl/work/<lake>/<run>`, `--storage.root`."
    )
    assert missing(text) == [
        "engines/env/gone.py",
        "engines.inference.wide_ep.secondary_node_command",
        "engines.trainer.lane.TrainerLane.fly",
        "flows.nowhere",
    ]
