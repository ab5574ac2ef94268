"""The tiny MoE and its tokenizer: the chat template, token-exact turn boundaries,
sizes, and loading errors."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from engines.model.load import load_moe_causal_lm
from engines.protocol import ASSISTANT, END, SPECIAL_TOKENS, TOOL, USER, render_messages


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_jinja_chat_template_equals_the_python_renderer(tokenizer):
    messages = [
        {"role": "user", "content": "m.py\n1 def f(a):\n2     return a - 1"},
        {"role": "assistant", "content": "edit m.py 2\n    return a + 1"},
        {"role": "tool", "content": "edited m.py"},
        {"role": "assistant", "content": "submit"},
    ]
    for gen in (False, True):
        assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen) == render_messages(
            messages, add_generation_prompt=gen
        )


def test_special_tokens_are_single_ids_and_split_turns_exactly(tokenizer):
    for token in SPECIAL_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1
    parts = [
        USER + "fix f",
        END + ASSISTANT,
        "edit m.py 2\n    return a + 1",
        END,
        TOOL + "edited m.py" + END + ASSISTANT,
    ]
    pieces = [i for p in parts for i in tokenizer.encode(p, add_special_tokens=False)]
    assert pieces == tokenizer.encode("".join(parts), add_special_tokens=False)
    assert tokenizer.decode(pieces) == "".join(parts)


def test_tiny_model_is_a_small_moe(tiny_model_dir):
    model = load_moe_causal_lm(tiny_model_dir)
    cfg = model.config
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.tie_word_embeddings) == (8, 2, True)
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 3e6


def test_a_dense_model_is_refused_with_a_clear_error(tmp_path):
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    ).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_moe_causal_lm(tmp_path)
