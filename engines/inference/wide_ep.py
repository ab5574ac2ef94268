"""vLLM's flags of the cluster layout, for one node or many (wide expert parallel).

With `data_parallel_size_local < data_parallel_size` the engines of one server span
nodes: the pool starts the head (data-parallel ranks 0 .. local-1, with the API
server) on its node; every other node runs `secondary_node_command` with its first
rank, and their engines join the head at `data_parallel_address:data_parallel_rpc_port`.
Expert parallel then shards the experts over all the ranks, and the all-to-all
backend moves tokens between nodes.
"""

from __future__ import annotations

from pathlib import Path

from engines.inference.config import ClusterOptions, InferenceConfig


def data_parallel_flags(c: ClusterOptions, start_rank: int = 0) -> list[str]:
    """Flags of the data-parallel layout, empty for a single engine."""
    flags: list[str] = []
    if c.data_parallel_size > 1:
        flags += ["--data-parallel-size", str(c.data_parallel_size)]
    if c.data_parallel_size_local is not None:
        flags += ["--data-parallel-size-local", str(c.data_parallel_size_local)]
    if c.data_parallel_address is not None:
        flags += ["--data-parallel-address", c.data_parallel_address]
    if c.data_parallel_rpc_port is not None:
        flags += ["--data-parallel-rpc-port", str(c.data_parallel_rpc_port)]
    if start_rank:
        flags += ["--data-parallel-start-rank", str(start_rank)]
    return flags


def cluster_flags(c: ClusterOptions, start_rank: int = 0) -> list[str]:
    """Flags of FP8, tensor / data / expert parallel, all-to-all and routed-expert
    capture: the head and every secondary node must agree on them, so both take them
    from here."""
    flags: list[str] = []
    if c.fp8 == "quantize":
        # vLLM 0.32's "fp8" method reads FP8 checkpoints only; online quantisation of a bf16
        # checkpoint is "fp8_per_block", the 128x128 blocks the trainer's FP8 export writes.
        flags += ["--quantization", "fp8_per_block"]
    if c.tensor_parallel_size > 1:
        flags += ["--tensor-parallel-size", str(c.tensor_parallel_size)]
    flags += data_parallel_flags(c, start_rank)
    if c.expert_parallel:
        flags.append("--enable-expert-parallel")
    if c.all2all_backend is not None:
        flags += ["--all2all-backend", c.all2all_backend]
    if c.routed_expert_capture:
        flags.append("--enable-return-routed-experts")
    return flags


def secondary_node_command(cfg: InferenceConfig, python: str, start_rank: int) -> list[str]:
    """The argv another node runs to add its engines (ranks from `start_rank`) to the
    head's server: headless (no API server), the same model and parallel layout."""
    c = cfg.cluster
    local = c.data_parallel_size_local
    if local is None or local >= c.data_parallel_size:
        raise ValueError("secondary nodes exist only when cluster.data_parallel_size_local < data_parallel_size")
    if not 0 < start_rank < c.data_parallel_size or start_rank % local:
        raise ValueError(
            f"start_rank {start_rank}: give a multiple of data_parallel_size_local ({local}) "
            f"below data_parallel_size ({c.data_parallel_size})"
        )
    argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", str(Path(cfg.model_dir).resolve()), "--headless"]
    argv += ["--max-model-len", str(cfg.max_model_len), "--dtype", cfg.dtype]
    if cfg.enforce_eager:
        argv.append("--enforce-eager")
    return argv + cluster_flags(c, start_rank) + list(c.extra_server_args)
