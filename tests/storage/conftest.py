"""Fixtures for the lake's tests: a root on local disk and one on the moto S3 server,
and a builder of realistic episode tables."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

FINISH_REASONS = ["submitted", "max_turns", "max_tokens", "timeout", "error"]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def lake_root(request: pytest.FixtureRequest, tmp_path) -> str:
    """A lake root: a temp directory, or s3://<fresh bucket>/lake on the moto server."""
    if request.param == "local":
        return str(tmp_path / "lake")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/lake"


def make_episodes(run: str, step: int, n: int, seed: int = 0, first_index: int = 0) -> pa.Table:
    """`n` episodes of (run, step) with every column filled; `sample_index` counts from
    `first_index` so tests can tell episodes apart after a round trip."""
    rng = random.Random(seed)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(first_index, first_index + n):
        completion = rng.randint(1, 40)
        mask = [rng.random() < 0.7 for _ in range(completion)]
        resolved = rng.random() < 0.3
        rows.append(
            {
                "run_id": run,
                "step": step,
                "policy_versions": [max(0, step - 1), step],
                "min_policy_version": max(0, step - 1),
                "task_id": f"task-{i % 7}",
                "group_id": f"{step}-{i // 4}",
                "sample_index": i,
                "env_name": "micro",
                "prompt_ids": [rng.randrange(512) for _ in range(rng.randint(1, 30))],
                "completion_ids": [rng.randrange(512) for _ in range(completion)],
                "loss_mask": mask,
                "completion_logprobs": [-rng.random() if m else 0.0 for m in mask],
                "routed_experts": bytes(rng.randrange(8) for _ in range(completion * 4 * 2)),
                "routed_experts_shape": [completion, 4, 2],
                "num_prompt_tokens": 0,
                "num_completion_tokens": completion,
                "reward": float(resolved),
                "advantage": float(resolved) - 0.3,
                "resolved": resolved,
                "f2p_passed": int(resolved),
                "f2p_total": 1,
                "p2p_passed": 3,
                "p2p_total": 3,
                "test_report": '{"test_a": "PASSED"}',
                "num_turns": rng.randint(1, 5),
                "finish_reason": rng.choice(FINISH_REASONS),
                "generation_s": rng.random(),
                "grading_s": rng.random(),
                "infra_failure": False,
                "infra_message": None,
                "started_at": t0 + timedelta(seconds=i),
                "finished_at": t0 + timedelta(seconds=i + 1),
                "conversation": f"<|user|>fix task {i}<|end|>",
            }
        )
    for r in rows:
        r["num_prompt_tokens"] = len(r["prompt_ids"])
    return pa.Table.from_pylist(rows)


@pytest.fixture
def episodes():
    """The `make_episodes` builder."""
    return make_episodes
