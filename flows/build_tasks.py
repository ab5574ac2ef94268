"""The `build-tasks` flow: a validated task corpus from real projects' sdists,
one Prefect task per project, merged into one corpus directory with a table of
counts per project as an artifact."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from engines.env.builder import BuildConfig
from engines.env.corpus import load_corpus, save_corpus
from engines.env.sources import project_source
from tasks.build import build_project
from tasks.progress import say


@flow(name="build-tasks", log_prints=True)
def build_tasks(out_dir: str = "corpus", config: BuildConfig = BuildConfig()) -> dict[str, int]:
    parts = Path(out_dir) / "parts"
    reports = [build_project(config, p, str(parts)) for p in config.projects]
    names = [project_source(p).name for p in config.projects]
    tasks = [t for r, name in zip(reports, names) if r["kept"] for t in load_corpus(parts / name)]
    save_corpus(tasks, out_dir)
    rows = [
        {k: r[k] for k in ("name", "version", "tests_stable", "mutants_tried", "kept", "heldout", "skipped")}
        for r in reports
    ]
    create_table_artifact(key="corpus-build", table=rows, description=f"Tasks per project in {out_dir}")
    for r in rows:
        if r["skipped"]:
            say(f"[tasks] {r['name']} {r['version']}: skipped ({r['skipped']})")
        else:
            say(
                f"[tasks] {r['name']} {r['version']}: {r['kept']} tasks ({r['heldout']} held out) "
                f"from {r['mutants_tried']} mutants, {r['tests_stable']} stable tests"
            )
    return {r["name"]: r["kept"] for r in rows}
