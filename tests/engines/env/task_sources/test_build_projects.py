"""Building tasks from the user's own project folders: a project's declared
dependencies are installed into a folder of their own and its tests see them; a
project that cannot be built is named and skipped while the others' tasks are saved."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.sandbox.deps import SANDBOX_DEPS, declared_requirements
from engines.env.session import EnvSession
from engines.env.task_sources.corpus import load_corpus
from flows.tasks_cli import app

CALC = """\
from helperdep import double


def area(width, height):
    return width * height


def perimeter(width, height):
    return double(width + height)


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value
"""

CALC_TESTS = """\
from helperdep import double

from calc import area, clamp, perimeter


def test_area():
    assert area(3, 4) == 12


def test_perimeter():
    assert perimeter(3, 4) == double(7) == 14


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5
"""


def make_wheel(folder: Path) -> Path:
    """A pure-Python wheel of `helperdep`, so the dependency installs without any index."""
    files = {
        "helperdep/__init__.py": b"def double(x):\n    return 2 * x\n",
        "helperdep-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: helperdep\nVersion: 1.0\n",
        "helperdep-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
            for name, data in files.items()
        )
        + "helperdep-1.0.dist-info/RECORD,,\n"
    )
    path = folder / "helperdep-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in {**files, "helperdep-1.0.dist-info/RECORD": record.encode()}.items():
            z.writestr(name, data)
    return path


def make_projects(root: Path) -> tuple[Path, Path]:
    wheel = make_wheel(root)
    calc = root / "calc"
    (calc / "tests").mkdir(parents=True)
    (calc / "calc.py").write_text(CALC)
    (calc / "tests" / "test_calc.py").write_text(CALC_TESTS)
    (calc / "pyproject.toml").write_text(
        f'[project]\nname = "calc"\nversion = "0.1"\ndependencies = ["helperdep @ {wheel.as_uri()}"]\n'
        '[project.optional-dependencies]\ntest = ["pytest>=7"]\n'
    )
    broken = root / "broken"
    (broken / "tests").mkdir(parents=True)
    (broken / "broken.py").write_text("def one():\n    return 1\n")
    (broken / "tests" / "test_broken.py").write_text(
        "import module_nobody_installs\n\n\ndef test_one():\n    assert True\n"
    )
    return calc, broken


def test_requirements_come_from_pyproject_or_setup_cfg(tmp_path: Path) -> None:
    calc, broken = make_projects(tmp_path)
    assert declared_requirements(calc) == [f"helperdep @ {(tmp_path / 'helperdep-1.0-py3-none-any.whl').as_uri()}"]
    assert declared_requirements(broken) == []  # a bare folder declares nothing
    cfg = tmp_path / "cfgproj"
    cfg.mkdir()
    (cfg / "setup.cfg").write_text(
        "[options]\ninstall_requires =\n    attrs>=20\n    face==20.1.1\n"
        "[options.extras_require]\ntesting = hypothesis\ndocs = sphinx\n"
    )
    assert declared_requirements(cfg) == ["attrs>=20", "face==20.1.1", "hypothesis"]


@pytest.mark.slow
@pytest.mark.sandbox
def test_build_skips_a_broken_project_and_saves_the_others_with_their_dependencies(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TANDEM_ENV_SCRATCH", str(tmp_path / "scratch"))
    calc, broken = make_projects(tmp_path)
    out = tmp_path / "corpus"
    result = CliRunner().invoke(
        app,
        [
            "build",
            "--out",
            str(out),
            "-p",
            str(calc),
            "-p",
            str(broken),
            "--tasks-per-project",
            "2",
            "--max-mutants",
            "16",
            "--workers",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "skipped broken" in result.output and "no test passes reliably" in result.output
    tasks = load_corpus(out)
    assert len(tasks) == 2 and {t.repo for t in tasks} == {"calc"}
    deps = list((tmp_path / "cache" / "deps").iterdir())
    assert len(deps) == 1 and (deps[0] / "helperdep" / "__init__.py").is_file()  # installed once, keyed by hash
    for task in tasks:
        assert f"$TANDEM_DEPS/{deps[0].name}" in task.test_cmd
        assert json.loads(task.metadata)["requirements"][0].startswith("helperdep")
    # The tasks grade as built: the gold patch resolves, the empty patch does not.
    config = EnvConfig(workers=1, scratch_dir=str(tmp_path / "grade"))
    with GradingPool(config) as pool:
        gold = pool.grade_many([(t, t.patch) for t in tasks])
        empty = pool.grade_many([(t, "") for t in tasks])
    assert all(g.resolved for g in gold), gold
    assert not any(e.resolved or e.infra_failure for e in empty), empty
    # An episode sees its own project's dependency folder, and no other project's (a
    # dependency of one project can be another task's project).
    other = tmp_path / "cache" / "deps" / ("f" * 16)
    (other / "calc").mkdir(parents=True)
    with EnvSession.open(tasks[0], config) as session:
        seen = session.step(f"bash\nls {SANDBOX_DEPS}; ls {SANDBOX_DEPS}/{deps[0].name}").observation
    assert seen.split() == [deps[0].name, *sorted(p.name for p in deps[0].iterdir()), "(exit", "0)"], seen
