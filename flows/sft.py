"""The `sft` flow: the warm start that becomes weight version 0.

With `model.path` set, those weights are version 0 as they are. Otherwise a tiny
Qwen3-MoE is created (tokenizer trained on the demonstrations) and fine-tuned on
the oracle episodes of the training tasks, so RL starts from a policy that
sometimes succeeds. Idempotent: a run that already has version 0 reuses it.
"""

from __future__ import annotations

from prefect import flow
from prefect.utilities.annotations import quote

from engines.env.corpus import load_corpus
from flows.run_config import RunConfig
from flows.runtime import work_dir
from storage import checkpoints
from storage.errors import NotFoundError
from storage.fs import open_store
from tasks.training import create_model, demonstrations, fine_tune, initial_dir, publish, resolve_model


@flow(name="sft", log_prints=True)
def warm_start(config: RunConfig, corpus_dir: str) -> str:
    """Return the URI of weight version 0, creating it when needed."""
    store = open_store(config.storage)
    try:
        return checkpoints.get(store, config.run, 0).uri
    except NotFoundError:
        pass
    if config.model.path:
        return publish(store, config.run, 0, -1, resolve_model(config.model.path))
    train = [t for t in load_corpus(corpus_dir) if t.split == "train"]
    sft = config.trainer.sft
    demos = demonstrations(
        quote(train), config.env.edit_attempts, sft.failed_attempt_share, config.tasks.seed, sft.edit_tool
    )
    init = create_model(initial_dir(work_dir(config)), quote(demos), config.model.tiny)
    uri = checkpoints.weights_uri(store, config.run, 0)
    fine_tune(init, quote(demos), uri, config.trainer, store)
    return publish(store, config.run, 0, -1, uri)
