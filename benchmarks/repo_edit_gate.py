"""The edit gate on tasks from real repositories: can the warm start of a corpus run
(`--config configs/repos.toml`) write an edit in code it never trained on?

It builds the run's warm start, or takes it from the warm-start cache under the key the
run uses (flows/sft.py), then plays greedy episodes of the held-out tasks in-process
(transformers `generate`, the real EnvSession, views and the repository protocol as a
run has them) up to the episode's first edit, which it classifies without running a
test. Each figure is a share of the probed tasks, with a 95% Wilson interval, for the
held-out projects (code never trained on) and the held-out tasks of training projects
apart:

  named_file          the episode's first action naming a file (a view or an edit) names the buggy one
  first_view          that action is the view of exactly the file and function the hint names
  first_edit          an edit (change, replace or edit) within the episode's turns
  named_view          a view of the function the statement names came before it
  scope_named         the edit names that function (a `change` by scope)
  old_in_function     its OLD occurs in that function
  old_in_view         its OLD occurs in an observation the episode showed before it
                      (the view it could copy from)
  old_repeated        its OLD occurs more than once in that function (a `change` by that
                      scope is refused as ambiguous)
  old_spacing         its OLD is not in the function, but is once the spaces around it
                      are stripped (a copy off by its leading space)
  old_half_copied     its OLD is not in the function, but its first half is, two
                      characters or more (a copy that broke down midway, not one never begun)
  applied             the edit applies (OLD found once where it says)
  gate                applied, and every changed line inside the named function
  buggy_line          the changed line is the mutated one

    python -m benchmarks.repo_edit_gate --config configs/repos.toml [--tasks 200] [--warm-start DIR]
        [--turns N] [--run-args --tasks.corpus_path corpus/small --trainer.sft.max_steps 600 ...]

`--dump FILE` writes each probed episode (its turns, its first edit and the figures above
for it) as a line of JSON, to read what the failing edits wrote.

`--turns 1 --warm-start DIR` probes a model's first turn alone: how exactly a model
after the copy drills alone (the `copy-drilled` folder beside the fresh one) copies the
hint's names from real statements, in a minute.

Appends a row to the `experiments` table (benchmarks/learning.py). The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow

from benchmarks.edit_gate import first_edit_shares
from benchmarks.learning import record_experiment
from engines.env.edits import Edited, apply_edit
from engines.env.scopes import resolve
from engines.env.session import EnvSession
from engines.env.task_sources.corpus import load_corpus
from engines.env.types import Task
from engines.model.greedy import greedy_turns
from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.protocol import EDIT_TOOLS, Action, parse_action
from engines.trainer.warm_start_cache import cached, warm_start_key
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.prefect_api import prefect_api
from flows.runtime import corpus_draw
from flows.sft import build, cache_inputs
from tasks.corpus import draw_corpus

_BATCH = 16  # real-code prompts run to 2,000 tokens: a smaller batch than the micro gate's


def classify(
    task: Task,
    files: dict[str, list[str]],
    viewed: list[str],
    action: Action | None,
    first: Action | None = None,
    seen: str = "",
) -> dict[str, bool]:
    """What the first edit `action` (None: no edit) does to the task's buggy file;
    `first`: the episode's first action naming a file (a view or an edit); `seen`: the
    observations the episode showed before the edit."""
    meta = task.meta()
    path, function = meta["file"], meta.get("function") or ""
    out = dict.fromkeys(
        (
            "named_file",
            "first_view",
            "first_edit",
            "named_view",
            "scope_named",
            "old_in_function",
            "old_in_view",
            "old_repeated",
            "old_spacing",
            "old_half_copied",
            "applied",
            "gate",
            "buggy_line",
        ),
        False,
    )
    out["named_file"] = first is not None and first.path == path
    out["first_view"] = out["named_file"] and first.tool == "view" and bool(function) and first.scope == function
    if action is None:
        return out
    out["first_edit"] = True
    lines = files[path]
    span = resolve(lines, function) if function else "no function"
    inside = (span.first, span.last) if not isinstance(span, str) else None
    names = lambda scope: inside is not None and bool(scope) and resolve(lines, scope) == span  # noqa: E731
    out["named_view"] = any(names(scope) for scope in viewed)
    out["scope_named"] = action.tool == "change" and action.line is None and names(action.scope)
    if inside is not None and action.old:
        out |= old_figures(action.old, "\n".join(lines[inside[0] - 1 : inside[1]]))
    out["old_in_view"] = bool(action.old) and action.old in seen
    if action.path != path:
        return out
    edited = apply_edit(path, lines, action)
    if not isinstance(edited, Edited):
        return out
    out["applied"] = True
    changed = [i for i, (a, b) in enumerate(zip(lines, edited.lines), 1) if a != b]
    if len(edited.lines) != len(lines) or not changed:
        return out
    out["gate"] = inside is not None and all(inside[0] <= i <= inside[1] for i in changed)
    out["buggy_line"] = changed == [meta.get("line")]
    return out


def old_figures(old: str, function: str) -> dict[str, bool]:
    """How an edit's OLD relates to the function it should come from (the module doc)."""
    found = function.count(old)
    half = old[: len(old) // 2]
    return {
        "old_in_function": found > 0,
        "old_repeated": found > 1,
        "old_spacing": not found and bool(old.strip()) and old.strip() in function,
        "old_half_copied": not found and len(half.strip()) > 1 and half in function,
    }


def first_edits(
    model_dir: Path, tasks: list[Task], config: RunConfig, scratch: Path, turns: int | None = None
) -> list[dict[str, Any]]:
    """Greedy episodes of `tasks` up to each one's first edit (not applied: no test runs),
    at most `turns` turns (None: the run's inference.limits.max_turns)."""
    model, tokenizer = load_moe_causal_lm(str(model_dir)), load_tokenizer(str(model_dir))
    model.eval()
    env = config.env.model_copy(update={"scratch_dir": str(scratch)})
    sessions = [EnvSession.open(t, env) for t in tasks]
    chats = [[{"role": "user", "content": s.prompt()}] for s in sessions]
    viewed: list[list[str]] = [[] for _ in tasks]
    first: list[Action | None] = [None] * len(tasks)
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    actions: list[Counter] = [Counter() for _ in tasks]
    active = list(range(len(tasks)))
    limits = config.inference
    for _ in range(turns or limits.limits.max_turns):
        prompts = [chats[i] for i in active]
        texts = greedy_turns(model, tokenizer, prompts, limits.sampling.max_tokens_per_turn, _BATCH)
        still = []
        for i, text in zip(active, texts):
            action = parse_action(text)
            tool = action.tool if isinstance(action, Action) else "invalid"
            actions[i][tool] += 1
            if isinstance(action, Action) and action.path and first[i] is None:
                first[i] = action
            if isinstance(action, Action) and action.tool in EDIT_TOOLS:
                seen = "\n".join(m["content"] for m in chats[i] if m["role"] == "tool")
                results[i] = classify(tasks[i], _files(sessions[i], tasks[i]), viewed[i], action, first[i], seen)
                chats[i].append({"role": "assistant", "content": text})
                continue
            if isinstance(action, Action) and action.tool == "view" and action.scope:
                viewed[i].append(action.scope)
            result = sessions[i].step(text)
            if not result.done:
                chats[i] += [{"role": "assistant", "content": text}, {"role": "tool", "content": result.observation}]
                still.append(i)
        active = still
        if not active:
            break
    for s in sessions:
        s.close()
    return [
        {"task": t, "first": r or classify(t, {}, [], None, p), "actions": dict(a), "chat": c}
        for t, r, a, p, c in zip(tasks, results, actions, first, chats)
    ]


def _files(session: EnvSession, task: Task) -> dict[str, list[str]]:
    path = task.meta()["file"]
    return {path: session.tree.read_bytes(path).decode().rstrip("\n").split("\n")}


def figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    out = first_edit_shares(results)
    turns = Counter()
    for r in results:
        turns.update(r["actions"])
    out["turns"] = dict(turns.most_common())
    return out


@flow(name="repo-edit-gate", log_prints=True)
def probe(
    config: RunConfig,
    count: int,
    work: Path,
    given: Path | None = None,
    turns: int | None = None,
    dump: Path | None = None,
) -> tuple[dict[str, Any], str, float | None]:
    """The gate's figures by split, the warm start's folder, and its build seconds (None:
    cached or `given`, a warm start folder probed as it is); episodes of at most `turns`
    turns, each written to `dump` as a line of JSON when given."""
    corpus = draw_corpus(config.tasks.corpus_path, str(work / "corpus"), corpus_draw(config))
    tasks = load_corpus(corpus)
    train = [t for t in tasks if t.split == "train"]
    heldout = [t for t in tasks if t.split == "heldout"][:count]
    inputs = cache_inputs(config, train)
    start, built = time.monotonic(), []

    def make(out: Path) -> None:
        build(config, train, str(out), work)
        built.append(True)

    folder = given or cached(warm_start_key(inputs), make, inputs=inputs)
    build_s = round(time.monotonic() - start, 1) if built else None
    trained = {t.repo for t in train}
    results = first_edits(folder, heldout, config, work / "scratch", turns)
    if dump is not None:
        write_episodes(dump, results, trained)
    out = {
        "heldout_projects": figures([r for r in results if r["task"].repo not in trained]),
        "heldout_tasks": figures([r for r in results if r["task"].repo in trained]),
        "all": figures(results),
    }
    return out, str(folder), build_s


def write_episodes(path: Path, results: list[dict[str, Any]], trained: set[str]) -> None:
    """Each probed episode as a line of JSON: the task, its split, its turns and figures."""
    with path.open("w") as out:
        for r in results:
            task = r["task"]
            split = "heldout_tasks" if task.repo in trained else "heldout_projects"
            row = {
                "task": task.instance_id,
                "split": split,
                "hint": task.meta(),
                "first": r["first"],
                "chat": r["chat"],
            }
            out.write(json.dumps(row) + "\n")


def main() -> None:
    args = parse_args()
    started_at, start = datetime.now(UTC), time.monotonic()
    config = load_config(RunConfig, args.config, args.run_args)
    work = Path(tempfile.mkdtemp(prefix="repo-edit-gate-"))
    with prefect_api(work / "prefect"):
        by_split, folder, build_s = probe(config, args.tasks, work, args.warm_start, args.turns, args.dump)
    sft = config.trainer.sft
    result = {
        "bench": "repo_edit_gate",
        "gate_heldout_projects": by_split["heldout_projects"].get("gate"),
        "gate_heldout_tasks": by_split["heldout_tasks"].get("gate"),
        **by_split,
        "sft_steps": sft.max_steps,
        "warm_start_build_s": build_s,
        "probe_s": round(time.monotonic() - start - (build_s or 0), 1),
    }
    settings = {"run_args": args.run_args, "config_file": args.config, "warm_start": folder, "turns": args.turns}
    name = args.name or f"repo-edit-gate-{sft.max_steps}"
    record_experiment(args.experiments, name, settings, result, started_at, time.monotonic() - start)
    for split in ("heldout_projects", "heldout_tasks"):
        f = by_split[split]
        if f.get("tasks"):
            print(
                f"[repo-edit-gate] {split} ({f['tasks']} tasks): gate {f['gate']:.3f} {f['gate_interval']}, "
                f"applied {f['applied']:.3f}, named file {f['named_file']:.3f}, first view {f['first_view']:.3f}, "
                f"first edit {f['first_edit']:.3f}, "
                f"named view {f['named_view']:.3f}, "
                f"OLD in function {f['old_in_function']:.3f} (in view {f['old_in_view']:.3f}, repeated "
                f"{f['old_repeated']:.3f}, spacing {f['old_spacing']:.3f}, half copied {f['old_half_copied']:.3f}), "
                f"buggy line {f['buggy_line']:.3f}; turns {f['turns']}"
            )
    print(json.dumps(result))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/repos.toml", help="the run's recipe (a corpus run)")
    parser.add_argument("--tasks", type=int, default=200, help="held-out tasks probed (the first of the run's draw)")
    parser.add_argument("--name", help="the row's name in the experiments table")
    parser.add_argument(
        "--warm-start", type=Path, help="probe this model folder instead of the run's warm start (built or cached)"
    )
    parser.add_argument(
        "--turns", type=int, help="turns an episode may take (default: the run's inference.limits.max_turns)"
    )
    parser.add_argument("--dump", type=Path, help="write each probed episode here as a line of JSON")
    parser.add_argument(
        "--experiments",
        default=os.environ.get("TANDEM_ROOT", "runs"),
        help="lake whose experiments table gets the row (default $TANDEM_ROOT, else ./runs)",
    )
    parser.add_argument("--run-args", nargs=argparse.REMAINDER, default=[], help="more run overrides (--key value)")
    return parser.parse_args()


if __name__ == "__main__":
    main()
