import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engines.inference.vllm_extension.tensor_digest import file_digests, read_digests
from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.trainer.export import dequantize_fp8_blockwise, export_weights, quantize_fp8_blockwise


def _ids(model, n=32):
    return torch.randint(5, model.config.vocab_size, (2, n), generator=torch.Generator().manual_seed(0))


def test_fp32_export_loads_with_identical_logits(tiny_model, tiny_model_dir, tmp_path):
    with torch.no_grad():
        tiny_model.model.layers[0].mlp.gate.weight.add_(0.5)  # not the initial weights
    out = export_weights(tiny_model, load_tokenizer(tiny_model_dir), str(tmp_path / "v1"), "fp32")
    keys = load_file(f"{out}/model.safetensors").keys()
    assert "model.layers.0.mlp.experts.7.down_proj.weight" in keys  # per-expert layout vLLM loads
    loaded = load_moe_causal_lm(out)
    ids = _ids(tiny_model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, tiny_model(input_ids=ids).logits, rtol=0, atol=0)
    assert load_tokenizer(out).chat_template == load_tokenizer(tiny_model_dir).chat_template


def test_reexport_replaces_the_directory(tiny_model, tmp_path):
    dest = str(tmp_path / "v1")
    export_weights(tiny_model, None, dest, "fp32")
    export_weights(tiny_model, None, dest, "bf16")
    assert json.loads((tmp_path / "v1" / "config.json").read_text())["dtype"] == "bfloat16"
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]  # no staging leftovers
    assert read_digests(dest) == file_digests(dest)  # the digests describe the bf16 tensors written last


def test_fp8_blockwise_roundtrip_by_hand():
    w = torch.randn(200, 130)
    q, s = quantize_fp8_blockwise(w)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (2, 2)
    assert s[0, 0] == pytest.approx(w[:128, :128].abs().max().item() / 448)
    err = (dequantize_fp8_blockwise(q, s) - w).abs() / w.abs().max()
    assert err.max() < 2**-4  # e4m3 keeps 3 mantissa bits


def test_fp8_export_numerics_against_bf16(tiny_model, tmp_path):
    bf16 = export_weights(tiny_model, None, str(tmp_path / "bf16"), "bf16")
    fp8 = export_weights(tiny_model, None, str(tmp_path / "fp8"), "fp8")
    qcfg = json.loads((tmp_path / "fp8" / "config.json").read_text())["quantization_config"]
    assert qcfg["quant_method"] == "fp8" and qcfg["weight_block_size"] == [128, 128]
    ref, quant = load_file(f"{bf16}/model.safetensors"), load_file(f"{fp8}/model.safetensors")
    name = "model.layers.1.mlp.experts.3.gate_proj.weight"
    assert quant[name].dtype == torch.float8_e4m3fn
    assert quant["model.layers.1.mlp.gate.weight"].dtype == torch.bfloat16  # router stays unquantised
    # Dequantise every FP8 weight into a model and compare its logits with the bf16 export's.
    deq = {}
    for k, v in quant.items():
        if k.endswith("_scale_inv"):
            continue
        deq[k] = dequantize_fp8_blockwise(v, quant[k + "_scale_inv"]) if v.dtype == torch.float8_e4m3fn else v.float()
        rel = (deq[k] - ref[k].float()).norm() / ref[k].float().norm().clamp(min=1e-12)
        assert rel < 0.05, k
    # Load the dequantised weights through from_pretrained (per-expert keys -> fused experts).
    deq_dir = tmp_path / "dequantised"
    shutil.copytree(bf16, deq_dir)
    save_file(deq, str(deq_dir / "model.safetensors"), metadata={"format": "pt"})
    a, b = load_moe_causal_lm(bf16), load_moe_causal_lm(deq_dir)
    ids = _ids(a)
    with torch.no_grad():
        la, lb = a(input_ids=ids).logits, b(input_ids=ids).logits
    print("fp8 logits rel err", ((la - lb).norm() / la.norm()).item(), (la.argmax(-1) == lb.argmax(-1)).float().mean())
    assert (la - lb).norm() / la.norm() < 0.1
    assert (la.argmax(-1) == lb.argmax(-1)).float().mean() > 0.8


@pytest.mark.s3
def test_export_to_s3_loads_back(tiny_model, tiny_model_dir, s3_bucket):
    from storage.fs import open_store

    store = open_store(f"s3://{s3_bucket}/lake")
    uri = export_weights(tiny_model, load_tokenizer(tiny_model_dir), store.url("run/weights/v1"), "fp32", store=store)
    loaded = load_moe_causal_lm(uri)
    ids = _ids(tiny_model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, tiny_model(input_ids=ids).logits)


@pytest.mark.parametrize("family", ["tiny", "mixtral"])
def test_export_is_silent_and_reloads_with_identical_logits(family, tiny_model, tmp_path, caplog, capfd):
    import logging
    import warnings

    from engines.model.families import build_tiny

    model = tiny_model if family == "tiny" else build_tiny(family)
    capfd.readouterr()
    with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = export_weights(model, None, str(tmp_path / "v1"), "fp32")
    said = [r.getMessage() for r in caplog.records] + [str(w.message) for w in caught]
    said += capfd.readouterr().err.splitlines()
    assert not [s for s in said if "shared tensor" in s or "Removed" in s], said
    loaded = load_moe_causal_lm(out)
    ids = _ids(model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=0)
