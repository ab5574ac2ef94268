"""The chat format (engines/model/chat_format.py) on real tokenizers: the tiny one (whose
ids must not move), and others trained here with other families' templates (ChatML,
Llama-3 headers, Qwen3's thinking switch, OLMoE-Instruct's template without a tool role).
No server: the pieces the agent loop appends, checked against the template's own
rendering of the conversation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engines.model.chat_format import SYSTEM_PROMPT, TOOL_CALL_SYSTEM_PROMPT, ChatFormat, split_reasoning
from engines.model.load import load_tokenizer
from engines.model.tokenizer import train_tokenizer
from engines.protocol import ASSISTANT, END, TOOL, TOOLS, USER, parse_action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call
from tests.chat_models import FAMILIES, build_chat_model, chat_tokenizer

ACTIONS = ["view m.py", "edit m.py 2\n    return a + b", "submit"]
OBSERVATIONS = ["1 def add(a, b):\n2     return a - b", "FAILED test_m.py::test_add\nreverted (attempt 1 of 3)"]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, build_chat_model(request.param, tmp_path_factory.mktemp(request.param))


def episode_pieces(
    chat: ChatFormat, closed: list[bool], turns: list[str] = ACTIONS
) -> tuple[list[list[int]], list[dict]]:
    """The id pieces an agent loop appends over a 3-turn episode of `turns`, turn k closed
    by the model (its end token sampled) when closed[k]; and the conversation's messages."""
    messages = chat.first_messages("fix add")
    pieces = [chat.prompt_ids(messages)]
    for k, action in enumerate(turns):
        model_ids = chat.encode(action) + ([chat.end_id] if closed[k] else [])
        pieces.append(model_ids)
        messages.append({"role": "assistant", "content": action})
        if k < len(OBSERVATIONS):
            tool = {"role": "tool", "content": OBSERVATIONS[k]}
            pieces.append(chat.continuation_ids(messages, [tool], chat.end_id if closed[k] else None))
            messages.append(tool)
    return pieces, messages


def test_the_tiny_template_frames_turns_as_before(tiny_model_dir: Path) -> None:
    tok = load_tokenizer(tiny_model_dir)
    chat = ChatFormat.from_tokenizer(tok, tiny_model_dir)
    end = tok.convert_tokens_to_ids(END)
    assert chat.system_prompt is None and chat.end_id == end and chat.stop_ids == (end,) and chat.extra_stop_ids == ()
    enc = chat.encode
    assert chat.prompt_ids(chat.first_messages("fix add")) == enc(USER + "fix add" + END + ASSISTANT)
    history = [*chat.first_messages("fix add"), {"role": "assistant", "content": "view m.py"}]
    tool = [{"role": "tool", "content": "1 x"}]
    assert chat.continuation_ids(history, tool, end) == enc(TOOL + "1 x" + END + ASSISTANT)
    assert chat.continuation_ids(history, tool, None) == enc(END + TOOL + "1 x" + END + ASSISTANT)


@pytest.mark.chat_template
def test_end_of_turn_and_stop_ids_come_from_the_template_and_generation_config(family_dir) -> None:
    name, model_dir = family_dir
    spec = FAMILIES[name]
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir)
    end = tok.convert_tokens_to_ids(spec.end_of_turn)
    assert chat.end_id == end and chat.stop_ids[0] == end
    assert set(chat.stop_ids) == {end, *(tok.convert_tokens_to_ids(t) for t in spec.generation_eos)}
    # The server stops at the model's own eos ids by itself; only the others are sent.
    assert chat.extra_stop_ids == (() if spec.eos == spec.end_of_turn else (end,))
    assert chat.system_prompt == SYSTEM_PROMPT and chat.first_messages("p")[0] == {
        "role": "system",
        "content": SYSTEM_PROMPT,
    }


@pytest.mark.chat_template
@pytest.mark.parametrize("closed", [[True, True, True], [False, True, False]], ids=["closed", "cut-by-length"])
def test_appended_pieces_are_the_templates_rendering_of_the_conversation(family_dir, closed: list[bool]) -> None:
    name, model_dir = family_dir
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir)
    pieces, messages = episode_pieces(chat, closed)
    ids = [i for p in pieces for i in p]
    text = tok.decode(ids, skip_special_tokens=False)
    rendered = tok.apply_chat_template(messages, tokenize=False)
    # The ids hold exactly what the template renders, up to the final turn's end token and what follows it.
    end = FAMILIES[name].end_of_turn
    assert rendered.startswith(text) and rendered[len(text) :] in {"", "\n", end, end + "\n"}
    prompt_text = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert tok.decode(pieces[0], skip_special_tokens=False) == prompt_text
    for piece in pieces[::2]:  # every piece not the model's round-trips through its own text
        assert chat.encode(tok.decode(piece, skip_special_tokens=False)) == piece


@pytest.mark.chat_template
def test_sft_ids_are_the_agent_loops_pieces_and_the_loss_covers_assistant_turns(family_dir) -> None:
    name, model_dir = family_dir
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir)
    pieces, messages = episode_pieces(chat, [True, True, True])
    messages[2]["train"] = False  # a failed attempt: shown, not learned
    ids, mask = chat.conversation(messages[1:])  # the system prompt is added as the agent loop adds it
    assert ids == [i for p in pieces for i in p]
    learned = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    end = FAMILIES[name].end_of_turn
    assert learned == f"{ACTIONS[1]}{end}{ACTIONS[2]}{end}"
    with pytest.raises(ValueError, match="conversation 7, message 0: role 'robot'"):
        chat.conversation([{"role": "robot", "content": "x"}], "conversation 7")


# Re-renders history as some Hub templates do: earlier assistant turns lose their
# reasoning (Qwen3) and every content is stripped (Llama-3). The loop must not care.
REWRITING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'].split('</think>')[-1] | trim }}"
    "{% else %}{{ m['content'] | trim }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.chat_template
def test_a_template_that_rewrites_history_never_changes_the_ids_behind_the_model() -> None:
    tok = train_tokenizer(
        ["<think>plan</think>view m.py\n", "1 def add\n"] * 30,
        512,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        REWRITING_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    chat = ChatFormat.from_tokenizer(tok)
    messages = chat.first_messages("fix add")
    context = chat.prompt_ids(messages)
    sent = [list(context)]  # what each turn's request carries
    for action in ["<think>plan</think>view m.py ", "<think>more</think>edit m.py 2\n  x ", "submit"]:
        context += chat.encode(action) + [chat.end_id]
        messages.append({"role": "assistant", "content": action})
        tool = {"role": "tool", "content": " 1 def add "}
        context += chat.continuation_ids(messages, [tool], chat.end_id)
        messages.append(tool)
        sent.append(list(context))
    for before, after in zip(sent, sent[1:]):
        assert after[: len(before)] == before  # each prompt extends the previous one exactly
    text = tok.decode(context, skip_special_tokens=False)
    # The model's turns stay as sampled; new messages are rendered as the template renders them.
    assert "<think>plan</think>view m.py <|im_end|>" in text and "\n1 def add<|im_end|>" in text
    rerendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rerendered != text and "<think>plan" not in rerendered  # re-rendering would have changed history


def test_templates_the_loop_cannot_follow_are_refused_with_the_reason() -> None:
    texts = ["view m.py\n"] * 20
    tok = train_tokenizer(texts, 300, ["<s>"], "{% for m in messages %}{{ m['content'] }}\n{% endfor %}", "<s>", "<s>")
    with pytest.raises(ValueError, match="not a special token: the agent loop cannot tell where a model turn ends"):
        ChatFormat.from_tokenizer(tok)
    tok.chat_template = None
    with pytest.raises(ValueError, match="has no chat template"):
        ChatFormat.from_tokenizer(tok)


# gpt-oss's published template writes a final answer that ends the conversation with
# <|return|> (what the model samples) and the same answer in the history with <|end|>:
# the part of it that decides whether turns can be kept token-exact.
HARMONY_LIKE_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}"
    "{%- if loop.last and not add_generation_prompt %}<|return|>{% else %}<|end|>{% endif -%}"
    "{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)


def test_a_template_that_rewrites_the_token_a_turn_ended_on_is_refused_unless_it_is_harmony() -> None:
    specials = ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>"]
    tok = train_tokenizer(["view m.py\n"] * 20, 300, specials, HARMONY_LIKE_TEMPLATE, "<|return|>", "<|endoftext|>")
    tok.name_or_path = "openai/some-model"
    message = (
        r"some-model'.* puts '<\|end\|><\|start\|>.*' after an assistant message here, not its end token "
        r"'<\|return\|>': the turns cannot be kept token-exact"
    )
    with pytest.raises(ValueError, match=message):
        ChatFormat.from_tokenizer(tok)  # before any server starts, not at the first observation
    # With <|call|> beside <|return|> it is the harmony format, whose rewrite the format knows:
    # the sampled <|return|> stays, and what follows starts after the template's <|end|>.
    tok = train_tokenizer(
        ["view m.py\n"] * 20, 300, [*specials, "<|call|>"], HARMONY_LIKE_TEMPLATE, "<|return|>", "<|endoftext|>"
    )
    chat = ChatFormat.from_tokenizer(tok, system_prompt=None)
    history = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "<|channel|>final<|message|>a"}]
    after = chat.continuation_ids(history, [{"role": "tool", "content": "o"}], chat.end_id)
    assert tok.decode(after, skip_special_tokens=False) == "<|start|>user<|message|>o<|end|><|start|>assistant"


def test_the_system_prompt_describes_every_tool_of_the_action_language() -> None:
    tools = SYSTEM_PROMPT.split("Tools:\n", 1)[1]
    assert all(any(line.startswith(t + " ") or line == t for line in tools.split("\n")) for t in TOOLS)


@pytest.mark.chat_template
def test_with_tools_the_pieces_are_the_templates_rendering_with_the_tools(tmp_path_factory) -> None:
    model_dir = build_chat_model("chatml", tmp_path_factory.mktemp("chatml-tools"))
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir, tools=TOOL_SCHEMAS)
    assert chat.system_prompt == TOOL_CALL_SYSTEM_PROMPT
    calls = [render_tool_call(parse_action(a)) for a in ACTIONS]
    messages = chat.first_messages("fix add")
    ids = chat.prompt_ids(messages)
    for k, call in enumerate(calls):
        ids += chat.assistant_ids(call)
        messages.append({"role": "assistant", "content": call})
        if k < len(OBSERVATIONS):
            tool = {"role": "tool", "content": OBSERVATIONS[k]}
            ids += chat.continuation_ids(messages, [tool], chat.end_id)
            messages.append(tool)
    text = tok.decode(ids, skip_special_tokens=False)
    rendered = tok.apply_chat_template(messages, tools=TOOL_SCHEMAS, tokenize=False)
    assert rendered.startswith(text) and rendered[len(text) :] in {"", "\n"}
    assert '"name": "submit"' in text.split("<|im_start|>user")[0]  # the tools precede the problem
    sft_ids, _ = chat.conversation(messages[1:])
    assert sft_ids == ids  # SFT renders the same ids with the tools


@pytest.mark.chat_template
def test_tools_are_refused_for_templates_that_would_not_show_them(tmp_path_factory, tiny_model_dir: Path) -> None:
    model_dir = build_chat_model("llama3", tmp_path_factory.mktemp("llama3-tools"))
    with pytest.raises(ValueError, match="does not render the tools it is given"):
        ChatFormat.from_tokenizer(load_tokenizer(model_dir), model_dir, tools=TOOL_SCHEMAS)
    with pytest.raises(ValueError, match="own chat template has no tools section"):
        ChatFormat.from_tokenizer(load_tokenizer(tiny_model_dir), tiny_model_dir, tools=TOOL_SCHEMAS)


# ---- observations in a template without a tool role (OLMoE-Instruct's) -------------


@pytest.mark.chat_template
def test_a_template_without_a_tool_role_gets_the_observations_as_user_turns() -> None:
    tok = chat_tokenizer("olmoe")
    silent = [{"role": "user", "content": "u"}, {"role": "tool", "content": "dropped"}]
    assert "dropped" not in tok.apply_chat_template(silent, tokenize=False)  # what the loop used to send
    chat = ChatFormat.from_tokenizer(tok)
    assert chat.observation_role == "user"
    pieces, messages = episode_pieces(chat, [True, False, True])
    text = tok.decode([i for p in pieces for i in p], skip_special_tokens=False)
    assert all(f"<|user|>\n{o}\n<|assistant|>\n" in text for o in OBSERVATIONS)  # none dropped
    # The ids are the template's rendering of the same conversation with user observations.
    as_user = [{**m, "role": "user"} if m["role"] == "tool" else m for m in messages]
    rendered = tok.apply_chat_template(as_user, tokenize=False)
    assert rendered == text  # the last turn closed by the model: nothing follows
    # SFT takes demonstrations with `tool` messages and renders them the same way.
    sft_ids, _ = chat.conversation(messages[1:])
    assert sft_ids == [i for p in episode_pieces(chat, [True, True, True])[0] for i in p]


@pytest.mark.chat_template
def test_an_observation_the_template_would_drop_is_an_error_naming_the_template_and_role() -> None:
    tok = chat_tokenizer("olmoe")
    tok.name_or_path = "allenai/OLMoE-1B-7B-0924-Instruct"
    chat = dataclasses.replace(ChatFormat.from_tokenizer(tok), observation_role="tool")  # as before the probe
    history = [*chat.first_messages("fix add"), {"role": "assistant", "content": "view m.py"}]
    message = r"OLMoE-1B-7B-0924-Instruct'.* does not render the text of a 'tool' message \('1 def add'"
    with pytest.raises(ValueError, match=message):
        chat.continuation_ids(history, [{"role": "tool", "content": "1 def add"}], chat.end_id)


def test_the_observation_role_is_the_first_the_template_renders() -> None:
    def tokenizer(template: str):
        return train_tokenizer(["view m.py\n"] * 20, 300, ["<e>"], template, "<e>", "<e>")

    # Llama 3.1 style: tool results in an `ipython` turn; `tool` refused by the template.
    ipython = (
        "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}"
        "[{{ m['role'] }}]{{ m['content'] }}<e>{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    assert ChatFormat.from_tokenizer(tokenizer(ipython)).observation_role == "ipython"
    # Renders only user and assistant turns, and nothing of any other role.
    only = (
        "{% for m in messages %}{% if m['role'] in ('user', 'assistant') %}[{{ m['role'] }}]{{ m['content'] }}<e>"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    assert ChatFormat.from_tokenizer(tokenizer(only)).observation_role == "user"


# ---- a template that closes no turn: the next header's stop id ends it (GLM-4.5's) ------

# GLM's turns as its template writes them after the generation prompt <|assistant|>.
GLM_TURNS = [f"\n<think>{r}</think>\n{a}" for r, a in zip(["look at add", "add subtracts", "done"], ACTIONS)]


@pytest.fixture(scope="module")
def glm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model("glm", tmp_path_factory.mktemp("glm"))


@pytest.mark.chat_template
def test_glm_turns_end_at_the_eos_id_that_opens_the_next_header(glm_dir: Path) -> None:
    assert json.loads((glm_dir / "config.json").read_text())["model_type"] == "glm4_moe"
    tok = load_tokenizer(glm_dir)
    chat = ChatFormat.from_tokenizer(tok, glm_dir)
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")}
    assert chat.end_opens_next and chat.end_id == ids["<|observation|>"] and chat.observation_role == "tool"
    assert set(chat.stop_ids) == set(ids.values()) and chat.extra_stop_ids == ()  # all in generation_config.json
    prompt = tok.decode(chat.prompt_ids(chat.first_messages("fix add")), skip_special_tokens=False)
    assert prompt == f"[gMASK]<sop><|system|>\n{SYSTEM_PROMPT}<|user|>\nfix add<|assistant|>"
    off = ChatFormat.from_tokenizer(tok, glm_dir, thinking="off")
    assert tok.decode(off.prompt_ids(off.first_messages("fix add")), skip_special_tokens=False) == (
        prompt.replace("fix add", "fix add/nothink") + "\n<think></think>"
    )


@pytest.mark.chat_template
@pytest.mark.parametrize("closed", [[True, True, True], [False, True, False]], ids=["closed", "cut-by-length"])
def test_glm_pieces_are_the_fresh_rendering_with_each_header_once(glm_dir: Path, closed: list[bool]) -> None:
    tok = load_tokenizer(glm_dir)
    chat = ChatFormat.from_tokenizer(tok, glm_dir)
    pieces, messages = episode_pieces(chat, closed, GLM_TURNS)
    ids = [i for p in pieces for i in p]
    # The sampled <|observation|> opens the observation's header; a turn cut by length gets it from the template.
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assert ids == chat.encode(rendered) + ([chat.end_id] if closed[-1] else [])
    assert "<|observation|><|observation|>" not in tok.decode(ids, skip_special_tokens=False)
    for piece in pieces[::2]:  # every piece not the model's round-trips through its own text
        assert chat.encode(tok.decode(piece, skip_special_tokens=False)) == piece


@pytest.mark.chat_template
def test_glm_sft_closes_each_turn_with_the_header_that_follows_it(glm_dir: Path) -> None:
    tok = load_tokenizer(glm_dir)
    chat = ChatFormat.from_tokenizer(tok, glm_dir)
    pieces, messages = episode_pieces(chat, [True, True, True], GLM_TURNS)
    ids, mask = chat.conversation(messages[1:])
    assert ids == [i for p in pieces for i in p]  # the agent loop's ids; the last action answered as every other
    learned = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert learned == "".join(f"{t}<|observation|>" for t in GLM_TURNS)
    # A turn the user answers ends on <|user|>, as the template writes it.
    plain = [f"\n<think></think>\n{a}" for a in ACTIONS[:2]]  # as re-rendered before the last user message
    talk = [
        {"role": "user", "content": "fix add"},
        {"role": "assistant", "content": plain[0]},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": plain[1]},
    ]
    ids, mask = chat.conversation(talk)
    rendered = tok.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, *talk], tokenize=False)
    assert ids == chat.encode(rendered) + [chat.end_id]
    learned = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert learned == f"{plain[0]}<|user|>{plain[1]}<|observation|>"


@pytest.mark.chat_template
def test_a_template_with_neither_an_end_token_nor_a_stop_token_opening_the_next_message_is_refused(
    glm_dir: Path,
) -> None:
    # GLM's tokenizer without the generation config that makes its headers stop ids.
    tok = load_tokenizer(glm_dir)
    tok.name_or_path = "zai-org/GLM-4.5"
    message = (
        r"'zai-org/GLM-4.5' closes an assistant message with nothing and opens the 'tool' message after it with "
        r"'<\|observation\|>', a special token the model does not stop at \(its eos tokens: \['<\|endoftext\|>'\]\)"
    )
    with pytest.raises(ValueError, match=message):
        ChatFormat.from_tokenizer(tok)
    # Headers in plain text: nothing marks where a turn ends.
    plain = (
        "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    tok = train_tokenizer(["view m.py\n"] * 20, 300, ["<e>"], plain, "<e>", "<e>")
    tok.name_or_path = "plain-headers"
    message = r"'plain-headers' closes an assistant message with nothing and opens the 'tool' message after it with "
    message += r"'\[tool\]', not a special token: the agent loop cannot tell where a model turn ends"
    with pytest.raises(ValueError, match=message):
        ChatFormat.from_tokenizer(tok)


# ---- thinking (Qwen3's enable_thinking switch) ---------------------------------------


@pytest.mark.chat_template
def test_the_thinking_switch_reaches_the_template_and_is_refused_where_there_is_none(tiny_model_dir: Path) -> None:
    tok = chat_tokenizer("qwen3")
    prompts = {}
    for thinking in (None, "on", "off"):
        chat = ChatFormat.from_tokenizer(tok, thinking=thinking)
        prompts[thinking] = tok.decode(chat.prompt_ids(chat.first_messages("fix add")), skip_special_tokens=False)
        assert chat.thinking == {None: None, "on": True, "off": False}[thinking] and not chat.opens_reasoning
    assert prompts[None] == prompts["on"] and prompts["on"].endswith("fix add<|im_end|>\n<|im_start|>assistant\n")
    assert prompts["off"] == prompts["on"] + "<think>\n\n</think>\n\n"  # Qwen3's closed empty block
    for other in (chat_tokenizer("chatml"), load_tokenizer(tiny_model_dir)):
        with pytest.raises(ValueError, match="inference.thinking = 'on': the chat template .* has no thinking switch"):
            ChatFormat.from_tokenizer(other, thinking="on")


@pytest.mark.parametrize(
    ("text", "opened", "split"),
    [
        ("view m.py", False, ("", "view m.py")),
        ("<think>\nthe test fails\n</think>\n\nview m.py", False, ("<think>\nthe test fails\n</think>", "view m.py")),
        ("<think>a</think>b</think>\nsubmit", False, ("<think>a</think>b</think>", "submit")),  # the last one closes
        ("<think>\nstill thinking", False, ("<think>\nstill thinking", None)),  # never closed: no action
        ("plan</think>\n\nsubmit", True, ("plan</think>", "submit")),  # the prompt opened it (DeepSeek-R1 style)
        ("plan", True, ("plan", None)),
        ("edit m.py 2\n    s = '</think>'", False, ("", "edit m.py 2\n    s = '</think>'")),  # no reasoning here
    ],
)
def test_a_turn_splits_into_its_reasoning_and_its_action(text: str, opened: bool, split: tuple) -> None:
    assert split_reasoning(text, opened) == split
