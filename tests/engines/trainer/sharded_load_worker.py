"""Run under torchrun by test_sharded_load.py: each model folder loaded the way the
trainer lane loads it under fsdp2 and fsdp2_ep (parameters on the meta device, each
rank reading its shard), then every rank computes logits on fixed tokens; rank 0 saves
them, with the rows each rank read and the bytes it held.

    torchrun --nproc_per_node 2 sharded_load_worker.py OUT_PT MODEL_DIR...
"""

from __future__ import annotations

import sys

import torch

from engines.trainer.torchrun import exit_rank

torch.set_num_threads(1)

PROBE = torch.arange(5, 37).reshape(2, 16)


def main(out: str, *model_dirs: str) -> None:
    import torch.distributed as dist

    from engines.trainer import distributed as d
    from engines.trainer.config import TrainerConfig

    results = {}
    accelerator = d.make_accelerator()
    for model_dir in model_dirs:
        for parallelism, ep in (("fsdp2", 1), ("fsdp2_ep", 2)):
            cfg = TrainerConfig(processes=2, parallelism=parallelism, expert_parallel_size=ep)
            model = d.load_model(model_dir, cfg)
            assert all(p.is_meta for p in model.parameters()), "the lane's model under fsdp2 starts on meta"
            trainee = d.make_trainee(model, cfg, accelerator, model_dir)
            held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in trainee.model.parameters())
            with torch.no_grad():
                logits = trainee.model(input_ids=PROBE, use_cache=False).logits
            logits = logits.full_tensor() if hasattr(logits, "full_tensor") else logits
            counts = [None, None]
            dist.all_gather_object(counts, held)
            results[(model_dir, parallelism)] = {"logits": logits.detach().clone(), "held": counts}
    if dist.get_rank() == 0:
        torch.save(results, out)
    exit_rank()


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
