"""`tandem lake ...`: maintenance of a lake's files.

    tandem lake migrate --root runs              # every run
    tandem lake migrate --root s3://b/lake --run exp1

A thin shell over storage.migrate; user-caused failures end as one `error: ...` line.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli_shell import command_group, user_errors
from storage.errors import StorageError
from storage.fs import open_store
from storage.migrate import migrate

app = command_group("lake", "Maintain a lake's files.")


@app.command("migrate")
def migrate_command(
    root: Annotated[
        str, typer.Option("--root", envvar="TANDEM_ROOT", help="Lake root: a directory or s3://bucket/prefix.")
    ] = "runs",
    run: Annotated[str | None, typer.Option("--run", help="Only this run (default: every run under the root).")] = None,
) -> None:
    """Rewrite files of older schema versions so pandas, pyarrow and polars open every table with their defaults."""
    with user_errors(StorageError, ValueError):
        report = migrate(open_store(root), run)
    for url, reason in report.failed.items():
        typer.echo(f"warning: left {url} as it was: {reason}", err=True)
    typer.echo(
        f"rewrote {len(report.rewritten)} files, {report.current} already current, {len(report.failed)} unreadable"
    )
    if report.failed:
        raise typer.Exit(1)
