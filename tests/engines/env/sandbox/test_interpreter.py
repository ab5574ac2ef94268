"""The sandbox's interpreter holds pytest alone: an episode can neither import nor read
the orchestrator's packages, and grading still works on real and micro tasks."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.sandbox.interpreter import SANDBOX_PYTHON_ENV, python_layout
from engines.env.session import EnvSession
from engines.env.task_sources.corpus import load_corpus

pytestmark = [pytest.mark.sandbox]


def _probe(cachetools_dir: Path) -> str:
    base_site = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
    return "bash\n" + "; ".join(
        [
            'python -c "import cachetools" 2>&1 | tail -n 1',
            "python -c \"import pytest; print('pytest', pytest.__version__)\"",
            f"test -e {cachetools_dir} && echo main-env-copy-readable || echo no-main-env-copy",
            f"test -e {sys.prefix} && echo main-env-readable || echo no-main-env",
            f"echo base-site-entries $(ls -A {base_site} 2>/dev/null | wc -l)",
            "python -c \"import sys; print('paths', *sys.path)\"",
        ]
    )


def test_an_episode_cannot_import_or_read_the_orchestrators_packages(real_corpus, micro_tasks, env_config):
    """cachetools (a default project of the builder) is installed in the main environment;
    no task here needs it. On a real-project task and a micro task, `bash` finds no copy of
    it, pytest still runs, and gold still resolves while the empty patch does not."""
    import cachetools

    assert os.environ.get(SANDBOX_PYTHON_ENV), "scripts/setup.sh exports the sandbox interpreter"
    assert env_config.python == os.environ[SANDBOX_PYTHON_ENV] != sys.executable
    tasks = [load_corpus(real_corpus)[0], micro_tasks[0]]
    for task in tasks:
        with EnvSession.open(task, env_config) as session:
            seen = session.step(_probe(Path(cachetools.__file__).parent)).observation
        assert "ModuleNotFoundError: No module named 'cachetools'" in seen, seen
        assert f"pytest {pytest.__version__}" in seen, seen
        assert "no-main-env-copy" in seen and "no-main-env\n" in seen + "\n", seen
        assert "base-site-entries 0" in seen, seen
        assert sys.prefix not in seen.split("paths", 1)[1], seen
    with GradingPool(env_config) as pool:
        for task in tasks:
            assert pool.grade_one(task, task.patch).resolved, task.instance_id
            assert not pool.grade_one(task, "").resolved, task.instance_id


def test_the_layout_hides_package_folders_the_interpreter_does_not_import():
    layout = python_layout(os.environ.get(SANDBOX_PYTHON_ENV, sys.executable))
    assert any(p.startswith("pytest==") for p in layout.packages)
    assert not any(p.lower().startswith(("cachetools==", "torch==", "prefect==")) for p in layout.packages)
    # A venv never imports its base interpreter's site-packages: it is hidden, not bound.
    base_site = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
    assert base_site in layout.hidden or not os.path.isdir(base_site)


def test_a_missing_interpreter_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"env.python=.*not an executable interpreter.*scripts/setup.sh"):
        EnvConfig(python=str(tmp_path / "no-python"))
