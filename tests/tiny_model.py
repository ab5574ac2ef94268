"""The suite's tiny MoE: the texts its tokenizer is trained on, shared by the
`tiny_model_dir` fixture and the commands that must build the very same model
(tests/engines/trainer/golden_curve.py)."""

from __future__ import annotations

from pathlib import Path

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "def is_even(n):\n    return n % 2 == 0\n",
    "edit m.py 3\n    return x - 1\n",
    "FAILED test_m.py::test_add - assert 3 == 4\n",
    "view m.py\nsubmit\ntest\nbash\nls -la\n",
] * 50


def make_tiny_model_dir(out: Path) -> Path:
    """A randomly initialised (seeded) tiny Qwen3-MoE with a tokenizer trained on TEXTS."""
    from engines.model.tiny import create_tiny_model

    return create_tiny_model(out, TEXTS)
