"""The OpenAI-compatible HTTP engine: ``openai:URL#MODEL`` against ``vllm serve`` or ``gymforge serve``.

Requests go out concurrently (an asyncio semaphore bounds how many are in flight), each with a timeout, and are
retried with exponential backoff on connection errors, timeouts, 429 and 5xx; any other error status fails at once
with the server's message. The engine is async inside (:meth:`HTTPEngine.agenerate`) with a synchronous facade
(:meth:`HTTPEngine.generate`) that runs on the engine's own event-loop thread, so it works from plain code and from
inside another event loop alike.

Token ids: every request asks for ``return_token_ids`` (vLLM >= 0.10.2 and ``gymforge serve`` answer with
``prompt_token_ids`` and per-choice ``token_ids``) and ``return_tokens_as_token_ids`` (logprob tokens spelled
``token_id:N``, the fallback for older vLLM). For logprobs of the sampling distribution start vLLM with
``--logprobs-mode processed_logprobs``; its default, ``raw_logprobs``, ignores temperature and top-p.

New policy weights (asynchronous RL, :meth:`HTTPEngine.load_weights`) reach the server as the path of a published
safetensors file, which the server must be able to read (the run's directory on a shared file system):

- ``gymforge serve``: ``POST /v1/load_weights {"path", "policy_version"}``; the server reports the version it
  holds in ``/v1/models`` and in every completion (``policy_version``), and that is the version recorded.
- ``vllm serve``: its development endpoints (``VLLM_SERVER_DEV_MODE=1``) with gymforge's worker extension
  (``--worker-extension-cls inference.vllm_engine.WeightLoader``): ``POST /collective_rpc`` runs
  ``load_weights_from_path`` on every worker, then ``POST /reset_prefix_cache`` drops KV computed by old weights.
  A completion records the version loaded when its request was sent.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx

from inference.engine import Completion, Request
from inference.engine_support import EngineUnavailable, make_completion, validate_request

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
VLLM_WEIGHTS = ("start it with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls inference.vllm_engine.WeightLoader "
                "(its weight-update endpoints)")
LOAD_TIMEOUT_S = 600.0  # loading a large checkpoint from disk


def server_root(base_url: str) -> str:
    """The server's root (where vLLM's non-OpenAI endpoints live): the API base without its ``/v1``."""
    base = base_url.rstrip("/")
    return base.removesuffix("/v1")


def probe_endpoint(base_url: str, model: str, *, weights: bool = False, timeout_s: float = 5.0) -> str:
    """The kind of server at ``base_url`` (``gymforge``, ``vllm`` or what ``/v1/models`` calls its owner), checked
    to answer and serve ``model`` and, with ``weights``, to have a weight-update path; else one
    :class:`EngineUnavailable` line naming the endpoint."""
    name = f"openai:{base_url}#{model}"
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/models", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise EngineUnavailable(f"engine {name}: nothing answers at {base_url} ({type(exc).__name__}); start the "
                                "server (gymforge serve, vllm serve) or fix the URL") from None
    if response.status_code != 200:
        raise EngineUnavailable(f"engine {name}: {base_url}/models answered HTTP {response.status_code} "
                                f"({response.text[:120]!r}); is this an OpenAI-compatible API base?")
    try:
        entries = {m["id"]: m for m in response.json()["data"]}
    except (ValueError, KeyError, TypeError):
        raise EngineUnavailable(f"engine {name}: {base_url}/models is not an OpenAI model list") from None
    if model not in entries:
        raise EngineUnavailable(f"engine {name}: the server serves {sorted(entries)}, not {model!r}")
    owner = str(entries[model].get("owned_by", ""))
    if not weights or owner == "gymforge":
        return owner
    if owner == "vllm":
        try:  # the route exists (405 to a GET) only in development mode
            status = httpx.get(f"{server_root(base_url)}/collective_rpc", timeout=timeout_s).status_code
        except httpx.HTTPError:
            status = 0
        if status == 405:
            return owner
        raise EngineUnavailable(f"engine {name}: this vllm serve cannot load new policy weights; {VLLM_WEIGHTS}")
    raise EngineUnavailable(f"engine {name}: a server owned by {owner!r} has no weight-update path gymforge knows; "
                            "RL needs gymforge serve or vllm serve behind openai:, or hf:DIR / vllm:DIR")


class EngineError(RuntimeError):
    """The server answered with an error that retrying will not fix, or with a malformed response."""


class HTTPEngine:
    def __init__(
        self,
        base_url: str,
        model: str,
        policy_version: int = 0,
        max_concurrency: int = 16,
        timeout_s: float = 120.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        api_key: str | None = None,
    ) -> None:
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise ValueError(
                "HTTPEngine: max_concurrency must be >= 1, max_retries >= 0, timeout_s > 0 and backoff_s >= 0"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.policy_version = policy_version
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries = 0  # requests re-sent after a transient failure, for logs and tests
        self._server: str | None = None  # the server's kind, found when weights are first loaded
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="http-engine", daemon=True)
        self._thread.start()
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None

    # -- the Engine interface -------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        return asyncio.run_coroutine_threadsafe(self._generate(requests), self._loop).result()

    async def agenerate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        """The same as :meth:`generate`, awaitable from any event loop."""
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._generate(requests), self._loop)
        )

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._client is not None:
            asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def load_weights(self, path: str, policy_version: int) -> None:
        """Have the server load the published safetensors at ``path`` as ``policy_version``."""
        if self._server is None:
            self._server = probe_endpoint(self.base_url, self.model, weights=True)
        if self._server == "gymforge":
            answer = self._control(f"{self.base_url}/load_weights", {"path": path, "policy_version": policy_version})
            self.policy_version = int(answer["policy_version"])
            return
        root = server_root(self.base_url)
        self._control(f"{root}/collective_rpc", {"method": "load_weights_from_path", "args": [path]})
        self._control(f"{root}/reset_prefix_cache", None)
        self.policy_version = policy_version

    def _control(self, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        response = httpx.post(url, json=body, headers=self.headers, timeout=LOAD_TIMEOUT_S)
        if response.status_code >= 400:
            raise EngineError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json() if response.content else {}

    # -- inside the engine's loop --------------------------------------------------------------------------------

    async def _generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        for request in requests:
            validate_request(request)
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers)
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: Request) -> list[Completion]:
        assert self._semaphore is not None  # created with the client
        version = self.policy_version  # what the server held when the request left (vLLM does not say)
        async with self._semaphore:
            payload = await self._post(self.request_body(request))
        return self.parse_response(payload, parse_tools=bool(request.tools), policy_version=version)

    def retry_delay(self, attempt: int) -> float:
        """Seconds before re-sending after failed attempt ``attempt`` (0-based): doubling, bounded."""
        return min(self.max_backoff_s, self.backoff_s * 2**attempt)

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self._client is not None
        url = f"{self.base_url}/chat/completions"
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await self._client.post(url, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if last:
                    raise EngineError(
                        f"{url}: {type(exc).__name__} after {attempt + 1} attempts: {exc}"
                    ) from exc
            else:
                if response.status_code < 400:
                    return response.json()
                if response.status_code not in RETRY_STATUS or last:
                    raise EngineError(
                        f"{url}: HTTP {response.status_code} after {attempt + 1} attempts: {response.text[:500]}"
                    )
            self.retries += 1
            await asyncio.sleep(self.retry_delay(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    # -- wire format ---------------------------------------------------------------------------------------------

    def request_body(self, request: Request) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "n": s.n,
            "logprobs": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if request.tools:
            body["tools"] = [dict(t) for t in request.tools]
        return body

    def parse_response(self, payload: dict[str, Any], parse_tools: bool,
                       policy_version: int | None = None) -> list[Completion]:
        """Completions of a response; their policy version is the one the server reports (gymforge serve), else
        ``policy_version`` (default: the engine's)."""
        prompt_ids = payload.get("prompt_token_ids") or ()
        version = int(payload.get("policy_version", self.policy_version if policy_version is None else policy_version))
        completions = []
        for choice in sorted(payload.get("choices", []), key=lambda c: c.get("index", 0)):
            entries = (choice.get("logprobs") or {}).get("content")
            if entries is None:
                raise EngineError(
                    f"{self.base_url}: the response carries no logprobs; the server ignored logprobs=true"
                )
            logprobs = [float(e["logprob"]) for e in entries]
            token_ids = choice.get("token_ids")
            if token_ids is None:
                token_ids = [_token_id(e.get("token", "")) for e in entries]
            message = choice.get("message") or {}
            content = message.get("content") or ""
            calls = message.get("tool_calls") or []
            reason = choice.get("finish_reason") or "stop"
            # A server with a tool parser returns parsed calls; one without returns the markup in the content.
            completion = make_completion(
                content,
                token_ids,
                logprobs,
                reason,
                version,
                prompt_ids,
                parse_tools and not calls,
            )
            completions.append(_with_calls(completion, calls) if calls else completion)
        if not completions:
            raise EngineError(f"{self.base_url}: response has no choices: {str(payload)[:300]}")
        return completions


def _token_id(token: str) -> int:
    prefix = "token_id:"
    if not token.startswith(prefix):
        raise EngineError(
            f"the server returned no token ids (logprob token {token!r}): use vLLM >= 0.10.2 or gymforge serve, "
            "which honour return_token_ids"
        )
    return int(token[len(prefix) :])


def _with_calls(completion: Completion, calls: list[dict[str, Any]]) -> Completion:
    normal = [{"id": c.get("id", ""), "type": "function", "function": dict(c["function"])} for c in calls]
    return replace(completion, tool_calls=tuple(normal), finish_reason="tool_calls")
