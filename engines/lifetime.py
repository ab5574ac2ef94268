"""Child processes that do not outlive the process that started them.

A run killed by SIGKILL or the OOM killer runs no exit handler, so the servers and
lanes it started (vLLM, the trainer lane, Prefect's server) would keep running,
holding cores, memory and ports. `exit_with_parent` asks the kernel to send the
child SIGTERM when its parent dies (Linux PR_SET_PDEATHSIG), whatever the cause.

Use as `subprocess.Popen(..., preexec_fn=functools.partial(exit_with_parent, os.getpid()))`
from a thread that lives as long as the child should: the signal fires when the
thread that forked the child ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
# Resolved once here: the child, between fork and exec, only calls it.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def exit_with_parent(parent: int) -> None:
    """In a child before exec: SIGTERM when `parent` dies (no-op off Linux)."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
