"""The before/after summary rows: greedy pass@1 is never overwritten by pass@k, and
the paired test and verdict come from the solved task ids."""

from __future__ import annotations

from engines.rollout.evaluate import EvalResult
from flows.comparison import heldout_comparison


def _eval(greedy: float, sampled: float, solved: list[str], k: int = 1) -> dict:
    return EvalResult(
        version=0,
        tasks=100,
        pass_at_1=greedy,
        pass_at_k=sampled,
        pass_at_1_sampled=sampled,
        k=k,
        infra_failures=0,
        solved=tuple(solved),
    ).as_dict()


def test_one_sample_keeps_the_greedy_pass_at_1():
    result = _eval(0.10, 0.20, ["a"])
    assert result["pass@1"] == 0.10 and result["pass@1_sampled"] == 0.20
    assert _eval(0.10, 0.30, ["a"], k=2)["pass@2"] == 0.30


def test_comparison_pairs_the_solved_tasks():
    before = _eval(0.02, 0.05, ["a", "b"])
    after = _eval(0.30, 0.31, ["b", *(f"t{i}" for i in range(29))])
    rows = heldout_comparison(before, after, k=1)
    assert rows["pass@1 gain (points)"] == 28.0
    assert rows["tasks newly solved / lost"] == "29 / 1"
    assert rows["p-value (exact McNemar, paired)"] < 1e-6
    assert "significant at p < 0.01" in rows["verdict"]
    assert "pass@1_sampled before / after" in rows and "pass@1 before / after" not in rows


def test_each_held_out_kind_is_compared_on_its_own_tasks():
    import json
    from dataclasses import replace

    from engines.env.task_sources.micro import generate_micro_tasks
    from flows.comparison import group_rows, heldout_groups

    base = replace(generate_micro_tasks(1, seed=3)[0], env_name="swe", split="heldout")
    tasks = [
        replace(base, instance_id=f"{kind}{i}", metadata=json.dumps({"heldout": kind}))
        for kind in ("project", "task")
        for i in range(10)
    ]
    groups = heldout_groups(tasks)
    assert groups["held-out projects"] == [f"project{i}" for i in range(10)]
    before = _eval(0.1, 0.1, ["project0", "task0"])
    after = _eval(0.6, 0.6, [*(f"project{i}" for i in range(10)), "task0"])
    rows = group_rows(before, after, groups)
    assert rows["pass@1 on held-out projects before / after (10 tasks)"] == "0.100 / 1.000"
    assert rows["pass@1 on held-out tasks of training projects before / after (10 tasks)"] == "0.100 / 0.100"
    assert rows["p-value on held-out projects (exact McNemar, paired)"] < 0.01
    assert rows["p-value on held-out tasks of training projects (exact McNemar, paired)"] == 1.0
    assert group_rows(before, after, heldout_groups([replace(t, env_name="micro") for t in tasks])) == {}
