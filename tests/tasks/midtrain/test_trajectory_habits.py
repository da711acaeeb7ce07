"""The habits environment trajectories teach: one acting customer per task, identified before the first write and
scored by the reward's ``policy``; no read without a reason; the outcome stated with the values the writes returned;
reasons that are true of the rejected alternatives; text-route results consistent with what the user gave."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from midtrain_fixtures import environments

import envgen.environment
from envgen.customers import owner_of, written_rows
from envgen.environment import Environment, domain_for, replay
from envgen.seeding import engine_from_bytes
from envgen.taskgen import TaskSettings
from envgen.trajectory_checks import (
    EXECUTION,
    SUMMARY_TAG,
    episode_steps,
    needless_read,
    needless_reads,
    other_customer_write,
    unidentified_write,
    unstated_outcome,
)
from envgen.trajectory_standard import invented_alternative, uninformative_result
from tasks.midtrain.midtrain_decompose import decompose
from tasks.midtrain.midtrain_reason import WHY, _why_not, alternatives
from tasks.midtrain.midtrain_text import HowToError, parse_howto, render_howto, trajectory
from tasks.midtrain.synth import ENV_FIELDS, ReferenceEpisode, Unusable, play, sample_task
from tasks.midtrain.words import fill

SLOW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _episode(index: int, seed: int) -> ReferenceEpisode:
    envs = environments()
    try:
        return sample_task(envs[index % len(envs)], random.Random(seed), 2, 3, TaskSettings(inline_fact_prob=0.9), "x")
    except Unusable:
        reject()


def _row(ep: ReferenceEpisode, messages: list[dict]) -> dict:
    return {"verifier": EXECUTION, "messages": json.dumps(messages), "env_db": ep.env["db"],
            "verify_input": json.dumps({"env": {k: ep.env[k] for k in ENV_FIELDS}, "task": ep.task})}


def _airline(seed: int = 0) -> ReferenceEpisode:
    for s in range(seed, seed + 40):
        try:
            return sample_task(environments()[0], random.Random(s), 1, 2, TaskSettings(inline_fact_prob=1.0), "x")
        except Unusable:
            continue
    raise AssertionError("no airline episode")


def _foreign_row(ep: ReferenceEpisode) -> tuple[list[dict], str]:
    """The golden calls with the last write retargeted to a row of the same entity another customer owns, chosen
    so the write succeeds (it changes that customer's record), and that row's key."""
    domain = domain_for(ep.env)
    calls = json.loads(ep.task["golden_actions"])
    last = max(i for i, c in enumerate(calls) if domain.tools[c["name"]].is_write)
    entity, _ = written_rows(domain, calls[last]["name"], calls[last]["arguments"])[0]
    customer = json.loads(ep.task["rubric"])["customer"]
    spec = domain.spec.entity(entity)
    engine = engine_from_bytes(ep.env["db"])
    with engine.connect() as conn:
        table = domain.tables[entity]
        keys = [r[0] for r in conn.execute(table.select().with_only_columns(table.c[spec.key]))]
        others = [k for k in keys if owner_of(domain, conn, entity, k) not in (None, customer)]
    engine.dispose()
    runtime = Environment(ep.env)
    for other in others:
        crossed = [*calls[:last], {**calls[last], "arguments": {**calls[last]["arguments"], spec.key: other}},
                   *calls[last + 1:]]
        replay(runtime, ep.task, crossed)
        if runtime.tool_log[last]["wrote"]:
            return crossed, other
    raise AssertionError("no write on another customer's record succeeds")


def _airline_crossed() -> tuple[ReferenceEpisode, list[dict], str]:
    for seed in range(40):
        ep = _airline(seed)
        try:
            return (ep, *_foreign_row(ep))
        except AssertionError:
            continue
    raise AssertionError("no airline episode with a foreign row")


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_a_task_acts_for_one_customer_identified_before_the_first_write(index: int, seed: int) -> None:
    ep = _episode(index, seed)
    domain = domain_for(ep.env)
    played = play(ep, random.Random(seed), 3)
    row = _row(ep, played.messages)
    assert other_customer_write(row) is None and unidentified_write(row) is None
    calls, _, _ = episode_steps(played.messages)
    first_write = next(i for i, c in enumerate(calls) if domain.tools[c["name"]].is_write)
    customer = domain.spec.customer_entity
    assert any(domain.tools[c["name"]].entity == customer.name for c in calls[:first_write])
    assert "Act only on the identified customer's own records" in ep.task["system_prompt"]
    internal = {f["label"] for f in json.loads(ep.task["user_profile"])["facts"]}
    assert f"{customer.name.replace('_', ' ')} id" not in internal  # the lookup returns it; nobody asks for it


def test_the_policy_fails_a_write_on_another_customers_record_and_a_write_before_identification() -> None:
    ep, crossed, _ = _airline_crossed()
    calls = json.loads(ep.task["golden_actions"])
    runtime = Environment(ep.env)
    assert replay(runtime, ep.task).components["policy"] == 1.0
    score = replay(runtime, ep.task, crossed)
    assert score.components["policy"] == 0.0 and any("not of the identified customer" in v
                                                     for v in score.info["violations"])
    unidentified = calls[1:]  # the identifying lookup dropped: the write comes first
    assert replay(runtime, ep.task, unidentified).components["policy"] == 0.0


def test_a_mutation_of_the_rubric_check_lets_a_cross_customer_write_through(monkeypatch) -> None:
    """The check is what fails the episode: with it disabled, the same cross-customer write scores policy 1."""
    ep, crossed, _ = _airline_crossed()
    monkeypatch.setattr(envgen.environment, "customer_policy_problem", lambda *a: None)
    assert replay(Environment(ep.env), ep.task, crossed).components["policy"] == 1.0


def test_the_contract_refuses_a_cross_customer_write_an_unidentified_write_and_a_needless_read() -> None:
    ep, crossed_calls, other = _airline_crossed()
    messages = play(ep, random.Random(0), 3).messages
    foreign = crossed_calls[max(i for i, c in enumerate(crossed_calls)
                                if domain_for(ep.env).tools[c["name"]].is_write)]
    crossed = [dict(m) for m in messages]
    last_write = max(i for i, m in enumerate(crossed) if m.get("tool_calls")
                     and m["tool_calls"][0]["function"]["name"] == foreign["name"])
    call = dict(crossed[last_write]["tool_calls"][0])
    call["function"] = {**call["function"], "arguments": json.dumps(foreign["arguments"])}
    crossed[last_write] = {**crossed[last_write], "tool_calls": [call]}
    assert "not only of the acting customer" in other_customer_write(_row(ep, crossed))
    assert other in json.dumps(crossed)
    assert "not of the identified customer" in unidentified_write(_row(ep, crossed))
    first_call = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    unidentified = messages[:first_call] + messages[first_call + 2:]
    assert "before the customer was identified" in unidentified_write(_row(ep, unidentified))
    again = [dict(m) for m in messages[first_call:first_call + 2]]  # the identifying lookup, run a second time
    again[0] = {**again[0], "tool_calls": [{**again[0]["tool_calls"][0], "id": "call_again"}]}
    again[1] = {**again[1], "tool_call_id": "call_again"}
    later = json.dumps([m.get("tool_calls") for m in messages[first_call + 2:]])
    if any(isinstance(v, str) and len(v) > 2 and v in later for v in json.loads(again[1]["content"]).values()):
        redundant = messages[:first_call + 2] + again + messages[first_call + 2:]
        assert "looks up what is already known" in needless_read(_row(ep, redundant))
    assert needless_read(_row(ep, messages)) is None


def test_a_lookup_of_a_stated_value_is_needless() -> None:
    """The request states flight F; asking for a flight number and looking it up to get F back has no reason."""
    domain = domain_for(environments()[0])
    calls = [{"name": "lookup_flight_by_flight_number", "arguments": {"flight_number": "LC0106"}},
             {"name": "change_flight", "arguments": {"reservation_id": "RES1", "new_flight_id": "FLJILEPU"}}]
    results = ['{"flight_id":"FLJILEPU","flight_number":"LC0106"}', '{"ok":true}']
    stated = "Please move my reservation RES1 to flight FLJILEPU."
    assert needless_reads(domain, calls, results, [stated, stated]) == [0]
    assert needless_reads(domain, calls, results, ["Move RES1 to flight LC0106."] * 2) == []


def test_a_check_of_the_record_about_to_change_is_a_reason_also_when_compressed() -> None:
    """Reading the reservation a write then changes is a check before it, whether the result is whole or, after
    step compression, summarized (a compressed row of `make demo`'s sft_set was refused for it)."""
    domain = domain_for(environments()[0])
    calls = [{"name": "get_reservation", "arguments": {"reservation_id": "RES1"}},
             {"name": "change_flight", "arguments": {"reservation_id": "RES1", "new_flight_id": "FLJILEPU"}}]
    stated = ["Please move my reservation RES1 to flight FLJILEPU."] * 2
    whole = '{"reservation_id":"RES1","flight_id":"FLOLD","status":"confirmed"}'
    for result in (whole, SUMMARY_TAG + '{"reservation_id": "RES1", "status": "confirmed"}'):
        assert needless_reads(domain, calls, [result, '{"ok":true}'], stated) == []


def test_a_final_message_without_a_written_value_is_refused() -> None:
    ep = _airline()
    messages = play(ep, random.Random(0), 3).messages
    assert unstated_outcome(_row(ep, messages)) is None
    template = [*messages[:-1], {"role": "assistant",
                                 "content": "Everything you asked for is done. The details: nothing more to report."}]
    assert "states none of the values" in unstated_outcome(_row(ep, template))


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_the_outcome_is_stated_without_placeholder_labels(index: int, seed: int) -> None:
    ep = _episode(index, seed)
    messages = play(ep, random.Random(seed), 3).messages
    assert unstated_outcome(_row(ep, messages)) is None
    text = json.dumps([m.get("content") for m in messages if m["role"] in ("user", "assistant")])
    assert "(2)" not in text and "nothing more to report" not in text


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 10_000), hidden=st.integers(1, 3))
def test_decomposition_hides_no_value_behind_a_lookup_of_itself(index: int, seed: int, hidden: int) -> None:
    ep = _episode(index, seed)
    try:
        new, _ = decompose(ep, random.Random(seed), hidden)
    except Unusable:
        return
    played = play(new, random.Random(seed), 3)
    assert needless_read(_row(new, played.messages)) is None


@SLOW
@given(index=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_rejected_alternatives_have_reasons_true_of_them(index: int, seed: int) -> None:
    ep = _episode(index, seed)
    domain = domain_for(ep.env)
    try:
        new, _ = alternatives(ep, random.Random(seed), 3)
    except Unusable:
        return
    for note in new.notes.values():
        assert "data, and this step needs" not in note
    played = play(new, random.Random(seed), 3)
    row = {**_row(new, played.messages), "tools": json.dumps(played.tools)}
    assert invented_alternative(row) is None  # offered tools, rows seen earlier, true ownership claims
    for call in ep.calls:
        tool = domain.tools[call["name"]]
        same = tool.entity.replace("_", " ")
        for alt in (domain.tools[n] for n in ep.env["tool_names"] if domain.tools[n].entity == tool.entity):
            reason = _why_not(alt, tool, call, random.Random(seed))
            assert reason not in {fill(t, alt=same, entity=same) for t in WHY["other_entity"]}


@given(seed=st.integers(0, 10_000), index=st.integers(0, 3))
def test_simulated_results_keep_what_the_user_gave(seed: int, index: int) -> None:
    """No record switches along the way: the record a call finds holds the values the call was given (the user's,
    or an earlier record's key), and every result is a record that holds more than the call was given."""
    from envgen.construct import sample_chain
    from tasks.midtrain.synth import identifying_tool

    domain = domain_for(environments()[index % len(environments())])
    rng = random.Random(seed)
    chain = sample_chain(domain, rng, set(domain.tools), 3)
    identify = identifying_tool(domain, set(domain.tools))
    if not chain:
        return
    chain = [identify.name, *chain] if identify.name not in chain else chain
    howto = parse_howto(render_howto(domain, chain, "do it"))
    for record_domain in (None, domain):
        try:
            messages = trajectory(howto, random.Random(seed), record_domain)
        except HowToError:
            continue  # a step returns no field a later one takes: the stage rejects the text
        calls = [json.loads(c["function"]["arguments"]) for m in messages for c in m.get("tool_calls") or []]
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        for arguments, content in zip(calls, results, strict=True):
            rows = content.get("results") or [next((v for v in content.values() if isinstance(v, dict)), content)]
            for p, value in arguments.items():  # the record a call finds holds what the call was given
                assert all(row.get(p, value) == value for row in rows), (p, value, rows)
        assert messages[2]["tool_calls"][0]["function"]["name"] == identify.name  # who, before anything changes
        if record_domain is not None:  # the customer is identified from the record the lookup returned
            key = domain.spec.customer_entity.key
            assert results[0][key] and all(a.get(key, results[0][key]) == results[0][key] for a in calls[1:])
        assert uninformative_result({"verifier": "schema", "messages": json.dumps(messages)}) is None


@pytest.mark.parametrize("domain_name", ["real_estate", "university", "airline", "gym"])
def test_every_domain_names_its_customer(domain_name: str) -> None:
    from envgen.compiler import compiled

    assert compiled(domain_name).spec.customer_entity is not None


@given(seed=st.integers(0, 10_000), index=st.integers(0, 3))
def test_every_procedure_step_before_the_write_feeds_a_later_one(seed: int, index: int) -> None:
    from envgen.construct import sample_chain
    from tasks.midtrain.midtrain_text import steps_with_a_reason

    domain = domain_for(environments()[index % len(environments())])
    chain = sample_chain(domain, random.Random(seed), set(domain.tools), 4)
    if not chain:
        return
    kept = steps_with_a_reason(domain, chain)
    assert kept[-1] == chain[-1] and set(kept) <= set(chain)
    text = render_howto(domain, kept, "do it")
    for k in range(1, len(kept)):
        assert f"from step {k})" in text or f"from step {k} " in text or f"from step {k}." in text


def test_a_spec_without_a_derivable_customer_must_declare_one(tmp_path) -> None:
    import copy

    import yaml
    from spec_fixtures import MINIMAL

    from envgen.checks import check_domain_spec
    from envgen.domain_spec import load_spec

    two = {**copy.deepcopy(MINIMAL), "name": "two"}
    two["entities"].append({**copy.deepcopy(two["entities"][0]), "name": "other", "key": "other_id",
                            "id_prefix": "OT"})
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(two, sort_keys=False))
    assert load_spec(path).customer_entity is None
    assert any("no customer entity" in p for p in check_domain_spec(path, 0).problems)
    declared = tmp_path / "declared.yaml"
    declared.write_text(yaml.safe_dump({**two, "name": "declared", "customer": "other"}, sort_keys=False))
    assert load_spec(declared).customer_entity.name == "other"
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump({**two, "name": "unknown", "customer": "ghost"}, sort_keys=False))
    assert any("unknown entity 'ghost'" in p for p in check_domain_spec(unknown, 0).problems)


def test_an_augmented_refusal_still_refuses() -> None:
    """Before: a plan or reasons added to a refusal row played it again as a task and closed with "Nothing needed
    to change." instead of the refusal."""
    from tasks.midtrain.midtrain_plan import plan
    from tasks.midtrain.synth import episode_of, refusal_episode

    for seed in range(40):
        try:
            refusal = refusal_episode(_airline(seed), random.Random(seed))
            break
        except Unusable:
            continue
    played = play(refusal, random.Random(0), 3)
    row = {**_row(refusal, played.messages), "env_db": refusal.env["db"]}
    again = episode_of(row)
    assert again.refusal == played.messages[-1]["content"] == refusal.refusal
    for augmented in (plan(again, random.Random(1))[0], alternatives(again, random.Random(1), 2)[0]):
        final = play(augmented, random.Random(1), 3).messages[-1]["content"]
        assert final == refusal.refusal and "Nothing needed to change" not in final
