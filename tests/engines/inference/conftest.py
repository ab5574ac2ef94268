"""Fixtures for the inference tests: one real vLLM CPU server per test session.

The pool's HTTP client belongs to the event loop it runs on, so the session's pool
and every test that uses it run on one session-wide loop (`run`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from engines.inference.config import InferenceConfig
from engines.inference.launch import VLLM_PYTHON_ENV

T = TypeVar("T")


def small_config(model_dir: Path, **overrides: Any) -> InferenceConfig:
    """A server sized for a 2-core CPU: short context, a quarter-GB KV cache, eager mode; the text
    actions unless `tool_format` is given (the default, 'auto', would follow the template)."""
    base: dict[str, Any] = {
        "model_dir": str(model_dir),
        "tool_format": "text",
        "max_model_len": 1024,
        "dtype": "float32",  # the CPU build would downcast to bfloat16; float32 matches transformers' logprobs
        "kv_cache_gb": 0.25,  # 131,072 float32 tokens of the tiny MoE: 4 times its 32 full contexts
        "max_num_seqs": 32,
        "concurrency_per_server": 32,
        "startup_timeout_s": 240,
        "request_timeout_s": 120,
        "sampling": {"max_tokens_per_turn": 32},
        "limits": {"max_turns": 4, "max_total_tokens": 512, "wall_seconds": 120},
    }
    base.update(overrides)
    return InferenceConfig.model_validate(base)


@pytest.fixture(scope="session")
def vllm_available() -> str:
    path = os.environ.get(VLLM_PYTHON_ENV)
    if not path or not Path(path).is_file():
        pytest.fail(
            f"{VLLM_PYTHON_ENV} must name the vLLM environment's python: source scripts/setup.sh, or deselect with -m 'not vllm'"
        )
    return path


@pytest.fixture(scope="session")
def session_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def run(session_loop: asyncio.AbstractEventLoop) -> Callable[[Awaitable[T]], T]:
    """Run a coroutine on the session loop (where the shared pool lives)."""
    return lambda coro: session_loop.run_until_complete(coro)


@pytest.fixture(scope="session")
def pool(vllm_available: str, tiny_model_dir: Path, run: Callable[[Awaitable[Any]], Any]) -> Iterator[Any]:
    """One local vLLM server serving the tiny MoE, shared by the session's tests."""
    from engines.inference.server_pool import ServerPool

    # Room for the crash tests' restarts (test_weight_update.py, test_pool_faults.py) across the session.
    server_pool = ServerPool(small_config(tiny_model_dir, max_restarts=10))
    run(server_pool.start())
    try:
        yield server_pool
    finally:
        run(server_pool.close())


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def second_checkpoint(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same architecture and tokenizer with other random weights (a 'trained' version)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(123)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    out = tmp_path_factory.mktemp("tiny-moe-v1")
    model.save_pretrained(out, safe_serialization=True)
    return out
