"""An rl run's lanes on different machines: each lane a deployment that a worker of
its own work pool picks up (prefect.yaml: rollout-host/remote on tandem-rollout,
trainer-lane/remote on tandem-trainer). The machines share the lake (S3 or a shared
disk), the Prefect API and HTTP, and no local path:

- the trainer publishes each weight version to the lake; the rollout host copies
  the versions it serves into its bounded local cache (engines/rollout/weight_cache.py);
- the trainer's resumable state goes into the lake (engines/trainer/lake_state.py),
  so a trainer lane submitted again lands on any machine and resumes at its last step;
- the rollout host prepares the corpus itself and leaves its result in the lake for
  the rl flow's summary;
- with `inference.hosts` > 1, each other host's servers run as `lanes.server_deployment`
  (flows/server_host.py), reporting through the lake where they are and where each
  version lies on their disk.

A lane run that crashes or fails is submitted again (`lanes.max_restarts`). A machine
that dies with its worker leaves its run Running; once the run is marked Crashed
(by an operator, or by a Prefect automation on missing heartbeats) it is submitted again.
The other way round, a lane ends when its rl run is gone (flows/parent_watch.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import UUID

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.deployments import run_deployment
from prefect.states import Cancelling

from engines.handoff import RunContext
from engines.settle import settle
from engines.trainer.lane import LaneConfig
from flows.config import RunConfig
from flows.devices import planned
from flows.lanes_config import LanesConfig
from flows.parent_watch import ends_with_parent
from flows.rollout_lane import rollout_lane
from flows.runtime import corpus_draw, trainer_lane_config
from storage.atomic import write_bytes_atomic
from tasks.corpus import draw_corpus, generate_micro_corpus
from tasks.limits import run_limit
from tasks.progress import say
from tasks.slots import held_slot


def result_path(run: str) -> str:
    """Where the rollout host leaves the rollout lane's result, relative to the lake root."""
    return f"{run}/evals/rollout-lane.json"


@flow(name="rollout-host", log_prints=True)
async def rollout_host(config: RunConfig) -> None:
    """The rollout lane on a machine of its own: the corpus prepared here, the servers on
    this machine's GPUs (the device plan), the result into the lake."""
    config = planned(config)
    context = RunContext.open(config.storage, config.run)  # this process's lake and work folder
    with ends_with_parent(config.run):  # no process links it to its run: it watches the run's state
        result = await rollout_lane(config, host_corpus(config, context), context)
    write_bytes_atomic(context.store, result_path(config.run), json.dumps(result).encode())


def host_corpus(config: RunConfig, context: RunContext) -> str:
    """This machine's copy of the run's tasks: the micro corpus generated from its seed,
    or the run's draw from the built corpus at `tasks.corpus_path` (which must exist on
    every rollout host)."""
    t = config.tasks
    corpus = str(context.work / "corpus")
    if t.kind == "corpus":
        return draw_corpus(t.corpus_path, corpus, corpus_draw(config))
    generate_micro_corpus(corpus, t.train_tasks, t.heldout_tasks, t.seed)
    return corpus


async def run_lanes_apart(config: RunConfig, context: RunContext, model_dir: str) -> dict[str, Any]:
    """Both lanes as deployments until both complete; returns the rollout lane's result."""
    trainer = trainer_lane_config(config, model_dir)  # its state in the trainer machine's folder and the lake
    # The lanes end when this flow's lease lapses (flows/parent_watch.py): a killed
    # process, which no worker may report, leaves no lane behind.
    async with held_slot(run_limit(config.run)):
        await _both_lanes(config, trainer)
    store = context.store
    result = store.path(result_path(config.run))
    return json.loads(store.call(f"read {result_path(config.run)}", lambda: store.fs.cat_file(result)))


async def _both_lanes(config: RunConfig, trainer: LaneConfig) -> None:
    """Supervise both lanes' deployments until both complete; a lane out of restarts
    fails the run and the other is cancelled."""
    lanes = config.lanes
    assert lanes.rollout_deployment is not None and lanes.trainer_deployment is not None
    jobs = [asyncio.create_task(supervise(lanes.rollout_deployment, {"config": config.model_dump(mode="json")}, lanes))]
    for lane in node_lanes(trainer):
        parameters = {"config": lane.model_dump(mode="json"), "metrics": config.metrics.model_dump(mode="json")}
        jobs.append(asyncio.create_task(supervise(lanes.trainer_deployment, parameters, lanes)))
    for parameters in server_lanes(config):  # the other machines' servers (flows/server_host.py)
        assert lanes.server_deployment is not None
        jobs.append(asyncio.create_task(supervise(lanes.server_deployment, parameters, lanes)))
    try:
        done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_EXCEPTION)
        for job in done:
            job.result()  # a lane out of restarts fails the run (the other is cancelled below)
        await asyncio.gather(*jobs)
    finally:
        for job in jobs:
            job.cancel()
        await settle(*jobs)


def node_lanes(trainer: LaneConfig) -> list[LaneConfig]:
    """One trainer lane per node of `trainer.trainer.nodes`, each knowing its node_rank
    (its torchrun runs that node's ranks; node 0 holds global rank 0)."""
    return [
        trainer.model_copy(update={"trainer": trainer.trainer.model_copy(update={"node_rank": node})})
        for node in range(trainer.trainer.nodes)
    ]


def server_lanes(config: RunConfig) -> list[dict[str, Any]]:
    """The parameters of one server-host run per host other than the rollout lane's."""
    return [{"config": config.model_dump(mode="json"), "host": h} for h in range(1, config.inference.hosts)]


async def supervise(deployment: str, parameters: dict[str, Any], lanes: LanesConfig) -> None:
    """Run `deployment` until one of its runs completes, submitting it again after a
    crash or failure (a cancelled run is not submitted again); a cancelled supervisor
    cancels the lane's run."""
    restarts = 0
    while True:
        run = await run_deployment(deployment, parameters=parameters, timeout=0)
        say(f"[tandem] lane {deployment} submitted as flow run {run.name} ({run.id})")
        state = await _final_state(run.id, lanes.poll_interval_s)
        if state.is_completed():
            return
        if state.is_cancelled() or restarts >= lanes.max_restarts:
            raise RuntimeError(
                f"lane {deployment} ended {state.type.value} ({state.message}) after {restarts} restarts; "
                "see its flow run's logs"
            )
        restarts += 1
        say(
            f"[tandem] lane {deployment} ended {state.type.value}; submitting it again ({restarts}/{lanes.max_restarts})"
        )


async def _final_state(flow_run_id: UUID, poll_s: float) -> State:
    async with get_client() as client:
        try:
            while True:
                state = (await client.read_flow_run(flow_run_id)).state
                if state is not None and state.is_final():
                    return state
                await asyncio.sleep(poll_s)
        except asyncio.CancelledError:
            await client.set_flow_run_state(flow_run_id, Cancelling(), force=True)
            raise
