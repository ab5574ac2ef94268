"""Warm starts cached by a hash of everything that makes them.

A warm start (the tiny MoE and its tokenizer after SFT on demonstrations) is a function
of the training tasks (their content hash), how the demonstrations are written (kind,
edit protocol, failed-attempt share, edit tool, demonstrator, seed), the SFT settings, the trainer
settings SFT reads (`SFT_TRAINER_FIELDS`), the tiny model's shape, and the code of the
modules that make it (`CODE_MODULES`). `warm_start_key` hashes all of them; `cached`
builds a warm start once per key under `<cache>/warm-starts/<key>` ($TANDEM_CACHE, else
~/.cache/tandem-rl), atomically (storage/atomic_dir.py: a folder there is complete), so
a later run with the same inputs copies it in seconds instead of training for minutes.

Not seen by the key: the machine's speed when `max_seconds` ends SFT before
`max_steps` (a busy machine trains fewer steps, and that warm start is what is cached),
and the Python code installed beside the trainer, which a corpus run's drills and its
project-neutral tokenizer read (another environment draws other names); runs that must
not reuse one set `trainer.sft.cache = false`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage.atomic_dir import atomic_dir
from storage.fs import Store

_REPO = Path(__file__).resolve().parents[2]

# The modules whose code decides a warm start's weights: tasks and oracle edits, the
# demonstrations, edit feedback's observations, the model and tokenizer, the chat
# template, SFT and what it calls on one rank (packing, the trainee and its optimizer,
# the output head, clipping, export). The sharded path's own modules (sharded_load.py,
# expert_parallel.py, full_state.py) are left out: their tests hold them to one rank's
# weights, and each change of a listed module costs the default run a rebuilt warm start.
CODE_MODULES = (
    "engines/env/task_sources/micro.py",
    "engines/env/edits.py",
    "engines/env/task_sources/edit_forms.py",
    "engines/env/views.py",
    "engines/env/task_sources/micro_demos.py",
    "engines/env/edit_spans.py",
    "engines/env/scopes.py",
    "engines/env/session.py",
    "engines/env/task_sources/mutations.py",
    "engines/env/feedback.py",
    "engines/model/tiny.py",
    "engines/model/tokenizer.py",
    "engines/protocol.py",
    "engines/trainer/sft.py",
    "engines/trainer/packing.py",
    "engines/trainer/rl_step.py",
    "engines/trainer/distributed.py",
    "engines/trainer/parallelize.py",
    "engines/trainer/chunked_logprobs.py",
    "engines/trainer/loss.py",
    "engines/trainer/grad_clip.py",
    "engines/trainer/export.py",
)

# What only a corpus run's warm start reads (tasks.kind = corpus): its demonstrations, the
# renaming and the drills. Left out of a micro run's key, so a change
# here leaves the default run's warm start cached.
CORPUS_MODULES = (
    "engines/env/task_sources/repo_demos.py",
    "engines/env/task_sources/renamed_demos.py",
    "engines/env/task_sources/copy_drills.py",
    "engines/env/task_sources/edit_drills.py",
)

# The TrainerConfig fields that make SFT's weights (besides `sft`): its optimizer, rows,
# export, and the trainer path it trains through (ranks, sharding, precision, output
# head, recompute). The RL-only ones (lr, loss, ...) are left out, so sweeping them
# reuses one warm start.
SFT_TRAINER_FIELDS = (
    "seed",
    "betas",
    "weight_decay",
    "grad_clip",
    "seq_len",
    "packing",
    "export_format",
    "processes",
    "parallelism",
    "expert_parallel_size",
    "mixed_precision",
    "logprob_chunk_tokens",
    "activation_checkpointing",
    "compile",
)
# Read by SFT but placing its ranks only (which GPUs), so not in the key.
SFT_PLACEMENT_FIELDS = ("devices",)

INPUTS_FILE = "warm_start_inputs.json"  # beside the weights: what the key was made of, for people


def code_digest(modules: tuple[str, ...] = CODE_MODULES, root: Path = _REPO) -> str:
    """sha256 over the path and the bytes of each module."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.encode() + b"\0" + (root / module).read_bytes() + b"\0")
    return digest.hexdigest()


def warm_start_inputs(
    tasks: str,
    demonstrations: Mapping[str, Any],
    sft: Mapping[str, Any],
    trainer: Mapping[str, Any],
    model: Mapping[str, Any],
    code: str,
) -> dict[str, Any]:
    """Everything a warm start is made of, as plain JSON values. `tasks` identifies the
    training tasks (engines/env/task_sources/corpus.py: corpus_id), `code` the modules (code_digest)."""
    return {
        "tasks": tasks,
        "demonstrations": dict(demonstrations),
        "sft": dict(sft),
        "trainer": dict(trainer),
        "model": dict(model),
        "code": code,
    }


def warm_start_key(inputs: Mapping[str, Any]) -> str:
    """16 hex digits of the sha256 of `inputs` (warm_start_inputs), key order aside."""
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem-rl")) / "warm-starts"


def cached(
    key: str,
    build: Callable[[Path], object],
    root: Path | None = None,
    inputs: Mapping[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """The warm start of `key`, built by `build(empty_dir)` when no complete one is cached.
    Two builders of one key at once both build; the first to finish is kept."""
    target = (root or cache_root()) / key
    if target.is_dir():
        log(f"[sft] warm start from the cache: key {key} ({target})")
        return target
    log(f"[sft] building the warm start (key {key}; cached in {target})")
    with atomic_dir(target, replace=False) as stage:
        build(stage)
        if inputs is not None:
            (stage / INPUTS_FILE).write_text(json.dumps(inputs, indent=2, sort_keys=True, default=str))
    return target


def copy_to_store(src: Path, store: Store, uri: str) -> str:
    """Copy the folder `src` to `uri` (a path inside `store`: local, or an s3:// URL) and
    return `uri`; an earlier copy there is replaced. The weights record published after
    it is the commit (storage/checkpoints.py)."""
    if store.protocol == "file":
        with atomic_dir(uri) as stage:
            shutil.copytree(src, stage, dirs_exist_ok=True)
        return uri
    path = uri.removeprefix(f"{store.protocol}://")
    if store.call("check copy", lambda: store.fs.exists(path)):
        store.call("replace copy", lambda: store.fs.rm(path, recursive=True))
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        target = f"{path}/{f.relative_to(src).as_posix()}"
        store.call(f"upload {f.name}", lambda f=f, t=target: store.fs.put_file(str(f), t))
    return uri
