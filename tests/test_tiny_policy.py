"""The tiny_policy stage: a real, deterministic optimizer loop on QA seeds, and its checkpoint as an engine."""

from __future__ import annotations

import json

import polars as pl
import pytest

from data_contracts.stage import FrameArtifact
from inference.tokenizer import to_row, tokenizer_from_row, train_tokenizer
from tests.test_difficulty import seeds_frame
from training.tiny_policy import (
    TinyPolicyParams,
    label_loss,
    loss_curve,
    materialize_checkpoint,
    tiny_policy,
    training_examples,
)

SEEDS = seeds_frame(6)


@pytest.fixture(scope="module")
def tokenizer_row() -> dict:
    texts = [*SEEDS["question"], *SEEDS["answer"], *SEEDS["docs"]] * 4
    return to_row(train_tokenizer(texts, vocab_size=400))


def inputs(tokenizer_row: dict) -> dict:
    return {"tokenizer": FrameArtifact({"tokenizer": pl.DataFrame([tokenizer_row])}),
            "qa_seeds": FrameArtifact({"seeds": SEEDS})}


@pytest.fixture(scope="module")
def trained(tokenizer_row: dict) -> pl.DataFrame:
    params = TinyPolicyParams(steps=6, batch_size=2, warmup_steps=1, log_every=2)
    return tiny_policy.run(inputs(tokenizer_row), params, "p0")["checkpoint"]


def test_labels_cover_exactly_the_boxed_answer(tokenizer_row):
    tokenizer = tokenizer_from_row(tokenizer_row)
    for (ids, labels), answer in zip(training_examples(SEEDS, tokenizer, 512), SEEDS["answer"], strict=True):
        assert len(ids) == len(labels)
        trained_ids = [t for t in labels if t != -100]
        assert tokenizer.decode(trained_ids) == f"\\boxed{{{answer}}}<|im_end|>"
        start = next(i for i, t in enumerate(labels) if t != -100)
        assert labels[start:start + len(trained_ids)] == ids[start:start + len(trained_ids)]  # one contiguous span


def test_label_loss_equals_the_full_logits_loss(tokenizer_row):
    import torch

    from training.tiny_model import build_model

    model = build_model("tiny", tokenizer_from_row(tokenizer_row), seed=0)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 24), generator=generator)
    attention = torch.ones_like(ids)
    attention[1, 17:] = 0  # a right-padded row, as _pad makes them
    labels = torch.where(torch.rand(ids.shape, generator=generator) < 0.3, ids, -100).masked_fill(attention == 0, -100)
    full = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    full_grads = torch.autograd.grad(full, list(model.parameters()))
    ours = label_loss(model, ids, attention, labels)
    our_grads = torch.autograd.grad(ours, list(model.parameters()))
    assert torch.allclose(ours, full)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(our_grads, full_grads, strict=True))


def test_training_lowers_the_loss_and_records_the_curve(trained):
    row = trained.row(0, named=True)
    curve = json.loads(row["loss_curve"])
    assert [point["step"] for point in curve] == [2, 4, 6]
    assert curve[-1]["loss"] < curve[0]["loss"]
    assert row["steps"] == 6 and row["n_train"] == len(SEEDS)
    assert row["final_loss"] > 0 and row["safetensors"][:8] != b""


def test_same_params_same_bytes(tokenizer_row, trained):
    params = TinyPolicyParams(steps=6, batch_size=2, warmup_steps=1, log_every=2)
    again = tiny_policy.run(inputs(tokenizer_row), params, "p0")["checkpoint"]
    assert again.equals(trained)


def test_checkpoint_passes_its_contract(trained):
    from data_contracts.gate import validate

    report = validate("tiny_policy", "checkpoint", trained, tiny_policy.outputs["checkpoint"], "p0")
    assert report.passed, report.summary()


def test_materialized_checkpoint_serves_the_qa_prompt(trained, tmp_path):
    from inference.agent import qa_prompt_items
    from inference.engine import Request, SamplingParams
    from inference.engines import load_engine

    artifact = FrameArtifact({"checkpoint": trained}, key="k1")
    path = materialize_checkpoint(artifact, tmp_path)
    assert materialize_checkpoint(artifact, tmp_path) == path and path.name.startswith("k1-")
    engine = load_engine(f"hf:{path}")
    item = qa_prompt_items(SEEDS.head(1), 512)[0]
    [[completion]] = engine.generate([Request(item.messages, sampling=SamplingParams(max_tokens=8, seed=0))])
    assert 0 < len(completion.token_ids) == len(completion.logprobs) <= 8
    engine.close()


def test_loss_curve_windows():
    assert loss_curve([4.0, 2.0, 1.0], every=2) == [{"step": 2, "loss": 3.0}, {"step": 3, "loss": 1.0}]


@pytest.mark.parametrize(("raw", "field"), [({"steps": 5, "warmup_steps": 5}, "warmup_steps"),
                                             ({"size": "huge"}, "size"), ({"batch_size": 0}, "batch_size")])
def test_bad_params_are_clear_errors(raw, field):
    with pytest.raises(ValueError, match=field):
        TinyPolicyParams(**raw)


def test_qa_filtered_stage_runs_on_the_tiny_policy(trained, tmp_path, monkeypatch):
    from data_contracts.gate import validate
    from tasks.difficulty import CACHE_ENV, qa_filtered

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    inputs = {"qa_seeds": FrameArtifact({"seeds": SEEDS}), "tiny_policy": FrameArtifact({"checkpoint": trained})}
    params = qa_filtered.parse_params({"k": 2, "max_tokens": 8, "window": [0, 2]})
    out = qa_filtered.run(inputs, params, "p0")
    assert out["seeds"].height == len(SEEDS) and out["histogram"]["n"].sum() == len(SEEDS)
    assert list((tmp_path / "checkpoints").iterdir())  # the checkpoint was materialised into the cache
    for name, frame in out.items():
        assert validate("qa_filtered", name, frame, qa_filtered.outputs[name], "p0").passed
