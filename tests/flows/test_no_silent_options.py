"""No silent options: every field of every configuration model is read by the code it
configures, or refused with a reason where it cannot be honoured.

Two checks:
- static, over every configuration model (RunConfig, the trainer lane's LaneConfig,
  LanesConfig, the replays' configs and `tandem sft`'s): each field name is read as an
  attribute (`.name`) somewhere in the project's code outside pydantic validators. A
  field nothing reads fails here, so a new option cannot land unread. (A name shared by
  several fields passes when any of them is read; `tandem sft`'s fields must be read by
  the SFT code itself, and the cluster options get the stricter check below.)
- observable, over inference.cluster: changing each field from its default changes
  the vLLM command line or the servers the pool starts, or is refused on the CPU
  build with a message that names the field and what to use instead.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from engines.inference import disaggregation, launch
from engines.inference.config import ClusterOptions, InferenceConfig
from engines.trainer.config import SFTCommandConfig
from engines.trainer.lane import LaneConfig
from flows.config import RunConfig
from flows.config_loader import _model_of
from flows.lanes_config import LanesConfig
from flows.replay_config import ReplayTrainConfig, RescoreConfig

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("engines", "flows", "tasks", "storage", "scripts", "benchmarks")
VALIDATORS = {"model_validator", "field_validator"}


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, field name) of every field, sections included, depth first."""
    for name, info in model.model_fields.items():
        yield f"{prefix}{name}", name
        nested = _model_of(info.annotation)
        if nested is not None:
            yield from fields(nested, f"{prefix}{name}.")


def _is_validator(node: ast.AST) -> bool:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")) in VALIDATORS:
            return True
    return False


def attributes_read(tree: ast.AST) -> set[str]:
    """Attribute names loaded in `tree`, not counting reads inside validators (checking
    a value is not using it) and string keys of getattr(obj, "name")."""
    names: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_validator(node):
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and len(node.args) >= 2:
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.add(key.value)
        stack.extend(ast.iter_child_nodes(node))
    return names


def project_reads(paths: tuple[str, ...] = SOURCES) -> set[str]:
    """Attribute names read in the .py files under `paths` (folders or files of the project)."""
    names: set[str] = set()
    for entry in paths:
        target = ROOT / entry
        for path in [target] if target.is_file() else target.rglob("*.py"):
            names |= attributes_read(ast.parse(path.read_text(), str(path)))
    return names


# Fields read without `.name` in the code, each with where and how.
READ_GENERICALLY = {
    # A consent flag: its whole job is to let validation accept env.backend = 'unsandboxed'
    # (engines/env/config.py), which the sandbox then honours.
    "env.allow_unsandboxed",
}


def unread_fields(model: type[BaseModel], sources: tuple[str, ...] = SOURCES) -> list[str]:
    reads = project_reads(sources)
    return [key for key, name in fields(model) if name not in reads and key not in READ_GENERICALLY]


# Every configuration model a user fills (a flow's parameters or a command's keys), and
# the code that must read its fields: `tandem sft`'s keys are read by SFT itself and the
# trainer path it trains through (its optimizer and head in rl_step.py, the trainee in
# distributed.py and parallelize.py, its ranks' devices in torchrun.py), the others
# anywhere in the project.
CONFIG_MODELS: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "RunConfig": (RunConfig, SOURCES),
    "LaneConfig": (LaneConfig, SOURCES),
    "LanesConfig": (LanesConfig, SOURCES),
    "RescoreConfig": (RescoreConfig, SOURCES),
    "ReplayTrainConfig": (ReplayTrainConfig, SOURCES),
    "SFTCommandConfig": (
        SFTCommandConfig,
        (
            "engines/trainer/sft.py",
            "engines/trainer/rl_step.py",
            "engines/trainer/distributed.py",
            "engines/trainer/parallelize.py",
            "engines/trainer/torchrun.py",
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIG_MODELS))
def test_every_config_field_is_read(name: str) -> None:
    model, sources = CONFIG_MODELS[name]
    unread = unread_fields(model, sources)
    assert not unread, (
        f"{name} fields nothing reads: {unread}. Read each in the code it configures, or refuse it at validation "
        "with the reason and what to use instead"
    )


def test_the_hack_settings_are_read_where_they_act() -> None:
    """env.hack_policy decides a flagged patch's grade and env.hack_rate_warn a step's
    warning: each is one of RunConfig's fields and is read by the code that acts on it,
    not merely somewhere in the project."""
    assert {"env.hack_policy", "env.hack_rate_warn"} <= {key for key, _ in fields(RunConfig)}
    assert "hack_policy" in project_reads(("engines/env/grader.py",))
    assert "hack_rate_warn" in project_reads(("engines/rollout/step.py",))


def test_the_sft_code_alone_does_not_read_the_rl_keys() -> None:
    """The narrower sources of `tandem sft` do tell read from unread: TrainerConfig's RL keys fail there."""
    from engines.trainer.config import TrainerConfig

    unread = unread_fields(TrainerConfig, CONFIG_MODELS["SFTCommandConfig"][1])
    assert {"loss_type", "kl_coef", "ratio_low", "keep_last_states"} <= set(unread)
    assert not set(unread) & set(SFTCommandConfig.model_fields)


def test_an_unread_field_is_found() -> None:
    class Probe(BaseModel):
        tensor_parallel_size: int = 1
        option_nothing_reads_yet: int = 0

    assert unread_fields(Probe) == ["option_nothing_reads_yet"]


# Every cluster option set away from its default, in a combination validation accepts.
CHANGED: dict[str, Any] = {
    "fp8": "quantize",
    "tensor_parallel_size": 2,
    "data_parallel_size": 4,
    "expert_parallel": True,
    "data_parallel_size_local": 2,
    "data_parallel_address": "10.0.0.1",
    "data_parallel_rpc_port": 13345,
    "all2all_backend": "deepep_high_throughput",
    "routed_expert_capture": True,
    "extra_server_args": ["--gpu-memory-utilization", "0.8"],
    "disaggregation": {"num_prefill_servers": 2, "num_decode_servers": 3, "kv_connector": "MooncakeConnector"},
}
DISAGGREGATION_CHANGED: dict[str, Any] = {
    "num_prefill_servers": 2,
    "num_decode_servers": 3,
    "kv_connector": "NixlConnector",
    "shared_storage_path": "/shared/kv",
}


def launch_plan(cluster: dict[str, Any], cpu_build: bool) -> tuple[list[str | None], list[list[str]]]:
    """The server roles and every server's argv the pool would use."""
    cfg = InferenceConfig(model_dir="m", cluster=cluster)
    roles = disaggregation.server_roles(cfg)
    return roles, [launch.server_command(cfg, "py", 8000, cpu_build, role, "/tmp/kv") for role in roles]


def cpu_refusal(cluster: dict[str, Any]) -> str | None:
    try:
        launch.check_supported(InferenceConfig(model_dir="m", cluster=cluster), cpu_build=True)
    except launch.UnsupportedOption as err:
        return str(err)
    return None


def test_changed_cluster_options_cover_every_field() -> None:
    assert set(CHANGED) == set(ClusterOptions.model_fields)
    assert set(DISAGGREGATION_CHANGED) == set(
        ClusterOptions.model_fields["disaggregation"].annotation.__args__[0].model_fields
    )  # type: ignore[union-attr]


def _needed(field: str) -> dict[str, Any]:
    """The smallest setting validation accepts with `field` changed."""
    value = CHANGED[field]
    needs: dict[str, dict[str, Any]] = {
        "expert_parallel": {"tensor_parallel_size": 2},
        "data_parallel_size_local": {"data_parallel_size": 4, "data_parallel_address": "10.0.0.1"},
        "all2all_backend": {"expert_parallel": True, "tensor_parallel_size": 2},
    }
    return {**needs.get(field, {}), field: value}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_each_cluster_option_is_passed_on_or_refused(field: str) -> None:
    setting = _needed(field)
    base = {k: v for k, v in setting.items() if k != field}
    for cpu_build in (False, True):
        if cpu_build and (reason := cpu_refusal(setting)) is not None and cpu_refusal(base) is None:
            assert f"cluster.{field}" in reason and (" use " in reason or "unset" in reason or "leave" in reason), (
                reason
            )
            continue
        assert launch_plan(setting, cpu_build) != launch_plan(base, cpu_build), (
            f"cluster.{field}={setting[field]!r} changes neither the servers nor their flags "
            f"({'CPU' if cpu_build else 'GPU'} build) and is not refused"
        )


@pytest.mark.parametrize("field", sorted(DISAGGREGATION_CHANGED))
def test_each_disaggregation_option_is_passed_on_or_refused(field: str) -> None:
    base = {"disaggregation": {"kv_connector": "ExampleConnector"}}
    changed = {"disaggregation": {**base["disaggregation"], field: DISAGGREGATION_CHANGED[field]}}
    for cpu_build in (False, True):
        if cpu_build and (reason := cpu_refusal(changed)) is not None:
            assert f"cluster.disaggregation.{field}" in reason and "use 'ExampleConnector'" in reason, reason
            continue
        assert launch_plan(changed, cpu_build) != launch_plan(base, cpu_build), (
            f"cluster.disaggregation.{field} changes nothing the pool starts"
        )


def test_kv_roles_and_connector_reach_the_servers() -> None:
    d = {"num_prefill_servers": 2, "num_decode_servers": 3, "kv_connector": "ExampleConnector"}
    roles, argvs = launch_plan({"disaggregation": {**d, "shared_storage_path": "/shared/kv"}}, cpu_build=True)
    assert roles == ["kv_producer"] * 2 + ["kv_consumer"] * 3
    configs = [json.loads(a[a.index("--kv-transfer-config") + 1]) for a in argvs]
    assert {c["kv_connector"] for c in configs} == {"ExampleConnector"}
    assert [c["kv_role"] for c in configs] == roles
    assert {c["kv_connector_extra_config"]["shared_storage_path"] for c in configs} == {"/shared/kv"}


def test_inference_thinking_reaches_the_template_or_is_refused(tmp_path: Path) -> None:
    """inference.thinking changes the prompt the agent loop sends (Qwen3's switch), and a
    template without the switch refuses it by name, at configuration and at load."""
    from engines.inference.agent import AgentLoop
    from tests.chat_models import chat_tokenizer

    prompts = {}
    for name in ("qwen3", "chatml"):
        chat_tokenizer(name).save_pretrained(tmp_path / name)
    for thinking in (None, "on", "off"):
        cfg = InferenceConfig(model_dir=str(tmp_path / "qwen3"), thinking=thinking)
        chat = AgentLoop(None, chat_tokenizer("qwen3"), cfg).chat  # type: ignore[arg-type]
        prompts[thinking] = chat.prompt_ids(chat.first_messages("fix add"))
    assert prompts["off"] != prompts["on"] == prompts[None]  # Qwen3 thinks by default
    with pytest.raises(ValueError, match="thinking='on': the chat template in .* has no thinking switch"):
        InferenceConfig(model_dir=str(tmp_path / "chatml"), thinking="on")
    unread = InferenceConfig(model_dir=str(tmp_path / "none"), thinking="on")  # no template to read here
    with pytest.raises(ValueError, match="inference.thinking = 'on': .* has no thinking switch"):
        AgentLoop(None, chat_tokenizer("chatml"), unread)  # type: ignore[arg-type]


def test_each_tool_format_changes_what_the_agent_loop_reads_or_is_refused(tmp_path: Path) -> None:
    """Every value of inference.tool_format reads a turn differently: over one action written
    as a text action and as each family's call, the calls each value reads as the action
    differ (llama3_json also reads a hermes block's JSON, as vLLM's parser does); 'auto'
    reads as the format the template writes (ChatML's: hermes). A template without tools
    refuses every format by name, and 'auto' settles there on the text actions."""
    from typing import get_args

    from engines.inference.agent import AgentLoop
    from engines.protocol import Action, InvalidAction, render_action
    from engines.tool_calls import render_tool_call
    from engines.tool_formats import TOOL_FORMATS
    from tests.chat_models import LLAMA3_TEMPLATE, chat_tokenizer

    chat_tokenizer("chatml").save_pretrained(tmp_path / "chatml")
    action = Action("view", path="a.py")
    turns = {"text": render_action(action)} | {f: render_tool_call(action, f) for f in TOOL_FORMATS}
    values = [v for v in get_args(InferenceConfig.model_fields["tool_format"].annotation) if v != "auto"]
    read = {}
    for value in [*values, "auto"]:
        cfg = InferenceConfig(model_dir=str(tmp_path / "chatml"), tool_format=value)
        loop = AgentLoop(None, chat_tokenizer("chatml"), cfg)  # type: ignore[arg-type]
        read[value] = frozenset(k for k, turn in turns.items() if not isinstance(loop.turn_action(turn), InvalidAction))
    assert all(value in read[value] for value in values)
    assert read["llama3_json"] == {"llama3_json", "hermes"} and len({read[v] for v in values}) == len(values)
    assert read["auto"] == read["hermes"]
    (tmp_path / "llama3").mkdir()
    (tmp_path / "llama3" / "chat_template.jinja").write_text(LLAMA3_TEMPLATE)
    for value in TOOL_FORMATS:
        with pytest.raises(ValueError, match=f"tool_format='{value}': the chat template in .* never references"):
            InferenceConfig(model_dir=str(tmp_path / "llama3"), tool_format=value)
    assert InferenceConfig(model_dir=str(tmp_path / "llama3")).tool_format == "text"


@pytest.mark.corpus
def test_each_corpus_task_option_changes_the_runs_draw(tmp_path: Path) -> None:
    """With tasks.kind = 'corpus', tasks.train_tasks, heldout_tasks, seed and hint each change
    the tasks the run takes (flows/runtime.py: corpus_draw -> tasks/corpus.py: draw_corpus),
    and eval.tasks above the held-out share is refused by name."""
    from dataclasses import replace

    from engines.env.task_sources.corpus import load_corpus, save_corpus
    from flows.config_loader import load_config
    from flows.runtime import corpus_draw
    from tasks.corpus import draw_corpus
    from tests.real_project import one_bug_task, write_project

    base = one_bug_task(write_project(tmp_path / "shop"))
    source = tmp_path / "corpus"
    save_corpus(
        [replace(base, instance_id=f"t{i}", split="heldout" if i % 3 == 0 else "train") for i in range(30)], source
    )
    common = ["--tasks.kind", "corpus", "--tasks.corpus_path", str(source), "--env.feedback", "keep"]
    common += ["--tasks.train_tasks", "8", "--tasks.heldout_tasks", "5", "--eval.tasks", "5"]

    def drawn(*overrides: str) -> list[tuple[str, str, str]]:
        config = load_config(RunConfig, None, [*common, *overrides])
        out = tmp_path / f"draw-{len(list(tmp_path.iterdir()))}"
        draw_corpus(str(source), str(out), corpus_draw(config))
        return sorted((t.instance_id, t.split, t.problem_statement) for t in load_corpus(out))

    default = drawn()
    assert sum(split == "train" for _, split, _ in default) == 8 and len(default) == 13
    for overrides in (
        ["--tasks.train_tasks", "9"],
        ["--tasks.heldout_tasks", "6", "--eval.tasks", "6"],
        ["--tasks.seed", "1"],
        ["--tasks.hint", "function"],
    ):
        assert drawn(*overrides) != default, overrides
    with pytest.raises(ValueError, match=r"eval\.tasks \(20\) exceeds the 10 held-out tasks the run takes"):
        drawn("--tasks.heldout_tasks", "20", "--eval.tasks", "20")


# The device plan's fields, each with a changed value validation accepts.
DEVICE_FIELDS: dict[str, list[str]] = {
    "inference.devices": ["--inference.devices", "[1]"],
    "trainer.devices": ["--trainer.devices", "[0]", "--inference.devices", "[1]"],
    "trainer.share_devices": ["--trainer.share_devices", "true"],
}


def test_device_fields_are_all_covered() -> None:
    keys = {key for key, _ in fields(RunConfig)}
    assert {k for k in keys if k.endswith("devices")} == set(DEVICE_FIELDS)


@pytest.mark.parametrize("key", sorted(DEVICE_FIELDS))
def test_each_device_option_changes_what_the_processes_see(key: str) -> None:
    """Each field changes the GPUs a server or the trainer starts with, on a node of 2 GPUs
    (trainer.share_devices: both on GPU 0 instead of one each)."""
    from engines.trainer.torchrun import trainer_environment
    from flows.config_loader import load_config
    from flows.devices import device_plan

    def seen(overrides: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        config = load_config(RunConfig, None, overrides)
        placed = device_plan(config, gpus=2).apply(config)
        return launch.server_environment(placed.inference, cpu_build=False), trainer_environment(placed.trainer, {})

    side = 0 if key.startswith("inference") else 1  # the server's environment, or the trainer's
    assert seen(DEVICE_FIELDS[key])[side] != seen([])[side], f"{key} changes nothing the processes it places see"
