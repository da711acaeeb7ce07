"""Stage `midtrain_longctx`: long-context and search reasoning trajectories (LongCat-Flash-Thinking-2601 3.1.2,
"Agentic Search Data Synthesis"; the procedure is ``envgen.midtrain.longctx``).

- KeyChain items (the `keychain` artifact): the long prompt, then an answer that follows the key chain to the
  hidden question key by key, checks the question's conditions and answers in ``\\boxed{}``;
- multi-hop QA seeds of the world (the `world` artifact, train split): the documents and the question, then an
  answer that verifies every condition of the question with the entity and value that meet it.

Each is verified by the two-way reward and by reasoning completeness (every condition, every key stated). With
``answer: direct`` the assistant turn is the boxed answer alone (verified by the two-way reward only): a cold start
for a model whose generation budget is a few dozen tokens (the tiny profile samples 48), where the reasoning would
be cut off before its answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

import polars as pl
from pydantic import Field

from data_contracts.schemas import ITEM_REJECTED, TRAJECTORY
from data_contracts.stage import REJECTED, Artifact, stage
from envgen.midtrain.longctx import NotWalkable, conditions, keychain_answer, qa_answer
from envgen.midtrain.records import ANSWER, verify_answer
from inference.agent import prompt_docs, qa_prompt
from tasks.trajectories import TrajectoryParams, make_row, token_counter, too_long, trajectory_contract

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
        tokens = count(messages, [])
        failed = verify_answer(messages, verify_input)
        reason = f"not_verified: {failed}" if failed else too_long(tokens, params)
        if reason:
            rejected.append({"id": item_id, "reason": reason})
            continue
        rows.append(make_row(id=item_id, source=STAGE, messages=messages, tools=[], verifier=ANSWER,
                             verify_input=verify_input, tokens=tokens, domain="keychain" if ":keychain:" in item_id
                             else "qa", seed_id=seed_id))
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected)}
