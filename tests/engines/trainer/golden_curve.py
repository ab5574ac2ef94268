"""The golden curve of test_rl_learns.py: a seeded one-token bandit's per-step
reward, loss, gradient norm and entropy (tests/assets/golden/rl_bandit_curve.json).

The test only compares against the file. A change that should move the numbers (a
new loss) rewrites it with this command, on the suite's tiny MoE, and its commit
says why:

    python -m tests.engines.trainer.golden_curve --update
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from engines.trainer.config import TrainerConfig
from engines.trainer.distributed import ddp_trainee, make_accelerator
from engines.trainer.rl_step import rl_step
from engines.trainer.router_replay import RouterReplay
from storage.schema import conform

PROMPT = [7, 21, 35, 49, 63, 77]
GOLDEN = Path(__file__).parents[2] / "assets" / "golden" / "rl_bandit_curve.json"
STEPS = 12


@dataclass
class BanditRun:
    before: float  # probability mass of the target set before training
    after: float
    curve: dict[str, list[float]]  # reward, loss, grad_norm, entropy per step


def _target_mass(model: Any, target: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT]), use_cache=False).logits[0, -1]
    return float(torch.softmax(logits.float(), -1)[target].sum())


def _sample_step(model: Any, target: torch.Tensor, step: int, groups: int = 8, group_size: int = 8) -> pa.Table:
    gen = torch.Generator().manual_seed(step)
    rows = []
    with RouterReplay(model) as replay, torch.no_grad():
        for g in range(groups):
            for j in range(group_size):
                seq = list(PROMPT)
                for _ in range(2):  # two sampled tokens, as a tiny "completion"
                    logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
                    seq.append(int(torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen)))
                logits = model(input_ids=torch.tensor([seq[:-1]]), use_cache=False).logits[0]
                lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(seq[1:])[:, None])[:, 0]
                used = torch.stack(replay.used, 1).numpy().astype(np.uint8)
                completion = seq[len(PROMPT) :]
                rows.append(
                    dict(
                        run_id="bandit",
                        step=step,
                        task_id=f"t{g}",
                        group_id=f"s{step}-g{g}",
                        sample_index=j,
                        prompt_ids=PROMPT,
                        completion_ids=completion,
                        loss_mask=[True, True],
                        completion_logprobs=lp[len(PROMPT) - 1 :].tolist(),
                        routed_experts=used.tobytes(),
                        routed_experts_shape=list(used.shape),
                        reward=float(completion[0] in set(target.tolist())),
                        advantage=0.0,
                        infra_failure=False,
                        min_policy_version=step,
                        policy_versions=[step],
                    )
                )
    return conform(pa.Table.from_pylist(rows), "rollouts")


def bandit_run(model: Any) -> BanditRun:
    """Twelve on-policy steps from `model` (loaded right after torch.manual_seed(0))."""
    torch.manual_seed(0)
    vocab = model.config.vocab_size
    target = torch.arange(5, vocab, 10)  # every tenth token
    cfg = TrainerConfig(lr=3e-3, seq_len=16, micro_batch_rows=64)
    trainee = ddp_trainee(model, cfg, make_accelerator())
    before = _target_mass(trainee.module, target)
    curve: dict[str, list[float]] = {"reward": [], "loss": [], "grad_norm": [], "entropy": []}
    try:
        for step in range(STEPS):
            episodes = _sample_step(trainee.module, target, step)
            curve["reward"].append(float(np.mean(episodes.column("reward").to_numpy())))
            metrics = rl_step(trainee, episodes, cfg)
            for key in ("loss", "grad_norm", "entropy"):
                curve[key].append(metrics[key])
            # Fresh samples: trainer and "inference" agree.
            assert metrics["mismatch_kl"] < 1e-4, metrics["mismatch_kl"]
        after = _target_mass(trainee.module, target)
    finally:
        trainee.replay.close()
    return BanditRun(before, after, curve)


def check_golden(curve: dict[str, list[float]]) -> None:
    """Compare `curve` with the stored one; raises AssertionError on a difference."""
    golden = json.loads(GOLDEN.read_text())
    # Rewards are means of 64 seeded samples: a float change in the 7th digit may flip
    # one sample (1/64). On-policy the loss is zero up to rounding (the advantages of a
    # group sum to zero and the ratio is 1), so it is held to an absolute bound; its
    # gradient norm and the entropy carry the update and are held to 0.1%.
    np.testing.assert_allclose(curve["reward"], golden["reward"], atol=1.5 / 64)
    np.testing.assert_allclose(curve["loss"], golden["loss"], atol=1e-6)
    np.testing.assert_allclose(curve["grad_norm"], golden["grad_norm"], rtol=1e-3)
    np.testing.assert_allclose(curve["entropy"], golden["entropy"], rtol=1e-3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compute the bandit's golden curve; --update rewrites the file.")
    parser.add_argument("--update", action="store_true", help=f"write the curve to {GOLDEN}")
    args = parser.parse_args(argv)
    from engines.model.load import load_moe_causal_lm
    from tests.tiny_model import make_tiny_model_dir

    torch.set_num_threads(1)  # as in the suite (OMP_NUM_THREADS=1): thread count changes float sums
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model_dir(Path(tmp) / "tiny-moe")
        torch.manual_seed(0)  # as the tiny_model fixture does
        run = bandit_run(load_moe_causal_lm(model_dir))
    if not args.update:
        try:
            check_golden(run.curve)
        except AssertionError as exc:
            print(f"the curve differs from {GOLDEN}:\n{exc}", file=sys.stderr)
            return 1
        print(f"the curve matches {GOLDEN}")
        return 0
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(run.curve, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
