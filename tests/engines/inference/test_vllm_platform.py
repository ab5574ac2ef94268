"""The platform plugin of vllm_extension/ is what a local CPU server runs on: found
through its entry point on the server's PYTHONPATH, active for one rank per server
(engine core forked) and for nothing else."""

from __future__ import annotations

import subprocess

import pytest

from engines.inference import launch
from engines.inference.config import InferenceConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# The platform vLLM picks, and the start method its engine core gets once the platform
# has seen a config (CPU only: the GPU platform checks a config against its devices).
PROBE = """
import os
from vllm.platforms import current_platform
print(type(current_platform).__name__)
if current_platform.is_cpu():
    from vllm.config import VllmConfig
    current_platform.check_and_update_config(VllmConfig())
    print(os.environ["VLLM_WORKER_MULTIPROC_METHOD"])
"""


def _platform(env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [launch.vllm_python(), "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.split()


def test_one_rank_servers_fork_their_engine_core_and_others_keep_vllms_spawn() -> None:
    one = InferenceConfig(model_dir="m")
    if not launch.is_cpu_build(launch.vllm_python()):  # the GPU build: the plugin stands aside even when asked
        forced = {**launch.server_environment(one, cpu_build=False), launch.FORK_ENGINE_ENV: "1"}
        assert _platform(forced)[0] != "ForkedEngineCpuPlatform"
        return
    assert _platform(launch.server_environment(one, cpu_build=True)) == ["ForkedEngineCpuPlatform", "fork"]
    two = InferenceConfig(model_dir="m", cluster={"tensor_parallel_size": 2})
    builtin, method = _platform(launch.server_environment(two, cpu_build=True))
    assert builtin != "ForkedEngineCpuPlatform" and method == "spawn"  # CpuPlatform (ZenCpuPlatform on AMD Zen)
