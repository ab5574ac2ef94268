"""Run under torchrun by test_distributed.py: two RL steps under DDP, then the full
parameters are written by rank 0.

    torchrun --nproc_per_node 2 dist_worker.py ddp MODEL_DIR OUT
"""

from __future__ import annotations

import sys

import torch

from engines.trainer.torchrun import exit_rank

torch.set_num_threads(1)


def main(mode: str, model_dir: str, out: str) -> None:
    from engines.model.load import load_moe_causal_lm
    from engines.trainer import distributed as d
    from engines.trainer.rl_step import rl_step
    from tests.engines.trainer.test_distributed import CFG, batches

    torch.manual_seed(0)
    assert mode == "ddp", mode
    trainee = d.make_trainee(load_moe_causal_lm(model_dir), CFG, d.make_accelerator())
    metrics = [rl_step(trainee, b, CFG) for b in batches(trainee.module)]
    state = {k: v.detach().clone() for k, v in trainee.module.state_dict().items()}
    if trainee.rank == 0:
        torch.save({"state": state, "metrics": metrics}, out)
    exit_rank()


if __name__ == "__main__":
    main(*sys.argv[1:4])
