"""Noisy task texts read as a person writes: every instruction transform, on a verified task of every shipped domain,
leaves one greeting, the request, and grammatical insertions (no "add dish the dish on my account", no "book a the
cabin on my account seat", no "My invoice is the invoice on my account")."""

from __future__ import annotations

import copy
import json
import random
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envgen.compiler import compiled
from envgen.construct import ConstructionFailed, ConstructionSettings, build_environment
from envgen.domain_spec import domain_paths
from envgen.environment import Environment, replay
from envgen.noise.instruction import (
    INSTRUCTION_TRANSFORMS,
    Draft,
    find_details,
    greetings,
    insertion_problem,
    wording_problem,
)
from envgen.noise.records import Transform
from envgen.taskgen import TaskSettings, environment_record, make_task

DOMAINS = tuple(domain_paths())
INSTRUCTION_KINDS = tuple(INSTRUCTION_TRANSFORMS)


@cache
def domain_task(name: str) -> tuple[dict, list]:
    """A task of the domain whose golden calls replay (its facts stated in the text) and their clean outputs."""
    domain = compiled(name)
    for seed in range(12):
        try:
            built = build_environment(domain, seed, ConstructionSettings(min_tools=8, max_chains=2))
        except ConstructionFailed:
            continue
        env = environment_record(domain, built, f"{name}-w{seed}", seed)
        task, _ = make_task(domain, env, built, random.Random(seed), TaskSettings(inline_fact_prob=1.0), mutations=False)
        if task is not None:
            runtime = Environment(env)
            outputs = [json.loads(m["content"]) for m in replay(runtime, task).messages if m["role"] == "tool"]
            runtime.close()
            return task, outputs
    raise AssertionError(f"no verified task of {name}")


def _draft(description: str, profile: dict, golden: list, outputs: list) -> Draft:
    return Draft(description, copy.deepcopy(profile), find_details(description, profile, golden, outputs))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(domain=st.sampled_from(DOMAINS), kind=st.sampled_from(INSTRUCTION_KINDS), seed=st.integers(0, 2**16),
       intensity=st.integers(1, 4))
def test_every_transform_on_every_domain_reads_as_a_person_writes(domain: str, kind: str, seed: int,
                                                                   intensity: int) -> None:
    """Hypothesis draws the domain, the transform, its seed and intensity (60 draws cover the 23 domains and 5
    kinds; each domain's task is built once)."""
    task, outputs = domain_task(domain)
    profile = json.loads(task["user_profile"])
    draft = _draft(task["description"], profile, json.loads(task["golden_actions"]), outputs)
    result = INSTRUCTION_TRANSFORMS[kind](draft, random.Random(seed), intensity)
    if isinstance(result, str):
        return  # the transform does not fit this task: recorded as skipped by the curriculum
    assert wording_problem(draft.description, [result.model_dump()]) is None, draft.description
    if "removed" in result.changed:
        assert result.changed["removed"] not in draft.description


@pytest.mark.parametrize("domain", DOMAINS)
def test_all_transforms_in_turn_keep_one_greeting_and_the_request(domain: str) -> None:
    """The curriculum stacks transforms on one text: applied one after another they still read right."""
    task, outputs = domain_task(domain)
    profile = json.loads(task["user_profile"])
    draft = _draft(task["description"], profile, json.loads(task["golden_actions"]), outputs)
    applied = [t for kind in INSTRUCTION_KINDS if isinstance(t := INSTRUCTION_TRANSFORMS[kind](
        draft, random.Random(domain), 2), Transform)]
    assert applied and wording_problem(draft.description, [t.model_dump() for t in applied]) is None, draft.description


PROFILE = {"persona": "Dana", "facts": [{"name": "dish_id", "label": "dish", "value": "MIT3QFY9"},
                                         {"name": "cabin", "label": "cabin", "value": "basic_economy"},
                                         {"name": "invoice_id", "label": "invoice", "value": "INV1QAGXD"}]}
GOLDEN = [{"name": "add_dish", "arguments": {"dish_id": "MIT3QFY9"}},
          {"name": "book", "arguments": {"cabin": "basic_economy"}},
          {"name": "pay_invoice", "arguments": {"invoice_id": "INV1QAGXD"}}]


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello! I would like to add dish MIT3QFY9 to my order.", "Hello! I would like to add the dish on my account to my order."),
    ("Hello! I would like to pay my bill. My invoice is INV1QAGXD.", ("Hello! I would like to pay my bill. My invoice is the "
     "one on my account.")),
])
def test_a_vague_reference_replaces_the_noun_with_its_value(text: str, expected: str) -> None:
    """Before: "add dish the dish on my account", "My invoice is the invoice on my account"."""
    draft = _draft(text, PROFILE, GOLDEN, [{}, {}, {}])
    result = INSTRUCTION_TRANSFORMS["ambiguity"](draft, random.Random(0), 1)
    assert isinstance(result, Transform) and draft.description == expected


def test_a_value_inside_a_noun_phrase_is_never_replaced() -> None:
    """Before: "book a the cabin on my account seat"; the only detail sits inside a noun phrase, so the transform
    does not apply."""
    draft = _draft("Hi there. I want to book a basic_economy seat on this flight.", PROFILE, GOLDEN, [{}, {}, {}])
    for kind in ("ambiguity", "implicit_assumption", "underspecification"):
        assert isinstance(INSTRUCTION_TRANSFORMS[kind](draft, random.Random(0), 1), str)
    assert draft.description == "Hi there. I want to book a basic_economy seat on this flight."


def test_a_paraphrase_keeps_one_greeting() -> None:
    """Before: "Hello! Hi there. I'd like to ..." (36 of 96 noisy tasks of a demo root opened with two)."""
    for seed in range(20):
        draft = _draft("Hi there. I would like to add dish MIT3QFY9 to my order.", PROFILE, GOLDEN, [{}, {}, {}])
        INSTRUCTION_TRANSFORMS["paraphrase"](draft, random.Random(seed), 2)
        assert greetings(draft.description) == 1, draft.description


def test_leaving_a_detail_out_keeps_the_request() -> None:
    """Before: "Good day. Hello! Thank you!": the only sentence with the request was dropped with its value."""
    profile = {"persona": "Dana", "facts": []}
    golden = [{"name": "set_limit", "arguments": {"daily_limit": 1615.29}}]
    draft = _draft("Hello! I would like to set my card's daily limit to 1615.29.", profile, golden, [{}])
    result = INSTRUCTION_TRANSFORMS["underspecification"](draft, random.Random(0), 1)
    assert isinstance(result, Transform)
    assert draft.description == "Hello! I would like to set my card's daily limit."
    assert wording_problem(draft.description, [result.model_dump()]) is None


@pytest.mark.parametrize(("text", "phrase", "problem"), [
    ("I want to book a the cabin on my account seat.", "the cabin on my account", "determiner"),
    ("I want to add dish the dish on my account to my order.", "the dish on my account", "noun repeats"),
    ("Please load my shipment onto truck my usual truck.", "my usual truck", "noun repeats"),
    ("I want the cabin on my account seat.", "the cabin on my account", "runs into"),
    ("My invoice is the invoice on my account.", "the invoice on my account", "is itself"),
])
def test_the_wording_check_names_each_ungrammatical_insertion(text: str, phrase: str, problem: str) -> None:
    assert problem in (insertion_problem(text, phrase) or "")


def test_the_wording_check_refuses_two_greetings_and_a_lost_request() -> None:
    assert "two greetings" in wording_problem("Hello! Hi there. I need a refund.", [])
    assert "request is gone" in wording_problem("Good day. Hello! Thank you!", [])
    assert wording_problem("Hello! I need a refund on the order on my account. Thanks a lot.", [
        {"kind": "ambiguity", "changed": {"replaced_with": "the order on my account", "argument": "order_id"}}]) is None
