"""A model's chat format: how the agent loop and SFT frame turns, from its tokenizer.

Built from the tokenizer's own chat template (`apply_chat_template`), so a Hub model
sees the framing it was trained on; the tiny tokenizer's template (protocol.py's
CHAT_TEMPLATE) is one instance, rendered by its Python twin `render_messages`.

Token-exact across turns (the invariant the trainer relies on): a conversation only
ever grows at its end.
- The first prompt is the template's rendering of [system?, user] with the
  generation prompt (the assistant header), tokenised once.
- A model turn is the server's sampled ids as they are, ending at an end-of-turn id
  (`stop_ids`) when the model closed it.
- What follows a model turn is `continuation_ids`: the text the template puts after
  that assistant message's content (its end-of-turn tail, minus the end token the
  model already sampled), then the new messages (a tool observation) and the next
  generation prompt, tokenised alone.
- Templates that close an assistant message with nothing (GLM's) end a turn at the
  role token that opens the next message's header (`<|observation|>`, `<|user|>`: eos
  ids of the model's generation config): the stop id the model samples is its last
  token and the first of the next header, so the continuation starts after it. A turn
  that stopped at another header than the one the template writes next (`<|user|>`
  before an observation) or at `<|endoftext|>` keeps that id, and the whole header
  follows, as after a turn cut by length (`end_opens_next`).
History is never re-rendered or re-tokenised, so a template that renders earlier
turns differently later on (Qwen3 drops earlier reasoning) changes no id the model
has already seen.

How the continuation is found: the conversation so far, with the last assistant
content replaced by a marker, is rendered followed by the new messages; the text
after the marker is the continuation. The template thus decides everything it
decides for a real conversation (roles, separators, headers, what a tool turn looks
like after an assistant turn), and only the text behind the model is taken from it.

Observations go in the role the template renders: `tool` where it does, else `ipython`
or `observation` where it has one, else `user` (a template without a tool role, such as
OLMoE-Instruct's, silently skips other roles). Every new message's text is checked to be
in its continuation, so no observation is ever dropped without an error.

Thinking: templates with a thinking switch (Qwen3's and GLM's `enable_thinking`,
DeepSeek-V3.1's `thinking`) render with the switch as `inference.thinking` sets it, or as
the template's default; a model turn is then `<think>REASONING</think>ACTION`, kept whole
in the ids, and `split_reasoning` separates the ACTION that is parsed. Where the prompt
before a turn opens `<think>` (DeepSeek-V3.1's generation prompt with thinking on), the
turn starts inside its reasoning; a template may open it only after a user message and
write no generation prompt after an observation (DeepSeek-V3.1 again), so whether a turn
starts inside its reasoning is decided per turn (`split_turn`).

Harmony (gpt-oss): a model turn is several messages, reasoning on the analysis channel,
then a final answer (ended by `<|return|>`) or a call to a function (ended by `<|call|>`);
engines/tool_formats/harmony.py reads them. The template writes `<|end|>` in the history
where the model ended a final answer with `<|return|>`: the sampled id stays, and the
continuation starts after the template's `<|end|>`. An observation answers a call in the
template's function-reply message (`<|start|>functions.NAME to=assistant...`), and a
text answer as a user message, the one role the template renders there.

Owns: rendering (with the tool schemas, for native tool calls), the end-of-turn and
stop ids (refusing a template with neither an end token nor a stop token opening the
next message), the system prompt stating the action language for models never trained
on it, and SFT's ids and loss mask of a whole conversation (the same pieces the agent
loop produces). Does not own the action language itself (engines/protocol.py,
engines/tool_calls.py) or sampling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from transformers import GenerationConfig, PreTrainedTokenizerBase

from engines.protocol import CHAT_TEMPLATE, ROLE_TOKEN, InvalidAction, render_messages
from engines.tool_formats import harmony

Message = dict[str, object]  # {"role": str, "content": str, optional "train": bool}

# Stands in for the last assistant content while the continuation is rendered: plain
# word characters, which no template strips, splits or escapes.
_MARK = "TandemTurnMark7q"
# The same for an observation's content while the role that renders it is probed.
_OBSERVATION_MARK = "TandemObservationMark3k"
# Where an observation goes when the template has no tool role: a role some templates
# have for tool results (Llama 3.1's ipython, GLM's observation), else the user's.
OBSERVATION_ROLES = ("tool", "ipython", "observation", "user")

# Reasoning of thinking models (Qwen3, DeepSeek-R1, GLM-4.5): <think>REASONING</think>ACTION.
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
UNCLOSED_REASONING = (
    f"your reasoning was never closed with {THINK_CLOSE}, so no action was taken; "
    f"close it and write the action after {THINK_CLOSE}"
)

# For models never trained on the action language (every Hub model): what a turn may
# say. Models trained on the micro demonstrations (the tiny warm start) need none.
SYSTEM_PROMPT = """You fix a bug in a repository. Each of your turns is one action: a first line naming the tool and its arguments, then an optional body. Tools:
view PATH [START-END]   show numbered lines of a file, a page at a time
view PATH NAME          show one function or class; NAME may be qualified (Class.method)
edit PATH LINE          replace line LINE (1-based) with the body's lines
replace PATH            body: the old text, a line =====, then the new text
change PATH SCOPE       SCOPE a line number or a NAME as for view; body: OLD text (once in SCOPE) on one line, NEW text on the next
undo                    revert your last edit
bash                    run the body as a shell command
test                    run the repository's tests as they are (hidden tests may decide the grade)
submit                  end the episode; your changes are graded
After an edit the tests may run; the observation says which fail and whether your edit was kept. Write nothing but the action."""

# The same for native tool calls (inference.tool_format other than "text"): the tools themselves
# reach the model through the template's tools section.
TOOL_CALL_SYSTEM_PROMPT = """You fix a bug in a repository. Each of your turns is exactly one call of one of the tools you are given: view a file or one function (Class.method), edit a line, replace or change text, undo your last edit, run bash, run the tests, or submit when the fix is done. Write nothing but the call."""

Render = Callable[[list[Message], bool], str]


@dataclass(frozen=True)
class ChatFormat:
    """Renders turns of one tokenizer's chat template as token ids (see the module docstring)."""

    tokenizer: PreTrainedTokenizerBase
    render: Render  # (messages, add_generation_prompt) -> text
    end_id: int  # what closes an assistant message: its end-of-turn token, or (end_opens_next) the observation's header
    stop_ids: tuple[int, ...]  # ids that end a model turn: end_id and the model's eos ids
    model_eos_ids: tuple[int, ...] = ()  # the ones the server stops at by itself (tokenizer, generation config)
    system_prompt: str | None = None  # prepended to conversations that bring none
    roles: tuple[str, ...] = ("system", "user", "assistant", "tool")
    _end_text: str = field(default="", repr=False)
    observation_role: str = "tool"  # the role `tool` messages are rendered in (OBSERVATION_ROLES)
    thinking: bool | None = None  # the thinking switch's value passed to the template; None: its own default
    opens_reasoning: bool = False  # the first generation prompt opens <think>: that turn starts inside the reasoning
    reopens_reasoning: bool = False  # so does what follows an observation: the turns after one start inside it too
    thinking_switch: str | None = None  # the template's variable `thinking` goes to (THINKING_SWITCHES); None: none
    end_opens_next: bool = False  # nothing closes an assistant message: the next header's stop id ends the turn
    harmony: bool = False  # gpt-oss's harmony format (the module docstring)
    native_tools: bool = False  # the template lists the tools: turns are tool calls (inference.tool_format)

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: PreTrainedTokenizerBase,
        model_dir: str | Path | None = None,
        system_prompt: str | None | bool = True,
        tools: Sequence[dict] | None = None,
        thinking: Literal["off", "on"] | None = None,
    ) -> ChatFormat:
        """The format of `tokenizer`'s chat template; eos ids also from `model_dir`'s
        generation_config.json when there is one. `tools` (JSON schemas, as
        engines/tool_calls.py's) go to every rendering; the template must show them.
        `system_prompt=True` chooses: none for this project's own template (its models
        learn the protocol by SFT), TOOL_CALL_SYSTEM_PROMPT with tools, SYSTEM_PROMPT
        otherwise; a string or None sets it. `thinking` (inference.thinking) sets the
        template's thinking switch; a template without one is refused, since the
        setting would change nothing."""
        template = tokenizer.chat_template
        if not template:
            raise ValueError(
                f"tokenizer {tokenizer.name_or_path!r} has no chat template: give a chat (instruct) model, or set "
                "tokenizer.chat_template (tokenizer_config.json / chat_template.jinja) before training or serving it"
            )
        own = template == CHAT_TEMPLATE
        if own and tools:
            raise ValueError(
                "inference.tool_format asks for native tool calls, but this project's own chat template has no tools "
                "section; "
                "use tool_format = 'text' with it, or a model whose template lists tools"
            )
        enable = None if thinking is None else thinking == "on"
        switch = None if own else _thinking_switch(tokenizer)
        if thinking is not None and switch is None:
            raise ValueError(
                f"inference.thinking = {thinking!r}: the chat template of {tokenizer.name_or_path!r} has no thinking "
                "switch (it renders the same with enable_thinking or thinking true and false), so the setting would "
                "change nothing; leave inference.thinking unset for this model"
            )
        if own:
            render: Render = lambda messages, gen: render_messages(messages, gen)  # noqa: E731  (tested twin)
        else:
            render = _jinja_render(tokenizer, tools, enable, switch)
            if tools and render(_PROBE, True) == _jinja_render(tokenizer, None, enable, switch)(_PROBE, True):
                raise ValueError(
                    f"inference.tool_format asks for native tool calls, but the chat template of {tokenizer.name_or_path!r} does not "
                    "render the tools it is given, so the model would never see them; use tool_format = 'text' "
                    "or a template with a tools section"
                )
        if system_prompt is True:
            system_prompt = None if own else TOOL_CALL_SYSTEM_PROMPT if tools else SYSTEM_PROMPT
        eos = _model_eos_ids(tokenizer, model_dir)
        is_harmony = not own and _is_harmony(tokenizer)
        observation = "tool" if own or (is_harmony and tools) else _observation_role(tokenizer, render)
        end_text, end_id, opens_next = _turn_end(tokenizer, render, observation, eos)
        calls = (tokenizer.convert_tokens_to_ids(harmony.CALL),) if is_harmony else ()
        stops = tuple(dict.fromkeys((end_id, *calls, *eos)))
        roles = tuple(ROLE_TOKEN) if own else tuple(dict.fromkeys(("system", "user", "assistant", "tool", observation)))
        chat = cls(
            tokenizer,
            render,
            end_id,
            stops,
            eos,
            system_prompt or None,
            roles,
            end_text,
            observation_role=observation,
            thinking=enable,
            opens_reasoning=not is_harmony and _opens_reasoning(render(_PROBE, True)),
            reopens_reasoning=not is_harmony
            and _opens_reasoning(_after_mark(render, [{"role": observation, "content": "o"}], True)),
            thinking_switch=switch,
            end_opens_next=opens_next,
            harmony=is_harmony,
            native_tools=bool(tools),
        )
        chat._check_turns()
        return chat

    def _check_turns(self) -> None:
        """Refuse now, not at an episode's first observation, a template that cannot keep
        a conversation token-exact: one that writes something else than the token that
        ended a model turn once another message follows it."""
        probe: list[Message] = [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
            {"role": "tool", "content": "o"},
            {"role": "assistant", "content": "b"},
        ]
        self.conversation(self._with_system(probe), "a two-turn probe conversation")

    @property
    def extra_stop_ids(self) -> tuple[int, ...]:
        """Stop ids the server must be told: the template's end token when the model's
        own eos ids (which vLLM stops at anyway) do not include it."""
        return tuple(i for i in self.stop_ids if i not in self.model_eos_ids)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def first_messages(self, problem: str) -> list[Message]:
        """The opening of an episode: the system prompt (if any) and the problem."""
        return self._with_system([{"role": "user", "content": problem}])

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """Ids of `messages` (none of them the model's) followed by the generation prompt."""
        return self.encode(self.render(self._plain(messages), True))

    def continuation_ids(self, history: Sequence[Message], new: Sequence[Message], closed_by: int | None) -> list[int]:
        """Ids that follow the model's last turn (`history[-1]`, an assistant message) up to
        the next generation prompt, with the `new` messages between. `closed_by` is the stop
        id the model's turn ended on (None: cut by length, so the turn is closed here). Where
        the next header's stop id ends a turn, the header continues from that id when it is
        the one the template writes here, and follows it whole otherwise."""
        if not history or history[-1].get("role") != "assistant":
            raise ValueError("continuation_ids: history must end with the model's (assistant) turn")
        if self.harmony:
            return self._harmony_continuation(str(history[-1].get("content") or ""), new, closed_by)
        marked = [*self._plain(history[:-1]), {"role": "assistant", "content": _MARK}, *self._plain(new)]
        text = self.render(marked, True)
        if text.count(_MARK) != 1:
            raise ValueError("a message of the conversation contains the turn marker; it cannot be rendered")
        after = text.split(_MARK, 1)[1]
        self._check_rendered(self._plain(new), after)
        if self.end_opens_next:
            return self.encode(_after_stop(after, self._token_text(closed_by)))
        if closed_by == self.end_id:
            if not after.startswith(self._end_text):
                raise ValueError(
                    f"chat template of {self.tokenizer.name_or_path!r} puts {after[:40]!r} after an assistant message "
                    f"here, not its end token {self._end_text!r}: the turns cannot be kept token-exact"
                )
            after = after[len(self._end_text) :]
        return self.encode(after)

    def _harmony_continuation(self, turn: str, new: Sequence[Message], closed_by: int | None) -> list[int]:
        """What follows a harmony turn: the function's reply after a call the model ended
        with `<|call|>`; else the new messages as user turns, after the template's `<|end|>`
        where the model's own stop id did not close its last message (cut by length)."""
        plain = self._plain(new)
        called = harmony.called_function(turn)
        if called is not None and closed_by == self._id(harmony.CALL):
            call = {"type": "function", "function": {"name": called, "arguments": {}}}
            probe = [*_PROBE, {"role": "assistant", "content": "", "tool_calls": [call]}, *plain]
            after = self.render(probe, True).split(harmony.CALL, 1)[1]
        else:
            users = [{**m, "role": "user"} if m["role"] == "tool" else m for m in plain]
            after = _after_mark(self.render, users, True)
            if closed_by is not None and after.startswith(harmony.END):
                after = after[len(harmony.END) :]
        self._check_rendered(plain, after)
        return self.encode(after)

    def _id(self, token: str) -> int:
        return self.tokenizer.convert_tokens_to_ids(token)

    def as_turn(self, content: str) -> str:
        """An assistant message's content as the model writes it: a text answer becomes a
        harmony final message; other templates take it as it is."""
        if self.harmony and harmony.MESSAGE not in content:
            return harmony.as_final(content)
        return content

    def assistant_ids(self, content: str) -> list[int]:
        """What the model emits for an assistant message answered by an observation: its
        content, then the end token (where the next header ends a turn, the observation's;
        in harmony `<|call|>` after a call)."""
        turn = self.as_turn(content)
        return self.encode(turn) + [self._harmony_end(turn) if self.harmony else self.end_id]

    def _harmony_end(self, turn: str) -> int:
        return self._id(harmony.CALL) if harmony.called_function(turn) is not None else self.end_id

    def conversation(self, messages: Sequence[Message], where: str = "conversation") -> tuple[list[int], list[bool]]:
        """Ids of a whole conversation as the agent loop would have produced them, and the
        loss mask: True on assistant content and its end token (messages marked
        `"train": False` excepted). Messages after the last assistant one add nothing."""
        for i, m in enumerate(messages):
            if m.get("role") not in self.roles:
                raise ValueError(f"{where}, message {i}: role {m.get('role')!r} is not one of {sorted(self.roles)}")
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not turns:
            raise ValueError(f"{where} has no assistant message: nothing to learn from")
        history = self._with_system(list(messages[: turns[0]]))
        ids = self.prompt_ids(history)
        mask = [False] * len(ids)
        for k, i in enumerate(turns):
            content = self.as_turn(str(messages[i].get("content") or ""))
            history.append({"role": "assistant", "content": content})
            new = list(messages[i + 1 : turns[k + 1] if k + 1 < len(turns) else len(messages)])
            closing = self._closing_id(history, new)
            body = self.encode(content) + [closing]
            ids += body
            mask += [bool(messages[i].get("train", True))] * len(body)
            if k + 1 < len(turns):
                tail = self.continuation_ids(history, new, closing)
                ids += tail
                mask += [False] * len(tail)
                history += new
        return ids, mask

    def _closing_id(self, history: Sequence[Message], new: Sequence[Message]) -> int:
        """The stop id a model turn (`history[-1]`) followed by `new` ends on: the end token,
        or where the next header ends a turn, that header's first id (the observation's
        after the last turn, since every action is answered)."""
        if self.harmony:
            return self._harmony_end(str(history[-1].get("content") or ""))
        if not self.end_opens_next or not new:
            return self.end_id
        first = self.continuation_ids(history, new, None)[:1]
        return first[0] if first and first[0] in self.stop_ids else self.end_id

    def _token_text(self, token_id: int | None) -> str:
        """The text of a stop id ("" for None: no stop sampled)."""
        return "" if token_id is None else self.tokenizer.decode([token_id], skip_special_tokens=False)

    def split_turn(self, text: str, after_observation: bool = False) -> tuple[str, str | None]:
        """A model turn's (reasoning, action) in this template (see `split_reasoning`): the
        first turn follows the generation prompt, a turn `after_observation` what the
        template writes after one, and either may have opened the reasoning. In harmony
        the reasoning is the analysis messages; the action is the whole turn where the
        turns are tool calls (the format reads the calls), else the final answer."""
        if self.harmony:
            parts = harmony.split(text)
            if isinstance(parts, InvalidAction):
                return text, None
            said = text if self.native_tools else harmony.answer(text)
            return parts[0], None if isinstance(said, InvalidAction) else said
        return split_reasoning(text, self.reopens_reasoning if after_observation else self.opens_reasoning)

    def no_action_reason(self, text: str) -> str:
        """Why a turn for which `split_turn` found no action took none."""
        if self.harmony:
            said = harmony.answer(text)
            return said.message if isinstance(said, InvalidAction) else "no action"
        return UNCLOSED_REASONING

    def _with_system(self, messages: list[Message]) -> list[Message]:
        if self.system_prompt is None or (messages and messages[0].get("role") == "system"):
            return messages
        return [{"role": "system", "content": self.system_prompt}, *messages]

    def _plain(self, messages: Sequence[Message]) -> list[Message]:
        """Role and content only (templates may render unknown keys such as `train`), with
        `tool` messages in the role this template renders observations in."""
        return [
            {
                "role": self.observation_role if m["role"] == "tool" else m["role"],
                "content": str(m.get("content") or ""),
            }
            for m in messages
        ]

    def _check_rendered(self, new: Sequence[Message], continuation: str) -> None:
        """Raise when a new message's text is missing from its rendered continuation: a
        template that skips a role would drop the observation without a trace. A text the
        template writes through `tojson` (Llama 3.1's tool results) counts as rendered."""
        for m in new:
            content = str(m["content"]).strip()
            if content and not any(form in continuation for form in (content, _json_quoted(content))):
                raise ValueError(
                    f"chat template of {self.tokenizer.name_or_path!r} does not render the text of a "
                    f"{m['role']!r} message ({content[:40]!r}...): the model would never see it. Use a template "
                    f"that renders the {m['role']!r} role, or give the message in a role it renders"
                )


def _json_quoted(text: str) -> str:
    """`text` as a JSON string's inside, as transformers' `tojson` filter writes it."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def split_reasoning(text: str, opened: bool = False) -> tuple[str, str | None]:
    """(reasoning, action) of a model turn. A turn that opens with <think> (or follows a
    generation prompt that opened it: `opened`) reasons until the last </think>; the
    action is what follows, leading blank lines dropped. Reasoning never closed gives
    action None: the turn took no action (an invalid action, never a parse of the
    reasoning). A turn without reasoning is all action. The reasoning stays in the ids
    and the loss as sampled; only the action is parsed."""
    if not (opened or text.lstrip().startswith(THINK_OPEN)):
        return "", text
    end = text.rfind(THINK_CLOSE)
    if end < 0:
        return text, None
    cut = end + len(THINK_CLOSE)
    return text[:cut], text[cut:].lstrip()


_PROBE: list[Message] = [{"role": "user", "content": "u"}]

# The variables templates read as their thinking switch: Qwen3's and GLM's, DeepSeek-V3.1's.
THINKING_SWITCHES = ("enable_thinking", "thinking")


def _jinja_render(
    tokenizer: PreTrainedTokenizerBase,
    tools: Sequence[dict] | None,
    thinking: bool | None,
    switch: str | None = "enable_thinking",
) -> Render:
    """The template's rendering; `thinking` goes to it as its `switch` variable unless
    None (then the template's own default holds, as when nothing is passed)."""
    tools = list(tools) if tools else None
    extra = {} if thinking is None or switch is None else {switch: thinking}

    def render(messages: list[Message], add_generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )

    return render


def _opens_reasoning(prompt: str) -> bool:
    """Whether a prompt leaves the model inside an opened <think>."""
    return prompt.rstrip().endswith(THINK_OPEN)


def _is_harmony(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the template writes gpt-oss's harmony format: channels, and `<|call|>` and
    `<|return|>` among the tokenizer's tokens."""
    vocab = tokenizer.get_vocab()
    return harmony.CHANNEL in (tokenizer.chat_template or "") and all(
        t in vocab for t in (harmony.CALL, harmony.RETURN)
    )


def _thinking_switch(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The first of THINKING_SWITCHES the template reads: its prompt differs between true
    and false. None: it has no thinking switch."""
    for switch in THINKING_SWITCHES:
        on, off = (_jinja_render(tokenizer, None, flag, switch)(_PROBE, True) for flag in (True, False))
        if on != off:
            return switch
    return None


def _observation_role(tokenizer: PreTrainedTokenizerBase, render: Render) -> str:
    """The first of OBSERVATION_ROLES whose message text the template renders after an
    assistant turn (a template may skip a role silently or refuse it with an error)."""
    for role in OBSERVATION_ROLES:
        messages = [*_PROBE, {"role": "assistant", "content": "a"}, {"role": role, "content": _OBSERVATION_MARK}]
        try:
            if _OBSERVATION_MARK in render(messages, True):
                return role
        except Exception:  # jinja's raise_exception for a role it does not take
            continue
    raise ValueError(
        f"chat template of {tokenizer.name_or_path!r} renders no observation after an assistant turn in any of the "
        f"roles {list(OBSERVATION_ROLES)}: the model could never see a tool's output"
    )


def _model_eos_ids(tokenizer: PreTrainedTokenizerBase, model_dir: str | Path | None) -> tuple[int, ...]:
    """The eos ids a server stops at by itself: the tokenizer's and the generation config's."""
    ids: list[int] = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    if model_dir is not None and (Path(model_dir) / "generation_config.json").is_file():
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
        ids += [eos] if isinstance(eos, int) else list(eos or [])
    return tuple(dict.fromkeys(ids))


def _after_stop(after: str, stop: str) -> str:
    """The continuation after a turn that ended on `stop`: without it when the template's
    next header starts with it (the model sampled that id), whole otherwise."""
    return after[len(stop) :] if stop and after.startswith(stop) else after


def _special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    return set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if getattr(t, "special", False)
    }


def _after_mark(render: Render, new: list[Message], add_generation_prompt: bool) -> str:
    """What the template writes after an assistant message's content, with `new` after it."""
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}, *new]
    text = render(messages, add_generation_prompt)
    return text.split(_MARK, 1)[1] if _MARK in text else ""


def _turn_end(
    tokenizer: PreTrainedTokenizerBase, render: Render, observation_role: str, eos: tuple[int, ...]
) -> tuple[str, int, bool]:
    """What ends a model turn in this template, as (text, id, end_opens_next): the special
    token that closes an assistant message; or, where the template writes nothing after
    one, the special token opening the observation after it, when the model stops there
    (one of its eos ids, as GLM's <|observation|>)."""
    special = _special_ids(tokenizer)
    tail = _after_mark(render, [], False)
    ids = tokenizer.encode(tail, add_special_tokens=False)
    if ids and ids[0] in special:
        end_text = tokenizer.convert_ids_to_tokens(ids[0])
        if not tail.startswith(end_text):
            raise ValueError(f"chat template of {tokenizer.name_or_path!r}: end token {end_text!r} is not its text")
        return end_text, ids[0], False
    head = _after_mark(render, [{"role": observation_role, "content": _OBSERVATION_MARK}], True)
    first = tokenizer.encode(head, add_special_tokens=False)[:1]
    opener = tokenizer.convert_ids_to_tokens(first[0]) if first else ""
    if not tail and first and first[0] in special and first[0] in eos and head.startswith(opener):
        return opener, first[0], True
    closes = f"{tail[:40]!r}, not a special token," if tail else "nothing"
    if first and first[0] in special:
        stops = tokenizer.convert_ids_to_tokens(list(eos))
        opens = f"{opener!r}, a special token the model does not stop at (its eos tokens: {stops})"
    else:
        opens = f"{head.split(_OBSERVATION_MARK, 1)[0][:40]!r}, not a special token"
    raise ValueError(
        f"chat template of {tokenizer.name_or_path!r} closes an assistant message with {closes} and opens the "
        f"{observation_role!r} message after it with {opens}: the agent loop cannot tell where a model turn ends. "
        "Use a template whose assistant turns end with an end-of-turn token (e.g. <|im_end|>, <|eot_id|>), or whose "
        "next message opens with one of the model's eos tokens (GLM's <|observation|> and <|user|>, listed in its "
        "generation_config.json beside the weights)"
    )
