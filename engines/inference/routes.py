"""One small async function per vLLM HTTP route that the pool uses.

Routes as served by vLLM 0.32 (`vllm/entrypoints/rl/online/api_router.py` and
`vllm/entrypoints/serve/dev/`); the dev routes need VLLM_SERVER_DEV_MODE=1 on the
server. Each raises `RouteError` naming the server and the route on a non-2xx answer.
"""

from __future__ import annotations

from typing import Any

import httpx


class RouteError(RuntimeError):
    """A vLLM route answered with an error status."""


async def _call(http: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> Any:
    response = await http.request(method, url, **kwargs)
    if response.status_code >= 400:
        raise RouteError(f"{method} {url} -> HTTP {response.status_code}: {response.text[:500]}")
    return response.json() if response.content else None


async def health(http: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await http.get(f"{url}/health", timeout=5.0)).status_code == 200
    except httpx.TransportError:
        return False


async def served_models(http: httpx.AsyncClient, url: str) -> list[str]:
    data = await _call(http, "GET", f"{url}/v1/models")
    return [m["id"] for m in data["data"]]


async def pause(http: httpx.AsyncClient, url: str) -> None:
    """Freeze the scheduler; in-flight requests stay queued and continue on resume."""
    await _call(http, "POST", f"{url}/pause", params={"mode": "keep"})


async def resume(http: httpx.AsyncClient, url: str) -> None:
    await _call(http, "POST", f"{url}/resume")


async def is_paused(http: httpx.AsyncClient, url: str) -> bool:
    return bool((await _call(http, "GET", f"{url}/is_paused"))["is_paused"])


async def reload_weights(
    http: httpx.AsyncClient, url: str, weights_dir: str, timeout_s: float, exact: bool = True
) -> None:
    """Load safetensors from `weights_dir` into the running model, in place (same architecture).

    `exact`: through our worker extension (servers started by the pool load it), which
    re-packs the CPU build's MoE experts after vLLM's reload; else vLLM's plain reload.
    """
    method = "reload_weights_exact" if exact else "reload_weights"
    body = {"method": method, "kwargs": {"weights_path": weights_dir}}
    try:
        await _call(http, "POST", f"{url}/collective_rpc", json=body, timeout=timeout_s)
    except RouteError as err:
        if exact and method in str(err):
            raise RouteError(
                f"{err}\n(server {url} lacks tandem's worker extension: start it with --worker-extension-cls "
                "tandem_vllm_extension.ExactReloadExtension and engines/inference/vllm_extension on its PYTHONPATH, "
                "or set inference.worker_extension=false)"
            ) from err
        raise


async def set_weight_version(http: httpx.AsyncClient, url: str, version: int) -> None:
    await _call(http, "POST", f"{url}/update_weight_version", json={"new_version": str(version)})


async def weight_version(http: httpx.AsyncClient, url: str) -> str:
    return str((await _call(http, "GET", f"{url}/weight_info"))["weight_version"])


async def weight_checksums(http: httpx.AsyncClient, url: str, timeout_s: float) -> dict[str, str]:
    """Per-parameter checksums of the served weights, keyed by rank and name."""
    return (await _call(http, "POST", f"{url}/weight_checker", json={"action": "checksum"}, timeout=timeout_s))[
        "checksums"
    ]


async def loaded_weight_digests(http: httpx.AsyncClient, url: str, timeout_s: float) -> list[dict[str, str]]:
    """Per worker: the digest of every tensor in the files it last loaded (our worker extension)."""
    body = {"method": "loaded_weight_digests"}
    return (await _call(http, "POST", f"{url}/collective_rpc", json=body, timeout=timeout_s))["results"]


async def reset_prefix_cache(http: httpx.AsyncClient, url: str) -> bool:
    """Drop cached KV computed with old weights; False while running requests hold blocks."""
    return bool((await _call(http, "POST", f"{url}/reset_prefix_cache"))["success"])
