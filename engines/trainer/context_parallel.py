"""Context parallel for long episodes: the ranks of a cp group split each row's sequence.

torch's `context_parallel` (torch.distributed.tensor.experimental) shards the listed
buffers along their sequence dimension (load-balanced: each rank gets one chunk from
the head and one from the tail, so causal attention work is even) and, while inside,
turns SDPA's flash / efficient / cuDNN attention into ring attention over the cp
group. The forward, loss and backward all run inside. Every per-token tensor of the
micro-batch is sharded the same way, so a rank's loss, metrics and recorded routes
cover exactly its own tokens and their sums over ranks are the row's sums.

Limits (checked in TrainerConfig): CUDA only (CPU attention kernels have no ring
version), packing off (the ring handles plain causal attention, not the block mask
of packed episodes), seq_len a multiple of 2 x cp. Exercised by
`scripts/gpu_check.py --checks trainer_cp`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch.distributed.device_mesh import DeviceMesh

from engines.trainer.packing import Batch


@contextlib.contextmanager
def sharded_sequences(mesh: DeviceMesh, batch: Batch) -> Iterator[Batch]:
    """Inside: `batch`'s tensors cut to this rank's share of each row (a new Batch;
    `batch` itself is left whole) and attention running as ring attention."""
    from torch.distributed.tensor.experimental import context_parallel

    local = Batch(
        *(
            None if t is None else t.clone()
            for t in (
                batch.input_ids,
                batch.position_ids,
                batch.targets,
                batch.loss_mask,
                batch.valid,
                batch.inference_logprobs,
                batch.advantages,
                batch.routes,
            )
        )
    )
    buffers = [t for t in vars(local).values() if t is not None]
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[1] * len(buffers), no_restore_buffers=set(buffers)):
        yield local
