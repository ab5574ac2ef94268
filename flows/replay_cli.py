"""`tandem replay ...`: new runs from a finished run's stored trajectories.

    tandem replay rescore --source_run exp1                       # re-grade exp1's patches
    tandem replay train --source_run exp1 --run exp1-lr --trainer.lr 1e-4 --steps 20

Both take a TOML file (`--config`) and `--key value` overrides like `tandem run`
(fields: flows/replay_config.py), run as Prefect flows (a local server is started
when PREFECT_API_URL is unset) and never write to the source run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from flows.cli_shell import command_group, user_errors
from flows.config_loader import ConfigError, load_config

app = command_group("replay", "New runs from a finished run's stored trajectories.")
_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}
_CONFIG = typer.Option("--config", help="TOML file with the replay's configuration.")


@app.command("rescore", context_settings=_EXTRA)
def rescore_command(ctx: typer.Context, config: Annotated[Path | None, _CONFIG] = None) -> None:
    """Re-grade a run's stored patches with the current grader; report agreement with the stored rewards."""
    from flows.replay import replay_rescore
    from flows.replay_config import RescoreConfig

    summary = _run(replay_rescore, _load(RescoreConfig, config, ctx.args))
    rate = summary["agreement"]
    typer.echo(
        f"[tandem] rescore {summary['run']}: {summary['agree']}/{summary['graded']} episodes of "
        f"{summary['source_run']} agree with the stored rewards"
        + (f" ({100 * rate:.1f}%)" if rate is not None else "")
        + (f"; {summary['not_regraded']} infrastructure failures not re-graded" if summary["not_regraded"] else "")
    )
    typer.echo(f'[tandem] disagreements: tandem query --run {summary["run"]} "SELECT * FROM rescores WHERE NOT agrees"')


@app.command("train", context_settings=_EXTRA)
def train_command(ctx: typer.Context, config: Annotated[Path | None, _CONFIG] = None) -> None:
    """Train a new run on a source run's stored episodes (another loss, advantages or learning rate)."""
    from flows.replay import replay_train
    from flows.replay_config import ReplayTrainConfig

    summary = _run(replay_train, _load(ReplayTrainConfig, config, ctx.args))
    typer.echo(
        f"[tandem] replay {summary['run']}: trained on {summary['steps']} steps of {summary['source_run']}, "
        f"published versions {summary['published']}"
    )


def _load(model: type[BaseModel], path: Path | None, args: list[str]) -> BaseModel:
    with user_errors(ConfigError, FileNotFoundError):
        return load_config(model, path, list(args))


def _run(flow: Any, config: BaseModel) -> dict[str, Any]:
    from flows.prefect_api import prefect_api
    from storage.errors import StorageError

    with prefect_api(), user_errors(StorageError, ValueError, FileNotFoundError, one_line=True):
        return flow(config)
