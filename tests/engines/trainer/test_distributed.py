"""Multi-process training on CPU over gloo, launched with torchrun (2 processes)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.trainer.config import TrainerConfig
from engines.trainer.distributed import (
    ClusterParallelism,
    accelerate_fsdp2_plugin,
    accelerate_launch_config,
    parallelism_config,
)
from engines.trainer.rl_step import Trainee, make_optimizer, rl_step
from engines.trainer.router_replay import RouterReplay
from tests.engines.trainer.rollouts import synthetic_rollouts

REPO = Path(__file__).resolve().parents[3]
CFG = TrainerConfig(seq_len=48, micro_batch_rows=1, lr=1e-3)


def batches(model):
    """The same two global batches on every rank (each rank reads the whole step)."""
    return [synthetic_rollouts(model, step=s, seed=10 + s, groups=3, group_size=4) for s in range(2)]


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    """Parameters and metrics after the two steps in one process."""
    from engines.model.load import load_moe_causal_lm

    model_dir = tiny_model_dir
    torch.manual_seed(0)
    model = load_moe_causal_lm(model_dir)
    opt, sched = make_optimizer(model, CFG)
    with RouterReplay(model) as replay:
        trainee = Trainee(model, model, opt, sched, replay)
        metrics = [rl_step(trainee, b, CFG) for b in batches(model)]
    return {k: v.detach() for k, v in model.state_dict().items()}, metrics


def _assert_same_parameters(got, ref):
    # Two AdamW steps at lr 1e-3 move a weight by up to 2e-3; ranks that trained apart
    # (each on half the batch) would differ by that order. Summation order differs
    # between 1 and 2 processes, which Adam's normalisation lifts to ~1e-5.
    for k, v in ref.items():
        torch.testing.assert_close(got[k], v, rtol=0, atol=1e-4, msg=k)


def _torchrun(mode, model_dir, tmp_path):
    out = tmp_path / f"{mode}.pt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).with_name("dist_worker.py")), mode, str(model_dir), str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(reference, tiny_model_dir, tmp_path):
    ref_state, ref_metrics = reference
    got = _torchrun("ddp", tiny_model_dir, tmp_path)
    assert [m["skipped"] for m in got["metrics"]] == [False, False]
    assert got["metrics"][0]["loss"] == pytest.approx(ref_metrics[0]["loss"], rel=1e-5)
    assert got["metrics"][1]["grad_norm"] == pytest.approx(ref_metrics[1]["grad_norm"], rel=1e-4)
    _assert_same_parameters(got["state"], ref_state)


@pytest.mark.slow
def test_two_process_fsdp2_step_matches_one_process(reference, tiny_model_dir, tmp_path):
    ref_state, _ = reference
    got = _torchrun("fsdp", tiny_model_dir, tmp_path)
    assert [m["skipped"] for m in got["metrics"]] == [False, False]
    _assert_same_parameters(got["state"], ref_state)


@pytest.mark.slow
def test_two_process_expert_parallel_step_runs(tiny_model_dir, tmp_path):
    got = _torchrun("ep", tiny_model_dir, tmp_path)
    assert [m["skipped"] for m in got["metrics"]] == [False, False]
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in got["metrics"])


def test_cluster_settings_are_generated_and_validated():
    p = ClusterParallelism(world_size=16, dp_replicate_size=2, dp_shard_size=4, cp_size=2)
    pc = parallelism_config(p)
    assert pc.total_size == 16 and pc.dp_shard_size == 4 and pc.cp_size == 2
    plugin = accelerate_fsdp2_plugin(p)
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    yaml = accelerate_launch_config(p)
    assert yaml["fsdp_config"]["fsdp_version"] == 2 and yaml["num_processes"] == 16
    with pytest.raises(ValueError, match="world_size = 8"):
        ClusterParallelism(world_size=8, dp_shard_size=4, cp_size=4)
    with pytest.raises(ValueError, match="HSDP"):
        ClusterParallelism(world_size=2, dp_replicate_size=2)
