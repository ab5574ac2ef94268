"""Warm-start supervised fine-tuning on demonstrations (e.g. the oracle episodes of
the micro tasks), so RL starts from a policy that sometimes succeeds.

A conversation is a list of messages (roles system / user / assistant / tool). It is
tokenised by the model's chat format (engines/model/chat_format.py) into the very
pieces the agent loop produces in an episode: the prompt, each assistant turn as the
model emits it (content, then the template's end-of-turn token) and the template's
text between turns. The loss covers the assistant turns only (their headers are part
of the generation prompt), and with the system prompt the agent loop uses, so SFT
teaches what RL then samples. Conversations are packed like RL episodes. Training stops at
`max_steps` or `max_seconds`, whichever comes first, printing a progress line every
`log_every` steps; the weights are then exported like an RL step's.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from engines.model.chat_format import ChatFormat
from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.tool_calls import TOOL_SCHEMAS, as_tool_calls
from engines.tool_formats import ToolFormatName
from engines.trainer.config import TrainerConfig
from engines.trainer.export import export_weights
from engines.trainer.grad_clip import clip_grad_norm
from engines.trainer.packing import Batch, TrainSequence, make_batch
from engines.trainer.rl_step import make_optimizer
from storage.fs import Store


def conversation_episode(
    tokenizer, messages: list[dict[str, str]], where: str = "conversation", chat: ChatFormat | None = None
) -> TrainSequence:
    """Token ids of a conversation with the loss on assistant turns (content and end token),
    except assistant messages marked `"train": False` (e.g. a demonstration's failed attempt).
    `chat` is the tokenizer's chat format, built here when not given."""
    chat = chat or ChatFormat.from_tokenizer(tokenizer)
    ids, mask = chat.conversation(messages, where)
    a = np.asarray(ids, np.int64)
    return TrainSequence(a[:-1], a[1:], np.asarray(mask[1:], bool), np.zeros(len(a) - 1, np.float32), 1.0, None)


def nll_sum(model, batch: Batch) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the loss tokens, and their count."""
    logits = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False).logits
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    return -(logp[batch.loss_mask]).sum(), batch.num_loss_tokens


@torch.no_grad()
def mean_nll(model, episodes: list[TrainSequence], seq_len: int) -> float:
    """Mean per-token loss of `model` on `episodes` (for before/after comparisons)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(episodes), 64):
        s, n = nll_sum(model, make_batch(episodes[i : i + 64], seq_len))
        total, count = total + float(s), count + n
    return total / max(1, count)


def length_grouped_batches(
    lengths: list[int], batch_size: int, rng: random.Random, window: int = 32
) -> Iterator[list[int]]:
    """Endless batches of indices: reshuffled epochs, and within each window of
    `window` batches the conversations sorted by length before they are cut into
    batches (whose order is then shuffled). Rows of similar length pad little: about
    1.5x fewer tokens per step on the micro demonstrations, whose lengths vary 2x."""
    while True:
        order = list(range(len(lengths)))
        rng.shuffle(order)
        for w in range(0, len(order), window * batch_size):
            chunk = sorted(order[w : w + window * batch_size], key=lengths.__getitem__)
            cut = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
            rng.shuffle(cut)
            yield from (b for b in cut if len(b) == batch_size or len(lengths) < batch_size)


def sft_train(model, episodes: list[TrainSequence], cfg: TrainerConfig, log=print) -> list[float]:
    """Train `model` in place; returns the loss of every step."""
    sft = cfg.sft
    decay = sft.max_steps if sft.schedule == "cosine" else None
    opt, sched = make_optimizer(model, cfg, lr=sft.lr, warmup=sft.warmup_steps, decay_steps=decay)
    batches = length_grouped_batches([len(e) for e in episodes], sft.batch_size, random.Random(cfg.seed))
    losses: list[float] = []
    start = time.monotonic()
    step = 0
    model.train()
    while (sft.max_steps is None or step < sft.max_steps) and (
        sft.max_seconds is None or time.monotonic() - start < sft.max_seconds
    ):
        batch = make_batch([episodes[i] for i in next(batches)], cfg.seq_len, cfg.packing)
        loss_sum, n = nll_sum(model, batch)
        loss = loss_sum / n
        if not torch.isfinite(loss):
            opt.zero_grad(set_to_none=True)
            log(f"[sft] step {step + 1}: non-finite loss, step skipped")
        else:
            loss.backward()
            clip_grad_norm(list(model.parameters()), cfg.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        step += 1
        losses.append(float(loss.detach()))
        if step % sft.log_every == 0 or step == 1:
            recent = [x for x in losses[-sft.log_every :] if math.isfinite(x)]
            log(
                f"[sft] step {step} loss {np.mean(recent) if recent else float('nan'):.4f} "
                f"lr {sched.get_last_lr()[0]:.2e} elapsed {time.monotonic() - start:.1f}s"
            )
    return losses


def sft(
    model_dir: str,
    conversations: list[list[dict[str, str]]],
    out_dir: str,
    cfg: TrainerConfig | None = None,
    log=print,
    store: Store | None = None,
    tool_format: Literal["text", ToolFormatName] = "text",
) -> Path:
    """Fine-tune the model of `model_dir` on `conversations`; export to `out_dir` (a path
    inside `store` when given, e.g. an s3:// weights URL) and return it. With
    `tool_format` naming a family's format ("hermes", "glm45", ...: engines/tool_formats/)
    the template lists the tools and assistant turns written as text actions are trained
    as their calls in that format (as the agent loop will ask for them)."""
    cfg = cfg or TrainerConfig()
    if not conversations:
        raise ValueError("sft: no conversations given")
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(model_dir)
    model = load_moe_causal_lm(model_dir)
    tools = TOOL_SCHEMAS if tool_format != "text" else None
    chat = ChatFormat.from_tokenizer(tokenizer, model_dir, tools=tools)
    if tools:
        conversations = [as_tool_calls(c, f"conversation {i}", tool_format) for i, c in enumerate(conversations)]
    episodes = [conversation_episode(tokenizer, c, f"conversation {i}", chat) for i, c in enumerate(conversations)]
    sft_train(model, episodes, cfg, log)
    export_weights(model, tokenizer, str(out_dir), cfg.export_format, store=store)
    return Path(out_dir)
