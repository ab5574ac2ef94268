"""Exercise the cluster options of the inference engine on a GPU machine.

Runs what the CPU build refuses, each as its own short check against real local
vLLM servers (the GPU build, `vllm`, in the environment TANDEM_VLLM_PYTHON names):

  reload     in-place weight update (pause, reload, resume) serves the new checkpoint
             exactly: served logprobs vs transformers on it (the CPU build cannot)
  fp8        --quantization fp8 starts and generates
  routes     routed-expert capture returns [positions, layers, top_k] per turn
  ep         expert parallel over the visible GPUs (needs >= 2)
  pd         prefill/decode disaggregation flags reach the servers (NixlConnector)

Each check prints one line (ok / FAILED / skipped, with the reason); the last line is
one JSON object with every check's result. Not part of the test suite (no GPU here).

    TANDEM_VLLM_PYTHON=... python scripts/gpu_check.py --model-dir DIR [--checks reload,fp8,routes]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engines.inference.config import InferenceConfig  # noqa: E402
from engines.inference.server_pool import ServerPool  # noqa: E402
from engines.inference.types import SamplingParams  # noqa: E402

PROMPT = [1, 40, 41, 42, 43, 4, 2]


def config(model_dir: Path, **overrides: Any) -> InferenceConfig:
    base: dict[str, Any] = {"model_dir": str(model_dir), "max_model_len": 1024, "kv_cache_gb": 2, "dtype": "float32", "enforce_eager": True}
    base.update(overrides)
    return InferenceConfig.model_validate(base)


def perturbed_copy(model_dir: Path, out: Path) -> Path:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05 * p.std().clamp(min=1e-3))
    model.save_pretrained(out, safe_serialization=True)
    return out


def logprob_error(checkpoint: Path, completion: Any) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([PROMPT + completion.token_ids])).logits[0].float(), -1)
    expected = [logp[len(PROMPT) - 1 + i, t].item() for i, t in enumerate(completion.token_ids)]
    return max(abs(a - b) for a, b in zip(completion.logprobs, expected))


async def check_reload(model_dir: Path, work: Path) -> str:
    new = perturbed_copy(model_dir, work / "v1")
    async with ServerPool(config(model_dir, weight_update="reload")) as pool:
        seconds = await pool.update_weights(str(new), 1)
        out = await pool.generate(PROMPT, SamplingParams(max_tokens=16, seed=0))
    err = logprob_error(new, out)
    if err > 1e-2:
        raise AssertionError(f"served logprobs differ from the new checkpoint by {err:.3g} after an in-place reload")
    return f"reload {seconds:.2f} s, max logprob error {err:.2g}"


async def check_fp8(model_dir: Path, work: Path) -> str:
    async with ServerPool(config(model_dir, dtype="auto", cluster={"fp8": "quantize"})) as pool:
        out = await pool.generate(PROMPT, SamplingParams(max_tokens=16, seed=0))
    return f"fp8 generated {len(out.token_ids)} tokens"


async def check_routes(model_dir: Path, work: Path) -> str:
    async with ServerPool(config(model_dir, cluster={"routed_expert_capture": True})) as pool:
        out = await pool.generate(PROMPT, SamplingParams(max_tokens=16, seed=0), routed_experts_start=0)
    if out.routed_experts is None:
        raise AssertionError("no routed experts returned")
    shape = tuple(out.routed_experts.shape)
    if shape[0] != len(PROMPT) + len(out.token_ids) - 1:
        raise AssertionError(f"routes cover {shape[0]} positions, expected {len(PROMPT) + len(out.token_ids) - 1}")
    return f"routed experts {shape}"


async def check_ep(model_dir: Path, work: Path) -> str:
    if torch.cuda.device_count() < 2:
        raise RuntimeError("skipped: expert parallel needs 2 GPUs")
    async with ServerPool(config(model_dir, cluster={"tensor_parallel_size": 2, "expert_parallel": True})) as pool:
        out = await pool.generate(PROMPT, SamplingParams(max_tokens=16, seed=0))
    return f"expert parallel over 2 GPUs generated {len(out.token_ids)} tokens"


async def check_pd(model_dir: Path, work: Path) -> str:
    from engines.inference import launch

    cfg = config(model_dir, cluster={"disaggregation": {"kv_connector": "NixlConnector"}})
    argv = launch.server_command(cfg, "python", 8000, cpu_build=False, kv_role="kv_producer")
    # The pool does not yet route prefill -> decode; this checks the flags only.
    return "kv-transfer-config " + argv[argv.index("--kv-transfer-config") + 1]


CHECKS = {"reload": check_reload, "fp8": check_fp8, "routes": check_routes, "ep": check_ep, "pd": check_pd}


async def main_async(args: argparse.Namespace) -> dict[str, str]:
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    results: dict[str, str] = {}
    for name in args.checks.split(","):
        try:
            results[name] = "ok: " + await CHECKS[name](Path(args.model_dir), work)
        except Exception as err:  # one check's failure must not hide the others
            skipped = str(err).startswith("skipped")
            results[name] = str(err) if skipped else f"FAILED: {type(err).__name__}: {err}"
            if not skipped:
                traceback.print_exc()
        print(f"{name}: {results[name]}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="HF MoE causal LM directory (e.g. the tiny Qwen3-MoE)")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    print(json.dumps(asyncio.run(main_async(parser.parse_args()))))


if __name__ == "__main__":
    main()
