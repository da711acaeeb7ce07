"""The small_envs stage on in-memory inputs: small environments that fit a measured budget, each with a customer
task played by the routes' reference agent, rejections with the measured length, all gated by the stage's
contracts (the trajectory standard)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from data_contracts.gate import validate
from data_contracts.stage import REJECTED, FrameArtifact
from envgen.environment import domain_for
from envgen.trajectory_standard import habit_problem
from inference.tokenizer import to_row, train_tokenizer
from tasks.environments.domain_graphs import DomainGraphsParams, domain_graphs
from tasks.environments.environments import EnvironmentsParams, environments
from tasks.environments.small_envs import SmallEnvsParams, small_envs


@pytest.fixture(scope="module")
def inputs() -> dict[str, FrameArtifact]:
    graphs = domain_graphs.run({}, DomainGraphsParams(domains="airline,retail"), "p0")
    envs = environments.run({"domain_graphs": FrameArtifact(graphs)},
                            EnvironmentsParams(envs_per_domain=2, heldout=()), "p0")
    texts = [*envs["tasks"]["system_prompt"], *envs["tasks"]["description"], *envs["environments"]["tools"]]
    tokenizer = to_row(train_tokenizer(texts, vocab_size=600))
    return {"environments": FrameArtifact(envs), "tokenizer": FrameArtifact({"tokenizer": pl.DataFrame([tokenizer])})}


def gate(outputs: dict) -> None:
    for name, frame in outputs.items():
        report = validate("small_envs", name, frame, small_envs.outputs[name], "p0")
        assert report.passed, report.summary()


def test_every_task_fits_a_generous_budget(inputs):
    out = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=100_000), "p0")
    gate(out)
    envs, trajectories = out["environments"], out["trajectories"]
    assert envs.height == out["tasks"].height == trajectories.height == 4 and out[REJECTED].is_empty()
    full = inputs["environments"].read("environments").sort("env_id")
    assert (envs["n_tools"] < full["n_tools"]).all()
    for env, trajectory in zip(envs.iter_rows(named=True), trajectories.iter_rows(named=True), strict=True):
        assert json.loads(trajectory["tools"]) == json.loads(env["tools"])
        messages = json.loads(trajectory["messages"])
        calls = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
        assert calls and set(calls) <= set(env["tool_names"])


def test_trajectories_are_played_by_the_reference_agent_of_the_routes(inputs):
    """Before: golden replays without a word, 37 of 39 writing before the customer was identified, 23 writing
    several customers' records, 39 of 39 ending "Your request is complete." (18 with "Details: none.")."""
    out = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=100_000), "p0")
    for row, task in zip(out["trajectories"].iter_rows(named=True), out["tasks"].iter_rows(named=True), strict=True):
        assert row["task_id"] == task["task_id"] and habit_problem(row) is None
        messages = json.loads(row["messages"])
        calls = [m for m in messages if m.get("tool_calls")]
        assert all(m["content"] for m in calls)  # the agent says why before each call
        domain = domain_for(json.loads(row["verify_input"])["env"])
        first = calls[0]["tool_calls"][0]["function"]["name"]
        assert domain.tools[first].entity == domain.spec.customer_entity.name  # who, before anything changes
        assert "Your request is complete" not in messages[-1]["content"]
        assert json.loads(task["rubric"])["customer"]


@pytest.mark.slow
def test_a_tight_budget_keeps_only_what_fits_and_says_why_the_rest_does_not(inputs):
    generous = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=100_000), "p0")
    shortest = min(generous["trajectories"]["tokens"])
    out = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=shortest), "p0")
    gate(out)
    assert out["trajectories"].height >= 1 and (out["trajectories"]["tokens"] <= shortest).all()
    none = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=shortest // 4), "p0")
    assert none["trajectories"].is_empty() and none[REJECTED].height == 4
    assert set(none[REJECTED]["stage_step"]) == {"fit"}
    assert all(f"max_tokens={shortest // 4}" in reason for reason in none[REJECTED]["reason"])


def test_compact_schemas_are_shorter_than_full_ones(inputs):
    compact = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=100_000), "p0")
    full = small_envs.run(inputs, SmallEnvsParams(distractors=2, tool_schemas="full", max_tokens=100_000), "p0")
    assert (compact["trajectories"]["tokens"] < full["trajectories"]["tokens"]).all()
    again = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=100_000), "p0")
    assert all(again[name].equals(compact[name]) for name in compact)  # deterministic


def test_the_contract_refuses_train_flags_on_user_turns(inputs):
    out = small_envs.run(inputs, SmallEnvsParams(distractors=2, max_tokens=100_000), "p0")
    flipped = out["trajectories"].with_columns(pl.col("train").list.eval(pl.element().not_()))
    report = validate("small_envs", "trajectories", flipped, small_envs.outputs["trajectories"], "p0")
    assert not report.passed and "masks_on_assistant_turns" in json.dumps(report.summary())
