"""Prefect task that makes the run's task corpus available (built once, reused)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import task

from engines.env.sandbox.deps import ensure_task_deps
from engines.env.task_sources.corpus import TASKS_FILE, corpus_id, load_corpus, save_corpus
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.task_sources.selection import Hint, select_tasks, with_hint
from storage.fs import Store, open_store
from storage.parquet_io import read_table
from storage.tables import write_tasks
from tasks.progress import say


@dataclass(frozen=True)
class CorpusDraw:
    """What a run takes from a built corpus (tasks.* and eval.tasks of its configuration)."""

    train: int
    heldout: int
    seed: int
    hint: Hint
    eval_tasks: int


@task(name="prepare-tasks", retries=1)
def prepare_micro_corpus(store: Store, run: str, corpus_dir: str, train: int, heldout: int, seed: int) -> str:
    """Generate (or reuse) the micro corpus in `corpus_dir`; copy its table into the run."""
    generate_micro_corpus(corpus_dir, train, heldout, seed)
    publish_corpus_table(store, run, corpus_dir)
    return corpus_dir


def generate_micro_corpus(corpus_dir: str, train: int, heldout: int, seed: int) -> None:
    """The micro corpus in `corpus_dir`, generated unless there (the same for the same seed on every machine)."""
    path = Path(corpus_dir)
    if not (path / TASKS_FILE).is_file():
        tasks = generate_micro_tasks(train, seed) + generate_micro_tasks(heldout, seed + 1, split="heldout")
        save_corpus(tasks, path)
        say(f"[tasks] generated {train} train + {heldout} held-out micro tasks in {path}")


@task(name="use-corpus")
def use_corpus(store: Store, run: str, corpus_dir: str, out_dir: str, draw: CorpusDraw) -> str:
    """The run's share of a built corpus (`draw_corpus`) in `out_dir`; its table copied into the run."""
    draw_corpus(corpus_dir, out_dir, draw)
    publish_corpus_table(store, run, out_dir)
    return out_dir


def draw_corpus(corpus_dir: str, out_dir: str, draw: CorpusDraw) -> str:
    """The run's share of a corpus built by `tandem tasks build` (engines/env/task_sources/selection.py:
    at most `draw.train` / `draw.heldout` tasks drawn by seed, statements with the hint),
    saved in `out_dir` unless already there: the same draw on every start and every
    rollout host, so a resumed run sees the same tasks."""
    tasks = load_corpus(corpus_dir)
    chosen = [with_hint(t, draw.hint) for t in select_tasks(tasks, draw.train, draw.heldout, draw.seed)]
    heldout = sum(t.split == "heldout" for t in chosen)
    if draw.eval_tasks > heldout:
        raise ValueError(
            f"eval.tasks ({draw.eval_tasks}) exceeds the {heldout} held-out tasks the run takes from corpus "
            f"{corpus_dir}: lower eval.tasks, or build a corpus with more held-out tasks"
        )
    ensure_task_deps(chosen)  # projects' own dependencies, when the corpus was built elsewhere
    if not (Path(out_dir) / TASKS_FILE).is_file() or corpus_id(load_corpus(out_dir)) != corpus_id(chosen):
        save_corpus(chosen, out_dir)
    say(
        f"[tasks] corpus {corpus_dir}: {len(chosen) - heldout} train, {heldout} held-out tasks of "
        f"{len(tasks)} (hint: {draw.hint})"
    )
    return out_dir


def publish_corpus_table(store: Store, run: str, corpus_dir: str) -> None:
    file = Path(corpus_dir) / TASKS_FILE
    table = read_table(open_store(str(file.parent)), str(file))
    write_tasks(store, run, table)
