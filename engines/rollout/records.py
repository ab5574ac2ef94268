"""Episodes plus grades -> rows of the `rollouts` table (storage.schema.ROLLOUTS), and
held-out evaluation episodes -> rows of the `evaluations` table (storage.schema.EVALUATIONS)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from engines.env.grader import report_json
from engines.env.types import GradeResult, Task
from engines.inference.types import Episode
from engines.rollout.attempts import AttemptStats
from storage.schema import EVALUATIONS, ROLLOUTS


def _routes(ep: Episode) -> tuple[bytes | None, list[int] | None]:
    """Compact routed experts: uint8 when experts fit, else uint16, C order."""
    r = ep.routed_experts
    if r is None:
        return None, None
    dtype = np.uint8 if int(r.max(initial=0)) < 256 else np.uint16
    return np.ascontiguousarray(r, dtype=dtype).tobytes(), list(r.shape)


def episode_row(run: str, step: int, task: Task, ep: Episode, grade: GradeResult) -> dict:
    routes, shape = _routes(ep)
    infra = ep.infra_failure or grade.infra_failure
    return {
        "run_id": run,
        "step": step,
        "policy_versions": ep.policy_versions,
        "min_policy_version": ep.min_policy_version,
        "task_id": task.instance_id,
        "group_id": ep.group_id,
        "sample_index": ep.sample_index,
        "env_name": task.env_name,
        "prompt_ids": ep.prompt_ids,
        "completion_ids": ep.completion_ids,
        "loss_mask": ep.loss_mask,
        "completion_logprobs": ep.completion_logprobs,
        "routed_experts": routes,
        "routed_experts_shape": shape,
        "num_prompt_tokens": len(ep.prompt_ids),
        "num_completion_tokens": len(ep.completion_ids),
        "reward": float("nan") if infra else grade.reward,
        "resolved": grade.resolved,
        "f2p_passed": grade.f2p_passed,
        "f2p_total": grade.f2p_total,
        "p2p_passed": grade.p2p_passed,
        "p2p_total": grade.p2p_total,
        "test_report": report_json(grade),
        "hack_flags": list(grade.flags),
        "patch": ep.patch,
        "num_turns": ep.num_turns,
        "finish_reason": ep.finish_reason,
        "generation_s": ep.generation_s,
        "grading_s": grade.grading_s,
        "infra_failure": infra,
        "infra_message": ep.infra_message or grade.infra_message or None,
        "started_at": ep.started_at,
        "finished_at": ep.finished_at,
        "conversation": ep.conversation,
    }


def rollouts_table(rows: Sequence[dict]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=ROLLOUTS)


def evaluation_row(pass_name: str, ep: Episode, grade: GradeResult, stats: AttemptStats) -> dict:
    """One evaluation episode; `pass_name` is greedy or sampled. The run, the version and
    the evaluation's name are the file's (storage.tables.write_evaluations)."""
    infra = ep.infra_failure or grade.infra_failure
    return {
        "pass": pass_name,
        "task_id": ep.task_id,
        "sample_index": ep.sample_index,
        "attempts": stats.attempts,
        "first_attempt_passed": stats.first_passed,
        "repeats": stats.repeats,
        "resolved": grade.resolved,
        "reward": float("nan") if infra else grade.reward,
        "patch": ep.patch,
        "num_turns": ep.num_turns,
        "finish_reason": ep.finish_reason,
        "infra_failure": infra,
        "conversation": ep.conversation,
    }


def evaluations_table(run: str, version: int, name: str, rows: Sequence[dict]) -> pa.Table:
    """The rows of one evaluation (`name`: before, after, evaluate) of `version` of `run`."""
    now = datetime.now(UTC)
    full = [{**r, "run_id": run, "version": version, "evaluation": name, "written_at": now} for r in rows]
    return pa.Table.from_pylist(full, schema=EVALUATIONS)
