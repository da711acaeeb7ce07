"""Stage `search_qa`: agent-based QA synthesis for search (LongCat-Flash-Thinking-2601, section 3.1.3,
"Agent-based QA Synthesis"), a finite-state machine over five agents and the local search environment:

- extract: the Entity Extraction agent picks a long-tail entity (among the least linked of the knowledge graph:
  high-frequency entities make trivial, memorized questions) and its salient attributes, the ground truth;
- synthesize: the Question Synthesis agent samples attributes and states them as the question's constraints,
  obfuscated as the world's questions are: figures rounded ("with about 4,000 employees"), years blurred to their
  decade, and a related entity described instead of named ("employed by an organisation founded in the 1920s"),
  so a question is answered by chaining searches, not by looking up a name ("Which person matches all of these:
  a chemist; born in the 1960s; employed by an organisation with about 3,900 employees?");
- verify: the Verification agent searches for each constraint and keeps it only if a document states it of the
  ground truth (an unverifiable attribute leaves the pool and the question is re-synthesized);
- answer: the Answer Generation agent — any Engine in the search environment, ``answer_k`` samples — answers;
- judge: the Judgment agent compares the candidates with the ground truth; another entity satisfying every
  constraint as stated, obfuscated (a wrong candidate that does, or any such entity of the graph), is a
  multi-answer conflict, resolved by adding a random further attribute of the ground truth and re-synthesizing.

Retries are bounded (``max_attempts`` syntheses, ``max_constraints`` attributes); every state and transition is
recorded per item (``fsm``); difficulty is graded by the answer agent's accuracy. The answer agent defaults to the
offline reference search agent (tasks/research/search/agent.py, named so); ``answer_engine`` takes any engine spec.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import polars as pl
from pydantic import Field, model_validator

from data_contracts.schemas import between, in_set
from data_contracts.stage import REJECTED, Artifact, Params, rng_for, seed_for, stage
from envgen.rewards import normalize, score_two_way
from inference.agent import AgentConfig, Episode, SamplingConfig, run_episodes
from inference.engine import Engine
from inference.engine_spec import REFERENCE
from tasks.longctx.world.graph import bucket
from tasks.research.harness.evidence import search_support
from tasks.research.harness.knowledge import IN_PHRASES, OUT_PHRASES, Fact, KnowledgeGraph, facts
from tasks.research.records import SEARCH_QA, SEARCH_QA_REJECTED
from tasks.research.search import SearchEnvironment, SearchIndex

STAGE = "search_qa"
NOUNS = {"person": "person", "organization": "organisation", "city": "city", "work": "work", "event": "event",
         "country": "country"}
DIFFICULTY = ((0.75, "easy"), (0.375, "medium"), (1e-9, "hard"), (0.0, "unsolved"))
"""Accuracy floors of each grade, hardest last (the report grades by the answer agent's accuracy)."""


class SearchQAParams(Params):
    n: int = Field(40, ge=0, description="items to synthesize in this partition")
    types: list[str] = Field(default_factory=lambda: ["person", "organization", "work", "event"], min_length=1,
                             description="entity types the extraction agent draws from")
    long_tail: float = Field(0.5, gt=0.0, le=1.0, description="share of each type's least-linked entities the "
                                                              "extraction agent draws from")
    start_constraints: int = Field(2, ge=1, description="attributes in a first question")
    max_constraints: int = Field(5, ge=1, description="most attributes a question may carry")
    max_attempts: int = Field(6, ge=1, le=50, description="syntheses per item before it is rejected")
    verify_k: int = Field(5, ge=1, le=20, description="hits the verification agent reads per search")
    obfuscation: float = Field(0.6, ge=0.0, le=1.0, description="share of clauses stated obfuscated (a related "
                               "entity described, a year as its decade, a figure rounded); the others name the "
                               "entity or give the exact value, so difficulty spreads")
    answer_engine: str = Field("reference", description="reference (the offline reference search agent) or an "
                                                        "engine spec: hf:DIR, openai:URL#MODEL, vllm:DIR")
    answer_k: int = Field(4, ge=1, le=64, description="answer-agent samples per question")
    answer_turns: int = Field(6, ge=1, description="answer-agent turns per sample")
    eval_fraction: float = Field(0.1, ge=0.0, le=1.0, description="share of items in the eval split")
    seed: int = Field(0, description="seeds extraction, synthesis and the answer agent's sampling")

    @model_validator(mode="after")
    def _bounds(self) -> SearchQAParams:
        if self.start_constraints > self.max_constraints:
            raise ValueError(f"start_constraints={self.start_constraints} exceeds max_constraints="
                             f"{self.max_constraints}; set start_constraints <= max_constraints")
        return self


@dataclass(frozen=True)
class Constraint:
    """A question's clause: the ground truth's fact, how the question states it (obfuscated), and what it asks of
    an entity, declaratively (``spec``: ``{"attribute", "op", "target"}`` with ``op`` one of the world's buckets,
    decade / about / initial / is, or ``{"relation", "direction", "of": {"type", "attribute", "op",
    "target"}}`` for a related entity described by one of its attributes)."""

    fact: Fact
    phrase: str
    spec: dict[str, Any]


_NUMERIC = {"population": "with a population of about {v}", "employees": "with about {v} employees",
            "budget": "with an annual budget of about ${v}", "attendance": "attended by about {v} people"}
_DATED = {"born": "born in the {d}s", "founded": "founded in the {d}s", "released": "released in the {d}s",
          "held": "held in the {d}s"}


def satisfies(kg: KnowledgeGraph, node: str, spec: Mapping[str, Any]) -> bool:
    """Whether ``node`` meets a constraint's ``spec`` (its type is checked by the caller)."""
    if "relation" in spec:
        edges = kg.out_edges(node) if spec["direction"] == "out" else kg.in_edges(node)
        of = spec["of"]
        return any(r == spec["relation"] and kg.type(v) == of["type"] and satisfies(kg, v, of) for r, v in edges)
    attribute, op = spec["attribute"], spec["op"]
    if op == "is":
        return kg.category(node) == spec["target"]
    value = kg.name(node) if attribute == "name" else kg.attributes(node).get(attribute)
    if value is None:
        return False
    if op == "exact":  # a name, a figure; a date's year
        return (value.year if isinstance(value, date) else value) == spec["target"]
    return bucket(kg.type(node), attribute, op, value) == spec["target"]


def _attribute_spec(kg: KnowledgeGraph, node: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One obfuscated attribute of ``node`` (a decade, a rounded figure, else its initial): (phrase, spec)."""
    type_, attrs = kg.type(node), kg.attributes(node)
    options = [a for a in (*_DATED, *_NUMERIC) if a in attrs]
    if options:
        a = rng.choice(options)
        if a in _DATED:
            target = bucket(type_, a, "decade", attrs[a])
            return _DATED[a].format(d=target), {"attribute": a, "op": "decade", "target": target}
        target = bucket(type_, a, "about", attrs[a])
        return _NUMERIC[a].format(v=f"{target:,}"), {"attribute": a, "op": "about", "target": target}
    target = bucket(type_, "name", "initial", kg.name(node))
    return (f"whose {'surname' if type_ == 'person' else 'name'} starts with {chr(target)}",
            {"attribute": "name", "op": "initial", "target": target})


def obfuscate(kg: KnowledgeGraph, node: str, fact: Fact, rng: random.Random, share: float) -> Constraint:
    """The clause a question states for ``fact`` of ``node``: with probability ``share`` obfuscated (a related
    entity described by one of its attributes, a year blurred to its decade, a figure rounded to two significant
    figures), else as the fact's own phrase (the entity named, the year or figure exact)."""
    if rng.random() >= share:
        return _exact(kg, node, fact)
    if fact.kind in ("relation", "inverse"):
        other = fact.value
        noun = NOUNS.get(kg.type(other), "entity")
        phrase, of = _attribute_spec(kg, other, rng)
        template = (OUT_PHRASES if fact.kind == "relation" else IN_PHRASES).get(fact.key, "linked to {}")
        description = f"{'an' if noun[0] in 'aeiou' else 'a'} {noun} {phrase}"
        return Constraint(fact, template.format(description), {
            "relation": fact.key, "direction": "out" if fact.kind == "relation" else "in",
            "of": {"type": kg.type(other), **of}})
    value = kg.attributes(node).get(fact.key)
    if fact.kind == "attribute" and value is not None and (fact.key in _DATED or fact.key in _NUMERIC):
        op = "decade" if fact.key in _DATED else "about"
        target = bucket(kg.type(node), fact.key, op, value)
        phrase = _DATED[fact.key].format(d=target) if op == "decade" else _NUMERIC[fact.key].format(v=f"{target:,}")
        return Constraint(fact, phrase, {"attribute": fact.key, "op": op, "target": target})
    category = kg.category(node)
    return Constraint(fact, fact.phrase, {"attribute": "category", "op": "is", "target": category})


def _exact(kg: KnowledgeGraph, node: str, fact: Fact) -> Constraint:
    if fact.kind in ("relation", "inverse"):
        return Constraint(fact, fact.phrase, {"relation": fact.key, "direction": "out" if fact.kind == "relation"
                                              else "in", "of": {"type": kg.type(fact.value), "attribute": "name",
                                                                "op": "exact", "target": kg.name(fact.value)}})
    if fact.kind == "attribute":
        value = kg.attributes(node)[fact.key]
        return Constraint(fact, fact.phrase, {"attribute": fact.key, "op": "exact",
                                              "target": value.year if isinstance(value, date) else value})
    return Constraint(fact, fact.phrase, {"attribute": "category", "op": "is", "target": kg.category(node)})


def question(noun: str, constraints: list[Constraint]) -> str:
    return f"Which {noun} matches all of these: {'; '.join(c.phrase for c in constraints)}?"


def long_tail(kg: KnowledgeGraph, types: list[str], share: float) -> list[str]:
    """The least-linked entities of each type (degree, then id), ``share`` of each."""
    out = []
    for t in types:
        nodes = sorted(kg.of_type(t), key=lambda n: (kg.graph.degree(n), int(n[1:]) if n[1:].isdigit() else 0))
        out += nodes[: max(1, int(len(nodes) * share))] if nodes else []
    return out


def difficulty(accuracy: float) -> str:
    return next(grade for floor, grade in DIFFICULTY if accuracy >= floor)


class Synthesis:
    """The finite-state machine of one item; ``fsm`` records every state with its event and detail."""

    def __init__(self, kg: KnowledgeGraph, index: SearchIndex, params: SearchQAParams, rng: random.Random) -> None:
        self.kg, self.index, self.params, self.rng = kg, index, params, rng
        self.fsm: list[dict[str, Any]] = []

    def log(self, state: str, event: str, **detail: Any) -> None:
        self.fsm.append({"state": state, "event": event, "detail": detail})

    def verify(self, node: str, fact: Fact) -> bool:
        """Search for the ground truth with the constraint's value; a document must state both."""
        name = self.kg.name(node)
        level, _ = search_support(self.index, name, [fact.answer], [f"{name} {fact.answer}", fact.phrase], (),
                                  self.params.verify_k)
        return level == "complete"

    def judge(self, node: str, constraints: list[Constraint], answers: list[str | None]) -> str | None:
        """The conflicting entity, if another one satisfies every constraint as stated: first among the answer
        agent's wrong candidates, then anywhere in the graph."""
        for answer in answers:
            if answer and not score_two_way(answer, [self.kg.name(node)]):
                for other in self.kg.find(answer)[:1]:
                    if other != node and self.kg.type(other) == self.kg.type(node) and all(
                            satisfies(self.kg, other, c.spec) for c in constraints):
                        return other
        return next((o for o in self.kg.of_type(self.kg.type(node))
                     if o != node and all(satisfies(self.kg, o, c.spec) for c in constraints)), None)


def synthesize_item(s: Synthesis, node: str, answer: AnswerAgent) -> tuple[dict[str, Any] | None, str | None]:
    """Run the FSM on one extracted entity; the accepted item, or None and why it was given up."""
    kg, params = s.kg, s.params
    pool = [f for f in facts(kg, node) if f.kind != "inverse" or len(kg.in_edges(node)) <= 3]
    s.rng.shuffle(pool)
    s.log("extract", "entity", entity=node, name=kg.name(node), attributes=len(pool))
    chosen: list[Constraint] = []
    need = params.start_constraints
    for attempt in range(1, params.max_attempts + 1):
        while len(chosen) < need and pool:
            fact = pool.pop()
            if s.verify(node, fact):
                chosen.append(obfuscate(kg, node, fact, s.rng, params.obfuscation))
                s.log("verify", "verified", attribute=fact.phrase, stated=chosen[-1].phrase)
            else:
                s.log("verify", "unverifiable", attribute=fact.phrase)
        if len(chosen) < need:
            s.log("synthesize", "reject", reason="attribute pool exhausted")
            return None, f"only {len(chosen)} of {need} attributes could be verified with search"
        text = question(NOUNS.get(kg.type(node), "entity"), chosen)
        s.log("synthesize", "question", attempt=attempt, question=text, constraints=len(chosen))
        predictions = answer(text, kg.name(node), f"{node}#{attempt}")
        correct = sum(bool(score_two_way(p, [kg.name(node)])) for p in predictions)
        s.log("answer", "candidates", answers=predictions, correct=correct, k=len(predictions))
        conflict = s.judge(node, chosen, predictions)
        if conflict is None:
            s.log("judge", "accept", accuracy=correct / len(predictions))
            return {"question": text, "constraints": chosen, "correct": correct, "k": len(predictions),
                    "attempts": attempt}, None
        s.log("judge", "multi_answer", other=conflict, other_name=kg.name(conflict))
        if len(chosen) >= params.max_constraints:
            break
        need = len(chosen) + 1  # add a further attribute of the ground truth and re-synthesize
    s.log("judge", "reject", reason="multi-answer conflict unresolved")
    return None, "a multi-answer conflict remained after the bounded retries"


class AnswerAgent:
    """``answer(question, gold, item_id) -> predictions``: k samples of an engine in the search environment."""

    def __init__(self, engine: Engine, index: SearchIndex, params: SearchQAParams) -> None:
        self.engine, self.index, self.params = engine, index, params
        self.config = AgentConfig(max_turns=params.answer_turns, seed=params.seed,
                                  sampling=SamplingConfig(temperature=1.0, max_tokens=512))

    def __call__(self, text: str, gold: str, item_id: str) -> list[str | None]:
        task = {"task_id": item_id, "question": text, "answer": gold}
        episodes = [Episode(id=f"{item_id}/{k}", group_id=item_id, make_env=lambda: SearchEnvironment(self.index),
                            task=task, sample_index=k) for k in range(self.params.answer_k)]
        rollouts = run_episodes(self.engine, episodes, self.config, source=STAGE)
        return [_boxed(r.messages) for r in rollouts]


def _boxed(messages: list[dict[str, Any]]) -> str | None:
    from envgen.rewards import extract_boxed

    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return extract_boxed(str(last.get("content") or "")) if last else None


def answer_engine(spec: str) -> Engine:
    if spec == REFERENCE:
        from tasks.research.search.agent import ReferenceSearchAgent

        return ReferenceSearchAgent()
    from inference.engine_factory import load_engine

    return load_engine(spec)


# 2: the two-way reward accepts a descriptor beside the answer ("the river Thames"); 3: constraints obfuscated
# (figures rounded, years to decades, related entities described, not named), a share of them (obfuscation); 4: the
# search environment's prompt words the answer's place as every prompt does (BOXED_INSTRUCTION)
@stage(name=STAGE, version="4", inputs=("world", "search_index"), params=SearchQAParams,
       outputs={"items": SEARCH_QA.contract(expectations=(
           in_set("difficulty", [g for _, g in DIFFICULTY]), between("answer_accuracy", 0.0, 1.0))),
           REJECTED: SEARCH_QA_REJECTED.contract()})
def search_qa(inputs: Mapping[str, Artifact], params: SearchQAParams, partition: str) -> dict[str, pl.DataFrame]:
    """Agent-based QA synthesis: long-tail entities, questions from sampled attributes verified with search,
    answered by the answer agent, judged unique (conflicts resolved by adding attributes)."""
    world = inputs["world"]
    entities = world.read("entities")
    kg = KnowledgeGraph.from_frames(entities, world.read("relations"))
    aliases = dict(zip(entities["entity_id"], entities["aliases"].to_list(), strict=True))
    index = SearchIndex.open(inputs["search_index"].directory)
    docs = {normalize(index.document(d).title): d for d in index.doc_ids()}
    candidates = long_tail(kg, params.types, params.long_tail)
    if not candidates:
        raise ValueError(f"search_qa: the world has no entity of the types {params.types}")
    engine = answer_engine(params.answer_engine)
    answer = AnswerAgent(engine, index, params)
    rng_for(params.seed, STAGE, partition, -1).shuffle(candidates)  # each entity once, until all are used
    items, rejected = [], []
    try:
        for i in range(params.n):
            item_id = f"search_qa:{partition}:{i}"
            s = Synthesis(kg, index, params, rng_for(params.seed, STAGE, partition, i))
            node = candidates[i % len(candidates)]
            done, reason = synthesize_item(s, node, answer)
            if done is None:
                rejected.append({"id": item_id, "entity_id": node, "reason": reason, "fsm": json.dumps(s.fsm)})
                continue
            accuracy = done["correct"] / done["k"]
            items.append({
                "id": item_id, "question": done["question"], "answer": kg.name(node), "aliases": aliases.get(node, []),
                "entity_id": node, "doc_id": docs.get(normalize(kg.name(node))), "entity_type": kg.type(node),
                "constraints": json.dumps([{"attribute": c.fact.key, "phrase": c.phrase, "value": c.fact.answer,
                                            "fact": c.fact.phrase, "spec": c.spec} for c in done["constraints"]]),
                "n_constraints": len(done["constraints"]), "fsm": json.dumps(s.fsm), "attempts": done["attempts"],
                "answer_k": done["k"], "answer_correct": done["correct"], "answer_accuracy": accuracy,
                "difficulty": difficulty(accuracy), "answer_engine": params.answer_engine,
                "split": "eval" if seed_for(params.seed, f"{STAGE}/split", partition, i) % 10_000
                < params.eval_fraction * 10_000 else "train"})
    finally:
        engine.close()
    return {"items": SEARCH_QA.frame(items), REJECTED: SEARCH_QA_REJECTED.frame(rejected)}
