"""midtrain_text on a local corpus: how-to texts parse into gated trajectories, free text needs a teacher, and a
teacher that fails or answers garbage on one text rejects that text only."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from longctx_fixtures import tokenizer_artifact

import tasks.midtrain.midtrain_text as stage
from data_contracts.gate import validate
from data_contracts.stage import StageError
from envgen.compiler import compiled
from envgen.construct import sample_chain
from inference.teacher import Teacher
from inference.testing import ScriptedEngine
from tasks.midtrain.midtrain_text import found_with_tools, render_howto

TUTORIAL = "Refunds, the friendly way: first look the order up by its number, then refund it to the card."
EXTRACTED = {"goal": "refund an order", "policies": ["refund only delivered orders"],
             "tools": [{"name": "find_order", "description": "Find an order by its number.", "parameters": {
                            "type": "object", "properties": {"order_number": {"type": "string"}},
                            "required": ["order_number"]}},
                       {"name": "refund_order", "description": "Refund an order.", "parameters": {
                           "type": "object", "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}],
             "steps": [{"tool": "find_order", "arguments": {"order_number": "user"}},
                       {"tool": "refund_order", "arguments": {"order_id": 1}}]}
KEYED = "Refunds by key: the customer tells you the order's database id, you refund it."
ASKS_A_KEY = {**EXTRACTED, "tools": EXTRACTED["tools"][1:], "steps": [
    {"tool": "refund_order", "arguments": {"order_id": "user"}}]}


def _corpus(root: Path) -> Path:
    root.mkdir()
    domain = compiled("retail")
    rng = random.Random(0)
    chain = None
    while chain is None:  # a procedure that starts from what a person knows, as the specs corpus renders them
        chain = found_with_tools(domain, sample_chain(domain, rng, set(domain.tools), 2) or [])
    (root / "a_howto.md").write_text(render_howto(domain, chain, "do it"))
    (root / "b_tutorial.txt").write_text(TUTORIAL)
    (root / "c_blog.txt").write_text("A post about the weather; explode.")
    (root / "d_notes.txt").write_text("Shopping list: milk, bread.")
    (root / "e_keyed.txt").write_text(KEYED)
    return root


def _policy(request, index) -> str:
    prompt = request.messages[-1]["content"]
    if "Refunds, the friendly way" in prompt:
        return "Here it is: " + json.dumps(EXTRACTED)
    if "Refunds by key" in prompt:
        return json.dumps(ASKS_A_KEY)
    if "explode" in prompt:
        raise RuntimeError("HTTP 500 from the teacher")
    return "hello there friend" if "Say hello" in prompt else "I do not see a procedure."


def _run(corpus: Path, teacher: Teacher | None, monkeypatch) -> dict:
    if teacher is not None:
        monkeypatch.setattr(stage, "open_teacher", lambda params: teacher)
    params = stage.midtrain_text.parse_params({"corpus": str(corpus)})
    return stage.midtrain_text.run({"tokenizer": tokenizer_artifact()}, params, "t")


def test_howto_texts_parse_and_free_text_needs_a_teacher(tmp_path: Path, monkeypatch) -> None:
    out = _run(_corpus(tmp_path / "corpus"), None, monkeypatch)
    assert out["trajectories"]["id"].to_list() == ["midtrain_text:a_howto"]
    reasons = dict(zip(out["rejected"]["id"], out["rejected"]["reason"], strict=True))
    assert all(r.startswith("no_procedure") for r in reasons.values()) and len(reasons) == 4
    assert validate("midtrain_text", "trajectories", out["trajectories"], stage.midtrain_text.outputs["trajectories"],
                    "t").passed


def test_a_teacher_extracts_tutorials_and_its_failures_reject_one_text_each(tmp_path: Path, monkeypatch) -> None:
    teacher = Teacher("openai:scripted", engine=ScriptedEngine(_policy))
    out = _run(_corpus(tmp_path / "corpus"), teacher, monkeypatch)
    kept = out["trajectories"]
    assert kept["id"].to_list() == ["midtrain_text:a_howto", "midtrain_text:b_tutorial"]
    calls = [c["function"]["name"] for m in json.loads(kept["messages"][1]) for c in m.get("tool_calls") or []]
    assert calls == ["find_order", "refund_order"]
    results = [json.loads(m["content"]) for m in json.loads(kept["messages"][1]) if m["role"] == "tool"]
    assert results[0]["order_id"] and results[0]["order_number"]  # a record: the key the next step takes
    reasons = dict(zip(out["rejected"]["id"], out["rejected"]["reason"], strict=True))
    # the user would state the order's database key: set aside, never trained on
    assert reasons["midtrain_text:e_keyed"].startswith("no_internal_key: message 1: the user states internal key")
    assert reasons["midtrain_text:c_blog"].startswith("teacher: RuntimeError: HTTP 500")
    assert reasons["midtrain_text:d_notes"].startswith("no_procedure: the teacher's extraction is not a procedure")
    assert validate("midtrain_text", "trajectories", kept, stage.midtrain_text.outputs["trajectories"], "t").passed


def test_an_empty_corpus_is_one_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(StageError, match="holds no .txt/.md/.markdown files"):
        _run(tmp_path / "empty", None, monkeypatch)
