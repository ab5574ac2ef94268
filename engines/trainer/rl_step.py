"""One RL optimizer step over the episodes of one rollout step.

Steps: group advantages -> drop infra failures and zero-advantage groups -> split
episodes across data-parallel ranks (balanced by tokens, the same split computed on
every rank) -> pack into rows -> micro-batches (every rank runs the same number, so
collective ops stay in lockstep) -> loss summed over tokens and divided by the global
loss-token count -> clip -> optimizer step.

A step with no trainable tokens, or whose loss or gradient norm is not finite, is
skipped (gradients dropped, optimizer untouched) and reported with `skipped=True`:
never a silent wrong update.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import torch
from torch import nn

from engines.trainer.advantages import GroupAdvantages, step_advantages, trainable_episodes
from engines.trainer.chunked_logprobs import chunked_token_logprobs, output_weight
from engines.trainer.config import TrainerConfig
from engines.trainer.grad_clip import clip_grad_norm
from engines.trainer.loss import rl_loss_sums, token_logprobs
from engines.trainer.packing import Batch, TrainSequence, episodes_from_table, length_sorted_batches, make_batch
from engines.trainer.phase_clock import PhaseClock
from engines.trainer.router_replay import RouterReplay, max_violation
from engines.trainer.shared_prompts import PromptCache, prompt_groups, shared_prompt_batches


@dataclass
class Trainee:
    """What a step updates. `model` may be wrapped (DDP, FSDP2); `module` is the plain model."""

    model: nn.Module
    module: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    replay: RouterReplay
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")  # where the model computes; batches are moved there
    backward: Callable[[torch.Tensor], None] = field(default=lambda loss: loss.backward())
    no_sync: Callable[[], contextlib.AbstractContextManager] = field(default=contextlib.nullcontext)
    all_sum: Callable[[torch.Tensor], torch.Tensor] = field(default=lambda t: t)
    # Data split: ranks of one context-parallel group read the same episodes.
    dp_rank: int | None = None  # None: rank
    dp_world: int | None = None  # None: world
    # Global gradient norm, then clip in place (None: clip_grad_norm over module's parameters).
    clip: Callable[[float], float] | None = None
    # Shards each micro-batch's sequences over the context-parallel ranks for the
    # forward and backward inside it (context_parallel.py); None: whole rows.
    sequence_context: Callable[[Batch], contextlib.AbstractContextManager[Batch]] | None = None
    # Sharded models: whole tensors for export (collective; a dict on rank 0, else None),
    # and each rank's own shards into / out of a state directory. None: unsharded.
    full_state: Callable[[], dict | None] | None = None
    save_local: Callable[[str], None] | None = None
    load_local: Callable[[str], None] | None = None


def make_optimizer(
    model: nn.Module,
    cfg: TrainerConfig,
    lr: float | None = None,
    warmup: int | None = None,
    decay_steps: int | None = None,
    final_lr_ratio: float = 0.1,
):
    """AdamW plus linear warm-up, then a constant learning rate, or (with `decay_steps`)
    a cosine decay to `final_lr_ratio` of the peak at step `decay_steps`."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr or cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    w = cfg.warmup_steps if warmup is None else warmup

    def factor(step: int) -> float:
        if w and step < w:
            return (step + 1) / (w + 1)
        if not decay_steps:
            return 1.0
        progress = min(1.0, (step - w) / max(1, decay_steps - w))
        return final_lr_ratio + (1 - final_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def split_for_ranks(episodes: list[TrainSequence], world: int) -> list[list[TrainSequence]]:
    """Longest first onto the rank with the fewest tokens: balanced and deterministic."""
    parts: list[list[TrainSequence]] = [[] for _ in range(world)]
    tokens = [0] * world
    for e in sorted(episodes, key=len, reverse=True):
        r = tokens.index(min(tokens))
        parts[r].append(e)
        tokens[r] += len(e)
    return parts


def use_routes(batch: Batch, cfg: TrainerConfig) -> torch.Tensor | None:
    """Routes to replay for `batch` ([rows * row_len, layers, top_k]) or None."""
    if cfg.router_replay == "off":
        return None
    if batch.routes is None:
        if cfg.router_replay == "on":
            raise ValueError("router_replay='on' but some episodes have no routed_experts: record them or use 'auto'")
        return None
    R, L, layers, k = batch.routes.shape
    return batch.routes.reshape(R * L, layers, k)


def forward_logprobs(
    trainee: Trainee,
    batch: Batch,
    cfg: TrainerConfig,
    need_router_logits: bool = False,
    clock: PhaseClock | None = None,
    prompts: PromptCache | None = None,
):
    """Trainer logprobs and entropies [R, L] of `batch`'s targets on its loss tokens
    (0 elsewhere), and router logits.

    With `cfg.logprob_chunk_tokens` the wrapped model (so DDP and FSDP2 hooks run) is
    asked for its last hidden states and no logits, and the output head runs in chunks
    (chunked_logprobs.py); 0 takes the model's full logits [R, L, V].

    The batch's routes stay set after the forward: activation checkpointing recomputes
    each layer during backward, which must replay the same routes. The caller clears
    them (`replay.set_routes(None)`) once backward has run. `clock` times the model's
    forward ("forward") apart from the output head ("head"). A batch with `prefix_rows`
    continues the shared prompts of `prompts`."""
    clock = clock or PhaseClock()
    none = torch.empty(0, dtype=torch.long, device=batch.input_ids.device)  # keep no position's logits
    # Under context parallel the rows are shards of longer sequences: an explicit
    # all-ones mask keeps transformers from reading their positions as packed episodes.
    mask = torch.ones_like(batch.input_ids) if trainee.sequence_context is not None else None
    cache = None
    if batch.prefix_rows is not None:  # the rows continue the update's shared prompts (shared_prompts.py)
        if prompts is None:
            raise ValueError("this batch continues shared prompts: pass the update's PromptCache as `prompts`")
        cache, seen = prompts.for_rows(batch.prefix_rows)
        # Each row sees its prompt's tokens (not the padding after a shorter prompt) and itself, causally.
        mask = torch.cat([seen, torch.ones_like(batch.valid)], dim=1).long()
    trainee.replay.set_routes(use_routes(batch, cfg))
    inputs = dict(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        attention_mask=mask,
        use_cache=False,
        output_router_logits=need_router_logits,
        **({} if cache is None else {"cache": cache}),
    )
    chunk = cfg.logprob_chunk_tokens
    m = batch.loss_mask.bool()  # the head runs on loss tokens only: the rest carry no loss
    if chunk:
        # No positions kept for logits: the lm_head sees an empty [R, 0, H] slice.
        with clock("forward"):
            out = trainee.model(**inputs, logits_to_keep=none, output_hidden_states=True)
        # hidden_states[-1] is the final norm's output, what lm_head reads.
        hidden = out.hidden_states[-1]
        with clock("head"):
            lp, entropy = chunked_token_logprobs(
                hidden[m], output_weight(trainee.module), batch.targets[m], cfg.temperature, chunk
            )
    else:
        with clock("forward"):
            out = trainee.model(**inputs)
        with clock("head"):
            lp, entropy = token_logprobs(out.logits[m], batch.targets[m], cfg.temperature)
    with clock("head"):
        lp, entropy = (torch.zeros(m.shape, dtype=x.dtype, device=x.device).masked_scatter(m, x) for x in (lp, entropy))
    return lp, entropy, (out.router_logits if need_router_logits else None)


def load_balancing_loss(
    router_logits: tuple[torch.Tensor, ...], used: list[torch.Tensor], valid: torch.Tensor
) -> torch.Tensor:
    """Switch-style aux loss over real tokens: E * sum_e f_e * P_e, averaged over layers."""
    v = valid.reshape(-1)
    total = 0.0
    for logits, idx in zip(router_logits, used):
        probs = torch.softmax(logits.float(), -1)[v]  # [tokens, E]
        E = probs.shape[-1]
        f = torch.bincount(idx[v].reshape(-1), minlength=E).float() / max(1, idx[v].numel())
        total = total + E * (f * probs.mean(0)).sum()
    return total / len(router_logits)


@contextlib.contextmanager
def _routes_cleared(trainee: Trainee):
    """Replayed routes live from a micro-batch's forward to the end of its backward."""
    try:
        yield
    finally:
        trainee.replay.set_routes(None)


def shares_prompts(trainee: Trainee, cfg: TrainerConfig) -> bool:
    """Whether a group's prompt runs once for all its samples (shared_prompts.py): one
    process, each layer run once per forward (no activation checkpointing: its
    recompute would replay one part's routes on the other), no aux loss over routes."""
    return (
        cfg.shared_prompts == "auto"
        and trainee.world == 1
        and trainee.sequence_context is None
        and not cfg.activation_checkpointing
        and cfg.aux_loss_coef == 0
    )


def _prompt_cache(trainee: Trainee, batches: list[Batch], cfg: TrainerConfig, clock: PhaseClock) -> PromptCache | None:
    """The update's shared prompts run once, when its micro-batches continue them."""
    prompts = next((b.prefix for b in batches if b.prefix is not None), None)
    if prompts is None:
        return None
    prompts = prompts.to(trainee.device)
    with _routes_cleared(trainee), clock("forward"):
        trainee.replay.set_routes(use_routes(prompts, cfg))
        return PromptCache(trainee.model, prompts)


def _micro_batches(episodes: list[TrainSequence], cfg: TrainerConfig, share: bool = False) -> list[Batch]:
    """With `share`, each group of samples with one prompt first, its branches at most
    micro_batch_rows * seq_len padded tokens per micro-batch. Then packed: rows of
    seq_len, micro_batch_rows at a time; unpacked: episodes of similar length together,
    each micro-batch at most micro_batch_rows * seq_len padded tokens."""
    budget = cfg.micro_batch_rows * cfg.seq_len
    shared: list[Batch] = []
    if share:
        groups, episodes = prompt_groups(episodes)
        shared = shared_prompt_batches(groups, budget)
    if not episodes:
        return shared
    if not cfg.packing:
        unpacked = [
            make_batch(g, cfg.seq_len, packing=False, continued=True) for g in length_sorted_batches(episodes, budget)
        ]
        return shared + unpacked
    batch = make_batch(episodes, cfg.seq_len, cfg.packing)
    n = batch.input_ids.shape[0]
    return shared + [batch.rows(i, i + cfg.micro_batch_rows) for i in range(0, n, cfg.micro_batch_rows)]


def _empty_micro_batch(like: Batch) -> Batch:
    """One padding row: keeps a rank's forward/backward count in step with the others."""
    b = like.rows(0, 1)
    zeros = torch.zeros_like
    return Batch(
        zeros(b.input_ids),
        b.position_ids,
        zeros(b.targets),
        zeros(b.loss_mask),
        zeros(b.valid),
        zeros(b.inference_logprobs),
        zeros(b.advantages),
        None if b.routes is None else zeros(b.routes),
    )


def rl_step(
    trainee: Trainee, episodes: pa.Table, cfg: TrainerConfig, advantages: GroupAdvantages | None = None
) -> dict[str, float]:
    """One optimizer step on a step's episodes (a ROLLOUTS table, every rank gets all of it).

    `advantages`: the episodes' advantages, when the caller records them (the lane
    does); None computes them from the rewards with `cfg`'s settings. The metrics carry
    the wall seconds of each phase (`pack_s`, `forward_s`, `head_s`, `backward_s`,
    `optimizer_s`: phase_clock.py)."""
    clock = PhaseClock()
    if advantages is None:
        advantages = step_advantages(episodes, cfg.std_scale_advantages, cfg.negative_advantage_scale)
    with clock("pack"):
        trainable = trainable_episodes(episodes, advantages)
        all_eps = episodes_from_table(trainable)
    global_tokens = sum(int(e.loss_mask.sum()) for e in all_eps)
    metrics: dict[str, float] = {
        "num_episodes": episodes.num_rows,
        "num_trained_episodes": trainable.num_rows,
        "trained_tokens": global_tokens,
        "lr": trainee.scheduler.get_last_lr()[0],
    }
    if global_tokens == 0:
        return {**metrics, **clock.metrics(), "skipped": True, "skip_reason_no_tokens": 1.0}

    dp_rank = trainee.rank if trainee.dp_rank is None else trainee.dp_rank
    dp_world = trainee.world if trainee.dp_world is None else trainee.dp_world
    with clock("pack"):
        share = shares_prompts(trainee, cfg)
        parts = [_micro_batches(p, cfg, share) for p in split_for_ranks(all_eps, dp_world)]
        mine = parts[dp_rank]
        steps = max(len(p) for p in parts)
        template = next(p[0] for p in parts if p)
        mine = mine + [_empty_micro_batch(template)] * (steps - len(mine))

    sums = torch.zeros(6, dtype=torch.float64)  # loss, tokens, masked, kl, entropy, aux
    loads = []
    trainee.model.train()
    prompts = _prompt_cache(trainee, mine, cfg, clock)
    for i, mb in enumerate(mine):
        mb = mb.to(trainee.device)
        last = i == steps - 1
        ctx = contextlib.nullcontext() if last else trainee.no_sync()
        seq = contextlib.nullcontext(mb) if trainee.sequence_context is None else trainee.sequence_context(mb)
        with ctx, seq as mb, _routes_cleared(trainee):
            lp, ent, router_logits = forward_logprobs(
                trainee, mb, cfg, need_router_logits=cfg.aux_loss_coef > 0, clock=clock, prompts=prompts
            )
            with clock("head"):
                s = rl_loss_sums(lp, mb.inference_logprobs, mb.advantages, mb.loss_mask, cfg)
            # DDP/FSDP average gradients over ranks: scale by world so the result is the
            # token sum over all ranks divided by the global token count.
            loss = s.loss * (trainee.world / global_tokens)
            aux = torch.zeros(())
            if router_logits is not None and mb.valid.any():
                aux = load_balancing_loss(router_logits, trainee.replay.used, mb.valid)
                loss = loss + cfg.aux_loss_coef * aux * (trainee.world / (steps * trainee.world))
            with clock("backward"):
                trainee.backward(loss)
        if mb.valid.any():
            loads.append(trainee.replay.expert_load(mb.valid))
        ent_sum = float(ent[mb.loss_mask.bool()].sum())
        sums += torch.tensor(
            [float(s.loss.detach()), s.tokens, s.masked, s.mismatch_kl, ent_sum, float(aux.detach())],
            dtype=torch.float64,
        )

    if prompts is not None:
        with clock("backward"):
            prompts.backward()
    sums = trainee.all_sum(sums)
    with clock("optimizer"):
        if trainee.clip is not None:
            grad_norm = trainee.clip(cfg.grad_clip)
        else:
            grad_norm = clip_grad_norm(list(trainee.module.parameters()), cfg.grad_clip)
    loss_value = float(sums[0] / global_tokens)
    metrics.update(
        loss=loss_value,
        mismatch_kl=float(sums[3] / global_tokens),
        masked_fraction=float(sums[2] / global_tokens),
        entropy=float(sums[4] / global_tokens),
        grad_norm=grad_norm,
        aux_loss=float(sums[5] / max(1, steps * trainee.world)),
    )
    if loads:
        metrics["expert_max_violation"] = max_violation(torch.stack(loads).mean(0))
    if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
        trainee.optimizer.zero_grad(set_to_none=True)
        return {**metrics, **clock.metrics(), "skipped": True, "skip_reason_nonfinite": 1.0}
    with clock("optimizer"):
        trainee.optimizer.step()
        trainee.scheduler.step()
        trainee.optimizer.zero_grad(set_to_none=True)
    return {**metrics, **clock.metrics(), "skipped": False}
