import ast
from collections import Counter

import pytest

from engines.env.task_sources.edit_forms import line_edit, oracle_action
from engines.env.task_sources.micro import MODULE, generate_micro_tasks, named_function
from engines.env.task_sources.micro_demos import oracle_messages
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


def test_compound_names_rarely_repeat_and_leave_the_default_tasks_as_they_were():
    compound = generate_micro_tasks(300, seed=3, compound_names=True)
    names = Counter(named_function(t) for t in compound)
    assert len(names) > 250 and all("_" in name for name in names)
    plain = Counter(named_function(t) for t in generate_micro_tasks(300, seed=3))
    assert len(plain) <= 16  # the default's one-word names, drawn as before
    for task in compound[:20]:  # still fixed by their gold patches
        fixed = apply_to_files(base_files(task), task.patch, what=task.instance_id)
        assert named_function(task) in fixed[MODULE].decode()


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


def test_every_edit_form_writes_the_fix_so_that_it_applies_exactly():
    """On 200 tasks, each form's oracle action parses back to itself and, applied as the
    session applies it, turns the buggy module into the original one."""
    from engines.env.edits import apply_edit
    from engines.env.task_sources.edit_forms import EDIT_FORMS
    from engines.protocol import render_action

    for task in generate_micro_tasks(200, seed=11):
        meta = task.meta()
        lines = meta["files"][MODULE].rstrip("\n").split("\n")
        fixed = [*lines[: meta["line"] - 1], meta["fixed_line"], *lines[meta["line"] :]]
        for form in EDIT_FORMS:
            action = oracle_action(task, form)
            assert parse_action(render_action(action)) == action
            assert apply_edit(MODULE, lines, action).lines == fixed, (form, action)


def test_short_forms_write_only_the_tokens_that_change():
    source = "def f(a, b):\n    c = a - 2\n    return c - b\ndef g(a, b):\n    return c - a\n"
    # `-` occurs once on line 3, twice in f, three times in the file; `c -` once in f, twice in the file
    assert line_edit(source, 3, "    return c + b", "line_change") == Action(
        "change", path=MODULE, line=3, old="-", new="+"
    )
    assert line_edit(source, 3, "    return c + b", "function_change") == Action(
        "change", path=MODULE, scope="f", old="c -", new="c +"
    )
    # the line named as the function view numbers it, OLD spaced: " -" is unique on line 3
    assert line_edit(source, 3, "    return c + b", "spaced_line_change") == Action(
        "change", path=MODULE, line=3, old=" -", new=" +"
    )
    # at least two tokens, the one before the change first: " c -" is once in f
    assert line_edit(source, 3, "    return c + b", "spaced_context_change") == Action(
        "change", path=MODULE, scope="f", old=" c -", new=" c +"
    )
    # a change at the line's start takes the token after it; a last token the one before
    assert line_edit(source, 2, "    d = a - 2", "spaced_context_change") == Action(
        "change", path=MODULE, scope="f", old=" c =", new=" d ="
    )
    assert line_edit(source, 2, "    c = a - 3", "spaced_context_change") == Action(
        "change", path=MODULE, scope="f", old=" - 2", new=" - 3"
    )
    assert line_edit(source, 3, "    return c + b", "short_replace") == Action(
        "replace", path=MODULE, old="- b", new="+ b"
    )
    # an inserted token: OLD is the token beside it, NEW is never empty
    assert line_edit(source, 5, "    return c - -a", "function_change") == Action(
        "change", path=MODULE, scope="g", old="- a", new="- -a"
    )


def test_plausible_edits_of_the_named_function_hold_the_fix():
    from engines.env.task_sources.micro import named_function, plausible_edits

    tasks = generate_micro_tasks(300, seed=5)
    held = 0
    for task in tasks:
        meta = task.meta()
        edits = plausible_edits(meta["files"][MODULE], named_function(task))
        assert len({(line, text) for line, text, _ in edits}) == len(edits)  # distinct
        lines = meta["files"][MODULE].split("\n")
        assert all(text != lines[line - 1] for line, text, _ in edits)  # each changes its line
        held += (meta["line"], meta["fixed_line"]) in {(line, text) for line, text, _ in edits}
    # only a constant mutated from 0 to -1 has no inverse here (-1 is a unary minus, not a constant)
    assert held >= 0.98 * len(tasks)


def test_the_candidate_demonstrator_tries_distinct_edits_until_one_passes():
    import random

    from engines.env.task_sources.micro import named_function, plausible_edits
    from engines.env.task_sources.micro_demos import candidate_messages, local_statuses

    for task in generate_micro_tasks(60, seed=9):
        buggy = task.meta()["files"][MODULE]
        messages = candidate_messages(task, 3, random.Random(0), "line_change")
        turns = [m for m in messages if m["role"] == "assistant"]
        actions = [parse_action(m["content"]) for m in turns]
        assert 1 <= len(turns) <= 3 and all(m.get("train", True) for m in turns)  # every attempt trained
        assert len(set(actions)) == len(actions)  # never a repeat
        lines = buggy.rstrip("\n").split("\n")
        candidates = {(line, text) for line, text, _ in plausible_edits(buggy, named_function(task))}
        results = []
        for action in actions:
            new = lines[action.line - 1].replace(action.old, action.new, 1)
            assert (action.line, new) in candidates
            source = "\n".join([*lines[: action.line - 1], new, *lines[action.line :]])
            results.append(all(s == "PASSED" for s in local_statuses(task, source).values()))
        assert not any(results[:-1])  # it stops at the first pass
        assert results[-1] or len(turns) == 3
        # observations follow every attempt but the last, as in a live episode
        assert [m["role"] for m in messages[1:]] == ["assistant", "tool"] * (len(turns) - 1) + ["assistant"]


@pytest.mark.parametrize("form", ["viewed_change", "spaced_change", "spaced_line_change", "spaced_context_change"])
def test_viewed_change_episodes_view_the_named_function_as_a_live_session_shows_it(env_config, form):
    import random

    from engines.env.session import EnvSession
    from engines.env.task_sources.micro import named_function
    from engines.env.task_sources.micro_demos import candidate_messages, feedback_demonstrations

    tasks = generate_micro_tasks(20, seed=13)
    demos = feedback_demonstrations(tasks, 3, 0.5, seed=0, tool=form)
    demos += [candidate_messages(t, 3, random.Random(1), form) for t in tasks]
    for task, messages in zip(tasks + tasks, demos):
        view = parse_action(messages[1]["content"])
        assert view == Action("view", path=MODULE, scope=named_function(task))
        with EnvSession.open(task, env_config) as session:
            assert messages[2] == {"role": "tool", "content": session.step(messages[1]["content"]).observation}
        assert all(parse_action(m["content"]).tool == "change" for m in messages[3::2])  # the edits that follow


def test_a_spaced_change_copies_the_tokens_of_the_function_view():
    """OLD on a line of its own: without its leading space its first token is another
    BPE token than the view shows (" +" there, "+" here); spaced_change keeps the space."""
    from engines.env.task_sources.micro import named_function
    from engines.env.views import function_view
    from engines.model.tokenizer import train_tokenizer

    tasks = generate_micro_tasks(120, seed=17)
    tok = train_tokenizer([t.meta()["files"][MODULE] for t in generate_micro_tasks(400, seed=18)], 512)

    def copied(form: str) -> int:
        hits = 0
        for task in tasks:
            lines = task.meta()["files"][MODULE].rstrip("\n").split("\n")
            name = named_function(task)
            view, old = tok.encode(function_view(MODULE, lines, name)), tok.encode(oracle_action(task, form).old)
            hits += any(view[i : i + len(old)] == old for i in range(len(view)))
        return hits

    assert copied("spaced_change") >= 0.95 * len(tasks)
    assert copied("viewed_change") <= 0.2 * len(tasks)
    for task in tasks:
        action, plain = oracle_action(task, "spaced_change"), oracle_action(task, "viewed_change")
        if action.old != plain.old:  # widened by exactly the space before it
            assert (action.old, action.new) == (" " + plain.old, " " + plain.new)
