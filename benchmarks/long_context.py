"""Memory and time of the RL loss's output head at long sequences, side by side in one run:

- full: the model's logits [1, L, V] and `loss.token_logprobs` (trainer.logprob_chunk_tokens = 0);
- chunked: hidden states and `chunked_logprobs` (logprob_chunk_tokens, default 1024);
- model: the same forward and backward with a loss on the hidden states alone: the
  model's own activation memory, so the output head's share can be stated apart.

One forward and backward of the RL loss (`rl_step.forward_logprobs` + `rl_loss_sums`)
over the tiny Qwen3-MoE of engines/model/families.py (hidden 64, 2 layers, 8 experts)
with a large vocabulary, on one packed row of L tokens (4 episodes, loss on their
later two thirds), one CPU thread. Each (path, L) runs in a fresh subprocess; its
memory is the peak RSS (ru_maxrss) minus the RSS just before the measured forward,
after a warm-up at 256 tokens. The head's own peak is path minus model at the same L.

The default vocabulary is 65,536, not Qwen3's 151,936: the full path's peak holds
about four [L, V] fp32 tensors, 8.6 GB at 8k x 65,536 and 20 GB at 8k x 151,936, more
than a shared 24 GB machine can spare. `--vocab 151936` runs it where memory allows.

Last line: one JSON object.
- memory_ratio_8k: chunked / full peak of the whole step at the longest length
  (model activations included); memory_ratio_8k_head: the same for the heads alone.
- memory_growth: the chunked head's own peak (model activations excluded) at the
  longest length over the shortest; memory_growth_with_model: the same for the whole
  step, which grows faster than L with the model's own activations (a packed row's
  attention mask and weights are L x L on CPU).
- time_ratio_8k: chunked / full seconds of one forward + backward at the longest length.
- per_length: every figure above, per length.

    python -m benchmarks.long_context [--vocab 65536] [--lengths 1024,2048,4096,8192] [--chunk 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch
from transformers import Qwen3MoeForCausalLM

from engines.model.families import tiny_config
from engines.trainer.config import TrainerConfig
from engines.trainer.loss import rl_loss_sums
from engines.trainer.packing import Batch, TrainSequence, make_batch
from engines.trainer.rl_step import Trainee, forward_logprobs, make_optimizer
from engines.trainer.router_replay import RouterReplay

PATHS = ("full", "chunked", "model")
WARMUP_TOKENS = 256


def packed_row(length: int, vocab: int, seed: int = 0) -> Batch:
    """One row of `length` tokens holding 4 episodes (targets cross their boundaries)."""
    rng = np.random.default_rng(seed)
    eps = []
    for n in [length // 4] * 3 + [length - 3 * (length // 4)]:
        ids = rng.integers(0, vocab, n + 1)
        mask = np.arange(n) >= n // 3
        lp = np.where(mask, -np.log(vocab), 0.0).astype(np.float32)
        eps.append(TrainSequence(ids[:-1], ids[1:], mask, lp, float(rng.choice([-1.0, 1.0])), None))
    return make_batch(eps, length, packing=True)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def step(trainee: Trainee, batch: Batch, cfg: TrainerConfig, path: str) -> None:
    """One forward and backward; `model` ends at the hidden states (no output head)."""
    if path == "model":
        none = torch.empty(0, dtype=torch.long)
        out = trainee.model(
            input_ids=batch.input_ids,
            position_ids=batch.position_ids,
            use_cache=False,
            logits_to_keep=none,
            output_hidden_states=True,
        )
        out.hidden_states[-1].float().square().mean().backward()
    else:
        lp, _, _ = forward_logprobs(trainee, batch, cfg)
        s = rl_loss_sums(lp, batch.inference_logprobs, batch.advantages, batch.loss_mask, cfg)
        (s.loss / max(1, s.tokens)).backward()
    trainee.model.zero_grad(set_to_none=True)


def measure(path: str, length: int, vocab: int, chunk: int) -> dict:
    """In this process: peak memory over the RSS before the forward, and the best of
    two timed forward+backward passes."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = tiny_config("qwen3_moe", vocab_size=vocab)
    config.max_position_embeddings = max(length, WARMUP_TOKENS)
    model = Qwen3MoeForCausalLM(config)
    cfg = TrainerConfig(seq_len=length, logprob_chunk_tokens=0 if path == "full" else chunk)
    opt, sched = make_optimizer(model, cfg)
    with RouterReplay(model, replay=False) as replay:
        trainee = Trainee(model, model, opt, sched, replay)
        step(trainee, packed_row(WARMUP_TOKENS, vocab), cfg, path)
        batch = packed_row(length, vocab)
        before = rss_bytes()
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            step(trainee, batch, cfg, path)
            times.append(time.perf_counter() - t0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"bytes": peak - before, "seconds": min(times)}


def run_fresh(path: str, length: int, vocab: int, chunk: int) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.long_context", "--one", path, str(length), str(vocab), str(chunk)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{path} at {length} tokens failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=65536, help="vocabulary size (151936: Qwen3's; see the docstring)")
    ap.add_argument("--lengths", default="1024,2048,4096,8192", help="comma-separated row lengths in tokens")
    ap.add_argument("--chunk", type=int, default=TrainerConfig().logprob_chunk_tokens, help="tokens per head chunk")
    ap.add_argument("--one", nargs=4, metavar=("PATH", "LENGTH", "VOCAB", "CHUNK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        path, length, vocab, chunk = args.one
        print(json.dumps(measure(path, int(length), int(vocab), int(chunk))))
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    mib = 2**20
    print(f"vocab {args.vocab}, chunk {args.chunk} tokens, hidden 64, one packed row per length, 1 thread")
    print(
        f"{'tokens':>7} {'full MiB':>9} {'chunked MiB':>12} {'model MiB':>10} {'head full':>10} "
        f"{'head chunked':>13} {'full s':>7} {'chunked s':>10} {'model s':>8}"
    )
    rows: dict[int, dict] = {}
    for length in lengths:
        r = {p: run_fresh(p, length, args.vocab, args.chunk) for p in PATHS}
        head = {p: r[p]["bytes"] - r["model"]["bytes"] for p in ("full", "chunked")}
        rows[length] = {
            "full_mib": round(r["full"]["bytes"] / mib, 1),
            "chunked_mib": round(r["chunked"]["bytes"] / mib, 1),
            "model_mib": round(r["model"]["bytes"] / mib, 1),
            "head_full_mib": round(head["full"] / mib, 1),
            "head_chunked_mib": round(head["chunked"] / mib, 1),
            "full_s": round(r["full"]["seconds"], 3),
            "chunked_s": round(r["chunked"]["seconds"], 3),
            "model_s": round(r["model"]["seconds"], 3),
        }
        x = rows[length]
        print(
            f"{length:>7} {x['full_mib']:>9.1f} {x['chunked_mib']:>12.1f} {x['model_mib']:>10.1f} "
            f"{x['head_full_mib']:>10.1f} {x['head_chunked_mib']:>13.1f} {x['full_s']:>7.2f} "
            f"{x['chunked_s']:>10.2f} {x['model_s']:>8.2f}",
            flush=True,
        )
    short, long = rows[lengths[0]], rows[lengths[-1]]
    print(
        json.dumps(
            {
                "bench": "long_context",
                "vocab": args.vocab,
                "chunk_tokens": args.chunk,
                "lengths": lengths,
                "longest": lengths[-1],
                "memory_ratio_8k": round(long["chunked_mib"] / long["full_mib"], 3),
                "memory_ratio_8k_head": round(long["head_chunked_mib"] / long["head_full_mib"], 3),
                "memory_growth": round(long["head_chunked_mib"] / short["head_chunked_mib"], 3),
                "memory_growth_with_model": round(long["chunked_mib"] / short["chunked_mib"], 3),
                "time_ratio_8k": round(long["chunked_s"] / long["full_s"], 3),
                "per_length": {str(k): v for k, v in rows.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
