"""Run under torchrun by test_distributed.py: two RL steps with one parallelism
mode, then the full parameters are written by rank 0.

    torchrun --nproc_per_node 2 dist_worker.py MODE MODEL_DIR OUT
    MODE: ddp | fsdp | ep
"""

from __future__ import annotations

import os
import sys

import torch

torch.set_num_threads(1)


def main(mode: str, model_dir: str, out: str) -> None:
    from engines.model.load import load_moe_causal_lm
    from engines.trainer import distributed as d
    from engines.trainer.rl_step import rl_step
    from tests.engines.trainer.test_distributed import CFG, batches

    torch.manual_seed(0)
    if mode == "ddp":
        trainee = d.ddp_trainee(load_moe_causal_lm(model_dir), CFG, d.make_accelerator())
    else:
        torch.distributed.init_process_group("gloo")
        if mode == "fsdp":
            trainee = d.fsdp2_trainee(load_moe_causal_lm(model_dir), CFG)
        else:
            trainee = d.expert_parallel_trainee(model_dir, CFG, ep_size=2)
    metrics = [rl_step(trainee, b, CFG) for b in batches(trainee.module)]
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
             for k, v in trainee.module.state_dict().items()}  # fmt: skip
    if trainee.rank == 0:
        torch.save({"state": state, "metrics": metrics}, out)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # after autograd all-to-all, interpreter teardown can abort (REFERENCE.md)


if __name__ == "__main__":
    main(*sys.argv[1:4])
