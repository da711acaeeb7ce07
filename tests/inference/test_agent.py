"""The agent loop against the environment runtime: scripted test-double engines and the tiny model."""

from __future__ import annotations

import json

import pytest
from agent_fixtures import airline_env_and_task, golden_policy, make_env, stall_policy

from inference.agent import AgentConfig, Episode, PromptItem, rollout_prompts, run_episodes, tool_call_errors
from inference.rollout import ROLLOUT_CONTRACT, rollouts_frame, segments_from_json
from inference.testing import SCRIPTED_LOGPROB, ScriptedEngine, ScriptedReply, byte_ids, render_plain


def episodes(n: int, group: str = "g0") -> list[Episode]:
    env, task = airline_env_and_task()
    return [Episode(id=f"{group}#{i}", group_id=group, make_env=make_env, task=task, env_id=env["env_id"],
                    task_id=task["task_id"], sample_index=i) for i in range(n)]


def test_golden_scripted_policy_solves_the_task_and_records_token_segments():
    engine = ScriptedEngine(golden_policy, policy_version=3)
    [rollout] = run_episodes(engine, episodes(1), AgentConfig(max_turns=12))
    _, task = airline_env_and_task()
    n_actions = len(json.loads(task["golden_actions"]))

    assert rollout.reward == 1.0 and rollout.verified and rollout.failure is None
    assert rollout.stop_reason == "done"
    assert set(rollout.reward_components) == {"db_state", "required_outputs", "policy"}
    [segment] = rollout.segments
    assert segment.start == "initial" and len(segment.turns) == n_actions + 1
    for turn, request in zip(segment.turns, engine.requests, strict=True):
        # The tokens are exactly what the engine saw and sampled, not a re-rendering.
        assert turn.prompt_ids == list(byte_ids(render_plain(request.messages, request.tools)))
        assert len(turn.output_ids) == len(turn.logprobs) == len(turn.loss_mask) > 0
        assert turn.logprobs == [SCRIPTED_LOGPROB] * len(turn.output_ids)
        assert set(turn.loss_mask) == {1} and turn.policy_version == 3
    roles = [m["role"] for m in rollout.messages]
    assert roles[:2] == ["system", "user"] and roles.count("tool") == n_actions


def test_episodes_run_concurrently_in_one_batch_per_round():
    engine = ScriptedEngine(golden_policy)
    rollouts = run_episodes(engine, episodes(5), AgentConfig(max_turns=12, concurrency=3))
    assert [t.id for t in rollouts] == [f"g0#{i}" for i in range(5)]
    assert all(t.verified for t in rollouts)
    assert set(engine.batch_sizes) == {3, 2}  # a wave of 3 episodes, then a wave of 2
    frame = rollouts_frame(rollouts)
    assert frame.height == 5 and (frame["n_segments"] == 1).all()
    assert segments_from_json(frame["segments"][0]) == rollouts[0].segments
    assert not any(check.fn(frame)[0] for check in ROLLOUT_CONTRACT.checks)


def test_same_config_same_trajectories():
    first = rollouts_frame(run_episodes(ScriptedEngine(golden_policy), episodes(2), AgentConfig(max_turns=12)))
    again = rollouts_frame(run_episodes(ScriptedEngine(golden_policy), episodes(2), AgentConfig(max_turns=12)))
    assert first.equals(again)


MALFORMED = [
    ({"name": "no_such_tool", "arguments": {}}, "unknown tool 'no_such_tool'"),
    ({"name": "__first__", "arguments": "{not json"}, "not valid JSON"),
    ({"name": "__first__", "arguments": {}}, "missing required argument"),
    ({"name": "__first__", "arguments": "[1, 2]"}, "must be a JSON object"),
]


@pytest.mark.parametrize(("call", "message"), MALFORMED)
def test_malformed_tool_call_becomes_a_tool_error_the_agent_sees(call, message):
    _, task = airline_env_and_task()
    first = json.loads(task["golden_actions"])[0]
    if call["name"] == "__first__":
        call = {**call, "name": first["name"]}

    def policy(request, index):
        return ScriptedReply(tool_calls=(call,)) if len(request.messages) == 2 else "I am stuck."

    engine = ScriptedEngine(policy)
    [rollout] = run_episodes(engine, episodes(1), AgentConfig(max_turns=2))
    seen = engine.requests[1].messages  # the second turn's prompt
    assert seen[-1]["role"] == "tool" and seen[-1]["content"].startswith("Error:") and message in seen[-1]["content"]
    assert seen[-1]["tool_call_id"] == seen[-2]["tool_calls"][0]["id"]
    assert rollout.stop_reason == "max_turns" and not rollout.verified and rollout.failure == "agent"


def test_unparsed_tool_call_markup_is_an_error():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"required": []}}}]
    errors = tool_call_errors({"role": "assistant", "content": '<tool_call>{"name": "f", </tool_call>'}, tools)
    assert len(errors) == 1 and "not valid JSON" in errors[0]["content"]
    assert tool_call_errors({"role": "assistant", "content": "plain answer"}, tools) == []


def test_turn_budget_cuts_off_and_scores_the_end_state():
    [rollout] = run_episodes(ScriptedEngine(stall_policy), episodes(1), AgentConfig(max_turns=3))
    assert rollout.stop_reason == "max_turns" and rollout.segments[0].n_agent_turns() == 3
    assert rollout.reward == 0.0 and rollout.failure == "agent"
    assert "db_state" in rollout.reward_components


def test_engine_error_reaches_every_episode():
    def broken(request, index):
        raise RuntimeError("engine down")

    with pytest.raises(RuntimeError, match="engine down"):
        run_episodes(ScriptedEngine(broken), episodes(2), AgentConfig())


def test_single_turn_prompts_get_k_samples_and_rewards():
    def policy(request, index):
        return "\\boxed{Paris}" if index % 2 == 0 else "\\boxed{Rome}"

    items = [PromptItem(id=f"q{i}", messages=[{"role": "user", "content": f"capital {i}?"}],
                        columns={"answer": "Paris", "aliases": []}) for i in range(3)]
    from envgen.rewards import get_reward

    groups = rollout_prompts(ScriptedEngine(policy), items, 4, get_reward("two_way"), AgentConfig(), "qa")
    assert [[t.reward for t in g] for g in groups] == [[1.0, 0.0, 1.0, 0.0]] * 3
    assert [t.id for t in groups[1]] == ["q1#0", "q1#1", "q1#2", "q1#3"]
    assert all(t.group_id == "q1" and t.segments[0].turns[0].prompt_ids for t in groups[1])


@pytest.mark.slow
def test_tiny_model_completes_episodes_with_consistent_token_segments(tmp_path):
    from inference.engine_factory import load_engine
    from inference.engine_support import render_prompt
    from inference.tokenizer import save, train_tokenizer
    from training.tiny_model import init_model

    env, task = airline_env_and_task()
    corpus = [task["system_prompt"], task["description"], env["tools"]] * 3
    save(train_tokenizer(corpus, vocab_size=1500), tmp_path / "tok")
    model_dir = init_model("tiny", tmp_path / "tok", tmp_path / "model", seed=0)
    engine = load_engine(f"hf:{model_dir}", policy_version=1)
    config = AgentConfig(max_turns=2, sampling={"max_tokens": 12, "temperature": 1.0}, seed=1)
    rollouts = run_episodes(engine, episodes(2), config)
    for rollout in rollouts:
        turns = rollout.segments[0].turns
        assert len(turns) == 2 and rollout.stop_reason == "max_turns"
        first_prompt = render_prompt(engine.tokenizer, rollout.messages[:2], json.loads(env["tools"]))
        assert turns[0].prompt_ids == first_prompt
        # Within a segment the context only grows: each prompt extends the previous one.
        assert turns[1].prompt_ids[: len(first_prompt) - 3] == first_prompt[:-3]
        for turn in turns:
            assert 0 < len(turn.output_ids) == len(turn.logprobs) <= 12
            assert all(lp <= 0 for lp in turn.logprobs) and turn.policy_version == 1
    engine.close()


@pytest.mark.parametrize(("window", "turns"), [(100, 0), (None, 1)])
def test_prompt_past_the_context_window_stops_the_episode(window, turns):
    from agent_fixtures import first_action_forever

    engine = ScriptedEngine(first_action_forever, max_positions=window)
    if window is None:  # a window that holds the first prompt but not the second
        probe = ScriptedEngine(first_action_forever)
        run_episodes(probe, episodes(1), AgentConfig(max_turns=1))
        engine.max_positions = len(probe.render(probe.requests[0])) + 100
    [rollout] = run_episodes(engine, episodes(1), AgentConfig(max_turns=4, sampling={"max_tokens": 50}))
    assert rollout.stop_reason == "context_overflow" and len(rollout.turns()) == turns
    assert "db_state" in rollout.reward_components  # the end state is scored as it stands


def test_mix_rows_are_scored_by_their_own_reward():
    import polars as pl

    from inference.agent import rollout_mix

    frame = pl.DataFrame({
        "id": ["qa-1", "needle-1", "qa-2"],
        "prompt": [json.dumps([{"role": "user", "content": c}]) for c in ("q1", "n1", "q2")],
        "answer": ["Paris", "K1 K2", "Rome"],
        "aliases": [[], [], ["Roma"]],
        "reward_fn": ["two_way", "needle_all", "two_way"],
    })
    replies = {"q1": "\\boxed{Paris}", "n1": "\\boxed{K1}", "q2": "\\boxed{Roma}"}
    engine = ScriptedEngine(lambda request, index: replies[request.messages[-1]["content"]])
    groups = rollout_mix(engine, frame, 2, AgentConfig())
    assert [[t.reward for t in group] for group in groups] == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    assert [group[0].item_id for group in groups] == ["qa-1", "needle-1", "qa-2"]
    with pytest.raises(ValueError, match="row 'needle-1' names no reward"):
        rollout_mix(engine, frame.with_columns(pl.Series("reward_fn", ["two_way", None, "two_way"])), 2,
                    AgentConfig())
    with pytest.raises(ValueError, match="no reward_fn column"):
        rollout_mix(engine, frame.drop("reward_fn"), 2, AgentConfig())
    keychain_like = rollout_mix(engine, frame.drop("reward_fn"), 2, AgentConfig(), reward="two_way")
    assert [[t.reward for t in group] for group in keychain_like] == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_run_episodes_works_inside_a_running_event_loop():
    import asyncio

    async def from_a_notebook():
        return run_episodes(ScriptedEngine(golden_policy), episodes(1), AgentConfig(max_turns=12))

    [rollout] = asyncio.run(from_a_notebook())
    assert rollout.verified


def test_every_call_of_a_malformed_turn_is_answered():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"required": ["x"]}}}]
    calls = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
             {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    errors = tool_call_errors({"role": "assistant", "content": "", "tool_calls": calls}, tools)
    assert [e["tool_call_id"] for e in errors] == ["a", "b"]
    assert "not run" in errors[0]["content"] and "missing required argument(s): x" in errors[1]["content"]
    assert tool_call_errors({"role": "assistant", "content": "", "tool_calls": calls[:1]}, tools) == []


class _SlowServer(ScriptedEngine):
    """Test double of a server: every call takes 0.3 s of wall time, and calls may overlap."""

    def generate(self, requests):
        import time

        time.sleep(0.3)
        return super().generate(requests)


@pytest.mark.parametrize("max_calls", [1, 4])
def test_overlapping_engine_calls_return_each_request_when_done(max_calls):
    """With ``max_calls`` 4 four single-request calls run at once (a server batching them itself), and the engine
    is busy while any is in flight; with 1 they queue behind each other."""
    import asyncio
    import time

    from inference.agent import ContinuousBatcher
    from inference.engine import Request

    batcher = ContinuousBatcher(_SlowServer(lambda r, i: "ok"), max_batch=1, max_calls=max_calls)

    async def four() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(batcher.generate(i, Request([{"role": "user", "content": str(i)}])) for i in range(4)))
        return time.perf_counter() - started

    elapsed = asyncio.run(four())
    if max_calls == 4:
        assert elapsed < 0.9 and 0.25 < batcher.busy_s < 0.9  # the union of overlapping calls, not their sum
    else:
        assert elapsed >= 1.2 and batcher.busy_s >= 1.2
