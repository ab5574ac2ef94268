"""Router replay for every MoE router family transformers ships (tiny random models).

Replaying the live routes must change nothing (loss and every gradient, router
parameters included); replaying other routes must weight them with the family's own
formula, written out here by hand from each modeling file.
"""

import pytest
import torch
from torch import nn

from engines.model.families import FAMILIES, build_tiny
from engines.trainer.router_replay import RouterReplay, find_routers


def _hand_weights(family: str, logits: torch.Tensor, routes: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    if family == "qwen3_moe":  # softmax over all experts, top-k renormalised (norm_topk_prob)
        w = torch.softmax(logits, -1).gather(-1, routes)
        return w / w.sum(-1, keepdim=True)
    if family in ("mixtral", "gpt_oss"):  # softmax over the chosen experts' logits
        return torch.softmax(logits.gather(-1, routes), -1)
    # deepseek_v3, glm4_moe: sigmoid, renormalised, times routed_scaling_factor (2.5)
    w = torch.sigmoid(logits).gather(-1, routes)
    return w / (w.sum(-1, keepdim=True) + 1e-20) * 2.5


def _loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids, use_cache=False).logits
    return torch.log_softmax(logits.float(), -1)[..., :-1, :].gather(-1, ids[..., 1:, None]).mean().neg()


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", FAMILIES)
def test_replaying_live_routes_gives_the_same_loss_and_gradients(family):
    model = build_tiny(family)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    plain = _loss(model, ids)
    plain.backward()
    ref = _grads(model)
    model.zero_grad(set_to_none=True)
    with RouterReplay(model) as replay:
        with torch.no_grad():
            _loss(model, ids)
        replay.set_routes(torch.stack(replay.used, 1))  # [tokens, layers, k]
        replayed = _loss(model, ids)
        replayed.backward()
    got = _grads(model)
    torch.testing.assert_close(replayed, plain, rtol=1e-5, atol=1e-5)
    assert set(got) == set(ref)
    for router in find_routers(model):
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_forced_routes_are_weighted_with_the_family_formula(family):
    model = build_tiny(family)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    routers = find_routers(model)
    E, k = int(routers[0].num_experts), int(routers[0].top_k)
    routes = torch.argsort(torch.rand(12, len(routers), E, generator=torch.Generator().manual_seed(2)), -1)[..., :k]
    seen: dict[int, dict[str, torch.Tensor]] = {i: {} for i in range(len(routers))}
    with RouterReplay(model) as replay:
        with torch.no_grad():
            model(input_ids=ids)
        assert not torch.equal(torch.stack(replay.used, 1), routes)
        handles = []
        for i, r in enumerate(routers):  # registered after replay's hooks: they see its output
            handles.append(r.register_forward_hook(lambda m, a, out, i=i: seen[i].update(logits=out[0].detach())))
            experts = _experts_beside(model, r)
            handles.append(
                experts.register_forward_pre_hook(
                    lambda m, args, i=i: seen[i].update(index=args[1].detach(), weights=args[2].detach())
                )
            )
        replay.set_routes(routes)
        _loss(model, ids).backward()
        for h in handles:
            h.remove()
    for i, router in enumerate(routers):
        assert torch.equal(seen[i]["index"], routes[:, i])
        expected = _hand_weights(family, seen[i]["logits"], routes[:, i])
        torch.testing.assert_close(seen[i]["weights"].float(), expected, rtol=1e-6, atol=1e-6)
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def _experts_beside(model: nn.Module, router: nn.Module) -> nn.Module:
    for m in model.modules():
        children = dict(m.named_children())
        if router in children.values() and "experts" in children:
            return children["experts"]
    raise AssertionError("no experts module beside the router")


def test_an_unknown_router_class_is_refused_by_name():
    class NewTopKRouter(nn.Module):
        top_k = 2

    model = nn.Sequential(NewTopKRouter())
    with pytest.raises(ValueError, match="NewTopKRouter has no replay formula"):
        RouterReplay(model)
    RouterReplay(model, replay=False).close()  # recording alone needs no formula
