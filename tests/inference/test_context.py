"""Context management: summary past a token threshold, discard-all past a turn limit, the hybrid; each starts a new
segment under the same rollout id."""

from __future__ import annotations

import json

import pytest
from agent_fixtures import airline_env_and_task, first_action_forever, make_env, stall_policy
from hypothesis import given
from hypothesis import strategies as st

from inference import context as ctx
from inference.agent import AgentConfig, Episode, run_episodes
from inference.engine import Request
from inference.rollout import Segment, Turn
from inference.testing import ScriptedEngine, ScriptedReply, byte_ids, render_plain


def run(policy, max_turns: int, **context):
    env, task = airline_env_and_task()
    engine = ScriptedEngine(policy)
    episode = Episode(id="r0", group_id="g0", make_env=make_env, task=task, env_id=env["env_id"],
                      task_id=task["task_id"])
    config = AgentConfig(max_turns=max_turns, sampling={"max_tokens": 1024}, context=ctx.ContextConfig(**context))
    [rollout] = run_episodes(engine, [episode], config)
    return rollout, engine


def agent_requests(engine: ScriptedEngine) -> list[Request]:
    return [r for r in engine.requests if r.messages[-1].get("content") != ctx.SUMMARY_INSTRUCTION]


def test_discard_resets_to_system_and_task_every_max_turns():
    rollout, engine = run(stall_policy, max_turns=5, strategy="discard", discard_after_turns=2)
    assert [s.start for s in rollout.segments] == ["initial", "reset", "reset"]
    assert [s.n_agent_turns() for s in rollout.segments] == [2, 2, 1]
    initial = engine.requests[0].messages
    assert [m["role"] for m in initial] == ["system", "user"]
    assert engine.requests[2].messages == initial and engine.requests[4].messages == initial
    assert len(engine.requests[1].messages) > len(initial)
    # The transcript keeps everything; the rollout id does not change.
    assert sum(m["role"] == "assistant" for m in rollout.messages) == 5 and rollout.id == "r0"


def test_progressive_discard_raises_the_limit_after_each_reset():
    rollout, _ = run(stall_policy, max_turns=9, strategy="discard", discard_after_turns=2, discard_growth=1,
                        max_resets=5)
    assert [s.n_agent_turns() for s in rollout.segments] == [2, 3, 4]


def test_extractive_summary_restarts_from_task_plus_summary():
    rollout, engine = run(first_action_forever, max_turns=4, strategy="summary", summary_threshold_tokens=1500,
                             summarizer="extractive", summary_max_tokens=64)
    starts = [s.start for s in rollout.segments]
    assert starts[0] == "initial" and "summary" in starts
    restarted = next(r for r in engine.requests[1:] if len(r.messages) == 3)
    summary = restarted.messages[-1]
    assert summary["role"] == "user" and summary["content"].startswith(ctx.SUMMARY_PREFIX)
    _, task = airline_env_and_task()
    first_tool = json.loads(task["golden_actions"])[0]["name"]
    assert f"called {first_tool}(" in summary["content"] and f"{first_tool} returned:" in summary["content"]
    assert all(t.kind == "agent" for s in rollout.segments for t in s.turns)


def test_engine_summary_is_a_recorded_turn_of_the_old_segment():
    def policy(request, index):
        if request.messages[-1].get("content") == ctx.SUMMARY_INSTRUCTION:
            return "SUMMARY: payment method looked up."
        return first_action_forever(request, index)

    rollout, engine = run(policy, max_turns=3, strategy="summary", summary_threshold_tokens=1500,
                             summary_max_tokens=64)
    first, second = rollout.segments[:2]
    assert first.turns[-1].kind == "summary" and second.start == "summary"
    summary_request = next(r for r in engine.requests if r.messages[-1]["content"] == ctx.SUMMARY_INSTRUCTION)
    assert summary_request.sampling.max_tokens == 64 and summary_request.tools
    assert agent_requests(engine)[len(first.turns) - 1].messages[-1]["content"].endswith(
        "SUMMARY: payment method looked up."
    )


def test_hybrid_summarizes_on_tokens_and_resets_on_turns():
    _, engine = run(stall_policy, max_turns=1)
    first = engine.requests[0]
    initial_tokens = len(byte_ids(render_plain(first.messages, first.tools)))

    def verbose(request, index):  # every turn pushes the context past the threshold
        return ScriptedReply("x" * 600, first_action_forever(request, index).tool_calls)

    rollout, _ = run(verbose, max_turns=6, strategy="hybrid", summary_threshold_tokens=initial_tokens + 300,
                        summarizer="extractive", summary_max_tokens=64, discard_after_turns=3, max_resets=5)
    # Summaries compress tokens without resetting the turn count; the third turn since the start triggers a reset.
    assert [(s.start, s.n_agent_turns()) for s in rollout.segments] == [
        ("initial", 1), ("summary", 1), ("summary", 1), ("reset", 1), ("summary", 1), ("summary", 1)]


def test_no_management_keeps_one_segment():
    rollout, _ = run(first_action_forever, max_turns=4)
    assert len(rollout.segments) == 1 and rollout.segments[0].n_agent_turns() == 4


def test_restarts_are_bounded():
    rollout, _ = run(stall_policy, max_turns=8, strategy="discard", discard_after_turns=1, max_resets=2)
    assert [s.n_agent_turns() for s in rollout.segments] == [1, 1, 6]


def test_summary_budget_must_fit_below_threshold():
    with pytest.raises(ValueError, match="summary_max_tokens"):
        ctx.ContextConfig(strategy="summary", summary_threshold_tokens=100, summary_max_tokens=200)


def segment(start: str, n_turns: int, tokens: int) -> Segment:
    turn = Turn(prompt_ids=[0] * tokens, output_ids=[], logprobs=[], policy_version=0, loss_mask=[],
                finish_reason="stop")
    return Segment(start=start, turns=[turn] * n_turns)


@given(
    strategy=st.sampled_from(["none", "summary", "discard", "hybrid"]),
    history=st.lists(st.tuples(st.sampled_from(["summary", "reset"]), st.integers(1, 4)), max_size=4),
    n_turns=st.integers(0, 10), tokens=st.integers(1, 5000), limit=st.integers(1, 6), growth=st.integers(0, 2),
    threshold=st.integers(100, 4000),
)
def test_decide_follows_the_strategy(strategy, history, n_turns, tokens, limit, growth, threshold):
    config = ctx.ContextConfig(strategy=strategy, discard_after_turns=limit, discard_growth=growth,
                               summary_threshold_tokens=threshold, summary_max_tokens=50, max_resets=3)
    segments = [segment("initial", 2, 10)] + [segment(s, n, 10) for s, n in history]
    segments[-1] = segment(segments[-1].start, n_turns, tokens)
    action = ctx.decide(config, segments)
    starts = [s.start for s in segments]
    last_reset = max(i for i, s in enumerate(starts) if s != "summary")
    since = sum(s.n_agent_turns() for s in segments[last_reset:])
    if strategy == "none" or len(segments) > 3 or n_turns == 0:
        assert action == "keep"
    elif strategy in ("discard", "hybrid") and since >= limit + growth * starts.count("reset"):
        assert action == "reset"
    elif strategy in ("summary", "hybrid") and tokens >= threshold:
        assert action == "summarize"
    else:
        assert action == "keep"


def test_extractive_summary_is_deterministic_and_digests_calls():
    history = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"id": "U1"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"name": "Ada"}' + "x" * 500},
        {"role": "assistant", "content": "Found Ada."},
    ]
    text = ctx.extractive_summary(history, chars_per_result=20)
    assert text == ctx.extractive_summary(history, chars_per_result=20)
    assert 'called get_user({"id":"U1"})' in text and 'get_user returned: {"name": "Ada"}xxx' in text
    assert "last note: Found Ada." in text and "x" * 30 not in text
