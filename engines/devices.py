"""Which GPUs a process this code starts may see.

Each vLLM server and the trainer get their own devices through `CUDA_VISIBLE_DEVICES`
in the environment they start with: CUDA reads it once, when a process first touches
a GPU, so it must be set before the process starts, not from inside it. A process
given no devices inherits what its parent sees (on a machine without GPUs, nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_devices(devices: Sequence[int] | None) -> dict[str, str]:
    """The environment entry that shows a process only `devices` (node indices, in order);
    empty for None, so the process sees what its parent sees."""
    if devices is None:
        return {}
    return {VISIBLE: ",".join(str(d) for d in devices)}


def device_list(devices: Sequence[int]) -> str:
    """`0-3` for a run of consecutive indices, else `0,2,5`: the form the start-up line prints."""
    if len(devices) > 2 and list(devices) == list(range(devices[0], devices[0] + len(devices))):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(str(d) for d in devices)
