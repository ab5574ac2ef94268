"""One agent-loop episode on a family's test template (tests/chat_models.py) with the
scripted generator: no server, no sandbox. Shared by the per-family tests
(test_agent_qwen3_coder.py, ...), which check the ids against the template's own
rendering of the conversation."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from engines.inference.agent import AgentLoop, EpisodeRequest
from tests.engines.inference.conftest import small_config
from tests.engines.inference.scripted_generator import ScriptedGenerator, Turn

ACTIONS = ["view m.py", "edit m.py 2\n    return a + b", "submit"]


@dataclass
class Step:
    observation: str
    done: bool


class EchoEnv:
    """Submits on `submit`; records the actions it was sent."""

    def __init__(self) -> None:
        self.actions: list[str] = []

    def prompt(self) -> str:
        return "fix add in m.py"

    def step(self, action_text: str) -> Step:
        self.actions.append(action_text)
        return Step(f"turn {len(self.actions)}: ok", action_text.strip() == "submit")

    def patch(self) -> str:
        return ""

    def close(self) -> None:
        pass


@dataclass
class Run:
    episode: Any  # engines.inference.types.Episode
    env: EchoEnv
    prompts: list[list[int]]  # each request's prompt ids
    agent: AgentLoop

    @property
    def ids(self) -> list[int]:
        return self.episode.prompt_ids + self.episode.completion_ids


def run_episode(model_dir: Path, script: list[Turn], stop: str, **config: Any) -> Run:
    """One episode of `script`'s turns, each closed by the token `stop` unless it says otherwise.
    Long limits: a tools section of the test vocabulary takes over a thousand tokens."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    limits = {"max_turns": 6, "max_total_tokens": 4096}
    cfg = small_config(model_dir, max_model_len=4096, sampling={"max_tokens_per_turn": 256}, limits=limits, **config)
    generator = ScriptedGenerator(tok, {"t": script}, stop_id=tok.convert_tokens_to_ids(stop))
    agent = AgentLoop(generator, tok, cfg)
    env = EchoEnv()
    (ep,) = asyncio.run(agent.run_episodes([EpisodeRequest("t", "g", 0, lambda: env)]))
    (prompts,) = generator.prompts.values()
    return Run(ep, env, prompts, agent)


def model_turns(run: Run) -> list[list[int]]:
    """The runs of loss-masked ids of an episode: the model's turns as sampled."""
    ep, turns, start = run.episode, [], None
    for i, m in enumerate([*ep.loss_mask, False]):
        if m and start is None:
            start = i
        if not m and start is not None:
            turns.append(ep.completion_ids[start:i])
            start = None
    return turns


def assert_token_exact(run: Run) -> None:
    """Every request extends the previous one, and the ids decode to the episode's conversation."""
    ep = run.episode
    assert ep.finish_reason == "submitted" and not ep.infra_failure, (ep.finish_reason, ep.infra_message)
    assert run.prompts[0] == ep.prompt_ids and all(run.ids[: len(p)] == p for p in run.prompts)
    assert sorted(map(len, run.prompts)) == list(map(len, run.prompts))
    assert run.agent.decode(run.ids) == ep.conversation


def fresh_render(run: Run, tools: list[dict] | None = None, **switch: Any) -> str:
    """The template's own rendering of the episode's whole conversation."""
    return run.agent.tok.apply_chat_template(run.episode.messages, tools=tools, tokenize=False, **switch)
