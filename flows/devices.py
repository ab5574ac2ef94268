"""The device plan: which GPUs of this node each local vLLM server and the trainer get.

Each local server takes `cluster.tensor_parallel_size` x its data-parallel ranks on
this node, in server order; the trainer takes one GPU per rank (`trainer.processes`).
`inference.devices` and `trainer.devices` fix them; a list left unset is filled from
the node's GPUs in order, the servers first and the trainer after them (from the first
GPU with `trainer.share_devices`). With the lanes on other machines (`lanes.*`) the
rollout host places its servers only; the trainer's host gives torchrun
`trainer.devices`, or leaves its ranks the first GPUs.

The plan is made when the lanes start, against the GPUs this machine has; the plan's
fields go into each lane's configuration, and each process then starts with its own
`CUDA_VISIBLE_DEVICES` (engines/devices.py). On a machine without GPUs the plan is
empty: nothing sets `CUDA_VISIBLE_DEVICES`, and CPU runs are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.devices import device_list
from flows.config import RunConfig
from tasks.progress import say


class DevicePlanError(ValueError):
    """The configured devices do not fit this node's GPUs."""


@dataclass(frozen=True)
class DevicePlan:
    gpus: int  # GPUs this node has
    servers: tuple[tuple[int, ...], ...] = ()  # each local server's GPUs
    trainer: tuple[int, ...] = ()  # one per trainer rank; empty when the trainer runs elsewhere

    def line(self) -> str:
        """One start-up line: which GPUs each server and the trainer get."""
        parts = [f"server {i} -> GPU {device_list(s)}" for i, s in enumerate(self.servers)]
        if self.trainer:
            parts.append(f"trainer ({len(self.trainer)} rank(s)) -> GPU {device_list(self.trainer)}")
        placed = "; ".join(parts) or "nothing placed here"
        return f"[tandem] devices ({self.gpus} GPU(s) on this node): {placed}"

    def apply(self, config: RunConfig) -> RunConfig:
        """`config` with `inference.devices` and (when the trainer runs here) `trainer.devices`
        set to this plan's; unchanged when the node has no GPU."""
        if not self.gpus:
            return config
        update = {}
        if config.inference.local:
            servers = [d for s in self.servers for d in s]
            update["inference"] = config.inference.model_copy(update={"devices": servers})
        if self.trainer:
            update["trainer"] = config.trainer.model_copy(update={"devices": list(self.trainer)})
        return config.model_copy(update=update)


def node_gpus() -> int:
    """GPUs this machine shows to this process (0 without CUDA)."""
    import torch

    return torch.cuda.device_count()


def device_plan(config: RunConfig, gpus: int) -> DevicePlan:
    """The plan of `config` on a node of `gpus` GPUs; DevicePlanError naming the fields when it does not fit."""
    inference, trainer = config.inference, config.trainer
    trainer_here = not config.lanes.deployed
    fixed = {"inference.devices": inference.devices, "trainer.devices": trainer.devices if trainer_here else None}
    if gpus == 0:
        for key, devices in fixed.items():
            if devices is not None:
                raise DevicePlanError(
                    f"{key} = {devices}: this machine has no GPU; leave {key} unset to run on the CPU"
                )
        return DevicePlan(0)
    for key, devices in fixed.items():
        beyond = [d for d in devices or [] if d >= gpus]
        if beyond:
            raise DevicePlanError(
                f"{key} = {devices} names GPU {beyond[0]}, but this node has {gpus} (0-{gpus - 1}): list GPUs it has"
            )
    share = trainer.share_devices
    servers = inference.devices
    if servers is None:
        servers = _first_free(gpus, inference.local_devices, [] if share else fixed["trainer.devices"] or [])
    ranks: list[int] | None = []
    if servers is not None and trainer_here:
        ranks = trainer.devices or _first_free(gpus, trainer.processes, [] if share else servers)
    if servers is None or ranks is None:
        raise DevicePlanError(_shortage(config, gpus))
    k = inference.devices_per_server
    return DevicePlan(gpus, tuple(tuple(servers[i : i + k]) for i in range(0, len(servers), k)), tuple(ranks))


def _first_free(gpus: int, count: int, taken: list[int]) -> list[int] | None:
    """The first `count` GPUs not in `taken`; None when there are fewer."""
    free = [g for g in range(gpus) if g not in taken]
    return free[:count] if len(free) >= count else None


def _shortage(config: RunConfig, gpus: int) -> str:
    inference, trainer = config.inference, config.trainer
    c = inference.cluster
    needs = (
        f"the local servers need {inference.local_devices} ({inference.local_servers} server(s) x "
        f"cluster.tensor_parallel_size {c.tensor_parallel_size} x {inference.devices_per_server // c.tensor_parallel_size}"
        " data-parallel rank(s) on this node)"
    )
    if not config.lanes.deployed:
        needs += f" and the trainer {trainer.processes} (trainer.processes)"
        if not trainer.share_devices:
            needs += ", each on GPUs of its own"
    return (
        f"this node has {gpus} GPU(s): {needs}. Lower those counts, spread the servers over more machines "
        "(inference.hosts), run them elsewhere (inference.server_urls), "
        "or set trainer.share_devices = true for a model small enough for the servers and the trainer to share GPUs"
    )


def planned(config: RunConfig, gpus: int | None = None) -> RunConfig:
    """`config` placed on this node's GPUs (`gpus`: their count, the machine's own when None),
    the plan printed when there are any."""
    plan = device_plan(config, node_gpus() if gpus is None else gpus)
    if plan.gpus:
        say(plan.line())
    return plan.apply(config)
