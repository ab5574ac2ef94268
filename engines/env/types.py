"""Plain data exchanged by the environment: a task, a grade, one step's result.

No behaviour lives here; `Task` fields are exactly the columns of
`storage.schema.TASKS` (SWE-bench 5.x names), so a corpus round-trips through
Parquet and JSONL without renaming.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal

EnvName = Literal["micro", "swe"]
Split = Literal["train", "heldout"]


@dataclass(frozen=True)
class Task:
    instance_id: str
    repo: str
    version: str
    base_commit: str  # content hash of the prepared base tree
    problem_statement: str
    patch: str  # gold patch: base -> fixed
    test_patch: str  # applied after the model's patch (may be empty)
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    test_cmd: str  # shell command run in the repo root; test ids are appended
    log_parser: str  # name in swebench's PARSER_REGISTRY
    env_name: EnvName
    split: Split
    snapshot_uri: str  # directory holding the upstream tree, or "" when files are inline
    metadata: str = "{}"  # JSON; keys used here: files, bug_patch, test_files, bug

    def meta(self) -> dict[str, Any]:
        return json.loads(self.metadata or "{}")

    def to_row(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        row["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        names = {f.name for f in fields(cls)}
        missing = sorted(n for n in names - {"metadata"} if row.get(n) is None and n not in ("test_patch",))
        ident = row.get("instance_id", "<no instance_id>")
        if missing:
            raise ValueError(f"task {ident}: missing fields {missing}; every task needs {sorted(names)}")
        values = {n: row.get(n) for n in names}
        values["test_patch"] = values["test_patch"] or ""
        values["metadata"] = values["metadata"] or "{}"
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            raw = values[key]
            values[key] = tuple(json.loads(raw) if isinstance(raw, str) else raw)
        if values["env_name"] not in ("micro", "swe"):
            raise ValueError(f"task {ident}: env_name {values['env_name']!r} must be 'micro' or 'swe'")
        if values["split"] not in ("train", "heldout"):
            raise ValueError(f"task {ident}: split {values['split']!r} must be 'train' or 'heldout'")
        if not values["FAIL_TO_PASS"]:
            raise ValueError(f"task {ident}: FAIL_TO_PASS is empty; a task needs at least one failing test")
        return cls(**values)


@dataclass(frozen=True)
class GradeResult:
    resolved: bool
    reward: float
    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int
    report: dict[str, str] = field(default_factory=dict)  # test id -> PASSED/FAILED/ERROR/SKIPPED/MISSING
    infra_failure: bool = False  # the harness failed, not the model: leave out of group statistics
    infra_message: str = ""
    grading_s: float = 0.0
    patch_applied: bool = True
    notes: str = ""  # why a model failure happened (patch rejected, timeout, dropped files)
    runner: Literal["pytest", "plain"] = "pytest"  # "plain": the fast runner of the test tool, never a final grade
    # Rules the patch monitor (engines/env/monitor.py) flagged on the patch; with
    # EnvConfig.hack_policy = "zero_reward" a flagged patch is never resolved.
    flags: tuple[str, ...] = ()

    @classmethod
    def failed(
        cls,
        task: Task,
        infra: str = "",
        notes: str = "",
        applied: bool = True,
        grading_s: float = 0.0,
        runner: Literal["pytest", "plain"] = "pytest",
    ) -> GradeResult:
        """No test passed: every test of `task` MISSING. With `infra` (why the harness
        failed) it is an infrastructure failure, left out of group statistics."""
        return cls(
            False,
            0.0,
            0,
            len(task.FAIL_TO_PASS),
            0,
            len(task.PASS_TO_PASS),
            {t: "MISSING" for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)},
            bool(infra),
            infra,
            grading_s,
            applied and not infra,
            notes,
            runner,
        )


@dataclass(frozen=True)
class StepResult:
    observation: str
    done: bool
