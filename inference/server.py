"""``gymforge serve``: an OpenAI-compatible chat-completions server for a local checkpoint.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions`` (messages, tools with ``tool_choice`` auto/none,
temperature, top_p, max_tokens, n, seed, stop, logprobs + top_logprobs, stream with SSE chunks and ``[DONE]``,
usage). The official ``openai`` client works against it unchanged. Like vLLM, ``return_token_ids`` adds
``prompt_token_ids`` to the response and ``token_ids`` to every choice (the delta tokens per chunk when streaming),
and ``return_tokens_as_token_ids`` spells logprob tokens ``token_id:N``, so :class:`inference.http_engine.HTTPEngine`
reads exact tokens from either server. Logprobs are those of the sampling distribution (temperature, top-p).

New policy weights (asynchronous RL with ``--engine openai:URL#MODEL``): ``POST /v1/load_weights`` with
``{"path": FILE, "policy_version": N}`` loads a version the trainer published (a safetensors state dict, e.g.
``<run>/weights/v000003.safetensors``; the file must be readable by the server) between generation batches; the
answer, ``/v1/models`` (``policy_version``, ``loaded_versions``) and every completion (``policy_version``) say which
version generated it.

Generation runs on :class:`inference.hf_engine.HFEngine` behind a small batching queue: requests that arrive while
the model is busy are generated together in the next batch (up to ``max_batch_size`` samples).
When tools are offered, a streamed answer's content is sent at the end, with its tool calls, because markup that
may turn into a tool call cannot be streamed as content before it is complete.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inference.engine import Request, SamplingParams
from inference.engine_support import validate_request

if TYPE_CHECKING:
    from fastapi import FastAPI

    from inference.hf_engine import HFEngine, Progress, Row, RowOutput

DEFAULT_MAX_TOKENS = 512

MAX_TOP_LOGPROBS = 20


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat-completions request this server honours; other fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=64)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False


class LoadWeightsRequest(BaseModel):
    """``POST /v1/load_weights``: a published policy version to generate with from now on."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="a safetensors file of the model's full state dict")
    policy_version: int = Field(ge=0, description="the version completions report from now on")


@dataclass
class _Job:
    """One HTTP request's rows; ``events`` receives streaming progress, ``done`` the final samples."""

    rows: list[Row]
    done: asyncio.Future[list[RowOutput]]
    events: asyncio.Queue[tuple[int, RowOutput, int] | None] | None = None
    sent: list[int] = field(default_factory=list)


class Batcher:
    """Collects concurrent requests into engine batches; one batch runs at a time on a worker thread."""

    def __init__(self, engine: HFEngine, max_batch_size: int, wait_s: float = 0.005) -> None:
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self.queue: asyncio.Queue[_Job] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def submit(self, rows: list[Row], stream: bool) -> _Job:
        loop = asyncio.get_running_loop()
        job = _Job(rows, loop.create_future(), asyncio.Queue() if stream else None, [0] * len(rows))
        await self.queue.put(job)
        return job

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self.queue.get()]
            await asyncio.sleep(self.wait_s)
            while not self.queue.empty() and sum(len(j.rows) for j in jobs) < self.max_batch_size:
                jobs.append(self.queue.get_nowait())
            owners = [(job, i) for job in jobs for i in range(len(job.rows))]

            try:
                samples = await asyncio.to_thread(
                    self.engine.generate_rows,
                    [row for job in jobs for row in job.rows],
                    _dispatch(loop, owners),
                )
            except Exception as exc:  # noqa: BLE001 — the error belongs to the requests, not to the worker
                for job in jobs:
                    job.done.set_exception(exc)
                    if job.events is not None:
                        job.events.put_nowait(None)
                continue
            offset = 0
            for job in jobs:
                job.done.set_result(samples[offset : offset + len(job.rows)])
                offset += len(job.rows)


def _dispatch(loop: asyncio.AbstractEventLoop, owners: list[tuple[_Job, int]]) -> Progress:
    """The engine's progress callback (it runs on the worker thread): hand a streaming job its new tokens."""

    def progress(index: int, sample: RowOutput) -> None:
        job, local = owners[index]
        if job.events is not None:  # copy: the sample keeps growing on the worker thread
            start, job.sent[local] = job.sent[local], len(sample.token_ids)
            loop.call_soon_threadsafe(job.events.put_nowait, (local, _copy(sample), start))

    return progress


def _copy(sample: RowOutput) -> RowOutput:
    from inference.hf_engine import RowOutput

    return RowOutput(
        list(sample.token_ids),
        list(sample.logprobs),
        list(sample.top_logprobs),
        sample.finish_reason,
        sample.text,
        sample.policy_version,
    )


class ChatService:
    """Turns OpenAI requests into engine rows and engine samples into OpenAI responses."""

    def __init__(self, engine: HFEngine, name: str, batcher: Batcher) -> None:
        self.engine = engine
        self.name = name
        self.batcher = batcher
        self._bytes: dict[int, bytes] = {}

    # -- request side --------------------------------------------------------------------------------------------

    def prepare(self, body: ChatRequest) -> tuple[list[int], list[Row], bool]:
        from inference.hf_engine import Row

        if body.model is not None and body.model != self.name:
            raise LookupError(f"model {body.model!r} is not served here; this server serves {self.name!r}")
        tools = body.tools if body.tool_choice != "none" else None
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        messages = [_normalize(m) for m in body.messages]
        prompt = self.engine.render(Request(messages, tools or ()))
        room = self.engine.max_positions - len(prompt)
        asked = body.max_completion_tokens or body.max_tokens
        if room < 1 or (asked is not None and asked > room):
            raise ValueError(
                f"prompt of {len(prompt)} tokens + max_tokens={asked or 1} exceeds the model's "
                f"{self.engine.max_positions} positions: shorten the messages or lower max_tokens"
            )
        sampling = (
            SamplingParams(  # unset max_tokens: the default, clipped to the context left (as vLLM does)
                temperature=body.temperature,
                top_p=body.top_p,
                max_tokens=asked or min(DEFAULT_MAX_TOKENS, room),
                n=body.n,
                seed=body.seed,
                stop=stop,
            )
        )
        validate_request(Request(messages, tools or (), sampling))
        top = (body.top_logprobs or 0) if body.logprobs else 0
        rows = [Row(prompt, sampling, sample_index=j, top_logprobs=top) for j in range(body.n)]
        return prompt, rows, bool(tools)

    # -- response side -------------------------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes. A byte-level BPE token may hold part of a UTF-8 character, which decoding it
        alone would turn into U+FFFD; the OpenAI ``bytes`` field exists to carry the exact bytes."""
        if token_id not in self._bytes:
            piece = self.engine.tokenizer.convert_ids_to_tokens(token_id)
            byte_of = _byte_level_alphabet()
            if piece in self.engine.tokenizer.get_added_vocab() or not all(c in byte_of for c in piece):
                self._bytes[token_id] = self.engine.tokenizer.decode([token_id]).encode("utf-8")
            else:
                self._bytes[token_id] = bytes(byte_of[c] for c in piece)
        return self._bytes[token_id]

    def token_entry(self, token_id: int, logprob: float, as_ids: bool) -> dict[str, Any]:
        raw = self.token_bytes(token_id)
        text = f"token_id:{token_id}" if as_ids else raw.decode("utf-8", errors="replace")
        return {"token": text, "logprob": logprob, "bytes": list(raw)}

    def logprobs_json(self, body: ChatRequest, sample: RowOutput, start: int, end: int) -> dict[str, Any] | None:
        if not body.logprobs:
            return None
        as_ids = body.return_tokens_as_token_ids
        content = []
        for k in range(start, end):
            entry = self.token_entry(sample.token_ids[k], sample.logprobs[k], as_ids)
            tops = sample.top_logprobs[k] if k < len(sample.top_logprobs) else []
            entry["top_logprobs"] = [self.token_entry(t, v, as_ids) for t, v in tops]
            content.append(entry)
        return {"content": content}

    def response(
        self, body: ChatRequest, prompt: list[int], samples: list[RowOutput], tools: bool
    ) -> dict[str, Any]:
        choices = []
        for index, sample in enumerate(samples):
            completion = self.engine.completion(sample, prompt, tools)
            message: dict[str, Any] = {"role": "assistant", "content": completion.text}
            if completion.tool_calls:
                message["content"] = completion.text or None
                message["tool_calls"] = [dict(c) for c in completion.tool_calls]
            choice = {
                "index": index,
                "message": message,
                "logprobs": self.logprobs_json(body, sample, 0, len(sample.token_ids)),
                "finish_reason": completion.finish_reason,
            }
            if body.return_token_ids:
                choice["token_ids"] = list(sample.token_ids)
            choices.append(choice)
        out = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": choices,
            "usage": _usage(prompt, samples),
            "policy_version": samples[0].policy_version if samples else self.engine.policy_version,
        }
        if body.return_token_ids:
            out["prompt_token_ids"] = prompt
        return out

    async def stream(
        self, body: ChatRequest, prompt: list[int], job: _Job, tools: bool
    ) -> AsyncIterator[str]:
        """SSE chunks: role first, content deltas as tokens arrive, tool calls and finish reason at the end."""
        if job.events is None:
            raise ValueError("stream() needs a job submitted with stream=True")
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.name,
            "policy_version": self.engine.policy_version,
        }
        stops = [body.stop] if isinstance(body.stop, str) else (body.stop or [])
        # Never send text that a stop string completed later may cut (vLLM's rule: the stop string is not output).
        holdback = max((len(s) for s in stops), default=1) - 1
        sent_text = [0] * len(job.rows)
        finished: dict[int, RowOutput] = {}

        def chunk(index: int, delta: dict[str, Any], **extra: Any) -> str:
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, **extra}
            return f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"

        for index in range(len(job.rows)):
            first = chunk(index, {"role": "assistant", "content": ""})
            if body.return_token_ids and index == 0:  # like vLLM: the prompt ids ride on the first chunk
                first = f"data: {json.dumps({**json.loads(first[6:]), 'prompt_token_ids': prompt})}\n\n"
            yield first
        while len(finished) < len(job.rows):
            event = await job.events.get()
            if event is None:  # the batch failed: report it in-band, the status line is already sent
                message = str(job.done.exception())
                yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error'}})}\n\n"
                break
            index, sample, start = event
            end = len(sample.token_ids)
            extra: dict[str, Any] = {"logprobs": self.logprobs_json(body, sample, start, end)}
            if body.return_token_ids:
                extra["token_ids"] = sample.token_ids[start:end]
            delta: dict[str, Any] = {}
            if sample.finish_reason is None:
                if not tools:
                    text = self.engine.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
                    safe = len(text.rstrip("\ufffd")) - holdback
                    if safe > sent_text[index]:
                        delta["content"] = text[sent_text[index] : safe]
                        sent_text[index] = safe
                yield chunk(index, delta, **extra)
                continue
            finished[index] = sample
            completion = self.engine.completion(sample, prompt, tools)
            if rest := completion.text[sent_text[index] :]:
                delta["content"] = rest
            if completion.tool_calls:
                delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(completion.tool_calls)]
            yield chunk(index, delta, finish_reason=completion.finish_reason, **extra)
        else:
            if (body.stream_options or {}).get("include_usage"):
                usage = _usage(prompt, [finished[i] for i in range(len(job.rows))])
                yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE spells each byte as one printable character; this maps the character back to the byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


def _usage(prompt: Sequence[int], samples: Sequence[RowOutput]) -> dict[str, int]:
    generated = sum(len(s.token_ids) for s in samples)
    return {
        "prompt_tokens": len(prompt),
        "completion_tokens": generated,
        "total_tokens": len(prompt) + generated,
    }


def _normalize(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI content may be a list of parts; the chat template wants a string."""
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return {**message, "content": text}
    if content is None and message.get("role") != "assistant":
        return {**message, "content": ""}
    return message


def create_app(
    model_dir: str | Path,
    served_model_name: str | None = None,
    max_batch_size: int = 8,
    engine: HFEngine | None = None,
) -> FastAPI:
    """The FastAPI app serving ``model_dir`` (or an already loaded ``engine``)."""
    from fastapi import FastAPI
    from fastapi import Request as HTTPRequest
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    from inference.hf_engine import HFEngine

    engine = engine or HFEngine.load(model_dir, max_batch_size=max_batch_size)
    name = served_model_name or Path(model_dir).name
    batcher = Batcher(engine, max_batch_size)
    service = ChatService(engine, name, batcher)
    loaded: list[int] = []  # every version loaded through /v1/load_weights, in order

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="gymforge serve", lifespan=lifespan)

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse(
            {"error": {"message": message, "type": kind, "param": None, "code": status}}, status
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(_: HTTPRequest, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return error(400, details or "invalid request")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "gymforge",
                      "policy_version": engine.policy_version, "loaded_versions": list(loaded)}],
        }

    @app.post("/v1/load_weights", response_model=None)
    async def load_weights(body: LoadWeightsRequest) -> JSONResponse | dict[str, Any]:
        path = Path(body.path)
        if not path.is_file():
            return error(400, f"no such weights file {path} on the server (it must see the run's directory)")
        if body.policy_version != engine.policy_version:
            try:  # on a worker thread: the engine's lock waits for the batch in progress
                await asyncio.to_thread(engine.load_weights, path, body.policy_version)
            except Exception as exc:  # noqa: BLE001 - a state dict of another model, a corrupt file: the client's error
                return error(400, f"cannot load {path}: {str(exc)[:300]}")
            loaded.append(body.policy_version)
        return {"policy_version": engine.policy_version}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> JSONResponse | StreamingResponse | dict[str, Any]:
        try:
            prompt, rows, tools = service.prepare(body)
        except LookupError as exc:
            return error(404, str(exc), "not_found_error")
        except ValueError as exc:
            return error(400, str(exc))
        job = await batcher.submit(rows, stream=body.stream)
        if body.stream:
            return StreamingResponse(service.stream(body, prompt, job, tools), media_type="text/event-stream")
        try:
            samples = await job.done
        except Exception as exc:  # noqa: BLE001 — reported to the client as a server error
            return error(500, f"generation failed: {exc}", "server_error")
        return service.response(body, prompt, samples, tools)

    return app


@contextmanager
def serve_in_background(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn on a thread; yields the API base URL (``http://HOST:PORT/v1``).
    Port 0 picks a free port. Used by tests and benchmarks."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="gymforge-serve", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"gymforge serve failed to start on {host}:{port}")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def serve(
    model_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_batch_size: int = 8,
    served_model_name: str | None = None,
) -> None:
    """Serve ``model_dir`` until interrupted (``gymforge serve``)."""
    import uvicorn

    uvicorn.run(
        create_app(model_dir, served_model_name, max_batch_size), host=host, port=port, log_level="info"
    )
