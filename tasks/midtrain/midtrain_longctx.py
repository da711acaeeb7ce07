"""Stage `midtrain_longctx`: long-context and search reasoning trajectories (LongCat-Flash-Thinking-2601 3.1.2,
"Agentic Search Data Synthesis": correctness and reasoning completeness; LoongRL 3.1 for KeyChain).

- KeyChain items (the `keychain` artifact): the long prompt, then an answer that follows the key chain to the
  hidden question key by key, checks the question's conditions and answers in ``\\boxed{}``;
- multi-hop QA seeds of the world (the `world` artifact, train split): the documents and the question, then an
  answer that verifies every condition of the question with the entity and value that meet it.

Each is verified by the two-way reward and by reasoning completeness (every condition, every key stated). With
``answer: direct`` the assistant turn is the boxed answer alone (verified by the two-way reward only): a cold start
for a model whose generation budget is a few dozen tokens (the tiny profile samples 48), where the reasoning would
be cut off before its answer.

The conditions come from a world question's program (its anchors' attribute constraints, the relation path, the
comparison), evaluated on the world's entities, so each statement carries the value that makes it true.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, Literal

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, stage
from envgen.records import TRAJECTORY
from inference.agent import prompt_docs, qa_prompt
from tasks.midtrain.trajectory_stages import TrajectoryParams, answer_row, token_counter, trajectory_contract
from tasks.records import ITEM_REJECTED

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


def chain_steps(chain: Sequence[str]) -> list[str]:
    """A key chain followed key by key, up to its last key (whose value the caller states)."""
    return [f"I start from key {chain[0]}.", *(f"{a} leads to {b}." for a, b in pairwise(chain))]


def keychain_answer(chain: Sequence[str], question: str, conds: Sequence[str], answer: str) -> str:
    """The assistant's answer to a KeyChain prompt: the chain followed key by key to the hidden question, then the
    question's conditions checked."""
    steps = [*chain_steps(chain), f'{chain[-1]} holds the hidden question: "{question}"']
    if conds:
        steps += ["I check every condition of it against the passages:", *(f"- {c}" for c in conds)]
    return answer_text(steps, answer)


STAGE = "midtrain_longctx"


class LongCtxParams(TrajectoryParams):
    n_keychain: int = Field(64, ge=0, description="most KeyChain trajectories")
    n_qa: int = Field(64, ge=0, description="most multi-hop QA trajectories (world seeds of the train split)")
    qa_doc_chars: int = Field(6000, ge=200, description="characters of documents in a QA prompt (supporting first)")
    answer: Literal["reasoning", "direct"] = Field("reasoning", description="reasoning: every key and condition "
                                                   "stated, then the boxed answer; direct: the boxed answer alone")


def _aliases(value) -> list[str]:
    return json.loads(value) if isinstance(value, str) else list(value or [])


@stage(name=STAGE, version="2", params=LongCtxParams, inputs=("keychain", "world", "tokenizer"),
       outputs={"trajectories": trajectory_contract([STAGE]), REJECTED: ITEM_REJECTED.contract()})
def midtrain_longctx(inputs: Mapping[str, Artifact], params: LongCtxParams, partition: str) -> dict[str, pl.DataFrame]:
    """KeyChain and multi-hop QA trajectories that state every condition they verify."""
    world = inputs["world"]
    entities = {e["entity_id"]: e for e in world.read("entities").iter_rows(named=True)}
    seeds = world.read("seeds").filter(pl.col("split") == "train")
    programs = dict(zip(seeds["id"].to_list(), seeds["program"].to_list(), strict=True))
    count = token_counter(params, inputs)
    items = []  # (id, seed id, messages, answer, aliases, conditions)
    rejected = []
    for row in inputs["keychain"].read("keychain").head(params.n_keychain).iter_rows(named=True):
        item_id = f"{STAGE}:keychain:{row['id']}"
        try:
            conds = conditions(json.loads(programs[row["seed_id"]]), entities) if row["seed_id"] in programs else []
        except NotWalkable as exc:
            rejected.append({"id": item_id, "reason": f"not_verified: {exc}"})
            continue
        prompt = json.loads(row["prompt"])
        answer = keychain_answer(list(row["chain"]), row["hidden_question"], conds, row["answer"])
        items.append((item_id, row["seed_id"], [*prompt, {"role": "assistant", "content": answer}], row["answer"],
                      _aliases(row["aliases"]), [*row["chain"], row["hidden_question"], *conds]))
    for row in seeds.head(params.n_qa).iter_rows(named=True):
        item_id = f"{STAGE}:qa:{row['id']}"
        try:
            conds = conditions(json.loads(row["program"]), entities)
        except NotWalkable as exc:
            rejected.append({"id": item_id, "reason": f"not_verified: {exc}"})
            continue
        prompt = qa_prompt(row["question"], prompt_docs(row["docs"], params.qa_doc_chars))
        items.append((item_id, row["id"], [*prompt, {"role": "assistant", "content": qa_answer(conds, row["answer"])}],
                      row["answer"], _aliases(row["aliases"]), conds))
    rows = []
    for item_id, seed_id, messages, answer, aliases, conds in items:
        if params.answer == "direct":
            messages, conds = [*messages[:-1], {"role": "assistant", "content": f"\\boxed{{{answer}}}"}], []
        verify_input = {"answer": answer, "aliases": aliases, "conditions": conds, "limits": params.limits()}
        row, reason = answer_row(id=item_id, source=STAGE, messages=messages, verify_input=verify_input,
                                 params=params, count=count, domain="keychain" if ":keychain:" in item_id else "qa",
                                 seed_id=seed_id)
        if row is None:
            rejected.append({"id": item_id, "reason": reason})
        else:
            rows.append(row)
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected)}
