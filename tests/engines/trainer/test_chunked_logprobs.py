"""The chunked output head gives the full head's numbers, without an [L, V] tensor."""

import numpy as np
import pytest
import torch
from torch.nn.functional import linear
from torch.profiler import ProfilerActivity, profile
from transformers import Qwen3MoeForCausalLM

from engines.model.families import tiny_config
from engines.trainer.chunked_logprobs import chunked_token_logprobs, output_weight
from engines.trainer.config import TrainerConfig
from engines.trainer.loss import rl_loss_sums, token_logprobs
from engines.trainer.packing import episodes_from_table, make_batch
from engines.trainer.rl_step import Trainee, forward_logprobs, make_optimizer
from engines.trainer.router_replay import RouterReplay
from tests.engines.trainer.rollouts import synthetic_rollouts

R, L, H, V = 3, 50, 16, 97


def _head_case(tied: bool, seed: int = 0):
    """Leaves (embedding, mixing matrix, lm_head weight) and the hidden states [R, L, H]
    they give; tied: the lm_head weight is the embedding, so it gets gradient twice."""
    g = torch.Generator().manual_seed(seed)
    emb = (0.3 * torch.randn(V, H, generator=g)).requires_grad_()
    mix = torch.randn(H, H, generator=g).requires_grad_()
    head = emb if tied else (0.3 * torch.randn(V, H, generator=g)).requires_grad_()
    ids = torch.randint(0, V, (R, L), generator=g)
    targets = torch.randint(0, V, (R, L), generator=g)
    weights = torch.randn(R, L, generator=g)
    return emb, mix, head, ids, targets, weights


def _run(tied: bool, temperature: float, chunk: int | None):
    """(logprobs, entropy, grads of hidden, embedding, mix, head) for a loss
    sum(w * lp) / tokens, as rl_step normalises it; chunk None: the full path."""
    emb, mix, head, ids, targets, weights = _head_case(tied)
    hidden = torch.tanh(emb[ids] @ mix)  # [R, L, H]
    hidden.retain_grad()
    if chunk is None:
        lp, ent = token_logprobs(linear(hidden, head), targets, temperature)
    else:
        lp, ent = chunked_token_logprobs(hidden, head, targets, temperature, chunk)
    ((lp * weights).sum() / lp.numel()).backward()
    grads = [hidden.grad, emb.grad, mix.grad, None if tied else head.grad]
    return lp.detach(), ent, grads


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [7, 64, 10_000])  # ragged last chunk, across rows, one chunk
def test_chunks_equal_the_full_head(tied: bool, temperature: float, chunk: int) -> None:
    lp, ent, grads = _run(tied, temperature, None)
    lp_c, ent_c, grads_c = _run(tied, temperature, chunk)
    torch.testing.assert_close(lp_c, lp, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent_c, ent, rtol=1e-6, atol=1e-6)
    for got, ref in zip(grads_c, grads):
        if ref is not None:
            torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)


def test_entropy_is_a_metric_without_gradient() -> None:
    emb, mix, head, ids, targets, _ = _head_case(False)
    lp, ent = chunked_token_logprobs(torch.tanh(emb[ids] @ mix), head, targets, 1.0, 8)
    assert lp.requires_grad and not ent.requires_grad
    assert lp.shape == ent.shape == (R, L) and lp.dtype == ent.dtype == torch.float32


def test_no_op_allocates_more_than_a_chunk_of_logits() -> None:
    n, chunk = 512, 64
    hidden = torch.randn(n, H, requires_grad=True)
    head = torch.randn(1000, H, requires_grad=True)
    targets = torch.randint(0, 1000, (n,))

    def largest_allocation(step) -> int:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            lp, _ = step()
            lp.sum().backward()
        return max(e.cpu_memory_usage for e in prof.events())

    full = largest_allocation(lambda: token_logprobs(linear(hidden, head), targets))
    chunked = largest_allocation(lambda: chunked_token_logprobs(hidden, head, targets, 1.0, chunk))
    assert full >= n * 1000 * 4  # the full path holds [n, V] fp32
    assert chunked <= chunk * 1000 * 4


def test_bad_chunk_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        chunked_token_logprobs(torch.zeros(2, H), torch.zeros(V, H), torch.zeros(2, dtype=torch.long), 1.0, 0)


def _untied_model():
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(tiny_config("qwen3_moe", vocab_size=300))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_forward_logprobs_on_packed_rows_match_the_full_path(tied: bool, tiny_model) -> None:
    """Rows holding several episodes, chunks of 16 tokens that cross episode
    boundaries, router replay on, temperature 0.7: logprobs, entropy, loss and every
    parameter's gradient as with the full logits."""
    model = tiny_model if tied else _untied_model()
    assert (output_weight(model) is model.get_input_embeddings().weight) == tied
    table = synthetic_rollouts(model, groups=3, group_size=4, seed=1)
    eps = episodes_from_table(table)
    for e, a in zip(eps, np.linspace(-1, 1, len(eps))):
        e.advantage = float(a)
    batch = make_batch(eps, 64, packing=True)
    assert batch.input_ids.shape[0] < len(eps)  # really packed

    def run(chunk: int):
        cfg = TrainerConfig(seq_len=64, temperature=0.7, logprob_chunk_tokens=chunk)
        opt, sched = make_optimizer(model, cfg)
        with RouterReplay(model) as replay:
            trainee = Trainee(model, model, opt, sched, replay)
            lp, ent, _ = forward_logprobs(trainee, batch, cfg)
            s = rl_loss_sums(lp, batch.inference_logprobs, batch.advantages, batch.loss_mask, cfg)
            model.zero_grad(set_to_none=True)
            (s.loss / s.tokens).backward()
        return lp.detach(), ent, s.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    lp, ent, loss, grads = run(0)
    lp_c, ent_c, loss_c, grads_c = run(16)
    torch.testing.assert_close(lp_c, lp, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent_c, ent, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loss_c, loss, rtol=1e-6, atol=1e-6)
    assert grads_c.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=1e-6, atol=1e-6, msg=name)


def test_default_config_takes_the_chunked_path() -> None:
    assert TrainerConfig().logprob_chunk_tokens > 0
    with pytest.raises(ValueError):
        TrainerConfig(logprob_chunk_tokens=-1)
