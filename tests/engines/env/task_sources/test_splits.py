"""Held-out splits by project and by task (engines/env/task_sources/splits.py)."""

from __future__ import annotations

import json

from engines.env.task_sources.builder import DEFAULT_HELDOUT_PROJECTS, BuildConfig
from engines.env.task_sources.sdists import DEFAULT_PINS
from engines.env.task_sources.splits import assign_split, heldout_kind, split_kind, task_heldout
from engines.env.types import Task


def _task(ident: str, repo: str, split: str = "train", meta: dict | None = None) -> Task:
    return Task(
        instance_id=ident,
        repo=repo,
        version="1",
        base_commit="0" * 16,
        problem_statement="Some tests fail.",
        patch="",
        test_patch="",
        FAIL_TO_PASS=("tests/test_a.py::test_a",),
        PASS_TO_PASS=(),
        test_cmd="python -m pytest",
        log_parser="parse_log_pytest",
        env_name="swe",
        split=split,  # type: ignore[arg-type]
        snapshot_uri="/nowhere",
        metadata=json.dumps(meta or {"file": "a.py"}),
    )


def test_a_heldout_project_holds_out_every_task_and_says_so():
    tasks = [assign_split(_task(f"toml-{i}", "toml"), ["toml"], 0.0) for i in range(20)]
    assert {t.split for t in tasks} == {"heldout"}
    assert {heldout_kind(t) for t in tasks} == {"project"}
    assert all(t.meta()["file"] == "a.py" for t in tasks)  # other metadata kept


def test_training_projects_hold_out_a_stable_hash_share_of_tasks():
    ids = [f"toolz-1.2.0-{i:04d}" for i in range(2000)]
    tasks = [assign_split(_task(i, "toolz"), ["toml"], 0.2) for i in ids]
    held = [t for t in tasks if t.split == "heldout"]
    assert 300 < len(held) < 500  # about 20 %
    assert {heldout_kind(t) for t in held} == {"task"}
    assert all(heldout_kind(t) is None and "heldout" not in t.meta() for t in tasks if t.split == "train")
    # the same id gets the same split whatever else is in the corpus
    assert [t.split for t in tasks] == [("heldout" if task_heldout(i, 0.2) else "train") for i in ids]
    assert split_kind(ids[0], "toolz", (), 1.0) == "task" and split_kind(ids[0], "toolz", (), 0.0) is None


def test_resplitting_removes_a_stale_kind():
    held = assign_split(_task("toml-1", "toml"), ["toml"], 0.0)
    train = assign_split(held, [], 0.0)
    assert train.split == "train" and "heldout" not in train.meta() and heldout_kind(train) is None
    legacy = _task("x-1", "x", split="heldout")  # built before kinds were recorded
    assert heldout_kind(legacy) == "task"


def test_default_heldout_projects_are_default_pins_but_not_the_biggest():
    names = [p.name for p in DEFAULT_PINS]
    assert BuildConfig().heldout_projects == list(DEFAULT_HELDOUT_PROJECTS)
    assert len(DEFAULT_HELDOUT_PROJECTS) == 2 and set(DEFAULT_HELDOUT_PROJECTS) <= set(names)
    for name in DEFAULT_HELDOUT_PROJECTS:
        assert name in BuildConfig.model_fields["heldout_projects"].description
