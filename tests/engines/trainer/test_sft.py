import numpy as np
import pytest

from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.protocol import render_messages
from engines.trainer.config import SFTConfig, TrainerConfig
from engines.trainer.sft import conversation_episode, mean_nll, sft

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
    from engines.env.micro import generate_micro_tasks
    from engines.env.micro_demos import oracle_messages

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
