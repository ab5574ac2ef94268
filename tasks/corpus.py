"""Prefect task that makes the run's task corpus available (built once, reused)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from engines.env.corpus import TASKS_FILE, load_corpus, save_corpus
from engines.env.deps import ensure_task_deps
from engines.env.micro import generate_micro_tasks
from storage.fs import Store, open_store
from storage.parquet_io import read_table
from storage.tables import write_tasks
from tasks.progress import say


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
def use_corpus(store: Store, run: str, corpus_dir: str) -> str:
    """A corpus built by `tandem tasks build`: check it loads, copy its table into the run."""
    tasks = load_corpus(corpus_dir)
    ensure_task_deps(tasks)  # projects' own dependencies, when the corpus was built elsewhere
    say(
        f"[tasks] corpus {corpus_dir}: {sum(t.split == 'train' for t in tasks)} train, "
        f"{sum(t.split == 'heldout' for t in tasks)} held-out tasks"
    )
    publish_corpus_table(store, run, corpus_dir)
    return corpus_dir


def publish_corpus_table(store: Store, run: str, corpus_dir: str) -> None:
    file = Path(corpus_dir) / TASKS_FILE
    table = read_table(open_store(str(file.parent)), str(file))
    write_tasks(store, run, table)
