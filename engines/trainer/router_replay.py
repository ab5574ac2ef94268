"""Router replay: train on the experts inference actually routed to.

transformers 5 MoE blocks call a router module (`Qwen3MoeTopKRouter` and its kin)
that returns `(router_logits, top_k_weights, top_k_index)`; the experts module then
runs `top_k_index` with `top_k_weights`. A forward hook on each router replaces the
indices with the recorded ones and recomputes the weights from the live logits with
that router's own formula (engines/trainer/routers.py: softmax, softmax over the
chosen, or sigmoid with scaling), so training uses exactly the inference routes while
the router keeps its gradient. No transformers code is changed: the hook is removed
on `close()`. A router class without a known formula is refused when replay is on.

The hook also records the experts each layer used, for expert-load metrics. Layers
are numbered in model order, counting MoE layers only; routes are
`[tokens, layers, top_k]` over the flattened `[rows * row_len]` tokens of the forward.
"""

from __future__ import annotations

import torch
from torch import nn

from engines.trainer.routers import gate_weights_for


def find_routers(model: nn.Module) -> list[nn.Module]:
    """The top-k router modules of `model`, in layer order."""
    return [m for m in model.modules() if type(m).__name__.endswith("Router") and hasattr(m, "top_k")]


class RouterReplay:
    """Forward hooks on every router. `routes=None`: live routing (recorded only).
    `replay=False` only records (any router class); True needs each router's formula."""

    def __init__(self, model: nn.Module, replay: bool = True) -> None:
        self.routers = find_routers(model)
        if not self.routers:
            raise ValueError(f"{type(model).__name__} has no top-k router modules: router replay needs an MoE model")
        self.formulas = [gate_weights_for(r) for r in self.routers] if replay else None
        self.routes: torch.Tensor | None = None  # long [tokens, layers, top_k]
        self.used: list[torch.Tensor | None] = [None] * len(self.routers)  # per layer: long [tokens, top_k]
        self._handles = [r.register_forward_hook(self._hook(i)) for i, r in enumerate(self.routers)]

    @property
    def top_k(self) -> int:
        return int(self.routers[0].top_k)

    def set_routes(self, routes: torch.Tensor | None) -> None:
        """Routes for the next forward: long [tokens, layers, top_k], or None for live routing."""
        if routes is not None and self.formulas is None:
            raise ValueError("this RouterReplay only records routes (replay=False); create it with replay=True")
        if routes is not None and (routes.dim() != 3 or routes.shape[1] != len(self.routers)):
            raise ValueError(
                f"routes have shape {tuple(routes.shape)}; expected [tokens, {len(self.routers)} MoE layers, top_k]"
            )
        self.routes = routes

    def _hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, output: tuple) -> tuple | None:
            logits, weights, index = output
            if self.routes is None:
                self.used[layer] = index.detach()
                return None
            replay = self.routes[:, layer, :].to(index.device)
            if replay.shape != index.shape:
                raise ValueError(
                    f"layer {layer}: recorded routes {tuple(replay.shape)} do not match the forward's "
                    f"{tuple(index.shape)} [tokens, top_k]; routes must cover every fed token"
                )
            w = self.formulas[layer](module, logits, replay)
            self.used[layer] = replay
            return logits, w.to(weights.dtype), replay

        return hook

    def expert_load(self, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Fraction of routed (token, slot) pairs per expert: float [layers, experts],
        over the last forward's tokens (`valid` bool [tokens] leaves out padding)."""
        num_experts = int(self.routers[0].num_experts)
        loads = []
        for used in self.used:
            idx = used if valid is None else used[valid.reshape(-1)]
            counts = torch.bincount(idx.reshape(-1), minlength=num_experts).float()
            loads.append(counts / counts.sum().clamp(min=1))
        return torch.stack(loads)

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> RouterReplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def max_violation(load: torch.Tensor) -> float:
    """Max over layers and experts of load / uniform load - 1 (0 = perfectly balanced)."""
    return float((load * load.shape[-1]).max() - 1)
