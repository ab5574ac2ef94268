"""Prefect tasks of the warm start: create the tiny model, fine-tune it on oracle
demonstrations (or copy a cached warm start into the lake), publish it as weight
version 0."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.env.micro import DemonstrationKind, EditTool
from engines.env.micro_demos import oracle_messages, warm_start_demonstrations
from engines.env.types import Task
from engines.model import hub
from engines.model.tiny import TinyModelConfig, create_tiny_model
from engines.protocol import render_messages
from engines.trainer.config import TrainerConfig
from engines.trainer.sft import sft
from engines.trainer.warm_start_cache import copy_to_store
from storage import checkpoints
from storage.fs import Store


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
    all trained (engines/env/micro_demos.py)."""
    if edit_attempts:
        return warm_start_demonstrations(tasks, edit_attempts, failed_share, seed, tool, kind)
    return [oracle_messages(t, tool) for t in tasks]


@task(name="create-tiny-model", cache_policy=NO_CACHE)
def create_model(out_dir: str, conversations: list[list[dict[str, str]]], cfg: TinyModelConfig) -> str:
    """Tokenizer trained on the demonstrations' text, random tiny Qwen3-MoE."""
    texts = (render_messages(c) for c in conversations)
    return str(create_tiny_model(out_dir, texts, cfg))


@task(name="sft", cache_policy=NO_CACHE)
def fine_tune(
    model_dir: str, conversations: list[list[dict[str, str]]], out_uri: str, cfg: TrainerConfig, store: Store | None
) -> str:
    """Fine-tune and export to `out_uri` on the lake `store` (local path or s3:// URL;
    without a store, a local folder)."""
    sft(model_dir, conversations, out_uri, cfg, store=store)
    return out_uri


@task(name="copy-warm-start", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def copy_warm_start(local: Path, store: Store, uri: str) -> str:
    """A cached warm start into the run's weights folder on the lake."""
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
