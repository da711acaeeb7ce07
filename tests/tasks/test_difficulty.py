"""Difficulty filter: the keep window, pass counts on every row, and exact keeps for a test double with known
per-item success counts."""

from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from longctx_fixtures import vault_seeds

from inference.agent import prompt_docs, qa_prompt
from inference.testing import BernoulliTestEngine
from tasks.difficulty import ANSWER_OVER_CAP, cap_per_answer, plot_pass_histogram, split_by_window, verdict
from tasks.longctx.qa_filtered import QAFilterParams, filter_qa

K = 8




def engine_for(seeds: pl.DataFrame, successes: list[int], params: QAFilterParams) -> BernoulliTestEngine:
    """Item i succeeds on exactly successes[i] of k samples."""
    from inference.agent import qa_prompt_items

    items = qa_prompt_items(seeds, params.max_prompt_tokens)
    table = {
        item.messages[-1]["content"]: (s / params.k, answer)
        for item, s, answer in zip(items, successes, seeds["answer"], strict=True)
    }
    return BernoulliTestEngine(table)


@pytest.mark.parametrize(
    ("window", "expected_lo", "expected_hi"), [(None, 1, K - 1), ((1, 6), 1, 6), ((0, K), 0, K)]
)
def test_filter_keeps_exactly_the_window(window, expected_lo, expected_hi):
    successes = [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 0, 3]
    seeds = vault_seeds(len(successes))
    params = QAFilterParams(k=K, window=window, batch_size=5)
    out = filter_qa(seeds, engine_for(seeds, successes, params), params)

    kept = dict(zip(out["seeds"]["id"], out["seeds"]["pass_count"], strict=True))
    expected = {f"s{i}": s for i, s in enumerate(successes) if expected_lo <= s <= expected_hi}
    assert kept == expected
    rejected = out["rejected"]
    assert set(rejected["id"]) == {f"s{i}" for i in range(len(successes))} - set(expected)
    for s_id, count, reason in rejected.select("id", "pass_count", "reason").iter_rows():
        assert count == successes[int(s_id[1:])]
        assert reason == ("too_hard" if count < expected_lo else "too_easy")
    assert (out["seeds"]["pass_k"] == K).all() and (rejected["pass_k"] == K).all()
    assert out["seeds"]["pass_window"].unique().to_list() in ([], [f"{expected_lo}..{expected_hi}"])
    assert out["histogram"]["n"].to_list() == [successes.count(p) for p in range(K + 1)]
    # Original seed columns survive unchanged.
    assert set(seeds.columns) <= set(out["seeds"].columns)


def test_filter_batches_requests_with_k_samples_each():
    successes = [1, 2, 3, 4, 5]
    seeds = vault_seeds(len(successes))
    params = QAFilterParams(k=K, batch_size=2)
    engine = engine_for(seeds, successes, params)
    filter_qa(seeds, engine, params)
    assert engine.batch_sizes == [2, 2, 1]
    assert all(r.sampling.n == K for r in engine.requests)
    assert len({r.sampling.seed for r in engine.requests}) == len(successes)


@given(
    counts=st.lists(st.integers(0, K), max_size=30),
    window=st.tuples(st.integers(0, K), st.integers(0, K)).map(sorted).map(tuple),
)
def test_window_split_is_a_partition(counts, window):
    params = QAFilterParams(k=K, window=window)
    frame = pl.DataFrame({"id": [str(i) for i in range(len(counts))]}, schema={"id": pl.String})
    out = split_by_window(frame, counts, params, kept="seeds")
    lo, hi = window
    assert out["seeds"]["pass_count"].to_list() == [c for c in counts if lo <= c <= hi]
    assert sorted(out["seeds"]["id"].to_list() + out["rejected"]["id"].to_list(), key=int) == frame["id"].to_list()
    assert out["histogram"]["n"].sum() == len(counts)
    for count, reason in out["rejected"].select("pass_count", "reason").iter_rows():
        assert reason == verdict(count, K, window) and reason is not None


@given(answers=st.lists(st.sampled_from(["Niue", "niue ", "Oslo", "Lima", "Quito"]), max_size=40),
       cap=st.integers(1, 6), shuffle_seed=st.integers(0, 10))
def test_answer_cap_bounds_every_answer_and_loses_no_row(answers, cap, shuffle_seed):
    kept = pl.DataFrame({"id": [f"s{i}" for i in range(len(answers))], "answer": answers},
                        schema={"id": pl.String, "answer": pl.String})
    rejected = kept.clear().with_columns(pl.lit(None, dtype=pl.String).alias("reason"))
    capped, over = cap_per_answer(kept, rejected, cap)
    normal = [a.strip().lower() for a in capped["answer"]]
    for answer in set(normal):  # "Niue" and "niue " are one answer
        assert normal.count(answer) == min(cap, [a.strip().lower() for a in answers].count(answer))
    assert sorted(capped["id"].to_list() + over["id"].to_list()) == sorted(kept["id"].to_list())
    assert set(over["reason"]) <= {ANSWER_OVER_CAP}
    # The choice depends on the rows, not their order.
    shuffled, _ = cap_per_answer(kept.sample(fraction=1.0, shuffle=True, seed=shuffle_seed), rejected, cap)
    assert set(shuffled["id"]) == set(capped["id"])


def test_filter_caps_the_commonest_answer():
    seeds = vault_seeds(12).with_columns(pl.Series("answer", ["Niue"] * 9 + ["Oslo", "Lima", "Quito"]))
    params = QAFilterParams(k=K, max_per_answer=2)
    out = filter_qa(seeds, engine_for(seeds, [4] * 12, params), params)
    assert out["seeds"]["answer"].value_counts().sort("answer")["count"].to_list() == [1, 2, 1, 1]
    assert out["rejected"]["reason"].to_list() == [ANSWER_OVER_CAP] * 7


def test_the_filter_keeps_no_answer_over_its_share_without_a_cap():
    """A reference that guesses gets the common answers right, so what it keeps can be one answer: the kept seeds
    hold each answer to 5% of them (at least 2) whatever ``max_per_answer`` says, and pass the answer_share check."""
    from tasks.longctx.qa_seeds import ANSWER_SHARE

    answers = ["Niue"] * 12 + [f"Answer {i}" for i in range(48)]
    seeds = vault_seeds(60).with_columns(pl.Series("answer", answers))
    params = QAFilterParams(k=K)
    out = filter_qa(seeds, engine_for(seeds, [4] * 60, params), params)
    kept = out["seeds"]
    assert kept.filter(pl.col("answer") == "Niue").height == 2 and kept.height == 50
    assert not any(ANSWER_SHARE.fn(kept))
    assert out["rejected"]["reason"].to_list() == [ANSWER_OVER_CAP] * 10


@pytest.mark.parametrize("window", [(3, 2), (-1, 4), (0, K + 1)])
def test_bad_window_is_a_clear_error(window):
    with pytest.raises(ValueError, match="window"):
        QAFilterParams(k=K, window=window)


def test_bad_engine_spec_is_a_clear_error():
    with pytest.raises(ValueError, match="engine spec"):
        QAFilterParams(engine="gpt:whatever")


def test_prompt_keeps_supporting_docs_first_and_short():
    docs = json.dumps([{"title": "Noise", "text": "x" * 5000, "is_supporting": False},
                       {"title": "Gold", "text": "the fact", "is_supporting": True}])
    kept = prompt_docs(docs, max_chars=100)
    assert kept[0] == {"title": "Gold", "text": "the fact"}
    assert sum(len(d["text"]) for d in kept) <= 100
    content = qa_prompt("Q?", kept)[0]["content"]
    assert content.index("Gold") < content.index("Question: Q?") and "\\boxed{}" in content


def test_histogram_png(tmp_path):
    histogram = pl.DataFrame({"pass_count": list(range(K + 1)), "n": [3, 1, 0, 2, 0, 0, 1, 0, 5]})
    first = plot_pass_histogram(histogram, tmp_path / "a.png").read_bytes()
    assert first.startswith(b"\x89PNG")
    assert plot_pass_histogram(histogram, tmp_path / "b.png").read_bytes() == first


def test_task_filter_keeps_exactly_the_window():
    from collections import Counter

    from agent_fixtures import airline_env_and_task, golden_policy, stall_policy

    from inference.testing import ScriptedEngine
    from tasks.environments.task_filtered import TaskFilterParams, filter_tasks

    env, task = airline_env_and_task()
    successes = [0, 1, 3, 4]
    tasks = pl.DataFrame([{**task, "task_id": f"t{i}", "description": f"{task['description']} Ref T{i}."}
                          for i in range(len(successes))])
    started: Counter[str] = Counter()

    def policy(request, index):
        """Task i's first s_i rollouts follow the golden actions, the others stall; the first turn decides and the
        context carries the decision."""
        if len(request.messages) == 2:
            description = request.messages[1]["content"]
            started[description] += 1
            succeed = started[description] <= successes[int(description.rsplit("T", 1)[1].rstrip("."))]
            return golden_policy(request, index) if succeed else stall_policy(request, index)
        acted = any(m.get("tool_calls") for m in request.messages if m["role"] == "assistant")
        return golden_policy(request, index) if acted else stall_policy(request, index)

    params = TaskFilterParams(k=4, max_turns=6, concurrency=6)
    out = filter_tasks(pl.DataFrame([env]), tasks, ScriptedEngine(policy), params)
    assert dict(zip(out["tasks"]["task_id"], out["tasks"]["pass_count"], strict=True)) == {"t1": 1, "t2": 3}
    assert dict(zip(out["rejected"]["task_id"], out["rejected"]["reason"], strict=True)) == {
        "t0": "too_hard", "t3": "too_easy"}
    rollouts = out["rollouts"]
    assert rollouts.height == 16 and rollouts["group_id"].to_list() == [f"t{i}" for i in range(4) for _ in range(4)]
    assert rollouts.filter(pl.col("verified"))["failure"].null_count() == sum(successes)
    from data_contracts.gate import validate
    from tasks.environments.task_filtered import task_filtered

    for name, frame in out.items():
        report = validate("task_filtered", name, frame, task_filtered.outputs[name], "p0")
        assert report.passed, report.summary()


def test_outputs_pass_their_contracts():
    from data_contracts.gate import validate
    from tasks.longctx.qa_filtered import qa_filtered

    successes = [0, 3, 8, 5]
    seeds = vault_seeds(len(successes))
    params = QAFilterParams(k=K)
    out = filter_qa(seeds, engine_for(seeds, successes, params), params)
    assert set(out) == set(qa_filtered.outputs)
    for name, frame in out.items():
        report = validate("qa_filtered", name, frame, qa_filtered.outputs[name], "p0")
        assert report.passed, report.summary()


def test_tasks_the_engine_cannot_read_are_rejected_as_prompt_too_long():
    from agent_fixtures import airline_env_and_task, golden_policy

    from inference.testing import ScriptedEngine
    from tasks.environments.task_filtered import TaskFilterParams, filter_tasks

    env, task = airline_env_and_task()
    out = filter_tasks(pl.DataFrame([env]), pl.DataFrame([task]), ScriptedEngine(golden_policy, max_positions=64),
                       TaskFilterParams(k=2))
    assert out["tasks"].is_empty()
    assert out["rejected"].select("reason", "pass_count").row(0) == ("prompt_too_long", 0)
    assert out["rollouts"]["stop_reason"].to_list() == ["context_overflow"] * 2
