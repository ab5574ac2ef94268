"""The edit gate: can the warm start write an edit? Before any RL, the warm start's
greedy first edits on held-out micro tasks are classified with the generator's own
knowledge (the task's buggy line, fixed line and named function).

For given settings (edit form, demonstrations, SFT budget, model shape) it builds the
warm start, or loads it from the warm-start cache under the same key a run would use
(flows/sft.py: cache_inputs), then runs greedy edit-feedback episodes in-process:
transformers `generate` on CPU, the real EnvSession applying each action, the tests
run in-process (micro_demos.local_statuses) instead of in the sandbox. Figures, each
a share of the N tasks with a 95% Wilson interval:

  first_turn_edit     the episode's first edit (edit, replace or change; after a view,
                      say) parses: the figures below classify that edit
  applied             ... and applies (OLD found once, the line exists)
  valid_single_token  ... and changes exactly one line, keeping its indentation, by one
                      token replaced, inserted or removed, or by two operands swapped
                      (the inverse of the generator's swapped_operands)
  inside_function     ... and that line is in the body of the named function
  gate                valid_single_token and inside_function (the gate: >= 0.8)
  valid_candidate     the edit is one of the named function's plausible edits
                      (engines/env/task_sources/micro.py: plausible_edits)
  buggy_line          the changed line is the buggy one
  first_edit_passes   the first edit passes every test
  resolved            the episode passes within env.edit_attempts attempts
  repeat_rate         retries that repeat a failed attempt, over all retries

    python -m benchmarks.edit_gate --edit-form function_change [--demonstrations candidates]
        [--sft-steps 600] [--tasks 200] [--run-args --model.tiny.num_layers 6 ...]

Appends a row to the `experiments` table (as benchmarks/learning.py). The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from benchmarks.learning import record_experiment
from engines.env.config import EnvConfig
from engines.env.edits import Edited, EditError, apply_edit, function_lines, line_tokens
from engines.env.session import EnvSession
from engines.env.session_tree import SessionTree
from engines.env.task_sources.micro import MODULE, generate_micro_tasks, named_function, plausible_edits
from engines.env.task_sources.micro_demos import local_statuses
from engines.env.types import GradeResult, Task
from engines.model.greedy import greedy_turns
from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.protocol import EDIT_TOOLS, Action, parse_action
from engines.trainer.sft import sft
from engines.trainer.warm_start_cache import cached, warm_start_key
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.sft import cache_inputs
from tasks.training import create_model, demonstrations

_MAX_NEW_TOKENS = 48  # a change is about 10 tokens, a whole-line edit about 20
_BATCH = 64
_TIMING_FILE = "edit_gate_sft.json"  # beside a warm start the probe built: its SFT seconds


def wilson(successes: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson score interval of a binomial share."""
    if n == 0:
        return [0.0, 1.0]
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def token_distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two token sequences."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def classify(task: Task, action: Action | None) -> dict[str, bool]:
    """What the first edit `action` (None: the first turn was no edit) is, by the task's meta."""
    meta = task.meta()
    buggy = meta["files"][MODULE].rstrip("\n").split("\n")
    out = dict.fromkeys(
        ("first_turn_edit", "applied", "valid_single_token", "inside_function", "gate", "valid_candidate"), False
    )
    out.update(buggy_line=False, first_edit_passes=False)
    if action is None:
        return out
    out["first_turn_edit"] = True
    edited = apply_edit(MODULE, buggy, action)
    if isinstance(edited, EditError):
        return out
    out["applied"] = True
    changed = [i for i, (x, y) in enumerate(zip(buggy, edited.lines), 1) if x != y]
    if len(edited.lines) != len(buggy) or len(changed) != 1:
        return out
    line = changed[0]
    old, new = buggy[line - 1], edited.lines[line - 1]
    function = named_function(task)
    first, last = function_lines(buggy, function)
    candidates = {(n, text): kind for n, text, kind in plausible_edits(meta["files"][MODULE], function)}
    same_indent = old[: len(old) - len(old.lstrip())] == new[: len(new) - len(new.lstrip())]
    one_token = token_distance([t for t, _, _ in line_tokens(old)], [t for t, _, _ in line_tokens(new)]) == 1
    swap = candidates.get((line, new)) == "swapped_operands"
    out["valid_single_token"] = same_indent and (one_token or swap)
    out["inside_function"] = first < line <= last
    out["gate"] = out["valid_single_token"] and out["inside_function"]
    out["valid_candidate"] = (line, new) in candidates
    out["buggy_line"] = line == meta["line"]
    out["first_edit_passes"] = all(s == "PASSED" for s in local_statuses(task, "\n".join(edited.lines)).values())
    return out


def local_tester(task: Task, tree: SessionTree) -> GradeResult:
    """The session's tester: the task's tests run in-process on the tree's module."""
    statuses = local_statuses(task, tree.read_bytes(MODULE).decode())
    passed = all(s == "PASSED" for s in statuses.values())
    f2p = sum(statuses[t] == "PASSED" for t in task.FAIL_TO_PASS)
    p2p = sum(statuses[t] == "PASSED" for t in task.PASS_TO_PASS)
    return GradeResult(passed, float(passed), f2p, len(task.FAIL_TO_PASS), p2p, len(task.PASS_TO_PASS), statuses)


@torch.no_grad()
def run_episodes(model_dir: Path, tasks: list[Task], config: RunConfig, scratch: Path) -> list[dict[str, Any]]:
    """Greedy edit-feedback episodes, all tasks' turns batched; per task, the first
    edit's classification, whether it resolved, attempts and repeated attempts."""
    model, tokenizer = load_moe_causal_lm(str(model_dir)), load_tokenizer(str(model_dir))
    model.eval()
    env = EnvConfig(edit_attempts=config.env.edit_attempts, scratch_dir=str(scratch))
    sessions = [EnvSession.open(t, env, tester=local_tester) for t in tasks]
    chats = [[{"role": "user", "content": s.prompt()}] for s in sessions]
    results: list[dict[str, Any]] = [{"first": None, "resolved": False, "attempts": 0, "repeats": 0} for _ in tasks]
    failed: list[list[str]] = [[] for _ in tasks]
    active = list(range(len(tasks)))
    for _ in range(config.inference.limits.max_turns):
        texts = greedy_turns(model, tokenizer, [chats[i] for i in active], _MAX_NEW_TOKENS, _BATCH)
        still = []
        for i, text in zip(active, texts):
            action = parse_action(text)
            is_edit = isinstance(action, Action) and action.tool in EDIT_TOOLS
            if is_edit and results[i]["first"] is None:
                results[i]["first"] = classify(tasks[i], action)
            before = sessions[i].attempts
            result = sessions[i].step(text)
            if sessions[i].attempts > before:  # a tested edit: key it by the file it made
                key = _edited_text(tasks[i], action)
                results[i]["repeats"] += key in failed[i]
                failed[i].append(key)
                results[i]["attempts"] = sessions[i].attempts
            if result.done:
                results[i]["resolved"] = _resolved(sessions[i], tasks[i])
            else:
                chats[i] += [{"role": "assistant", "content": text}, {"role": "tool", "content": result.observation}]
                still.append(i)
        active = still
        if not active:
            break
    for s in sessions:
        s.close()
    for task, result in zip(tasks, results):
        if result["first"] is None:  # the episode made no edit
            result["first"] = classify(task, None)
    return results


def _edited_text(task: Task, action: Action) -> str:
    edited = apply_edit(MODULE, task.meta()["files"][MODULE].rstrip("\n").split("\n"), action)
    return "\n".join(edited.lines) if isinstance(edited, Edited) else ""


def _resolved(session: EnvSession, task: Task) -> bool:
    return local_tester(task, session.tree).resolved


def warm_start(config: RunConfig, train: list[Task], work: Path) -> tuple[Path, float | None, bool]:
    """The warm start of `config` (cached by the run's own key): its folder, SFT seconds
    (None when a run cached it), and whether it came from the cache."""
    inputs = cache_inputs(config, train)
    built: list[bool] = []

    def build(out: Path) -> None:
        sft_cfg = config.trainer.sft
        demos = demonstrations.fn(
            train,
            config.env.edit_attempts,
            sft_cfg.failed_attempt_share,
            config.tasks.seed,
            sft_cfg.edit_tool,
            sft_cfg.demonstrations,
        )
        init = create_model.fn(str(work / "init-model"), demos, config.model.tiny)
        start = time.monotonic()
        sft(init, demos, str(out), config.trainer)
        (out / _TIMING_FILE).write_text(json.dumps({"sft_s": round(time.monotonic() - start, 1)}))
        built.append(True)

    folder = cached(warm_start_key(inputs), build, inputs=inputs) if config.trainer.sft.cache else None
    if folder is None:
        folder = work / "warm-start"
        build(folder)
    timing = folder / _TIMING_FILE
    sft_s = json.loads(timing.read_text())["sft_s"] if timing.is_file() else None
    return folder, sft_s, not built


def first_edit_shares(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each classification of the first edits (`result["first"]`) as a share of the tasks,
    with its 95% Wilson interval."""
    n = len(results)
    out: dict[str, Any] = {"tasks": n}
    for name in results[0]["first"] if results else ():
        k = sum(r["first"][name] for r in results)
        out[name] = round(k / n, 3)
        out[f"{name}_interval"] = wilson(k, n)
    return out


def figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    out = first_edit_shares(results)
    resolved = sum(r["resolved"] for r in results)
    retries = sum(max(0, r["attempts"] - 1) for r in results)
    out.update(
        resolved=round(resolved / n, 3),
        resolved_interval=wilson(resolved, n),
        mean_attempts=round(sum(r["attempts"] for r in results) / n, 2),
        repeat_rate=round(sum(r["repeats"] for r in results) / retries, 3) if retries else 0.0,
    )
    return out


def main() -> None:
    args = parse_args()
    started_at, start = datetime.now(UTC), time.monotonic()
    overrides = [
        "--trainer.sft.edit_tool",
        args.edit_form,
        "--trainer.sft.demonstrations",
        args.demonstrations,
        "--trainer.sft.max_steps",
        str(args.sft_steps),
        "--tasks.seed",
        str(args.seed),
        *args.run_args,
    ]
    config = load_config(RunConfig, None, overrides)
    work = Path(tempfile.mkdtemp(prefix="edit-gate-"))
    train = generate_micro_tasks(config.tasks.train_tasks, config.tasks.seed)
    heldout = generate_micro_tasks(args.tasks, config.tasks.seed + 1, split="heldout")
    folder, sft_s, from_cache = warm_start(config, train, work)
    probe_start = time.monotonic()
    results = run_episodes(folder, heldout, config, work / "scratch")
    probe_s = time.monotonic() - probe_start
    sft_cfg = config.trainer.sft
    result = {
        "bench": "edit_gate",
        "edit_form": sft_cfg.edit_tool,
        "demonstrations": sft_cfg.demonstrations,
        **figures(results),
        "sft_steps": sft_cfg.max_steps,
        "sft_schedule": sft_cfg.schedule,
        "sft_s": sft_s,
        "warm_start_cached": from_cache,
        "probe_s": round(probe_s, 1),
        "model_layers": config.model.tiny.num_layers,
        "model_hidden": config.model.tiny.hidden_size,
    }
    settings = {"run_args": overrides, "warm_start": str(folder), "config": json.loads(config.model_dump_json())}
    name = args.name or f"edit-gate-{sft_cfg.edit_tool}-{sft_cfg.demonstrations}-{sft_cfg.max_steps}"
    record_experiment(args.experiments, name, settings, result, started_at, time.monotonic() - start)
    print(
        f"[edit-gate] {name}: gate {result['gate']:.3f} {result['gate_interval']}, valid {result['valid_single_token']:.3f}, "
        f"inside {result['inside_function']:.3f}, buggy line {result['buggy_line']:.3f}, "
        f"first edit passes {result['first_edit_passes']:.3f}, resolved {result['resolved']:.3f}, "
        f"repeat rate {result['repeat_rate']:.3f}"
    )
    print(json.dumps(result))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edit-form", default="edit", help="trainer.sft.edit_tool of the warm start")
    parser.add_argument("--demonstrations", default="oracle", help="trainer.sft.demonstrations: oracle | candidates")
    parser.add_argument("--sft-steps", type=int, default=600, help="trainer.sft.max_steps (cosine schedule)")
    parser.add_argument("--tasks", type=int, default=200, help="held-out tasks probed")
    parser.add_argument("--seed", type=int, default=0, help="tasks.seed (train tasks; held-out use seed + 1)")
    parser.add_argument("--name", help="the row's name in the experiments table")
    parser.add_argument(
        "--experiments",
        default=os.environ.get("TANDEM_ROOT", "runs"),
        help="lake root whose experiments table gets the row (default: $TANDEM_ROOT, else ./runs)",
    )
    parser.add_argument("--run-args", nargs=argparse.REMAINDER, default=[], help="more run overrides (--key value)")
    return parser.parse_args()


if __name__ == "__main__":
    main()
