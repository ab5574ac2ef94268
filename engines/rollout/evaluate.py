"""Held-out evaluation: pass@1 (greedy) and pass@k (k samples at the rollout
temperature), graded by the same sandboxed grader as training, under the same
episode protocol as training. Beside the headline it reports how the greedy
episodes used edit feedback (first-attempt pass@1, mean attempts, retries that
repeated a failed edit) and which tasks greedy solved, so two evaluations of the
same tasks can be compared pairwise (engines/rollout/attempts.py: mcnemar_p), and
every episode of both passes as a row of the `evaluations` table (records.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.types import Task
from engines.inference.agent import AgentLoop
from engines.inference.types import Episode
from engines.rollout.attempts import attempt_stats
from engines.rollout.records import evaluation_row
from engines.rollout.step import GradeCache, episode_requests, grade_episodes, pool_tester


@dataclass(frozen=True)
class EvalResult:
    version: int
    tasks: int
    pass_at_1: float  # greedy decoding, one episode per task
    pass_at_k: float  # at least one of k samples resolved
    pass_at_1_sampled: float  # mean over the k samples
    k: int  # 0: the greedy pass alone, so neither sampled figure is reported
    infra_failures: int
    infra_example: str = ""  # the first infrastructure failure's message, for diagnosis
    first_attempt_pass_at_1: float = 0.0  # greedy, solved by its first edit
    mean_attempts: float = 0.0  # greedy, edits tested per episode
    retry_repeat_rate: float = 0.0  # greedy retries that repeated an edit that had failed
    solved: tuple[str, ...] = ()  # task ids greedy solved (for paired comparisons)
    # Rows of the `evaluations` table, greedy then sampled; not in as_dict (the JSON
    # summary stays small, the episodes go to the lake).
    episodes: tuple[dict, ...] = field(default=(), repr=False, compare=False)

    def as_dict(self) -> dict[str, float | int | str | list[str]]:
        # pass@k only for k > 1: with one sample it is pass@1_sampled, and under the key
        # "pass@1" it would overwrite the greedy result.
        at_k = {f"pass@{self.k}": self.pass_at_k} if self.k > 1 else {}
        sampled = {"pass@1_sampled": self.pass_at_1_sampled} if self.k else {}
        return {
            "pass@1": self.pass_at_1,
            **at_k,
            **sampled,
            "first_attempt_pass@1": self.first_attempt_pass_at_1,
            "mean_attempts": self.mean_attempts,
            "retry_repeat_rate": self.retry_repeat_rate,
            "tasks": self.tasks,
            "version": self.version,
            "infra_failures": self.infra_failures,
            "infra_example": self.infra_example,
            "solved": list(self.solved),
        }


async def evaluate_tasks(
    greedy: AgentLoop,
    sampled: AgentLoop,
    grader: GradingPool,
    cache: GradeCache,
    env: EnvConfig,
    tasks: Sequence[Task],
    k: int,
    version: int,
    progress: Callable[[str], None] | None = None,
) -> EvalResult:
    """`greedy` must sample at temperature 0, `sampled` at the training temperature
    (`k` episodes a task; none with k = 0); each seeds its episodes only when its
    `sampling.seed` is set. `progress` gets a line at every tenth of each pass (a
    500-task evaluation takes minutes on CPU)."""
    tester = pool_tester(grader, cache)
    passes = [
        greedy.run_episodes(
            episode_requests(tasks, 1, env, step=-1, seed=greedy.cfg.sampling.seed, tester=tester),
            episode_counter(f"v{version} greedy", len(tasks), progress),
        )
    ]
    if k:
        passes.append(
            sampled.run_episodes(
                episode_requests(tasks, k, env, step=-2, seed=sampled.cfg.sampling.seed, tester=tester),
                episode_counter(f"v{version} sampled", len(tasks) * k, progress),
            )
        )
    # With k > 0 both passes at once: the sampled pass fills the server's batch while the greedy
    # pass's last episodes wait on their tests, and the reverse.
    g_eps, *rest = await asyncio.gather(*passes)
    s_eps = rest[0] if rest else []
    by_id = {t.instance_id: t for t in tasks}
    g_grades = grade_episodes(grader, cache, [(by_id[e.task_id], e) for e in g_eps])
    s_grades = grade_episodes(grader, cache, [(by_id[e.task_id], e) for e in s_eps])
    solved_any: dict[str, bool] = {}
    for e, g in zip(s_eps, s_grades):
        solved_any[e.task_id] = solved_any.get(e.task_id, False) or g.resolved
    failed = [g for g in (*g_grades, *s_grades) if g.infra_failure]
    stats = [attempt_stats(e.conversation, g.resolved, e.messages) for e, g in zip(g_eps, g_grades)]
    s_stats = [attempt_stats(e.conversation, g.resolved, e.messages) for e, g in zip(s_eps, s_grades)]
    rows = [evaluation_row("greedy", e, g, st) for e, g, st in zip(g_eps, g_grades, stats)]
    rows += [evaluation_row("sampled", e, g, st) for e, g, st in zip(s_eps, s_grades, s_stats)]
    retries = sum(max(0, s.attempts - 1) for s in stats)
    return EvalResult(
        version=version,
        tasks=len(tasks),
        pass_at_1=sum(g.resolved for g in g_grades) / len(tasks),
        pass_at_k=sum(solved_any.values()) / len(tasks),
        pass_at_1_sampled=sum(g.resolved for g in s_grades) / max(1, len(s_grades)),
        k=k,
        infra_failures=len(failed),
        infra_example=failed[0].infra_message[:500] if failed else "",
        first_attempt_pass_at_1=sum(s.first_passed for s in stats) / len(tasks),
        mean_attempts=sum(s.attempts for s in stats) / len(tasks),
        retry_repeat_rate=sum(s.repeats for s in stats) / retries if retries else 0.0,
        solved=tuple(e.task_id for e, g in zip(g_eps, g_grades) if g.resolved),
        episodes=tuple(rows),
    )


def episode_counter(label: str, total: int, progress: Callable[[str], None] | None) -> Callable[[Episode], None] | None:
    """A callback that counts finished episodes and reports `[eval] <label> n/total`
    at every tenth of `total` (and at the end)."""
    if progress is None or total == 0:
        return None
    every = max(1, total // 10)
    done = 0

    def count(_episode: Episode) -> None:
        nonlocal done
        done += 1
        if done % every == 0 or done == total:
            progress(f"[eval] {label} {done}/{total} episodes")

    return count
