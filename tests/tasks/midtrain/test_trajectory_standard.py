"""The trajectory standard every trajectory stage holds to (envgen/trajectory_standard.py): each habit refuses the
defect it names on a row otherwise played by the reference agent, the contract names the check, and the sentence
frames measure how varied a writer is."""

from __future__ import annotations

import json
import random
import re

from hypothesis import given
from hypothesis import strategies as st
from midtrain_fixtures import environments

from data_contracts.gate import validate
from envgen.environment import domain_for
from envgen.records import TRAJECTORY
from envgen.taskgen import TaskSettings
from envgen.trajectory_checks import EXECUTION, SCHEMA
from envgen.trajectory_standard import (
    VARIED_SENTENCES,
    habit_problem,
    internal_key_told,
    internal_keys,
    invented_alternative,
    repeated_call,
    standard_contract,
    ungrounded_argument,
    uninformative_result,
    untrue_final,
    untrue_world,
)
from envgen.wording import MIN_FRAMED_SENTENCES, frame_share, sentence_frame, sentences
from tasks.midtrain.synth import ENV_FIELDS, ReferenceEpisode, Unusable, play, sample_task
from tasks.midtrain.trajectory_stages import make_row


def _played(index: int = 0) -> tuple[ReferenceEpisode, list[dict], list[dict]]:
    """An episode of fixture environment ``index``, its played messages and offered tools."""
    env = environments()[index]
    for seed in range(40):
        try:
            ep = sample_task(env, random.Random(seed), 1, 2, TaskSettings(inline_fact_prob=1.0), "std")
        except Unusable:
            continue
        played = play(ep, random.Random(seed), 3)
        return ep, played.messages, played.tools
    raise AssertionError("no playable episode")


def _row(ep: ReferenceEpisode, messages: list[dict], tools: list[dict]) -> dict:
    return make_row(id="r", source="midtrain_env", messages=messages, tools=tools, verifier=EXECUTION,
                    verify_input={"env": {k: ep.env[k] for k in ENV_FIELDS}, "task": ep.task,
                                  "limits": {"max_tokens": 10**6, "heldout": []}},
                    tokens=1, domain=ep.env["domain"], env_id=ep.env["env_id"], task_id=ep.task["task_id"],
                    env_db=bytes(ep.env["db"]))


def _failing(row: dict) -> list[str]:
    report = validate("t", "trajectories", TRAJECTORY.frame([row]), standard_contract(["midtrain_env"]), "t")
    return [r.name for r in report.results if not r.success]


def test_a_played_row_keeps_every_habit() -> None:
    ep, messages, tools = _played()
    assert _failing(_row(ep, messages, tools)) == []


def _first_call(messages: list[dict]) -> int:
    return next(i for i, m in enumerate(messages) if m.get("tool_calls"))


def test_an_argument_nobody_stated_is_refused_and_the_system_prompt_is_no_source() -> None:
    """Before: 29 of 39 small_envs golden trajectories called an id nobody stated or returned."""
    ep, messages, tools = _played()
    i = _first_call(messages)
    value = next(iter(json.loads(messages[i]["tool_calls"][0]["function"]["arguments"]).values()))
    hidden = [{**m, "content": str(m["content"]).replace(str(value), "(given)")} if m["role"] == "user" else m
              for m in messages]
    hidden[0] = {**hidden[0], "content": f"{hidden[0]['content']} {value}"}  # only the system prompt has it now
    assert "no earlier message states or returns" in ungrounded_argument(_row(ep, hidden, tools))
    assert "arguments_grounded" in _failing(_row(ep, hidden, tools))


def test_the_user_stating_an_internal_key_and_the_agent_asking_for_one_are_refused() -> None:
    """Before: the agent asked "To continue I need your complaint id" in 13 of 24 rows of every route."""
    ep, messages, tools = _played()
    domain = domain_for(ep.env)
    key = min(internal_keys(domain, bytes(ep.env["db"])))
    told = [*messages[:1], {**messages[1], "content": f"{messages[1]['content']} It is about {key}."}, *messages[2:]]
    assert f"the user states internal key {key}" in internal_key_told(_row(ep, told, tools))
    customer = domain.spec.customer_entity
    asked = [*messages[:2], {"role": "assistant", "content": f"Could you tell me your {customer.name} id?"},
             {"role": "user", "content": "I do not know it."}, *messages[2:]]
    assert "the agent asks for an internal key" in internal_key_told(_row(ep, asked, tools))
    assert "no_internal_key" in _failing(_row(ep, told, tools))


def test_a_final_claiming_a_change_that_did_not_happen_or_an_unheld_figure_is_refused() -> None:
    """Before: "Space SPCH09BIC is updated" when nothing about the space changed (6 of 24 rows per route)."""
    from envgen.trajectory_standard import replayed_writes

    ep, messages, tools = _played()
    domain = domain_for(ep.env)
    unchanged = [w for w in replayed_writes(domain, bytes(ep.env["db"]), ep.calls) for (entity, key), before
                 in w["named"].items() if w["after_named"][(entity, key)] == before]
    for w in unchanged[:1]:
        said = [*messages[:-1], {"role": "assistant", "content": f"Done. Record {w['key']} is updated."}]
        assert "left it as it was" in untrue_final(_row(ep, said, tools))
    invented = [*messages[:-1], {"role": "assistant", "content": f"{messages[-1]['content']} You paid 123456.78."}]
    assert "a figure the database does not hold" in untrue_final(_row(ep, invented, tools))
    assert "final_true" in _failing(_row(ep, invented, tools))


def test_a_total_of_one_units_price_for_several_units_is_refused() -> None:
    """Before: a 13-night hotel booking was reported with one night's rate as its total."""
    from envgen.compiler import compiled
    from envgen.seeding import seeded_memory_engine, sqlite_bytes

    domain = compiled("hotel")
    engine = seeded_memory_engine(domain, 0)
    with engine.connect() as conn:
        rooms = [dict(r._mapping) for r in conn.execute(domain.tables["room"].select())]
        cards = [dict(r._mapping) for r in conn.execute(domain.tables["payment_card"].select())]
    room = next(r for r in rooms if r["status"] == "available")
    card = next(c for c in cards if c["active"] and c["available_credit"] > 1000)
    calls = [{"name": "book_room", "arguments": {"room_id": room["room_id"], "guest_id": card["guest_id"],
                                                  "payment_card_id": card["payment_card_id"], "nights": 13}}]
    problem = untrue_world(domain, sqlite_bytes(engine), calls)
    assert problem is None or "one unit's price" not in problem


def test_a_final_is_rendered_from_what_the_writes_did() -> None:
    """Every field a write changed is reported with the value the database now holds; "Your request is complete."
    (39 of 39 small_envs finals, 18 with "Details: none.") is gone."""
    ep, messages, _ = _played(1)
    from envgen.trajectory_standard import replayed_writes

    final = messages[-1]["content"]
    assert "Your request is complete" not in final and "Details:" not in final
    for w in replayed_writes(domain_for(ep.env), bytes(ep.env["db"]), ep.calls):
        for (_, key), before in w["named"].items():
            after = w["after_named"][(_, key)]
            for field in (f for f in after if after[f] != before[f]):
                value = after[field]
                shown = ("yes" if value else "no") if isinstance(value, bool) else (
                    f"{value:.2f}" if isinstance(value, float) else str(value))
                assert shown in final, (field, shown, final)


def test_a_write_on_an_event_dated_before_now_is_refused() -> None:
    """Before: equipment rented for an event dated before the database's now (2 of 24 rows per route)."""
    from envgen.compiler import compiled
    from envgen.seeding import seeded_memory_engine, sqlite_bytes

    domain = compiled("event_venue")
    engine = seeded_memory_engine(domain, 0)
    table = domain.tables["event_booking"]
    with engine.begin() as conn:
        row = dict(conn.execute(table.select().limit(1)).first()._mapping)
        conn.execute(table.update().where(table.c.booking_id == row["booking_id"]).values(
            status="confirmed", event_date="2020-01-01"))
    db = sqlite_bytes(engine)
    calls = [{"name": "rent_equipment", "arguments": {"booking_id": row["booking_id"], "item": "stage", "quantity": 2}}]
    assert "is before now" in untrue_world(domain, db, calls)
    with engine.begin() as conn:
        conn.execute(table.update().where(table.c.booking_id == row["booking_id"]).values(event_date="2099-01-01"))
    assert untrue_world(domain, sqlite_bytes(engine), calls) is None


def test_a_bare_acknowledgement_or_an_echo_is_refused() -> None:
    """Before: 60 of 60 midtrain_text results were {"ok": true, ...}, 12 rows echoing the call's own arguments."""
    call = {"id": "c0", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O1"}'}}
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "Refund order O1."},
            {"role": "assistant", "content": "", "tool_calls": [call]}]
    row = {"verifier": SCHEMA, "messages": ""}
    for echo in ('{"ok": true, "order_id": "O1"}', '{"ok": true}'):
        row["messages"] = json.dumps([*base, {"role": "tool", "tool_call_id": "c0", "content": echo}])
        assert "only echoes its arguments" in uninformative_result(row)
    row["messages"] = json.dumps([*base, {"role": "tool", "tool_call_id": "c0",
                                          "content": '{"order_id": "O1", "status": "delivered"}'}])
    assert uninformative_result(row) is None


def test_a_candidate_the_conversation_does_not_offer_is_refused() -> None:
    """Before: 62 of 176 rejected candidates named tools the row never offered, all 27 wrong-row ids appeared
    nowhere in the conversation."""
    ep, messages, tools = _played()
    domain = domain_for(ep.env)
    offered = {t["function"]["name"] for t in tools}
    missing = min(set(domain.tools) - offered)
    i = _first_call(messages)
    tool = messages[i]["tool_calls"][0]["function"]["name"]
    note = f"Options I considered:\n1. {missing}: no, it does something else.\nSo I call {tool}."
    noted = [*messages[:i], {**messages[i], "content": note}, *messages[i + 1:]]
    assert f"the candidate {missing} is not among the tools offered" in invented_alternative(_row(ep, noted, tools))
    key = domain.spec.entity(domain.tools[tool].entity).key
    unseen = f"Options I considered:\n1. {tool} with {key.replace('_', ' ')} ZZZ999: no, another one.\nSo: {tool}."
    noted = [*messages[:i], {**messages[i], "content": unseen}, *messages[i + 1:]]
    assert "ZZZ999 appears nowhere earlier" in invented_alternative(_row(ep, noted, tools))
    assert "alternatives_from_conversation" in _failing(_row(ep, noted, tools))


def test_a_repeated_research_read_is_needless_and_only_its_ids_must_be_grounded() -> None:
    search = {"id": "c0", "type": "function", "function": {"name": "search", "arguments": '{"query": "the Danube"}'}}
    read = {"id": "c1", "type": "function", "function": {"name": "open", "arguments": '{"doc_id": "E7"}'}}
    again = {**read, "id": "c2"}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Write about rivers."},
                {"role": "assistant", "content": "I search.", "tool_calls": [search]},
                {"role": "tool", "tool_call_id": "c0", "content": '{"results": [{"doc_id": "E7"}]}'},
                {"role": "assistant", "content": "I open E7.", "tool_calls": [read]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"doc_id": "E7", "title": "Danube"}'},
                {"role": "assistant", "content": "The Danube is long."}]
    row = {"verifier": "research harness filters: role identity, tool-call/response closure, artifact validity (x)",
           "messages": json.dumps(messages)}
    assert ungrounded_argument(row) is None and repeated_call(row) is None  # the query is the model's own words
    twice = [*messages[:6], {"role": "assistant", "content": "Again.", "tool_calls": [again]},
             {"role": "tool", "tool_call_id": "c2", "content": messages[5]["content"]}, messages[6]]
    assert "called again with the same arguments" in repeated_call({**row, "messages": json.dumps(twice)})


# --- sentence frames ----------------------------------------------------------------------------------------


def test_a_frame_keeps_function_words_and_makes_every_value_one_slot() -> None:
    assert sentence_frame("My reservation number is RES123.") == sentence_frame("My email is a.b@c.com.") == \
        "my <> is <>"
    assert sentence_frame("I call lookup_user_by_email with 12.50 now.") == "i <> with <> now"
    assert sentences("Plan:\n1. Look it up. Then pay.\n- Done, Mr. Smith.") == \
        ["Plan:", "Look it up.", "Then pay.", "Done, Mr. Smith."]


@given(words=st.lists(st.sampled_from(["booking", "RES9", "12.50", "flight", "x@y.z", "lookup_a_b"]), min_size=1,
                      max_size=4))
def test_a_frame_does_not_depend_on_the_values_filling_it(words: list[str]) -> None:
    values = " ".join(words)
    assert sentence_frame(f"I moved {values} to you.") == "i <> to you"


def test_an_output_of_one_template_is_refused_as_a_whole_a_varied_one_passes() -> None:
    """Before: the ten most common frames covered 52-76% of each route's assistant sentences."""
    ep, messages, tools = _played()
    template = [{**m, "content": f"I look up record {i} now."} if m["role"] == "assistant" and m.get("tool_calls")
                else m for i, m in enumerate(messages)]
    rows = [_row(ep, template, tools)] * (MIN_FRAMED_SENTENCES // 2)
    assert all(VARIED_SENTENCES.fn(TRAJECTORY.frame(rows)))
    assert not any(VARIED_SENTENCES.fn(TRAJECTORY.frame(rows[:3])))  # too few sentences to judge
    assert VARIED_SENTENCES.fn(TRAJECTORY.frame([])) == []


def test_the_reference_agent_varies_its_sentences() -> None:
    """Played on the fixture environments, every row keeps every habit and the ten most common frames of the
    agent's sentences stay within 30% (24 episodes: about 250 sentences)."""
    texts, users = [], []
    for i in range(24):
        env = environments()[i % len(environments())]
        try:
            ep = sample_task(env, random.Random(i), 2, 3, TaskSettings(), f"v{i}")
        except Unusable:
            continue
        played = play(ep, random.Random(i), 3)
        messages = played.messages
        assert habit_problem(_row(ep, messages, played.tools)) is None  # no internal key said or asked, ...
        texts += [m["content"] for m in messages if m["role"] == "assistant" and m["content"]]
        users += [s for m in messages if m["role"] == "user" for s in sentences(m["content"])]
    share, total, _ = frame_share(texts)
    assert total >= MIN_FRAMED_SENTENCES and share <= 0.30, (share, total)
    mine = sum(bool(re.fullmatch(r"my <> is <>", sentence_frame(s))) for s in users)
    assert mine / len(users) < 0.25  # before: 53% of user sentences were "My <X> is <V>."


