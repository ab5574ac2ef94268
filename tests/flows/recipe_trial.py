"""A recipe of configs/ made to run its first steps on a 2-core CPU: the recipe's own
loop (its tasks, protocol, sampling, trainer objective, export and storage kind), with
its model swapped for the tiny test model of its family (tests/chat_models.py) and
what a CPU cannot honour switched off:

- inference.cluster (FP8, tensor/data/expert parallel, routed-expert capture,
  prefill/decode disaggregation) and device lists: vLLM's GPU build only;
- lanes on other machines, servers on several hosts and a trainer over several nodes:
  the trial is one machine;
- trainer ranks, FSDP2 and context parallel (one CPU process trains), torch.compile;
- trainer.router_replay = "on" becomes "auto": the routes it requires come from
  routed-expert capture, switched off above;
- trainer.export_format = "fp8" becomes "bf16": FP8 weights need GPU kernels to serve;
- trainer.mixed_precision = "bf16" becomes "fp32", the faster on a CPU;
- contexts, KV cache, servers, workers, turns and tokens capped (`CAPS`), CUDA graphs off;
- 2 RL steps of 4 episodes, 1 held-out task evaluated, a warm start of a few SFT steps.

A test helper, not a `tandem run` option: the tiny models of other families are test
models (their chat templates written in tests/chat_models.py), which a user's machine
would not have; the switches below are the cluster keys each recipe sets.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

RECIPES = Path(__file__).resolve().parents[2] / "configs"

# The test model of each recipe's family (a name of tests/chat_models.py TEMPLATES); None: the
# recipe leaves model.path unset and the run creates and warm-starts the project's tiny model.
FAMILY: dict[str, str | None] = {
    "tiny": None,
    "repos": None,
    "corpus": "olmoe",  # OLMoE-1B-7B-0924-Instruct's template
    "qwen3-30b-a3b-8gpu": "qwen3",
    "glm5-multinode": "glm",  # GLM-4.5's template and architecture (GLM-5's is refused by the CPU build)
}

# Upper bounds of a trial: a value the recipe sets above its bound is lowered to it.
CONTEXT = 2048  # a real project's prompt with the failing tests' output fits it
CAPS: dict[str, int | float] = {
    "inference.num_servers": 1,
    "inference.max_model_len": CONTEXT,
    "inference.kv_cache_gb": 0.25,
    "inference.max_num_seqs": 4,
    "inference.concurrency_per_server": 4,
    "inference.sampling.max_tokens_per_turn": 64,
    "inference.limits.max_turns": 4,
    "inference.limits.max_total_tokens": CONTEXT,
    "inference.limits.max_observation_tokens": 512,
    "inference.limits.max_concurrent_episodes": 4,
    "inference.limits.wall_seconds": 300.0,  # an episode that stalls fails the trial in minutes, not an hour
    "inference.startup_timeout_s": 600.0,
    "env.workers": 2,
    "env.limits.wall_timeout_s": 60.0,
    "trainer.seq_len": CONTEXT,
    "trainer.sft.max_steps": 4,
    "trainer.sft.batch_size": 4,
    "trainer.sft.copy_drill_hint_steps": 2,
    "trainer.sft.copy_drill_steps": 2,
    "trainer.sft.copy_drill_min_copied": 0.0,  # two drill steps form no copying: the trial walks the path
    "trainer.sft.copy_drill_long_steps": 2,
    "trainer.sft.edit_drill_steps": 2,
    "tasks.train_tasks": 8,
    "tasks.heldout_tasks": 1,
}

# Set whatever the recipe says: the shape of the trial.
FIXED: dict[str, Any] = {
    "rl.steps": 2,
    "rl.batch_size": 4,
    "rl.group_size": 2,
    "eval.tasks": 1,
    "eval.samples": 1,
    "inference.enforce_eager": True,
}

# Cluster settings the CPU cannot honour, removed (their defaults are off).
REMOVED = (
    "inference.cluster",
    "inference.devices",
    "inference.hosts",
    "inference.host",
    "trainer.processes",
    "trainer.parallelism",
    "trainer.expert_parallel_size",
    "trainer.context_parallel_size",
    "trainer.devices",
    "trainer.share_devices",
    "trainer.compile",
    "trainer.nodes",
    "trainer.rendezvous",
    "lanes",
)

# Values replaced by what the CPU build serves and trains.
REPLACED: dict[str, tuple[Any, Any]] = {
    "trainer.router_replay": ("on", "auto"),
    "trainer.export_format": ("fp8", "bf16"),
    "trainer.mixed_precision": ("bf16", "fp32"),
}


def recipe(name: str) -> dict[str, Any]:
    """configs/NAME.toml as written."""
    return tomllib.loads((RECIPES / f"{name}.toml").read_text())


def trial(name: str, root: str, model_path: Path | None = None, corpus: Path | None = None) -> dict[str, Any]:
    """configs/NAME.toml as a 2-step trial writing to `root`; `model_path` replaces the
    recipe's model (required when its family has a test model), `corpus` its corpus."""
    data = recipe(name)
    if (FAMILY[name] is None) != (model_path is None):
        raise ValueError(f"{name}: give model_path exactly when the recipe's family has a test model")
    if model_path is not None:
        _set(data, "model.path", str(model_path))
    if corpus is not None:
        data["tasks"].pop("build", None)  # the corpus exists: nothing to build
        _set(data, "tasks.corpus_path", str(corpus))
    _set(data, "run", name)
    _set(data, "storage.root", root)
    for key in REMOVED:
        _pop(data, key)
    for key, (recipe_value, value) in REPLACED.items():
        if _get(data, key) == recipe_value:
            _set(data, key, value)
    for key, cap in CAPS.items():
        if (value := _get(data, key)) is not None and value > cap:
            _set(data, key, cap)
    for key, value in FIXED.items():
        _set(data, key, value)
    return data


def merge(data: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`data` with `overlay`'s keys set over it, section by section (in place)."""
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            merge(data[key], value)
        else:
            data[key] = value
    return data


def widen_positions(model_dir: Path, positions: int = CONTEXT) -> Path:
    """The test model with `positions` positions, so a real project's prompt fits (the
    families' default rope has no table to resize)."""
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    config["max_position_embeddings"] = positions
    path.write_text(json.dumps(config, indent=2))
    return model_dir


def to_toml(data: dict[str, Any]) -> str:
    """TOML text of nested tables of strings, numbers, booleans and lists of them."""
    lines = _table(data, "")
    return "\n".join(lines) + "\n"


def _table(data: dict[str, Any], prefix: str) -> list[str]:
    values = [f"{key} = {_value(v)}" for key, v in data.items() if not isinstance(v, dict)]
    lines = [f"[{prefix[:-1]}]", *values] if prefix and values else values
    for key, value in data.items():
        if isinstance(value, dict):
            lines += _table(value, f"{prefix}{key}.")
    return lines


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *sections, last = dotted.split(".")
    for part in sections:
        data = data.setdefault(part, {})
    data[last] = value


def _pop(data: dict[str, Any], dotted: str) -> None:
    *sections, last = dotted.split(".")
    parent = _get(data, ".".join(sections)) if sections else data
    if isinstance(parent, dict):
        parent.pop(last, None)
