"""An exported trainer checkpoint loads and generates in a real vLLM CPU server."""

import pytest
import torch

from engines.model.load import load_tokenizer
from engines.trainer.export import export_weights
from tests.engines.trainer.vllm_serving import served_greedy_logprobs, transformers_logprobs


@pytest.mark.vllm
@pytest.mark.slow
def test_exported_weights_generate_in_vllm_with_matching_logprobs(tiny_model, tiny_model_dir, tmp_path):
    with torch.no_grad():  # weights that differ from the initial checkpoint
        for p in tiny_model.model.layers[0].mlp.parameters():
            p.mul_(1.5)
    out = export_weights(tiny_model, load_tokenizer(tiny_model_dir), str(tmp_path / "v1"), "fp32")
    prompt_ids = load_tokenizer(out).encode("def add(a, b):\n    return", add_special_tokens=False)
    ids, got = served_greedy_logprobs(out, prompt_ids, max_tokens=6, max_model_len=512, log_dir=tmp_path)
    assert len(ids) > 0
    # Same weights in transformers: the logprob of each generated token agrees.
    ref = transformers_logprobs(out, prompt_ids, ids)
    assert got == pytest.approx(ref, abs=0.02), (got, ref)
