"""The trainer lane of an rl flow run is a child flow run of it, once per start, and a
lane that keeps failing is started again exactly `lanes.max_restarts` times before
the run fails. The lane here fails for real: its starting weights do not exist."""

from __future__ import annotations

import asyncio

import pytest

from engines.trainer.lane import LaneConfig

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


def test_a_failing_trainer_lane_is_restarted_lanes_max_restarts_times_under_its_run(
    prefect_server, tmp_path, monkeypatch
):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.runtime import flow_run
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.lanes_config import LanesConfig
    from flows.prefect_setup import ensure_limits
    from flows.trainer_lane import TrainerProcess
    from tasks.limits import training_limit

    for key, value in prefect_server.items():  # the lane processes read the environment
        monkeypatch.setenv(key, value)
    lanes = LanesConfig(max_restarts=1)
    cfg = LaneConfig(
        model_dir=str(tmp_path / "no-such-weights"),
        storage={"root": str(tmp_path / "lake")},
        run="restarts",
        num_steps=1,
        state_dir=str(tmp_path / "state"),
    )

    @flow(name="rl-stand-in")
    async def parent() -> str:
        proc = TrainerProcess(cfg, tmp_path / "lane.json", max_restarts=lanes.max_restarts)
        with pytest.raises(RuntimeError, match="after 1 restarts"):
            await proc.run()
        return flow_run.id

    with temporary_settings(updates={PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        ensure_limits(cfg.run)
        parent_id = asyncio.run(parent())
        with get_client(sync_client=True) as client:
            children = client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["trainer-lane"])),
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])),
            )
            training_slots = client.read_global_concurrency_limit_by_name(training_limit(cfg.run)).active_slots
    # One child flow run per start (the first and one restart), each run by the lane
    # process itself and failed there, with the parameters the parent gave it.
    assert len(children) == lanes.max_restarts + 1
    assert all(c.state.is_failed() for c in children), [c.state for c in children]
    assert all(c.parameters["config"]["run"] == "restarts" for c in children)
    # The parent held the training slot for every start (a killed lane cannot keep it
    # from its restart) and gave it back when it gave up.
    assert all(c.parameters["slot_held"] for c in children)
    assert training_slots == 0
