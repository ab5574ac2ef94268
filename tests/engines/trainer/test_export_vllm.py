"""An exported trainer checkpoint loads and generates in a real vLLM CPU server."""

import asyncio
import os

import httpx
import pytest
import torch

from engines.inference.launch import vllm_python
from engines.inference.server_process import LocalServer, free_port
from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.trainer.export import export_weights


@pytest.mark.vllm
@pytest.mark.slow
def test_exported_weights_generate_in_vllm_with_matching_logprobs(tiny_model, tiny_model_dir, tmp_path):
    with torch.no_grad():  # weights that differ from the initial checkpoint
        for p in tiny_model.model.layers[0].mlp.parameters():
            p.mul_(1.5)
    out = export_weights(tiny_model, load_tokenizer(tiny_model_dir), str(tmp_path / "v1"), "fp32")
    port = free_port()
    argv = [
        vllm_python(),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        out,
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    server = LocalServer(argv, env, f"http://127.0.0.1:{port}", tmp_path / "vllm.log")
    server.start()
    try:
        asyncio.run(server.wait_healthy(300))
        tok = load_tokenizer(out)
        prompt_ids = tok.encode("def add(a, b):\n    return", add_special_tokens=False)
        body = {
            "model": out,
            "prompt": prompt_ids,
            "max_tokens": 6,
            "temperature": 0,
            "logprobs": 1,
            "return_token_ids": True,
        }
        resp = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)
        assert resp.status_code == 200, resp.text
        choice = resp.json()["choices"][0]
        ids = choice.get("token_ids") or tok.convert_tokens_to_ids(choice["logprobs"]["tokens"])
        assert len(ids) > 0
        # Same weights in transformers: the logprob of each generated token agrees.
        model = load_moe_causal_lm(out)
        seq = torch.tensor([prompt_ids + list(ids)])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=seq).logits[0, :-1].float(), -1)
        ref = [logp[len(prompt_ids) - 1 + i, t].item() for i, t in enumerate(ids)]
        got = choice["logprobs"]["token_logprobs"][: len(ids)]
        assert got == pytest.approx(ref, abs=0.02), (got, ref)
    finally:
        server.stop()
