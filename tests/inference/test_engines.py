from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inference_support import tiny_checkpoint

from inference.engine import Request, SamplingParams
from inference.engine_factory import load_engine
from inference.engine_support import assistant_message, make_completion, split_tool_calls

PROMPT = [{"role": "user", "content": "who founded the city on the river?"}]


def req(messages=PROMPT, tools=(), **sampling: Any) -> Request:
    return Request(messages, tools, SamplingParams(**{"max_tokens": 12, **sampling}))


@pytest.fixture(scope="module")
def hf():
    engine = load_engine(f"hf:{tiny_checkpoint()}")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    from inference.server import create_app, serve_in_background

    with serve_in_background(create_app(tiny_checkpoint(), served_model_name="tiny")) as url:
        yield url


# -- the transformers engine ----------------------------------------------------------------------------------------


def test_greedy_is_deterministic_and_respects_max_tokens(hf) -> None:
    [[a]], [[b]] = hf.generate([req(temperature=0)]), hf.generate([req(temperature=0)])
    # the same tokens; their log-probabilities to float32 rounding (CPU kernels may sum in another order on a rerun)
    assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert len(a.token_ids) == 12 and a.finish_reason == "length"
    assert a.prompt_token_ids == tuple(hf.render(req()))
    assert all(lp <= 0 for lp in a.logprobs)


def test_a_batch_of_prompts_of_different_lengths_decodes_as_each_alone(hf) -> None:
    from inference.hf_engine import HFEngine

    prompts = [[{"role": "user", "content": "alpha " * n + "?"}] for n in (1, 9, 4, 17)]
    alone = [hf.generate([req(p, temperature=0)])[0][0].token_ids for p in prompts]
    for prefix_cache in (False, True):  # padded prompts prefilled together, or each prompt apart and decoded together
        engine = HFEngine(hf.model, hf.tokenizer, max_batch_size=4, prefix_cache=prefix_cache)
        batched = engine.generate([req(p, temperature=0) for p in prompts])
        assert [c[0].token_ids for c in batched] == alone  # left padding changes no greedy token


def test_seeded_samples_repeat_and_differ_per_sample(hf) -> None:
    sampled = req(temperature=1.0, seed=7, n=3)
    first = hf.generate(
        [sampled, req(messages=[{"role": "user", "content": "alpha"}], temperature=1.0, seed=1)]
    )
    again = hf.generate([sampled])
    assert [c.token_ids for c in first[0]] == [c.token_ids for c in again[0]]
    assert len({c.token_ids for c in first[0]}) == 3


def test_logprobs_are_those_of_the_sampling_distribution(hf) -> None:
    """Recompute each sampled token's logprob from one full forward pass, with temperature and nucleus applied by
    an independent (sorting, plain Python) implementation."""
    import torch

    temperature, top_p = 0.7, 0.9
    [[c]] = hf.generate([req(temperature=temperature, top_p=top_p, seed=3, max_tokens=16)])
    ids = torch.tensor([list(c.prompt_token_ids) + list(c.token_ids)])
    with torch.no_grad():
        logits = hf.model(input_ids=ids).logits[0].double()
    start = len(c.prompt_token_ids) - 1
    raw_differs = False
    for k, token in enumerate(c.token_ids):
        scaled = logits[start + k] / temperature
        probs = scaled.softmax(-1).tolist()
        order = sorted(range(len(probs)), key=lambda t: -probs[t])
        kept, mass = [], 0.0
        for t in order:
            kept.append(t)
            mass += probs[t]
            if mass >= top_p:
                break
        assert token in kept
        expected = scaled[token] - torch.logsumexp(scaled[kept], -1)
        assert c.logprobs[k] == pytest.approx(float(expected), abs=1e-4)
        raw = logits[start + k].log_softmax(-1)[token]
        raw_differs |= abs(float(raw) - c.logprobs[k]) > 1e-3
    assert raw_differs, "logprobs must not be those of the unscaled model distribution"


@settings(max_examples=40, deadline=None)
@given(
    logits=st.lists(st.floats(-8, 8), min_size=2, max_size=30),
    temperature=st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.5]),
    top_p=st.floats(0.05, 1.0),
)
def test_process_logits_keeps_the_smallest_nucleus(
    logits: list[float], temperature: float, top_p: float
) -> None:
    import torch

    from inference.hf_engine import process_logits

    out = process_logits(torch.tensor([logits]), torch.tensor([temperature]), torch.tensor([top_p]))[
        0
    ].double()
    assert float(out.exp().sum()) == pytest.approx(1.0, abs=1e-5)
    assert torch.isfinite(out[torch.tensor(logits).argmax()])
    if temperature == 0:  # greedy: the unscaled distribution, nothing truncated
        assert torch.allclose(out, torch.tensor(logits).double().log_softmax(-1), atol=1e-5)
        return
    probs = (torch.tensor(logits).double() / temperature).softmax(-1)
    kept = torch.isfinite(out)
    assert float(probs[kept].sum()) >= top_p - 1e-5
    smallest_kept = float(probs[kept].min())
    assert float(probs[kept].sum()) - smallest_kept < top_p + 1e-5


@settings(max_examples=200, deadline=None)
@given(logits=st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=2, max_size=30), top_p=st.floats(0.05, 1.0))
def test_process_logits_is_deterministic_under_tied_logits(logits: list[float], top_p: float) -> None:
    """Tied logits keep their index order in the nucleus: the first most likely token always stays."""
    import torch

    from inference.hf_engine import process_logits

    out = process_logits(torch.tensor([logits]), torch.tensor([0.7]), torch.tensor([top_p]))[0]
    assert torch.isfinite(out[torch.tensor(logits).argmax()])
    again = process_logits(torch.tensor([logits]), torch.tensor([0.7]), torch.tensor([top_p]))[0]
    assert torch.equal(torch.isfinite(out), torch.isfinite(again))


def test_stop_string_cuts_the_text(hf) -> None:
    [[full]] = hf.generate([req(temperature=0)])
    stop = full.text[4:6]
    [[cut]] = hf.generate([req(temperature=0, stop=(stop,))])
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(stop)]
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]


def test_stop_token_ends_the_turn(hf, monkeypatch: pytest.MonkeyPatch) -> None:
    [[full]] = hf.generate([req(temperature=0)])
    ids = full.token_ids
    k = next((i for i in range(1, len(ids)) if ids[i] not in ids[:i]), 0)  # the first token not seen before
    monkeypatch.setattr(hf, "stop_ids", frozenset({ids[k]}))
    [[stopped]] = hf.generate([req(temperature=0)])
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == ids[: k + 1]  # the stop token is kept: the policy must learn to emit it
    assert stopped.text == hf.tokenizer.decode(list(ids[:k]), skip_special_tokens=True)


def test_update_weights_swaps_the_policy_and_its_version(hf) -> None:
    import torch

    original = {k: v.clone() for k, v in hf.model.state_dict().items()}
    [[before]] = hf.generate([req(temperature=0)])
    noise = torch.Generator().manual_seed(0)
    shifted = {k: v + 0.5 * torch.randn(v.shape, generator=noise) for k, v in original.items()}
    try:
        hf.update_weights(shifted, policy_version=7)
        [[after]] = hf.generate([req(temperature=0)])
        assert after.policy_version == 7 and after.logprobs != before.logprobs
    finally:
        hf.update_weights(original, policy_version=0)
    [[restored]] = hf.generate([req(temperature=0)])
    assert restored.token_ids == before.token_ids and restored.policy_version == 0


def test_decoding_computes_the_last_position_logits_only(hf) -> None:
    """Prefill included: sampling needs the next token's distribution, never the vocabulary at every position."""
    widths: list[int] = []
    hook = hf.model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: widths.append(out.shape[1]))
    try:
        hf.generate([req(temperature=0, max_tokens=3), req(messages=[{"role": "user", "content": "a"}], max_tokens=3)])
    finally:
        hook.remove()
    assert widths == [1, 1, 1, 1, 1]  # each prompt prefilled apart, then three decode steps of the two together


def test_a_growing_conversation_prefills_only_what_is_new_and_decodes_as_afresh(hf) -> None:
    """One row at a time, each turn the one before plus messages: the kept cache serves the common prefix, and the
    tokens are those of an engine that prefills every prompt whole."""
    from inference.hf_engine import HFEngine

    conversation = [{"role": "user", "content": "who founded the city on the river?"}]
    turns = []
    for i in range(4):
        turns.append(list(conversation))
        conversation += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": "and then?"}]
    fresh = HFEngine(hf.model, hf.tokenizer, prefix_cache=False)
    reusing = HFEngine(hf.model, hf.tokenizer)
    widths: list[int] = []
    hook = hf.model.get_input_embeddings().register_forward_hook(lambda _m, i, _o: widths.append(i[0].shape[1]))
    try:
        outputs = []
        for turn in turns:
            widths.clear()
            [[completion]] = reusing.generate([req(turn, temperature=0, max_tokens=5)])
            outputs.append((completion, widths[0], len(completion.prompt_token_ids)))
    finally:
        hook.remove()
    for turn, (completion, prefilled, prompt) in zip(turns, outputs, strict=True):
        [[alone]] = fresh.generate([req(turn, temperature=0, max_tokens=5)])
        assert completion.token_ids == alone.token_ids
        assert completion.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert outputs[0][1] == outputs[0][2] - 1  # nothing kept yet: the whole first prompt but the token decoding starts at
    for (_, _, previous), (_, prefilled, prompt) in itertools.pairwise(outputs):
        assert prefilled <= prompt - previous  # the later ones: only the messages added since


def test_prompt_longer_than_the_model_is_rejected(hf) -> None:
    with pytest.raises(ValueError, match="exceeds the model's"):
        hf.generate([req(max_tokens=hf.max_positions)])


@pytest.mark.parametrize(
    ("field", "value"), [("temperature", -1.0), ("top_p", 0.0), ("max_tokens", 0), ("n", 0)]
)
def test_bad_sampling_is_rejected(hf, field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        hf.generate([req(**{field: value})])


# -- tool calls -----------------------------------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
values = st.one_of(st.integers(-1000, 1000), st.text(max_size=20), st.booleans())


@settings(max_examples=40, deadline=None)
@given(
    content=st.text(max_size=30).filter(lambda t: "<tool" not in t),
    calls=st.lists(st.tuples(names, st.dictionaries(names, values, max_size=3)), min_size=1, max_size=3),
)
def test_tool_calls_rendered_by_the_template_parse_back(content: str, calls: list) -> None:
    from inference.tokenizer import load

    tokenizer = load(tiny_checkpoint())
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls],
    }
    prefix = tokenizer.apply_chat_template(PROMPT, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template([*PROMPT, message], tools=TOOLS, tokenize=False)
    generated = full[len(prefix) :].removesuffix("\n").removesuffix("<|im_end|>")
    text, parsed = split_tool_calls(generated)
    assert text == content.rstrip()
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed] == calls
    assert len({c["id"] for c in parsed}) == len(calls)


def test_make_completion_reports_tool_calls_and_keeps_malformed_markup() -> None:
    good = 'Let me look.\n<tool_call>{"name": "lookup", "arguments": {"q": "river"}}</tool_call>'
    c = make_completion(good, [1, 2], [-0.1, -0.2], "stop", 3, [9], parse_tools=True)
    assert c.finish_reason == "tool_calls" and c.text == "Let me look." and c.policy_version == 3
    assert json.loads(c.tool_calls[0]["function"]["arguments"]) == {"q": "river"}
    assert assistant_message(c)["tool_calls"][0]["function"]["name"] == "lookup"
    bad = '<tool_call>{"name": "lookup", "arguments": {"q": </tool_call>'
    b = make_completion(bad, [1], [-0.1], "stop", 0, [9], parse_tools=True)
    assert b.finish_reason == "stop" and b.text == bad and not b.tool_calls
    off = make_completion(good, [1, 2], [-0.1, -0.2], "stop", 0, [9], parse_tools=False)
    assert off.text == good and not off.tool_calls


# -- engine specs ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("hf", "expected hf:DIR"),
        ("tgi:/x", "unknown kind"),
        ("openai:localhost:8000", "openai:http"),
        ("openai:http://127.0.0.1:1/v1", "openai:http"),
        ("hf:/nonexistent/dir", "not a transformers checkpoint"),
    ],
)
def test_bad_specs_say_what_is_expected(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_engine(spec)


def test_vllm_engine_without_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, installed or not
    with pytest.raises(RuntimeError, match=r"gymforge\[vllm\]"):
        load_engine(f"vllm:{tiny_checkpoint()}")


def fake_vllm(monkeypatch: pytest.MonkeyPatch, text: str) -> dict[str, Any]:
    """Test double of the ``vllm`` package (the real one needs CUDA): records what the engine passes to
    ``LLM``, ``SamplingParams`` and ``generate``, and answers every sample with ``text`` as tokens 5, 6, 7."""
    import sys
    import types
    from types import SimpleNamespace

    seen: dict[str, Any] = {}

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            seen["llm"] = kwargs

        def generate(self, prompts, params, use_tqdm=True):
            seen["prompts"], seen["params"] = prompts, params
            return [
                SimpleNamespace(
                    outputs=[
                        SimpleNamespace(
                            index=j,
                            text=text,
                            token_ids=[5, 6, 7],
                            finish_reason="stop",
                            logprobs=[{t: SimpleNamespace(logprob=-0.1 * t)} for t in (5, 6, 7)],
                        )
                        for j in reversed(range(p.kwargs["n"]))
                    ]
                )
                for p in params
            ]

    def record(**kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(kwargs=kwargs)

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, record
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    return seen


def test_vllm_engine_maps_requests_and_outputs(hf, monkeypatch: pytest.MonkeyPatch) -> None:
    call = '<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>'
    seen = fake_vllm(monkeypatch, call)
    engine = load_engine(f"vllm:{tiny_checkpoint()}", policy_version=2, gpu_memory_utilization=0.5)
    request = req(tools=TOOLS, temperature=0.7, top_p=0.9, seed=4, n=2, stop=("END",))
    [[first, second]] = engine.generate([request])
    assert (
        seen["llm"]["logprobs_mode"] == "processed_logprobs" and seen["llm"]["gpu_memory_utilization"] == 0.5
    )
    assert seen["prompts"] == [{"prompt_token_ids": hf.render(request)}]
    sent = seen["params"][0].kwargs
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["n"], sent["logprobs"]) == (
        0.7,
        0.9,
        4,
        2,
        0,
    )
    assert sent["stop"] == ["END"] and hf.tokenizer.eos_token_id in sent["stop_token_ids"]
    assert first.token_ids == (5, 6, 7) and first.logprobs == pytest.approx((-0.5, -0.6, -0.7))
    assert first.finish_reason == "tool_calls" and first.policy_version == 2 and second.tool_calls


# -- the HTTP engine ------------------------------------------------------------------------------------------------


def test_http_engine_matches_the_transformers_engine(hf, served_url: str) -> None:
    http = load_engine(f"openai:{served_url}#tiny", policy_version=5)
    try:
        requests = [
            req(temperature=0),
            req(messages=[{"role": "user", "content": "alpha beta"}], temperature=0),
        ]
        local, remote = hf.generate(requests), http.generate(requests)
        for [a], [b] in zip(local, remote):
            assert b.token_ids == a.token_ids
            assert b.prompt_token_ids == a.prompt_token_ids
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
            # gymforge serve reports the version it holds: that, not the client's own count, is recorded
            assert (b.text, b.finish_reason, b.policy_version) == (a.text, a.finish_reason, 0)
        seeded = req(temperature=0.7, top_p=0.9, seed=11, n=2)
        assert [c.token_ids for c in http.generate([seeded])[0]] == [
            c.token_ids for c in hf.generate([seeded])[0]
        ]
    finally:
        http.close()


def test_http_engine_works_inside_an_event_loop(served_url: str) -> None:
    http = load_engine(f"openai:{served_url}#tiny")
    try:
        [[c]] = asyncio.run(http.agenerate([req(temperature=0, max_tokens=3)]))
        assert len(c.token_ids) == 3
    finally:
        http.close()


class FlakyServer:
    """Test double of an OpenAI server: fails the first ``failures`` requests with ``status`` (or hangs past the
    client timeout when status is 0), then answers a canned completion; records the peak number in flight."""

    def __init__(self, failures: int, status: int) -> None:
        self.failures, self.status = failures, status
        self.calls = self.in_flight = self.peak = 0

    def app(self):
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(body: dict) -> JSONResponse:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                if self.calls <= self.failures:
                    if self.status == 0:
                        await asyncio.sleep(2)
                    return JSONResponse({"error": {"message": "overloaded"}}, self.status or 500)
                await asyncio.sleep(0.02)
                return JSONResponse(_canned(body))
            finally:
                self.in_flight -= 1

        return app


def _canned(body: dict) -> dict:
    entries = [{"token": f"token_id:{t}", "logprob": -0.25, "bytes": [], "top_logprobs": []} for t in (5, 6)]
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
                "logprobs": {"content": entries},
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }


@pytest.mark.parametrize(("failures", "status"), [(2, 503), (3, 500), (1, 429), (1, 0)])
def test_http_engine_retries_transient_failures(failures: int, status: int) -> None:
    from inference.http_engine import HTTPEngine
    from inference.server import serve_in_background

    server = FlakyServer(failures, status)
    with serve_in_background(server.app()) as url:
        engine = HTTPEngine(url, "m", backoff_s=0.01, timeout_s=0.5, max_retries=4)
        try:
            [[c]] = engine.generate([req()])
        finally:
            engine.close()
    assert c.token_ids == (5, 6) and c.logprobs == (-0.25, -0.25) and c.text == "ok"
    assert engine.retries == failures and server.calls == failures + 1


def test_http_engine_retry_delays_double_and_are_bounded() -> None:
    from inference.http_engine import HTTPEngine

    engine = HTTPEngine("http://127.0.0.1:9/v1", "m", backoff_s=1.0, max_backoff_s=3.0, max_retries=4)
    try:
        assert [engine.retry_delay(attempt) for attempt in range(4)] == [1.0, 2.0, 3.0, 3.0]
    finally:
        engine.close()


@pytest.mark.parametrize(("failures", "status", "calls"), [(1, 400, 1), (9, 503, 3)])
def test_http_engine_gives_up_with_the_server_message(failures: int, status: int, calls: int) -> None:
    from inference.http_engine import EngineError, HTTPEngine
    from inference.server import serve_in_background

    server = FlakyServer(failures, status)
    with serve_in_background(server.app()) as url:
        engine = HTTPEngine(url, "m", backoff_s=0.01, max_retries=2)
        try:
            with pytest.raises(EngineError, match=f"HTTP {status} after {calls} attempts.*overloaded"):
                engine.generate([req()])
        finally:
            engine.close()
    assert server.calls == calls


def test_http_engine_limits_concurrency() -> None:
    from inference.http_engine import HTTPEngine
    from inference.server import serve_in_background

    server = FlakyServer(0, 200)
    with serve_in_background(server.app()) as url:
        engine = HTTPEngine(url, "m", max_concurrency=2)
        try:
            assert len(engine.generate([req()] * 8)) == 8
        finally:
            engine.close()
    assert server.calls == 8 and server.peak <= 2


def test_http_engine_reports_an_unreachable_server() -> None:
    import socket

    from inference.http_engine import EngineError, HTTPEngine

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = HTTPEngine(f"http://127.0.0.1:{port}/v1", "m", backoff_s=0.01, max_retries=1)
    try:
        with pytest.raises(EngineError, match="ConnectError after 2 attempts"):
            engine.generate([req()])
    finally:
        engine.close()
