"""FSDP2 and FSDP2 + expert parallel through the trainer lane: 2 processes over gloo
on CPU, and 2 "nodes" (torchrun agents meeting at a rendezvous), against the same lane
in one process."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from engines.inference.server_process import free_port
from engines.model.load import load_moe_causal_lm
from engines.trainer.lane import LaneConfig, train_steps
from engines.trainer.torchrun import torchrun_command
from storage import checkpoints
from storage.fs import open_store
from storage.shards import write_shard
from tests.engines.trainer.lane_worker import PROBE
from tests.engines.trainer.rollouts import synthetic_rollouts
from tests.engines.trainer.two_ranks import REPO, run_two_ranks

STEPS = 3
WORKER = Path(__file__).with_name("lane_worker.py")


def _lane(root: Path, model_dir, **trainer) -> LaneConfig:
    return LaneConfig(
        model_dir=str(model_dir),
        storage={"root": str(root)},
        run="p",
        num_steps=STEPS,
        poll_interval_s=0.05,
        wait_timeout_s=60,
        trainer={"seq_len": 64, "micro_batch_rows": 2, "lr": 1e-3, **trainer},
    )


def _write_steps(cfg: LaneConfig, model) -> None:
    store = open_store(cfg.storage)
    for s in range(STEPS):
        write_shard(store, cfg.run, s, "final", synthetic_rollouts(model, step=s, seed=20 + s, run=cfg.run, groups=3))


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, tmp_path_factory):
    """The lane's three steps in this process (DDP code path, one rank)."""
    cfg = _lane(tmp_path_factory.mktemp("one") / "lake", tiny_model_dir)
    torch.manual_seed(0)
    _write_steps(cfg, load_moe_causal_lm(tiny_model_dir))
    return cfg, train_steps(cfg)


def _two_processes(tmp_path: Path, model_dir, steps: int = STEPS, **trainer) -> tuple[LaneConfig, dict]:
    cfg = _lane(tmp_path / "lake", model_dir, processes=2, **trainer).model_copy(update={"num_steps": steps})
    if not (tmp_path / "lake").exists():
        torch.manual_seed(0)
        _write_steps(cfg, load_moe_causal_lm(model_dir))
    config, out = tmp_path / "lane.json", tmp_path / "out.pt"
    config.write_text(cfg.model_dump_json())
    run_two_ranks("lane_worker.py", str(config), str(out), timeout_s=300)
    return cfg, torch.load(out, weights_only=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "trainer",
    [{"parallelism": "fsdp2"}, {"parallelism": "fsdp2_ep", "expert_parallel_size": 2}],
    ids=["fsdp2", "fsdp2_ep"],
)
def test_two_ranks_train_like_one_and_export_what_they_trained(one_process, tiny_model_dir, tmp_path, trainer):
    ref_cfg, ref = one_process
    cfg, got = _two_processes(tmp_path, tiny_model_dir, **trainer)
    assert [m["skipped"] for m in got["metrics"]] == [False] * STEPS
    for a, b in zip(got["metrics"], ref):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    # The exported v3 loads in stock transformers and computes what the sharded model did.
    store = open_store(cfg.storage)
    exported = load_moe_causal_lm(checkpoints.get(store, cfg.run, STEPS).uri).eval()
    assert type(exported).__name__ == "Qwen3MoeForCausalLM"
    with torch.no_grad():
        logits = exported(input_ids=PROBE, use_cache=False).logits
        ref_model = load_moe_causal_lm(checkpoints.get(open_store(ref_cfg.storage), ref_cfg.run, STEPS).uri).eval()
        ref_logits = ref_model(input_ids=PROBE, use_cache=False).logits
    torch.testing.assert_close(logits, got["logits"], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-3)  # one process, other summation order


@pytest.mark.slow
def test_two_nodes_meeting_at_a_rendezvous_train_like_one_process(one_process, tiny_model_dir, tmp_path):
    """Two torchrun agents, one a "node" each, over loopback (the command the trainer lane
    of each node runs): global rank 0 on node 0 publishes what the pair trained."""
    ref_cfg, ref = one_process
    port = free_port()
    cfg = _lane(
        tmp_path / "lake", tiny_model_dir, processes=2, parallelism="fsdp2", nodes=2, rendezvous=f"127.0.0.1:{port}"
    )
    torch.manual_seed(0)
    _write_steps(cfg, load_moe_causal_lm(tiny_model_dir))
    out = tmp_path / "out.pt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = []
    for node in (0, 1):
        node_cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"node_rank": node})})
        path = tmp_path / f"node{node}.json"
        path.write_text(node_cfg.model_dump_json())
        command = torchrun_command(2, str(WORKER), str(path), str(out), trainer=node_cfg.trainer)
        assert "--nproc_per_node=1" in command and f"--node_rank={node}" in command
        procs.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    got = torch.load(out, weights_only=False)
    for a, b in zip(got["metrics"], ref):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    exported = load_moe_causal_lm(checkpoints.get(open_store(cfg.storage), cfg.run, STEPS).uri).eval()
    ref_model = load_moe_causal_lm(checkpoints.get(open_store(ref_cfg.storage), ref_cfg.run, STEPS).uri).eval()
    with torch.no_grad():
        logits, ref_logits = (m(input_ids=PROBE, use_cache=False).logits for m in (exported, ref_model))
    torch.testing.assert_close(logits, got["logits"], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-3)


@pytest.mark.slow
def test_bf16_with_activation_checkpointing_trains_close_to_fp32_and_resumes(one_process, tiny_model_dir, tmp_path):
    _, ref = one_process
    trainer = {
        "parallelism": "fsdp2_ep",
        "expert_parallel_size": 2,
        "mixed_precision": "bf16",
        "activation_checkpointing": True,
    }
    _, first = _two_processes(tmp_path, tiny_model_dir, steps=STEPS - 1, **trainer)
    # A new launch resumes after the saved step from each rank's own shards.
    cfg, last = _two_processes(tmp_path, tiny_model_dir, **trainer)
    got = {"metrics": first["metrics"] + last["metrics"], "logits": last["logits"]}
    assert [m["policy_version"] for m in got["metrics"]] == list(range(1, STEPS + 1))
    assert [m["skipped"] for m in got["metrics"]] == [False] * STEPS
    for a, b in zip(got["metrics"], ref):  # bf16 compute: about 3 significant digits
        assert a["loss"] == pytest.approx(b["loss"], rel=5e-2, abs=1e-2)
    state = checkpoints.get(open_store(cfg.storage), cfg.run, STEPS)
    exported = load_moe_causal_lm(state.uri).eval()  # fp32 master weights exported
    assert all(p.dtype == torch.float32 for p in exported.parameters())
    with torch.no_grad():
        logits = exported(input_ids=PROBE, use_cache=False).logits
    torch.testing.assert_close(logits, got["logits"].float(), rtol=0, atol=5e-2)


def test_activation_checkpointing_recomputes_with_the_replayed_routes(tiny_model_dir):
    """One RL step with checkpointed layers moves every weight as the plain step does."""
    from engines.trainer.config import TrainerConfig
    from engines.trainer.parallelize import parallelize
    from engines.trainer.rl_step import Trainee, make_optimizer, rl_step
    from engines.trainer.router_replay import RouterReplay

    states = []
    for checkpointing in (False, True):
        cfg = TrainerConfig(seq_len=64, micro_batch_rows=2, lr=1e-3, activation_checkpointing=checkpointing)
        torch.manual_seed(0)
        model = load_moe_causal_lm(tiny_model_dir)
        episodes = synthetic_rollouts(model, seed=3, groups=2)
        parallelize(model, cfg, None)
        assert model.model.layers[0].gradient_checkpointing is checkpointing
        opt, sched = make_optimizer(model, cfg)
        with RouterReplay(model) as replay:
            m = rl_step(Trainee(model, model, opt, sched, replay), episodes, cfg)
        states.append((m, model.state_dict()))
    (m0, s0), (m1, s1) = states
    assert m1["loss"] == pytest.approx(m0["loss"], rel=1e-6) and m1["grad_norm"] == pytest.approx(
        m0["grad_norm"], rel=1e-5
    )
    for k in s0:
        torch.testing.assert_close(s1[k], s0[k], rtol=0, atol=1e-6, msg=k)
