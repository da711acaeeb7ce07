"""Mid-training procedures (tasks/midtrain/, envgen/trajectory_checks.py): environment-grounded synthesis verified
by execution, the augmentations (decomposition never leaves an argument underivable), turn-level masks, text
parsing, long-context answers, step compression."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st
from midtrain_fixtures import environments

from envgen.environment import domain_for
from envgen.taskgen import TaskSettings
from envgen.trajectory_checks import (
    SUMMARY_TAG,
    Slot,
    slot_problem,
    turn_mask,
    underivable,
    verify_answer,
    verify_execution,
    verify_schema,
)
from tasks.midtrain.midtrain_decompose import decompose
from tasks.midtrain.midtrain_plan import plan
from tasks.midtrain.midtrain_reason import alternatives
from tasks.midtrain.midtrain_text import HowToError, parse_howto, render_howto, trajectory
from tasks.midtrain.sft_set import compress_steps
from tasks.midtrain.synth import ENV_FIELDS, ReferenceEpisode, Unusable, play, restate, sample_task

SLOW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _verify_input(ep: ReferenceEpisode) -> dict:
    return {"env": {k: ep.env[k] for k in ENV_FIELDS}, "task": ep.task}


def _episode(index: int, seed: int) -> ReferenceEpisode:
    envs = environments()
    return sample_task(envs[index % len(envs)], random.Random(seed), 2, 3, TaskSettings(inline_fact_prob=0.9), "x")


def _drawn_episode(index: int, seed: int) -> ReferenceEpisode:
    """A drawn episode; a draw the sampler finds unusable (an ambiguous task, say: the stage skips those) is
    rejected rather than failed."""
    try:
        return _episode(index, seed)
    except Unusable:
        reject()


def test_a_played_episode_reverifies_and_tampering_is_caught() -> None:
    ep = _episode(0, 1)
    played = play(ep, random.Random(1))
    vi = _verify_input(ep)
    assert verify_execution(played.messages, vi, ep.env["db"]) is None
    tool = next(i for i, m in enumerate(played.messages) if m["role"] == "tool")
    forged = [dict(m) for m in played.messages]
    forged[tool]["content"] = json.dumps({"ok": True, "forged": 1})
    assert "differs from the replay" in verify_execution(forged, vi, ep.env["db"])
    truncated = played.messages[:-1]
    assert verify_execution(truncated, vi, ep.env["db"]) is not None  # the outcome is never reported
    guessed = [dict(m) for m in played.messages]
    call = next(i for i, m in enumerate(guessed) if m.get("tool_calls"))
    first_value = next(iter(json.loads(guessed[call]["tool_calls"][0]["function"]["arguments"]).values()))
    guessed[1] = {**guessed[1], "content": "Hello, please help."}  # the request no longer states anything
    if first_value in played.messages[1]["content"]:
        assert verify_execution(guessed, vi, ep.env["db"]) is not None


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 10_000), hidden=st.integers(1, 3))
@example(index=0, seed=0, hidden=3)  # once hid a last name, then restated it as the key of a later lookup
def test_decomposition_reverifies_and_leaves_no_argument_underivable(index: int, seed: int, hidden: int) -> None:
    ep = _drawn_episode(index, seed)
    try:
        new, record = decompose(ep, random.Random(seed), hidden)
    except Unusable:
        return
    played = play(new, random.Random(seed))
    assert verify_execution(played.messages, _verify_input(new), new.env["db"]) is None
    assert 1 <= len(record) <= hidden
    profile = json.dumps(json.loads(new.task["user_profile"])["facts"])
    said = " ".join(str(m["content"]) for m in played.messages if m["role"] == "user")
    for h in record:
        # hidden everywhere the user could read it from (the request, any reply, the profile)...
        assert h["value"] not in said and h["value"] not in profile
        assert any(h["value"] in str(m["content"]) for m in played.messages if m["role"] == "tool")  # ...looked up
    for i, m in enumerate(played.messages):
        for call in m.get("tool_calls") or []:
            assert underivable(played.messages, i, json.loads(call["function"]["arguments"])) == []


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_alternatives_and_plan_keep_the_executed_calls(index: int, seed: int) -> None:
    ep = _drawn_episode(index, seed)
    for new, _ in (alternatives(ep, random.Random(seed), 2), plan(ep, random.Random(seed))):
        played = play(new, random.Random(seed))
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                 for m in played.messages for c in m.get("tool_calls") or []]
        assert calls == [(c["name"], c["arguments"]) for c in ep.calls]
        assert verify_execution(played.messages, _verify_input(new), new.env["db"]) is None
    planned, goals = plan(ep, random.Random(seed))
    first = next(m for m in play(planned, random.Random(0)).messages if m["role"] == "assistant")
    assert first["content"].startswith(planned.plan) and goals[0] in first["content"]


def test_a_failed_try_is_masked_and_the_recovery_trained() -> None:
    ep = _episode(1, 3)
    domain = domain_for(ep.env)
    k = next(i for i, c in enumerate(ep.calls) if domain.tools[c["name"]].kind in ("get", "lookup"))
    played = play(ReferenceEpisode(ep.env, restate(ep.task, random.Random(0), 1.0), ep.calls, retries=frozenset({k})),
                  random.Random(0))
    assert verify_execution(played.messages, _verify_input(ep), ep.env["db"]) is None
    mask = turn_mask(played.messages, played.tools)
    failed = [i for i, m in enumerate(played.messages) if m["role"] == "tool" and "error" in m["content"]]
    assert len(failed) == 1
    assert mask[failed[0] - 1] is False and mask[failed[0] + 1] is True


_CALL = st.fixed_dictionaries({"name": st.sampled_from(["get_x", "nope"]),
                               "arguments": st.sampled_from(['{"id": "X1"}', '{"id": 3}', "{bad", "{}"]),
                               "error": st.booleans()})


@given(turns=st.lists(st.one_of(st.tuples(st.just("user"), st.text(max_size=5)),
                                st.tuples(st.just("assistant"), st.lists(_CALL, max_size=2)),
                                st.tuples(st.just("text"), st.sampled_from(["", "ok", "<tool_call>{}"]))),
                      max_size=8))
def test_masks_are_only_on_clean_assistant_turns(turns) -> None:
    tools = [{"type": "function", "function": {"name": "get_x", "parameters": {
        "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]
    messages, expected = [{"role": "system", "content": "s"}], [False]
    for n, (kind, body) in enumerate(turns):
        if kind == "user":
            messages.append({"role": "user", "content": body})
            expected.append(False)
        elif kind == "text":
            messages.append({"role": "assistant", "content": body})
            expected.append(body == "ok")
        else:
            calls = [{"id": f"c{n}{j}", "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                     for j, c in enumerate(body)]
            good = all(c["name"] == "get_x" and c["arguments"] == '{"id": "X1"}' and not c["error"] for c in body)
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            expected.append(good and bool(body))
            for j, c in enumerate(body):
                messages.append({"role": "tool", "tool_call_id": f"c{n}{j}",
                                 "content": json.dumps({"error": "no"} if c["error"] else {"id": "X1"})})
                expected.append(False)
    assert turn_mask(messages, tools) == expected


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 1000))
def test_howto_texts_roundtrip_into_schema_conformant_trajectories(index: int, seed: int) -> None:
    from envgen.construct import sample_chain

    domain = domain_for(environments()[index])
    chain = sample_chain(domain, random.Random(seed), set(domain.tools), 3)
    howto = parse_howto(render_howto(domain, chain, "do it"))
    assert [s.tool for s in howto.steps] == chain
    messages = trajectory(howto, random.Random(seed))
    assert verify_schema(messages, howto.tools) is None
    broken = json.loads(json.dumps(messages))
    call = next(m for m in broken if m.get("tool_calls"))
    call["tool_calls"][0]["function"]["arguments"] = json.dumps({"unexpected": 1})
    assert verify_schema(broken, howto.tools) is not None


@given(st.text(max_size=400))
def test_the_howto_parser_refuses_garbage_with_its_own_error(text: str) -> None:
    try:
        parse_howto(text)
    except HowToError:
        pass


def test_answers_are_verified_for_correctness_and_completeness() -> None:
    vi = {"answer": "Owens Inc", "aliases": [], "conditions": ["A founded by B", "B born 1956"]}
    good = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "A founded by B\nB born 1956\nSo \\boxed{Owens Inc}."}]
    assert verify_answer(good, vi) is None
    assert "condition" in verify_answer([good[0], {"role": "assistant", "content": "A founded by B \\boxed{Owens Inc}"}], vi)
    assert "two-way" in verify_answer([good[0], {**good[1], "content": good[1]["content"].replace("Owens", "Smith")}], vi)


def test_step_compression_keeps_what_later_turns_use_and_still_verifies() -> None:
    ep = _episode(2, 5)
    played = play(ep, random.Random(5))
    short, n = compress_steps(played.messages, keep_last=0)
    assert n >= 1 and sum(len(str(m["content"])) for m in short) < sum(len(str(m["content"])) for m in played.messages)
    assert verify_execution(short, _verify_input(ep), ep.env["db"]) is None
    forged = [dict(m) for m in short]
    i = next(i for i, m in enumerate(forged) if str(m.get("content", "")).startswith(SUMMARY_TAG))
    forged[i]["content"] = SUMMARY_TAG + json.dumps({"invented": "ZZZ-NOT-RETURNED"})
    assert verify_execution(forged, _verify_input(ep), ep.env["db"]) is not None


def test_a_teacher_text_that_drops_a_value_is_refused() -> None:
    slot = Slot(1, "reply", "p", "My email is a@b.c.", ("a@b.c",))
    assert slot_problem(slot, "My email is a@b.c, thanks.") is None
    assert "drops" in slot_problem(slot, "You have my email.")
    assert "markup" in slot_problem(slot, "<tool_call>a@b.c")


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_restated_requests_stay_playable(share: float) -> None:
    ep = _episode(3, 7)
    new = ReferenceEpisode(ep.env, restate(ep.task, random.Random(0), share), ep.calls)
    played = play(new, random.Random(0))
    assert verify_execution(played.messages, _verify_input(new), new.env["db"]) is None
