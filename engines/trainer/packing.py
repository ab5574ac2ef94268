"""Episodes as training sequences, packed into fixed-length rows.

Convention (shared with the rollout lane, see storage.schema.ROLLOUTS): an episode
of prompt P and completion C is the token sequence S = P + C. The model is fed
S[:-1] and predicts S[1:], so position i predicts S[i+1]. `loss_mask`,
`completion_logprobs` and the advantage apply to the completion tokens; the target
at position i is completion token i + 1 - len(P). `routed_experts` has one entry per
fed position (len(S) - 1 tokens, every token inference ran through the model:
the last sampled token never is), layers in model order, so it lines up with the
fed positions one to one.

Packing: first-fit-decreasing into rows of `seq_len` tokens. Each episode restarts
`position_ids` at 0; with no attention mask, transformers turns position restarts
into a block-diagonal causal mask, so attention stays inside each episode (tested:
packed loss == unpacked loss). The row's unused tail is padding that restarts
positions too and carries no loss.

Unpacked (`packing=False`): one episode per row, padded at its end. In RL updates
(`continued=True`) the padding continues the episode's positions, so the row is one
causal sequence and attention takes the causal kernel with no mask (the masked kernel
costs about 2x on CPU: benchmarks/trainer_step.py); padding comes after every real
token, so no real token attends to it. `length_sorted_batches` groups episodes of
similar length so that each micro-batch pads little. SFT keeps the restarted padding
positions its warm starts (and the golden curves built on them) were made with: the
masked kernel rounds differently, enough to move a sampled token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch


@dataclass
class TrainSequence:
    """One episode as the trainer feeds it to the model (engines/inference/types.py
    Episode is the episode as generated); every array has one entry per fed position."""

    input_ids: np.ndarray  # int64 [T]   S[:-1]
    targets: np.ndarray  # int64 [T]     S[1:]
    loss_mask: np.ndarray  # bool [T]    target is a model-generated completion token
    inference_logprobs: np.ndarray  # float32 [T], 0 off the loss mask
    advantage: float
    routes: np.ndarray | None  # int64 [T, layers, top_k] or None
    prompt_len: int = 0  # len(P), the tokens the group's samples share (0: unknown)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class Batch:
    """Rows of packed episodes (R rows of L tokens)."""

    input_ids: torch.Tensor  # long [R, L]
    position_ids: torch.Tensor  # long [R, L]
    targets: torch.Tensor  # long [R, L]
    loss_mask: torch.Tensor  # bool [R, L]
    valid: torch.Tensor  # bool [R, L]: a real token, not padding
    inference_logprobs: torch.Tensor  # float [R, L]
    advantages: torch.Tensor  # float [R, L]
    routes: torch.Tensor | None  # long [R, L, layers, top_k]
    # The update's shared prompts (a row per group, no loss) the rows continue: shared_prompts.py.
    prefix: Batch | None = None
    prefix_rows: torch.Tensor | None = None  # long [R]: the prefix row each row continues

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())

    def to(self, device: torch.device) -> Batch:
        """The same rows on `device` (the model's: a GPU rank's own device)."""
        if self.input_ids.device == torch.device(device):
            return self
        return Batch(
            *(
                None if t is None else t.to(device)
                for t in (
                    self.input_ids,
                    self.position_ids,
                    self.targets,
                    self.loss_mask,
                    self.valid,
                    self.inference_logprobs,
                    self.advantages,
                    self.routes,
                )
            ),
            prefix=self.prefix,  # moved once per update, by rl_step's prompt cache
            prefix_rows=None if self.prefix_rows is None else self.prefix_rows.to(device),
        )

    def rows(self, start: int, stop: int) -> Batch:
        r = None if self.routes is None else self.routes[start:stop]
        return Batch(
            self.input_ids[start:stop],
            self.position_ids[start:stop],
            self.targets[start:stop],
            self.loss_mask[start:stop],
            self.valid[start:stop],
            self.inference_logprobs[start:stop],
            self.advantages[start:stop],
            r,
        )


def episode_from_row(row: dict, where: str = "episode") -> TrainSequence:
    """Build a `TrainSequence` from one ROLLOUTS row (a dict); errors name `where` and the field."""
    prompt = np.asarray(row["prompt_ids"], np.int64)
    completion = np.asarray(row["completion_ids"], np.int64)
    if len(prompt) == 0 or len(completion) == 0:
        raise ValueError(f"{where}: prompt_ids and completion_ids must both be non-empty")
    n = len(completion)
    mask = np.asarray(row["loss_mask"] if row.get("loss_mask") is not None else [True] * n, bool)
    lps = np.asarray(row["completion_logprobs"] if row.get("completion_logprobs") is not None else [], np.float32)
    if len(mask) != n:
        raise ValueError(f"{where}: loss_mask has {len(mask)} entries for {n} completion tokens")
    if len(lps) != n:
        raise ValueError(f"{where}: completion_logprobs has {len(lps)} entries for {n} completion tokens")
    seq = np.concatenate([prompt, completion])
    fed = len(seq) - 1
    loss_mask = np.zeros(fed, bool)
    logprobs = np.zeros(fed, np.float32)
    loss_mask[len(prompt) - 1 :] = mask  # position i predicts completion token i + 1 - len(P)
    logprobs[len(prompt) - 1 :] = np.where(mask, lps, 0.0)
    adv = row.get("advantage")
    return TrainSequence(
        seq[:-1],
        seq[1:],
        loss_mask,
        logprobs,
        float(adv) if adv is not None else 0.0,
        _routes(row, fed, where),
        len(prompt),
    )


def _routes(row: dict, fed: int, where: str) -> np.ndarray | None:
    data, shape = row.get("routed_experts"), row.get("routed_experts_shape")
    if data is None:
        return None
    if shape is None or len(shape) != 3:
        raise ValueError(
            f"{where}: routed_experts present but routed_experts_shape is {shape}; expected [tokens, layers, top_k]"
        )
    count = int(np.prod(shape))
    if count == 0 or len(data) % count:
        raise ValueError(f"{where}: routed_experts has {len(data)} bytes, not a whole multiple of shape {list(shape)}")
    dtype = {1: np.uint8, 2: np.uint16}.get(len(data) // count)
    if dtype is None:
        raise ValueError(f"{where}: routed_experts must be uint8 or uint16, got {len(data) // count} bytes per entry")
    routes = np.frombuffer(data, dtype=dtype).reshape(shape).astype(np.int64)
    if routes.shape[0] != fed:
        raise ValueError(
            f"{where}: routed_experts covers {routes.shape[0]} tokens; expected {fed} "
            "(prompt + completion - 1: every position fed through the model)"
        )
    return routes


def episodes_from_table(table: pa.Table) -> list[TrainSequence]:
    """Every row of a ROLLOUTS table as a `TrainSequence` (errors name the task and row)."""
    out = []
    for i, row in enumerate(table.to_pylist()):
        out.append(episode_from_row(row, f"episode {i} (task {row.get('task_id')!r}, group {row.get('group_id')!r})"))
    return out


def pack_rows(lengths: list[int], seq_len: int) -> list[list[int]]:
    """First-fit-decreasing: indices of the episodes that share each row."""
    too_long = [(i, n) for i, n in enumerate(lengths) if n > seq_len]
    if too_long:
        i, n = too_long[0]
        raise ValueError(
            f"episode {i} has {n} tokens, more than seq_len={seq_len} ({len(too_long)} such episodes): "
            "raise TrainerConfig.seq_len or cap episode length at generation"
        )
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, space in enumerate(free):
            if lengths[i] <= space:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(seq_len - lengths[i])
    return rows


def collate(episodes: list[TrainSequence], rows: list[list[int]], row_len: int, continued: bool = False) -> Batch:
    """Tensors for `rows` (lists of episode indices), each row `row_len` tokens long.
    `continued`: a row of one episode continues its positions into the padding (no mask
    needed); otherwise padding restarts them, as its own sequence."""
    R = len(rows)
    ids = np.zeros((R, row_len), np.int64)
    pos = np.zeros((R, row_len), np.int64)
    tgt = np.zeros((R, row_len), np.int64)
    mask = np.zeros((R, row_len), bool)
    valid = np.zeros((R, row_len), bool)
    lps = np.zeros((R, row_len), np.float32)
    adv = np.zeros((R, row_len), np.float32)
    with_routes = bool(episodes) and all(episodes[i].routes is not None for row in rows for i in row)
    routes = None
    if with_routes:
        _, layers, k = next(episodes[i].routes.shape for row in rows for i in row)
        routes = np.zeros((R, row_len, layers, k), np.int64)
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            e, n = episodes[i], len(episodes[i])
            s = slice(at, at + n)
            ids[r, s], tgt[r, s], mask[r, s], lps[r, s] = e.input_ids, e.targets, e.loss_mask, e.inference_logprobs
            pos[r, s] = np.arange(n)
            valid[r, s] = True
            adv[r, s] = e.advantage
            if routes is not None:
                routes[r, s] = e.routes
            at += n
        if continued and len(row) == 1:  # the row reads as one causal sequence
            pos[r, at:] = np.arange(at, row_len)
        else:  # padding is its own (loss-free) sequence
            pos[r, at:] = np.arange(row_len - at)
    t = torch.from_numpy
    return Batch(t(ids), t(pos), t(tgt), t(mask), t(valid), t(lps), t(adv), None if routes is None else t(routes))


def length_sorted_batches(episodes: list[TrainSequence], token_budget: int) -> list[list[TrainSequence]]:
    """Episodes longest first, cut into groups whose rows padded to the group's longest
    episode hold at most `token_budget` tokens (at least one episode per group)."""
    groups: list[list[TrainSequence]] = []
    for e in sorted(episodes, key=len, reverse=True):
        if groups and (len(groups[-1]) + 1) * len(groups[-1][0]) <= token_budget:
            groups[-1].append(e)
        else:
            groups.append([e])
    return groups


def make_batch(episodes: list[TrainSequence], seq_len: int, packing: bool = True, continued: bool = False) -> Batch:
    """Packed rows of `seq_len` tokens, or (packing=False) one episode per row padded
    to the longest episode (`continued`: see collate)."""
    if not packing:
        longest = max((len(e) for e in episodes), default=1)
        return collate(episodes, [[i] for i in range(len(episodes))], longest, continued)
    return collate(episodes, pack_rows([len(e) for e in episodes], seq_len), seq_len)
