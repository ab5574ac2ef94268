"""A flow run that another process runs, recorded as a child of the current flow run.

The trainer lane runs in its own process (flows/lane_process.py). Called there as a
plain flow it would be a top-level run, unlinked from its `rl` run in the UI. So the
parent creates the child's flow run the way Prefect links a subflow (and the way
`run_deployment` links a deployment run): a task run in the parent flow run stands
for the child, and the child's flow run names it as `parent_task_run_id`. The child
process then runs that flow run with Prefect's own engine (`run_flow`), as a worker
does with the flow runs it picks up.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from prefect import Flow, Task
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext
from prefect.flow_engine import run_flow
from prefect.states import Completed, Crashed, Failed, Pending, Running


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
