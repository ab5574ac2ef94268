"""One forward of a group's prompt for all of its samples.

A GRPO group is `group_size` samples of one task: the same prompt P, then each
sample's completion. The prompt is most of an episode's tokens on short tasks (the
default run: 113 of 206), so running it once per group instead of once per sample
takes about half the update's work away. The loss and every gradient are the same:

    prompts forward: P[:-1] of every group (a row each), keys and values kept in a
                     transformers cache
    branch forward:  P[-1] + C_i[:-1] for every sample i, one row each, attending to its
                     prompt's row of the cache and causally to itself

The last prompt token opens each branch because its output predicts C_i[0], the first
trained token. Autograd runs through the cache: the gradients of every branch's
attention to the prompt sum into the prompt's keys and values, as they do when each
sample carries its own copy. Positions continue from the prompt, so rotary embeddings
see the same positions; a branch's padding continues its positions too (packing.py).

The update's prompts run once, as rows padded at the end (`PromptCache`); branches
of all groups are sorted by length into micro-batches so that rows pad little; each
branch row takes its prompt's row of the cache, and an attention mask hides that row's
padding. The prompts' forward keeps its graph until the last micro-batch's backward,
then one backward carries every branch's gradient through it. Routes replay in two
parts: the prompt's routes of the group's first sample for the prompts' forward, each
sample's own after it. Used where one process runs the whole update
(`rl_step.shares_prompts`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
from torch import nn
from transformers import DynamicCache

from engines.trainer.packing import Batch, TrainSequence, collate, length_sorted_batches


def prompt_groups(episodes: list[TrainSequence]) -> tuple[list[list[TrainSequence]], list[TrainSequence]]:
    """Episodes that share a prompt of at least 2 tokens, and its recorded routes, by
    prompt (groups of 2 or more), and the rest. Inference may route a prompt's tokens
    differently in two samples (another batch, a near tie between experts); those
    samples keep their own prompt, so the loss stays exactly the unshared one."""
    by_prompt: dict[tuple[bytes, bytes], list[TrainSequence]] = defaultdict(list)
    for e in episodes:
        if e.prompt_len >= 2:
            cut = e.prompt_len - 1
            routes = b"" if e.routes is None else e.routes[:cut].tobytes()
            by_prompt[(e.input_ids[:cut].tobytes(), routes)].append(e)
    groups = [g for g in by_prompt.values() if len(g) > 1]
    grouped = {id(e) for g in groups for e in g}
    return groups, [e for e in episodes if id(e) not in grouped]


def shared_prompt_batches(groups: list[list[TrainSequence]], token_budget: int) -> list[Batch]:
    """Every branch of `groups`, longest first, cut into micro-batches of at most
    `token_budget` branch tokens (rows x the longest branch). All of them carry the same
    `batch.prefix`, the update's prompts (one row per group, right-padded), and
    `batch.prefix_rows`, the prompt row each branch row continues."""
    if not groups:
        return []
    cut = [g[0].prompt_len - 1 for g in groups]  # prefix tokens of each group: P[:-1]
    prompts = [_slice(g[0], 0, cut[i]) for i, g in enumerate(groups)]
    prompts = collate(prompts, [[i] for i in range(len(groups))], max(cut), continued=True)
    branches = [(_slice(e, cut[i], len(e)), i) for i, g in enumerate(groups) for e in g]
    group_of = {id(b): i for b, i in branches}
    batches = []
    for part in length_sorted_batches([b for b, _ in branches], token_budget):
        rows = collate(part, [[r] for r in range(len(part))], len(part[0]), continued=True)
        rows.position_ids += torch.tensor([cut[group_of[id(b)]] for b in part])[:, None]  # continue each prompt
        rows.prefix, rows.prefix_rows = prompts, torch.tensor([group_of[id(b)] for b in part])
        batches.append(rows)
    return batches


class PromptCache:
    """The update's prompts run once: their keys and values per layer, as leaves every
    micro-batch's branches attend to and send gradients into; `backward()` (after the
    last micro-batch) carries the summed gradients through the prompts' forward once."""

    def __init__(self, model: nn.Module, prompts: Batch) -> None:
        none = torch.empty(0, dtype=torch.long, device=prompts.input_ids.device)  # no logits
        out = model(input_ids=prompts.input_ids, position_ids=prompts.position_ids, use_cache=True, logits_to_keep=none)
        self.outputs = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
        self.leaves = [t.detach().requires_grad_() for t in self.outputs]
        self.valid = prompts.valid

    def for_rows(self, rows: torch.Tensor) -> tuple[DynamicCache, torch.Tensor]:
        """A cache holding prompt row `rows[r]` for branch row r, and the branches'
        attention mask over the prompt (its padding hidden)."""
        cache = DynamicCache()
        for layer in range(len(self.leaves) // 2):
            cache.update(self.leaves[2 * layer][rows], self.leaves[2 * layer + 1][rows], layer)
        return cache, self.valid[rows]

    def backward(self) -> None:
        pairs = [(t, leaf.grad) for t, leaf in zip(self.outputs, self.leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])


def _slice(e: TrainSequence, start: int, stop: int) -> TrainSequence:
    return TrainSequence(
        e.input_ids[start:stop],
        e.targets[start:stop],
        e.loss_mask[start:stop],
        e.inference_logprobs[start:stop],
        e.advantage,
        None if e.routes is None else np.ascontiguousarray(e.routes[start:stop]),
    )
