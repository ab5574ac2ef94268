"""Our resolved decisions equal swebench's on real pytest logs of the tasks we build.

For each (task, patch) pair the test runs the task's tests in the sandbox exactly as
the grader does, frames the log the way SWE-bench's eval script does, then decides
twice: with engines.env.report and with the swebench package's own get_logs_eval /
get_eval_report (5.x). Patches cover resolving, failing, P2P-breaking and
import-breaking outcomes, on real-project and micro tasks.
"""

from __future__ import annotations

import random

import pytest

from engines.env.grader import targeted_command
from engines.env.patches import filter_patch
from engines.env.report import frame_log, report_from_log
from engines.env.sandbox.runner import make_runner
from engines.env.sandbox.warm_pytest import WarmPytest, pytest_args
from engines.env.task_sources.corpus import load_corpus
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.types import Task
from engines.env.workspace import Workspace, apply_to_files, base_files, unified_diff

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def _variants(task: Task, rng: random.Random) -> list[str]:
    """gold, empty, gold plus a break elsewhere, and (micro) a syntax error."""
    base = base_files(task)
    fixed = apply_to_files(base, task.patch, "gold")
    path = task.meta()["file"]
    lines = fixed[path].decode().splitlines(keepends=True)
    defs = [i for i, line in enumerate(lines) if line.lstrip().startswith("return ")]
    broken = list(lines)
    i = rng.choice(defs)
    broken[i] = broken[i].replace("return ", "return None and ", 1)
    variants = [task.patch, "", unified_diff(base, fixed | {path: "".join(broken).encode()})]
    if task.env_name == "micro":  # an import-breaking patch (cheap on micro tasks)
        variants.append(unified_diff(base, base | {path: base[path] + b"\ndef (:\n"}))
    return variants


def test_decisions_agree_with_swebench(real_corpus, env_config, tmp_path):
    from swebench.harness.grading import get_eval_report
    from swebench.types import TestSpec

    rng = random.Random(0)
    tasks = load_corpus(real_corpus) + generate_micro_tasks(6, seed=21)
    config = env_config.model_copy(
        update={
            "limits": env_config.limits.model_copy(update={"wall_timeout_s": 60, "cpu_seconds": 60, "memory_mb": 1024})
        }
    )
    runner = make_runner(config)
    decisions = []
    for task in tasks:
        ws = Workspace.for_task(task, tmp_path / "ws")
        spec = TestSpec(
            instance_id=task.instance_id,
            image="",
            eval_script_list=[],
            repo=task.repo,
            version=task.version,
            FAIL_TO_PASS=list(task.FAIL_TO_PASS),
            PASS_TO_PASS=list(task.PASS_TO_PASS),
            log_parser=task.log_parser,
            eval_type="pass_and_fail",
        )
        with WarmPytest(config, runner, ws.root) as warm:
            for k, patch in enumerate(_variants(task, rng)):
                ws.reset()
                assert ws.apply(filter_patch(patch).text) == ""
                runs = {
                    "cold": runner.run(targeted_command(task), ws.root),
                    "warm": warm.run(pytest_args(targeted_command(task))),
                }
                reports = {}
                for kind, run in runs.items():  # a fresh sandbox per run, and the warm one: same decisions
                    log = frame_log(run.output, run.exit_code)
                    log_path = tmp_path / f"{task.instance_id}-{k}-{kind}.log"
                    log_path.write_text(log)
                    ours = reports[kind] = report_from_log(log, task.log_parser, task.FAIL_TO_PASS, task.PASS_TO_PASS)
                    theirs = get_eval_report(
                        spec,
                        {"instance_id": task.instance_id, "model_patch": patch, "model_name_or_path": "test"},
                        str(log_path),
                        True,
                    )[task.instance_id]
                    assert ours.resolved == theirs["resolved"], (task.instance_id, k, kind, log[-2000:])
                    if theirs.get("tests_status"):
                        status = theirs["tests_status"]
                        assert ours.f2p_passed == len(status["FAIL_TO_PASS"]["success"])
                        assert ours.p2p_passed == len(status["PASS_TO_PASS"]["success"])
                assert reports["cold"].statuses == reports["warm"].statuses, (task.instance_id, k)
                decisions.append((k, reports["cold"].resolved))
        ws.destroy()
    # gold always resolves; empty and import-breaking patches never do; breaks elsewhere
    # mostly do not (a break outside the tests' reach can still resolve): both decisions occur
    assert all(resolved == (k == 0) for k, resolved in decisions if k != 2), decisions
    assert any(not resolved for k, resolved in decisions if k == 2), decisions
