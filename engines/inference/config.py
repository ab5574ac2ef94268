"""Configuration of the inference engine: which servers, how they sample, how long an
episode may run, and the cluster options passed to vLLM.

Owns validation only. Whether the installed vLLM build can run an option (FP8,
routed-expert capture on a CPU build) is checked when servers start, in `launch.py`,
because that depends on the machine, not on the config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.tool_calls import (
    chat_templates,
    template_has_thinking_switch,
    template_supports_tools,
    template_tool_format,
)
from engines.tool_formats import ToolFormatName

# KV connectors registered by vLLM 0.32 (vllm/distributed/kv_transfer/kv_connector/factory.py)
# that move KV blocks from a prefill server to a decode server. ExampleConnector goes
# through files on a shared path and is the one the CPU build runs.
KvConnector = Literal[
    "NixlConnector",
    "NixlPullConnector",
    "NixlPushConnector",
    "LMCacheConnectorV1",
    "MooncakeConnector",
    "ExampleConnector",
]
# vLLM 0.32's expert-parallel all-to-all backends (vllm/config/parallel.py, All2AllBackend).
All2AllBackend = Literal[
    "allgather_reducescatter",
    "naive",
    "pplx",
    "deepep_high_throughput",
    "deepep_low_latency",
    "mori_high_throughput",
    "mori_low_latency",
    "nixl_ep",
    "flashinfer_nvlink_two_sided",
]


class SamplingConfig(BaseModel):
    """Default sampling of every model turn; a request may override them."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(
        1.0, ge=0.0, description="Softmax temperature. 1.0 samples the policy itself, as RL needs."
    )
    top_p: float = Field(
        1.0, gt=0.0, le=1.0, description="Nucleus mass. 1.0 keeps the full distribution (unbiased logprobs)."
    )
    max_tokens_per_turn: int = Field(256, ge=1, description="Most tokens the model may generate in one turn.")
    seed: int | None = Field(
        None,
        description="Base of per-episode sampling seeds (a rollout derives each episode's from it, the step, the task and "
        "the sample; turn t adds t). None: unseeded, the RL default, so turns with equal sampling can share one "
        "server request (coalesce_window_ms); a seed per episode gives reproducible samples but no coalescing.",
    )


class EpisodeLimits(BaseModel):
    """When an episode stops even if the model never submits."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(8, ge=1, description="Most model turns per episode.")
    max_total_tokens: int = Field(
        1024,
        ge=2,
        description="Most tokens in the whole conversation (prompt + completions + observations); at most the server's context.",
    )
    wall_seconds: float = Field(
        300.0, gt=0, description="Wall-clock limit of one episode in seconds, environment steps included."
    )
    max_concurrent_episodes: int = Field(16, ge=1, description="Episodes in flight at once across the pool.")
    max_observation_tokens: int | None = Field(
        None,
        ge=8,
        description="Observations longer than this many tokens of the served model are cut (head kept, the cut "
        "stated) so one tool output cannot fill the context. None: a quarter of max_total_tokens (256 of 1,024), "
        "sized from the context the episode has.",
    )

    @model_validator(mode="after")
    def _observation_within_context(self) -> EpisodeLimits:
        if self.max_observation_tokens is not None and self.max_observation_tokens >= self.max_total_tokens:
            raise ValueError(
                f"limits.max_observation_tokens ({self.max_observation_tokens}) is not below limits.max_total_tokens "
                f"({self.max_total_tokens}): one observation would fill the episode; lower it or leave it unset"
            )
        return self

    def observation_tokens(self) -> int:
        """The resolved `max_observation_tokens`."""
        return self.max_observation_tokens or max(8, self.max_total_tokens // 4)


class DisaggregationConfig(BaseModel):
    """Prefill/decode disaggregation: prefill servers compute the prompt's KV and hand it
    to decode servers through a KV connector; the pool routes every request through a
    prefill server first (the router in front)."""

    model_config = ConfigDict(extra="forbid")

    num_prefill_servers: int = Field(1, ge=1, description="Local servers started as KV producers (prefill).")
    num_decode_servers: int = Field(1, ge=1, description="Local servers started as KV consumers (decode).")
    kv_connector: KvConnector = Field(
        "NixlConnector",
        description="vLLM KV connector that moves KV blocks between them. 'ExampleConnector' writes each prompt's KV "
        "to files under shared_storage_path (vLLM's reference connector; the one the CPU build runs).",
    )
    shared_storage_path: str | None = Field(
        None,
        description="ExampleConnector only: the directory both servers read and write KV files in; None: a folder "
        "in the pool's log directory. Holds a folder per prompt, cleared at every weight update.",
    )

    @model_validator(mode="after")
    def _check(self) -> DisaggregationConfig:
        if self.shared_storage_path is not None and self.kv_connector != "ExampleConnector":
            raise ValueError(
                f"cluster.disaggregation.shared_storage_path is read by ExampleConnector only, not by "
                f"{self.kv_connector}: unset it, or set kv_connector = 'ExampleConnector'"
            )
        return self


class ClusterOptions(BaseModel):
    """Options for GPU clusters, passed to every local vLLM server."""

    model_config = ConfigDict(extra="forbid")

    fp8: Literal["off", "quantize", "checkpoint"] = Field(
        "off",
        description="FP8 inference: 'quantize' quantises a bf16 checkpoint on load (--quantization fp8); "
        "'checkpoint' serves an FP8 checkpoint as saved. Needs FP8 kernels (GPU build).",
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs each server shards one model over (tensor parallel).")
    data_parallel_size: int = Field(
        1, ge=1, description="Engine replicas inside each server (vLLM data parallel), used with expert parallel."
    )
    expert_parallel: bool = Field(
        False, description="Spread experts over the tensor/data parallel ranks (--enable-expert-parallel)."
    )
    data_parallel_size_local: int | None = Field(
        None,
        ge=1,
        description="Data-parallel ranks on this node when data_parallel_size spans several nodes "
        "(--data-parallel-size-local); None: all of them here (one node).",
    )
    data_parallel_address: str | None = Field(
        None,
        description="Address of the node with data-parallel rank 0, which every node's engines connect to "
        "(--data-parallel-address). Needed when data_parallel_size_local < data_parallel_size.",
    )
    data_parallel_rpc_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Port of the data-parallel coordination on that node (--data-parallel-rpc-port).",
    )
    all2all_backend: All2AllBackend | None = Field(
        None,
        description="All-to-all kernels of expert parallel (--all2all-backend), e.g. 'deepep_high_throughput' for "
        "prefill-heavy wide EP across nodes; None: vLLM's default.",
    )
    extra_server_args: list[str] = Field(
        default_factory=list,
        description="Further vLLM server arguments passed through as given (e.g. ['--gpu-memory-utilization', "
        "'0.85']). Flags this configuration already sets are refused, naming the field to use instead.",
    )
    routed_expert_capture: bool = Field(
        False,
        description="Return the experts each token was routed to, [tokens, layers, top_k], for router replay in the trainer. Needs the GPU build.",
    )
    disaggregation: DisaggregationConfig | None = Field(
        None, description="Prefill/decode disaggregation; None serves both phases on every server."
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterOptions:
        if self.expert_parallel and self.tensor_parallel_size * self.data_parallel_size < 2:
            raise ValueError(
                "cluster.expert_parallel needs at least 2 ranks: set cluster.tensor_parallel_size or cluster.data_parallel_size >= 2"
            )
        local = self.data_parallel_size_local
        if local is not None and local > self.data_parallel_size:
            raise ValueError(
                f"cluster.data_parallel_size_local ({local}) exceeds cluster.data_parallel_size "
                f"({self.data_parallel_size}): it counts this node's share of the data-parallel ranks"
            )
        if local is not None and local < self.data_parallel_size and self.data_parallel_address is None:
            raise ValueError(
                "cluster.data_parallel_size_local < data_parallel_size spans nodes: set cluster.data_parallel_address "
                "to the address of the node with data-parallel rank 0"
            )
        if self.all2all_backend is not None and not self.expert_parallel:
            raise ValueError(
                f"cluster.all2all_backend={self.all2all_backend!r} is read only with expert parallel: set "
                "cluster.expert_parallel = true, or unset all2all_backend"
            )
        check_extra_server_args(self.extra_server_args)
        return self


class InferenceConfig(BaseModel):
    """Everything the inference engine needs: where the servers are, what they serve,
    how they sample and how long an episode may run."""

    model_config = ConfigDict(extra="forbid")

    model_dir: str = Field(
        ..., description="Hugging Face causal-LM directory (config.json, safetensors, tokenizer) the servers load."
    )
    server_urls: list[str] = Field(
        default_factory=list,
        description="Servers already running (e.g. http://host:8000). Empty: start num_servers local servers.",
    )
    num_servers: int = Field(
        1, ge=1, description="Local servers to start when server_urls is empty (data parallel across processes)."
    )
    hosts: int = Field(
        1,
        ge=1,
        description="Machines the servers run on. The servers (num_servers, or the prefill and decode ones) are "
        "split evenly and in order: host 0 is the rollout lane's own machine, each other host a run of the server-host "
        "deployment (lanes.server_deployment) that starts its share, copies every published version into its own "
        "cache and tells the rollout lane, through the lake, where its servers are and where each version lies.",
    )
    devices: list[int] | None = Field(
        None,
        description="GPUs of this node the local servers run on, in server order: server i takes the i-th "
        "tensor_parallel_size x data-parallel-local of them, as its CUDA_VISIBLE_DEVICES. None: in a run, the "
        "node's first GPUs (the device plan, flows/devices.py); a pool started on its own leaves the servers "
        "every GPU. Refused on vLLM's CPU build.",
    )
    host: str = Field("127.0.0.1", description="Interface local servers listen on.")
    base_port: int = Field(
        0, ge=0, le=65535, description="First port of local servers (then +1 each); 0 picks free ports."
    )
    served_model_name: str = Field("policy", description="Model name the servers answer to.")
    tool_format: Literal["auto", "text", ToolFormatName] = Field(
        "auto",
        description="The action language: 'text' commands (engines/protocol.py) or native tool calls in a model "
        "family's own format: 'hermes' (<tool_call>{...}</tool_call>: Hermes, Qwen2.5/3), 'llama3_json' (Llama "
        "3.1), 'glm45' (GLM-4.5 to 5), 'deepseek_v31', 'kimi_k2', 'qwen3_coder' (engines/tool_formats/, each "
        "as vLLM's parser of that name reads it) or 'harmony' (gpt-oss, as vLLM's harmony parser reads it). With a format the schemas go to the chat template as `tools` "
        "and each call is parsed by the agent loop; it needs a chat template with a tools section. 'auto': the "
        "format the model's chat template writes calls in, 'text' where it writes none (the tiny model's), "
        "decided when the configuration is read.",
    )
    thinking: Literal["off", "on"] | None = Field(
        None,
        description="The chat template's thinking switch (enable_thinking, as Qwen3's; thinking, as "
        "DeepSeek-V3.1's): 'on' or 'off'; None: the template's own default. With thinking a turn is "
        "<think>REASONING</think>ACTION: the reasoning stays in the ids and the loss, only ACTION is parsed. Refused "
        "for a template without the switch.",
    )
    max_model_len: int = Field(1024, ge=16, description="Context length of each server in tokens (prompt + all turns).")
    kv_cache_gb: float = Field(
        1.0,
        gt=0,
        description="KV cache in GB (--kv-cache-memory-bytes; fractions too): per server on vLLM's CPU build, per "
        "GPU on a GPU build.",
    )
    max_num_seqs: int = Field(32, ge=1, description="Sequences one server batches at once (--max-num-seqs).")
    block_size: int | None = Field(
        None,
        ge=16,
        description="KV-cache block size in tokens (--block-size). Prefix caching reuses whole blocks only, and each "
        "turn of an episode re-sends its context: with vLLM's CPU default of 128, a 190-token context reuses one "
        "block and recomputes the rest every turn. None: 32 on vLLM's CPU build (its attention kernels take "
        "multiples of 32), vLLM's own default elsewhere.",
    )
    concurrency_per_server: int = Field(
        32, ge=1, description="Requests the pool keeps in flight per server; more wait in the pool."
    )
    coalesce_window_ms: float = Field(
        5.0,
        ge=0,
        le=1000,
        description="Requests for one server with identical sampling (seed included) go out as one multi-prompt "
        "request once none joined for this many milliseconds (at most 4x this after the first; batching.py): vLLM's "
        "API server costs per request, and on small CPU hosts 64 single-prompt requests ran 2-3x slower than one "
        "64-prompt request. Adds at most 4x this latency to a turn. 0 sends every request alone.",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto",
        description="Weight and activation dtype of the servers. 'auto' follows the checkpoint, except that vLLM's CPU build "
        "downcasts float32 to bfloat16; set 'float32' to match a float32 trainer's logprobs exactly.",
    )
    enforce_eager: bool = Field(True, description="Skip CUDA graphs / compilation: fast start, needed on small CPUs.")
    server_threads: int = Field(1, ge=1, description="OpenMP threads per local CPU server (OMP_NUM_THREADS).")
    startup_timeout_s: float = Field(
        300.0, gt=0, description="Deadline for a local server to become healthy, in seconds."
    )
    request_timeout_s: float = Field(
        600.0, gt=0, description="Deadline of one completion request in seconds (covers waiting in a paused server)."
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="Deadline to open a connection to a server in seconds.")
    max_retries: int = Field(2, ge=0, description="Re-sends of a request after a connection failure or a dead server.")
    max_restarts: int = Field(
        3, ge=0, description="Restarts of one local server that died before the pool gives up on it."
    )
    weight_update: Literal["auto", "reload", "restart"] = Field(
        "auto",
        description="How servers take new weights. 'reload': pause, reload in place, resume (well under a second for the "
        "tiny MoE). 'restart': drain the server's requests, restart it on the new weights (local servers only; tens of "
        "seconds). 'auto': reload.",
    )
    worker_extension: bool = Field(
        True,
        description="Reload through tandem's vLLM worker extension (engines/inference/vllm_extension), which re-packs the "
        "CPU build's MoE experts that vLLM's own reload leaves unpacked. Local servers load it themselves; servers given "
        "by URL must be started with --worker-extension-cls tandem_vllm_extension.ExactReloadExtension and that folder "
        "on their PYTHONPATH. False: vLLM's plain reload_weights (exact on GPU builds, wrong for MoE on the CPU build).",
    )
    verify_checksums: bool = Field(
        True,
        description="After a weight update, check that every server loaded exactly the exported tensors (their "
        "digests, written by the export; needs worker_extension) and, with two or more servers, that all report "
        "identical weight checksums.",
    )
    log_dir: str | None = Field(None, description="Directory for server logs; None: a temporary directory.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Default sampling of a model turn.")
    limits: EpisodeLimits = Field(
        default_factory=EpisodeLimits, description="Turn, token and time limits of an episode."
    )
    cluster: ClusterOptions = Field(default_factory=ClusterOptions, description="GPU-cluster options passed to vLLM.")

    @model_validator(mode="after")
    def _check(self) -> InferenceConfig:
        if self.limits.max_total_tokens > self.max_model_len:
            raise ValueError(
                f"limits.max_total_tokens ({self.limits.max_total_tokens}) exceeds max_model_len ({self.max_model_len}): "
                "lower limits.max_total_tokens or raise max_model_len"
            )
        if self.sampling.max_tokens_per_turn >= self.max_model_len:
            raise ValueError(
                f"sampling.max_tokens_per_turn ({self.sampling.max_tokens_per_turn}) must be below max_model_len ({self.max_model_len})"
            )
        if self.tool_format == "auto" and self.model_dir:  # not in model_fields_set: decided, not given
            object.__setattr__(self, "tool_format", template_tool_format(chat_templates(self.model_dir)))
        if self.tool_format not in ("auto", "text") and template_supports_tools(self.model_dir) is False:
            raise ValueError(
                f"tool_format={self.tool_format!r}: the chat template in {self.model_dir} never references "
                "`tools`, so the tool schemas would not reach the model: use a template with a tools section "
                "(as Qwen/Hermes templates have) or set tool_format = 'text'"
            )
        if self.thinking is not None and template_has_thinking_switch(self.model_dir) is False:
            raise ValueError(
                f"thinking={self.thinking!r}: the chat template in {self.model_dir} has no thinking switch "
                "(it never reads enable_thinking or thinking), so the setting would change nothing; leave thinking "
                "unset"
            )
        for url in self.server_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"server_urls: {url!r} is not an http(s) URL; write it as http://host:port")
        if self.server_urls and self.weight_update == "restart":
            raise ValueError("weight_update='restart' restarts local servers: leave server_urls empty or use 'reload'")
        if self.server_urls and self.cluster.disaggregation is not None:
            raise ValueError(
                "cluster.disaggregation starts its own prefill and decode servers: leave server_urls empty"
            )
        if self.hosts > 1:
            self._check_hosts()
        if self.cluster.disaggregation is not None and self.num_servers != 1:
            raise ValueError(
                f"num_servers ({self.num_servers}) is not read with cluster.disaggregation: set "
                "cluster.disaggregation.num_prefill_servers and num_decode_servers instead"
            )
        if self.devices is not None:
            self._check_devices(self.devices)
        return self

    def _check_hosts(self) -> None:
        """Servers on several machines: started by this code (not given by URL), reloaded
        in place, and the same number on every host."""
        if self.server_urls:
            raise ValueError(
                f"hosts = {self.hosts} starts servers on {self.hosts} machines, and server_urls attaches servers "
                "started elsewhere: set one of them"
            )
        if self.weight_update == "restart":
            raise ValueError(
                f"weight_update='restart' restarts servers from the rollout lane's machine; with hosts = {self.hosts} "
                "the servers of other machines reload in place: use 'reload'"
            )
        if self.host in ("localhost", "::1") or self.host.startswith("127."):
            raise ValueError(
                f"hosts = {self.hosts}: servers listen on host = {self.host!r}, which only their own machine reaches: "
                "set host = '0.0.0.0' (each host's servers are then reached by its host name)"
            )
        if self.total_servers % self.hosts:
            count = "num_servers" if self.cluster.disaggregation is None else "the prefill and decode servers"
            raise ValueError(
                f"hosts = {self.hosts} does not divide {count} ({self.total_servers}): every host starts the same "
                "number of servers"
            )
        d = self.cluster.disaggregation
        if d is not None and d.kv_connector == "ExampleConnector" and d.shared_storage_path is None:
            raise ValueError(
                f"cluster.disaggregation with ExampleConnector exchanges KV as files: with hosts = {self.hosts} set "
                "cluster.disaggregation.shared_storage_path to a folder every host mounts"
            )

    def _check_devices(self, devices: list[int]) -> None:
        """`devices` holds exactly the GPUs the local servers take, each once."""
        if not self.local:
            raise ValueError(
                "devices places the local servers, and with server_urls none is started here: leave devices unset"
            )
        if any(d < 0 for d in devices) or len(set(devices)) < len(devices):
            raise ValueError(f"devices {devices}: list GPU indices of this node (0, 1, ...), each once")
        if len(devices) != self.local_devices:
            raise ValueError(
                f"devices lists {len(devices)} GPU(s) but the local servers need {self.local_devices}: "
                f"{self.local_servers} server(s) x {self.devices_per_server} (cluster.tensor_parallel_size x the "
                "data-parallel ranks on this node); list that many, or leave devices unset"
            )

    @property
    def total_servers(self) -> int:
        """Servers started on all hosts together (prefill and decode ones with disaggregation)."""
        if not self.local:
            return 0
        d = self.cluster.disaggregation
        return self.num_servers if d is None else d.num_prefill_servers + d.num_decode_servers

    @property
    def local_servers(self) -> int:
        """Servers started on one host (this node)."""
        return self.total_servers // self.hosts

    def host_servers(self, host: int) -> range:
        """Indices (in the order of all servers) of the servers host `host` starts."""
        if not 0 <= host < self.hosts:
            raise ValueError(f"host {host} is not one of the {self.hosts} host(s) of inference.hosts")
        k = self.local_servers
        return range(host * k, (host + 1) * k)

    @property
    def devices_per_server(self) -> int:
        """GPUs one local server runs on: its tensor-parallel ranks times its data-parallel ranks on this node."""
        c = self.cluster
        local = c.data_parallel_size if c.data_parallel_size_local is None else c.data_parallel_size_local
        return c.tensor_parallel_size * local

    @property
    def local_devices(self) -> int:
        """GPUs all local servers take together."""
        return self.local_servers * self.devices_per_server

    def server_devices(self, index: int) -> list[int] | None:
        """The GPUs of local server `index`; None when `devices` is unset (it sees every GPU)."""
        if self.devices is None:
            return None
        k = self.devices_per_server
        return self.devices[index * k : (index + 1) * k]

    @property
    def local(self) -> bool:
        """True when the pool starts its own servers."""
        return not self.server_urls

    def check_model_dir(self) -> Path:
        """The model directory, or a clear error when it is missing or not a causal LM."""
        path = Path(self.model_dir)
        config = path / "config.json"
        if not config.is_file():
            raise FileNotFoundError(
                f"model_dir {path}: no config.json; point model_dir at a Hugging Face model directory"
            )
        archs = json.loads(config.read_text()).get("architectures") or []
        if not any(a.endswith("ForCausalLM") for a in archs):
            raise ValueError(
                f"model_dir {path}: architectures {archs} has no *ForCausalLM; the servers need a causal LM"
            )
        if not any(path.glob("*.safetensors")):
            raise FileNotFoundError(
                f"model_dir {path}: no *.safetensors weights; save the model with safe_serialization=True"
            )
        return path


# ---- pass-through server arguments -------------------------------------------
# Validation of `cluster.extra_server_args`, the vLLM server arguments passed through.
#
# A pass-through flag that the configuration also sets would either be overridden or
# override it without a trace (argparse keeps the last), so each such flag is refused
# with the field that sets it. Anything else is left to vLLM, which names an unknown
# flag when the server starts.

# vLLM flag -> the configuration field that sets it (see launch.server_command).
OWNED_FLAGS: dict[str, str] = {
    "--model": "model_dir",
    "--served-model-name": "served_model_name",
    "--host": "host",
    "--port": "base_port",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--block-size": "block_size",
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
    "--uvicorn-log-level": "(fixed: warning, so a server's log holds its engine's lines)",
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
