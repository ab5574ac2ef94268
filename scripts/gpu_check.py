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
one JSON object with every check's result. Not part of the test suite (no GPU here).

    TANDEM_VLLM_PYTHON=... python scripts/gpu_check.py --model-dir DIR [--checks reload,fp8,routes]
    python scripts/gpu_check.py --model-dir DIR --checks trainer_fsdp2_ep,trainer_cp,trainer_bf16,trainer_long
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
    if sys.argv[1:2] == ["--trainer-rank"]:
        return trainer_rank(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="HF MoE causal LM directory (e.g. the tiny Qwen3-MoE)")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    print(json.dumps(asyncio.run(main_async(parser.parse_args()))))


if __name__ == "__main__":
    main()
