"""The FP8 export read by vLLM's own Fp8Config (in the vLLM environment, no GPU needed):
block FP8 with dynamic activations, the router gates and embeddings left unquantised
under vLLM's exact name matching, every quantised weight with its block scales.
Serving it needs FP8 kernels: `scripts/gpu_check.py --checks fp8_export`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from engines.trainer.export import export_weights

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]

PROBE = """
import json, sys
from safetensors import safe_open
from vllm.model_executor.layers.quantization.fp8 import Fp8Config
from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped

out = sys.argv[1]
cfg = json.load(open(f"{out}/config.json"))
q = Fp8Config.from_config(cfg["quantization_config"])
fused = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
skip = lambda prefix: is_layer_skipped(prefix, q.ignored_layers, fused, match_mode=q.ignored_layers_match_mode)
layers = range(cfg["num_hidden_layers"])
names = set(safe_open(f"{out}/model.safetensors", "pt").keys())
print(json.dumps({
    "serialized": q.is_checkpoint_fp8_serialized,
    "block": q.weight_block_size,
    "activation": q.activation_scheme,
    "gates_skipped": all(skip(f"model.layers.{i}.mlp.gate") for i in layers),
    "attention_quantized": not any(skip(f"model.layers.{i}.self_attn.{p}") for i in layers for p in ("qkv_proj", "o_proj")),
    "experts_quantized": not any(skip(f"model.layers.{i}.mlp.experts") for i in layers),
    "scales_missing": sorted(n for n in names if n.endswith("_proj.weight") and n + "_scale_inv" not in names),
}))
"""


@pytest.mark.timeout(1200)  # importing vLLM takes minutes on a busy host
def test_fp8_export_is_what_vllm_fp8config_reads(tiny_model, tmp_path: Path) -> None:
    python = os.environ.get("TANDEM_VLLM_PYTHON")
    if not python:
        pytest.fail("TANDEM_VLLM_PYTHON must name the vLLM environment's python (scripts/setup.sh)")
    out = export_weights(tiny_model, None, str(tmp_path / "fp8"), "fp8")
    proc = subprocess.run([python, "-c", PROBE, out], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {
        "serialized": True,
        "block": [128, 128],
        "activation": "dynamic",
        "gates_skipped": True,
        "attention_quantized": True,
        "experts_quantized": True,
        "scales_missing": [],
    }
