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
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx

from inference.engine import Completion, Request
from inference.engines import make_completion, validate_request

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


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
        async with self._semaphore:
            payload = await self._post(self.request_body(request))
        return self.parse_response(payload, parse_tools=bool(request.tools))

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
            await asyncio.sleep(min(self.max_backoff_s, self.backoff_s * 2**attempt))
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

    def parse_response(self, payload: dict[str, Any], parse_tools: bool) -> list[Completion]:
        prompt_ids = payload.get("prompt_token_ids") or ()
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
                self.policy_version,
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
