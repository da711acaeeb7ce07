"""Heavy Thinking: the summary prompt shows every trajectory exactly once in a seeded permutation, both stages'
tokens are counted, recursive rounds feed summaries forward, a summary that does not fit falls back to the answers,
and the multi-turn wrapper keeps only the summaries in the conversation."""

from __future__ import annotations

import asyncio

import pytest
from agent_fixtures import airline_env_and_task, golden_policy, make_env
from hypothesis import given
from hypothesis import strategies as st

from inference.agent import AgentConfig, Episode, run_episodes
from inference.engine import Request, SamplingParams
from inference.heavy_thinking import (
    Briefed,
    HeavyThinking,
    HeavyThinkingConfig,
    HeavyThinkingEngine,
    episode_note,
    permutation,
    summary_messages,
    trajectory_text,
)
from inference.rollout import Rollout, Segment
from inference.testing import ScriptedEngine, byte_ids

QUESTION = [{"role": "user", "content": "What is 6 times 7? Put the final answer in \\boxed{}."}]


@given(st.integers(1, 12), st.integers(0, 10_000), st.text(min_size=1, max_size=12))
def test_summary_prompt_shows_each_trajectory_exactly_once_in_the_seeded_order(k, seed, item):
    texts = [f"attempt-{i:02d} says \\boxed{{{i}}}" for i in range(k)]
    order = permutation(seed, item, 0, k)
    assert sorted(order) == list(range(k)) and order == permutation(seed, item, 0, k)
    messages = summary_messages(QUESTION, texts, order)
    note = messages[-1]["content"]
    assert messages[:-1] == QUESTION and messages[-1]["role"] == "user"
    for text in texts:
        assert note.count(text) == 1
    shown = sorted(range(k), key=lambda i: note.index(texts[i]))
    assert shown == order


def test_permutations_differ_by_seed_so_position_is_no_shortcut():
    orders = {tuple(permutation(seed, "item", 0, 6)) for seed in range(50)}
    first = [permutation(seed, "item", 0, 6)[0] for seed in range(300)]
    assert len(orders) > 40
    assert {first.count(i) for i in range(6)} <= set(range(30, 71))  # every trajectory leads about equally often


def test_summary_order_must_be_a_permutation():
    with pytest.raises(ValueError):
        summary_messages(QUESTION, ["a", "b"], [0, 0])


def scripted(answer_of_sample):
    """Stage-1 samples box answer_of_sample(i); a summary request boxes 42 and says it summarized."""

    def policy(request: Request, index: int) -> str:
        if "### Attempt" in str(request.messages[-1]["content"]):
            return "summary \\boxed{42}"
        return f"sample {index} \\boxed{{{answer_of_sample(index)}}}"

    return ScriptedEngine(policy)


def test_both_stages_are_counted_and_the_summary_reads_all_width_samples():
    engine = scripted(lambda i: 40 + i)
    heavy = HeavyThinking(engine, HeavyThinkingConfig(width=4, seed=3))
    [result] = heavy.run([("q", QUESTION)], SamplingParams(max_tokens=32))
    stage1, summary = engine.requests
    assert stage1.sampling.n == 4 and summary.sampling.n == 1
    assert result.stage1_tokens == sum(len(byte_ids(f"sample {i} \\boxed{{{40 + i}}}")) for i in range(4))
    assert result.stage2_tokens == len(byte_ids("summary \\boxed{42}"))
    assert result.tokens == result.stage1_tokens + result.stage2_tokens
    assert result.final.text == "summary \\boxed{42}" and result.summary_prompt_tokens > 0
    note = summary.messages[-1]["content"]
    assert all(note.count(f"\\boxed{{{40 + i}}}") == 1 for i in range(4))
    assert result.orders == [permutation(3, "q", 0, 4)]


def test_recursive_rounds_read_the_previous_rounds_summaries():
    engine = scripted(lambda i: i)
    heavy = HeavyThinking(engine, HeavyThinkingConfig(width=3, rounds=2))
    [result] = heavy.run([("q", QUESTION)], SamplingParams(max_tokens=32))
    _, round1, round2 = engine.requests
    assert round1.sampling.n == 3 and round2.sampling.n == 1  # an intermediate round draws `width` summaries
    assert round2.messages[-1]["content"].count("summary \\boxed{42}") == 3
    assert len(result.rounds) == 2 and result.stage2_tokens == 4 * len(byte_ids("summary \\boxed{42}"))


def test_a_summary_that_does_not_fit_reads_the_answers_only_or_gives_up():
    long = "reasoning " * 200
    engine = ScriptedEngine(lambda r, i: f"{long} \\boxed{{{i}}}")
    completions = engine.generate([Request(QUESTION, sampling=SamplingParams(n=3, max_tokens=4000))])[0]
    fits_answers = HeavyThinking(engine, HeavyThinkingConfig(width=3),
                                 fits=lambda r: len(str(r.messages[-1]["content"])) < 1000)
    [result] = fits_answers.summarize([("q", QUESTION)], [completions])
    assert "reasoning" not in engine.requests[-1].messages[-1]["content"] and result.final is not None
    nothing_fits = HeavyThinking(engine, HeavyThinkingConfig(width=3), fits=lambda r: False)
    [result] = nothing_fits.summarize([("q", QUESTION)], [completions])
    assert result.final is None and result.overflow and result.stage2_tokens == 0


def test_answer_view_keeps_the_box_and_full_view_keeps_the_tail():
    [[completion]] = ScriptedEngine(lambda r, i: "x" * 50 + " \\boxed{7}").generate([Request(QUESTION)])
    assert trajectory_text(completion, "answer", 100) == "\\boxed{7}"
    assert trajectory_text(completion, "full", 12).endswith("\\boxed{7}")


def test_multi_turn_wrapper_keeps_only_the_summaries_in_the_conversation():
    """Candidates stall; the summary model (the golden policy) acts. The episode is solved and its history holds no
    candidate text: the context memory carries the summaries forward, never the candidates."""
    env, task = airline_env_and_task()
    thinker = ScriptedEngine(lambda r, i: f"candidate {i} is thinking")
    summarizer = ScriptedEngine(golden_policy)
    engine = HeavyThinkingEngine(thinker, HeavyThinkingConfig(width=3), summarizer)
    episode = Episode(id="e#0", group_id="e", make_env=make_env, task=task, env_id=env["env_id"],
                      task_id=task["task_id"])
    [rollout] = run_episodes(engine, [episode], AgentConfig(max_turns=12))
    assert rollout.verified
    assert not any("candidate" in str(m.get("content")) for m in rollout.messages)
    assert all(r.sampling.n == 3 for r in thinker.requests)
    for request in summarizer.requests:
        note = request.messages[-1]["content"]
        assert all(note.count(f"candidate {i} is thinking") == 1 for i in range(3)) and request.tools
    assert engine.total.stage1_tokens == sum(len(byte_ids(f"candidate {i} is thinking")) * len(thinker.requests)
                                             for i in range(3))
    assert sum(u.stage2_tokens for u in engine.usage.values()) == engine.total.stage2_tokens > 0


def test_a_summary_episode_starts_with_every_earlier_attempt_once():
    _, task = airline_env_and_task()
    attempts = [Rollout(id=f"a#{i}", group_id="a", source="t", item_id="a", segments=[Segment()], reward=0.0,
                        reward_components={}, verified=False, messages=[
                            {"role": "assistant", "content": f"last words {i}", "tool_calls": [
                                {"id": f"c{i}", "type": "function",
                                 "function": {"name": f"tool_{i}", "arguments": "{}"}}]},
                            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"}])
                for i in range(3)]
    note = episode_note(attempts, [2, 0, 1], 500)
    assert all(note["content"].count(f"called tool_{i}(") == 1 and f"result {i}" in note["content"] for i in range(3))
    assert note["content"].index("tool_2") < note["content"].index("tool_0") < note["content"].index("tool_1")
    briefed = Briefed(make_env(), note)
    observation = asyncio.run(briefed.areset(task))
    assert observation.messages[-1] == note and observation.tools
    briefed.close()
