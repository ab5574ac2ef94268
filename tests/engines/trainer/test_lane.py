import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from engines.trainer.checkpoint import list_states
from engines.trainer.lane import LaneConfig, train_steps
from storage import checkpoints
from storage.fs import open_store
from storage.shards import write_shard
from tests.engines.trainer.rollouts import synthetic_rollouts

REPO = Path(__file__).resolve().parents[3]


def _lane(tmp_path, model_dir, run="run1", steps=3, **trainer):
    return LaneConfig(
        model_dir=str(model_dir),
        storage={"root": str(tmp_path / "lake")},
        run=run,
        num_steps=steps,
        poll_interval_s=0.05,
        wait_timeout_s=60,
        trainer={"seq_len": 64, **trainer},
    )


def _write_steps(cfg, model, steps, **kw):
    store = open_store(cfg.storage)
    for s in steps:
        write_shard(store, cfg.run, s, "final", synthetic_rollouts(model, step=s, seed=s, run=cfg.run, **kw))


def _weights(cfg, version):
    store = open_store(cfg.storage)
    return load_file(f"{checkpoints.get(store, cfg.run, version).uri}/model.safetensors")


def _steps_table(cfg):
    from storage.parquet_io import read_table

    files = sorted((Path(cfg.storage.root) / cfg.run / "steps").glob("step=*/metrics.parquet"))
    store = open_store(cfg.storage)
    return pa.concat_tables([read_table(store, str(f)) for f in files]).sort_by("step")


def test_lane_trains_publishes_and_records_metrics(tiny_model, tiny_model_dir, tmp_path):
    cfg = _lane(tmp_path, tiny_model_dir)
    _write_steps(cfg, tiny_model, range(3))
    results = train_steps(cfg)
    assert [r["policy_version"] for r in results] == [1, 2, 3]
    assert checkpoints.list_versions(open_store(cfg.storage), cfg.run) == [1, 2, 3]
    v1, v3 = _weights(cfg, 1), _weights(cfg, 3)
    init = load_file(f"{tiny_model_dir}/model.safetensors")
    name = "model.layers.0.mlp.gate.weight"
    assert not torch.equal(v1[name], init[name]) and not torch.equal(v3[name], v1[name])
    steps = _steps_table(cfg)
    assert steps.column("step").to_pylist() == [0, 1, 2]
    assert steps.column("skipped").to_pylist() == [False] * 3
    for col in ("loss", "mismatch_kl", "masked_fraction", "entropy", "grad_norm", "trained_tokens"):
        assert all(v is not None for v in steps.column(col).to_pylist()), col
    # Routes and logprobs came from the initial policy: no mismatch on the first step.
    assert steps.column("mismatch_kl")[0].as_py() == pytest.approx(0.0, abs=1e-6)
    assert list_states(cfg.state_path()) == [1, 2]  # keep_last_states=2


def test_step_without_signal_or_with_nan_is_skipped_and_still_published(tiny_model, tiny_model_dir, tmp_path):
    cfg = _lane(tmp_path, tiny_model_dir, steps=2)
    store = open_store(cfg.storage)
    same = synthetic_rollouts(tiny_model, step=0, run=cfg.run)
    same = same.set_column(same.column_names.index("reward"), "reward", pa.array([1.0] * same.num_rows))
    write_shard(store, cfg.run, 0, "final", same)
    nan = synthetic_rollouts(tiny_model, step=1, seed=1, run=cfg.run)
    lps = [[float("nan")] * len(x) for x in nan.column("completion_logprobs").to_pylist()]
    nan = nan.set_column(
        nan.column_names.index("completion_logprobs"), "completion_logprobs", pa.array(lps, pa.list_(pa.float32()))
    )
    write_shard(store, cfg.run, 1, "final", nan)
    results = train_steps(cfg)
    assert [r["skipped"] for r in results] == [True, True]
    assert results[0]["skip_reason_no_tokens"] == 1.0 and results[1]["skip_reason_nonfinite"] == 1.0
    init = load_file(f"{tiny_model_dir}/model.safetensors")
    for k, v in _weights(cfg, 2).items():
        assert torch.equal(v, init[k]), k  # no update happened
    assert _steps_table(cfg).column("skipped").to_pylist() == [True, True]


def test_the_advantages_table_holds_exactly_what_the_step_trained_on(tiny_model, tiny_model_dir, tmp_path, monkeypatch):
    import engines.trainer.rl_step as rl_step_module
    from storage.parquet_io import read_table

    cfg = _lane(tmp_path, tiny_model_dir, steps=1, std_scale_advantages=True, negative_advantage_scale=0.5)
    _write_steps(cfg, tiny_model, [0])  # stored `advantage` 0.0 everywhere: never read
    batches = []
    packed = rl_step_module.episodes_from_table
    monkeypatch.setattr(rl_step_module, "episodes_from_table", lambda t: batches.append(t) or packed(t))
    train_steps(cfg)
    (trained,) = batches  # the table the optimizer step was packed from
    used = dict(zip(zip(trained["group_id"].to_pylist(), trained["sample_index"].to_pylist()), trained["advantage"]))
    path = Path(cfg.storage.root) / cfg.run / "advantages" / "step=0" / "trained.parquet"
    record = read_table(open_store(cfg.storage), str(path)).to_pylist()
    assert len(record) == 16 and {r["rollouts_run"] for r in record} == {cfg.run}
    assert {(r["group_id"], r["sample_index"]): r["advantage"] for r in record if r["trained"]} == {
        k: v.as_py() for k, v in used.items()
    }
    assert any(not r["trained"] for r in record) and any(r["advantage"] < 0 for r in record if r["trained"])


def test_waiting_for_a_missing_step_times_out_with_a_clear_error(tiny_model_dir, tmp_path):
    cfg = _lane(tmp_path, tiny_model_dir, steps=1).model_copy(update={"wait_timeout_s": 0.2})
    with pytest.raises(TimeoutError, match="step 0 of run 'run1'.*rollout lane"):
        train_steps(cfg)


def test_an_s3_root_keeps_the_local_state_in_the_runs_work_folder_of_its_lake(tiny_model_dir):
    cfg = LaneConfig(model_dir=str(tiny_model_dir), storage={"root": "s3://b/x"}, run="r", num_steps=1)
    folder = cfg.state_path().parent.parent
    assert cfg.state_path().parent.name == "r" and folder.parent == Path.home() / ".cache/tandem-rl/work"
    assert folder.name.startswith("b-x-")
    # A run of the same name in another lake keeps its state elsewhere.
    other = cfg.model_copy(update={"storage": cfg.storage.model_copy(update={"root": "s3://b/y"})})
    assert other.state_path() != cfg.state_path()


@pytest.mark.slow
def test_resume_after_kill_continues_at_the_same_step_with_the_same_state(tiny_model, tiny_model_dir, tmp_path):
    # Reference: three steps without interruption, in this process.
    ref = _lane(tmp_path / "ref", tiny_model_dir)
    _write_steps(ref, tiny_model, range(3))
    train_steps(ref)

    # The lane as a process: steps 0 and 1 are there, step 2 is not; kill it while it waits.
    cfg = _lane(tmp_path / "crash", tiny_model_dir)
    _write_steps(cfg, tiny_model, range(2))
    config = tmp_path / "lane.json"
    config.write_text(cfg.model_dump_json())
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "engines.trainer.lane", "--config", str(config)]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while list_states(cfg.state_path()) != [0, 1]:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "lane did not save step 1"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (cfg.state_path() / ".step-00000002.tmp").mkdir()  # as a crash in the middle of a save leaves it

    _write_steps(cfg, tiny_model, [2])
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resuming run run1 after step 1" in out.stdout
    assert "step 2:" in out.stdout and "step 0:" not in out.stdout and "step 1:" not in out.stdout
    assert _steps_table(cfg).column("step").to_pylist() == [0, 1, 2]
    # Same data, same restored optimizer/scheduler/RNG state: the same weights as without the crash.
    a, b = _weights(ref, 3), _weights(cfg, 3)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    ref_opt = torch.load(ref.state_path() / "step-00000002" / "optimizer.bin", weights_only=False)
    opt = torch.load(cfg.state_path() / "step-00000002" / "optimizer.bin", weights_only=False)
    for i, s in ref_opt["state"].items():
        torch.testing.assert_close(s["exp_avg_sq"], opt["state"][i]["exp_avg_sq"], rtol=0, atol=0)
        assert s["step"] == opt["state"][i]["step"] == 3
