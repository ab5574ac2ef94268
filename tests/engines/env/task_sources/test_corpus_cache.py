"""A corpus build resumes project by project and copies projects built before from the
content cache (engines/env/task_sources/builder.py): fast tests with a stand-in for the sandboxed
build, and one real build of a tiny project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engines.env.config import EnvConfig
from engines.env.task_sources import builder
from engines.env.task_sources.builder import (
    BuildConfig,
    ProjectReport,
    assemble_corpus,
    build_corpus,
    corpus_cache_root,
    manifest_path,
    project_key,
)
from engines.env.task_sources.corpus import load_corpus
from engines.env.task_sources.sources import project_source
from engines.env.task_sources.splits import heldout_kind
from engines.env.types import Task


def _projects(root: Path, names: list[str]) -> list[str]:
    specs = []
    for name in names:
        folder = root / "src" / name
        folder.mkdir(parents=True)
        (folder / f"{name}.py").write_text("def one():\n    return 1\n")
        specs.append(str(folder))
    return specs


@pytest.fixture
def fake_build(monkeypatch, tmp_path):
    """builder.build_project replaced by a stand-in that writes a snapshot and 5 tasks,
    recording which projects it built; `fail_on` makes it crash on that project."""
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []
    state = {"fail_on": None}

    def build(pin, out, config, log=print, progress=None):
        if pin.name == state["fail_on"]:
            raise KeyboardInterrupt  # a stop midway: nothing of this project is recorded
        calls.append(pin.name)
        dest = out / "snapshots" / f"{pin.name}-{pin.version}"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"{pin.name}.py").write_text("def one():\n    return 1\n")
        tasks = [
            Task(
                instance_id=f"{pin.name}-{i}",
                repo=pin.name,
                version=pin.version,
                base_commit="0" * 16,
                problem_statement="Some tests fail.",
                patch="--- a\n+++ b\n",
                test_patch="",
                FAIL_TO_PASS=("test_x.py::test_x",),
                PASS_TO_PASS=(),
                test_cmd="python -m pytest",
                log_parser="parse_log_pytest",
                env_name="swe",
                split="train",
                snapshot_uri=str(dest),
                metadata=json.dumps({"file": f"{pin.name}.py", "function": "one"}),
            )
            for i in range(5)
        ]
        return tasks, ProjectReport(pin.name, pin.version, mutants_tried=9, kept=5)

    monkeypatch.setattr(builder, "build_project", build)
    return calls, state


def _config(specs: list[str], **kw) -> BuildConfig:
    return BuildConfig(projects=specs, heldout_projects=[], env=EnvConfig(workers=1), **kw)


def test_a_stopped_build_resumes_with_the_projects_it_finished(tmp_path, fake_build):
    calls, state = fake_build
    specs = _projects(tmp_path, ["alpha", "beta", "gamma"])
    out = tmp_path / "corpus"
    state["fail_on"] = "beta"
    with pytest.raises(KeyboardInterrupt):
        build_corpus(_config(specs, use_cache=False), out, log=lambda m: None)
    assert calls == ["alpha"] and {t.repo for t in load_corpus(out)} == {"alpha"}  # saved after alpha
    state["fail_on"] = None
    lines: list[str] = []
    tasks, reports = build_corpus(_config(specs, use_cache=False), out, log=lines.append)
    assert calls == ["alpha", "beta", "gamma"]  # alpha was not built again
    assert [r.origin for r in reports] == ["resumed", "built", "built"]
    assert any("[alpha] already built" in line for line in lines)
    assert any(line.startswith("[beta] (2/3)") and line.endswith("start") for line in lines)
    assert any(line.startswith("[gamma] done: kept 5/45") and "s/mutant" in line for line in lines)
    assert len(load_corpus(out)) == 15 and len(tasks) == 15
    # A setting that decides which tasks are kept changes the key: that project is built again.
    build_corpus(_config(specs, use_cache=False, max_f2p=5), out, log=lambda m: None)
    assert calls[3:] == ["alpha", "beta", "gamma"]


def test_a_new_out_folder_copies_the_cached_projects(tmp_path, fake_build):
    calls, _ = fake_build
    specs = _projects(tmp_path, ["alpha", "beta"])
    build_corpus(_config(specs), tmp_path / "first", log=lambda m: None)
    assert calls == ["alpha", "beta"]
    source = project_source(specs[0])
    key, inputs = project_key(source, _config(specs))
    assert (corpus_cache_root() / key / "project.json").is_file()
    assert inputs["project"]["sha256"] == source.sha256 and len(inputs["code"]) == 64
    lines: list[str] = []
    tasks, reports = build_corpus(_config(specs), tmp_path / "second", log=lines.append)
    assert calls == ["alpha", "beta"]  # nothing rebuilt
    assert [r.origin for r in reports] == ["cache", "cache"]
    assert sum("copied from the corpus cache" in line for line in lines) == 2
    copied = load_corpus(tmp_path / "second")
    assert len(copied) == 10
    assert all(Path(t.snapshot_uri).is_relative_to(tmp_path / "second") for t in copied)
    assert all((Path(t.snapshot_uri) / f"{t.repo}.py").is_file() for t in copied)
    assert manifest_path(tmp_path / "second", source).is_file()


def test_split_settings_resplit_without_rebuilding(tmp_path, fake_build):
    calls, _ = fake_build
    specs = _projects(tmp_path, ["alpha", "beta"])
    out = tmp_path / "corpus"
    build_corpus(_config(specs), out, log=lambda m: None)
    config = _config(specs).model_copy(update={"heldout_projects": ["beta"], "heldout_fraction": 0.0})
    tasks, reports = build_corpus(config, out, log=lambda m: None)
    assert calls == ["alpha", "beta"]
    assert {t.repo: t.split for t in tasks} == {"alpha": "train", "beta": "heldout"}
    assert {heldout_kind(t) for t in tasks if t.repo == "beta"} == {"project"}
    assert [r.heldout_project for r in reports] == [False, True]
    # The flow's assembly reads the same manifests.
    assert [t.instance_id for t in assemble_corpus(config, out, log=lambda m: None)] == [t.instance_id for t in tasks]


def test_key_covers_what_decides_tasks_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    (spec,) = _projects(tmp_path, ["alpha"])
    source = project_source(spec)
    base = project_key(source, _config([spec]))[0]
    same = [
        _config([spec], heldout_fraction=0.5),
        _config([spec], use_cache=False),
        BuildConfig(projects=[spec], env=EnvConfig(workers=3, scratch_dir=str(tmp_path))),
    ]
    assert all(project_key(source, c)[0] == base for c in same)
    other = [_config([spec], seed=1), _config([spec], tasks_per_project=3), _config([spec], skip_uncalled=False)]
    assert all(project_key(source, c)[0] != base for c in other)
    (Path(spec) / "alpha.py").write_text("def one():\n    return 2\n")  # new content: a new project hash
    assert project_key(project_source(spec), _config([spec]))[0] != base


TINY = {
    "tiny/__init__.py": "def area(w, h):\n    return w * h\n\n\ndef clamp(v, lo, hi):\n"
    "    if v < lo:\n        return lo\n    if v > hi:\n        return hi\n    return v\n\n\n"
    "def unused(x):\n    return x + 1\n",
    "tests/test_tiny.py": "from tiny import area, clamp\n\n\ndef test_area():\n    assert area(3, 4) == 12\n\n\n"
    "def test_clamp_low():\n    assert clamp(-5, 0, 10) == 0\n\n\ndef test_clamp_high():\n"
    "    assert clamp(50, 0, 10) == 10\n\n\ndef test_clamp_inside():\n    assert clamp(5, 0, 10) == 5\n",
}


@pytest.mark.slow
@pytest.mark.sandbox
def test_cli_builds_then_copies_from_the_cache_with_hint_metadata(tmp_path, monkeypatch):
    from flows.tasks_cli import app

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TANDEM_ENV_SCRATCH", str(tmp_path / "scratch"))
    project = tmp_path / "tiny-project"
    for rel, text in TINY.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    args = ["build", "-p", str(project), "--tasks-per-project", "3", "--max-mutants", "40", "--workers", "2"]
    first = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    assert "tiny-project] (1/1)" in first.output and "s/mutant" in first.output
    assert "mutants in functions the suite calls" in first.output
    tasks = load_corpus(tmp_path / "a")
    assert len(tasks) == 3
    for task in tasks:
        meta = task.meta()
        assert meta["file"] == "tiny/__init__.py" and meta["function"] in ("area", "clamp")  # never `unused`
        assert (
            meta["failing_output"].startswith("E ") and meta["failing_output"].splitlines()[0] in task.problem_statement
        )
    second = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert second.exit_code == 0, second.output
    assert "copied from the corpus cache" in second.output
    assert [t.instance_id for t in load_corpus(tmp_path / "b")] == [t.instance_id for t in tasks]
