"""`tandem run`: the main job; `tandem prefect-setup`: what deployments need.

    tandem run                                  # tiny MoE on micro tasks, defaults
    tandem run --config configs/tiny.toml --rl.steps 10 --rl.async_level 0
    tandem run --help                           # every configuration key, its default and meaning

Without PREFECT_API_URL a local Prefect server is started for the run (its UI
address is printed); with it, the run reports to that server. The terminal shows
one line per step; Prefect's own log lines go to the UI, and to the terminal with
--verbose (tasks/progress.py).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from flows.cli_shell import user_errors
from flows.config_loader import ConfigError, load_config
from tasks.progress import quiet_prefect_console

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def keys_in_help(model_path: str) -> type[TyperCommand]:
    """A command class whose --help ends with every key of the model at `model_path`
    ("module:Class"). The list is built only when help is shown: importing the run's
    configuration loads torch and transformers (about 8 s)."""

    class KeysInHelp(TyperCommand):
        @property
        def epilog(self) -> str:  # type: ignore[override]
            import importlib

            from rich.markup import escape

            from flows.config_help import format_keys

            module, _, name = model_path.partition(":")
            model = getattr(importlib.import_module(module), name)
            return (
                "Configuration keys: set them in the --config TOML file (sections as tables) or as "
                "--section.key VALUE, which wins over the file.\n\n" + escape(format_keys(model))
            )

        @epilog.setter
        def epilog(self, value: str | None) -> None:
            pass  # click sets it in __init__; the property above replaces it

    return KeysInHelp


KeysInHelp = keys_in_help("flows.config:RunConfig")


def run_command(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML file with a RunConfig (tables: rl, trainer, ...); recipes in configs/."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print Prefect's own log lines (task runs, states).")
    ] = False,
) -> None:
    """Run asynchronous RL end to end; extra `--section.key value` pairs override the config."""
    quiet_prefect_console(verbose)  # before Prefect is imported: it reads logging settings once
    from flows.config import RunConfig  # torch and transformers load only for this command

    with user_errors(ConfigError, FileNotFoundError):
        cfg = load_config(RunConfig, config, list(ctx.args))
    from engines.inference.launch import UnsupportedOption, check_machine

    # Options this machine's vLLM build cannot run are refused before anything starts.
    with user_errors(UnsupportedOption):
        check_machine(cfg.inference)
    from flows.prefect_api import prefect_api
    from flows.resume import ConfigChangedError, check_resume
    from flows.rl import rl
    from storage.errors import StorageError
    from storage.fs import open_store

    # Refused here as one message, before a Prefect server starts.
    with user_errors(ConfigChangedError, StorageError):
        check_resume(open_store(cfg.storage), cfg.run, cfg, cfg.allow_config_change)
    typer.echo(f"[tandem] run {cfg.run} under {cfg.storage.root}")
    # TANDEM_PREFECT_HOME: where the embedded server keeps its database (tests use their own).
    with prefect_api(os.environ.get("TANDEM_PREFECT_HOME")):
        summary = asyncio.run(rl(cfg))
    for line in final_lines(cfg.run, summary):
        typer.echo(line)


def final_lines(run: str, summary: dict[str, Any]) -> list[str]:
    """The run's closing lines: a corpus run's held-out projects and tasks apart first
    (flows/comparison.py), then the headline, so the terminal's last line carries the
    gain, its paired McNemar p and the verdict."""
    from flows.comparison import format_p, is_p_value

    lines = [
        f"[tandem]   {key}: {format_p(value) if is_p_value(key) else value}"
        for key, value in summary.items()
        if key.startswith(("pass@1 on ", "p-value on "))
    ]
    head = (
        f"[tandem] run {run} finished in {summary['wall minutes']} min: pass@1 "
        f"{summary['pass@1 before RL (warm start)']:.3f} -> {summary['pass@1 after RL']:.3f} "
        f"({summary['pass@1 gain (points)']:+.1f} points)"
    )
    p = summary.get("p-value (exact McNemar, paired)")
    verdict = f"; paired McNemar p {format_p(p)}: {summary['verdict']}" if p is not None else ""
    return [*lines, head + verdict]


def prefect_setup_command() -> None:
    """Create the work pools that prefect.yaml's deployments use (each run creates its own
    concurrency limits when it starts)."""
    from flows.prefect_setup import LANE_POOLS, WORK_POOL, setup

    setup()
    typer.echo(f"work pools {[WORK_POOL, *LANE_POOLS]} are ready")


def register(app: typer.Typer) -> None:
    app.command("run", context_settings=_EXTRA, cls=KeysInHelp)(run_command)
    app.command("prefect-setup")(prefect_setup_command)
