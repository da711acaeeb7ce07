"""Checks that execute what they check: the contracts of environment and task outputs (the record's rules plus
Python checks that run every row in the environment: the golden trajectory replays to reward 1, each mutation of
it scores 0, which GX cannot say), the world's contract (``WORLD_CHECKS``: one owner per record, users who say
only what people know, intents that pair with their actions, questions with answers), and the check of a domain
spec file a spec author runs."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from sqlalchemy import select

from data_contracts.schemas import Record, between, min_length, unique
from data_contracts.stage import Check, Contract
from envgen.compiler import CompiledDomain, CompileError, compile_domain
from envgen.construct import MIN_DOMAIN_TOOLS, MIN_TOOLS, executability, spoken_intent
from envgen.customers import database_rows, owned_entities, ownership_contradictions
from envgen.domain_spec import DomainSpec, DomainSpecError, load_spec, says
from envgen.environment import Environment, domain_for, json_field, replay
from envgen.mutations import MUTATIONS
from envgen.seeding import engine_from_bytes
from envgen.taskgen import build_verified, mutate


def golden_fails(frame: pl.DataFrame) -> list[bool]:
    """True where the environment's golden trajectory does NOT replay to reward 1 in the environment."""
    bad = []
    for row in frame.iter_rows(named=True):
        env = Environment(row)
        bad.append(replay(env, json.loads(row["task_json"])).reward != 1.0)
        env.close()
    return bad


def mutation_passes(frame: pl.DataFrame) -> list[bool]:
    """True where some mutated trajectory (drop-write, wrong-arg, wrong-row, extra-write) does NOT score 0."""
    bad = []
    for row in frame.iter_rows(named=True):
        env, task, domain = Environment(row), json.loads(row["task_json"]), domain_for(row)
        rng = random.Random(row["seed"])
        scores = [replay(env, task, m).reward if (m := mutate(domain, row, task, k, rng)) is not None else 1.0
                  for k in MUTATIONS]
        bad.append(any(s != 0.0 for s in scores))
        env.close()
    return bad


# -- a world that holds together (counted over whole artifacts by bench/bench_world_consistency.py) --------------


def database_keys(domain: CompiledDomain, db: bytes) -> set[str]:
    """Every primary key of a seeded database: what only the system knows."""
    engine = engine_from_bytes(bytes(db))
    try:
        with engine.connect() as conn:
            return {str(r[e.key]) for e in domain.spec.entities
                    for r in conn.execute(select(domain.tables[e.name].c[e.key])).mappings()}
    finally:
        engine.dispose()


def user_texts(task: Mapping[str, Any]) -> list[str]:
    """What the user says or knows: the request, the persona and every profile fact."""
    profile = json_field(task["user_profile"])
    return [str(task["description"]), str(profile.get("persona", "")),
            *(f"{f['label']} {f['value']}" for f in profile.get("facts", []))]


def keys_said(texts: Sequence[str], keys: set[str] | re.Pattern[str]) -> list[str]:
    """The internal keys ``texts`` say: members of ``keys`` (a database's keys) or matches of a key pattern."""
    if isinstance(keys, re.Pattern):
        return [m for t in texts for m in keys.findall(t)]
    return [w for t in texts for w in re.findall(r"[A-Z0-9]+", t) if w in keys]


def enum_codes_said(texts: Sequence[str], spec: DomainSpec) -> list[str]:
    """The enum values written as codes (``wrong_order``) that ``texts`` say: a person says them in words."""
    codes = {v for e in spec.entities for f in e.fields for v in f.values if "_" in v}
    codes |= {v for a in spec.actions for q in a.params for v in q.values if "_" in v}
    return [w for t in texts for w in re.findall(r"[a-z]+(?:_[a-z]+)+", t) if w in codes]


def key_pattern(spec: DomainSpec) -> re.Pattern[str]:
    """The shape of the keys seeding and writes generate (``envgen.seeding``, ``envgen.tools``): an entity's id
    prefix and six letters or digits, or N and five digits."""
    prefixes = "|".join(sorted((e.id_prefix for e in spec.entities), key=len, reverse=True))
    return re.compile(rf"\b(?:{prefixes})(?:N\d{{5}}|[A-Z0-9]{{6}})\b")


def ownership_contradiction_count(domain: CompiledDomain, db: bytes) -> int:
    """Seeded records whose carrying relation paths reach two or more customers (``envgen.customers``)."""
    engine = engine_from_bytes(bytes(db))
    try:
        with engine.connect() as conn:
            return len(ownership_contradictions(domain.spec, database_rows(domain, conn)))
    finally:
        engine.dispose()


def intent_problems(domain: CompiledDomain, db: bytes, task: Mapping[str, Any]) -> list[str]:
    """Why a task's request does not pair with its writes: each golden write is an action a customer may ask for,
    its intent (as the user says it for the golden arguments) is in the request, says one of the action's words
    and no word of another action on the same entity ("withdraw" is never ``reject_leave``)."""
    problems = []
    engine = engine_from_bytes(bytes(db))
    try:
        with engine.connect() as conn:
            for call in json_field(task["golden_actions"]):
                tool = domain.tools[call["name"]]
                if not tool.is_write:
                    continue
                action = domain.spec.action(tool.action)
                if action.actor != "customer":
                    problems.append(f"{action.name} is a {action.actor} action, asked by a customer")
                intent = spoken_intent(domain, conn, action, call["arguments"])
                if intent not in str(task["description"]):
                    problems.append(f"the request does not say {action.name}'s intent {intent!r}")
                if not any(says(intent, w) for w in action.words):
                    problems.append(f"{intent!r} says none of {action.name}'s words {list(action.words)}")
                others = [(o.name, w) for o in domain.spec.actions if o.target == action.target and o.name != action.name
                          for w in o.words if says(intent, w)]
                if others:
                    problems.append(f"{intent!r} says {others[0][1]!r}, a word of {others[0][0]}")
    finally:
        engine.dispose()
    return problems


def unanswered_question(task: Mapping[str, Any]) -> bool:
    """A request that asks something ("What is ... after that?") has the answer among its required outputs."""
    return "?" in str(task["description"]) and not json_field(task["rubric"])["required_outputs"]


def _world_rows(frame: pl.DataFrame) -> Iterator[tuple[CompiledDomain, bytes, dict[str, Any], list[str]] | None]:
    """Per row, (domain, seeded database, task, what the user says in the conversation): an environment record
    with its ``task_json``, or a trajectory with ``env_db`` and ``verify_input`` ({"env", "task"}); None for a row
    without a database (a procedure, a long-context conversation)."""
    for row in frame.iter_rows(named=True):
        if row.get("task_json") is not None:
            yield domain_for(row), row["db"], json_field(row["task_json"]), []
        elif row.get("env_db") is not None and "task" in (given := json_field(row["verify_input"])):
            said = [str(m.get("content") or "") for m in json_field(row["messages"])[2:] if m["role"] == "user"]
            yield domain_for(given["env"]), row["env_db"], given["task"], said
        else:
            yield None


def contradicting_owners(frame: pl.DataFrame) -> list[bool]:
    counted: dict[bytes, bool] = {}  # the rows of one environment share its database
    out = []
    for w in _world_rows(frame):
        if w is not None and bytes(w[1]) not in counted:
            counted[bytes(w[1])] = ownership_contradiction_count(w[0], w[1]) > 0
        out.append(w is not None and counted[bytes(w[1])])
    return out


def internal_keys_in_user_text(frame: pl.DataFrame) -> list[bool]:
    out = []
    for w in _world_rows(frame):
        texts = [*user_texts(w[2]), *w[3]] if w is not None else []
        out.append(w is not None and bool(keys_said(texts, database_keys(w[0], w[1]))
                                          or enum_codes_said(texts, w[0].spec)))
    return out


def unpaired_intents(frame: pl.DataFrame) -> list[bool]:
    return [w is not None and bool(intent_problems(w[0], w[1], w[2])) for w in _world_rows(frame)]


def unanswered_questions(frame: pl.DataFrame) -> list[bool]:
    return [w is not None and unanswered_question(w[2]) for w in _world_rows(frame)]


WORLD_CHECKS = (
    Check("one_owner_per_record", contradicting_owners,
          description="every relation path from a seeded record to the customer entity reaches one customer "
                      "(relations the spec declares crossing aside)"),
    Check("users_state_what_people_know", internal_keys_in_user_text,
          description="no internal key (a generated primary key) nor an enum's code (wrong_order) in the "
                      "request, persona, profile facts or the user's turns"),
    Check("intent_pairs_with_action", unpaired_intents,
          description="every golden write is a customer action whose intent the request says, in its own words"),
    Check("questions_have_answers", unanswered_questions,
          description="a request that asks for information has the answer among its required outputs"),
)
"""The world's contract over a frame of environment records with ``task_json`` or of trajectories with ``env_db``
and ``verify_input`` (rows without a database pass); a trajectory's user turns count as what the user says."""


def _task_of_another_env(frame: pl.DataFrame) -> list[bool]:
    return [json.loads(r["task_json"])["env_id"] != r["env_id"] for r in frame.iter_rows(named=True)]


def environment_contract(record: Record) -> Contract:
    return record.contract(
        expectations=(unique("db_sha256", severity="warning"), between("density", 0.0, 1.0)),
        checks=(
            Check("min_tools", lambda f: f["n_tools"] < MIN_TOOLS,
                  description=f"every environment has at least {MIN_TOOLS} tools"),
            Check("task_belongs_to_env", _task_of_another_env, description="task_json names this environment"),
            Check("golden_replays", golden_fails, description="the golden trajectory replays with reward 1"),
            Check("mutations_score_zero", mutation_passes, description="each mutated trajectory scores 0"),
            *WORLD_CHECKS,
        ),
    )


def task_contract(record: Record) -> Contract:
    return record.contract(expectations=(min_length("description", 10),))



@dataclass(frozen=True)
class DomainSpecCheck:
    """What ``gymforge envgen check`` reports of one spec file."""

    domain: str
    tools: int
    executability: float
    kept: int
    problems: list[str]


def check_domain_spec(path: Path, envs: int) -> DomainSpecCheck:
    """A spec checked the way the stages use it: parsed (every problem listed), compiled (enough tools), every tool
    executed, then ``envs`` environments constructed and verified (golden replay and four mutations)."""
    try:
        domain = compile_domain(load_spec(path))
    except DomainSpecError as exc:
        return DomainSpecCheck(path.stem, 0, 0.0, 0, list(exc.problems))
    except (CompileError, OSError) as exc:
        return DomainSpecCheck(path.stem, 0, 0.0, 0, [str(exc)])
    rate, broken = executability(domain, 0)
    problems = [f"tool {tool} failed to execute on a seeded database" for tool in broken]
    if domain.spec.customer_entity is None:
        problems.append("no customer entity: mid-training tasks act for one customer; declare `customer: ENTITY` "
                        "(none or several entities have an email field)")
    if len(domain.tools) < MIN_DOMAIN_TOOLS:
        problems.append(f"only {len(domain.tools)} tools; add entities, relations or actions "
                        f"({MIN_DOMAIN_TOOLS}+ needed)")
    owned = owned_entities(domain.spec)
    problems += [f"customer action {a.name} names no row a customer owns (its target or a row parameter): the "
                 "agent could not tell whose request it is" for a in domain.spec.actions if a.actor == "customer"
                 and a.target not in owned and not any(q.ref in owned for q in a.params)]
    kept = 0
    for seed in range(envs):
        env, _, reason = build_verified(domain, f"{domain.name}-{seed}", seed)
        kept += env is not None
        problems += [reason] if reason else []
        if env is not None and (n := ownership_contradiction_count(domain, env["db"])):
            problems.append(f"{domain.name}-{seed}: {n} records reach two customers; declare the relation that "
                            "may link another customer's row `crossing: true`")
    return DomainSpecCheck(domain.name, len(domain.tools), rate, kept, problems)
