"""EnvSession: the tools of one episode, the diff it takes, and isolation between sessions."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from engines.env.grader import grade
from engines.env.session import EnvSession
from engines.env.task_sources.edit_forms import oracle_action
from engines.protocol import render_action


def test_view_edit_replace_and_errors_never_raise(micro_tasks, env_config):
    task = micro_tasks[0]
    with EnvSession.open(task, env_config) as s:
        assert s.prompt() == task.problem_statement
        assert s.step("view m.py 1 2").observation.startswith("1 def ")
        assert "unknown tool" in s.step("frobnicate").observation
        assert "outside the repository" in s.step("view ../../etc/passwd").observation
        assert "no file" in s.step("view nope.py").observation
        assert "has" in s.step("edit m.py 999\nx = 1").observation
        obs = s.step("replace m.py\ndef \n=====\ndef ").observation
        assert "occurs" in obs  # ambiguous old text
        assert s.patch() == ""
        first = s.step("view m.py 1 1").observation.split(" ", 1)[1]
        assert s.step(f"replace m.py\n{first}\n=====\n{first}  # touched").observation == "replaced in m.py"
        assert "# touched" in s.patch() and s.patch().startswith("diff --git a/m.py b/m.py")
        result = s.step("submit")
        assert result.done and s.step("view m.py").done


def test_oracle_episode_in_a_session_yields_a_resolving_patch(micro_tasks, env_config):
    task = micro_tasks[1]
    with EnvSession.open(task, env_config) as s:
        obs = s.step(render_action(oracle_action(task))).observation
        assert obs.startswith("edited m.py")
        assert s.step("submit").done
        patch = s.patch()
    assert grade(task, patch, env_config).resolved


@pytest.mark.sandbox
def test_bash_and_test_tools_run_in_the_sandbox(micro_tasks, env_config):
    task = micro_tasks[2]
    with EnvSession.open(task, env_config) as s:
        obs = s.step("bash\npwd; ls").observation
        assert "/repo" in obs and "m.py" in obs and "(exit 0)" in obs
        before = s.step("test").observation  # every visible test: FAIL_TO_PASS and PASS_TO_PASS
        assert before.startswith(f"{len(task.PASS_TO_PASS)} passed, {len(task.FAIL_TO_PASS)} failed")
        s.step(render_action(oracle_action(task)))
        after = s.step("test").observation
        assert after.startswith(f"{len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS)} passed, 0 failed")
        # the diff is taken by the environment: what bash wrote counts, what the model claims does not
        s.step("bash\necho 'extra = 1' >> m.py")
        assert "+extra = 1" in s.patch()


def test_sessions_on_threads_do_not_interfere(micro_tasks, env_config):
    def episode(task):
        with EnvSession.open(task, env_config) as s:
            s.step(render_action(oracle_action(task)))
            return s.patch()

    tasks = micro_tasks[:8]
    with ThreadPoolExecutor(4) as pool:
        patches = list(pool.map(episode, tasks))
    for task, patch in zip(tasks, patches):
        assert patch == task.patch


@pytest.mark.parametrize("form", ["line_change", "function_change", "short_replace"])
def test_a_short_edit_form_fixes_the_task_in_a_session(micro_tasks, env_config, form):
    """The oracle fix written in each short form: applied by the session, echoed, and
    its diff resolves the task under the real grader."""
    task = micro_tasks[3]
    with EnvSession.open(task, env_config) as s:
        obs = s.step(render_action(oracle_action(task, form))).observation
        meta = task.meta()
        expected = (
            "replaced in m.py" if form == "short_replace" else f"edited m.py\n{meta['line']} {meta['fixed_line']}"
        )
        assert obs == expected
        patch = s.patch()
    assert patch == task.patch
    assert grade(task, patch, env_config).resolved


def test_a_refused_change_is_an_observation_and_no_attempt(micro_tasks, env_config, tmp_path):
    """Under edit feedback, a change whose OLD is not in its scope changes nothing and
    costs no attempt; a tested change that fails is rolled back."""
    from engines.env.task_sources.micro import named_function
    from engines.env.types import GradeResult

    task = micro_tasks[4]
    config = env_config.model_copy(update={"edit_attempts": 2})
    calls = []

    def failing_tester(task, tree):
        calls.append(tree.read_bytes("m.py").decode())
        return GradeResult(False, 0.0, 0, 1, 0, 0, {task.FAIL_TO_PASS[0]: "FAILED"})

    with EnvSession.open(task, config, tester=failing_tester) as s:
        name = named_function(task)
        refused = s.step(f"change m.py {name}\nnot a token here\nx")
        assert refused.observation == f"error: OLD occurs 0 times in function {name} of m.py; copy text from it"
        assert s.attempts == 0 and not calls and s.patch() == ""
        tried = s.step(render_action(oracle_action(task, "function_change")))
        assert s.attempts == 1 and tried.observation.endswith("reverted (attempt 1 of 2)")
        assert calls and calls[0] != task.meta()["files"]["m.py"]  # the tests saw the changed file
        assert s.patch() == ""  # rolled back


def test_view_of_a_function_shows_its_numbered_lines_only(micro_tasks, env_config):
    from engines.env.task_sources.micro import named_function

    task = micro_tasks[0]
    name = named_function(task)
    lines = task.meta()["files"]["m.py"].rstrip("\n").split("\n")
    with EnvSession.open(task, env_config) as s:
        shown = s.step(f"view m.py {name}").observation.split("\n")
        assert shown[0].split(" ", 1)[1] == f"def {name}(a, b):"
        for row in shown:
            number, text = row.split(" ", 1)
            assert lines[int(number) - 1] == text
        assert not any(row.split(" ", 1)[1].startswith("def ") for row in shown[1:])  # one function
        assert "no function named 'nope'" in s.step("view m.py nope").observation
