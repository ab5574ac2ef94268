"""One RL update of the default run, timed by phase, against this CPU's matrix rate.

The update is what the trainer lane does per step on the default run
(configs/tiny.toml): 16 micro tasks x 8 samples, episodes rendered from the run's own
demonstrations (its edit tool, feedback and failed attempts) through the tiny model's
chat format, with routes and logprobs from the model itself and mixed rewards in every
group (every group trains). One update = `rl_step` (pack, forward, loss head,
backward, optimizer) + export of the weights + publish in a local lake, on one thread
pinned to one core, as the lane runs beside the vLLM server (flows/trainer_lane.py).

Two arms in one run, on the same episodes and initial weights, each in its own
process: `ours` (this tree) and `baseline` (the code at `--baseline` checked out in a
git worktree, default: the commit before the trainer's speed work). Each arm warms up
once, then times `--repeats` updates and reports the median.

Also measured in the run: fp32 and bf16 matrix-multiply rates at the model's own
shapes (one thread). `mfu` = the update's model FLOPs (6 x matmul parameters per
token, the head on loss tokens, causal attention inside each episode) / update_s /
the fp32 rate.

    python -m benchmarks.trainer_step [--repeats 5] [--baseline 78773d1]

Last line: {"bench": "trainer_step", "update_s", "baseline_update_s", "speedup",
"mfu", "baseline_mfu", "tokens", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "78773d1"  # main before the unmasked unpacked rows and the loss-token head
GROUPS, GROUP_SIZE = 16, 8  # the default run's batch: 128 episodes


def default_run_episodes(out: Path) -> None:
    """The tiny model (random weights, the run's shape) in `out/model` and one step's
    episodes as a ROLLOUTS table in `out/episodes.parquet`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from engines.env.task_sources.micro import generate_micro_tasks
    from engines.env.task_sources.micro_demos import feedback_demonstrations
    from engines.model.chat_format import ChatFormat
    from engines.model.load import load_moe_causal_lm, load_tokenizer
    from engines.model.tiny import create_tiny_model
    from engines.protocol import render_messages
    from engines.trainer.router_replay import RouterReplay
    from engines.trainer.sft import conversation_episode
    from flows.config import RunConfig
    from flows.config_loader import load_config
    from storage.schema import conform

    config = load_config(RunConfig, REPO / "configs" / "tiny.toml", [])
    s = config.trainer.sft
    tasks = generate_micro_tasks(GROUPS, seed=config.tasks.seed)
    samples = [
        feedback_demonstrations(tasks, config.env.edit_attempts, s.failed_attempt_share, k, s.edit_tool)
        for k in range(GROUP_SIZE)
    ]
    create_tiny_model(out / "model", (render_messages(d) for group in samples for d in group), config.model.tiny)
    tokenizer, model = load_tokenizer(out / "model"), load_moe_causal_lm(str(out / "model"))
    chat = ChatFormat.from_tokenizer(tokenizer)
    rows = []
    with RouterReplay(model) as replay, torch.no_grad():
        for k, group in enumerate(samples):
            for g, demo in enumerate(group):
                e = conversation_episode(tokenizer, demo, chat=chat)
                ids = np.concatenate([e.input_ids, e.targets[-1:]])
                p = int(np.argmax(e.loss_mask)) + 1  # the prompt ends where the first trained token starts
                logits = model(input_ids=torch.from_numpy(e.input_ids)[None], use_cache=False).logits[0]
                lp = torch.log_softmax(logits.float() / config.trainer.temperature, -1)
                lp = lp.gather(-1, torch.from_numpy(e.targets)[:, None])[:, 0].numpy()[p - 1 :]
                mask = e.loss_mask[p - 1 :]
                routes = torch.stack(replay.used, 1).numpy().astype(np.uint8)
                rows.append(
                    dict(
                        run_id="bench",
                        step=0,
                        task_id=f"t{g}",
                        group_id=f"g{g}",
                        sample_index=k,
                        prompt_ids=ids[:p].tolist(),
                        completion_ids=ids[p:].tolist(),
                        loss_mask=mask.tolist(),
                        completion_logprobs=np.where(mask, lp, 0.0).astype(np.float32).tolist(),
                        routed_experts=routes.tobytes(),
                        routed_experts_shape=list(routes.shape),
                        reward=float((k + g) % 2),  # mixed in every group: every group trains
                        advantage=0.0,
                        infra_failure=False,
                        min_policy_version=0,
                        policy_versions=[0],
                    )
                )
    pq.write_table(conform(pa.Table.from_pylist(rows), "rollouts"), out / "episodes.parquet")


def update_flops(episodes, model_config) -> float:
    """Model FLOPs of one update (forward + backward = 3 x forward)."""
    c = model_config
    h, kv = c.hidden_size, c.num_key_value_heads * c.head_dim
    attn = h * (c.num_attention_heads * c.head_dim) * 2 + 2 * h * kv  # q, o; k, v
    experts = c.num_experts_per_tok * 3 * h * c.moe_intermediate_size + h * c.num_experts
    per_token = c.num_hidden_layers * (attn + experts)
    total = 0.0
    for row in episodes.to_pylist():
        n = len(row["prompt_ids"]) + len(row["completion_ids"]) - 1
        loss = sum(row["loss_mask"])
        total += 2 * per_token * n + 2 * c.vocab_size * h * loss
        total += c.num_hidden_layers * 2 * n * n * c.num_attention_heads * c.head_dim  # causal QK^T and AV
    return 3 * total


def matmul_rate(dtype_name: str, model_config, tokens: int = 4096, repeats: int = 20) -> float:
    """FLOP/s of the model's own projections on `tokens` tokens, one thread."""
    import torch

    c = model_config
    h = c.hidden_size
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    per_expert = tokens * c.num_experts_per_tok // c.num_experts
    shapes = [
        (tokens, h, c.num_attention_heads * c.head_dim),
        (tokens, h, c.num_key_value_heads * c.head_dim),
        (per_expert, h, c.moe_intermediate_size),
        (per_expert, c.moe_intermediate_size, h),
        (tokens // 8, h, c.vocab_size),
    ]
    flops, seconds = 0.0, 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        seconds += time.perf_counter() - start
        flops += 2 * m * k * n * repeats
    return flops / seconds


def run_arm(work: Path, repeats: int, out: Path) -> None:
    """Time `repeats` updates (after one warm-up) with the code importable as `engines`."""
    import pyarrow.parquet as pq
    import torch

    from engines.model.load import load_moe_causal_lm, load_tokenizer
    from engines.trainer.distributed import make_accelerator, make_trainee
    from engines.trainer.export import export_weights
    from engines.trainer.rl_step import rl_step
    from flows.config import RunConfig
    from flows.config_loader import load_config
    from storage import checkpoints
    from storage.config import StorageConfig
    from storage.fs import open_store

    cfg = load_config(RunConfig, REPO / "configs" / "tiny.toml", []).trainer
    torch.manual_seed(cfg.seed)
    episodes = pq.read_table(work / "episodes.parquet")
    model = load_moe_causal_lm(str(work / "model"))
    tokenizer = load_tokenizer(work / "model")
    trainee = make_trainee(model, cfg, make_accelerator(cfg.mixed_precision, cfg.parallelism))
    lake = tempfile.mkdtemp(dir=work)
    store = open_store(StorageConfig(root=lake))
    times = []
    for version in range(1, repeats + 2):
        start = time.perf_counter()
        metrics = rl_step(trainee, episodes, cfg)
        trained = time.perf_counter()
        uri = checkpoints.weights_uri(store, "bench", version)
        export_weights(trainee.module, tokenizer, uri, cfg.export_format, store=store)
        exported = time.perf_counter()
        checkpoints.publish(store, "bench", version, version - 1, uri)
        done = time.perf_counter()
        phases = {k: v for k, v in metrics.items() if k.endswith("_s")}
        times.append(dict(phases, rl_step_s=trained - start, export_s=exported - trained, publish_s=done - exported))
        times[-1]["update_s"] = done - start
        if metrics.get("skipped"):
            raise RuntimeError(f"the update was skipped: {metrics}")
    timed = times[1:]
    result = {k: statistics.median(t[k] for t in timed) for k in timed[0]}
    result["update_s_runs"] = [round(t["update_s"], 3) for t in timed]
    result["loss_tokens"] = int(metrics["trained_tokens"])
    out.write_text(json.dumps(result))


def arm(code_root: Path, work: Path, repeats: int, name: str) -> dict:
    """One arm in its own process, on one core, with `code_root`'s modules."""
    out = work / f"{name}.json"
    # -P: the script's folder (benchmarks/, with its own storage.py) stays off the path.
    cmd = [sys.executable, "-P", str(REPO / "benchmarks" / "trainer_step.py"), "--arm", str(work), str(out)]
    env = {**os.environ, "PYTHONPATH": str(code_root), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd += ["--repeats", str(repeats)]
    proc = subprocess.run(cmd, env=env, cwd=code_root, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"arm {name} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    phases = {k: round(v, 3) for k, v in result.items() if k.endswith("_s")}
    print(f"{name}: update {result['update_s']:.3f} s {json.dumps(phases)}")
    return result


def baseline_tree(commit: str, work: Path) -> Path:
    tree = work / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit], check=True, capture_output=True
    )
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed updates per arm (after one warm-up)")
    parser.add_argument("--baseline", default=BASELINE, help="commit whose trainer is the baseline arm")
    parser.add_argument("--arm", nargs=2, metavar=("WORK", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    core = sorted(os.sched_getaffinity(0))[-1]  # the core the lane takes: the highest
    os.sched_setaffinity(0, {core})
    if args.arm:
        run_arm(Path(args.arm[0]), args.repeats, Path(args.arm[1]))
        return 0

    import pyarrow.parquet as pq
    import torch
    from transformers import AutoConfig

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        default_run_episodes(work)
        episodes = pq.read_table(work / "episodes.parquet")
        model_config = AutoConfig.from_pretrained(work / "model")
        flops = update_flops(episodes, model_config)
        tree = baseline_tree(args.baseline, work)
        try:
            base = arm(tree, work, args.repeats, "baseline")
            ours = arm(REPO, work, args.repeats, "ours")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
        fp32, bf16 = matmul_rate("fp32", model_config), matmul_rate("bf16", model_config)
    tokens = sum(len(r["prompt_ids"]) + len(r["completion_ids"]) - 1 for r in episodes.to_pylist())
    split = {k: round(v, 4) for k, v in ours.items() if k.endswith("_s") and k not in ("update_s", "rl_step_s")}
    summary = {
        "bench": "trainer_step",
        "update_s": round(ours["update_s"], 3),
        "baseline_update_s": round(base["update_s"], 3),
        "speedup": round(base["update_s"] / ours["update_s"], 2),
        "mfu": round(flops / ours["update_s"] / fp32, 3),
        "baseline_mfu": round(flops / base["update_s"] / fp32, 3),
        "tokens": tokens,
        "loss_tokens": ours["loss_tokens"],
        "episodes": episodes.num_rows,
        "model_gflop": round(flops / 1e9, 1),
        "matmul_gflops_fp32": round(fp32 / 1e9, 1),
        "matmul_gflops_bf16": round(bf16 / 1e9, 1),
        "split": split,
        "update_s_runs": ours["update_s_runs"],
        "baseline_update_s_runs": base["update_s_runs"],
        "threads": 1,
        "baseline": args.baseline,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
