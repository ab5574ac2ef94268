"""`tandem sft` on the user's own demonstrations (JSONL or Parquet), and `tandem eval`'s
configuration handling."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from engines.trainer.demos import load_conversations
from flows.cli import app

CONVERSATIONS = [
    [
        {"role": "user", "content": f"def add(a, b): return a - b  # case {i}"},
        {"role": "assistant", "content": "edit m.py 1\n    return a + b\nsubmit"},
    ]
    for i in range(8)
]


def test_jsonl_and_parquet_give_the_same_conversations(tmp_path: Path) -> None:
    jsonl = tmp_path / "demos.jsonl"
    jsonl.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    parquet = tmp_path / "demos.parquet"
    pq.write_table(pa.table({"messages": CONVERSATIONS}), parquet)
    assert load_conversations(jsonl) == load_conversations(parquet) == CONVERSATIONS


def test_sft_fine_tunes_a_given_model_on_user_demonstrations(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    out = tmp_path / "sft-model"
    result = CliRunner().invoke(
        app,
        [
            "sft",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--sft.max_steps",
            "4",
            "--sft.batch_size",
            "4",
            "--sft.log_every",
            "2",
            "--seq_len",
            "256",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "[sft] 8 conversations" in result.output and "[sft] step 4 loss" in result.output
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))


def test_sft_on_two_ranks_from_the_command_line_trains_like_one_process(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`tandem sft --processes 2` (torchrun, gloo): the exported weights equal one process's."""
    from safetensors.torch import load_file

    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    weights = []
    for processes in ("1", "2"):
        out = tmp_path / f"sft-{processes}"
        args = ["sft", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out), "--processes", processes]
        result = CliRunner().invoke(app, [*args, "--sft.max_steps", "3", "--sft.batch_size", "4", "--seq_len", "256"])
        assert result.exit_code == 0, result.output
        assert f"{processes} rank(s), ddp" in result.output
        weights.append({k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(f).items()})
    one, two = weights
    assert one.keys() == two.keys()
    worst = max((one[k] - two[k]).abs().max().item() for k in one)
    assert worst < 1e-4, worst


def test_sft_help_lists_the_trainer_keys() -> None:
    result = CliRunner().invoke(app, ["sft", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "sft.max_steps (int | none) = unset" in " ".join(result.output.split())


def test_sft_and_eval_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": "not a list"}\n')
    result = CliRunner().invoke(
        app, ["sft", "--model", str(tmp_path), "--data", str(bad), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1 and result.output.startswith("error:") and "bad.jsonl:1" in result.output
    result = CliRunner().invoke(app, ["eval", "--eval.taskz", "3"])
    assert result.exit_code == 1 and "eval.taskz" in result.output and "did you mean eval.tasks" in result.output


def test_sft_refuses_trainer_keys_it_never_reads(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    base = ["sft", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(tmp_path / "out")]
    for key, value, fix in [
        ("lr", "1e-3", "use sft.lr"),
        ("warmup_steps", "5", "use sft.warmup_steps"),
        ("loss_type", "tis", "remove it"),
        ("nodes", "2", "its ranks all run on this machine"),
        ("context_parallel_size", "2", "parallelism = 'fsdp2' shards the model"),
    ]:
        result = CliRunner().invoke(app, [*base, f"--{key}", value])
        assert result.exit_code == 1, result.output
        assert "error: invalid configuration" in result.output
        assert f"tandem sft does not read {key}" in result.output and fix in result.output
        assert not (tmp_path / "out").exists()


def test_sft_command_config_is_what_sft_reads() -> None:
    from engines.trainer.config import SFTCommandConfig, TrainerConfig
    from engines.trainer.warm_start_cache import SFT_PLACEMENT_FIELDS, SFT_TRAINER_FIELDS

    assert set(SFTCommandConfig.model_fields) == {*SFT_TRAINER_FIELDS, *SFT_PLACEMENT_FIELDS, "sft"}
    refused = set(TrainerConfig.model_fields) - set(SFTCommandConfig.model_fields)
    assert refused == set(SFTCommandConfig.refused_keys)
    assert {"lr", "micro_batch_rows", "nodes", "context_parallel_size"} <= refused
    cfg = SFTCommandConfig(sft={"lr": 1e-3, "max_steps": 3}, seq_len=128).trainer()
    assert (cfg.sft.lr, cfg.sft.max_steps, cfg.seq_len) == (1e-3, 3, 128)
    # SFT trains through the trainer's path: its ranks, sharding and precision are the trainer's keys.
    ranks = SFTCommandConfig(sft={"max_steps": 3}, processes=2, parallelism="fsdp2", mixed_precision="bf16")
    trainer = ranks.trainer()
    assert (trainer.processes, trainer.parallelism, trainer.mixed_precision) == (2, "fsdp2", "bf16")
