"""Trainer throughput, side by side in one run:

1. packing: RL forward+backward tokens/s with episodes packed into fixed rows
   against one episode per row padded to the longest, on a long-tailed
   (log-normal) length distribution like real agent episodes;
2. experts: transformers' grouped_mm expert kernel against its eager per-expert loop.

Last line: one JSON object (packing_speedup, grouped_mm_speedup and the raw rates).
    python -m benchmarks.trainer [--episodes 96] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from transformers import Qwen3MoeForCausalLM

from engines.model.tiny import TinyModelConfig, tiny_qwen3_moe_config
from engines.trainer.config import TrainerConfig
from engines.trainer.loss import rl_loss_sums, token_logprobs
from engines.trainer.packing import Episode, make_batch


def long_tailed_episodes(n: int, seed: int, max_len: int) -> list[Episode]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=4.6, sigma=0.8, size=n), 16, max_len).astype(int)  # median ~100 tokens
    eps = []
    for L in lengths:
        ids = rng.integers(5, 1000, L + 1)
        mask = np.zeros(L, bool)
        mask[L // 3 :] = True
        eps.append(Episode(ids[:-1], ids[1:], mask, np.full(L, -6.9, np.float32), float(rng.choice([-1, 1])), None))
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=512, help="packed row length = longest episode allowed")
    args = ap.parse_args()
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
    print(json.dumps({
        "packing_speedup": round(packed / padded, 3),
        "grouped_mm_speedup": round(rates["grouped_mm"] / rates["eager"], 3),
        "packed_tokens_per_s": round(packed), "padded_tokens_per_s": round(padded),
        "grouped_mm_tokens_per_s": round(rates["grouped_mm"]), "eager_tokens_per_s": round(rates["eager"]),
        "episodes": len(eps), "median_len": int(np.median(lengths)), "max_len": max(lengths),
    }))  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
