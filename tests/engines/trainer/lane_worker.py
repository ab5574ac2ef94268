"""Run under torchrun by test_parallelize.py: the trainer lane's steps with the
parallelism its LaneConfig names, then every rank computes the trained model's
logits on fixed tokens (rank 0 saves them beside the lake).

    torchrun --nproc_per_node 2 lane_worker.py CONFIG_JSON OUT_PT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from engines.trainer.torchrun import exit_rank

torch.set_num_threads(1)

PROBE = torch.arange(5, 37).reshape(2, 16)  # fixed tokens whose logits the test compares


def main(config: str, out: str) -> None:
    from engines.trainer.lane import LaneConfig, TrainerLane

    cfg = LaneConfig.model_validate(json.loads(Path(config).read_text()))
    lane = TrainerLane(cfg)
    metrics = []
    for step in range(lane.next_step, cfg.first_step + cfg.num_steps):
        lane.wait_for_rollouts(step)
        metrics.append(lane.train(step))
    lane.trainee.model.eval()
    with torch.no_grad():
        logits = lane.trainee.model(input_ids=PROBE, use_cache=False).logits
    logits = logits.full_tensor() if hasattr(logits, "full_tensor") else logits
    if lane.trainee.rank == 0:
        torch.save({"metrics": metrics, "logits": logits.detach().clone()}, out)
    lane.close()
    exit_rank()


if __name__ == "__main__":
    main(*sys.argv[1:3])
