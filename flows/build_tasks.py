"""The `build-tasks` flow: a validated task corpus from real projects' sdists,
one Prefect task per project, each writing its snapshot and manifest into the same
corpus directory (resumable: a rerun reuses finished projects, engines/env/task_sources/builder.py),
then the corpus assembled from the manifests, with a table of counts per project as
an artifact."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from engines.env.task_sources.builder import BuildConfig, assemble_corpus
from tasks.build import build_project
from tasks.progress import say


@flow(name="build-tasks", log_prints=True)
def build_tasks(out_dir: str = "corpus", config: BuildConfig = BuildConfig()) -> dict[str, int]:
    reports = [build_project(config, p, out_dir) for p in config.projects]
    assemble_corpus(config, out_dir, log=say)
    rows = [
        {k: r[k] for k in ("name", "version", "tests_stable", "mutants_tried", "kept", "heldout", "origin", "skipped")}
        for r in reports
    ]
    create_table_artifact(key="corpus-build", table=rows, description=f"Tasks per project in {out_dir}")
    for r in reports:
        if r["skipped"]:
            say(f"[tasks] {r['name']} {r['version']}: skipped ({r['skipped']})")
        else:
            held = "all held out" if r["heldout_project"] else f"{r['heldout']} held out"
            say(
                f"[tasks] {r['name']} {r['version']}: {r['kept']} tasks ({held}) "
                f"from {r['mutants_tried']} mutants, {r['tests_stable']} stable tests ({r['origin']})"
            )
    return {r["name"]: r["kept"] for r in reports}
