"""The `tandem` command line. One typer app; each subcommand is a thin shell over a
library function, and every failure a user can cause ends as one line on stderr
(`error: ...`) with exit status 1, never a traceback.

    tandem query "SELECT step, avg(reward) FROM rollouts GROUP BY step" --run tiny

Owns argument parsing and output formatting only. Subcommands that belong to other
parts of the project (`tandem run`, `tandem tasks build`, ...) live in their own
modules and are registered at the bottom of this file with `app.command()` or
`app.add_typer()`.
"""

from __future__ import annotations

import csv
import enum
import json
import logging
import sys
from datetime import date, datetime, time
from decimal import Decimal
from typing import Annotated, Any

import duckdb
import pyarrow as pa
import typer

from flows.cli_shell import user_errors
from storage.errors import StorageError
from storage.fs import open_store
from storage.query import connect

app = typer.Typer(
    name="tandem",
    help="Asynchronous RL post-training of MoE models on software-engineering tasks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


class OutputFormat(enum.StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tandem-rl {version('tandem-rl')}")
        except PackageNotFoundError:  # run from a clone that was never installed
            typer.echo("tandem-rl (not installed: pip install -e . to record a version)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the installed version and exit.")
    ] = False,
) -> None:
    """Asynchronous RL post-training of MoE models on software-engineering tasks."""


@app.command("query")
def query_command(
    sql: Annotated[
        str,
        typer.Argument(
            help="SQL over the views rollouts, steps, tasks, checkpoints, runs, rescores, advantages, evaluations "
            "and experiments (the lake's, with or without --run)."
        ),
    ],
    run: Annotated[str | None, typer.Option("--run", help="Only this run (default: every run under the root).")] = None,
    root: Annotated[
        str,
        typer.Option("--root", envvar="TANDEM_ROOT", help="Lake root: a directory or s3://bucket/prefix."),
    ] = "runs",
    output: Annotated[
        OutputFormat, typer.Option("--format", help="table for people, csv or json for programs.")
    ] = OutputFormat.table,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="Rows shown by --format table.")] = 100,
) -> None:
    """Run SQL over the trajectory lake and print the result."""
    # Library warnings (files left out of views) are reported by the command itself.
    logging.basicConfig(level=logging.ERROR)
    with user_errors(StorageError, ValueError, duckdb.Error, one_line=True):
        lake = connect(open_store(root), run)
        for url, reason in lake.skipped.items():
            _say("warning", f"left out {url}: {reason}")
        relation = lake.sql(sql)
        result = relation.to_arrow_table() if relation is not None else None
    if result is None:
        return
    if output is OutputFormat.table:
        typer.echo(lake.con.from_arrow(result).preview(limit=max_rows).rstrip())
    elif output is OutputFormat.csv:
        _write_csv(result)
    else:
        typer.echo(json.dumps(result.to_pylist(), default=_json_value, ensure_ascii=False))


def _write_csv(table: pa.Table) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow([_csv_value(row[name]) for name in table.column_names])


def _csv_value(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=_json_value, ensure_ascii=False)
    return _json_value(value) if isinstance(value, (bytes, datetime, date, time, Decimal)) else value


def _json_value(value: Any) -> Any:
    """JSON for the types DuckDB returns that json cannot write."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()  # routed experts and other blobs
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _say(level: str, message: str) -> None:
    typer.echo(f"{level}: {' '.join(message.split())}", err=True)


def main() -> None:
    """Entry point of the `tandem` console command. It installs no logging handler of its
    own: a handler on the root logger makes Prefect leave the root to it, and every
    Prefect INFO line would then be printed through it (tasks/progress.py decides what
    Prefect shows)."""
    app()


# Subcommands from other modules.
from flows import lake_cli, replay_cli, run_cli, tasks_cli, train_cli  # noqa: E402

run_cli.register(app)
train_cli.register(app)
app.add_typer(tasks_cli.app, name="tasks")
app.add_typer(lake_cli.app, name="lake")
app.add_typer(replay_cli.app, name="replay")

if __name__ == "__main__":
    main()
