"""Multi-process DDP training on CPU over gloo, launched with torchrun (2 processes);
FSDP2 and expert parallel are in test_parallelize.py."""

import pytest
import torch

from engines.trainer.config import TrainerConfig
from engines.trainer.rl_step import Trainee, make_optimizer, rl_step
from engines.trainer.router_replay import RouterReplay
from tests.engines.trainer.rollouts import synthetic_rollouts
from tests.engines.trainer.two_ranks import run_two_ranks

CFG = TrainerConfig(seq_len=48, micro_batch_rows=1, lr=1e-3, processes=2)


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
    run_two_ranks("dist_worker.py", mode, str(model_dir), str(out), timeout_s=240)
    return torch.load(out, weights_only=False)


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(reference, tiny_model_dir, tmp_path):
    ref_state, ref_metrics = reference
    got = _torchrun("ddp", tiny_model_dir, tmp_path)
    assert [m["skipped"] for m in got["metrics"]] == [False, False]
    assert got["metrics"][0]["loss"] == pytest.approx(ref_metrics[0]["loss"], rel=1e-5)
    assert got["metrics"][1]["grad_norm"] == pytest.approx(ref_metrics[1]["grad_norm"], rel=1e-4)
    _assert_same_parameters(got["state"], ref_state)


def test_parallelism_settings_that_cannot_run_are_refused_naming_the_field():
    ok = TrainerConfig(processes=4, parallelism="fsdp2_ep", expert_parallel_size=2)
    assert ok.expert_parallel_size == 2
    with pytest.raises(ValueError, match="expert_parallel_size: fsdp2_ep needs at least 2"):
        TrainerConfig(processes=2, parallelism="fsdp2_ep")
    with pytest.raises(ValueError, match="expert_parallel_size=2 needs parallelism='fsdp2_ep'"):
        TrainerConfig(processes=2, parallelism="fsdp2", expert_parallel_size=2)
    with pytest.raises(ValueError, match="processes \\(3\\) must be a multiple"):
        TrainerConfig(processes=3, parallelism="fsdp2_ep", expert_parallel_size=2)
    with pytest.raises(ValueError, match="set processes >= 2"):
        TrainerConfig(parallelism="fsdp2")
    with pytest.raises(ValueError, match="packing=False"):
        TrainerConfig(processes=2, parallelism="fsdp2", context_parallel_size=2)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="context_parallel_size=2 needs CUDA GPUs.*gpu_check"):
            TrainerConfig(processes=2, parallelism="fsdp2", context_parallel_size=2, packing=False)


def test_a_trainer_over_several_nodes_needs_its_rendezvous():
    nodes = {"processes": 4, "parallelism": "fsdp2", "nodes": 2, "rendezvous": "trainer-0:29500"}
    assert TrainerConfig(**nodes).nodes == 2
    with pytest.raises(ValueError, match="need node 0's address as host:port"):
        TrainerConfig(**{**nodes, "rendezvous": None})
    with pytest.raises(ValueError, match="processes=3 over nodes=2: .* a multiple of nodes"):
        TrainerConfig(**{**nodes, "processes": 3, "parallelism": "ddp"})
    with pytest.raises(ValueError, match="node_rank=2 with nodes=2"):
        TrainerConfig(**nodes, node_rank=2)
    with pytest.raises(ValueError, match="rendezvous is for trainers over several machines"):
        TrainerConfig(rendezvous="trainer-0:29500")
