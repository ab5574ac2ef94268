"""`tandem sft` and `tandem eval`: fine-tune a given model on your demonstrations,
and evaluate a run's newest weights on held-out tasks.

    tandem sft --model Qwen/Qwen3-30B-A3B --data demos.jsonl --out sft-model/ --sft.max_steps 200
    tandem eval --config configs/tiny.toml --eval.tasks 100

`tandem sft` takes the TrainerConfig keys SFT reads as overrides (`--sft.lr`,
`--sft.max_steps`, `--seq_len`, `--export_format bf16`; engines/trainer/config.py
SFTCommandConfig) and refuses the RL-only ones by name. It trains through the RL
trainer's path: `--processes 2 --parallelism fsdp2` runs two ranks under torchrun with
the model sharded, `--mixed_precision bf16` and `--devices` as for the trainer lane;
`tandem eval` takes the same configuration as `tandem run` (see `tandem run --help`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from flows.cli_shell import user_errors
from flows.config_loader import ConfigError, load_config
from flows.run_cli import _EXTRA, KeysInHelp, keys_in_help
from tasks.progress import quiet_prefect_console


def sft_command(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", help="Model directory, s3:// URI or Hugging Face model id.")],
    data: Annotated[
        Path, typer.Option("--data", help="Conversations: JSONL ({'messages': [...]} per line) or Parquet.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder for the fine-tuned weights (Hugging Face layout).")],
    config: Annotated[Path | None, typer.Option("--config", help="TOML file with the trainer keys SFT reads.")] = None,
    tool_format: Annotated[
        str,
        typer.Option(
            "--tool-format",
            help="The action language the run will ask for (its inference.tool_format): 'text', or a model family's "
            "tool-call format (hermes, llama3_json, glm45, deepseek_v31, kimi_k2, qwen3_coder) to "
            "train assistant turns as calls in that format with the tools in the template; 'auto': the format "
            "the model's chat template writes calls in (as a run's default), else 'text'.",
        ),
    ] = "auto",
) -> None:
    """Supervised fine-tuning of a given model on your demonstrations; extra `--key value` pairs set the trainer
    keys SFT reads (`--sft.lr`, `--sft.max_steps`, `--seq_len`, `--processes`, `--parallelism`, ...)."""
    from engines.model.hub import resolve_model
    from engines.tool_calls import chat_templates, template_tool_format
    from engines.tool_formats import TOOL_FORMATS
    from engines.trainer.config import SFTCommandConfig
    from engines.trainer.demos import load_conversations
    from engines.trainer.sft import sft

    if tool_format not in ("auto", "text", *TOOL_FORMATS):
        raise typer.BadParameter(
            f"{tool_format!r}: use 'auto', 'text' or one of {', '.join(TOOL_FORMATS)}", param_hint="--tool-format"
        )
    with user_errors(ConfigError, ValueError, FileNotFoundError):
        cfg = load_config(SFTCommandConfig, config, list(ctx.args)).trainer()
        conversations = load_conversations(data)
        model_dir = resolve_model(model)
    if tool_format == "auto":  # as a run settles inference.tool_format: one action language for both
        tool_format = template_tool_format(chat_templates(model_dir))
    typer.echo(
        f"[sft] {len(conversations)} conversations from {data}; model {model_dir}; tool format {tool_format}; "
        f"{cfg.processes} rank(s), {cfg.parallelism}"
    )
    with user_errors(ValueError):
        path = sft(model_dir, conversations, str(out), cfg, log=typer.echo, tool_format=tool_format)
    typer.echo(f"[sft] weights written to {path}")


def eval_command(
    ctx: typer.Context,
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML file with a RunConfig; recipes in configs/.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print Prefect's own log lines.")] = False,
) -> None:
    """Evaluate a run's newest weights (pass@1, pass@k) on its held-out tasks."""
    quiet_prefect_console(verbose)
    from flows.config import RunConfig

    with user_errors(ConfigError):
        cfg = load_config(RunConfig, config, list(ctx.args))
    from flows.evaluate import evaluate
    from flows.prefect_api import prefect_api

    with prefect_api():
        asyncio.run(evaluate(cfg))


def register(app: typer.Typer) -> None:
    app.command("sft", context_settings=_EXTRA, cls=keys_in_help("engines.trainer.config:SFTCommandConfig"))(
        sft_command
    )
    app.command("eval", context_settings=_EXTRA, cls=KeysInHelp)(eval_command)
