"""Peak host memory of a trainer rank loading its model under fsdp2: the whole
checkpoint read by every rank, then sharded (the baseline: how the lane loaded before
engines/trainer/sharded_load.py), against the model built on the meta device and each
rank reading only its shard (the lane now).

A Qwen3-MoE of 152M parameters (581 MB in fp32) is exported once; each arm runs
as 2 gloo ranks under torchrun, and each rank reports the growth of its peak resident
memory over what it held before loading (after its imports and process group).

    python -m benchmarks.load_memory [--ranks 2]

Last line: {"bench": "load_memory", "whole_peak_mb", "sharded_peak_mb",
"sharded_peak_ratio", "checkpoint_mb", "ranks"}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def rank_main(arm: str, model_dir: str, out: str) -> None:
    """One rank of one arm (under torchrun): load, shard, report the peak's growth."""
    import torch
    import torch.distributed as dist

    from engines.model.load import load_moe_causal_lm
    from engines.trainer import distributed as d
    from engines.trainer.config import TrainerConfig
    from engines.trainer.torchrun import exit_rank

    torch.set_num_threads(1)
    cfg = TrainerConfig(processes=int(os.environ["WORLD_SIZE"]), parallelism="fsdp2")
    accelerator = d.make_accelerator()
    before = _rss_mb()
    model = load_moe_causal_lm(model_dir) if arm == "whole" else d.load_model(model_dir, cfg)
    trainee = d.make_trainee(model, cfg, accelerator, model_dir)
    del trainee
    growth = [None] * dist.get_world_size()
    dist.all_gather_object(growth, _peak_mb() - before)
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(growth))
    exit_rank()


def _export(folder: Path) -> tuple[str, float]:
    """The benchmark's model (weight_sync's 581 MB Qwen3-MoE) and its size in MB."""
    from benchmarks.weight_sync import mid_model

    out = mid_model(folder / "model")
    return str(out), sum(f.stat().st_size for f in out.glob("*.safetensors")) / 2**20


def _arm(arm: str, model_dir: str, ranks: int, folder: Path) -> list[float]:
    from engines.trainer.torchrun import torchrun_command

    out = folder / f"{arm}.json"
    cmd = torchrun_command(ranks, "-m", "benchmarks.load_memory", "--rank", arm, model_dir, str(out))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{arm} arm failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rank", nargs=3, metavar=("ARM", "MODEL_DIR", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(*args.rank)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, size = _export(Path(tmp))
        whole = _arm("whole", model_dir, args.ranks, Path(tmp))
        sharded = _arm("sharded", model_dir, args.ranks, Path(tmp))
    print(f"checkpoint {size:.0f} MB; peak growth per rank, whole: {whole}, sharded: {sharded}", file=sys.stderr)
    result = {
        "bench": "load_memory",
        "whole_peak_mb": round(max(whole), 1),
        "sharded_peak_mb": round(max(sharded), 1),
        "sharded_peak_ratio": round(max(sharded) / max(whole), 3),
        "checkpoint_mb": round(size, 1),
        "ranks": args.ranks,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
