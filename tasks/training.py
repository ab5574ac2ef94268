"""Prefect tasks of the warm start: create the tiny model, fine-tune it on oracle
demonstrations (or copy a cached warm start into the lake), publish it as weight
version 0."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.edit_forms import EditTool
from engines.env.task_sources.micro_demos import DemonstrationKind, oracle_messages, warm_start_demonstrations
from engines.env.task_sources.repo_demos import PatchTester, pool_tester, repo_demonstrations
from engines.env.types import Task
from engines.model import hub
from engines.model.chat_format import ChatFormat
from engines.model.copy_check import copied_share
from engines.model.load import load_tokenizer
from engines.model.tiny import TinyModelConfig, create_tiny_model
from engines.protocol import render_messages
from engines.trainer.config import TrainerConfig
from engines.trainer.sft import sft
from engines.trainer.warm_start_cache import copy_to_store
from storage import checkpoints
from storage.fs import Store
from tasks.progress import say


@task(name="oracle-demonstrations", cache_policy=NO_CACHE)
def demonstrations(
    tasks: list[Task],
    edit_attempts: int,
    failed_share: float,
    seed: int,
    tool: EditTool,
    kind: DemonstrationKind = "oracle",
) -> list[list[dict]]:
    """Episodes of the micro tasks in the run's protocol, each edit written with `tool`.
    oracle: plain edit then submit, or under edit feedback a share of them with failed
    attempts first (masked); candidates: the uniform-candidate demonstrator's attempts,
    all trained (engines/env/task_sources/micro_demos.py)."""
    if edit_attempts:
        return warm_start_demonstrations(tasks, edit_attempts, failed_share, seed, tool, kind)
    return [oracle_messages(t, tool) for t in tasks]


@task(name="repository-demonstrations", cache_policy=NO_CACHE)
def repository_demonstrations(
    tasks: list[Task], attempts: int, seed: int, env: EnvConfig, per_task: int = 1, old_tokens: int = 2
) -> list[list[dict]]:
    """Episodes of the candidate demonstrator on tasks from real repositories, each tried
    candidate's verdict from the task's own tests in the grading pool (engines/env/task_sources/repo_demos.py)."""
    with GradingPool(env) as pool:
        tester = _with_progress(pool_tester(pool))
        demos = repo_demonstrations(tasks, attempts, seed, tester, env.view_lines, per_task, old_tokens)
    if not demos:
        raise ValueError(
            f"none of the {len(tasks)} training tasks has a fix among the candidate demonstrator's edits (a removed "
            "statement or `not`, or a fix of several lines): build a corpus with other mutation kinds, or set model.path"
        )
    say(f"[sft] {len(demos)} demonstrations from {len(tasks)} repository tasks")
    return demos


def _with_progress(test: PatchTester, every: int = 200) -> PatchTester:
    """`test` in chunks of `every` edits, a progress line after each: a corpus's candidates
    take many minutes in the sandbox. Each edit is tested on its own, so chunks change nothing."""

    def run(items: Sequence[tuple[Task, str]]) -> list[dict[str, str] | None]:
        out: list[dict[str, str] | None] = []
        start = time.monotonic()
        for first in range(0, len(items), every):
            out += test(items[first : first + every])
            say(
                f"[sft] tested {len(out)} of {len(items)} candidate edits in the sandbox ({time.monotonic() - start:.0f} s)"
            )
        return out

    return run


@task(name="fit-demonstrations", cache_policy=NO_CACHE)
def fit_demonstrations(model_dir: str, conversations: list[list[dict]], seq_len: int) -> list[list[dict]]:
    """The demonstrations that fit `seq_len` tokens of the model's tokenizer, and one line
    with their measured lengths (what trainer.seq_len and the served context must hold)."""
    chat = ChatFormat.from_tokenizer(load_tokenizer(model_dir), model_dir)
    lengths = [len(chat.conversation(c)[0]) for c in conversations]
    kept = [c for c, n in zip(conversations, lengths) if n <= seq_len]
    ranked = sorted(lengths)
    say(
        f"[sft] demonstration tokens: median {ranked[len(ranked) // 2]}, 95th percentile "
        f"{ranked[int(0.95 * (len(ranked) - 1))]}, max {ranked[-1]}; {len(conversations) - len(kept)} of "
        f"{len(conversations)} longer than trainer.seq_len = {seq_len} left out"
    )
    if not kept:
        raise ValueError(
            f"no demonstration fits trainer.seq_len = {seq_len}: raise it (and model.tiny.max_position_embeddings)"
        )
    return kept


@task(name="create-tiny-model", cache_policy=NO_CACHE)
def create_model(
    out_dir: str, conversations: list[list[dict[str, str]]], cfg: TinyModelConfig, code: list[str] | None = None
) -> str:
    """Tokenizer trained on the demonstrations' text (and `code`: the training projects'
    source files, so real identifiers are whole tokens), random tiny Qwen3-MoE."""
    texts = itertools.chain((render_messages(c) for c in conversations), code or ())
    return str(create_tiny_model(out_dir, texts, cfg))


@task(name="sft", cache_policy=NO_CACHE)
def fine_tune(
    model_dir: str, conversations: list[list[dict[str, str]]], out_uri: str, cfg: TrainerConfig, store: Store | None
) -> str:
    """Fine-tune and export to `out_uri` on the lake `store` (local path or s3:// URL;
    without a store, a local folder)."""
    sft(model_dir, conversations, out_uri, cfg, store=store)
    return out_uri


@task(name="copy-check", cache_policy=NO_CACHE)
def copy_check(model_dir: str, drills: list[list[dict[str, str]]]) -> tuple[float, list[str]]:
    """The share of `drills` the model answers exactly, greedy, and a few of its misses."""
    return copied_share(model_dir, drills)


@task(name="copy-warm-start", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def copy_warm_start(local: Path, store: Store, uri: str) -> str:
    """A local model folder (a cached warm start, or model.path's weights) into the run's
    weights folder on the lake."""
    return copy_to_store(local, store, uri)


@task(name="resolve-model", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
def resolve_model(path: str) -> str:
    """A local directory for `path` (a Hugging Face id is fetched into the Hub cache once)."""
    return hub.resolve_model(path)


@task(name="publish-weights", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish(store: Store, run: str, version: int, step: int, uri: str) -> str:
    checkpoints.publish(store, run, version, step, uri)
    return uri


def initial_dir(work: Path) -> str:
    return str(work / "init-model")
