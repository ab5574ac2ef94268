"""Wall seconds of an update's phases, summed over its micro-batches.

The trainer lane records them with each step (`pack_s`, `forward_s`, `head_s`,
`backward_s`, `optimizer_s`, `export_s`, `publish_s` in the `steps` table's
`extra`), so where an update's time goes is read off the run itself, and
`benchmarks/trainer_step.py` reads the same figures.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator


class PhaseClock:
    """`with clock("forward"): ...` adds the block's wall time to `clock.seconds["forward"]`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        """`{phase}_s` for every phase timed so far."""
        return {f"{phase}_s": s for phase, s in self.seconds.items()}
