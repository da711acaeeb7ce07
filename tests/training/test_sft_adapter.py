"""SFT with low-rank adapters (peft): only the adapters of the top layers train, the published weights are the base
plus the merged adapter, and the output layer applied at the trained positions only gives the loss over all
positions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sft_fixtures import micro_base, trajectories, trajectory_artifact

from training.adapters import ADAPTER, LoraSettings, merge_adapter
from training.sft import SFTParams, load_base, make_trainer, sft
from training.sft_data import build_examples

FAST = {"max_length": 1024, "learning_rate": 5e-2, "per_device_train_batch_size": 2, "logging_steps": 1,
        "use_cpu": True, "eval_tool_calls": 0, "warmup_steps": 0, "save_steps": 1000}
TOP_LAYER = LoraSettings(r=4, alpha=8, layers=1)  # the micro base has two layers: adapt the upper one


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return micro_base(tmp_path_factory.mktemp("adapter") / "base")


def rows(tokenizer, n: int = 4) -> list[dict]:
    examples, _ = build_examples(trajectories(n), tokenizer, 1024)
    return [e.row(json.loads(r["messages"])) for e, r in examples]


def test_adapter_training_changes_only_the_adapter_weights_of_the_top_layers(base, tmp_path):
    model, tokenizer, _ = load_base(base)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    params = SFTParams(**FAST, max_steps=3, lora=TOP_LAYER)
    trainer = make_trainer(model, tokenizer, rows(tokenizer), [], [], params, tmp_path, progress=False)
    trainer.train()
    trained = trainer.model
    adapters = {name: p for name, p in trained.named_parameters() if "lora_" in name}
    assert adapters and all(p.requires_grad for p in adapters.values())
    assert all(".layers.1." in name for name in adapters)  # the top layer only: the backward pass stops there
    assert any(not torch.equal(p, torch.zeros_like(p)) for name, p in adapters.items() if "lora_B" in name)
    frozen = {name.replace("base_model.model.", "", 1).replace(".base_layer", ""): p
              for name, p in trained.named_parameters() if "lora_" not in name}
    assert not any(p.requires_grad for p in frozen.values())
    assert set(frozen) <= set(before)
    assert all(torch.equal(frozen[name], before[name]) for name in frozen)


def test_the_published_model_is_the_base_plus_its_merged_adapter(base, tmp_path):
    """Recomputed from the files: base weight + (alpha / r) B A for every adapted projection, equal elsewhere."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "model"
    out.mkdir()
    params = SFTParams(**{**FAST, "eval_tool_calls": 3}, max_steps=3, model_name_or_path=str(base),
                       eval_fraction=0.3, lora=TOP_LAYER, output_dir=str(tmp_path / "trainer"))
    frames = sft.run({"trajectories": trajectory_artifact(trajectories(10))}, params, "p0", out)
    evaluated = set(frames["metrics"].filter(frames["metrics"]["split"] == "eval")["name"])
    assert {"tool_call_valid", "tool_call_valid_change_low", "tool_call_valid_change_high"} <= evaluated
    merged = AutoModelForCausalLM.from_pretrained(str(out)).state_dict()
    original = AutoModelForCausalLM.from_pretrained(str(base)).state_dict()
    adapter = load_file(str(out / ADAPTER / "adapter_model.safetensors"))
    scale = TOP_LAYER.alpha / TOP_LAYER.r
    adapted = {name.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
               for name in adapter if name.endswith("lora_A.weight")}
    assert len(adapted) == 7  # every projection of the top layer
    for name, weight in merged.items():
        module = name.removesuffix(".weight")
        if module in adapted:
            a = adapter[f"base_model.model.{module}.lora_A.weight"]
            b = adapter[f"base_model.model.{module}.lora_B.weight"]
            assert not torch.equal(weight, original[name])
            torch.testing.assert_close(weight, original[name] + scale * b @ a, rtol=0, atol=1e-6)
        else:
            assert torch.equal(weight, original[name]), name
    card = json.loads((out / "gymforge_model.json").read_text())
    assert card["adapter"]["r"] == 4 and card["adapter"]["layers"] == [1]


def test_merge_adapter_leaves_a_fully_trained_model_as_it_is(base):
    model = load_base(base)[0]
    assert merge_adapter(model) is model


@pytest.mark.parametrize("lora", [None, TOP_LAYER], ids=["full", "adapter"])
def test_the_output_layer_at_trained_positions_gives_the_loss_over_all_positions(base, tmp_path, lora, monkeypatch):
    """The trainer's loss, the output layer applied on the CPU to the trained positions alone (counted by a spy on
    TRL's projection), against cross-entropy of the full logits over every position, ignored labels left out: the
    same number, with and without adapters."""
    import trl.trainer.utils as fused_head

    projected: list[int] = []
    projection = fused_head._ChunkedLogProbFunction

    class ProjectionSpy(projection):
        @staticmethod
        def apply(hidden: torch.Tensor, *args: object) -> object:
            projected.append(hidden.shape[0])
            return projection.apply(hidden, *args)

    monkeypatch.setattr(fused_head, "_ChunkedLogProbFunction", ProjectionSpy)
    model, tokenizer, _ = load_base(base)
    params = SFTParams(**FAST, max_steps=1, lora=lora, train_sampling_strategy="random")
    trainer = make_trainer(model, tokenizer, rows(tokenizer), [], [], params, tmp_path, progress=False)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    labels = batch["labels"]
    assert (labels == -100).float().mean() > 0.3  # prompts and masked turns: most positions are not trained
    with torch.no_grad():
        fused = trainer.compute_loss(trainer.model, dict(batch))
        assert projected == [int((labels[:, 1:] != -100).sum())]
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        full = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 labels[:, 1:].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(fused, full, rtol=1e-5, atol=1e-6)


def test_adapter_layers_beyond_the_base_are_refused(base):
    model = load_base(base)[0]
    with pytest.raises(Exception, match="lora.layers=8: the base has 2 layers"):
        LoraSettings(layers=8).config(model.config.num_hidden_layers)


def test_a_plain_copy_is_the_merged_model_in_its_dtype_and_leaves_the_trained_one_as_it_is(base, tmp_path):
    """What held-out decoding in bf16 runs on: the trained adapter merged, the trainer's model untouched (its patched
    forward and fp32 weights), so a copy made mid-run decodes what the run has learnt so far."""
    from peft import PeftModel

    from training.adapters import merged_state_dict, plain_copy

    model, tokenizer, _ = load_base(base)
    params = SFTParams(**FAST, max_steps=2, lora=TOP_LAYER)
    trainer = make_trainer(model, tokenizer, rows(tokenizer), [], [], params, tmp_path, progress=False)
    trainer.train()
    before = {name: p.clone() for name, p in trainer.model.named_parameters()}
    copy = plain_copy(trainer.model, "bfloat16")
    assert not isinstance(copy, PeftModel) and not copy.training
    merged = merged_state_dict(trainer.model)
    for name, tensor in copy.state_dict().items():
        assert tensor.dtype == torch.bfloat16
        torch.testing.assert_close(tensor, merged[name].to(torch.bfloat16), rtol=0, atol=0)
    assert all(torch.equal(p, before[name]) and p.dtype == torch.float32
               for name, p in trainer.model.named_parameters())
    ids = torch.tensor([tokenizer.encode("hello there")])
    with torch.no_grad():
        expected = trainer.model(input_ids=ids).logits
        got = copy(input_ids=ids).logits.float()
    torch.testing.assert_close(got, expected, rtol=0.05, atol=0.05)


def test_kept_frozen_outputs_train_the_same_adapter_as_computing_them_every_epoch(base, tmp_path):
    """Three epochs of two one-trajectory batches: from the second epoch on the frozen layer's output is read, not
    computed, and the adapter ends as without it (the same loss every step, the same weights)."""
    trained = {}
    for mb in (0, 64):
        model, tokenizer, _ = load_base(base)
        params = SFTParams(**{**FAST, "per_device_train_batch_size": 1}, max_steps=6, lora=TOP_LAYER,
                           frozen_outputs_mb=mb)
        trainer = make_trainer(model, tokenizer, rows(tokenizer, 2), [], [], params, tmp_path / str(mb),
                               progress=False)
        trainer.train()
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        trained[mb] = (losses, {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n},
                       trainer.frozen_outputs)
    (plain, weights, off), (kept, kept_weights, record) = trained[0], trained[64]
    assert off is None and record["hits"] >= 4 and record["bytes"] > 0
    assert kept == pytest.approx(plain, rel=1e-5)
    for name, tensor in weights.items():
        torch.testing.assert_close(kept_weights[name], tensor, rtol=1e-5, atol=1e-6)


def test_a_run_whose_eval_steps_reach_its_last_step_evaluates_it_once(base, tmp_path):
    from training.sft import fit

    model, tokenizer, _ = load_base(base)
    data = rows(tokenizer, 4)
    params = SFTParams(**FAST, max_steps=2, eval_steps=1)
    _, history = fit(model, tokenizer, data[:3], data[3:], [], params, tmp_path, None, progress=False)
    assert [e["step"] for e in history if "eval_loss" in e] == [0, 1, 2]
