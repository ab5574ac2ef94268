"""The trainer lane's start, in the order it happens, and its flow.

1. In the rl flow's process, `TrainerProcess` holds the run's training slot and starts
   the lane as a supervised child process. The lanes run in separate processes (in one
   they would fight over the GIL, and Prefect runs sync subflows started from threads
   one after another).
2. Each start is a flow run recorded as a child of the rl flow run (`create_child_run`),
   so the UI shows the lane under its run: a task run in the parent stands for the
   child, and the child's flow run names it as `parent_task_run_id`, the way Prefect
   links a subflow (and `run_deployment` a deployment run).
3. The child process (`python -m flows.trainer_lane --flow-run-id ID`, `main`) runs that
   flow run with Prefect's own engine (`run_child`), as a worker runs the flow runs it
   picks up. Deployed on a machine of its own (flows/lanes_apart.py), the same
   `trainer_lane` flow is a deployment's entry point instead.
4. `trainer_lane`: with `trainer.processes` 1 the lane trains in place, a Prefect task
   per step; with more, the steps run under torchrun (one rank per process,
   `trainer.parallelism` applied on every rank; with trackers rank 0 logs to them,
   flows/trainer_ranks.py) and this flow follows the versions they publish.

A trainer process that dies is started again, up to `lanes.max_restarts` times, as a
new child flow run of the same parent: Prefect's flow retries run inside the process
that failed, which a killed process cannot do. The lane resumes from its last saved
state, so no step is lost or applied twice. The supervisor, not the lane, holds the
training slot across the lane's starts: a killed lane would otherwise keep it until
its lease ran out (SLOT_LEASE_S, a minute), and its restart would wait that long.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import Flow, Task, flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext
from prefect.flow_engine import run_flow
from prefect.states import Completed, Crashed, Failed, Pending, Running

from engines.devices import VISIBLE, visible_devices
from engines.lifetime import end_with_owner, exit_with_parent, owner_env, signal_group
from engines.trainer.lane import LaneConfig, TrainerLane
from engines.trainer.torchrun import LANE_ENTRY, trainer_environment
from flows.metrics import MetricsConfig, MetricsSink
from flows.parent_watch import ends_with_parent
from flows.trainer_ranks import lane_sink
from tasks.limits import training_limit
from tasks.progress import say
from tasks.slots import held_slot, held_slot_sync
from tasks.trainer import torchrun_steps, train_step, wait_for_rollouts

# -- 1. in the rl flow's process: the supervisor -------------------------------------


class TrainerProcess:
    def __init__(
        self,
        cfg: LaneConfig,
        config_file: Path,
        max_restarts: int,
        threads: int = 1,
        metrics: MetricsConfig | None = None,
    ) -> None:
        config_file.write_text(cfg.model_dump_json(indent=1))
        self.cmd = [sys.executable, "-m", "flows.trainer_lane", "--config", str(config_file), "--slot-held"]
        trackers = metrics if metrics is not None and metrics.writes() else None
        if trackers is not None:
            self.cmd += ["--metrics", trackers.model_dump_json()]
        # The child flow run's parameters: what `--flow-run-id` runs the lane with.
        self.parameters = {
            "config": cfg.model_dump(mode="json"),
            "metrics": None if trackers is None else trackers.model_dump(mode="json"),
            "slot_held": True,
        }
        # Generation and training get their own cores: torch in each trainer rank
        # (`trainer.processes` of them) uses `threads`.
        # owner_env: the lane and its ranks end themselves when this process is gone,
        # however it ended (engines/lifetime.py); the parent-death signal alone did not.
        # trainer_environment: the lane and its ranks see the trainer's GPUs only (the device plan).
        self.env = {
            **trainer_environment(cfg.trainer),
            "OMP_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false",
            **owner_env(),
        }
        self.max_restarts = max_restarts
        self.restarts = 0
        self.proc: asyncio.subprocess.Process | None = None
        # vLLM's CPU servers bind from the lowest core up (engines/inference/launch.py);
        # the trainer takes the highest ones, so generation and training never share.
        cores, wanted = sorted(os.sched_getaffinity(0)), threads * cfg.trainer.processes
        self.cores = cores[-wanted:] if len(cores) > wanted else cores
        self.parent = os.getpid()
        self.limit = training_limit(cfg.run)

    async def run(self) -> None:
        """Run until the lane exits cleanly; restart it when it dies. Holds the training
        slot meanwhile."""
        async with held_slot(self.limit):
            await self._supervise()

    async def _supervise(self) -> None:
        while True:
            child = await create_child_run(trainer_lane, self.parameters)
            cmd = self.cmd if child is None else [*self.cmd, "--flow-run-id", str(child.flow_run.id)]
            self.proc = await asyncio.create_subprocess_exec(
                *cmd, env=self.env, start_new_session=True, preexec_fn=self._pin
            )
            code = await self.proc.wait()
            if child is not None:
                await child.finish(code == 0, f"trainer lane process exited with code {code}")
            if code == 0:
                return
            if self.restarts >= self.max_restarts:
                raise RuntimeError(
                    f"trainer lane exited with code {code} after {self.restarts} restarts; see its log above"
                )
            self.restarts += 1
            say(f"[tandem] trainer lane exited with code {code}; restarting ({self.restarts}/{self.max_restarts})")

    def _pin(self) -> None:  # runs in the child before exec
        os.sched_setaffinity(0, self.cores)
        exit_with_parent(self.parent)  # a killed run leaves no trainer behind

    async def stop(self, grace_s: float = 20.0) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        signal_group(proc.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()


# -- 2. the child flow run -------------------------------------------------------------


class ChildRun:
    """The stand-in task run in the parent and the child's flow run, for one start of the child."""

    def __init__(self, task_run_id: UUID, flow_run: FlowRun) -> None:
        self.task_run_id, self.flow_run = task_run_id, flow_run

    async def finish(self, ok: bool, message: str = "") -> None:
        """Close the stand-in task run, so the parent's graph shows how the child ended, and
        mark the child's flow run Crashed when its process died before it could say so
        (killed): otherwise the UI would show it Running for good."""
        async with get_client() as client:
            state = Completed(message=message) if ok else Failed(message=message)
            await client.set_task_run_state(self.task_run_id, state, force=True)
            current = (await client.read_flow_run(self.flow_run.id)).state
            if current is None or not current.is_final():
                await client.set_flow_run_state(self.flow_run.id, Crashed(message=message), force=True)


async def create_child_run(child: Flow[..., Any], parameters: dict[str, Any]) -> ChildRun | None:
    """A Pending flow run of `child` under the current flow run; None outside a flow run."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None
    stand_in = Task(name=child.name, fn=lambda: None)
    async with get_client() as client:
        task_run = await client.create_task_run(
            task=stand_in,
            flow_run_id=ctx.flow_run.id,
            dynamic_key=uuid.uuid4().hex,  # one task run per start of the child
            state=Running(),
        )
        flow_run = await client.create_flow_run(
            child, parameters=parameters, parent_task_run_id=task_run.id, state=Pending()
        )
    return ChildRun(task_run.id, flow_run)


def run_child(child: Flow[..., Any], flow_run_id: str) -> Any:
    """In the child process: run the flow run the parent created, with its stored parameters."""
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(UUID(flow_run_id))
    return run_flow(child, flow_run=flow_run)


# -- 3. in the lane's process ----------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the trainer lane flow from a LaneConfig JSON file.")
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--metrics", default=None, help="MetricsConfig JSON: the trackers that get each step's metrics."
    )
    parser.add_argument(
        "--flow-run-id",
        default=None,
        help="Run this flow run (created by the rl flow as its child, with the same parameters) "
        "instead of a new top-level one.",
    )
    parser.add_argument(
        "--slot-held",
        action="store_true",
        help="The process that started this lane holds the training slot for it (TrainerProcess).",
    )
    args = parser.parse_args(argv)
    # Started by a run (TrainerProcess): this lane and torchrun under it end with the run.
    end_with_owner()
    if args.flow_run_id:
        run_child(trainer_lane, args.flow_run_id)
        return 0
    cfg = LaneConfig.from_file(args.config)
    metrics = MetricsConfig.model_validate_json(args.metrics) if args.metrics else None
    trainer_lane(cfg, metrics, slot_held=args.slot_held)
    return 0


# -- 4. the flow -----------------------------------------------------------------------


@flow(name="trainer-lane", log_prints=True)
def trainer_lane(config: LaneConfig, metrics: MetricsConfig | None = None, slot_held: bool = False) -> list[dict]:
    """`slot_held`: the process that started this lane holds the training slot for it
    (TrainerProcess), across the lane's restarts."""
    # One trainer lane per run, for its whole life. Taking the slot once per step instead
    # cost about 2 s per step: right after a release Prefect's slot accounting still
    # refuses the next acquisition for a while.
    # Nodes after the first train under node 0's lane, which holds the slot for all of them.
    held = slot_held or config.trainer.node_rank > 0
    slot = nullcontext() if held else held_slot_sync(training_limit(config.run))
    # Deployed on another machine, nothing but Prefect links it to its run (flows/parent_watch.py).
    with slot, ends_with_parent(config.run):
        if config.trainer.processes > 1:
            torchrun_steps(config, config.trainer.processes, rank_entry(metrics))
            return []
        check_inherited_devices(config)
        return _train_in_process(config, lane_sink(config, metrics or MetricsConfig(sinks=[])))


def rank_entry(metrics: MetricsConfig | None) -> tuple[str, ...]:
    """What each torchrun rank runs: the lane's own entry, or with trackers the one whose rank 0 logs to them."""
    if metrics is None or not metrics.writes():
        return LANE_ENTRY
    return ("-m", "flows.trainer_ranks", "--metrics", metrics.model_dump_json())


def check_inherited_devices(config: LaneConfig, env: dict[str, str] | None = None) -> None:
    """In this process the trainer sees the GPUs the process was started with: CUDA reads
    CUDA_VISIBLE_DEVICES once, so trainer.devices can be checked here, not set."""
    wanted = visible_devices(config.trainer.devices).get(VISIBLE)
    seen = (os.environ if env is None else env).get(VISIBLE)
    if wanted is not None and seen != wanted:
        raise RuntimeError(
            f"trainer.devices = {config.trainer.devices}: with trainer.processes = 1 the lane trains in this process, "
            f"started with {VISIBLE}={seen!r}. Start it with {VISIBLE}={wanted} (the rl flow's own trainer process "
            "is), use trainer.processes >= 2 (torchrun is started with them), or leave trainer.devices unset"
        )


def _train_in_process(config: LaneConfig, sink: MetricsSink | None = None) -> list[dict]:
    lane = TrainerLane(config)
    if lane.next_step > config.first_step:
        say(f"[trainer] resuming run {config.run} at step {lane.next_step} (state from {config.state_path()})")
    last = config.first_step + config.num_steps

    def report(step: int, m: dict) -> None:
        if sink is not None:
            sink.log(step, m, "trainer")
        keys = ("loss", "mismatch_kl", "entropy", "grad_norm", "training_s")
        shown = " ".join(f"{k}={m[k]:.4g}" for k in keys if m.get(k) is not None)
        say(f"[trainer] step {step + 1}/{last} -> v{step + 1} {shown}")

    try:
        return lane.run(wait_for_rollouts, train_step, report)
    finally:
        if sink is not None:
            sink.close()


if __name__ == "__main__":
    sys.exit(main())
