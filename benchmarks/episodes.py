"""Where an edit-feedback step's time goes: N feedback episodes against the managed
vLLM server, beside the one-shot protocol and raw vLLM, in one run.

  feedback : the default run's step (rl.batch_size episodes of rl.group_size per
             task, edit feedback with env.edit_attempts tested edits), through the
             rollout path itself (engines/rollout/step.py: AgentLoop, the grading
             pool's warm sandboxes for every `test` and every attempt, final grade)
  oneshot  : the same tasks with env.edit_attempts = 0 (edits are not tested)
  raw      : vLLM alone generating the feedback episodes' prompts with the same
             output lengths (eos ignored), all at once: what the server can do
  replay   : the feedback episodes' turns sent again as they were (each turn's
             prompt, the recorded context, with its generated length), every
             episode's next turn the moment its last one returns: what the server
             can do with this protocol's requests when tools and tests take no time

The model is the default run's warm start, taken from the warm-start cache
(engines/trainer/warm_start_cache.py; the same key as `tandem run`, so either one
builds it for the other) or built into it; --model-dir serves another one.

Breakdown of the feedback step, from our own timers and vLLM's /metrics:
generation (the server's prefill and decode time, prompt and generated tokens,
prefix-cache hit rate), tool calls (test calls: count, ms per call, of which ms
waiting for a free sandbox), time an episode's tool call waits for a thread,
and the share of the step the server had no request running (sampled every 50 ms).

Then the run's held-out evaluation of --eval-tasks tasks (greedy and sampled passes)
is timed (`eval_s`).

Last line: one JSON object, {"bench": "episodes", "feedback_tokens_per_s",
"oneshot_tokens_per_s", "raw_tokens_per_s", "feedback_efficiency", "step_s",
"test_call_ms", ...}; feedback_efficiency = feedback over raw tokens per second.

    python -m benchmarks.episodes [--episodes 128] [--group 8] [--rounds 2] [--model-dir DIR]
        [--run-args --inference.block_size 128 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import psutil

from benchmarks import edit_gate
from engines.env.grader import GradingPool
from engines.env.session import EnvSession, Tester
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.types import Task
from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.inference.server_pool import ServerPool
from engines.inference.types import SamplingParams
from engines.model.load import load_tokenizer
from engines.rollout.evaluate import evaluate_tasks
from engines.rollout.step import GradeCache, grade_episodes, pool_tester
from flows.config import RunConfig
from flows.config_loader import load_config

_METRICS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_decode_time_seconds_sum",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


# ---- the warm start -----------------------------------------------------------------


def warm_start(config: RunConfig, work: Path) -> Path:
    """The run's own warm start (same tasks, demonstrations, SFT and key as `tandem run`
    with this config), from the warm-start cache or built into it by the same builder
    as the edit gate's (benchmarks/edit_gate.py: warm_start)."""
    train = generate_micro_tasks(config.tasks.train_tasks, seed=config.tasks.seed)
    folder, _, from_cache = edit_gate.warm_start(config, train, work)
    note(f"[bench] warm start {'from the cache' if from_cache else 'built'}: {folder}")
    return folder


def note(line: str) -> None:
    print(line, file=sys.stderr)


# ---- instruments --------------------------------------------------------------------


class Timers:
    """Thread-safe lists of durations by name."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.values[name].append(seconds)

    def total(self, name: str) -> float:
        return sum(self.values.get(name, ()))

    def median_ms(self, name: str) -> float:
        v = self.values.get(name)
        return round(1000 * statistics.median(v), 2) if v else 0.0


class TimedEnv:
    """An EpisodeEnv that records how long each call waited for a thread: the agent
    loop reads `env.step` in the event loop (submission), the call starts in a thread."""

    def __init__(self, env: EnvSession, timers: Timers) -> None:
        self._env, self._timers = env, timers

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._env, name)
        submitted = time.monotonic()

        def call(*args: Any) -> Any:
            started = time.monotonic()
            self._timers.add("thread_wait", started - submitted)
            try:
                return method(*args)
            finally:
                self._timers.add(f"env_{name}", time.monotonic() - started)

        return call


def timed_tester(tester: Tester, timers: Timers) -> Tester:
    def run(task: Task, workspace) -> Any:
        start = time.monotonic()
        result = tester(task, workspace)
        wall = time.monotonic() - start
        timers.add("test_call", wall)
        timers.add("test_sandbox", result.grading_s)  # from taking a sandbox to the report
        return result

    return run


class CpuLedger:
    """CPU seconds spent while a step runs, by who spent them: the vLLM engine core, its
    API server, the grading sandboxes, this process (the agent loop, the episodes'
    environments, the grading threads and the git subprocesses they reap), and the
    machine's total. Long-lived processes only: a sandbox started mid-step is missed,
    which the warm-up step avoids."""

    def __init__(self) -> None:
        self.start: dict[str, float] = {}
        self.seconds: dict[str, float] = {}

    @staticmethod
    def _role(proc: psutil.Process) -> str:
        words = " ".join([proc.name(), *proc.cmdline()])
        if "EngineCore" in words:
            return "engine_core"
        if "vllm" in words:
            return "api_server"
        if "bwrap" in words or "pytest_server" in words:
            return "sandboxes"
        return "other_children"

    def _snapshot(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                out["client" if proc.pid == me.pid else self._role(proc)] += (
                    t.user + t.system + t.children_user + t.children_system
                )
            except psutil.Error:
                continue
        busy = psutil.cpu_times()
        out["machine"] = sum(busy) - busy.idle - getattr(busy, "iowait", 0.0)
        return out

    def __enter__(self) -> CpuLedger:
        self.start = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._snapshot()
        self.seconds = {k: end[k] - self.start.get(k, 0.0) for k in end}


class ServerWatch:
    """Samples the server's running-request gauge every 50 ms while a step runs."""

    def __init__(self, url: str) -> None:
        self.url, self.samples, self._task = url, [], None

    async def _poll(self, client: httpx.AsyncClient) -> None:
        while True:
            text = (await client.get(f"{self.url}/metrics")).text
            match = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)", text, re.M)
            self.samples.append(float(match.group(1)) if match else 0.0)
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> ServerWatch:
        self._client = httpx.AsyncClient(timeout=10)
        self._task = asyncio.create_task(self._poll(self._client))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self._client.aclose()

    def idle_share(self) -> float:
        return sum(s == 0 for s in self.samples) / max(1, len(self.samples))

    def mean_running(self) -> float:
        return statistics.fmean(self.samples) if self.samples else 0.0


async def counters(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{url}/metrics")).text
    out = {}
    for name in _METRICS:
        values = re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)", text, re.M)
        out[name] = sum(float(v) for v in values)
    return out


# ---- the three paths ----------------------------------------------------------------


async def feedback_step(
    agent: AgentLoop, grader: GradingPool, config: RunConfig, tasks: list[Task], group: int, attempts: int
) -> dict[str, Any]:
    """One step of the rollout path with instruments; returns its figures and episodes."""
    env_cfg = config.env.model_copy(update={"edit_attempts": attempts})
    timers, cache = Timers(), GradeCache()
    tester = timed_tester(pool_tester(grader, cache), timers)
    requests = [
        EpisodeRequest(
            t.instance_id, f"t{i}", s, lambda t=t: TimedEnv(EnvSession.open(t, env_cfg, tester), timers), seed=None
        )
        for i, t in enumerate(tasks)
        for s in range(group)
    ]
    url = agent.pool.urls[0]
    before = await counters(url)
    t0 = time.monotonic()
    with CpuLedger() as cpu:
        async with ServerWatch(url) as watch:
            episodes = await agent.run_episodes(requests)
    t1 = time.monotonic()
    by_id = {t.instance_id: t for t in tasks}
    grades = grade_episodes(grader, cache, [(by_id[e.task_id], e) for e in episodes])
    t2 = time.monotonic()
    after = await counters(url)
    delta = {k.split(":")[1]: after[k] - before[k] for k in _METRICS}
    bad = [e.infra_message for e in episodes if e.infra_failure]
    if bad:
        raise RuntimeError(f"{len(bad)} episodes failed in the harness: {bad[0]}")
    tokens = sum(sum(e.loss_mask) for e in episodes)
    return {
        "episodes": episodes,
        "tokens": tokens,
        "episodes_s": t1 - t0,
        "step_s": t2 - t0,
        "final_grading_s": t2 - t1,
        "resolved": sum(g.resolved for g in grades) / len(grades),
        "turns": sum(e.num_turns for e in episodes),
        "test_calls": len(timers.values.get("test_call", ())),
        "test_call_ms": timers.median_ms("test_call"),
        "test_sandbox_ms": timers.median_ms("test_sandbox"),
        "test_calls_s": timers.total("test_call"),
        "thread_wait_s": timers.total("thread_wait"),
        "thread_wait_ms_p50": timers.median_ms("thread_wait"),
        "env_open_s": timers.total("env_prompt"),
        "generation_s_per_episode": statistics.fmean(e.generation_s for e in episodes),
        "server_idle_share": watch.idle_share(),
        "server_mean_running": watch.mean_running(),
        "vllm": delta,
        "cpu_s": cpu.seconds,
    }


async def raw_batch(pool: ServerPool, episodes: list) -> tuple[int, float, float]:
    """The episodes' prompts with their generated lengths, all at once (one request per length)."""
    by_length: dict[int, list[list[int]]] = defaultdict(list)
    for e in episodes:
        by_length[max(1, sum(e.loss_mask))].append(e.prompt_ids)
    bodies = [
        {
            "model": pool.model_name,
            "prompt": prompts,
            "max_tokens": n,
            "temperature": 0.7,
            "ignore_eos": True,
            "logprobs": 0,
            "return_token_ids": True,
        }
        for n, prompts in by_length.items()
    ]
    async with httpx.AsyncClient(timeout=3600) as client:
        start = time.perf_counter()
        with CpuLedger() as cpu:
            answers = await asyncio.gather(*(client.post(f"{pool.urls[0]}/v1/completions", json=b) for b in bodies))
        seconds = time.perf_counter() - start
    tokens = sum(len(c["token_ids"]) for a in answers for c in a.json()["choices"])
    return tokens, seconds, cpu.seconds.get("engine_core", 0.0)


def turn_requests(episode: Any) -> list[tuple[list[int], int]]:
    """Each model turn of `episode` as (its prompt ids, its generated length): the
    turns are the runs of loss-masked ids in the completion."""
    turns, start = [], None
    for i, (masked, _) in enumerate(zip([*episode.loss_mask, False], [*episode.completion_ids, 0])):
        if masked and start is None:
            start = i
        elif not masked and start is not None:
            turns.append((episode.prompt_ids + episode.completion_ids[:start], i - start))
            start = None
    return turns


async def replay_turns(pool: ServerPool, episodes: list) -> tuple[int, float, float]:
    """Every episode's turns in order through the pool's own transport (the agent loop's
    coalesced requests), each sent as soon as the one before returns."""

    async def episode(turns: list[tuple[list[int], int]]) -> int:
        made = 0
        for prompt, n in turns:
            params = SamplingParams(max_tokens=n, temperature=0.7, ignore_eos=True)
            made += len((await pool.generate(prompt, params)).token_ids)
        return made

    start = time.perf_counter()
    with CpuLedger() as cpu:
        made = await asyncio.gather(*(episode(turn_requests(e)) for e in episodes))
    return sum(made), time.perf_counter() - start, cpu.seconds.get("engine_core", 0.0)


# ---- the run ------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = load_config(RunConfig, None, ["--run", "bench-episodes", *args.run_args])
    if args.sft_steps:
        sft_cfg = config.trainer.sft.model_copy(update={"max_steps": args.sft_steps})
        config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"sft": sft_cfg})})
    work = Path(tempfile.mkdtemp(prefix="bench-episodes-"))
    model_dir = Path(args.model_dir) if args.model_dir else warm_start(config, work)
    inference = config.inference.model_copy(update={"model_dir": str(model_dir), "log_dir": str(work / "logs")})
    tokenizer = load_tokenizer(str(model_dir))
    n_tasks = max(1, args.episodes // args.group)
    heldout = generate_micro_tasks(n_tasks * (args.rounds + 1), seed=config.tasks.seed + 1, split="heldout")
    attempts = config.env.edit_attempts
    fb: list[dict] = []
    one: list[dict] = []
    raw: list[tuple[int, float, float]] = []
    replay: list[tuple[int, float, float]] = []
    grader = GradingPool(config.env)
    try:
        async with ServerPool(inference) as pool:
            agent = AgentLoop(pool, tokenizer, inference)
            await feedback_step(agent, grader, config, heldout[:n_tasks], args.group, attempts)  # warm-up
            for r in range(args.rounds):
                tasks = heldout[(r + 1) * n_tasks : (r + 2) * n_tasks]
                fb.append(await feedback_step(agent, grader, config, tasks, args.group, attempts))
                one.append(await feedback_step(agent, grader, config, tasks, args.group, 0))
                raw.append(await raw_batch(pool, fb[-1]["episodes"]))
                replay.append(await replay_turns(pool, fb[-1]["episodes"]))
            evaluation = await timed_evaluation(agent, grader, config, args.eval_tasks) if args.eval_tasks else {}
    finally:
        grader.close()
    return {**summarize(fb, one, raw, replay, args), **evaluation}


async def timed_evaluation(agent: AgentLoop, grader: GradingPool, config: RunConfig, n: int) -> dict[str, Any]:
    """The run's held-out evaluation (greedy and eval.samples sampled passes, at once) of
    `n` held-out tasks, timed: what each evaluation before and after RL costs."""
    tasks = generate_micro_tasks(n, seed=config.tasks.seed + 1, split="heldout")
    greedy_cfg = agent.cfg.model_copy(update={"sampling": agent.cfg.sampling.model_copy(update={"temperature": 0.0})})
    greedy = AgentLoop(agent.pool, agent.tok, greedy_cfg)
    start = time.monotonic()
    result = await evaluate_tasks(greedy, agent, grader, GradeCache(), config.env, tasks, config.eval.samples, 0)
    return {"eval_s": round(time.monotonic() - start, 1), "eval_tasks": n, "eval_pass_at_1": result.pass_at_1}


def summarize(
    fb: list[dict],
    one: list[dict],
    raw: list[tuple[int, float, float]],
    replay: list[tuple[int, float, float]],
    args: argparse.Namespace,
) -> dict:
    fb_tps = sum(s["tokens"] for s in fb) / sum(s["episodes_s"] for s in fb)
    one_tps = sum(s["tokens"] for s in one) / sum(s["episodes_s"] for s in one)
    raw_tps = sum(t for t, _, _ in raw) / sum(s for _, s, _ in raw)
    replay_tps = sum(t for t, _, _ in replay) / sum(s for _, s, _ in replay)
    # The engine core's CPU per generated token, raw, replayed and in feedback episodes:
    # the work each turn's prefill and smaller batches add, and what sharing the cores
    # with the environment adds to it.
    engine_ms = lambda runs: 1000 * sum(c for _, _, c in runs) / sum(t for t, _, _ in runs)  # noqa: E731
    raw_engine_ms, replay_engine_ms = engine_ms(raw), engine_ms(replay)
    fb_engine_ms = 1000 * sum(s["cpu_s"].get("engine_core", 0.0) for s in fb) / sum(s["tokens"] for s in fb)
    mean = lambda key: round(statistics.fmean(s[key] for s in fb), 3)  # noqa: E731
    vllm = {k: round(statistics.fmean(s["vllm"][k] for s in fb), 3) for k in fb[0]["vllm"]}
    hits = vllm["prefix_cache_hits_total"] / max(1.0, vllm["prefix_cache_queries_total"])
    cpu = {k: round(statistics.fmean(s["cpu_s"].get(k, 0.0) for s in fb), 2) for k in fb[0]["cpu_s"]}
    for s in fb:
        print(
            f"[bench] feedback step {s['step_s']:.1f}s: episodes {s['episodes_s']:.1f}s, final grading "
            f"{s['final_grading_s']:.1f}s, {s['tokens']} tokens, {s['turns']} turns, {s['test_calls']} test calls "
            f"({s['test_calls_s']:.1f}s summed, {s['test_call_ms']} ms each, sandbox {s['test_sandbox_ms']} ms), "
            f"server idle {s['server_idle_share']:.0%}, mean running {s['server_mean_running']:.1f}",
            file=sys.stderr,
        )
    return {
        "bench": "episodes",
        "feedback_tokens_per_s": round(fb_tps, 1),
        "oneshot_tokens_per_s": round(one_tps, 1),
        "raw_tokens_per_s": round(raw_tps, 1),
        "feedback_efficiency": round(fb_tps / raw_tps, 3),
        "feedback_vs_oneshot": round(fb_tps / one_tps, 3),
        "replay_tokens_per_s": round(replay_tps, 1),
        "replay_efficiency": round(replay_tps / raw_tps, 3),  # the server's own ceiling for these turns
        "feedback_vs_replay": round(fb_tps / replay_tps, 3),
        "step_s": mean("step_s"),
        "episodes_s": mean("episodes_s"),
        "final_grading_s": mean("final_grading_s"),
        "oneshot_step_s": round(statistics.fmean(s["step_s"] for s in one), 3),
        "tokens_per_step": mean("tokens"),
        "turns_per_step": mean("turns"),
        "test_calls_per_step": mean("test_calls"),
        "test_call_ms": round(statistics.fmean(s["test_call_ms"] for s in fb), 2),
        "test_sandbox_ms": round(statistics.fmean(s["test_sandbox_ms"] for s in fb), 2),
        "test_calls_s_summed": mean("test_calls_s"),
        "thread_wait_s_summed": mean("thread_wait_s"),
        "generation_s_per_episode": mean("generation_s_per_episode"),
        "server_idle_share": mean("server_idle_share"),
        "server_mean_running": mean("server_mean_running"),
        "prefill_s": vllm["request_prefill_time_seconds_sum"],
        "decode_s": vllm["request_decode_time_seconds_sum"],
        "prompt_tokens": vllm["prompt_tokens_total"],
        "generated_tokens": vllm["generation_tokens_total"],
        "prefix_cache_hit_rate": round(hits, 3),
        "cpu_s": cpu,  # CPU seconds of the episodes (episodes_s of wall), by process
        "engine_cpu_ms_per_token": round(fb_engine_ms, 3),
        "raw_engine_cpu_ms_per_token": round(raw_engine_ms, 3),
        "replay_engine_cpu_ms_per_token": round(replay_engine_ms, 3),
        "resolved": mean("resolved"),
        "episodes": args.episodes,
        "rounds": args.rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=128, help="episodes per step (the run's rl.batch_size)")
    parser.add_argument("--group", type=int, default=8, help="episodes per task (the run's rl.group_size)")
    parser.add_argument("--rounds", type=int, default=2, help="measured steps of each path (after one warm-up)")
    parser.add_argument("--eval-tasks", type=int, default=500, help="held-out tasks of the timed evaluation (0: none)")
    parser.add_argument("--model-dir", help="HF causal LM to serve (default: the cached warm start)")
    parser.add_argument(
        "--sft-steps", type=int, default=0, help="SFT steps of the warm start (0: the run's trainer.sft.max_steps)"
    )
    parser.add_argument(
        "--run-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="run settings, as for `tandem run` (e.g. --inference.block_size 128)",
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
