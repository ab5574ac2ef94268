"""The device plan (flows/devices.py): the node's GPUs split between the local vLLM
servers and the trainer ranks, each process started with its own CUDA_VISIBLE_DEVICES.
The node's GPU count is passed in, so every case runs on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.devices import VISIBLE
from engines.inference import disaggregation, launch
from engines.inference.config import InferenceConfig
from engines.trainer.lane import LaneConfig
from engines.trainer.torchrun import trainer_environment
from flows.config import RunConfig
from flows.config_loader import ConfigError, load_config
from flows.devices import DevicePlan, DevicePlanError, device_plan
from flows.trainer_lane import TrainerProcess, check_inherited_devices
from tests.flows.test_recipes import CONFIGS, load_recipe

pytestmark = pytest.mark.cluster

RECIPE = {p.stem: p for p in CONFIGS}
APART = ["--lanes.rollout_deployment", "rollout-host/remote", "--lanes.trainer_deployment", "trainer-lane/remote"]


def run_config(*overrides: str) -> RunConfig:
    return load_config(RunConfig, None, list(overrides))


# ---- defaults of the recipes -------------------------------------------------


def test_the_qwen_recipe_gives_the_server_4_gpus_and_the_trainer_the_other_4() -> None:
    plan = device_plan(load_recipe(RECIPE["qwen3-30b-a3b-8gpu"]), gpus=8)
    assert plan.servers == ((0, 1, 2, 3),) and plan.trainer == (4, 5, 6, 7)
    assert (
        plan.line() == "[tandem] devices (8 GPU(s) on this node): server 0 -> GPU 0-3; trainer (4 rank(s)) -> GPU 4-7"
    )


def test_the_glm_recipe_puts_one_8_gpu_server_on_each_of_its_4_hosts() -> None:
    glm = load_recipe(RECIPE["glm5-multinode"])
    assert glm.inference.hosts == 4 and glm.inference.total_servers == 4
    assert [list(glm.inference.host_servers(h)) for h in range(4)] == [[0], [1], [2], [3]]  # prefill on 0-1
    # Every host (the rollout lane's and each server host's lane) places its one server; the
    # trainer's 16 nodes are machines of their own.
    plan = device_plan(glm, gpus=8)
    assert plan.servers == (tuple(range(8)),) and plan.trainer == ()
    assert plan.line() == "[tandem] devices (8 GPU(s) on this node): server 0 -> GPU 0-7"
    with pytest.raises(
        DevicePlanError, match=r"has 4 GPU\(s\): the local servers need 8 \(1 server\(s\) x .*inference.hosts"
    ):
        device_plan(glm, gpus=4)


@pytest.mark.parametrize("name", ["tiny", "corpus", "repos"])
def test_cpu_recipes_put_one_server_and_one_trainer_rank_on_gpus_of_their_own(name: str) -> None:
    plan = device_plan(load_recipe(RECIPE[name]), gpus=2)
    assert plan.servers == ((0,),) and plan.trainer == (1,)


def test_without_gpus_the_plan_is_empty_and_no_process_gets_cuda_visible_devices(tmp_path: Path) -> None:
    config = run_config()
    plan = device_plan(config, gpus=0)
    assert plan == DevicePlan(0) and plan.apply(config) is config
    assert VISIBLE not in launch.server_environment(config.inference, cpu_build=True)
    assert VISIBLE not in trainer_environment(config.trainer, base={})
    with pytest.raises(DevicePlanError, match=r"trainer.devices = \[0\]: this machine has no GPU; leave"):
        device_plan(run_config("--trainer.devices", "[0]"), gpus=0)


# ---- refusals ----------------------------------------------------------------


def test_gpus_listed_for_both_lanes_are_refused_naming_both_fields() -> None:
    with pytest.raises(ConfigError, match=r"inference.devices \[0\] and trainer.devices \[0, 1\] both list GPU \[0\]"):
        run_config("--inference.devices", "[0]", "--trainer.devices", "[0, 1]", "--trainer.processes", "2")
    shared = run_config("--inference.devices", "[0]", "--trainer.devices", "[0]", "--trainer.share_devices", "true")
    assert device_plan(shared, gpus=1) == DevicePlan(1, ((0,),), (0,))
    # A one-GPU node: sharing is asked for, never assumed.
    with pytest.raises(DevicePlanError, match="trainer.share_devices = true"):
        device_plan(run_config(), gpus=1)
    assert device_plan(run_config("--trainer.share_devices", "true"), gpus=1) == DevicePlan(1, ((0,),), (0,))
    with pytest.raises(ConfigError, match="trainer.share_devices: with the lanes on other machines"):
        run_config(*APART, "--trainer.share_devices", "true")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--inference.devices", "[0, 1]"], r"devices lists 2 GPU\(s\) but the local servers need 1: 1 server"),
        (
            [
                "--inference.cluster.tensor_parallel_size",
                "2",
                "--inference.num_servers",
                "2",
                "--inference.devices",
                "[0, 1]",
            ],
            r"local servers need 4: 2 server\(s\) x 2",
        ),
        (["--trainer.devices", "[1, 2]"], r"devices lists 2 GPU\(s\) for 1 trainer rank\(s\) \(processes\)"),
        (
            ["--trainer.processes", "2", "--trainer.devices", "[3, 3]"],
            r"devices \[3, 3\]: list GPU indices .* each once",
        ),
        (
            ["--inference.server_urls", '["http://h:8000"]', "--inference.devices", "[0]"],
            "with server_urls none is started",
        ),
    ],
    ids=["inference-count", "inference-tp", "trainer-count", "trainer-twice", "remote-servers"],
)
def test_missing_or_extra_devices_are_refused_at_validation(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_config(*overrides)


def test_more_gpus_than_the_node_has_are_refused() -> None:
    with pytest.raises(DevicePlanError, match=r"inference.devices = \[7\] names GPU 7, but this node has 4 \(0-3\)"):
        device_plan(run_config("--inference.devices", "[7]"), gpus=4)
    four_ranks = run_config("--trainer.processes", "4")
    with pytest.raises(DevicePlanError, match=r"has 4 GPU\(s\): the local servers need 1 .* and the trainer 4"):
        device_plan(four_ranks, gpus=4)
    assert device_plan(four_ranks, gpus=5).trainer == (1, 2, 3, 4)


def test_a_fixed_list_and_a_default_one_never_meet() -> None:
    """The unset side takes the first GPUs the other did not list."""
    plan = device_plan(run_config("--inference.devices", "[0]", "--trainer.devices", "[2]"), gpus=3)
    assert plan == DevicePlan(3, ((0,),), (2,))
    assert device_plan(run_config("--trainer.devices", "[0]"), gpus=2).servers == ((1,),)
    assert device_plan(run_config("--inference.devices", "[1]"), gpus=2).trainer == (0,)


# ---- what the processes start with --------------------------------------------


def test_each_server_starts_with_its_own_gpus() -> None:
    config = run_config("--inference.num_servers", "2", "--inference.cluster.tensor_parallel_size", "2")
    placed = device_plan(config, gpus=6).apply(config)
    assert placed.inference.devices == [0, 1, 2, 3] and placed.trainer.devices == [4]
    envs = [launch.server_environment(placed.inference, cpu_build=False, index=i) for i in range(2)]
    assert [e[VISIBLE] for e in envs] == ["0,1", "2,3"]
    with pytest.raises(launch.UnsupportedOption, match=r"devices=\[0, 1, 2, 3\]: the CPU build runs on no GPU"):
        launch.check_supported(placed.inference, cpu_build=True)


def test_prefill_and_decode_servers_take_their_gpus_in_server_order() -> None:
    cluster = {"tensor_parallel_size": 2, "disaggregation": {"num_prefill_servers": 1, "num_decode_servers": 2}}
    cfg = InferenceConfig(model_dir="m", cluster=cluster, devices=[5, 4, 3, 2, 1, 0])
    roles = disaggregation.server_roles(cfg)
    envs = [launch.server_environment(cfg, cpu_build=False, index=i)[VISIBLE] for i in range(len(roles))]
    assert list(zip(roles, envs)) == [("kv_producer", "5,4"), ("kv_consumer", "3,2"), ("kv_consumer", "1,0")]


def test_the_trainer_process_and_torchrun_start_with_the_trainer_gpus(tmp_path: Path) -> None:
    config = run_config("--trainer.processes", "2", "--trainer.parallelism", "fsdp2")
    placed = device_plan(config, gpus=8).apply(config)
    lane = LaneConfig(model_dir="m", run="r", num_steps=1, trainer=placed.trainer)
    assert trainer_environment(lane.trainer, base={VISIBLE: "0,1,2,3,4,5,6,7"}) == {VISIBLE: "1,2"}
    process = TrainerProcess(lane, tmp_path / "lane.json", max_restarts=0)
    assert process.env[VISIBLE] == "1,2"


def test_a_lane_training_in_its_own_process_checks_the_gpus_it_was_started_with() -> None:
    lane = LaneConfig(model_dir="m", run="r", num_steps=1, trainer={"devices": [3]})
    check_inherited_devices(lane, env={VISIBLE: "3"})
    check_inherited_devices(lane.model_copy(update={"trainer": run_config().trainer}), env={})
    with pytest.raises(RuntimeError, match=r"trainer.devices = \[3\]: .* started with CUDA_VISIBLE_DEVICES=None"):
        check_inherited_devices(lane, env={})
