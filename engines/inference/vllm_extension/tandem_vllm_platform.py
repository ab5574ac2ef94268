"""A vLLM platform plugin: the CPU platform, with the engine core forked, not spawned.

Found by vLLM through the entry point in `tandem_vllm_extension-0.1.0.dist-info`
(this folder is on the server's PYTHONPATH) and active only where the server's
environment sets TANDEM_VLLM_FORK_ENGINE=1 (`launch.server_environment`: the CPU
build with one rank per server, whose engine core runs the model itself).

Why: vLLM's CPU platform always sets VLLM_WORKER_MULTIPROC_METHOD=spawn, so the API
server's engine-core process starts a fresh interpreter and imports vLLM, torch and
transformers again: about 6 of the 17 CPU-seconds a tiny-model server takes to be
ready on 2 cores. Forked, the engine core inherits those imports. With one rank there
are no worker processes whose OpenMP threads spawn would protect, and nothing in the
API server has run a torch kernel before the fork.
"""

from __future__ import annotations

import os

FORK_ENV = "TANDEM_VLLM_FORK_ENGINE"


def forked_cpu_engine() -> str | None:
    """vLLM's platform detection hook: our platform's qualified name when it applies."""
    if os.environ.get(FORK_ENV) != "1":
        return None
    from vllm.platforms import cpu_platform_plugin

    if cpu_platform_plugin() is None:  # not a CPU build: the built-in detection decides
        return None
    return "tandem_vllm_cpu_platform.ForkedEngineCpuPlatform"
