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

SFT trains through the RL trainer's own path: the model loaded, wrapped or sharded
per `trainer.parallelism` with its mixed precision (distributed.py: load_model,
make_trainee), and the loss taken from the output head a chunk of tokens at a time
(rl_step.forward_logprobs, `trainer.logprob_chunk_tokens`: no [rows, L, V] logits).
One rank with no devices to place trains in this process; otherwise
`trainer.processes` ranks run under torchrun on `trainer.devices`

    python -m torch.distributed.run --nproc_per_node N -m engines.trainer.sft --job JOB.json

each given every step's conversations and training its share of them (balanced by
tokens), so the step's loss and gradient are one process's; rank 0 exports.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Literal, NoReturn

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer, local_model_dir
from engines.tool_calls import TOOL_SCHEMAS, as_tool_calls
from engines.tool_formats import ToolFormatName
from engines.trainer.chunked_logprobs import chunked_token_logprobs, output_weight
from engines.trainer.config import TrainerConfig
from engines.trainer.distributed import load_model, make_accelerator, make_trainee
from engines.trainer.export import export_weights
from engines.trainer.grad_clip import clip_grad_norm
from engines.trainer.lane import start_rank
from engines.trainer.packing import Batch, TrainSequence, make_batch
from engines.trainer.rl_step import Trainee, forward_logprobs, split_for_ranks
from engines.trainer.torchrun import exit_rank, start_torchrun
from engines.trainer.warm_start_cache import copy_to_store
from storage.fs import Store

Log = Callable[[str], None]


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


def demonstration_episodes(
    tokenizer, model_dir: str, conversations: list[list[dict]], tool_format: Literal["text", ToolFormatName] = "text"
) -> list[TrainSequence]:
    """`conversations` as training sequences in the chat format of `model_dir`'s tokenizer;
    with `tool_format` naming a family's format, assistant turns written as text actions
    become their calls in that format and the template lists the tools."""
    tools = TOOL_SCHEMAS if tool_format != "text" else None
    chat = ChatFormat.from_tokenizer(tokenizer, model_dir, tools=tools)
    if tools:
        conversations = [as_tool_calls(c, f"conversation {i}", tool_format) for i, c in enumerate(conversations)]
    return [conversation_episode(tokenizer, c, f"conversation {i}", chat) for i, c in enumerate(conversations)]


def nll_sum(model, batch: Batch, chunk: int = 1024) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the loss tokens, and their count, from the
    model's last hidden states through the chunked output head (no [rows, L, V] logits)."""
    none = torch.empty(0, dtype=torch.long)  # keep no position's logits
    out = model(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=none,
        output_hidden_states=True,
    )
    m = batch.loss_mask
    lp, _ = chunked_token_logprobs(out.hidden_states[-1][m], output_weight(model), batch.targets[m], 1.0, chunk)
    return -lp.sum(), batch.num_loss_tokens


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


def sft_settings(cfg: TrainerConfig) -> TrainerConfig:
    """The trainer settings SFT's trainee and loss run with: the optimizer's rate and
    warm-up from cfg.sft, the model's own distribution (temperature 1, whatever RL
    samples at) and live routing (demonstrations carry no recorded routes)."""
    update = {"lr": cfg.sft.lr, "warmup_steps": cfg.sft.warmup_steps, "temperature": 1.0, "router_replay": "off"}
    return cfg.model_copy(update=update)


def rank_share(episodes: list[TrainSequence], world: int, rank: int) -> list[TrainSequence]:
    """Rank `rank`'s part of a step's conversations: balanced by tokens (split_for_ranks),
    in the step's own order, so that one rank packs its rows as SFT always has."""
    order = {id(e): i for i, e in enumerate(episodes)}
    return sorted(split_for_ranks(episodes, world)[rank], key=lambda e: order[id(e)])


def sft_backward(trainee: Trainee, episodes: list[TrainSequence], cfg: TrainerConfig) -> float:
    """Forward and backward of this rank's share of a step's conversations (every rank is
    given all of them), `cfg` being `sft_settings`'. The loss is the negative
    log-likelihood of the loss tokens summed over the ranks, over the step's count of
    them; returns it (NaN for a step without loss tokens)."""
    tokens = sum(int(e.loss_mask.sum()) for e in episodes)
    batch = make_batch(rank_share(episodes, trainee.world, trainee.rank), cfg.seq_len, cfg.packing)
    lp, _, _ = forward_logprobs(trainee, batch.to(trainee.device), cfg)
    nll = -lp.sum()
    # DDP and FSDP average gradients over the ranks: times world, the mean over all of them.
    trainee.backward(nll * trainee.world / max(1, tokens))
    return float(trainee.all_sum(nll.detach().double().reshape(1))[0]) / tokens if tokens else math.nan


def sft_step(trainee: Trainee, episodes: list[TrainSequence], cfg: TrainerConfig) -> float:
    """One optimizer step on a step's conversations (sft_backward, clipping, AdamW).
    Returns the step's loss; NaN, and no update, when it or the gradient norm is not finite."""
    loss = sft_backward(trainee, episodes, cfg)
    if trainee.clip is not None:
        grad_norm = trainee.clip(cfg.grad_clip)
    else:
        grad_norm = clip_grad_norm(list(trainee.module.parameters()), cfg.grad_clip)
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        trainee.optimizer.zero_grad(set_to_none=True)
        return math.nan
    trainee.optimizer.step()
    trainee.scheduler.step()
    trainee.optimizer.zero_grad(set_to_none=True)
    return loss


def _any_rank(trainee: Trainee, stop: bool) -> bool:
    """Whether any rank stops: a clock read on each rank must end them at the same step."""
    return bool(trainee.all_sum(torch.tensor([float(stop)], dtype=torch.float64))[0] > 0)


def sft_train(trainee: Trainee, episodes: list[TrainSequence], cfg: TrainerConfig, log: Log = print) -> list[float]:
    """Train `trainee` (made with `sft_settings(cfg)`) in place; returns the loss of every step."""
    sft, settings = cfg.sft, sft_settings(cfg)
    batches = length_grouped_batches([len(e) for e in episodes], sft.batch_size, random.Random(cfg.seed))
    losses: list[float] = []
    start = time.monotonic()
    trainee.model.train()
    while True:
        late = sft.max_seconds is not None and time.monotonic() - start >= sft.max_seconds
        if (sft.max_steps is not None and len(losses) >= sft.max_steps) or _any_rank(trainee, late):
            return losses
        losses.append(sft_step(trainee, [episodes[i] for i in next(batches)], settings))
        step = len(losses)
        if not math.isfinite(losses[-1]):
            log(f"[sft] step {step}: non-finite loss or gradient, step skipped")
        if step % sft.log_every == 0 or step == 1:
            recent = [x for x in losses[-sft.log_every :] if math.isfinite(x)]
            log(
                f"[sft] step {step} loss {np.mean(recent) if recent else float('nan'):.4f} "
                f"lr {trainee.scheduler.get_last_lr()[0]:.2e} elapsed {time.monotonic() - start:.1f}s"
            )


def train_rank(
    model_dir: str,
    episodes: list[TrainSequence],
    out_dir: str,
    cfg: TrainerConfig,
    log: Log = print,
    store: Store | None = None,
) -> list[float]:
    """This process's rank of SFT (the only one without torchrun): the model loaded and
    wrapped or sharded as the RL trainer's, trained on `episodes`, exported by rank 0 to
    `out_dir` (a path inside `store` when given). Returns each step's loss."""
    torch.manual_seed(cfg.seed)
    accelerator = make_accelerator(cfg.mixed_precision, cfg.parallelism)
    tokenizer = load_tokenizer(model_dir)
    model = load_model(model_dir, cfg)
    if cfg.sft.freeze_embeddings:  # before wrapping: DDP and FSDP2 leave a frozen parameter out of their reductions
        for layer in (model.get_input_embeddings(), model.get_output_embeddings()):
            if layer is not None:  # one Parameter when tied, as the tiny model's
                layer.weight.requires_grad_(False)
    architecture = type(model).__name__  # before FSDP2 renames the class (export writes it)
    decay = cfg.sft.max_steps if cfg.sft.schedule == "cosine" else None
    trainee = make_trainee(model, sft_settings(cfg), accelerator, local_model_dir(model_dir), decay)
    try:
        losses = sft_train(trainee, episodes, cfg, log if accelerator.is_main_process else lambda line: None)
        # Sharded models gather whole tensors onto rank 0 first (every rank takes part).
        state = trainee.full_state() if trainee.full_state is not None else None
        if accelerator.is_main_process:
            export_weights(
                trainee.module,
                tokenizer,
                out_dir,
                cfg.export_format,
                store=store,
                state_dict=state,
                architecture=architecture,
            )
        accelerator.wait_for_everyone()
    finally:
        trainee.replay.close()
    return losses


def check_sft(cfg: TrainerConfig, conversations: int) -> None:
    """Refuse, before any work, what SFT cannot train: no conversations, a setting of the
    trainer path it cannot honour, fewer conversations a step than ranks."""
    if not conversations:
        raise ValueError("sft: no conversations given")
    if (why := cfg.sft_unsupported()) is not None:
        raise ValueError(f"sft: {why}")
    per_step = min(cfg.sft.batch_size, conversations)
    if per_step < cfg.processes:
        raise ValueError(
            f"sft: {per_step} conversation(s) a step for trainer.processes = {cfg.processes} ranks, each of which "
            "trains at least one: raise sft.batch_size (or give more conversations), or lower trainer.processes"
        )


class SFTJob(BaseModel):
    """What each torchrun rank of SFT reads (`--job FILE`)."""

    model_config = ConfigDict(extra="forbid")

    model_dir: str
    episodes_file: str  # torch.save'd list of TrainSequence
    out_dir: str  # a local folder rank 0 exports to
    losses_file: str  # where rank 0 writes each step's loss (JSON)
    trainer: TrainerConfig


def fine_tune(
    model_dir: str,
    episodes: list[TrainSequence],
    out_dir: str,
    cfg: TrainerConfig,
    log: Log = print,
    store: Store | None = None,
) -> list[float]:
    """Fine-tune the model of `model_dir` on `episodes` and export it to `out_dir` (a path
    inside `store` when given): in this process with one rank and no trainer.devices,
    else under torchrun. Returns each step's loss."""
    check_sft(cfg, len(episodes))
    if cfg.processes == 1 and cfg.devices is None:
        return train_rank(model_dir, episodes, out_dir, cfg, log, store)
    with tempfile.TemporaryDirectory(prefix="tandem-sft-") as tmp:
        folder = Path(tmp)
        remote = store is not None and store.protocol != "file"
        torch.save(episodes, folder / "episodes.pt")
        job = SFTJob(
            model_dir=model_dir,
            episodes_file=str(folder / "episodes.pt"),
            out_dir=str(folder / "weights") if remote else out_dir,
            losses_file=str(folder / "losses.json"),
            trainer=cfg,
        )
        (folder / "job.json").write_text(job.model_dump_json())
        _run_ranks(cfg, folder / "job.json", log)
        if remote:
            copy_to_store(folder / "weights", store, out_dir)
        return json.loads((folder / "losses.json").read_text())


def _run_ranks(cfg: TrainerConfig, job: Path, log: Log) -> None:
    """The ranks under torchrun on the trainer's devices, their output passed to `log` line by line."""
    target = ("-m", "engines.trainer.sft", "--job", str(job))
    proc = start_torchrun(cfg.processes, target, cfg, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = collections.deque(maxlen=30)
    for line in proc.stdout:
        last.append(line.rstrip("\n"))
        log(last[-1])
    if proc.wait():
        raise RuntimeError(f"sft: torchrun exited with code {proc.returncode}; its last lines:\n" + "\n".join(last))


def sft(
    model_dir: str,
    conversations: list[list[dict[str, str]]],
    out_dir: str,
    cfg: TrainerConfig | None = None,
    log: Log = print,
    store: Store | None = None,
    tool_format: Literal["text", ToolFormatName] = "text",
) -> Path:
    """Fine-tune the model of `model_dir` on `conversations`; export to `out_dir` (a path
    inside `store` when given, e.g. an s3:// weights URL) and return it. With
    `tool_format` naming a family's format ("hermes", "glm45", ...: engines/tool_formats/)
    the template lists the tools and assistant turns written as text actions are trained
    as their calls in that format (as the agent loop will ask for them)."""
    cfg = cfg or TrainerConfig()
    episodes = demonstration_episodes(load_tokenizer(model_dir), str(model_dir), conversations, tool_format)
    fine_tune(str(model_dir), episodes, str(out_dir), cfg, log, store)
    return Path(out_dir)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(description="One rank of SFT under torchrun.")
    parser.add_argument("--job", required=True, help="JSON file holding an SFTJob")
    args = parser.parse_args(argv)
    start_rank()
    job = SFTJob.model_validate_json(Path(args.job).read_text())
    episodes = torch.load(job.episodes_file, weights_only=False)
    losses = train_rank(job.model_dir, episodes, job.out_dir, job.trainer, partial(print, flush=True))
    if int(os.environ.get("RANK", "0")) == 0:
        Path(job.losses_file).write_text(json.dumps(losses))
    exit_rank()


if __name__ == "__main__":
    main()
