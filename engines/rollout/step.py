"""Generate, grade and record the episodes of one training step.

Invariants (tested in tests/engines/rollout/):
- A step redone after a crash asks the same questions (engines/rollout/curriculum.py),
  and its shard replaces the earlier attempt's.
- Every episode requested is written, infrastructure failures included (flagged,
  left out of group statistics), so nothing is silently dropped.
- The shard is written only after the staleness bound is checked.
- A step in which no episode generated a single token (the harness worked, the model
  was never asked or never answered) is an error naming what its episodes ended on,
  not a step trained on nothing; a step in which no episode made a valid action is
  written, with a warning line and `valid_action_share` 0.0 in its metrics.
- A step whose hack rate (engines/step_metrics.py) is above env.hack_rate_warn is
  written with a warning line naming the rules flagged most.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.session import EnvSession, Tester
from engines.env.types import GradeResult, Task
from engines.env.workspace import Files
from engines.handoff import check_episodes
from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.inference.types import Episode
from engines.rollout.records import episode_row, rollouts_table
from engines.step_metrics import graded_episodes, hack_rate, hack_rules

log = logging.getLogger(__name__)


class NoTokensGenerated(RuntimeError):
    """No episode of a step generated a token: training on it would learn nothing."""


@dataclass
class GradeCache:
    """Grades by (task, patch): grading is deterministic, and a group's samples often
    agree on the same patch, so each distinct patch is run once.

    A `fast` grade (the `test` tool) may come from the plain runner (runner="plain"):
    kept apart, it answers only fast grades again, so a final grade always runs
    pytest; a pytest grade answers both."""

    results: dict[tuple[str, ...], GradeResult] = field(default_factory=dict)
    max_entries: int = 100_000

    def key(self, task: Task, patch: str, runner: str = "pytest") -> tuple[str, ...]:
        digest = hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()
        return (task.instance_id, digest) if runner == "pytest" else (task.instance_id, digest, runner)

    def grade(
        self,
        pool: GradingPool,
        items: Sequence[tuple[Task, str]],
        fast: bool = False,
        changes: Sequence[Files | None] | None = None,
    ) -> list[GradeResult]:
        """Grades of (task, patch) pairs, each distinct one run once; `changes` as for
        GradingPool.grade_many (the patches' files, which spare a fast grade git)."""
        keys = [self.key(t, p) for t, p in items]
        known = [self._known(t, p, fast) for t, p in items]
        files = dict(zip(keys, changes or [None] * len(items)))
        todo = {k: item for k, item, hit in zip(keys, items, known) if hit is None}
        fresh = pool.grade_many(list(todo.values()), fast=fast, changes=[files[k] for k in todo]) if todo else []
        computed = dict(zip(todo, fresh))
        # Answer before evicting: a key that was a hit must still be answered when the
        # eviction below drops it.
        answers = [computed.get(k, hit) for k, hit in zip(keys, known)]
        for (task, patch), result in zip(todo.values(), fresh):
            if not result.infra_failure:  # an infrastructure failure may pass on retry
                self.results[self.key(task, patch, result.runner)] = result
        while len(self.results) > self.max_entries:  # oldest first (dicts keep insertion order)
            del self.results[next(iter(self.results))]
        return answers  # type: ignore[return-value]

    def _known(self, task: Task, patch: str, fast: bool) -> GradeResult | None:
        if fast and (hit := self.results.get(self.key(task, patch, "plain"))) is not None:
            return hit
        return self.results.get(self.key(task, patch))


def pool_tester(pool: GradingPool, cache: GradeCache) -> Tester:
    """The `test` tool through the grading pool's warm sandboxes, fast where the task's
    tests are plain functions (env.fast_test_runner). Grades are cached by (task, diff):
    a repeated test costs no second run, nor does a submit after a pytest-run `test`
    (a plain-run one is graded again by pytest). The tree's changed files go along,
    so a plain run needs no git."""
    return lambda task, tree: cache.grade(pool, [(task, tree.diff())], fast=True, changes=[tree.changes()])[0]


def episode_requests(
    tasks: Sequence[Task], group_size: int, env: EnvConfig, step: int, seed: int | None, tester: Tester | None = None
) -> list[EpisodeRequest]:
    """`group_size` episodes per task, one group per task; with a `seed`, each episode
    samples from its own seed, a function of (seed, step, task, sample). None samples
    unseeded, which lets the pool coalesce requests (engines/inference/batching.py).
    `tester` runs the episodes' `test` tool (None: a cold sandbox per call)."""
    requests = []
    for t_index, task in enumerate(tasks):
        for i in range(group_size):
            requests.append(
                EpisodeRequest(
                    task_id=task.instance_id,
                    group_id=f"s{step}-t{t_index}",
                    sample_index=i,
                    make_env=lambda task=task: EnvSession.open(task, env, tester),
                    seed=None if seed is None else (seed * 1_000_003 + step * 10_007 + t_index * 101 + i) % (2**31),
                )
            )
    return requests


@dataclass
class StepRollouts:
    """A step's episodes as a rollouts table, and how long generating and grading took."""

    table: pa.Table
    generation_s: float
    grading_s: float
    staleness_max: int


async def run_step(
    agent: AgentLoop,
    grader: GradingPool,
    cache: GradeCache,
    env: EnvConfig,
    run: str,
    step: int,
    tasks: Sequence[Task],
    group_size: int,
    async_level: int,
) -> StepRollouts:
    """Episodes for `tasks` x `group_size`, graded, as a rollouts table (advantages are
    the trainer's: engines/trainer/advantages.py). Sampling is seeded only when the
    agent's `sampling.seed` is set."""
    t0 = time.monotonic()
    requests = episode_requests(tasks, group_size, env, step, agent.cfg.sampling.seed, pool_tester(grader, cache))
    episodes = await agent.run_episodes(requests)
    t1 = time.monotonic()
    check_generated(step, episodes)
    valid = [agent.valid_actions(e.messages) for e in episodes]
    warn_without_valid_actions(step, episodes, valid)
    by_id = {t.instance_id: t for t in tasks}
    grades = grade_episodes(grader, cache, [(by_id[e.task_id], e) for e in episodes])
    t2 = time.monotonic()
    staleness = check_episodes(step, async_level, [e.policy_versions for e in episodes])
    table = episodes_table(run, step, [by_id[e.task_id] for e in episodes], episodes, grades, valid)
    warn_on_hack_rate(step, table, env.hack_rate_warn, env.hack_policy)
    return StepRollouts(table, t1 - t0, t2 - t1, staleness)


def check_generated(step: int, episodes: Sequence[Episode]) -> None:
    """Raise NoTokensGenerated when no episode generated a token although the harness
    did not fail them all: such a step (every prompt over the limits, every request
    refused, a model that ends its turn at once) would train on nothing and report a
    pass rate of 0.000 as if the policy had tried. The error names what the episodes
    ended on. A step whose episodes all failed in the harness is written as such
    (flagged infra failures, left out of the metrics)."""
    if not episodes or any(any(e.loss_mask) for e in episodes) or all(e.infra_failure for e in episodes):
        return
    reasons = Counter(e.finish_reason for e in episodes)
    messages = Counter(e.infra_message for e in episodes if e.infra_message)
    said = "; ".join(f"{m[:300]!r} (x{n})" for m, n in messages.most_common(3)) or "none"
    raise NoTokensGenerated(
        f"step {step}: none of its {len(episodes)} episodes generated a token. Finish reasons: "
        + ", ".join(f"{r} x{n}" for r, n in reasons.most_common())
        + f". Messages: {said}. Check inference.limits (max_total_tokens against the prompts), the served "
        "model and the chat template's stop ids"
    )


def warn_without_valid_actions(step: int, episodes: Sequence[Episode], valid: Sequence[int]) -> bool:
    """Print a warning line when no episode (infra failures aside) made a valid action:
    every reward is then zero and the step teaches nothing, which a run would otherwise
    show only as a flat pass rate. Returns whether it warned."""
    judged = [(e, n) for e, n in zip(episodes, valid) if not e.infra_failure]
    if not judged or any(n for _, n in judged):
        return False
    turns = sum(e.num_turns for e, _ in judged)
    first = next((o for e, _ in judged if (o := _first_observation(e.messages)) is not None), None)
    example = f"; the first observation: {first[:200]!r}" if first is not None else ""
    log.warning(
        "step %d: no episode made a valid action (%d episodes, %d model turns)%s. Every reward is zero: check that "
        "the model writes the action language of inference.tool_format, and inference.thinking against its chat "
        "template",
        step,
        len(judged),
        turns,
        example,
    )
    return True


def warn_on_hack_rate(step: int, table: pa.Table, threshold: float, policy: str) -> bool:
    """Print a warning line when the step's hack rate is above `threshold`: a policy
    learning to fool the tests shows a rising reward curve, so the rate has to be said
    where the run is watched. Returns whether it warned."""
    graded = graded_episodes(table)
    rate = hack_rate(graded)
    if rate is None or rate <= threshold:
        return False
    counts = hack_rules(graded)
    rules = ", ".join(f"{rule} x{n}" for rule, n in counts.most_common(3))
    if "strict_judge" in counts:  # no trick of the patch: a wrong fix the task's tests let through
        rules += " (strict_judge: the tests pass but the code computes other values than the original)"
    consequence = (
        "Their reward is zero (env.hack_policy = 'zero_reward'), yet the policy keeps trying them"
        if policy == "zero_reward"
        else "The monitor's flags keep their reward (env.hack_policy = 'record'; a strict_judge rejection gets none): "
        "the run is learning them"
    )
    log.warning(
        "step %d: hack rate %.3f is above env.hack_rate_warn = %.3f; rules flagged most: %s. %s; the flagged "
        "patches are in the rollouts table (hack_flags, patch)",
        step,
        rate,
        threshold,
        rules,
        consequence,
    )
    return True


def grade_episodes(grader: GradingPool, cache: GradeCache, pairs: Sequence[tuple[Task, Episode]]) -> list[GradeResult]:
    """Grade the patch of every episode that did not fail in the harness."""
    graded_idx = [i for i, (_, e) in enumerate(pairs) if not e.infra_failure]
    results = cache.grade(grader, [(pairs[i][0], pairs[i][1].patch) for i in graded_idx])
    out: list[GradeResult | None] = [None] * len(pairs)
    for i, r in zip(graded_idx, results):
        out[i] = r
    for i, (task, ep) in enumerate(pairs):
        if out[i] is None:
            out[i] = GradeResult.failed(task, infra=ep.infra_message or "the episode failed before grading")
    return out  # type: ignore[return-value]


def _first_observation(messages: Sequence[dict]) -> str | None:
    """The text of the message after an episode's first model turn (what the model was told)."""
    roles = [m.get("role") for m in messages]
    if "assistant" not in roles:
        return None
    after = roles.index("assistant") + 1
    return str(messages[after].get("content") or "") if after < len(messages) else None


def episodes_table(
    run: str,
    step: int,
    tasks: Sequence[Task],
    episodes: Sequence[Episode],
    grades: Sequence[GradeResult],
    valid_actions: Sequence[int] | None = None,
) -> pa.Table:
    """The step's rollouts rows; `valid_actions` per episode (AgentLoop.valid_actions),
    null when not counted."""
    rows = [episode_row(run, step, t, e, g) for t, e, g in zip(tasks, episodes, grades)]
    for row, count in zip(rows, valid_actions or ()):
        row["valid_actions"] = count
    return rollouts_table(rows)
