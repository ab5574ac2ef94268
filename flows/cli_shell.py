"""What every `tandem` command shares: the settings of a command group, and how a
failure the user caused ends (one `error: ...` line on stderr, exit status 1, never a
traceback)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer


def command_group(name: str, help: str) -> typer.Typer:
    """A `tandem NAME ...` group: its help when called bare, no shell-completion
    commands, Python's own tracebacks for bugs."""
    app = typer.Typer(name=name, help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    # A callback makes it a group even with a single command (`tandem lake migrate`).
    app.callback(help=help)(_group)
    return app


def _group() -> None:
    pass


@contextmanager
def user_errors(*kinds: type[Exception], one_line: bool = False) -> Iterator[None]:
    """End an exception of `kinds` raised inside as `error: <message>` and exit status 1.
    `one_line`: fold the message's line breaks (messages that list items keep them)."""
    try:
        yield
    except kinds as exc:
        message = " ".join(str(exc).split()) if one_line else str(exc)
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(1) from None
