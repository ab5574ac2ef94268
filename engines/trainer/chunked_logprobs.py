"""Target logprobs and entropy from the last hidden states, a chunk of tokens at a time.

Owns the output head of the RL loss when the full logits cannot be held: at
L = 131,072 tokens and V = 150k, one fp32 [L, V] tensor is 79 GB, and the plain path
(`loss.token_logprobs`) keeps several. Here the projection (hidden @ W.T, W the
lm_head weight, tied or not), the temperature scaling, the log-softmax, the target
gather and the entropy run over `chunk` tokens at a time:

    hidden [R, L, H], weight [V, H], targets [R, L] -> logprobs [R, L], entropy [R, L]

Peak memory of the head is about two [chunk, V] fp32 tensors plus the gradients of
`hidden` ([R, L, H]) and `weight` ([V, H]), whatever L is. The backward recomputes
each chunk's logits (one more [chunk, H] x [H, V] product per chunk) rather than keep
them. Each chunk runs the same operations as `token_logprobs` on its rows, so the
numbers equal the full path's (tests/engines/trainer/test_chunked_logprobs.py).

Entropy is a metric: it has no gradient, as on the full path.

Not owned here: the model's forward (rl_step.forward_logprobs asks it for hidden
states and no logits) and the loss on top of the logprobs (loss.py). The projection
runs in the dtype of `hidden` and `weight`: bf16 under FSDP2's bf16 policy, as the
model's own lm_head would; under ddp's autocast (which covers the model's forward
only) it runs in fp32, more precise than the full path's bf16 logits.
"""

from __future__ import annotations

import torch
from torch import nn


def output_weight(model: nn.Module) -> torch.Tensor:
    """The output projection's weight [V, H] of a transformers causal LM (the embedding
    matrix when tied). Call after the forward: FSDP2 keeps the root's parameters
    (embeddings, norm, lm_head) unsharded from the forward to the end of backward."""
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear) or head.bias is not None:
        raise ValueError(
            f"{type(model).__name__}: logprob chunks need a bias-free nn.Linear lm_head; "
            "set trainer.logprob_chunk_tokens = 0 for this model"
        )
    for scaled in ("final_logit_softcapping", "logit_scale"):
        if getattr(model.config, scaled, None):
            raise ValueError(
                f"{type(model).__name__} has config.{scaled}, which the chunked head does not apply: "
                "set trainer.logprob_chunk_tokens = 0 for this model"
            )
    weight = head.weight
    if hasattr(weight, "full_tensor"):  # a DTensor: the root was resharded after forward
        raise ValueError("lm_head weight is still sharded after the forward: keep FSDP2's root unsharded after forward")
    return weight


def chunked_token_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs [...], entropy [...]) in fp32 of `targets` [...] under
    softmax(hidden [..., H] @ weight.T / temperature), `chunk` tokens at a time."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 token, got {chunk}")
    shape = targets.shape
    lp, entropy = _ChunkedLogprobs.apply(
        hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1), float(temperature), int(chunk)
    )
    return lp.reshape(shape), entropy.reshape(shape)


def _scaled_logits(h: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """[n, V] fp32 logits / temperature, as the full path forms them (lm_head, .float(), /T),
    divided in place: one [n, V] fp32 tensor alive, not two."""
    return torch.nn.functional.linear(h, weight).float().div_(temperature)


class _ChunkedLogprobs(torch.autograd.Function):
    """hidden [N, H], weight [V, H], targets [N] -> logprobs [N], entropy [N] (no grad)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk):
        n = hidden.shape[0]
        lp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty(n, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            logp = torch.log_softmax(_scaled_logits(hidden[s:e], weight, temperature), dim=-1)
            lp[s:e] = logp.gather(-1, targets[s:e, None]).squeeze(-1)
            entropy[s:e] = -logp.exp().mul_(logp).sum(-1)
            del logp
        ctx.save_for_backward(hidden, weight, targets)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.mark_non_differentiable(entropy)
        return lp, entropy

    @staticmethod
    def backward(ctx, grad_lp, _grad_entropy):
        hidden, weight, targets = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        # Summed over chunks in fp32 (bf16 sums of hundreds of chunks lose bits), cast
        # to the weight's dtype once at the end.
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        n = hidden.shape[0]
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            g = grad_lp[s:e, None].float()
            # d lp / d z = onehot(target) - softmax(z), with z = logits / T: the same
            # elementwise terms autograd forms on the full path.
            d = torch.log_softmax(_scaled_logits(hidden[s:e], weight, temperature), dim=-1).exp_()
            d.mul_(-g)
            d.scatter_add_(-1, targets[s:e, None], g)
            d = d.div_(temperature).to(hidden.dtype)  # [n, V], back through /T and .float()
            if need_h:
                grad_h[s:e] = d @ weight
            if need_w:
                grad_w.add_(d.t() @ hidden[s:e])
            del d
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None
