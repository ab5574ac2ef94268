"""The trainer lane as a supervised child process.

The lanes run in separate processes (in one process they would fight over the GIL,
and Prefect runs sync subflows started from threads one after another). Started
from a flow run (the `rl` flow), each start of the lane is a flow run recorded as a
child of it (flows/prefect_child.py), so the UI shows the lane under its run.

A trainer process that dies is started again, up to `max_restarts` times
(`lanes.max_restarts`); it resumes from its last saved state, so no step is lost or
applied twice. This is the process-level equivalent of Prefect's flow retries:
Prefect retries a failed flow inside the process that ran it, which a killed process
cannot do, so every start is a new child flow run of the same parent and the count
of starts is bounded here.

The supervisor, not the lane, holds the run's training slot, for all of the lane's
starts: a killed lane would otherwise keep it until its lease ran out (SLOT_LEASE_S,
a minute), and its restart would wait that long for it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from engines.lifetime import exit_with_parent, owner_env, signal_group
from engines.trainer.lane import LaneConfig
from engines.trainer.torchrun import trainer_environment
from flows.metrics import MetricsConfig
from flows.prefect_child import create_child_run
from flows.trainer_lane import trainer_lane
from tasks.limits import training_limit
from tasks.progress import say
from tasks.slots import held_slot


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
