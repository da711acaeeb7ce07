"""The cold-start set: sliding-window perplexity, the reference scorers, teachers that fail, and sft_set end to end
(gated outputs; its SFT export loads with datasets and SFTTrainer tokenizes it with the masks where records say)."""

from __future__ import annotations

import json
import math
import random

import httpx
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inference_support import tiny_checkpoint
from longctx_fixtures import tokenizer_artifact
from midtrain_fixtures import env_trajectories, environments

from data_contracts.gate import validate
from data_contracts.stage import FrameArtifact
from envgen.records import TRAJECTORY
from inference.teacher import Teacher, TeacherError
from inference.testing import ScriptedEngine
from tasks.midtrain.perplexity import OpenAIScorer, sliding_window_score, window_perplexities


def test_window_perplexity_is_the_max_of_window_means() -> None:
    lp = np.log(np.array([0.5, 0.5, 0.5, 0.5, 0.1, 0.1, 0.5, 0.5]))
    windows = window_perplexities(lp, window=4, stride=2)
    assert np.allclose(windows, [2.0, math.exp(-np.mean(lp[2:6])), math.exp(-np.mean(lp[4:8]))])
    assert sliding_window_score(lp, 4, 2) == pytest.approx(math.exp(-np.mean(lp[2:6])))
    # Averaging over the whole sequence dilutes the hard passage; the window score does not.
    assert sliding_window_score(lp, 4, 2) > math.exp(-np.mean(lp))
    assert window_perplexities(lp[:3], window=4, stride=2).tolist() == [pytest.approx(2.0)]


def _server(payload: dict) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, json=payload))


def test_the_openai_scorer_reads_prompt_logprobs_in_both_wire_formats() -> None:
    vllm = {"choices": [{"prompt_logprobs": [None, {"7": {"logprob": -1.0}}, {"3": {"logprob": -2.0}}]}]}
    assert OpenAIScorer("http://x/v1", "m", transport=_server(vllm)).token_logprobs(["abc"])[0].tolist() == [-1, -2]
    echo = {"choices": [{"logprobs": {"token_logprobs": [None, -0.5, -1.5, -9.0]}}]}
    assert OpenAIScorer("http://x/v1", "m", transport=_server(echo)).token_logprobs(["abc"])[0].tolist() == [-0.5, -1.5]
    with pytest.raises(RuntimeError, match="no prompt log-probabilities"):
        OpenAIScorer("http://x/v1", "m", transport=_server({"choices": [{}]})).token_logprobs(["abc"])
    # offsets: vLLM's decoded pieces, or the echo format's text_offset
    pieces = {"choices": [{"prompt_logprobs": [None, {"7": {"logprob": -1.0, "decoded_token": "b"}},
                                               {"3": {"logprob": -2.0, "decoded_token": "c"}}]}]}
    [(_, offsets)] = OpenAIScorer("http://x/v1", "m", transport=_server(pieces)).token_logprobs_at(["abc"])
    assert offsets.tolist() == [1, 2]
    echo["choices"][0]["logprobs"]["text_offset"] = [0, 1, 2, 3]
    [(_, offsets)] = OpenAIScorer("http://x/v1", "m", transport=_server(echo)).token_logprobs_at(["abc"])
    assert offsets.tolist() == [1, 2]
    with pytest.raises(RuntimeError, match="no token offsets"):
        list(OpenAIScorer("http://x/v1", "m", transport=_server(vllm)).token_logprobs_at(["abc"]))  # scored lazily


def test_a_dead_reference_endpoint_is_one_clear_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(RuntimeError, match=r"http://x/v1/completions is unreachable \(ConnectError"):
        OpenAIScorer("http://x/v1", "m", transport=httpx.MockTransport(refuse)).token_logprobs(["abc"])


def test_a_dead_or_garbage_teacher_is_one_clear_error() -> None:
    with pytest.raises(TeacherError, match="openai:http://127.0.0.1:9/v1#m.*unreachable"):
        Teacher("openai:http://127.0.0.1:9/v1#m", retries=0, timeout_s=2)
    with pytest.raises(TeacherError, match="garbage"):
        Teacher("openai:scripted", engine=ScriptedEngine(lambda request, i: ""))


def test_a_teacher_failure_on_one_item_rejects_that_item_only() -> None:
    from envgen.taskgen import TaskSettings
    from tasks.midtrain.synth import sample_task
    from tasks.midtrain.trajectory_stages import EpisodeParams, episode_rows

    def policy(request, index):  # rewrites every text, but drops the values of the request of the second item
        prompt = request.messages[-1]["content"]
        text = prompt.rsplit(": ", 1)[-1] if ": " in prompt else "hello there"
        return "Hi, please help me." if "customer writes" in prompt and "ITEM-2" in str(request.messages) else text

    items = []
    for i, env in enumerate(environments()[:3]):
        ep = sample_task(env, random.Random(i), 1, 2, TaskSettings(inline_fact_prob=1.0), "x")
        ep.task["description"] += " ITEM-2" if i == 1 else ""
        items.append((f"item-{i}", ep, {"rng": random.Random(i)}))
    teacher = Teacher("openai:scripted", engine=ScriptedEngine(policy))
    rows, rejected = episode_rows(items, EpisodeParams(distractor_tools=2), "midtrain_env", lambda m, t: 100, teacher)
    assert [r["id"] for r in rows] == ["item-0", "item-2"]
    assert rejected == [{"id": "item-1", "reason": rejected[0]["reason"]}]
    assert rejected[0]["reason"].startswith("teacher: request text drops")


@pytest.mark.slow
def test_sft_set_end_to_end_and_its_export_tokenizes_with_the_masks_the_records_say(tmp_path) -> None:
    import tasks.midtrain.midtrain_reason
    from tasks.midtrain.sft_set import ROUTES, sft_set

    env = env_trajectories()
    inputs = {"midtrain_env": FrameArtifact({"trajectories": env}), "tokenizer": tokenizer_artifact()}
    reason = tasks.midtrain.midtrain_reason.midtrain_reason.run(
        inputs, tasks.midtrain.midtrain_reason.midtrain_reason.parse_params({}), "t")["trajectories"]
    inputs["midtrain_reason"] = FrameArtifact({"trajectories": reason})
    for name in ROUTES:
        inputs.setdefault(name, FrameArtifact({"trajectories": TRAJECTORY.frame()}))
    inputs["tiny_policy"] = FrameArtifact({}, directory=tiny_checkpoint())
    from flows.profiles import load_profile

    # The tiny profile's settings; k below its 32, so a selection happens among the fixture's few candidates.
    params = sft_set.parse_params({**load_profile("tiny")["sft_set"], "k": 10})
    out = sft_set.run(inputs, params, "t")
    for name, contract in sft_set.outputs.items():
        report = validate("sft_set", name, out[name], contract, "t")
        assert report.passed, report.summary()
    selected, scores = out["trajectories"], out["scores"]
    assert selected.height == 10
    from envgen.trajectory_checks import verify_row

    # every row carries its environment database again (rows travel without it inside the stage)
    assert all(verify_row(r) is None for r in selected.iter_rows(named=True))
    assert out["rejected"].filter(pl.col("verifier") == "execution")["env_db"].null_count() == 0
    assert set(scores.filter(pl.col("status") == "selected")["id"]) == set(selected["id"])
    assert scores.filter(pl.col("status") == "selected")["pick"].sort().to_list() == list(range(10))
    summary = dict(zip(out["summary"]["name"], out["summary"]["value"], strict=True))
    # The default covers its candidates at least as well as a random pick of the same size, on its own measure
    # (the covering radius) and on the ones it never sees (the mean distance, the domains).
    for measure in ("coverage_max_distance", "coverage_mean_distance"):
        assert summary[measure] <= summary[f"{measure}_random"] + 1e-9, measure
    assert summary["coverage_domains"] >= summary["coverage_domains_random"]
    # The default reference, cross-fitted on the candidates, predicts their trained tokens better than guessing.
    assert summary["reference_mean_nll"] < summary["uniform_nll"]
    assert 0 < summary["coverage_bigrams_random"] <= 1 and 0 < summary["coverage_domains"] <= 1

    # The random baseline: the same size from every route, drawn by the seed (the kcg_selection experiment's arm).
    randomly = sft_set.run(inputs, sft_set.parse_params({**params.model_dump(), "selection": "random"}), "t")
    by_route = {name: sorted(o["trajectories"]["source"].value_counts().rows()) for name, o in (("kcg", out),
                                                                                                ("random", randomly))}
    assert by_route["random"] == by_route["kcg"]
    assert randomly["scores"].filter(pl.col("status") == "selected")["pick"].sort().to_list() == list(range(10))

    from flows.export import sft_frame

    # A failed try (a masked turn) among the exported rows, so the masks are exercised whichever rows KCG picks.
    def masked(row: dict) -> bool:
        return any(m["role"] == "assistant" and not t for m, t in zip(json.loads(row["messages"]), row["train"]))

    retried = [r["id"] for r in env.iter_rows(named=True) if masked(r) and r["tokens"] <= params.max_tokens
               and r["id"] not in set(selected["id"])]
    exported = pl.concat([selected, env.filter(pl.col("id") == retried[0]).select(selected.columns)])
    path = tmp_path / "sft.parquet"
    sft_frame(exported).write_parquet(path)
    _tokenizes_with_masks(path, exported, tmp_path)


def _tokenizes_with_masks(path, selected: pl.DataFrame, tmp_path) -> None:
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from tasks.tokenizer import resolve_tokenizer

    data = load_dataset("parquet", data_files=str(path), split="train")
    assert data.column_names[:2] == ["id", "source"] and {"messages", "tools"} <= set(data.column_names)
    tok_dir = tmp_path / "tok"
    resolve_tokenizer("default", {"tokenizer": tokenizer_artifact()}).save_pretrained(tok_dir)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    config = SFTConfig(output_dir=str(tmp_path / "out"), assistant_only_loss=True, bf16=False, fp16=False,
                       use_cpu=True, report_to="none", max_length=None, activation_checkpointing=False)
    trainer = SFTTrainer(model=str(tiny_checkpoint()), args=config, train_dataset=data, processing_class=tok)
    masked_turns = 0
    for example, row in zip(trainer.train_dataset, selected.iter_rows(named=True), strict=True):
        labels = np.array(example["labels"] if "labels" in example else example["input_ids"])
        if "assistant_masks" in example:
            labels = np.where(np.array(example["assistant_masks"]) == 1, labels, -100)
        trained = labels != -100
        # One labelled span per assistant turn the record trains on, in order; the masked turns carry no label.
        edges = np.flatnonzero(np.diff(np.concatenate([[0], trained.astype(int), [0]])))
        spans = list(zip(edges[::2], edges[1::2], strict=True))
        messages = json.loads(row["messages"])
        assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        kept = [i for i in assistant if row["train"][i]]
        assert len(spans) == len(kept) >= 1
        for (start, end), i in zip(spans, kept, strict=True):
            text = tok.decode(example["input_ids"][start:end])
            call = (messages[i].get("tool_calls") or [{}])[0].get("function", {}).get("name", "")
            assert (messages[i]["content"] or "")[:20] in text and call in text
        for i in set(assistant) - set(kept):  # a masked turn is a failed try: its tool answered with an error
            masked_turns += 1
            assert messages[i + 1]["role"] == "tool" and "error" in messages[i + 1]["content"]
    assert masked_turns >= 1  # the fixture's failed tries reach the export, so the masks are exercised


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_a_cross_fitted_bigram_beats_uniform_guessing_on_text_of_the_same_source(seed: int) -> None:
    from tasks.midtrain.perplexity import BigramReference

    rng = np.random.default_rng(seed)
    vocab = 50
    transition = rng.dirichlet(np.full(vocab, 0.1), size=vocab)  # a sparse Markov source

    def sample(n: int) -> list[int]:
        out = [int(rng.integers(vocab))]
        for _ in range(n - 1):
            out.append(int(rng.choice(vocab, p=transition[out[-1]])))
        return out

    fitted = BigramReference(vocab).fit([sample(200) for _ in range(10)])
    held_out = fitted.logprobs(sample(400))
    assert len(held_out) == 399 and np.all(held_out < 0)
    assert -held_out.mean() < math.log(vocab)
    assert BigramReference(vocab).logprobs([1, 2, 3]) == pytest.approx([-math.log(vocab)] * 2)  # unfitted: uniform


def test_perplexity_windows_see_only_the_trained_turns() -> None:
    from tasks.midtrain.sft_set import trained_logprobs, trained_spans
    from tasks.tokenizer import resolve_tokenizer

    tok = resolve_tokenizer("default", {"tokenizer": tokenizer_artifact()})
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Find a record.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "system", "content": "You are an agent. " * 40},
                {"role": "user", "content": "Find order 7."},
                {"role": "assistant", "content": "A failed try.", "tool_calls": [
                    {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c0", "content": "error"},
                {"role": "assistant", "content": "Order 7 shipped on Monday."}]
    train = [False, False, False, False, True]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    [(start, end)] = trained_spans(tok, messages, tools, train)
    assert "Order 7 shipped on Monday." in text[start:end] and "You are an agent" not in text[start:end]
    assert "A failed try." not in text[start:end]
    offsets = np.array([o[0] for o in tok(text, add_special_tokens=False, return_offsets_mapping=True)
                        ["offset_mapping"]][1:])
    logprobs = -np.arange(1, len(offsets) + 1, dtype=float)
    kept = trained_logprobs(logprobs, offsets, [(start, end)])
    assert 0 < len(kept) < len(offsets) / 4 and set(kept) <= set(logprobs[(offsets >= start) & (offsets < end)])


def test_centred_embeddings_spread_the_distances_of_close_vectors() -> None:
    from tasks.midtrain.sft_set import centred

    rng = np.random.default_rng(0)
    base = rng.normal(size=384)
    close = base + 0.3 * rng.normal(size=(40, 384))  # one domain's conversations: cosine ~0.9 to each other
    close /= np.linalg.norm(close, axis=1, keepdims=True)
    raw = np.linalg.norm(close[:, None] - close[None], axis=-1)[np.triu_indices(40, 1)]
    spread = centred(close)
    after = np.linalg.norm(spread[:, None] - spread[None], axis=-1)[np.triu_indices(40, 1)]
    assert raw.max() < 0.6 and after.mean() > 1.2 and np.allclose(np.linalg.norm(spread, axis=1), 1, atol=1e-5)


def test_the_hf_scorer_gives_each_scored_token_its_offset() -> None:
    from tasks.midtrain.perplexity import HFScorer

    scorer = HFScorer(tiny_checkpoint())
    scorer.max_positions = 16  # chunked, as a long conversation is
    text = "The reference model answers every question it is asked, one token at a time, " * 3
    [(logprobs, offsets)] = scorer.token_logprobs_at([text])
    ids = scorer.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    starts = [o[0] for o in ids["offset_mapping"]]
    assert len(offsets) == len(logprobs) > 0 and np.all(np.diff(offsets) > 0) and offsets[-1] < len(text)
    assert set(offsets.tolist()) <= set(starts[1:])  # each scored token is a token after the first
    assert np.allclose(logprobs, scorer.token_logprobs([text])[0])


def test_scores_are_streamed_so_memory_follows_the_candidates_not_their_tokens(monkeypatch) -> None:
    """Scoring four times the candidates allocates no more at its peak: each candidate's log-probabilities are
    reduced to its scores and dropped (the whole pool's token lists killed an 11 GB worker at the small profile).
    The bigram's pair buffer is made small, so its bound shows at this size."""
    import functools
    import tracemalloc

    from tasks.midtrain.perplexity import BigramReference

    monkeypatch.setattr(BigramReference, "fit", functools.partialmethod(BigramReference.fit, buffer=4096))
    from tasks.midtrain.sft_set import SFTSetParams, reference_scores
    from tasks.tokenizer import resolve_tokenizer

    tok = resolve_tokenizer("default", {"tokenizer": tokenizer_artifact()})
    rng = random.Random(0)
    words = [f"w{i}" for i in range(200)]

    def peak(n: int) -> int:
        texts = [" ".join(rng.choice(words) for _ in range(1500)) for _ in range(n)]
        spans = [[(0, len(t))] for t in texts]
        tracemalloc.start()
        scores, means, nll, count, _ = reference_scores(texts, spans, [f"c{i}" for i in range(n)], tok,
                                                        SFTSetParams(), {})
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(scores) == n and np.all(scores >= means) and count > n * 1000 and 0 < nll
        return size

    assert peak(64) < 1.5 * peak(16)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), max_size=40), max_size=12), st.integers(1, 64))
def test_the_bigram_fitted_in_buffered_pieces_equals_one_fit(sequences: list[list[int]], buffer: int) -> None:
    from tasks.midtrain.perplexity import BigramReference

    whole, pieces = BigramReference(31).fit(sequences, buffer=1 << 30), BigramReference(31).fit(sequences, buffer)
    assert np.array_equal(whole.pairs, pieces.pairs) and np.allclose(whole.pair_counts, pieces.pair_counts)
    assert np.allclose(whole.logprobs(list(range(31))), pieces.logprobs(list(range(31))))
