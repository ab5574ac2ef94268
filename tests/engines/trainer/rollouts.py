"""Synthetic rollout shards for trainer tests: random episodes whose logprobs and
routes come from running the model itself, as inference would record them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from engines.trainer.router_replay import RouterReplay


def synthetic_rollouts(
    model,
    step: int = 0,
    groups: int = 4,
    group_size: int = 4,
    seed: int = 0,
    routes: bool = True,
    prompt_len: tuple[int, int] = (4, 12),
    completion_len: tuple[int, int] = (3, 20),
    run: str = "r",
    shared_prompt: bool = False,
) -> pa.Table:
    """`shared_prompt`: the samples of a group share one prompt, as GRPO groups do."""
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    rows = []
    with RouterReplay(model) as replay, torch.no_grad():
        for g in range(groups):
            # Drawn only when shared: the other tables keep their random stream.
            group_prompt = rng.integers(5, vocab, rng.integers(*prompt_len)).tolist() if shared_prompt else None
            for j in range(group_size):
                p = group_prompt or rng.integers(5, vocab, rng.integers(*prompt_len)).tolist()
                c = rng.integers(5, vocab, rng.integers(*completion_len)).tolist()
                mask = [bool(x) for x in rng.random(len(c)) > 0.2]
                mask[0] = True
                seq = torch.tensor([p + c])
                logits = model(input_ids=seq[:, :-1], use_cache=False).logits[0]
                lp = torch.log_softmax(logits.float(), -1).gather(-1, seq[0, 1:, None])[:, 0]
                clp = lp[len(p) - 1 :].numpy().astype(np.float32)
                used = torch.stack(replay.used, 1).numpy().astype(np.uint8)  # [tokens, layers, k]
                rows.append(
                    dict(
                        run_id=run,
                        step=step,
                        task_id=f"t{g}",
                        group_id=f"g{g}",
                        sample_index=j,
                        prompt_ids=p,
                        completion_ids=c,
                        loss_mask=mask,
                        completion_logprobs=np.where(mask, clp, 0.0).tolist(),
                        routed_experts=used.tobytes() if routes else None,
                        routed_experts_shape=list(used.shape) if routes else None,
                        reward=float(rng.integers(0, 2)),
                        advantage=0.0,
                        infra_failure=False,
                        min_policy_version=step,
                        policy_versions=[step],
                    )
                )
    from storage.schema import conform

    return conform(pa.Table.from_pylist(rows), "rollouts")
