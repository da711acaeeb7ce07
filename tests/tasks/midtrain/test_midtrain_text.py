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
from tasks.midtrain.midtrain_text import render_howto

TUTORIAL = "Refunds, the friendly way: first look the order up by its number, then refund it to the card."
EXTRACTED = {"goal": "refund an order", "policies": ["refund only delivered orders"],
             "tools": [{"name": "get_order", "description": "Get an order.", "parameters": {
                            "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
                       {"name": "refund_order", "description": "Refund an order.", "parameters": {
                           "type": "object", "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}],
             "steps": [{"tool": "get_order", "arguments": {"order_id": "user"}},
                       {"tool": "refund_order", "arguments": {"order_id": 1}}]}


def _corpus(root: Path) -> Path:
    root.mkdir()
    domain = compiled("retail")
    chain = sample_chain(domain, random.Random(0), set(domain.tools), 2)
    (root / "a_howto.md").write_text(render_howto(domain, chain, "do it"))
    (root / "b_tutorial.txt").write_text(TUTORIAL)
    (root / "c_blog.txt").write_text("A post about the weather; explode.")
    (root / "d_notes.txt").write_text("Shopping list: milk, bread.")
    return root


def _policy(request, index) -> str:
    prompt = request.messages[-1]["content"]
    if "Refunds, the friendly way" in prompt:
        return "Here it is: " + json.dumps(EXTRACTED)
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
    assert all(r.startswith("no_procedure") for r in reasons.values()) and len(reasons) == 3
    assert validate("midtrain_text", "trajectories", out["trajectories"], stage.midtrain_text.outputs["trajectories"],
                    "t").passed


def test_a_teacher_extracts_tutorials_and_its_failures_reject_one_text_each(tmp_path: Path, monkeypatch) -> None:
    teacher = Teacher("openai:scripted", engine=ScriptedEngine(_policy))
    out = _run(_corpus(tmp_path / "corpus"), teacher, monkeypatch)
    kept = out["trajectories"]
    assert kept["id"].to_list() == ["midtrain_text:a_howto", "midtrain_text:b_tutorial"]
    calls = [c["function"]["name"] for m in json.loads(kept["messages"][1]) for c in m.get("tool_calls") or []]
    assert calls == ["get_order", "refund_order"]
    reasons = dict(zip(out["rejected"]["id"], out["rejected"]["reason"], strict=True))
    assert reasons["midtrain_text:c_blog"].startswith("teacher: RuntimeError: HTTP 500")
    assert reasons["midtrain_text:d_notes"].startswith("no_procedure: the teacher's extraction is not a procedure")
    assert validate("midtrain_text", "trajectories", kept, stage.midtrain_text.outputs["trajectories"], "t").passed


def test_an_empty_corpus_is_one_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(StageError, match="holds no .txt/.md/.markdown files"):
        _run(tmp_path / "empty", None, monkeypatch)
