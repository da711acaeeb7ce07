"""Verified multi-hop questions over the world: bridge and comparison questions whose names, numbers, places and
dates are obfuscated, each re-evaluated over the whole graph and kept only when exactly one answer satisfies it
(LongCat-Flash-Thinking-2601, "Graph-based QA Synthesis for Search")."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from data_contracts.stage import Params, seed_for
from envgen.rewards import normalize
from tasks.longctx.qa_seeds import eval_split
from tasks.longctx.world.documents import article, fmt_number
from tasks.longctx.world.graph import (
    CATEGORIES,
    COMPARISONS,
    CONSTRAINTS,
    EMPTY,
    IN_RELATIONS,
    INDUSTRIES,
    OUT_RELATIONS,
    RELATIONS,
    SEASONS,
    STAGE,
    TYPE_NOUN,
    YEAR_ASKS,
    World,
)


class QuestionParams(Params):
    """How questions are synthesized; the ``world`` stage's params add the graph's size."""

    seed: int = Field(0, description="world seed: the graph depends on (seed, n_entities) only")
    min_hops: int = Field(2, ge=2, le=4, description="fewest supporting documents a question needs")
    max_hops: int = Field(4, ge=2, le=4, description="most supporting documents a question needs")
    comparison_fraction: float = Field(0.3, ge=0.0, le=1.0, description="share of comparison questions "
                                                                        "(the rest are bridge questions)")
    year_fraction: float = Field(0.2, ge=0.0, le=1.0, description="share of bridge questions asking for a year "
                                                                  "rather than a name")
    eval_fraction: float = Field(0.05, ge=0.0, le=1.0, description="share of questions in the eval split "
                                                                   "(by question hash)")
    n_distractors: int = Field(3, ge=0, le=20, description="non-supporting related documents per seed "
                                                           "(partial matches and graph neighbours)")
    max_constraints: int = Field(4, ge=1, le=5, description="most obfuscated attributes describing one anchor")
    max_retries: int = Field(8, ge=1, le=100, description="re-syntheses before a question is rejected")

    @model_validator(mode="after")
    def _hop_range(self) -> QuestionParams:
        if self.min_hops > self.max_hops:
            raise ValueError(f"min_hops ({self.min_hops}) must not exceed max_hops ({self.max_hops}); "
                             "set them so 2 <= min_hops <= max_hops <= 4")
        return self


Constraint = tuple[str, str, int]


class Conflict(Exception):
    """This synthesis attempt failed (dead end, tie, non-unique answer); the message is the rejection reason."""




def _amount(v: int) -> str:
    if v >= 1_000_000_000:
        return f"{v / 1e9:g} billion"
    return f"{v / 1e6:g} million" if v >= 1_000_000 else fmt_number(v)


def describe(t: str, constraints: Sequence[Constraint]) -> str:
    """The obfuscated description of an anchor: "a chemist born in the spring of 1961"."""
    noun, phrases = TYPE_NOUN[t], []
    for attr, op, v in constraints:
        if op == "is":
            noun = article(f"{INDUSTRIES[v]} company" if t == "organization" else CATEGORIES[t][v])
        elif op == "season":
            verb = {"born": "born", "released": "released", "held": "held"}[attr]
            phrases.append(f"{verb} in the {SEASONS[v % 4]} of {v // 4}")
        elif op == "decade":
            phrases.append(f"{'born' if attr == 'born' else attr} in the {v}s")
        elif op == "initial":
            what = {"person": "surname", "work": "title"}.get(t, "name")
            phrases.append(f"whose {what} begins with {chr(v)}")
        elif attr == "employees":
            phrases.append(f"with about {_amount(v)} employees")
        elif attr == "budget":
            phrases.append(f"with an annual budget of about ${_amount(v)}")
        elif attr == "population":
            phrases.append(f"with a population of about {_amount(v)}")
        else:  # attendance
            phrases.append(f"attended by about {_amount(v)} people")
    phrases.sort(key=lambda phrase: phrase.startswith("whose"))  # "born in the 1870s and whose surname ..."
    return " ".join([noun, " and ".join(phrases)]).strip()


def _phrase(world: World, subject: int, relation: str, x: str, final: bool) -> str:
    ask, phrase = RELATIONS[relation].texts(world.kind(subject))
    return (ask if final else phrase).format(x=x)


@dataclass
class Side:
    """One reasoning path: an anchor described by constraints, then functional relations to the end entity."""

    anchor: int
    path: list[str]
    constraints: list[Constraint] = field(default_factory=list)

    def entities(self, world: World) -> list[int]:
        out = [self.anchor]
        for r in self.path:
            out.append(int(world.rel[r][out[-1]]))
        return out

    def phrase(self, world: World) -> str:
        x, ents = describe(world.types[self.anchor], self.constraints), self.entities(world)
        for subject, r in zip(ents, self.path, strict=False):
            x = _phrase(world, subject, r, x, final=False)
        return x


def _make_unique(world: World, rng: random.Random, side: Side, max_constraints: int, exclude: str | None,
                 year: str | None = None) -> None:
    """Add attributes of the anchor until the constraints, evaluated over the whole graph and followed along the
    path, reach exactly one answer (LongCat: on a multi-answer conflict, add attributes and re-synthesize)."""
    t, a = world.types[side.anchor], side.anchor
    available = [(attr, op, int(world.buckets[(t, attr, op)][a])) for attr, op in CONSTRAINTS[t] if attr != exclude]
    rng.shuffle(available)
    # One constraint per attribute: "born in the 1960s and in the spring of 1961" says the second twice.
    available = [c for k, c in enumerate(available) if c[0] not in {d[0] for d in available[:k]}]
    answers = EMPTY
    for n in range(1, min(max_constraints, len(available)) + 1):
        ends = world.follow(world.satisfying(t, available[:n]), side.path)
        answers = world.years[year][ends] if year else ends
        if (answers == answers[0]).all():  # the anchor itself satisfies the constraints, so answers is not empty
            side.constraints = available[:n]
            return
    raise Conflict(f"answer not unique: {len(np.unique(answers))} answers satisfy the {t} anchor's constraints "
                   f"(at most {max_constraints} attributes)")


def _bridge(world: World, rng: random.Random, hops: int, p: QuestionParams) -> dict[str, Any]:
    anchor = rng.randrange(world.offsets["city"], world.n)  # every type but country has an outgoing relation
    side, seen, cur = Side(anchor, []), {anchor}, anchor
    for step in range(hops - 1):
        last = step == hops - 2
        # Before the last step, never into a type with no way on (a country): the walk would strand there.
        options = [r for r in OUT_RELATIONS[world.types[cur]] if world.rel[r][cur] >= 0
                   and world.rel[r][cur] not in seen and (last or OUT_RELATIONS[world.types[world.rel[r][cur]]])]
        if not options:
            raise Conflict("dead end: no unvisited relation to follow")
        r = rng.choice(options)
        side.path.append(r)
        cur = int(world.rel[r][cur])
        seen.add(cur)
    end_type = world.types[cur]
    year = YEAR_ASKS[end_type][0] if end_type in YEAR_ASKS and rng.random() < p.year_fraction else None
    _make_unique(world, rng, side, p.max_constraints, exclude=None, year=year)
    if year:
        question, answer, aliases = YEAR_ASKS[end_type][1].format(x=side.phrase(world)), str(world.years[year][cur]), []
    else:
        inner = Side(anchor, side.path[:-1], side.constraints).phrase(world)
        question = _phrase(world, side.entities(world)[-2], side.path[-1], inner, final=True)
        answer, aliases = world.name(cur), world.aliases[cur]
    return {"type": "bridge", "question": question, "answer": answer, "aliases": aliases, "sides": [side],
            "ask": year or "name", "compare": None, "answer_entity": cur}


def _comparison(world: World, rng: random.Random, hops: int, p: QuestionParams) -> dict[str, Any]:
    budget = hops - 2  # relations on the two paths together
    t, attr, template, sign = rng.choice([c for c in COMPARISONS if budget == 0 or IN_RELATIONS[c[0]]])
    lo, n = world.offsets[t], world.counts[t]
    e1, e2 = lo + rng.randrange(n), lo + rng.randrange(n)
    v1, v2 = world.records[e1][attr], world.records[e2][attr]
    if isinstance(v1, date):  # compare dates, but a reader should see the order from the years
        if v1.year == v2.year:
            raise Conflict(f"tie: both {t}s have their {attr} date in the same year")
    elif e1 == e2 or abs(v1 - v2) < (1 if attr == "founded" else 0.1 * max(v1, v2)):
        raise Conflict(f"tie: the two {t}s' {attr} values are too close to compare")
    k1 = rng.randint(0, budget)
    sides = [_backward(world, rng, e1, k1), _backward(world, rng, e2, budget - k1)]
    if set(sides[0].entities(world)) & set(sides[1].entities(world)):
        raise Conflict("the two paths share an entity")
    for side in sides:
        _make_unique(world, rng, side, p.max_constraints, exclude=attr if not side.path else None)
    winner = e1 if (v1 > v2) == (sign > 0) else e2
    question = template.format(a=sides[0].phrase(world), b=sides[1].phrase(world))
    return {"type": "comparison", "question": question, "answer": world.name(winner),
            "aliases": world.aliases[winner], "sides": sides, "ask": "name", "compare": [attr, sign],
            "answer_entity": winner}


def _backward(world: World, rng: random.Random, end: int, k: int, tries: int = 8) -> Side:
    """A path of ``k`` relations ending at ``end``: walk in-edges back from it to an anchor, preferring (``tries``
    draws per step) a source that itself has in-edges while steps remain."""
    cur, path, seen = end, [], {end}
    for step in range(k):
        options = [(r, world.inverse[r][cur]) for r in IN_RELATIONS[world.types[cur]] if cur in world.inverse[r]]
        if not options:
            raise Conflict(f"dead end: no relation leads to a {world.types[cur]} on the way back")
        for _ in range(tries):
            r, sources = rng.choice(options)
            src = int(sources[rng.randrange(len(sources))])
            if src not in seen and (step == k - 1 or _has_in_edges(world, src)):
                break
        else:
            raise Conflict(f"dead end: no unvisited {world.types[cur]} source with a way further back")
        path.insert(0, r)
        seen.add(src)
        cur = src
    return Side(cur, path)


def _has_in_edges(world: World, e: int) -> bool:
    return any(e in world.inverse[r] for r in IN_RELATIONS[world.types[e]])


def synthesize(world: World, docs: Sequence[str], p: QuestionParams, partition: str, index: int,
               asked: set[str], answered: Counter[str], cap: int) -> tuple[dict[str, Any] | None, str]:
    """One verified question (or None and the last reason), retried up to ``max_retries`` times. ``asked`` holds
    the normalized questions so far, ``answered`` how many of them each normalized answer answers; an answer that
    already answers ``cap`` is drawn again (the answer prior)."""
    rng = random.Random(seed_for(p.seed, STAGE, partition, index))
    reason = "no attempt"
    # Kind and hops are drawn once per question, so retries keep the requested type mix and hop distribution.
    hops = rng.randint(p.min_hops, p.max_hops)
    make = _comparison if rng.random() < p.comparison_fraction else _bridge
    for _ in range(p.max_retries):
        try:
            q = make(world, rng, hops, p)
        except Conflict as why:
            reason = str(why)
            continue
        question = q["question"][0].upper() + q["question"][1:]
        if normalize(question) in asked:
            reason = "duplicate question"
            continue
        if answered[normalize(q["answer"])] >= cap:
            reason = f"answer over share: {q['answer']!r} already answers {cap} questions"
            continue
        asked.add(normalize(question))
        answered[normalize(q["answer"])] += 1
        support = [e for side in q["sides"] for e in side.entities(world)]
        chosen = _distractors(world, rng, q["sides"], set(support), p.n_distractors)
        documents = [{"title": world.name(e), "text": docs[e], "is_supporting": e in support} for e in
                     [*support, *chosen]]
        rng.shuffle(documents)
        program = {"kind": q["type"], "ask": q["ask"], "compare": q["compare"],
                   "answer_entity": f"E{q['answer_entity']}",
                   "sides": [{"anchor": f"E{s.anchor}", "anchor_type": world.types[s.anchor],
                              "constraints": [_readable(world.types[s.anchor], c) for c in s.constraints],
                              "path": s.path} for s in q["sides"]]}
        return {"id": f"world:{partition}:{index}", "source": "world", "question": question, "answer": q["answer"],
                "aliases": q["aliases"], "docs": json.dumps(documents, ensure_ascii=False), "hops": len(support),
                "type": q["type"], "split": eval_split(question, p.eval_fraction),
                "program": json.dumps(program)}, ""
    return None, f"{reason} (after {p.max_retries} attempts)"


def _readable(t: str, constraint: Constraint) -> list[Any]:
    """A constraint as the program records it: the category by name, a season as [year, season], a letter."""
    attr, op, v = constraint
    value: Any = {"is": lambda: CATEGORIES[t][v], "season": lambda: [v // 4, SEASONS[v % 4]],
                  "initial": lambda: chr(v)}.get(op, lambda: v)()
    return [attr, op, value]


def _distractors(world: World, rng: random.Random, sides: Sequence[Side], support: set[int], n: int) -> list[int]:
    """Related but non-supporting documents, like HotpotQA's distractor paragraphs: entities that share an
    anchor's first attribute (partial matches) and graph neighbours of the supporting entities."""
    if n == 0:
        return []
    pool: dict[int, None] = {}
    for side in sides:
        t = world.types[side.anchor]
        for attr, op, v in side.constraints[:1]:
            for e in world.index[(t, attr, op)].get(v, EMPTY)[:8]:
                pool[int(e)] = None
    for e in sorted(support):
        for arr in world.rel.values():
            if arr[e] >= 0:
                pool[int(arr[e])] = None
    candidates = [e for e in pool if e not in support]
    return rng.sample(candidates, min(n, len(candidates)))

