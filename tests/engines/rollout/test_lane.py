"""The rollout lane's logic without servers or sandboxes: waiting for a fresh-enough
policy, loading it (with retries), one step end to end into the `final` shard, the
versions retention must keep, an evaluation's episodes in the `evaluations` table. The servers, agent and grader are stand-ins with the
same methods."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from engines.env.config import EnvConfig
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.types import GradeResult
from engines.inference.types import Episode
from engines.rollout.lane import RolloutLane, RolloutSettings
from engines.rollout.weight_cache import WeightCache
from engines.step_metrics import episode_metrics
from storage import checkpoints, query, shards
from storage.fs import Store, open_store

RUN = "lane"


@dataclass
class Servers:
    """Stand-in for ServerPool: the served version, and a number of failing loads."""

    version: int = 0
    failures: int = 0
    loads: list[int] = field(default_factory=list)

    async def update_weights(self, weights_dir: str, version: int) -> float:
        self.loads.append(version)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("server restarted")
        self.version = version
        return 0.0


class Agent:
    """Stand-in for AgentLoop: sample 0 of every group submits the gold patch."""

    cfg = SimpleNamespace(sampling=SimpleNamespace(seed=None))

    def __init__(self, servers: Servers, gold: dict[str, str]) -> None:
        self.servers, self.gold = servers, gold

    async def run_episodes(self, requests, on_done=None) -> list[Episode]:
        return [
            Episode(
                task_id=r.task_id,
                group_id=r.group_id,
                sample_index=r.sample_index,
                prompt_ids=[1, 2],
                completion_ids=[3, 4, 5],
                loss_mask=[True, True, True],
                completion_logprobs=[-0.1, -0.2, -0.3],
                policy_versions=[self.servers.version],
                num_turns=1,
                finish_reason="submitted",
                patch=self.gold[r.task_id] if r.sample_index == 0 else "",
            )
            for r in requests
        ]

    def valid_actions(self, messages) -> int:
        return 1  # every episode submits


class Grader:
    """Stand-in for GradingPool: a patch resolves its task when it is the gold one."""

    def __init__(self, gold: dict[str, str]) -> None:
        self.gold = gold

    def grade_many(self, items, fast: bool = False, changes=None) -> list[GradeResult]:
        out = []
        for task, patch in items:
            ok = patch == self.gold[task.instance_id]
            out.append(GradeResult(ok, float(ok), int(ok), 1, 0, 0, {}))
        return out


def _publish(store: Store, version: int) -> None:
    uri = checkpoints.weights_uri(store, RUN, version)
    Path(uri).mkdir(parents=True, exist_ok=True)
    (Path(uri) / "config.json").write_text(json.dumps({"model_type": "stand-in"}))
    checkpoints.publish(store, RUN, version, version - 1, uri)


def _lane(tmp_path, async_level: int = 1, failures: int = 0, **settings) -> RolloutLane:
    store = open_store(str(tmp_path / "lake"))
    tasks = generate_micro_tasks(8, seed=7)
    gold = {t.instance_id: f"gold {t.instance_id}" for t in tasks}
    servers = Servers(failures=failures)
    agent = Agent(servers, gold)
    return RolloutLane(
        store=store,
        run=RUN,
        pool=servers,
        agent=agent,
        greedy=agent,
        grader=Grader(gold),
        env=EnvConfig(),
        settings=RolloutSettings(
            tasks_per_step=2, group_size=4, seed=3, async_level=async_level, load_retry_s=0.0, **settings
        ),
        train_tasks=tasks[:6],
        heldout=tasks[6:],
        weights=WeightCache(store, tmp_path / "weights", 3),
    )


def test_a_step_waits_for_a_policy_fresh_enough_and_serves_it(tmp_path) -> None:
    lane = _lane(tmp_path, async_level=1)
    _publish(lane.store, 0)

    async def trainer_publishes_later() -> None:
        await asyncio.sleep(0.5)
        _publish(lane.store, 1)

    async def both():
        publisher = asyncio.create_task(trainer_publishes_later())
        wait = await lane.wait_for_policy(2)  # step 2 at async level 1 needs version >= 1
        await publisher
        return wait

    wait = asyncio.run(both())
    assert wait.version == 1 and wait.waited_s >= 0.4
    assert asyncio.run(lane.load_policy(1)) >= 0 and lane.served == 1
    assert asyncio.run(lane.load_policy(1)) == 0.0 and lane.pool.loads == [1]  # served already: not reloaded


def test_waiting_gives_up_with_a_clear_error(tmp_path) -> None:
    lane = _lane(tmp_path, async_level=0, policy_timeout_s=0.3)
    _publish(lane.store, 0)
    with pytest.raises(TimeoutError, match="step 1: no policy version >= 1 .* trainer lane running"):
        asyncio.run(lane.wait_for_policy(1))


def test_a_failed_load_is_tried_again_then_raised(tmp_path) -> None:
    lane = _lane(tmp_path, failures=2)
    _publish(lane.store, 1)
    asyncio.run(lane.load_policy(1))
    assert lane.pool.loads == [1, 1, 1] and lane.served == 1

    stubborn = _lane(tmp_path, failures=3)
    with pytest.raises(RuntimeError, match="server restarted"):
        asyncio.run(stubborn.load_policy(1))
    assert stubborn.served == 0


def test_a_step_writes_the_final_shard_and_reports_its_metrics(tmp_path) -> None:
    lane = _lane(tmp_path)
    _publish(lane.store, 0)
    assert not lane.is_published(0)
    metrics = asyncio.run(lane.roll_out(0))
    assert lane.is_published(0)
    stored = shards.read_step(lane.store, RUN, 0)
    assert stored.num_rows == metrics["episodes"] == 8
    assert {k: metrics[k] for k in episode_metrics(stored, 0)} == episode_metrics(stored, 0)
    assert metrics["reward_mean"] == 0.25 and metrics["pass_rate"] == 0.25  # one gold patch per group of 4
    assert metrics["policy_version"] == 0 and metrics["staleness_max"] == 0
    # Advantages are the trainer's to compute and record (the `advantages` table).
    assert set(stored.column("advantage").to_pylist()) == {None}

    again = _lane(tmp_path)
    asyncio.run(again.roll_out(0))  # a step redone asks the same tasks
    assert shards.read_step(again.store, RUN, 0).column("task_id").to_pylist() == stored.column("task_id").to_pylist()


def test_retention_keeps_the_served_and_the_starting_version(tmp_path) -> None:
    lane = _lane(tmp_path)
    for version in range(6):
        _publish(lane.store, version)
    asyncio.run(lane.load_policy(2))
    lane.started_from = 1
    dropped = lane.retain(keep_last=1, milestone_every=0)
    assert dropped == [0, 3, 4]
    assert checkpoints.list_versions(lane.store, RUN) == [1, 2, 5]


def test_the_final_policy_is_served_once_published(tmp_path) -> None:
    lane = _lane(tmp_path, policy_timeout_s=5)
    for version in range(4):
        _publish(lane.store, version)
    asyncio.run(lane.serve_final(3))
    assert lane.served == 3


def test_an_evaluation_writes_every_episode_to_the_evaluations_table(tmp_path) -> None:
    lane = _lane(tmp_path)
    _publish(lane.store, 0)
    result = asyncio.run(lane.evaluate_policy(k=3, name="before"))
    # The stand-in agent resolves sample 0 of each task only: greedy 1.0, sampled 1/3.
    assert (result["pass@1"], result["pass@1_sampled"], result["tasks"]) == (1.0, 1 / 3, 2)
    assert "episodes" not in result  # the summary stays small; the episodes are in the lake
    lake = query.connect(lane.store, RUN)
    rows = lake.sql(
        "SELECT pass, count(*), avg(resolved::int), min(version), min(evaluation) FROM evaluations GROUP BY pass "
        "ORDER BY pass"
    ).fetchall()
    assert rows == [("greedy", 2, 1.0, 0, "before"), ("sampled", 6, 1 / 3, 0, "before")]
    patches = lake.sql("SELECT task_id, patch FROM evaluations WHERE pass = 'greedy' ORDER BY task_id").fetchall()
    assert patches == [
        (t.instance_id, f"gold {t.instance_id}") for t in sorted(lane.heldout, key=lambda t: t.instance_id)
    ]


def test_an_evaluation_without_samples_runs_the_greedy_pass_alone(tmp_path) -> None:
    lane = _lane(tmp_path)
    _publish(lane.store, 0)
    asked: list[int] = []
    run_episodes = lane.agent.run_episodes

    async def counted(requests, on_done=None):
        asked.append(len(requests))
        return await run_episodes(requests, on_done)

    lane.agent.run_episodes = counted  # greedy and sampled are the same stand-in here
    result = asyncio.run(lane.evaluate_policy(k=0, name="after"))
    assert asked == [2] and result["pass@1"] == 1.0
    assert not any(key.startswith("pass@1_") or key.startswith("pass@0") for key in result)
    lake = query.connect(lane.store, RUN)
    assert lake.sql("SELECT DISTINCT pass FROM evaluations").fetchall() == [("greedy",)]


def test_the_mixed_curriculum_reads_the_published_steps_and_resumes_alike(tmp_path) -> None:
    lane = _lane(tmp_path, async_level=3, curriculum="mixed")  # 6 tasks, 2 a step: 3 steps a pass
    for version in range(4):
        _publish(lane.store, version)
    failing = {t.instance_id for t in lane.train_tasks[:3]}
    lane.agent.gold = {**lane.agent.gold, **dict.fromkeys(failing, "no fix")}  # their groups fail whole
    for step in range(3):
        asyncio.run(lane.roll_out(step))
    second = {t.instance_id for step in (3, 4) for t in lane.step_tasks(step)}
    # the second pass: the 3 mixed tasks and one failing one tried again, 2 steps
    assert len(second - failing) == 3 and len(second & failing) == 1
    assert lane.step_tasks.passes() == [(0, 6), (3, 4)]
    again = _lane(tmp_path, async_level=3, curriculum="mixed")  # a restart: a new lane, the same lake
    assert [t.instance_id for t in again.step_tasks(3)] == [t.instance_id for t in lane.step_tasks(3)]
