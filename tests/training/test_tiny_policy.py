"""The tiny_policy stage: a real, deterministic optimizer loop on QA seeds, published as a model artifact (a
transformers directory) that an engine serves."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from longctx_fixtures import vault_seeds

from data_contracts.stage import FrameArtifact
from inference.tokenizer import to_row, tokenizer_from_row, train_tokenizer
from training.tiny_policy import (
    TinyPolicyParams,
    label_loss,
    loss_curve,
    tiny_policy,
    training_examples,
)

SEEDS = vault_seeds(6)


@pytest.fixture(scope="module")
def tokenizer_row() -> dict:
    texts = [*SEEDS["question"], *SEEDS["answer"], *SEEDS["docs"]] * 4
    return to_row(train_tokenizer(texts, vocab_size=400))


def inputs(tokenizer_row: dict) -> dict:
    return {"tokenizer": FrameArtifact({"tokenizer": pl.DataFrame([tokenizer_row])}),
            "qa_seeds": FrameArtifact({"seeds": SEEDS})}


@pytest.fixture(scope="module")
def trained(tokenizer_row: dict, tmp_path_factory: pytest.TempPathFactory) -> FrameArtifact:
    """The stage run once, as a model artifact would hold it: its frames and its checkpoint directory."""
    return _train(tokenizer_row, tmp_path_factory.mktemp("tiny") / "model")


def _train(tokenizer_row: dict, out_dir: Path) -> FrameArtifact:
    out_dir.mkdir()
    params = TinyPolicyParams(steps=6, batch_size=2, warmup_steps=1, log_every=2)
    return FrameArtifact(tiny_policy.run(inputs(tokenizer_row), params, "p0", out_dir), key="k1", directory=out_dir)


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
    curve = trained.read("loss_curve")
    assert curve["step"].to_list() == [2, 4, 6]
    assert curve["loss"][-1] < curve["loss"][0]
    summary = trained.read("summary").row(0, named=True)
    assert summary["steps"] == 6 and summary["examples"] == len(SEEDS)
    assert summary["final_loss"] > 0 and summary["parameters"] > 0 and summary["dtype"] == "float32"


def test_same_params_same_bytes(tokenizer_row, trained, tmp_path):
    again = _train(tokenizer_row, tmp_path / "model")
    assert again.read("loss_curve").equals(trained.read("loss_curve"))
    assert (again.directory / "model.safetensors").read_bytes() == (trained.directory / "model.safetensors").read_bytes()


def test_the_model_artifact_passes_its_contracts(trained):
    from data_contracts.gate import validate, validate_directory

    for name, contract in tiny_policy.outputs.items():
        assert validate("tiny_policy", name, trained.read(name), contract, "p0").passed
    report = validate_directory("tiny_policy", trained.directory, tiny_policy.directory, "p0")
    assert report.passed, report.summary()


def test_a_checkpoint_that_differs_from_its_card_fails_its_contract(trained, tmp_path):
    import json
    import shutil

    from data_contracts.gate import validate_directory
    from inference.checkpoint import MODEL_CARD

    copy = tmp_path / "model"
    shutil.copytree(trained.directory, copy)
    card = json.loads((copy / MODEL_CARD).read_text())
    (copy / MODEL_CARD).write_text(json.dumps({**card, "parameters": card["parameters"] + 1}))
    report = validate_directory("tiny_policy", copy, tiny_policy.directory, "p0")
    assert not report.passed and "the card declares" in report.summary()["failed"][0]


def test_the_checkpoint_serves_the_qa_prompt(trained):
    from inference.agent import qa_prompt_items
    from inference.engine import Request, SamplingParams
    from inference.engine_factory import load_engine

    engine = load_engine(f"hf:{trained.directory}")
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


def test_qa_filtered_stage_runs_on_the_tiny_policy(trained):
    from data_contracts.gate import validate
    from tasks.longctx.qa_filtered import qa_filtered

    inputs = {"qa_seeds": FrameArtifact({"seeds": SEEDS}), "tiny_policy": trained}
    params = qa_filtered.parse_params({"k": 2, "max_tokens": 8, "window": [0, 2]})
    out = qa_filtered.run(inputs, params, "p0")
    assert out["seeds"].height == len(SEEDS) and out["histogram"]["n"].sum() == len(SEEDS)
    for name, frame in out.items():
        assert validate("qa_filtered", name, frame, qa_filtered.outputs[name], "p0").passed
