"""Validation of `cluster.extra_server_args`, the vLLM server arguments passed through.

A pass-through flag that the configuration also sets would either be overridden or
override it without a trace (argparse keeps the last), so each such flag is refused
with the field that sets it. Anything else is left to vLLM, which names an unknown
flag when the server starts.
"""

from __future__ import annotations

# vLLM flag -> the configuration field that sets it (see launch.server_command).
OWNED_FLAGS: dict[str, str] = {
    "--model": "model_dir",
    "--served-model-name": "served_model_name",
    "--host": "host",
    "--port": "base_port",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--dtype": "dtype",
    "--enforce-eager": "enforce_eager",
    "--kv-cache-memory-bytes": "kv_cache_gb",
    "--worker-extension-cls": "worker_extension",
    "--quantization": "cluster.fp8",
    "--tensor-parallel-size": "cluster.tensor_parallel_size",
    "-tp": "cluster.tensor_parallel_size",
    "--data-parallel-size": "cluster.data_parallel_size",
    "-dp": "cluster.data_parallel_size",
    "--data-parallel-size-local": "cluster.data_parallel_size_local",
    "--data-parallel-address": "cluster.data_parallel_address",
    "--data-parallel-rpc-port": "cluster.data_parallel_rpc_port",
    "--enable-expert-parallel": "cluster.expert_parallel",
    "--all2all-backend": "cluster.all2all_backend",
    "--enable-return-routed-experts": "cluster.routed_expert_capture",
    "--kv-transfer-config": "cluster.disaggregation",
    # Fixed by the pool: token-exact logprobs and weight updates depend on them.
    "--logprobs-mode": "(fixed: processed_logprobs, what the trainer recomputes)",
    "--enable-prefix-caching": "(fixed: on, turns of an episode share their prefix)",
    "--no-enable-prefix-caching": "(fixed: on, turns of an episode share their prefix)",
}


def check_extra_server_args(args: list[str]) -> None:
    """Raise ValueError naming every pass-through flag the configuration owns."""
    clashes = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            clashes.append(f"{flag} (set {OWNED_FLAGS[flag]} instead)")
    if clashes:
        raise ValueError(
            "cluster.extra_server_args: "
            + "; ".join(clashes)
            + ": these flags come from the configuration, and a second copy would silently win or lose"
        )
    if args and not args[0].startswith("-"):
        raise ValueError(
            f"cluster.extra_server_args starts with {args[0]!r}, not a flag: write them as ['--flag', 'value', ...]"
        )
