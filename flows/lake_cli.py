"""`tandem lake ...`: maintenance of a lake's files.

    tandem lake migrate --root runs              # every run
    tandem lake migrate --root s3://b/lake --run exp1

A thin shell over storage.migrate; user-caused failures end as one `error: ...` line.
"""

from __future__ import annotations

from typing import Annotated

import typer

from storage.errors import StorageError
from storage.fs import open_store
from storage.migrate import migrate

app = typer.Typer(
    name="lake",
    help="Maintain a lake's files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    """Maintain a lake's files."""


@app.command("migrate")
def migrate_command(
    root: Annotated[
        str, typer.Option("--root", envvar="TANDEM_ROOT", help="Lake root: a directory or s3://bucket/prefix.")
    ] = "runs",
    run: Annotated[str | None, typer.Option("--run", help="Only this run (default: every run under the root).")] = None,
) -> None:
    """Rewrite files of older schema versions so pandas, pyarrow and polars open every table with their defaults."""
    try:
        report = migrate(open_store(root), run)
    except (StorageError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for url, reason in report.failed.items():
        typer.echo(f"warning: left {url} as it was: {reason}", err=True)
    typer.echo(
        f"rewrote {len(report.rewritten)} files, {report.current} already current, {len(report.failed)} unreadable"
    )
    if report.failed:
        raise typer.Exit(1)
