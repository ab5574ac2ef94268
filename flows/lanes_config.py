"""Where an rl run's two lanes run: in the rl flow's own process tree (the default),
or as deployments that workers on other machines pick up (flows/lanes_apart.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LanesConfig(BaseModel):
    """Lanes on different machines: each lane a deployment of its own work pool, the
    machines sharing only the lake, the Prefect API and HTTP."""

    model_config = ConfigDict(extra="forbid")

    rollout_deployment: str | None = Field(
        None,
        description="Run the rollout lane as this deployment ('rollout-host/remote' in prefect.yaml, work pool "
        "tandem-rollout) on whichever machine's worker picks it up. None: in the rl flow's process.",
    )
    trainer_deployment: str | None = Field(
        None,
        description="Run the trainer lane as this deployment ('trainer-lane/remote', work pool tandem-trainer). "
        "None: a child process of the rl flow.",
    )
    server_deployment: str | None = Field(
        None,
        description="With inference.hosts > 1: run each other host's servers as this deployment ('server-host/remote', "
        "work pool tandem-servers), one flow run per host, on whichever machine's worker picks it up. Needs the two "
        "lanes deployed too.",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        description="Times a lane that crashed or failed is started again: a trainer lane process of the rl flow "
        "(a new child flow run each time), or a deployed lane's run submitted again (any worker of its pool may "
        "take it). Either resumes at its last step.",
    )
    poll_interval_s: float = Field(2.0, gt=0, description="Seconds between checks of a deployed lane's state.")

    @model_validator(mode="after")
    def _both(self) -> LanesConfig:
        if (self.rollout_deployment is None) != (self.trainer_deployment is None):
            raise ValueError(
                "lanes.rollout_deployment and lanes.trainer_deployment: set both (lanes on other machines) or neither"
            )
        return self

    @property
    def deployed(self) -> bool:
        return self.rollout_deployment is not None
