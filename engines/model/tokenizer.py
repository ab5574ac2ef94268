"""A byte-level BPE tokenizer trained locally with `tokenizers`, carrying the
agent protocol's special tokens and chat template by default, or any other set of
special tokens and chat template (the test models of other template families).
No hub downloads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from engines.protocol import CHAT_TEMPLATE, END, PAD, SPECIAL_TOKENS


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 1024,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
    chat_template: str = CHAT_TEMPLATE,
    eos_token: str = END,
    pad_token: str = PAD,
    bos_token: str | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`; `special_tokens` take the first ids (the named
    eos, pad and bos tokens must be among them)."""
    missing = [t for t in (eos_token, pad_token, bos_token) if t is not None and t not in special_tokens]
    if missing:
        raise ValueError(f"train_tokenizer: {missing} not in special_tokens {list(special_tokens)}")
    tok = Tokenizer(models.BPE())
    # No prefix space: token boundaries of a concatenation equal those of its parts
    # at special tokens, which keeps multi-turn token ids exact.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=eos_token,
        pad_token=pad_token,
        clean_up_tokenization_spaces=False,
        # Named only when there is one: the tiny tokenizer's files stay as they were.
        **({"bos_token": bos_token} if bos_token is not None else {}),
    )
    fast.chat_template = chat_template
    return fast
