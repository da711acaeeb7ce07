"""Long-context and search reasoning trajectories (LongCat-Flash-Thinking-2601 3.1.2, "Agentic Search Data
Synthesis": correctness and reasoning completeness; LoongRL 3.1 for KeyChain): the assistant states every condition
of the question with the entity that meets it, then answers in ``\\boxed{}``. A KeyChain trajectory first follows
the key chain to the hidden question, key by key. Verified by the two-way reward and by completeness: every
condition statement (and every key of the chain) must appear in the answer (``records.verify_answer``).

The conditions come from a world question's program (its anchors' attribute constraints, the relation path, the
comparison), evaluated on the world's entities, so each statement carries the value that makes it true.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

Entity = Mapping[str, Any]


class NotWalkable(ValueError):
    """The program cannot be walked on the entities given (a missing entity or relation)."""


def _attr(entity: Entity, attr: str) -> str:
    value = entity.get(attr)
    if value is None:
        raise NotWalkable(f"{entity.get('name')} has no {attr}")
    return str(value)


def _constraint(entity: Entity, constraint: Sequence[Any]) -> str:
    attr, op, arg = constraint
    wanted = " ".join(map(str, arg)) if isinstance(arg, list) else str(arg)
    return f"{entity['name']}: {attr.replace('_', ' ')} {_attr(entity, attr)} ({op} {wanted})"


def _walk(entities: Mapping[str, Entity], start: str, path: Sequence[str]) -> tuple[str, list[str]]:
    """Follow ``path`` (relation columns) from ``start``; each hop stated as "<a> <relation> <b>"."""
    current, hops = start, []
    for relation in path:
        entity = entities[current]
        target = entity.get(relation)
        if target is None or target not in entities:
            raise NotWalkable(f"{entity['name']} has no {relation}")
        hops.append(f"{entity['name']} {relation.replace('_', ' ')} {entities[target]['name']}")
        current = target
    return current, hops


def conditions(program: Mapping[str, Any], entities: Mapping[str, Entity]) -> list[str]:
    """Every condition of a world question, each with the entity and value that satisfy it."""
    out, ends = [], []
    for side in program["sides"]:
        anchor = entities.get(side["anchor"])
        if anchor is None:
            raise NotWalkable(f"anchor {side['anchor']} is not in the world")
        out += [_constraint(anchor, c) for c in side["constraints"]]
        end, hops = _walk(entities, side["anchor"], side["path"])
        out += hops
        ends.append(end)
    if program.get("compare"):
        attr = program["compare"][0]
        out += [f"{entities[e]['name']}: {attr.replace('_', ' ')} {_attr(entities[e], attr)}" for e in ends]
    elif ends and ends[-1] != program["answer_entity"]:
        raise NotWalkable("the path does not end at the answer")
    if program.get("ask") not in (None, "name") and program.get("compare") is None:
        out.append(f"{entities[ends[-1]]['name']}: {program['ask']} {_attr(entities[ends[-1]], program['ask'])}")
    return out


def answer_text(steps: Sequence[str], answer: str) -> str:
    return "\n".join([*steps, f"So the answer is \\boxed{{{answer}}}."])


def qa_answer(conds: Sequence[str], answer: str) -> str:
    """The assistant's answer to a multi-hop question: each condition checked against the documents."""
    return answer_text(["I check every condition of the question against the documents:",
                        *(f"- {c}" for c in conds)], answer)


def keychain_answer(chain: Sequence[str], question: str, conds: Sequence[str], answer: str) -> str:
    """The assistant's answer to a KeyChain prompt: the chain followed key by key to the hidden question, then the
    question's conditions checked."""
    steps = [f"I start from key {chain[0]}."]
    steps += [f"{a} leads to {b}." for a, b in pairwise(chain)]
    steps.append(f'{chain[-1]} holds the hidden question: "{question}"')
    if conds:
        steps += ["I check every condition of it against the passages:", *(f"- {c}" for c in conds)]
    return answer_text(steps, answer)
