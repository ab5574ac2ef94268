import ast
from collections import Counter

from engines.env.micro import MODULE, generate_micro_tasks, line_edit, oracle_action
from engines.env.micro_demos import oracle_messages
from engines.env.workspace import apply_to_files, base_files
from engines.protocol import Action, parse_action, render_messages


def test_generation_is_deterministic_and_ids_are_unique():
    a, b = generate_micro_tasks(30, seed=3), generate_micro_tasks(30, seed=3)
    assert a == b
    assert len({t.instance_id for t in a}) == 30
    assert generate_micro_tasks(5, seed=4)[0] != a[0]


def test_tasks_have_the_promised_shape():
    tasks = generate_micro_tasks(300, seed=11, split="heldout")
    kinds = Counter(t.meta()["bug"] for t in tasks)
    assert set(kinds) == {"arithmetic", "comparison", "constant", "swapped_operands", "removed_not", "removed_minus"}
    for task in tasks:
        files = base_files(task)
        module = files[MODULE].decode()
        functions = [n for n in ast.parse(module).body if isinstance(n, ast.FunctionDef)]
        assert 2 <= len(functions) <= 4 and 5 <= len(module.splitlines()) <= 16
        assert task.split == "heldout" and task.env_name == "micro" and task.FAIL_TO_PASS
        assert set(task.FAIL_TO_PASS).isdisjoint(task.PASS_TO_PASS)
        # the statement shows the numbered buggy line and the failing call, never the fix
        line = task.meta()["line"]
        assert f"\n{line} {module.splitlines()[line - 1]}" in task.problem_statement
        assert "expected" in task.problem_statement and "got" in task.problem_statement


def test_gold_patch_restores_a_module_that_passes_its_own_tests():
    for task in generate_micro_tasks(50, seed=5):
        fixed = apply_to_files(base_files(task), task.patch, what=task.instance_id)
        namespace: dict = {}
        exec(fixed[MODULE].decode(), namespace)
        exec(fixed["test_m.py"].decode().replace("from m import", "# from m import"), namespace)
        for test_id in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS):
            namespace[test_id.split("::")[1]]()  # raises AssertionError if the fix were wrong


def test_oracle_episode_follows_the_protocol_and_is_compact(tiny_model_dir):

    from engines.model.tokenizer import train_tokenizer

    tasks = generate_micro_tasks(200, seed=2)
    episodes = [oracle_messages(t) for t in tasks[:40]]
    for task, messages in zip(tasks, episodes):
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[0]["content"] == task.problem_statement
        action = parse_action(messages[1]["content"])
        assert isinstance(action, Action) and action.tool == "edit" and action.line == task.meta()["line"]
        by_content = oracle_action(task, "replace")
        buggy = task.meta()["files"][MODULE]
        assert buggy.count(by_content.old) == 1  # content-addressed: names exactly one place
        assert (
            buggy.replace(by_content.old, by_content.new).split("\n")[task.meta()["line"] - 1]
            == task.meta()["fixed_line"]
        )
        assert parse_action(messages[3]["content"]) == Action("submit")
        assert messages[2]["content"].startswith(f"edited {MODULE}")
    tokenizer = train_tokenizer([render_messages(oracle_messages(t)) for t in tasks[40:]], vocab_size=1024)
    lengths = [len(tokenizer(render_messages(m))["input_ids"]) for m in episodes]
    assert sum(lengths) / len(lengths) < 175, lengths  # about 150 tokens with a 1,024-token BPE
    assert max(lengths) < 256


def test_a_line_edit_is_written_by_number_or_by_unique_content():
    source = "def f(a, b):\n    return a + b\ndef g(a, b):\n    return a + b\n"
    assert line_edit(source, 4, "    return a - b", "edit") == Action(
        "edit", path=MODULE, line=4, body="    return a - b"
    )
    # Line 4 alone occurs twice: the line above it is copied too, so the edit names one place.
    by_content = line_edit(source, 4, "    return a - b", "replace")
    assert by_content == Action(
        "replace", path=MODULE, old="def g(a, b):\n    return a + b", new="def g(a, b):\n    return a - b"
    )
    assert source.replace(by_content.old, by_content.new).endswith("def g(a, b):\n    return a - b\n")
