"""A 2-step `tandem run` from each test model of another chat-template family
(tests/chat_models.py) as `model.path`: warm start skipped (the weights are version
0), episodes in the model's own template on vLLM, sandboxed grading, two trainer
steps, weights published and evaluation before and after.

The ChatML family's run is the trackers' run (test_trackers.py, `TRACKED_FAMILY` of tests/chat_models.py),
checked there with `check_chat_run`: one run fewer in the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import checkpoints
from storage.fs import open_store
from storage.query import connect
from tests.chat_models import FAMILIES, TRACKED_FAMILY, build_chat_model
from tests.flows.tandem_cli import run_tandem

pytestmark = [pytest.mark.slow, pytest.mark.prefect, pytest.mark.vllm, pytest.mark.sandbox, pytest.mark.chat_template]


def _config(root: Path, model_dir: Path) -> str:
    return f"""
run = "chat"
[storage]
root = "{root}"
[model]
path = "{model_dir}"
[tasks]
train_tasks = 32
heldout_tasks = 4
[eval]
tasks = 4
samples = 1
[rl]
steps = 2
batch_size = 8
group_size = 4
async_level = 1
[trainer]
micro_batch_rows = 16
"""


def check_chat_run(output: str, root: Path, run: str, family: str) -> None:
    """A finished 2-step run from a `family` model: its weights, and every episode in the family's template."""
    assert f"[tandem] run {run} finished" in output
    store = open_store(str(root))
    assert checkpoints.latest(store, run).version == 2
    rows = connect(store, run=run).sql("SELECT conversation FROM rollouts").fetchall()
    assert len(rows) == 16
    start = "<|im_start|>system" if family == "chatml" else "<|begin_of_text|><|start_header_id|>system"
    assert all(r[0].startswith(start) for r in rows)


@pytest.mark.parametrize("name", sorted(set(FAMILIES) - {TRACKED_FAMILY}))
def test_a_two_step_run_from_a_model_with_its_own_chat_template(
    name: str, tmp_path: Path, prefect_server: dict[str, str]
) -> None:
    model_dir = build_chat_model(name, tmp_path / name)
    root, config = tmp_path / "lake", tmp_path / "run.toml"
    config.write_text(_config(root, model_dir))
    # The suite's Prefect server (a run's own embedded server is tested by test_run_faults).
    output = run_tandem(config, prefect_server)
    check_chat_run(output, root, "chat", name)
