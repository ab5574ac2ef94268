"""A vLLM worker extension: in-place weight reload that is exact on the CPU build.

Loaded inside the vLLM server process only (`--worker-extension-cls`, with this
folder on the server's PYTHONPATH); tandem-rl itself never imports vLLM.

Why: vLLM 0.32's CPU MoE experts pre-pack their weights into a grouped-gemm layout
once, after the first load. Its in-place reload (`reload_weights`) copies the new
checkpoint-format weights into those same tensors but does not pack them again
(the packing step runs only when the MoE kernel is first built), so after a reload
the experts compute with unpacked weights: served logprobs off by 0.07-0.46 nats.
`reload_weights_exact` runs vLLM's own reload, then packs each CPU expert weight
again in place with vLLM's own packing op, so compiled graphs and the kernel keep
the same storage.

`loaded_from` lets the pool confirm, inside an update's pause, that the reload read the
directory whose files it checked against the export beforehand (weight_update.py).
`loaded_weight_digests` digests the files of the directory the worker last loaded (its
start-up model, or the last reload's path): the check of a server restarted onto
weights, before it serves.
"""

from __future__ import annotations

from typing import Any

import torch
from tensor_digest import file_digests


class ExactReloadExtension:
    """Mixed into vLLM's worker class; methods are reachable through /collective_rpc."""

    model_runner: Any
    model_config: Any

    def reload_weights_exact(self, weights_path: str) -> int:
        """Reload from `weights_path` in place; returns how many expert layers were re-packed."""
        experts = _cpu_expert_layers(self.model_runner.get_model())  # refuses before anything is loaded
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        from vllm import _custom_ops as ops

        with torch.no_grad():
            for module, isa in experts:
                for name in ("w13_weight", "w2_weight"):
                    weight = getattr(module, name)
                    weight.copy_(ops.cpu_prepack_moe_weight(weight.data.clone(), isa))
        return len(experts)

    def loaded_from(self) -> str:
        """The directory this worker last loaded its weights from (after a reload, its path)."""
        return str(self.model_config.model)

    def loaded_weight_digests(self) -> dict[str, str]:
        """Digest of every tensor in the safetensors of the directory this worker last loaded
        (vLLM's reload points `model_config.model` at the reloaded path)."""
        return file_digests(self.model_config.model)


def _cpu_expert_layers(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str]]:
    """The MoE layers whose experts run on the CPU grouped-gemm kernel, with its ISA."""
    try:  # absent or unusable on GPU builds: nothing to re-pack there
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:
        return []
    layers = []
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if not isinstance(experts, CPUUnquantizedExperts) or experts._use_zentorch:
            continue
        config = experts.moe_config
        if experts._padded_intermediate_size(config) != config.intermediate_size_per_partition:
            raise RuntimeError(
                "exact reload cannot re-pack experts whose intermediate size the CPU kernel pads; "
                "use weight_update='restart' for this model"
            )
        layers.append((module, experts.isa))
    return layers
