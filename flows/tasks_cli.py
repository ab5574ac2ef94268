"""`tandem tasks ...`: build and validate task corpora from the command line.

    tandem tasks build --out corpus/                     # default pinned projects
    tandem tasks build --out c/ -p toolz -p funcy --tasks-per-project 10
    tandem tasks build --out c/ -p ~/src/myproject -p glom==25.12.0:<sha256>   # own folders, any sdist
    tandem tasks import swe.jsonl --out c/ --repo pallets/flask=/src/flask      # SWE-bench records
    tandem tasks build --out c/ --no-default-projects --micro-train 2000 --micro-heldout 200
    tandem tasks build --out c/ --heldout-project toml --heldout-project parse   # whole projects held out

A thin shell over engines.env.task_sources.builder / micro / corpus: it prints a line as each
project starts and ends and a progress line every batch of mutants (on stderr), then
per-project counts (tests, stable tests, mutants tried, kept, held out, seconds per
mutant and per kept task, and whether the project was built, reused from --out or
copied from the content cache), and ends any user-caused failure as one `error: ...`
line with exit status 1. Run it again with the same --out after a stop: finished
projects are reused.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from engines.env.config import EnvConfig
from engines.env.errors import EnvError
from engines.env.task_sources.builder import DEFAULT_HELDOUT_PROJECTS, BuildConfig, build_corpus
from engines.env.task_sources.corpus import export_jsonl, load_corpus, save_corpus
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.task_sources.sdists import DEFAULT_PINS
from flows.cli_shell import command_group, user_errors

app = command_group("tasks", "Build and validate task corpora.")


@app.command("build")
def build(
    out: Annotated[Path, typer.Option(help="Corpus directory (tasks.parquet + snapshots/).")],
    project: Annotated[
        list[str] | None,
        typer.Option(
            "--project",
            "-p",
            help="A default pin name, 'name==version:sha256' or a project folder; repeatable. Default: all pinned projects.",
        ),
    ] = None,
    default_projects: Annotated[
        bool, typer.Option(help="Build the pinned projects when no --project is given.")
    ] = True,
    tasks_per_project: Annotated[int, typer.Option(help="Validated tasks wanted per project.")] = 45,
    max_mutants: Annotated[int, typer.Option(help="Most mutants tried per project.")] = 400,
    heldout_fraction: Annotated[
        float, typer.Option(help="Share of the training projects' tasks in the held-out split.")
    ] = 0.2,
    heldout_project: Annotated[
        list[str] | None,
        typer.Option(
            "--heldout-project",
            help="A project whose every task is held out; repeatable; 'none' for no held-out project. "
            f"Default: {', '.join(DEFAULT_HELDOUT_PROJECTS)}.",
        ),
    ] = None,
    micro_train: Annotated[int, typer.Option(help="Micro tasks to add to the train split.")] = 0,
    micro_heldout: Annotated[int, typer.Option(help="Micro tasks to add to the held-out split.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of mutant order and micro generation.")] = 0,
    workers: Annotated[int, typer.Option(help="Parallel sandboxed runs; 0 = bounded by cores and memory.")] = 0,
    jsonl: Annotated[Path | None, typer.Option(help="Also export the corpus as SWE-bench-style JSONL here.")] = None,
    cache: Annotated[
        bool,
        typer.Option(help="Copy projects already built with the same inputs from <cache>/corpora/ and cache new ones."),
    ] = True,
) -> None:
    """Build a corpus: real-project tasks from pinned sdists or project folders, plus optional micro tasks.
    A project that cannot be built is named and skipped; the others' tasks are saved."""
    start = time.monotonic()
    with user_errors(EnvError, ValueError, OSError):
        projects = project or ([p.name for p in DEFAULT_PINS] if default_projects else [])
        tasks, reports = [], []
        if projects:
            config = BuildConfig(
                projects=projects,
                tasks_per_project=tasks_per_project,
                max_mutants_per_project=max_mutants,
                heldout_fraction=heldout_fraction,
                heldout_projects=_heldout_projects(heldout_project),
                seed=seed,
                use_cache=cache,
                env=EnvConfig(workers=workers),
            )
            tasks, reports = build_corpus(config, out, log=lambda m: typer.echo(m, err=True))
        if micro_train:
            tasks += generate_micro_tasks(micro_train, seed)
        if micro_heldout:
            tasks += generate_micro_tasks(micro_heldout, seed + 1, split="heldout")
        if not tasks and any(r.skipped for r in reports):
            raise EnvError(
                "no project could be built: " + "; ".join(f"{r.name}: {r.skipped}" for r in reports if r.skipped)
            )
        if not tasks:
            raise EnvError("nothing to build: give --project, keep --default-projects, or ask for micro tasks")
        save_corpus(tasks, out)
        loaded = load_corpus(out)  # the corpus reads back: the check users would run next
        if jsonl:
            export_jsonl(loaded, jsonl)
    typer.echo(
        f"{'project':<14} {'version':<8} {'deps':>4} {'tests':>6} {'stable':>6} {'mutants':>7} {'kept':>5} "
        f"{'heldout':>7} {'seconds':>7} {'s/mutant':>8} {'s/task':>6}  origin"
    )
    for r in reports:
        if not r.skipped:
            held = "all" if r.heldout_project else str(r.heldout)
            typer.echo(
                f"{r.name:<14} {r.version:<8} {r.dependencies:>4} {r.tests_total:>6} {r.tests_stable:>6} "
                f"{r.mutants_tried:>7} {r.kept:>5} {held:>7} {r.seconds:>7.0f} {r.s_per_mutant:>8.2f} "
                f"{r.s_per_task:>6.1f}  {r.origin}"
            )
    for r in reports:
        if r.skipped:
            typer.echo(f"skipped {r.name} {r.version}: {r.skipped}")
    micro = [t for t in loaded if t.env_name == "micro"]
    if micro:
        typer.echo(
            f"{'micro':<14} {'-':<8} {'-':>4} {'-':>6} {'-':>6} {'-':>7} {len(micro):>5} "
            f"{sum(t.split == 'heldout' for t in micro):>7} {'-':>7}"
        )
    typer.echo(
        f"total {len(loaded)} tasks ({sum(t.split == 'heldout' for t in loaded)} held out) "
        f"in {time.monotonic() - start:.0f}s -> {out / 'tasks.parquet'}"
    )


@app.command("import")
def import_records_command(
    records: Annotated[
        Path, typer.Argument(help="SWE-bench-style JSONL: instance_id, repo, base_commit, patch, FAIL_TO_PASS, ...")
    ],
    out: Annotated[Path, typer.Option(help="Corpus directory (tasks.parquet + snapshots/).")],
    repo: Annotated[
        list[str] | None,
        typer.Option(
            "--repo",
            help="OWNER/NAME=SOURCE: a local git clone, a project folder, a default pin or 'name==version:sha256'; repeatable.",
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="Split of the imported tasks: train or heldout.")] = "train",
) -> None:
    """Import SWE-bench-style records as a corpus, materialising each repository at its base commit."""
    from engines.env.task_sources.swebench_import import import_records

    with user_errors(EnvError, ValueError, OSError):
        sources = dict(_source(item) for item in repo or [])
        tasks = import_records(records, out, sources, split)
        save_corpus(tasks, out)
        loaded = load_corpus(out)
    snapshots = len({t.snapshot_uri for t in loaded})
    typer.echo(
        f"imported {len(loaded)} tasks from {records} ({snapshots} repository snapshots) -> {out / 'tasks.parquet'}"
    )


def _heldout_projects(names: list[str] | None) -> list[str]:
    """--heldout-project values: none given keeps the default, 'none' means no project."""
    if not names:
        return list(DEFAULT_HELDOUT_PROJECTS)
    return [n for n in names if n.lower() != "none"]


def _source(item: str) -> tuple[str, str]:
    name, sep, source = item.partition("=")
    if not sep or "/" not in name or not source:
        raise EnvError(f"--repo {item!r}: write it as OWNER/NAME=SOURCE, e.g. --repo pallets/flask=/src/flask")
    return name, source


if __name__ == "__main__":
    sys.exit(app())
