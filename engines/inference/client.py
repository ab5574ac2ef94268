"""Token-in/token-out client of one vLLM server's /v1/completions.

The conversation is kept as token ids, so the prompt is sent as ids and the reply is
read as ids (`return_token_ids`) with the logprob of each sampled id (`logprobs=0`):
no text round trip, no re-tokenisation drift between turns.

Owns: the request body, parsing the reply, timeouts, bounded retries of transient
failures. Below it, one small function per other vLLM route the pool uses (health,
pause and resume, weight reloads and checks). Does not choose servers
(`server_pool.py`) or restart them (`server_fleet.py`).
"""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import httpx
import numpy as np

from engines.inference.types import Completion, SamplingParams


class ServerUnavailable(RuntimeError):
    """The server did not answer (connection refused or reset, timeout, HTTP 5xx)."""


class RequestRejected(ValueError):
    """The server refused the request itself (HTTP 4xx): bad input, not retried."""


def completion_body(
    model: str, prompt_ids: list[int], params: SamplingParams, routed_experts_start: int | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "logprobs": 0,  # the sampled token's logprob only
        "return_token_ids": True,
        "skip_special_tokens": False,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop_token_ids:
        body["stop_token_ids"] = list(params.stop_token_ids)
    if params.allowed_token_ids is not None:
        body["allowed_token_ids"] = list(params.allowed_token_ids)
    if params.ignore_eos:
        body["ignore_eos"] = True
    if routed_experts_start is not None:
        body["routed_experts_prompt_start"] = routed_experts_start
    return body


def decode_routed_experts(encoded: str | None) -> np.ndarray | None:
    """vLLM sends routes as base64 of a .npy array [positions, layers, top_k]."""
    if encoded is None:
        return None
    return np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False)


def parse_choice(choice: dict[str, Any], url: str, weight_version: int) -> Completion:
    token_ids = choice.get("token_ids")
    if token_ids is None:
        raise RequestRejected(f"server {url} returned no token_ids; it must support return_token_ids (vLLM >= 0.10)")
    logprobs = choice["logprobs"]["token_logprobs"] if choice.get("logprobs") else []
    if len(logprobs) != len(token_ids):
        raise RequestRejected(f"server {url} returned {len(logprobs)} logprobs for {len(token_ids)} tokens")
    return Completion(
        token_ids=list(token_ids),
        logprobs=[float(x) for x in logprobs],
        finish_reason=choice.get("finish_reason") or "stop",
        weight_version=weight_version,
        server_url=url,
        routed_experts=decode_routed_experts(choice.get("routed_experts")),
    )


def parse_completions(data: dict[str, Any], url: str, weight_version: int, count: int) -> list[Completion]:
    """One completion per prompt, in prompt order (choice `index` is the prompt's with n=1)."""
    choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
    if [c.get("index", 0) for c in choices] != list(range(count)):
        raise RequestRejected(f"server {url} answered {len(choices)} choices for {count} prompts")
    return [parse_choice(c, url, weight_version) for c in choices]


class CompletionClient:
    """Sends completion requests to any server through one shared connection pool."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        model: str,
        timeout_s: float = 600.0,
        retries: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        self.http = http
        self.model = model
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s

    async def complete(
        self,
        url: str,
        prompt_ids: list[int],
        params: SamplingParams,
        weight_version: int = 0,
        routed_experts_start: int | None = None,
        session_id: str | None = None,
        retries: int | None = None,
    ) -> Completion:
        """Sample one continuation of `prompt_ids` on the server at `url`.

        Retries transport failures and HTTP 5xx up to `retries` times (backoff doubling
        from `backoff_s`), then raises ServerUnavailable; HTTP 4xx raises RequestRejected
        at once with the server's message (e.g. a prompt longer than the context).
        """
        body = completion_body(self.model, prompt_ids, params, routed_experts_start)
        if session_id is not None:
            body["session_id"] = session_id
        data = await self._post(url, body, f"a {len(prompt_ids)}-token prompt", retries)
        return parse_completions(data, url, weight_version, 1)[0]

    async def complete_many(
        self,
        url: str,
        prompts: list[list[int]],
        params: SamplingParams,
        weight_version: int = 0,
        routed_experts_start: int | None = None,
        retries: int | None = None,
    ) -> list[Completion]:
        """Sample one continuation of each prompt in ONE request (vLLM batches its
        prompts at once); same sampling for all, results in prompt order. Errors as
        `complete`; a 4xx rejects the whole request."""
        body = completion_body(self.model, [], params, routed_experts_start)
        body["prompt"] = prompts
        data = await self._post(url, body, f"a batch of {len(prompts)} prompts", retries)
        return parse_completions(data, url, weight_version, len(prompts))

    async def post(self, url: str, body: dict[str, Any], what: str, retries: int | None = None) -> dict[str, Any]:
        """POST a completion `body` built by the caller (`completion_body` plus fields of
        its own); errors as `complete`."""
        return await self._post(url, body, what, retries)

    async def _post(self, url: str, body: dict[str, Any], what: str, retries: int | None) -> dict[str, Any]:
        attempts = 1 + (self.retries if retries is None else retries)
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await self.http.post(f"{url}/v1/completions", json=body, timeout=self.timeout_s)
            except httpx.TransportError as err:  # refused, reset, timed out
                last = err
                continue
            if response.status_code >= 500:
                last = RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
                continue
            if response.status_code >= 400:
                raise RequestRejected(
                    f"server {url} rejected {what}: HTTP {response.status_code}: {response.text[:500]}"
                )
            return response.json()
        raise ServerUnavailable(f"server {url} unavailable after {attempts} attempt(s): {type(last).__name__}: {last}")


# ---- the other vLLM routes ---------------------------------------------------
# One small async function per vLLM HTTP route that the pool uses.
#
# Routes as served by vLLM 0.32 (`vllm/entrypoints/rl/online/api_router.py` and
# `vllm/entrypoints/serve/dev/`); the dev routes need VLLM_SERVER_DEV_MODE=1 on the
# server. Each raises `RouteError` naming the server and the route on a non-2xx answer.


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


async def finished_requests(http: httpx.AsyncClient, url: str) -> int:
    """Requests the server at `url` has finished since it started (its Prometheus
    counter vllm:request_success_total, summed over finish reasons)."""
    response = await http.get(f"{url}/metrics", timeout=10.0)
    response.raise_for_status()
    lines = response.text.splitlines()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:request_success_total")))


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


async def loaded_from(http: httpx.AsyncClient, url: str, timeout_s: float) -> list[str]:
    """Per worker: the directory it last loaded its weights from (our worker extension)."""
    body = {"method": "loaded_from"}
    return (await _call(http, "POST", f"{url}/collective_rpc", json=body, timeout=timeout_s))["results"]


async def loaded_weight_digests(http: httpx.AsyncClient, url: str, timeout_s: float) -> list[dict[str, str]]:
    """Per worker: the digest of every tensor in the files it last loaded (our worker extension)."""
    body = {"method": "loaded_weight_digests"}
    return (await _call(http, "POST", f"{url}/collective_rpc", json=body, timeout=timeout_s))["results"]


async def reset_prefix_cache(http: httpx.AsyncClient, url: str) -> bool:
    """Drop cached KV computed with old weights; False while running requests hold blocks."""
    return bool((await _call(http, "POST", f"{url}/reset_prefix_cache"))["success"])
