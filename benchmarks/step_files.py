"""The files a reader opens to follow one RL step: its spine and its side trips, counted
on a static call graph of the source (benchmarks/call_graph.py), so any commit can be
measured the same way without running it.

One RL step is the rollout of a step (the rollout lane's step loop, `_run_steps`) and
its training (the trainer lane's step loop, `TrainerLane.run`, with the Prefect tasks
and the per-step report the trainer lane's flow gives it). Counted:

- `files`: the project files (flows/ tasks/ engines/ storage/) holding a function the
  step can run: the step's own functions, everything they reach, and the spine;
- `spine`: the files holding a function on a path from the rl flow (`flows.rl:rl`) to
  the step, or on a path from the step to the lanes' hand-off (the functions of
  `engines.handoff` and, where it stands apart, `engines.staleness`).

The graph follows what names resolve (see benchmarks/call_graph.py), so both figures
are a floor; what matters is that two commits are read the same way.

    python -m benchmarks.step_files [--root DIR] [--list]

Last line: {"bench": "step_files", "files": N, "spine": M, "functions": F, "method": "static call graph"}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.call_graph import Source, reach, reversed_graph

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("flows", "tasks", "engines", "storage")
RL_FLOW = "flows.rl:rl"
STEP = (
    "flows.rollout_lane:_run_steps",  # the rollout of each step
    "engines.trainer.lane:TrainerLane.run",  # the training of each step
    "tasks.trainer:wait_for_rollouts",  # the Prefect tasks the trainer lane's flow runs it with
    "tasks.trainer:train_step",
    "flows.trainer_lane:_train_in_process.report",  # each trained step's report
)
HANDOFF = ("engines.handoff", "engines.staleness")


def is_handoff(function: str) -> bool:
    module = function.split(":")[0]
    return any(module == h or module.startswith(h + ".") for h in HANDOFF)


def step_functions(source: Source) -> tuple[set[str], set[str]]:
    """(every function one step can run, the functions on its spine)."""
    graph, back = source.graph, reversed_graph(source.graph)
    missing = [f for f in (RL_FLOW, *STEP) if f not in graph]
    if missing:
        raise SystemExit(f"not in the source: {missing}")
    handoff = {f for f in graph if is_handoff(f)}
    step = reach(graph, STEP)
    to_step = reach(graph, [RL_FLOW]) & reach(back, STEP)
    to_handoff = step & reach(back, handoff)
    spine = to_step | to_handoff
    return step | spine, spine


def files(source: Source, functions: set[str]) -> list[str]:
    paths = {source.modules[f.split(":")[0]].path for f in functions}
    return sorted(str(p.relative_to(source.root)) for p in paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root", type=Path, default=REPO, help="the source tree to read (a worktree of another commit)"
    )
    parser.add_argument("--list", action="store_true", help="print the files, spine first, before the figures")
    args = parser.parse_args(argv)
    source = Source(args.root.resolve(), PACKAGES)
    every, spine = step_functions(source)
    spine_files, all_files = files(source, spine), files(source, every)
    if args.list:
        print("spine:", *spine_files, sep="\n  ")
        print("side trips:", *[f for f in all_files if f not in spine_files], sep="\n  ")
    figures = {"files": len(all_files), "spine": len(spine_files), "functions": len(every)}
    print(json.dumps({"bench": "step_files", **figures, "method": "static call graph"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
