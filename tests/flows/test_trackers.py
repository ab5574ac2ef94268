"""W&B and MLflow through a real `tandem run` (the suite's Prefect server, vLLM server,
sandboxed grading, trainer lane process) with `metrics.sinks = ["wandb", "mlflow"]`,
from a model of another chat-template family, Llama-3 headers on a Mixtral (the suite's
whole run of that family; the ChatML framing's is the Qwen3 recipe's trial,
test_recipe_first_steps.py):
the W&B offline run files and the MLflow store it leaves, read back with each
library's own reader, hold every step's metrics exactly as the lake's `steps` table
does, and the held-out evaluation table as the run stored it. A sink whose library is
missing is refused before anything starts, naming the extra to install.

wandb 0.31 has no Python reader of its offline `.wandb` files any more (the old
`wandb.sdk.internal.datastore` is gone), so `wandb_records` reads their LevelDB-log
framing and parses each record with wandb's own protobuf, `wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest

from flows.config import RunConfig
from flows.config_loader import load_config
from flows.metrics import MetricsConfig, metric_name
from flows.trackers import EVALUATION_TABLE
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect
from tests.chat_models import TRACKED_FAMILY, build_chat_model
from tests.flows.tandem_cli import run_tandem

REPO = Path(__file__).resolve().parents[2]
RUN, STEPS = "tracked", 2


# --- W&B's offline files -----------------------------------------------------------

_BLOCK, _HEADER = 32768, 7  # LevelDB log: 32 KiB blocks, records of crc32 u32 + length u16 + type u8


def wandb_records(path: Path) -> list[Any]:
    """Every record of a `.wandb` file, as wandb's own protobuf messages."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    seeds = [zlib.crc32(bytes([t])) for t in range(5)]  # the checksum covers the type byte first
    records, pending, pos = [], b"", _HEADER
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0:
            break  # zeros after the last record
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        assert zlib.crc32(chunk, seeds[kind]) == checksum, f"{path}: bad checksum at {pos}"
        pos += _HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk  # FULL, FIRST / MIDDLE, LAST
        if kind in (1, 4):
            records.append(Record.FromString(pending))
    return records


def wandb_history(path: Path) -> dict[int, dict[str, Any]]:
    """step -> {key: value} of a W&B run file's history rows (nested keys joined by '/')."""
    rows: dict[int, dict[str, Any]] = {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            row = rows.setdefault(record.history.step.num, {})
            for item in record.history.item:
                row["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return rows


def wandb_run_file(root: Path, lane: str) -> Path:
    found = sorted((root / RUN / "wandb").glob(f"offline-run-*-{RUN}-{lane}/run-{RUN}-{lane}.wandb"))
    assert len(found) == 1, f"W&B files of the {lane} lane: {found}"
    return found[0]


# --- the run -------------------------------------------------------------------------


def _config(root: Path, model_dir: Path) -> str:
    return f"""
run = "{RUN}"
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
steps = {STEPS}
batch_size = 8
group_size = 4
async_level = 1
[trainer]
micro_batch_rows = 16
[metrics]
sinks = ["wandb", "mlflow"]
"""


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory, prefect_server: dict[str, str]) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("trackers")
    root, config = tmp / "lake", tmp / "run.toml"
    config.write_text(_config(root, build_chat_model(TRACKED_FAMILY, tmp / TRACKED_FAMILY)))
    output = run_tandem(config, prefect_server, clean_env=True)  # the suite's Prefect server
    lake = connect(open_store(str(root)), RUN)
    steps = lake.sql("SELECT * FROM steps ORDER BY step").to_arrow_table().to_pylist()
    greedy = dict(
        lake.sql(
            "SELECT evaluation, avg(resolved::DOUBLE) FROM evaluations WHERE pass = 'greedy' GROUP BY evaluation"
        ).fetchall()
    )
    evals = {name: json.loads((root / RUN / "evals" / f"{name}.json").read_text()) for name in ("before", "after")}
    return {"root": root, "output": output, "steps": steps, "greedy": greedy, "evals": evals}


@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
@pytest.mark.chat_template
def test_a_two_step_run_from_a_model_with_its_own_chat_template(tracked_run: dict[str, Any]) -> None:
    """Finished at v2, every episode in the family's template: Llama-3 headers, whose turns
    end at <|eot_id|> while the tokenizer's and generation config's eos is <|end_of_text|>
    (the chat format sends the end of turn as a stop id)."""
    output, root = tracked_run["output"], tracked_run["root"]
    assert f"[tandem] run {RUN} finished" in output
    store = open_store(str(root))
    assert checkpoints.latest(store, RUN).version == 2
    rows = connect(store, run=RUN).sql("SELECT conversation FROM rollouts").fetchall()
    assert len(rows) == 16
    assert all(r[0].startswith("<|begin_of_text|><|start_header_id|>system") for r in rows)
    assert all("<|eot_id|>" in r[0] for r in rows)


def lake_metrics(row: dict[str, Any]) -> dict[str, float]:
    """A steps-table row's numbers by metric name: its columns and its `extra` map."""
    values = {
        k: float(v)
        for k, v in row.items()
        if k not in ("run_id", "step", "extra", "written_at") and isinstance(v, (int, float)) and v is not None
    }
    values.update((k, float(v)) for k, v in row["extra"])
    return values


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def evaluation_numbers(result: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in result.items() if isinstance(v, (int, float))}


@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
def test_wandb_offline_runs_hold_every_step_the_lake_holds(tracked_run: dict[str, Any]) -> None:
    trainer = wandb_history(wandb_run_file(tracked_run["root"], "trainer"))
    rollout = wandb_history(wandb_run_file(tracked_run["root"], "rollout"))
    assert [row["step"] for row in tracked_run["steps"]] == list(range(STEPS))
    for row in tracked_run["steps"]:
        step, expected = row["step"], lake_metrics(row)
        logged = {k.removeprefix("trainer/"): v for k, v in trainer[step].items() if k.startswith("trainer/")}
        assert set(expected) <= set(logged), f"step {step}: not in W&B: {set(expected) - set(logged)}"
        for name, value in expected.items():
            assert same(float(logged[name]), value), f"step {step} trainer/{name}: W&B {logged[name]}, lake {value}"
        # The rollout lane's own copy of the step's episode metrics, from the same shard.
        for name in ("reward_mean", "pass_rate", "completion_tokens"):
            assert same(float(rollout[step][f"rollout/{name}"]), expected[name]), (step, name)


@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
def test_the_trackers_leave_the_terminal_to_the_step_lines(tracked_run: dict[str, Any]) -> None:
    chatter = [
        line
        for line in tracked_run["output"].splitlines()
        if "wandb" in line.lower() or "mlflow" in line.lower() or "alembic" in line.lower()
    ]
    assert not chatter, chatter


@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
def test_wandb_evaluation_table_is_the_stored_evaluations(tracked_run: dict[str, Any]) -> None:
    path = wandb_run_file(tracked_run["root"], "rollout")
    history = wandb_history(path)
    assert history[0]["eval/heldout/_type"] == "table-file"
    last = history[STEPS]  # the 'after' evaluation, logged at the step after the last
    table = json.loads((path.parent / "files" / last["eval/heldout/path"]).read_text())
    rows = {row[0]: dict(zip(table["columns"], row, strict=True)) for row in table["data"]}
    assert list(rows) == ["before", "after"]
    for name, result in tracked_run["evals"].items():
        numbers = evaluation_numbers(result)
        assert {k: float(v) for k, v in rows[name].items() if k != "evaluation"} == numbers
        assert rows[name]["pass@1"] == tracked_run["greedy"][name]  # as the lake's evaluation episodes say
        step = 0 if name == "before" else STEPS
        assert history[step][f"eval/{name}/pass@1"] == result["pass@1"]


def _mlflow(root: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / RUN / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tandem-rl")
    runs = {r.data.tags["tandem.lane"]: r for r in client.search_runs([experiment.experiment_id])}
    return client, runs


@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
def test_mlflow_runs_hold_every_step_the_lake_holds(tracked_run: dict[str, Any]) -> None:
    client, runs = _mlflow(tracked_run["root"])
    assert set(runs) == {"rollout", "trainer"}
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert all(r.data.tags["tandem.run"] == RUN for r in runs.values())
    trainer_id = runs["trainer"].info.run_id
    expected = [lake_metrics(row) for row in tracked_run["steps"]]
    for name in expected[0]:
        history = client.get_metric_history(trainer_id, metric_name(f"trainer/{name}"))
        assert [m.step for m in history] == list(range(STEPS)), name
        for m, row in zip(history, expected, strict=True):
            assert same(m.value, row[name]), f"step {m.step} trainer/{name}: MLflow {m.value}, lake {row[name]}"
    rewards = client.get_metric_history(runs["rollout"].info.run_id, "rollout/reward_mean")
    assert [m.value for m in rewards] == [row["reward_mean"] for row in expected]
    # The run's settings as params: the rollout lane's resolved RunConfig.
    assert runs["rollout"].data.params["rl.steps"] == str(STEPS)


@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
def test_mlflow_evaluation_table_is_the_stored_evaluations(tracked_run: dict[str, Any]) -> None:
    client, runs = _mlflow(tracked_run["root"])
    rollout = runs["rollout"].info
    table = client.load_table(rollout.experiment_id, EVALUATION_TABLE, run_ids=[rollout.run_id])
    rows = {row["evaluation"]: row for row in table.to_dict(orient="records")}
    assert list(rows) == ["before", "after"]
    for name, result in tracked_run["evals"].items():
        numbers = evaluation_numbers(result)
        assert {k: float(rows[name][k]) for k in numbers} == numbers
        assert rows[name]["pass@1"] == tracked_run["greedy"][name]
        history = client.get_metric_history(runs["rollout"].info.run_id, f"eval/{name}/pass_at_1")
        assert [(m.step, m.value) for m in history] == [(0 if name == "before" else STEPS, result["pass@1"])]


# --- refusals (fast) ---------------------------------------------------------------

HIDDEN = textwrap.dedent("""
    import sys
    from flows.metrics import MetricsConfig
    # As if the packages were never installed: the interpreter can no longer find them.
    sys.path[:] = [p for p in sys.path if "site-packages" not in p]
    try:
        MetricsConfig(sinks=sys.argv[1:])
    except ValueError as err:
        print(err)
    else:
        print("accepted")
""")


@pytest.mark.parametrize("sink", ["wandb", "mlflow"])
def test_a_sink_whose_library_is_missing_is_refused_naming_the_extra(sink: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HIDDEN, sink], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert f"metrics.sinks: '{sink}' needs" in done.stdout and "pip install 'tandem-rl[trackers]'" in done.stdout, (
        done.stdout + done.stderr
    )
    assert MetricsConfig(sinks=[sink]).sinks == [sink]  # here, where it is installed, it is accepted


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--metrics.mlflow_tracking_uri", "http://127.0.0.1:5000"], "lacks 'mlflow'"),
        (["--metrics.wandb_mode", "online"], "lacks 'wandb'"),
        (["--metrics.sinks", '["wandb"]', "--metrics.tensorboard_dir", "tb"], "lacks 'tensorboard'"),
        (["--metrics.sinks", '["wandb", "wandb"]'], "more than once"),
    ],
)
def test_tracker_options_nothing_would_use_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        load_config(RunConfig, None, overrides)
