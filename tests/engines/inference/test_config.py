"""Configuration validation and the vLLM command line (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from engines.inference import launch
from engines.inference.config import InferenceConfig


def test_total_tokens_above_context_is_refused_with_the_field_names() -> None:
    with pytest.raises(ValidationError, match="limits.max_total_tokens .* exceeds max_model_len"):
        InferenceConfig(model_dir="m", max_model_len=256, limits={"max_total_tokens": 512})


def test_unknown_fields_and_bad_urls_are_refused() -> None:
    with pytest.raises(ValidationError, match="extra"):
        InferenceConfig(model_dir="m", max_len=5)
    with pytest.raises(ValidationError, match="server_urls: 'localhost:8000' is not an http"):
        InferenceConfig(model_dir="m", server_urls=["localhost:8000"])
    with pytest.raises(ValidationError, match="expert_parallel needs at least 2 ranks"):
        InferenceConfig(model_dir="m", cluster={"expert_parallel": True})


def test_model_dir_must_exist_and_be_a_causal_lm(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"model_dir {tmp_path / 'nope'}: no config.json"):
        InferenceConfig(model_dir=str(tmp_path / "nope")).check_model_dir()
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match="no \\*ForCausalLM"):
        InferenceConfig(model_dir=str(tmp_path)).check_model_dir()
    assert InferenceConfig(model_dir=str(tiny_model_dir)).check_model_dir() == tiny_model_dir


def test_missing_vllm_python_names_the_variable_and_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(launch.VLLM_PYTHON_ENV, raising=False)
    with pytest.raises(RuntimeError, match="TANDEM_VLLM_PYTHON is not set: source scripts/setup.sh"):
        launch.vllm_python()
    monkeypatch.setenv(launch.VLLM_PYTHON_ENV, str(tmp_path / "python"))
    with pytest.raises(RuntimeError, match="is not an executable python; rerun scripts/setup.sh"):
        launch.vllm_python()


def test_cpu_build_refuses_gpu_only_options_at_start_up() -> None:
    cfg = InferenceConfig(model_dir="m", cluster={"fp8": "quantize", "routed_expert_capture": True})
    with pytest.raises(launch.UnsupportedOption, match="CPU build .*cluster.fp8='quantize'.*routed_expert_capture"):
        launch.check_supported(cfg, cpu_build=True)
    launch.check_supported(cfg, cpu_build=False)  # the GPU build runs them


def test_cluster_options_become_vllm_flags() -> None:
    cfg = InferenceConfig(
        model_dir="m",
        cluster={
            "fp8": "quantize",
            "tensor_parallel_size": 2,
            "data_parallel_size": 4,
            "expert_parallel": True,
            "routed_expert_capture": True,
            "disaggregation": {"kv_connector": "NixlConnector"},
        },
    )
    argv = launch.server_command(cfg, "py", 8000, cpu_build=False, kv_role="kv_producer")
    joined = " ".join(argv)
    for flag in (
        "--quantization fp8_per_block",
        "--tensor-parallel-size 2",
        "--data-parallel-size 4",
        "--enable-expert-parallel",
        "--enable-return-routed-experts",
        "--kv-cache-memory-bytes",
    ):
        assert flag in joined
    kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    plain = launch.server_command(InferenceConfig(model_dir="m"), "py", 8000, cpu_build=True)
    assert "--quantization" not in plain


def test_the_kv_cache_is_the_configured_bytes_on_both_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU build's VLLM_CPU_KVCACHE_SPACE takes whole GB (0.5 became 1 GB, zeroed at
    every start); the byte flag takes the field as set, and the legacy variable, which
    would override it, is not passed on."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    cfg = InferenceConfig(model_dir="m", kv_cache_gb=0.25)
    for cpu_build in (True, False):
        argv = launch.server_command(cfg, "py", 8000, cpu_build=cpu_build)
        assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(2**28)
        assert "VLLM_CPU_KVCACHE_SPACE" not in launch.server_environment(cfg, cpu_build=cpu_build)


@pytest.mark.cluster
def test_pass_through_server_args_may_not_repeat_configured_flags() -> None:
    with pytest.raises(ValidationError, match=r"--port \(set base_port instead\).*--quantization \(set cluster.fp8"):
        InferenceConfig(model_dir="m", cluster={"extra_server_args": ["--port", "1", "--quantization=fp8"]})
    with pytest.raises(ValidationError, match="not a flag"):
        InferenceConfig(model_dir="m", cluster={"extra_server_args": ["0.8"]})
    cfg = InferenceConfig(model_dir="m", cluster={"extra_server_args": ["--gpu-memory-utilization", "0.8"]})
    assert launch.server_command(cfg, "py", 1, cpu_build=False)[-2:] == ["--gpu-memory-utilization", "0.8"]


@pytest.mark.cluster
def test_every_flag_the_launcher_writes_is_refused_as_a_pass_through() -> None:
    """The pass-through check's table (config.OWNED_FLAGS) covers the launcher's whole
    command line: a flag it writes and the table misses would be silently repeated."""
    from engines.inference.config import OWNED_FLAGS

    cluster = {
        "tensor_parallel_size": 2,
        "data_parallel_size": 4,
        "data_parallel_size_local": 2,
        "data_parallel_address": "10.0.0.1",
        "data_parallel_rpc_port": 13345,
        "expert_parallel": True,
        "all2all_backend": "deepep_low_latency",
        "routed_expert_capture": True,
        "fp8": "quantize",
        "disaggregation": {"kv_connector": "NixlConnector"},
    }
    cfg = InferenceConfig(model_dir="m", kv_cache_gb=1, block_size=64, cluster=cluster)
    argv = launch.server_command(cfg, "py", 8000, cpu_build=False, kv_role="kv_producer", kv_path="/kv")
    written = {a.split("=", 1)[0] for a in argv[3:] if a.startswith("-")}
    assert "--kv-transfer-config" in written and "--data-parallel-rpc-port" in written
    assert written <= OWNED_FLAGS.keys(), sorted(written - OWNED_FLAGS.keys())


@pytest.mark.cluster
def test_wide_expert_parallel_across_nodes() -> None:
    from engines.inference import launch

    cluster = {
        "tensor_parallel_size": 1,
        "data_parallel_size": 16,
        "data_parallel_size_local": 8,
        "data_parallel_address": "10.0.0.1",
        "data_parallel_rpc_port": 13345,
        "expert_parallel": True,
        "all2all_backend": "deepep_low_latency",
    }
    cfg = InferenceConfig(model_dir="m", cluster=cluster)
    head = " ".join(launch.server_command(cfg, "py", 8000, cpu_build=False))
    for flag in (
        "--data-parallel-size 16",
        "--data-parallel-size-local 8",
        "--data-parallel-address 10.0.0.1",
        "--data-parallel-rpc-port 13345",
        "--enable-expert-parallel",
        "--all2all-backend deepep_low_latency",
    ):
        assert flag in head
    second = launch.secondary_node_command(cfg, "py", start_rank=8)
    assert "--headless" in second and second[second.index("--data-parallel-start-rank") + 1] == "8"
    kv = "--kv-cache-memory-bytes"  # every node's engines hold the KV cache the head's do
    assert second[second.index(kv) + 1] == head.split()[head.split().index(kv) + 1] == str(2**30)
    with pytest.raises(ValueError, match="multiple of data_parallel_size_local"):
        launch.secondary_node_command(cfg, "py", start_rank=3)
    with pytest.raises(launch.UnsupportedOption, match="data parallel across nodes.*leave data_parallel_size_local"):
        launch.check_supported(cfg, cpu_build=True)
    with pytest.raises(ValidationError, match="set cluster.data_parallel_address"):
        InferenceConfig(model_dir="m", cluster={**cluster, "data_parallel_address": None})
    with pytest.raises(ValidationError, match="all2all_backend.*read only with expert parallel"):
        InferenceConfig(model_dir="m", cluster={"all2all_backend": "naive"})


@pytest.mark.cluster
def test_disaggregation_options_that_would_be_ignored_are_refused() -> None:
    with pytest.raises(ValidationError, match="num_servers .* is not read with cluster.disaggregation"):
        InferenceConfig(model_dir="m", num_servers=2, cluster={"disaggregation": {}})
    with pytest.raises(ValidationError, match="shared_storage_path is read by ExampleConnector only"):
        InferenceConfig(model_dir="m", cluster={"disaggregation": {"shared_storage_path": "/kv"}})
    nixl = InferenceConfig(model_dir="m", cluster={"disaggregation": {"kv_connector": "NixlConnector"}})
    with pytest.raises(launch.UnsupportedOption, match="kv_connector='NixlConnector'.*use 'ExampleConnector'"):
        launch.check_supported(nixl, cpu_build=True)
    example = InferenceConfig(model_dir="m", cluster={"disaggregation": {"kv_connector": "ExampleConnector"}})
    launch.check_supported(example, cpu_build=True)  # runs on the CPU build (test_disaggregation.py)


def test_block_size_is_the_cpu_kernels_smallest_unless_set() -> None:
    """Prefix caching reuses whole KV blocks: the CPU build gets 32-token blocks (its
    kernels' multiple) instead of vLLM's 128; GPUs keep vLLM's default unless set."""

    def flag(cfg: InferenceConfig, cpu_build: bool) -> str | None:
        argv = launch.server_command(cfg, "py", 8000, cpu_build=cpu_build)
        return argv[argv.index("--block-size") + 1] if "--block-size" in argv else None

    assert flag(InferenceConfig(model_dir="m"), cpu_build=True) == "32"
    assert flag(InferenceConfig(model_dir="m"), cpu_build=False) is None
    assert flag(InferenceConfig(model_dir="m", block_size=64), cpu_build=True) == "64"
    assert flag(InferenceConfig(model_dir="m", block_size=16), cpu_build=False) == "16"
    with pytest.raises(launch.UnsupportedOption, match="block_size=48: .*multiples of 32"):
        launch.check_supported(InferenceConfig(model_dir="m", block_size=48), cpu_build=True)
    with pytest.raises(ValueError, match="--block-size \\(set block_size instead\\)"):
        InferenceConfig(model_dir="m", cluster={"extra_server_args": ["--block-size", "16"]})


def test_one_cpu_rank_runs_its_model_in_the_engine_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv(launch.FORK_ENGINE_ENV, raising=False)
    one = InferenceConfig(model_dir="m")
    assert "--distributed-executor-backend uni" in " ".join(launch.server_command(one, "py", 8000, cpu_build=True))
    env = launch.server_environment(one, cpu_build=True)
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and env[launch.FORK_ENGINE_ENV] == "1"
    two = InferenceConfig(model_dir="m", cluster={"tensor_parallel_size": 2})
    assert "--distributed-executor-backend" not in launch.server_command(two, "py", 8000, cpu_build=True)
    env = launch.server_environment(two, cpu_build=True)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env and launch.FORK_ENGINE_ENV not in env
    assert launch.FORK_ENGINE_ENV not in launch.server_environment(one, cpu_build=False)
    assert "--distributed-executor-backend" not in launch.server_command(one, "py", 8000, cpu_build=False)
    passed = {"extra_server_args": ["--distributed-executor-backend", "mp"]}
    with pytest.raises(launch.UnsupportedOption, match="--distributed-executor-backend"):
        launch.check_supported(InferenceConfig(model_dir="m", cluster=passed), cpu_build=True)
    launch.check_supported(InferenceConfig(model_dir="m", cluster=passed), cpu_build=False)  # vLLM's to choose on GPUs


def test_servers_on_several_hosts_split_evenly_and_refuse_what_cannot_reach_them() -> None:
    pd = {"disaggregation": {"kv_connector": "NixlConnector", "num_prefill_servers": 2, "num_decode_servers": 2}}
    cfg = InferenceConfig(model_dir="m", hosts=4, host="0.0.0.0", cluster={"tensor_parallel_size": 8, **pd})
    assert cfg.total_servers == 4 and cfg.local_servers == 1 and cfg.local_devices == 8
    assert [list(cfg.host_servers(h)) for h in range(4)] == [[0], [1], [2], [3]]  # prefill on hosts 0-1
    with pytest.raises(ValueError, match="host 4 is not one of the 4"):
        cfg.host_servers(4)
    env = launch.server_environment(cfg, cpu_build=False)
    assert env[launch.NIXL_HOST] not in ("localhost", "127.0.0.1", "0.0.0.0")  # reached from the decode hosts
    with pytest.raises(ValidationError, match=r"hosts = 2 does not divide num_servers \(3\)"):
        InferenceConfig(model_dir="m", hosts=2, host="0.0.0.0", num_servers=3)
    with pytest.raises(ValidationError, match="host = '127.0.0.1', which only their own machine reaches"):
        InferenceConfig(model_dir="m", hosts=2, num_servers=2)
    with pytest.raises(ValidationError, match="set one of them"):
        InferenceConfig(model_dir="m", hosts=2, host="0.0.0.0", server_urls=["http://a:8000"])
    with pytest.raises(ValidationError, match="weight_update='restart' .* use 'reload'"):
        InferenceConfig(model_dir="m", hosts=2, host="0.0.0.0", num_servers=2, weight_update="restart")
    with pytest.raises(ValidationError, match="set cluster.disaggregation.shared_storage_path"):
        InferenceConfig(
            model_dir="m", hosts=2, host="0.0.0.0", cluster={"disaggregation": {"kv_connector": "ExampleConnector"}}
        )
