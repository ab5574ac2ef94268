"""Trainer throughput, side by side in one run:

1. packing: RL forward+backward tokens/s with episodes packed into fixed rows
   against one episode per row padded to the longest, on a long-tailed
   (log-normal) length distribution like real agent episodes;
2. experts: transformers' grouped_mm expert kernel against its eager per-expert loop;
3. memory: parameter + optimizer-state bytes per rank after one AdamW step with
   fsdp2_ep over 2 ranks (torchrun, gloo) against ddp (each rank holds everything);
4. routers: router replay checked on a tiny random model of each MoE family
   (replaying live routes leaves loss and every gradient unchanged).

Last line: one JSON object (packing_speedup, grouped_mm_speedup, ep_memory_ratio,
routers_checked and the raw numbers).
    python -m benchmarks.trainer [--episodes 96] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch
from transformers import Qwen3MoeForCausalLM

from engines.model.tiny import TinyModelConfig, tiny_qwen3_moe_config
from engines.trainer.config import TrainerConfig
from engines.trainer.loss import rl_loss_sums, token_logprobs
from engines.trainer.packing import TrainSequence, make_batch
from engines.trainer.torchrun import exit_rank, torchrun_command


def long_tailed_episodes(n: int, seed: int, max_len: int) -> list[TrainSequence]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=4.6, sigma=0.8, size=n), 16, max_len).astype(int)  # median ~100 tokens
    eps = []
    for L in lengths:
        ids = rng.integers(5, 1000, L + 1)
        mask = np.zeros(L, bool)
        mask[L // 3 :] = True
        eps.append(
            TrainSequence(ids[:-1], ids[1:], mask, np.full(L, -6.9, np.float32), float(rng.choice([-1, 1])), None)
        )
    return eps


def train_tokens_per_s(model, episodes, cfg: TrainerConfig, packing: bool, repeats: int) -> float:
    batch = make_batch(episodes, cfg.seq_len, packing)
    real = int(batch.valid.sum())
    rows = batch.input_ids.shape[0]
    best = float("inf")
    for rep in range(repeats + 1):  # the first pass warms up kernels and allocators
        t0 = time.perf_counter()
        for i in range(0, rows, cfg.micro_batch_rows):
            mb = batch.rows(i, i + cfg.micro_batch_rows)
            logits = model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits
            lp, _ = token_logprobs(logits, mb.targets)
            rl_loss_sums(lp, mb.inference_logprobs, mb.advantages, mb.loss_mask, cfg).loss.backward()
        model.zero_grad(set_to_none=True)
        if rep > 0:
            best = min(best, time.perf_counter() - t0)
    return real / best


def memory_rank(parallelism: str, model_dir: str, out: str) -> NoReturn:
    """One torchrun rank: build the trainee, take one AdamW step, write the bytes of the
    parameters and optimizer state this rank holds (its shards only)."""
    from engines.model.load import load_moe_causal_lm
    from engines.trainer.distributed import make_accelerator, make_trainee
    from engines.trainer.rl_step import rl_step
    from tests.engines.trainer.rollouts import synthetic_rollouts

    extra = {"expert_parallel_size": 2} if parallelism == "fsdp2_ep" else {}
    cfg = TrainerConfig(seq_len=64, processes=2, parallelism=parallelism, **extra)
    torch.manual_seed(0)
    model = load_moe_causal_lm(model_dir)
    episodes = synthetic_rollouts(model, groups=2)
    trainee = make_trainee(model, cfg, make_accelerator())
    rl_step(trainee, episodes, cfg)

    def nbytes(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    params = sum(nbytes(p) for p in trainee.module.parameters())
    optim = sum(nbytes(v) for s in trainee.optimizer.state.values() for v in s.values() if torch.is_tensor(v))
    peak = torch.tensor([params + optim], dtype=torch.float64)
    torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX)
    if torch.distributed.get_rank() == 0:
        Path(out).write_text(json.dumps({"bytes": int(peak.item()), "params": params, "optim": optim}))
    exit_rank()


def memory_per_rank(parallelism: str, model_dir: Path, work: Path) -> int:
    out = work / f"{parallelism}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = torchrun_command(2, "-m", "benchmarks.trainer", "--memory-rank", parallelism, str(model_dir), str(out))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"{parallelism} memory run failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())["bytes"]


def routers_checked() -> int:
    """Families whose replay of the live routes reproduces loss and gradients (1e-5)."""
    from engines.model.families import FAMILIES, build_tiny
    from engines.trainer.router_replay import RouterReplay

    ok = 0
    for family in FAMILIES:
        model = build_tiny(family)
        ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))

        def loss_and_grads():
            model.zero_grad(set_to_none=True)
            loss = model(input_ids=ids, use_cache=False).logits.float().logsumexp(-1).mean()
            loss.backward()
            return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

        plain, ref = loss_and_grads()
        with RouterReplay(model) as replay:
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)
            replay.set_routes(torch.stack(replay.used, 1))
            replayed, got = loss_and_grads()
        same = (
            torch.allclose(plain, replayed, rtol=1e-5, atol=1e-5)
            and len(got) == len(ref)
            and all(torch.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(got, ref))
        )
        print(f"router replay {family}: {'ok' if same else 'MISMATCH'}")
        ok += int(same)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=512, help="packed row length = longest episode allowed")
    ap.add_argument("--memory-rank", nargs=3, metavar=("PARALLELISM", "MODEL_DIR", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_rank:
        return memory_rank(*args.memory_rank)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(tiny_qwen3_moe_config(TinyModelConfig(), 1024))
    eps = long_tailed_episodes(args.episodes, 0, args.seq_len)
    cfg = TrainerConfig(seq_len=args.seq_len, micro_batch_rows=2)
    lengths = [len(e) for e in eps]
    print(f"episodes {len(eps)}: median {int(np.median(lengths))} tokens, max {max(lengths)}, total {sum(lengths)}")

    packed = train_tokens_per_s(model, eps, cfg, True, args.repeats)
    padded = train_tokens_per_s(model, eps, cfg, False, args.repeats)
    print(f"packing: {packed:,.0f} tok/s packed vs {padded:,.0f} tok/s padded")

    rates = {}
    for impl in ("grouped_mm", "eager"):
        model.set_experts_implementation(impl)
        rates[impl] = train_tokens_per_s(model, eps, cfg, True, args.repeats)
        print(f"experts {impl}: {rates[impl]:,.0f} tok/s (packed)")

    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        model_dir = Path(tmp) / "model"
        model.set_experts_implementation("grouped_mm")
        model.save_pretrained(model_dir, safe_serialization=True)
        memory = {p: memory_per_rank(p, model_dir, Path(tmp)) for p in ("ddp", "fsdp2_ep")}
    ep_ratio = memory["fsdp2_ep"] / memory["ddp"]
    print(
        f"parameters + optimizer per rank: ddp {memory['ddp'] / 2**20:.2f} MiB, "
        f"fsdp2_ep (2 ranks) {memory['fsdp2_ep'] / 2**20:.2f} MiB, ratio {ep_ratio:.3f}"
    )
    checked = routers_checked()
    print(
        json.dumps(
            {
                "packing_speedup": round(packed / padded, 3),
                "grouped_mm_speedup": round(rates["grouped_mm"] / rates["eager"], 3),
                "packed_tokens_per_s": round(packed),
                "padded_tokens_per_s": round(padded),
                "grouped_mm_tokens_per_s": round(rates["grouped_mm"]),
                "eager_tokens_per_s": round(rates["eager"]),
                "episodes": len(eps),
                "median_len": int(np.median(lengths)),
                "max_len": max(lengths),
                "ep_memory_ratio": round(ep_ratio, 3),
                "ddp_bytes_per_rank": memory["ddp"],
                "fsdp2_ep_bytes_per_rank": memory["fsdp2_ep"],
                "routers_checked": checked,
            }
        )
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
