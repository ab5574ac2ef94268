"""Progress lines: one per step on the terminal, every one also in the run's Prefect
log (the UI). Prefect's own INFO lines (task runs created, states) stay out of the
terminal unless asked for.

    quiet_prefect_console(verbose=False)   # once, before Prefect is imported
    say("[rollout] step 3/50 reward=0.039")

How: Prefect's console handler is set to WARNING through its documented environment
override (PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL), which child processes (the trainer
lane) inherit; the API handler keeps every level, so the UI still has everything.
`say` logs to the run logger and, while the console hides INFO, writes the line to
stdout itself. With the console at INFO (verbose) the logger prints it, once.
"""

from __future__ import annotations

import logging
import os
import sys

CONSOLE_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"


def quiet_prefect_console(verbose: bool) -> None:
    """Hide Prefect's INFO lines and weight-loading progress bars from the terminal
    (a level the user set is kept)."""
    if verbose:
        os.environ[CONSOLE_LEVEL] = "INFO"
    else:
        os.environ.setdefault(CONSOLE_LEVEL, "WARNING")
        # transformers' and huggingface_hub's tqdm bars (loading and writing weights).
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def console_shows_info() -> bool:
    level = os.environ.get(CONSOLE_LEVEL, "0").strip().upper()
    number = int(level) if level.isdigit() else logging.getLevelName(level)
    return not isinstance(number, int) or number <= logging.INFO


def say(line: str) -> None:
    """Show `line` on the terminal once, and record it in the current run's log."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        logger = get_run_logger()
    except MissingContextError:  # outside a flow or task run: the terminal only
        logger = None
    if logger is not None:
        logger.info(line)
    if logger is None or not console_shows_info():
        # sys.stdout.write, not print: a flow with log_prints=True would turn print into a log call.
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
