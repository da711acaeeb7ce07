"""Instruction transforms and tool faults on a tiny hand-made task: each applies, is recorded, is recoverable."""

from __future__ import annotations

import copy
import random
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envgen.noise.curriculum import noise_level
from envgen.noise.instruction import (
    INSTRUCTION_TRANSFORMS,
    SYNONYM_TO_CANONICAL,
    Draft,
    find_details,
    instruction_transform,
    mentions,
)
from envgen.noise.records import DECLARED, NoiseRecord, Transform
from envgen.noise.tools import (
    CONTINUATION_ARGS,
    TOOL_FAULTS,
    FieldFault,
    ToolNoise,
    alias,
    draw_tool_fault,
    drift,
    normalize_key,
    tool_fault,
)

INSTRUCTION_KINDS = tuple(INSTRUCTION_TRANSFORMS)
TOOL_KINDS = tuple(TOOL_FAULTS)

GOLDEN = [
    {"name": "lookup_user_by_email", "arguments": {"email": "ann@example.com"}},
    {"name": "list_reservations_by_user_id", "arguments": {"user_id": "U1"}},
    {"name": "cancel_reservation", "arguments": {"reservation_id": "RES7", "status": "cancelled"}},
]
OUTPUTS = [
    {"user_id": "U1", "email": "ann@example.com", "first_name": "Ann", "date_of_birth": "1990-04-02",
     "balance": 120.5},
    {"results": [{"reservation_id": "RES3", "status": "confirmed"}, {"reservation_id": "RES5", "status": "confirmed"},
                 {"reservation_id": "RES7", "status": "confirmed"}], "truncated": False},
    {"reservation_id": "RES7", "status": "cancelled"},
]
DESCRIPTION = "Please cancel my reservation RES7, I want to have it cancelled. My email is ann@example.com."
PROFILE = {"persona": "Ann, a frequent flyer", "facts": [{"name": "email", "label": "email address",
                                                            "value": "ann@example.com"}]}


def draft() -> Draft:
    return Draft(DESCRIPTION, copy.deepcopy(PROFILE), find_details(DESCRIPTION, PROFILE, GOLDEN, OUTPUTS))


def test_details_are_golden_values_stated_in_the_text() -> None:
    details = {d.surface: d for d in draft().details}
    assert set(details) == {"ann@example.com", "RES7", "cancelled"}
    assert details["ann@example.com"].profile_path == "facts.0.value"
    assert details["RES7"].lookup == (1, "results.2.reservation_id")
    assert details["cancelled"].lookup is None


@pytest.mark.parametrize("kind", INSTRUCTION_KINDS)
def test_each_instruction_transform_applies_and_records(kind: str) -> None:
    d = draft()
    result = INSTRUCTION_TRANSFORMS[kind](d, random.Random(0), 1)
    assert isinstance(result, Transform), result
    assert result.kind == kind and result.family == "instruction" and result.hint
    assert d.description != DESCRIPTION
    if "removed" in result.changed:  # the detail left the text and is recoverable where the record says
        assert not mentions(d.description, result.changed["removed"])
        if result.recovery == "ask_user":
            path = result.changed["profile_path"].split(".")
            node = d.user_profile
            for part in path:
                node = node[int(part)] if part.isdigit() else node[part]
            assert str(node) == result.changed["removed"]
        if result.recovery == "look_up":
            assert result.changed["lookup_step"] < 2
    if kind == "terminology":
        for term, synonym in result.changed["synonyms"].items():
            assert SYNONYM_TO_CANONICAL[synonym] == term
            assert mentions(d.description, synonym)
        assert result.bites == bool(result.changed["value_terms"])


def test_not_applicable_transform_gives_a_reason() -> None:
    d = Draft("Do it now.", {}, [])
    for kind in ("ambiguity", "implicit_assumption", "terminology", "underspecification"):
        assert isinstance(INSTRUCTION_TRANSFORMS[kind](d, random.Random(0), 1), str)


@pytest.mark.parametrize("kind", TOOL_KINDS)
def test_each_tool_fault_is_drawn_recorded_and_recoverable(kind: str) -> None:
    fault = draw_tool_fault(kind, GOLDEN, OUTPUTS, random.Random(3), 2, set())
    assert isinstance(fault, Transform), fault
    assert fault.family == "tool" and fault.kind == kind and fault.hint
    step = next(i for i, a in enumerate(GOLDEN) if a["name"] == fault.tool)
    noise = ToolNoise([fault])
    executions = []

    def execute(name: str, args: dict) -> object:
        executions.append((name, args))
        return OUTPUTS[step]

    args = GOLDEN[step]["arguments"]
    first = noise.call(fault.tool, args, execute)
    assert first.events, "every applied fault leaves an event"
    # Recover the way the record says, and get the clean output back.
    if fault.recovery == "retry":
        assert executions == [] and first.content["error"]["retryable"]
        response = first
        for _ in range(fault.changed["failures"]):
            response = noise.call(fault.tool, args, execute)
        assert response.content == OUTPUTS[step] and len(executions) == 1
    elif fault.recovery == "requery":
        assert first.content != OUTPUTS[step]
        assert noise.call(fault.tool, args, execute).content == OUTPUTS[step]
    elif fault.recovery == "follow_continuation":
        token_arg = fault.changed["token_arg"]
        assert token_arg in CONTINUATION_ARGS
        parts, response = [], first.content
        while True:
            parts.append(response["data"] if kind == "truncation" else response)
            token = response.get(f"next_{token_arg}") or response.get(token_arg)
            if not token:
                break
            response = noise.call(fault.tool, {**args, token_arg: token}, execute).content
        if kind == "pagination":
            merged = {**parts[-1], "results": [x for p in parts for x in p["results"]]}
        else:
            merged = {k: v for p in parts for k, v in p.items()}
        assert merged == OUTPUTS[step] and len(executions) == 1
        schema = noise.tool_schemas([{"type": "function", "function": {"name": fault.tool, "parameters": {}}}])
        assert token_arg in schema[0]["function"]["parameters"]["properties"]
    elif fault.recovery == "resolve_alias":
        node = first.content
        renamed = fault.changed["renamed_to"]
        path = fault.changed["path"].split(".")
        for part in path[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        assert path[-1] not in node and normalize_key(renamed) == normalize_key(path[-1])
    elif fault.recovery == "normalize_format":
        assert fault.changed["after"] == drift(fault.changed["before"], fault.changed["style"])
        assert first.content != OUTPUTS[step]
    else:
        assert fault.kind == "latency" and first.latency_ms > 0 and first.content == OUTPUTS[step]


def test_infrastructure_failure_is_labelled_not_raised() -> None:
    def broken(name: str, args: dict) -> object:
        raise OSError("database is locked")

    response = ToolNoise([]).call("get_user", {"user_id": "U1"}, broken)
    assert response.infra_error and response.content["error"]["type"] == "infrastructure"


def test_record_round_trips_and_validates_kinds() -> None:
    fault = draw_tool_fault("transient_failure", GOLDEN, OUTPUTS, random.Random(1), 2, set())
    record = NoiseRecord(level=2, seed=7, clean_task_id="t1", transforms=(fault,))
    assert NoiseRecord.from_json(record.to_json()) == record
    assert NoiseRecord.from_json("") is None
    with pytest.raises(ValueError, match="not one of"):
        Transform(family="tool", kind="ambiguity", tool="x", changed={}, recovery="none", hint="")


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[a-z]{1,6}(_[a-z]{1,6}){0,3}", fullmatch=True), st.sampled_from(["camel", "pascal", "upper", "kebab"]))
def test_aliases_normalize_back(name: str, style: str) -> None:
    assert normalize_key(alias(name, style)) == normalize_key(name)


@settings(max_examples=200, deadline=None)
@given(st.dates(min_value=date(1000, 1, 1)), st.sampled_from(["us", "long", "compact"]))
def test_date_drift_parses_back(day, style: str) -> None:
    from tasks.noise.agents import canonicalize

    drifted = drift(day.isoformat(), style)
    assert drifted != day.isoformat()
    assert canonicalize(drifted, like=day.isoformat()) == day.isoformat()


@settings(max_examples=200, deadline=None)
@given(st.decimals(min_value=0, max_value=10**6, places=2).map(float))
def test_currency_drift_parses_back(amount: float) -> None:
    from tasks.noise.agents import canonicalize

    assert canonicalize(drift(amount, "currency"), like=amount) == amount


ROWS = st.lists(st.fixed_dictionaries({"id": st.from_regex(r"R[A-Z0-9]{5}", fullmatch=True),
                                       "n": st.integers(0, 99)}), min_size=2, max_size=12)


@settings(max_examples=150, deadline=None)
@given(rows=ROWS, size=st.integers(1, 11), kind=st.sampled_from(["pagination", "truncation"]))
def test_partial_responses_reassemble_to_the_original(rows: list, size: int, kind: str) -> None:
    from tasks.noise.agents import _continuation, _merge, token_arg

    original = {"results": rows, "truncated": False} if kind == "pagination" else {
        **{f"f{i}": r["id"] for i, r in enumerate(rows)}}
    token = "page_token" if kind == "pagination" else "continuation_token"
    fault = Transform(family="tool", kind=kind, tool="t", changed={"part_size": size, "token_arg": token},
                      recovery="follow_continuation", hint="follow")
    noise = ToolNoise([fault])
    parts = [noise.call("t", {}, lambda *_: original).content]
    while (next_token := _continuation(parts[-1])) is not None:
        parts.append(noise.call("t", {token_arg(parts[-1]): next_token}, lambda *_: original).content)
    assert len(parts) >= 1
    merged = _merge(parts) if len(parts) > 1 else parts[0]
    if len(parts) > 1:
        assert merged == {k: v for k, v in original.items() if k != "truncated"}
    else:  # nothing to split at this size: the response is untouched
        assert merged == original


IDS = st.from_regex(r"[A-Z]{2,3}[0-9]{4}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(IDS, min_size=1, max_size=4, unique=True), in_profile=st.lists(st.booleans(), min_size=4,
       max_size=4), kind=st.sampled_from(INSTRUCTION_KINDS), seed=st.integers(0, 2**32))
def test_instruction_transforms_keep_every_detail_recoverable(values, in_profile, kind, seed) -> None:
    golden = [{"name": "do", "arguments": {f"arg_{i}": v for i, v in enumerate(values)}}]
    text = "Please cancel the order. " + " ".join(f"Item {i} is {v}." for i, v in enumerate(values))
    facts = [{"name": f"arg_{i}", "label": f"arg {i}", "value": v} for i, v in enumerate(values) if in_profile[i]]

    def run() -> tuple[Draft, Transform | str]:
        d = Draft(text, {"facts": copy.deepcopy(facts)}, find_details(text, {"facts": facts}, golden, [None]))
        return d, INSTRUCTION_TRANSFORMS[kind](d, random.Random(seed), 2)

    draft_a, result = run()
    draft_b, again = run()
    assert (draft_a.description, draft_a.user_profile, result) == (draft_b.description, draft_b.user_profile, again)
    if isinstance(result, str):
        return
    profile_values = {f["value"] for f in draft_a.user_profile.get("facts", [])}
    for v in values:  # every value is still in the text, or the user can tell it
        assert mentions(draft_a.description, v) or v in profile_values


def test_tool_wide_flakiness_fails_the_first_attempts_of_every_call() -> None:
    fault = Transform(family="tool", kind="transient_failure", tool="get_user", arguments=None,
                      changed={"failures": 2, "error": "timeout", "tool_wide": True}, recovery="retry", hint="retry")
    noise = ToolNoise([fault])
    for user in ("U1", "U2"):
        outcomes = [noise.call("get_user", {"user_id": user}, lambda n, a: {"user_id": a["user_id"]}).content
                    for _ in range(3)]
        assert [("error" in o) for o in outcomes] == [True, True, False]
    assert noise.call("other_tool", {}, lambda n, a: {"ok": 1}).content == {"ok": 1}


def test_a_new_kind_of_fault_is_one_declaration() -> None:
    """A class declared with ``tool_fault`` is drawn, recorded, applied around the tool and unlocked by the
    curriculum's hardest level, with nothing else edited."""

    @tool_fault
    class StaleField(FieldFault):  # a test double: the first response holds a field's old value, null
        kind = "test_double_stale_field"
        recovery = "requery"
        withholds = True
        first_attempt_only = True

        def on_field(self, site, rng, path, value, bites) -> Transform:
            return self.transform(site, {"path": path}, f"'{path}' is stale at first; call again.", bites)

        def edit(self, node, key, changed) -> None:
            node[key] = None

    try:
        assert noise_level(4).tool_kinds[-1] == StaleField.kind
        fault = draw_tool_fault(StaleField.kind, GOLDEN, OUTPUTS, random.Random(0), 2, taken := set())
        assert isinstance(fault, Transform) and fault.recovery == "requery" and taken
        assert NoiseRecord.model_validate_json(NoiseRecord(level=4, seed=0, clean_task_id="t", transforms=(fault,))
                                               .to_json()).transforms == (fault,)
        step = next(i for i, a in enumerate(GOLDEN) if a["name"] == fault.tool)
        noise = ToolNoise([fault])
        first, second = (noise.call(fault.tool, fault.arguments, lambda n, a: copy.deepcopy(OUTPUTS[step]))
                         for _ in range(2))
        path = fault.changed["path"].split(".")
        node = first.content
        for part in path[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        assert node[path[-1]] is None and second.content == OUTPUTS[step]
        with pytest.raises(ValueError, match="declared twice"):
            tool_fault(StaleField)
    finally:
        del DECLARED["tool"][StaleField.kind]
    with pytest.raises(ValueError, match="is not one of"):
        Transform(family="tool", kind=StaleField.kind, tool="t", changed={}, recovery="requery", hint="h")


def test_an_instruction_transform_is_declared_once() -> None:
    with pytest.raises(ValueError, match="instruction noise kind 'paraphrase' is declared twice"):
        instruction_transform(INSTRUCTION_TRANSFORMS["paraphrase"])
    assert tuple(INSTRUCTION_TRANSFORMS) == noise_level(4).instruction_kinds
