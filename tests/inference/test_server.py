"""`gymforge serve` against the official `openai` client, unchanged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from inference_support import scripted_engine_class, tiny_checkpoint

MESSAGES = [{"role": "user", "content": "who founded the city on the river?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Search the documents.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]
TOOL_SCRIPT = (
    'I will search.\n<tool_call>{"name": "lookup", "arguments": {"query": "river city"}}</tool_call>'
)


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    from inference.server import create_app, serve_in_background

    with serve_in_background(create_app(tiny_checkpoint(), served_model_name="tiny")) as url:
        yield openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def scripted_client() -> Iterator[openai.OpenAI]:
    """A server whose engine is the scripted test double: it always answers ``TOOL_SCRIPT``."""
    from inference.server import create_app, serve_in_background

    engine = scripted_engine_class().load(tiny_checkpoint())
    engine.script = TOOL_SCRIPT
    with serve_in_background(create_app(tiny_checkpoint(), "scripted", engine=engine)) as url:
        yield openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def chat(client: openai.OpenAI, **kwargs):
    return client.chat.completions.create(
        **{"model": "tiny", "messages": MESSAGES, "max_tokens": 10, **kwargs}
    )


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_chat_with_logprobs(client: openai.OpenAI) -> None:
    response = chat(client, temperature=0, logprobs=True, top_logprobs=3)
    [choice] = response.choices
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    entries = choice.logprobs.content
    assert len(entries) == response.usage.completion_tokens == 10
    assert response.usage.total_tokens == response.usage.prompt_tokens + 10
    for entry in entries:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry.logprob == pytest.approx(tops[0])  # greedy picks the most likely token


def test_sampling_is_seeded_and_n_gives_choices(client: openai.OpenAI) -> None:
    first = chat(client, temperature=1.0, top_p=0.9, seed=5, n=3)
    again = chat(client, temperature=1.0, top_p=0.9, seed=5, n=3)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
    assert first.usage.completion_tokens == 30


def test_streaming_matches_the_plain_answer(client: openai.OpenAI) -> None:
    plain = chat(client, temperature=0, stop=None)
    chunks = list(
        chat(client, temperature=0, stream=True, logprobs=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    streamed_logprobs = [
        e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content
    ]
    assert text == plain.choices[0].message.content
    assert finish == [plain.choices[0].finish_reason]
    assert len(streamed_logprobs) == 10
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_stop_strings(client: openai.OpenAI) -> None:
    full = chat(client, temperature=0).choices[0].message.content
    stop = full[3:5]
    for stream in (False, True):
        if stream:
            chunks = chat(client, temperature=0, stop=[stop], stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = chat(client, temperature=0, stop=stop).choices[0].message.content
        assert text == full[: full.find(stop)]


def test_token_ids_extension(client: openai.OpenAI) -> None:
    response = chat(
        client,
        temperature=0,
        logprobs=True,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    extra = response.model_extra
    choice_ids = response.choices[0].model_extra["token_ids"]
    assert len(extra["prompt_token_ids"]) == response.usage.prompt_tokens
    assert [f"token_id:{t}" for t in choice_ids] == [e.token for e in response.choices[0].logprobs.content]


def test_concurrent_requests_are_batched_without_changing_answers(client: openai.OpenAI) -> None:
    alone = chat(client, temperature=0, logprobs=True).choices[0]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda _: chat(client, temperature=0, logprobs=True).choices[0], range(6)))
    for choice in together:
        assert choice.message.content == alone.message.content
        assert [e.logprob for e in choice.logprobs.content] == pytest.approx(
            [e.logprob for e in alone.logprobs.content], abs=1e-4
        )


def test_tools_render_into_the_prompt_unless_tool_choice_none(client: openai.OpenAI) -> None:
    bare = chat(client, temperature=0).usage.prompt_tokens
    with_tools = chat(client, temperature=0, tools=TOOLS).usage.prompt_tokens
    none = chat(client, temperature=0, tools=TOOLS, tool_choice="none").usage.prompt_tokens
    assert with_tools > bare == none


def test_tool_calls_come_back_in_the_openai_format(scripted_client: openai.OpenAI) -> None:
    response = chat(scripted_client, model="scripted", tools=TOOLS, max_tokens=64)
    [choice] = response.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will search."
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"query": "river city"}
    # The conversation continues with the call and its result.
    follow = [
        *MESSAGES,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Founded by Ada."},
    ]
    assert chat(scripted_client, model="scripted", messages=follow, tools=TOOLS, max_tokens=64).choices


def test_tool_calls_stream(scripted_client: openai.OpenAI) -> None:
    chunks = list(chat(scripted_client, model="scripted", tools=TOOLS, max_tokens=64, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [t for d in deltas for t in (d.tool_calls or [])]
    assert "".join(d.content or "" for d in deltas) == "I will search."
    assert [(t.function.name, json.loads(t.function.arguments)) for t in calls] == [
        ("lookup", {"query": "river city"})
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_without_tools_the_markup_stays_content(scripted_client: openai.OpenAI) -> None:
    choice = chat(scripted_client, model="scripted", max_tokens=64).choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == TOOL_SCRIPT


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"model": "other"}, openai.NotFoundError, "not served here"),
        ({"temperature": -1}, openai.BadRequestError, "temperature"),
        ({"tool_choice": "required", "tools": TOOLS}, openai.BadRequestError, "tool_choice"),
        ({"messages": []}, openai.BadRequestError, "messages"),
        ({"max_tokens": 10**6}, openai.BadRequestError, "exceeds the model"),
    ],
)
def test_bad_requests_get_openai_errors(
    client: openai.OpenAI, kwargs: dict, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        chat(client, **kwargs)


@pytest.mark.parametrize("text", ["née €5 — ok", "日本の川", "plain ascii <tool_call>"])
def test_logprob_bytes_are_the_tokens_own_bytes(text: str) -> None:
    """A token may hold part of a UTF-8 character; the ``bytes`` of the tokens concatenate to the exact text."""
    from inference.hf_engine import HFEngine
    from inference.server import ChatService

    service = ChatService(HFEngine.load(tiny_checkpoint()), "tiny", batcher=None)  # type: ignore[arg-type]
    ids = service.engine.tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > len(text.encode()) // 4  # split into several tokens, some mid-character
    entries = [service.token_entry(t, -1.0, as_ids=False) for t in ids]
    assert b"".join(bytes(e["bytes"]) for e in entries) == text.encode()


@pytest.mark.slow
def test_gymforge_serve_command(tmp_path) -> None:
    """The real command line: `gymforge serve --model DIR --port P` in its own process (about 30 s: the CLI
    imports every room)."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-c",
        "from flows.cli import main; main()",
        "serve",
        "--model",
        str(tiny_checkpoint()),
        "--port",
        str(port),
        "--name",
        "tiny",
    ]
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):  # up to a minute for imports and model load on a busy machine
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert process.poll() is None, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        assert chat(client, temperature=0, max_tokens=4).usage.completion_tokens == 4
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
