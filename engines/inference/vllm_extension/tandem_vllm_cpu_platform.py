"""The platform class of `tandem_vllm_platform` (imported by vLLM only once that
plugin has said it applies, so importing vLLM's CPU platform here is safe)."""

from __future__ import annotations

import os
from typing import Any

from vllm.platforms import cpu_platform_plugin
from vllm.utils.import_utils import resolve_obj_by_qualname

# The built-in CPU platform this build would pick (CpuPlatform, or ZenCpuPlatform).
_CpuPlatform: Any = resolve_obj_by_qualname(cpu_platform_plugin())


class ForkedEngineCpuPlatform(_CpuPlatform):
    """vLLM's CPU platform, except that the engine core process is forked."""

    @classmethod
    def check_and_update_config(cls, vllm_config: Any) -> None:
        super().check_and_update_config(vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"  # the parent sets "spawn" unconditionally
