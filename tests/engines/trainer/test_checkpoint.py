"""The resumable trainer state of tied and untied models: saved without a warning about
shared tensors, and restored to the same weights."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from accelerate import Accelerator

from engines.model.families import build_tiny
from engines.model.load import load_moe_causal_lm
from engines.trainer.checkpoint import load_latest_state, save_state


def _models(name: str, tiny_model_dir) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Two copies of one architecture with different weights (saved, and restored into)."""
    if name == "tiny":
        torch.manual_seed(0)
        a = load_moe_causal_lm(tiny_model_dir)
        torch.manual_seed(1)
        b = load_moe_causal_lm(tiny_model_dir)
        with torch.no_grad():
            for p in b.parameters():
                p.normal_(0, 0.02)
        return a, b
    return build_tiny(name, seed=0), build_tiny(name, seed=1)


@pytest.mark.parametrize("name", ["tiny", "mixtral"])
def test_state_saves_silently_and_restores_the_weights(name, tiny_model_dir, tmp_path, caplog, capfd):
    saved, restored = _models(name, tiny_model_dir)
    tied = saved.lm_head.weight.data_ptr() == saved.get_input_embeddings().weight.data_ptr()
    assert tied == (name == "tiny")
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(saved)
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_state(accelerator, tmp_path, 0)
    out, err = capfd.readouterr()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] + [str(w.message) for w in caught]
    said += [line for line in (out + err).splitlines() if line.strip()]
    assert not [s for s in said if "shared tensor" in s or "Removed" in s], said

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(restored)
    assert load_latest_state(accelerator, tmp_path) == 0
    ids = torch.randint(5, saved.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, saved(input_ids=ids).logits, rtol=0, atol=0)
    if tied:  # still one tensor after the load, so the next step trains both names
        assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
