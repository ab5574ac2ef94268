from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def tiny_model(tiny_model_dir):
    from engines.model.load import load_moe_causal_lm

    torch.manual_seed(0)
    return load_moe_causal_lm(tiny_model_dir)
