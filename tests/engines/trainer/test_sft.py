import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.protocol import render_messages
from engines.trainer.config import SFTConfig, TrainerConfig
from engines.trainer.distributed import make_accelerator, make_trainee
from engines.trainer.packing import make_batch
from engines.trainer.sft import (
    check_sft,
    conversation_episode,
    fine_tune,
    mean_nll,
    rank_share,
    sft,
    sft_backward,
    sft_settings,
)

CONV = [
    {"role": "user", "content": "def add(a, b):\n    return a - b\n"},
    {"role": "assistant", "content": "edit m.py 2\n    return a + b"},
    {"role": "tool", "content": "ok"},
    {"role": "assistant", "content": "submit"},
]


def test_tokens_match_the_chat_template_and_loss_covers_assistant_turns(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    e = conversation_episode(tok, CONV)
    full = tok.encode(render_messages(CONV), add_special_tokens=False)
    assert [*e.input_ids, e.targets[-1]] == full
    learned = tok.decode(e.targets[e.loss_mask].tolist())
    assert learned == "edit m.py 2\n    return a + b<|end|>submit<|end|>"


def test_conversation_errors_name_the_problem(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    with pytest.raises(ValueError, match="conversation 3, message 0: role 'system'"):
        conversation_episode(tok, [{"role": "system", "content": "x"}], "conversation 3")
    with pytest.raises(ValueError, match="no assistant message"):
        conversation_episode(tok, [{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="max_steps or max_seconds"):
        SFTConfig(max_steps=None, max_seconds=None)


def test_sft_lowers_the_loss_and_exports(tiny_model_dir, tmp_path):
    rng = np.random.default_rng(0)
    convs = []
    for _ in range(64):
        a, b = rng.integers(1, 9, 2)
        convs.append(
            [
                {"role": "user", "content": f"def f(x):\n    return x * {a} - {b}\n"},
                {"role": "assistant", "content": f"edit m.py 2\n    return x * {a} + {b}"},
            ]
        )
    cfg = TrainerConfig(seq_len=128, sft=SFTConfig(max_steps=30, batch_size=16, log_every=10))
    tok = load_tokenizer(tiny_model_dir)
    eps = [conversation_episode(tok, c) for c in convs]
    before = mean_nll(load_moe_causal_lm(tiny_model_dir), eps, 128)
    lines = []
    out = sft(str(tiny_model_dir), convs, str(tmp_path / "sft"), cfg, log=lines.append)
    after = mean_nll(load_moe_causal_lm(out), eps, 128)
    assert after < 0.6 * before, (before, after)
    assert lines[0].startswith("[sft] step 1 loss") and any(line.startswith("[sft] step 30 ") for line in lines)


@pytest.mark.slow
def test_sft_on_oracle_demonstrations_lowers_held_out_loss(tiny_model_dir, tmp_path):
    from engines.env.task_sources.micro import generate_micro_tasks
    from engines.env.task_sources.micro_demos import oracle_messages

    train = [oracle_messages(t) for t in generate_micro_tasks(200, seed=11)]
    held_out = [oracle_messages(t) for t in generate_micro_tasks(20, seed=12, split="heldout")]
    tok = load_tokenizer(tiny_model_dir)
    eps = [conversation_episode(tok, c) for c in held_out]
    seq_len = max(len(e) for e in eps + [conversation_episode(tok, c) for c in train]) + 1
    cfg = TrainerConfig(seq_len=seq_len, sft=SFTConfig(max_steps=20, batch_size=8, log_every=10))
    before = mean_nll(load_moe_causal_lm(tiny_model_dir), eps, seq_len)
    out = sft(str(tiny_model_dir), train, str(tmp_path / "sft"), cfg, log=lambda line: None)
    after = mean_nll(load_moe_causal_lm(out), eps, seq_len)
    assert after < 0.8 * before, (before, after)


def test_messages_marked_not_to_train_are_masked(tiny_model_dir):
    from engines.model.load import load_tokenizer
    from engines.trainer.sft import conversation_episode

    tok = load_tokenizer(tiny_model_dir)
    wrong = {"role": "assistant", "content": "edit m.py 2\n    return a", "train": False}
    right = {"role": "assistant", "content": "edit m.py 2\n    return b"}
    user, tool = {"role": "user", "content": "fix m.py"}, {"role": "tool", "content": "reverted"}
    with_failure = conversation_episode(tok, [user, wrong, tool, right])
    plain = conversation_episode(tok, [user, right])
    assert with_failure.loss_mask.sum() == plain.loss_mask.sum()  # only the fix (and its end token) is learned


def test_length_grouped_batches_cover_each_epoch_once_and_pad_less():
    import itertools
    import random

    from engines.trainer.sft import length_grouped_batches

    rng = random.Random(0)
    lengths = [rng.randint(100, 300) for _ in range(640)]
    batches = list(itertools.islice(length_grouped_batches(lengths, 32, random.Random(1), window=8), 20))
    assert sorted(i for b in batches for i in b) == list(range(640))  # one epoch: every conversation once
    padded = sum(32 * max(lengths[i] for i in b) for b in batches)
    shuffled = list(range(640))
    random.Random(1).shuffle(shuffled)
    plain = sum(32 * max(lengths[i] for i in shuffled[k : k + 32]) for k in range(0, 640, 32))
    assert padded < 0.8 * plain


def _demos(n: int) -> list[list[dict[str, str]]]:
    return [
        [
            {"role": "user", "content": f"def f(x):\n    return x * {i % 7 + 2} - {i % 5 + 1}\n"},
            {
                "role": "assistant",
                "content": f"edit m.py 2\n    return x * {i % 7 + 2} + {i % 5 + 1}" + "\nsubmit" * (i % 3),
            },
        ]
        for i in range(n)
    ]


def _full_logits_nll(model, batch) -> torch.Tensor:
    """SFT's summed loss as it was first computed: log_softmax over the whole [rows, L, V] logits."""
    logits = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False).logits
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    return -(logp[batch.loss_mask]).sum()


@pytest.mark.parametrize("chunk", [0, 16], ids=["full-logits-head", "chunked-head"])
def test_the_sft_loss_and_gradient_are_the_full_logits_ones(tiny_model_dir, chunk):
    """SFT's loss through the trainer's head (chunks of 16 tokens: several per batch) is the
    old full-logits loss to float round-off; with trainer.logprob_chunk_tokens = 0 bit for bit."""
    cfg = TrainerConfig(seq_len=128, logprob_chunk_tokens=chunk, sft=SFTConfig(max_steps=1, batch_size=8))
    eps = [conversation_episode(load_tokenizer(tiny_model_dir), c) for c in _demos(8)]
    batch = make_batch(eps, cfg.seq_len, cfg.packing)
    model = load_moe_causal_lm(tiny_model_dir)
    ref = _full_logits_nll(model, batch) / batch.num_loss_tokens
    ref.backward()
    trainee = make_trainee(load_moe_causal_lm(tiny_model_dir), sft_settings(cfg), make_accelerator())
    loss = sft_backward(trainee, eps, sft_settings(cfg))
    assert batch.num_loss_tokens > 3 * 16
    assert loss == pytest.approx(float(ref), rel=1e-6)
    for (name, p), q in zip(model.named_parameters(), trainee.module.parameters()):
        if chunk == 0:
            assert torch.equal(q.grad, p.grad), name
        else:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-7, msg=name)
    trainee.replay.close()


def test_what_sft_cannot_train_is_refused_before_any_work():
    steps = SFTConfig(max_steps=1, batch_size=4)
    with pytest.raises(ValueError, match="no conversations"):
        check_sft(TrainerConfig(sft=steps), 0)
    with pytest.raises(ValueError, match="trainer.nodes = 2: SFT starts its trainer.processes ranks on this machine"):
        check_sft(TrainerConfig(processes=2, nodes=2, rendezvous="h:29500", sft=steps), 8)
    with pytest.raises(
        ValueError, match=r"3 conversation\(s\) a step for trainer.processes = 4 .*raise sft.batch_size"
    ):
        check_sft(TrainerConfig(processes=4, sft=steps), 3)
    check_sft(TrainerConfig(processes=4, parallelism="fsdp2", sft=steps), 4)


def test_each_rank_trains_a_balanced_share_in_the_steps_order(tiny_model_dir):
    eps = [conversation_episode(load_tokenizer(tiny_model_dir), c) for c in _demos(9)]
    shares = [rank_share(eps, 2, r) for r in range(2)]
    assert sorted(id(e) for s in shares for e in s) == sorted(id(e) for e in eps)
    place = {id(e): i for i, e in enumerate(eps)}
    for share in shares:
        assert [place[id(e)] for e in share] == sorted(place[id(e)] for e in share)
    tokens = [sum(len(e) for e in s) for s in shares]
    assert abs(tokens[0] - tokens[1]) <= max(len(e) for e in eps)
    assert [id(e) for e in rank_share(eps, 1, 0)] == [id(e) for e in eps]


TWO_RANK_STEPS = SFTConfig(lr=1e-3, warmup_steps=0, max_steps=3, batch_size=8, log_every=1)


@pytest.fixture(scope="module")
def one_process_sft(tiny_model_dir, tmp_path_factory):
    """Three SFT steps in this process: the episodes, each step's loss, the exported folder."""
    eps = [conversation_episode(load_tokenizer(tiny_model_dir), c) for c in _demos(16)]
    out = tmp_path_factory.mktemp("sft-one") / "weights"
    return eps, fine_tune(str(tiny_model_dir), eps, str(out), TrainerConfig(seq_len=128, sft=TWO_RANK_STEPS)), out


@pytest.mark.slow
@pytest.mark.parametrize(
    "parallelism",
    [{"parallelism": "ddp"}, {"parallelism": "fsdp2"}, {"parallelism": "fsdp2_ep", "expert_parallel_size": 2}],
    ids=["ddp", "fsdp2", "fsdp2_ep"],
)
def test_sft_on_two_ranks_trains_like_one_process(one_process_sft, tiny_model_dir, tmp_path, parallelism):
    """Two gloo ranks under torchrun, the model replicated (ddp) or sharded (fsdp2: each rank
    reads its shard; fsdp2_ep: half the experts each), each rank training its half of every
    step: the losses and the exported weights of one process."""
    eps, one, one_dir = one_process_sft
    lines: list[str] = []
    cfg = TrainerConfig(seq_len=128, processes=2, sft=TWO_RANK_STEPS, **parallelism)
    two = fine_tune(str(tiny_model_dir), eps, str(tmp_path / "two"), cfg, log=lines.append)
    assert two == pytest.approx(one, rel=1e-4) and len(two) == 3
    assert any(line.startswith("[sft] step 3 loss") for line in lines), lines[-20:]
    probe = torch.tensor([[5, 17, 33, 2, 41, 8, 19, 60]])
    with torch.no_grad():
        got, want = (load_moe_causal_lm(d).eval()(input_ids=probe).logits for d in (tmp_path / "two", one_dir))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)  # measured: under 1e-6 (another summation order)


@pytest.mark.parametrize(
    "ranks",
    [{}, pytest.param({"processes": 2, "parallelism": "fsdp2"}, marks=pytest.mark.slow)],
    ids=["one-process", "fsdp2"],
)
def test_frozen_embeddings_are_exported_as_they_were_while_the_rest_trains(tiny_model_dir, tmp_path, ranks):
    """sft.freeze_embeddings: the token embeddings (tied to the output layer) keep their
    values, in one process and sharded over two ranks; every other weight may train."""
    eps = [conversation_episode(load_tokenizer(tiny_model_dir), c) for c in _demos(16)]
    frozen = TWO_RANK_STEPS.model_copy(update={"freeze_embeddings": True})
    fine_tune(str(tiny_model_dir), eps, str(tmp_path / "out"), TrainerConfig(seq_len=128, sft=frozen, **ranks))
    before, after = (load_file(d / "model.safetensors") for d in (tiny_model_dir, tmp_path / "out"))
    embedding = "model.embed_tokens.weight"
    assert torch.equal(before[embedding], after[embedding])
    assert any(not torch.equal(before[k], after[k]) for k in before if k != embedding)
