"""The agent loop with GLM-4.5's template (tests/chat_models.py) on the scripted
generator: no server, no sandbox. The template writes nothing after an assistant
message; a turn ends at the role token that opens the next header, one of the eos ids
of the model's generation config (`<|observation|>`, `<|user|>`, `<|endoftext|>`).

Checked: the `<|observation|>` the model samples is its turn's last id and the first of
the observation's header, never written twice; with thinking on and off the episode's
ids are the template's fresh rendering of the whole conversation (and the last turn's
stop id), each request extending the previous one; a turn stopped at another header
(`<|user|>`) or cut by length keeps its ids as sent, and the header follows whole."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from engines.inference.agent import AgentLoop, EpisodeRequest
from tests.chat_models import chat_tokenizer_dir
from tests.engines.inference.conftest import small_config
from tests.engines.inference.family_episode import ACTIONS, EchoEnv
from tests.engines.inference.scripted_generator import ScriptedGenerator, Turn, turn_logprob

pytestmark = pytest.mark.chat_template

# GLM's turns as its template writes them: reasoning in <think></think>, then the action.
THINKING = [
    f"\n<think>{r}</think>\n{a}" for r, a in zip(["the test fails: look at add", "add subtracts", "done"], ACTIONS)
]
OBSERVATION = "<|observation|>"


@pytest.fixture(scope="module")
def glm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_tokenizer_dir("glm", tmp_path_factory.mktemp("glm"))


def episode(model_dir: Path, script: list[Turn], **config: Any) -> tuple[Any, EchoEnv, list[list[int]], AgentLoop]:
    """One episode of `script`'s turns, each closed by `<|observation|>` unless it says otherwise."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    limits = {"max_turns": 6, "max_total_tokens": 2048}
    cfg = small_config(model_dir, max_model_len=2048, sampling={"max_tokens_per_turn": 128}, limits=limits, **config)
    generator = ScriptedGenerator(tok, {"t": script}, stop_id=tok.convert_tokens_to_ids(OBSERVATION))
    agent = AgentLoop(generator, tok, cfg)
    env = EchoEnv()
    (ep,) = asyncio.run(agent.run_episodes([EpisodeRequest("t", "g", 0, lambda: env)]))
    (prompts,) = generator.prompts.values()
    return ep, env, prompts, agent


def model_turns(ep: Any) -> list[tuple[list[int], list[float]]]:
    """The runs of loss-masked ids of an episode, with their logprobs."""
    turns, start = [], None
    for i, m in enumerate([*ep.loss_mask, False]):
        if m and start is None:
            start = i
        if not m and start is not None:
            turns.append((ep.completion_ids[start:i], ep.completion_logprobs[start:i]))
            start = None
    return turns


def assert_token_exact(ep: Any, prompts: list[list[int]], agent: AgentLoop) -> None:
    """Every request is a prefix of the episode's ids, and the ids decode to its conversation."""
    context = ep.prompt_ids + ep.completion_ids
    assert prompts[0] == ep.prompt_ids and all(context[: len(p)] == p for p in prompts)
    assert sorted(map(len, prompts)) == list(map(len, prompts))
    assert agent.decode(context) == ep.conversation


def fresh_render(agent: AgentLoop, ep: Any, thinking: bool | None) -> str:
    extra = {} if thinking is None else {"enable_thinking": thinking}
    return agent.tok.apply_chat_template(ep.messages, tokenize=False, **extra)


@pytest.mark.parametrize("thinking", [None, "on"])
def test_with_thinking_the_ids_are_the_templates_fresh_rendering_and_no_header_is_written_twice(
    glm_dir: Path, thinking: str | None
) -> None:
    ep, env, prompts, agent = episode(glm_dir, THINKING, **({"thinking": thinking} if thinking else {}))
    assert ep.finish_reason == "submitted" and ep.num_turns == 3 and not ep.infra_failure, ep.infra_message
    assert env.actions == ACTIONS  # the reasoning never reached the environment
    chat, observation = agent.chat, agent.tok.convert_tokens_to_ids(OBSERVATION)
    assert chat.end_opens_next and chat.end_id == observation and chat.extra_stop_ids == ()
    assert agent.decode(ep.prompt_ids).endswith("<|user|>\nfix add in m.py<|assistant|>")
    # Each model turn is the sampled ids with their logprobs, ending on the <|observation|> it sampled.
    turns = model_turns(ep)
    assert [ids for ids, _ in turns] == [agent.encode(text) + [observation] for text in THINKING]
    assert all(lps == [turn_logprob(k + 1, i) for i in range(len(lps))] for k, (_, lps) in enumerate(turns))
    assert_token_exact(ep, prompts, agent)
    # The observation's header continues from the sampled id: never twice in a row.
    assert ep.conversation.count(OBSERVATION) == 3 and OBSERVATION * 2 not in ep.conversation
    assert f"{OBSERVATION}\n<tool_response>\nturn 1: ok\n</tool_response><|assistant|>" in ep.conversation
    rendered = fresh_render(agent, ep, None if thinking is None else True)
    assert ep.prompt_ids + ep.completion_ids == agent.encode(rendered) + [observation]


def test_with_thinking_off_every_prompt_closes_an_empty_block_and_the_ids_are_the_fresh_rendering(
    glm_dir: Path,
) -> None:
    script = [f"\n{a}" for a in ACTIONS]  # what follows the prompt's \n<think></think>
    ep, env, prompts, agent = episode(glm_dir, script, thinking="off")
    assert ep.finish_reason == "submitted" and ep.num_turns == 3 and [a.strip() for a in env.actions] == ACTIONS
    assert agent.decode(ep.prompt_ids).endswith("<|user|>\nfix add in m.py/nothink<|assistant|>\n<think></think>")
    assert ep.conversation.count("<|assistant|>\n<think></think>\n") == 3
    assert_token_exact(ep, prompts, agent)
    observation = agent.tok.convert_tokens_to_ids(OBSERVATION)
    assert ep.prompt_ids + ep.completion_ids == agent.encode(fresh_render(agent, ep, False)) + [observation]


def test_a_turn_stopped_at_another_header_or_cut_by_length_keeps_its_ids_as_sent(glm_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(glm_dir)
    user, eot = (tok.convert_tokens_to_ids(t) for t in ("<|user|>", "<|endoftext|>"))
    script: list[Turn] = [(THINKING[0], user), (THINKING[1], None), (THINKING[1], eot), THINKING[2]]
    ep, env, prompts, agent = episode(glm_dir, script)
    assert ep.finish_reason == "submitted" and ep.num_turns == 4 and env.actions == [*ACTIONS[:2], ACTIONS[1], "submit"]
    assert_token_exact(ep, prompts, agent)
    # <|user|> and <|endoftext|> stay the model's last ids, the observation's header following them whole;
    # the turn cut by length is closed by the header, as the template renders it.
    assert f"view m.py<|user|>{OBSERVATION}\n<tool_response>\nturn 1: ok" in ep.conversation
    assert f"a + b{OBSERVATION}\n<tool_response>\nturn 2: ok" in ep.conversation
    assert f"a + b<|endoftext|>{OBSERVATION}\n<tool_response>\nturn 3: ok" in ep.conversation
    # Everything else is the template's fresh rendering.
    sent = fresh_render(agent, ep, None).replace(f"m.py{OBSERVATION}", f"m.py<|user|>{OBSERVATION}", 1)
    sent = sent.replace(
        f"b{OBSERVATION}\n<tool_response>\nturn 3", f"b<|endoftext|>{OBSERVATION}\n<tool_response>\nturn 3"
    )
    assert ep.conversation == sent + OBSERVATION
