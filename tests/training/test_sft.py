"""Cold-start SFT: per-turn masks reach TRL's labels, masked turns carry no loss, packing agrees with padding,
resuming continues the same run, bad inputs fail before a step, and the stage publishes a loadable model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sft_fixtures import TOOLS, conversation, micro_base, trajectories, trajectory_artifact, trajectory_row

import training.sft as sft_module
from data_contracts.stage import FrameArtifact, StageError
from envgen.records import TRAJECTORY
from inference.checkpoint import read_card
from training.sft import (
    COMPLETE,
    SFTParams,
    fit,
    load_base,
    metrics_frame,
    prepare_checkpoints,
    sft,
)
from training.sft_data import build_examples, encode, in_eval_split, read_trajectories
from training.sft_eval import CallTurn, argument_problem, call_turns, score_call, score_turns

FAST = {"max_length": 1024, "learning_rate": 1e-2, "per_device_train_batch_size": 2, "logging_steps": 1,
        "use_cpu": True, "eval_tool_calls": 2, "warmup_steps": 0}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return micro_base(tmp_path_factory.mktemp("sft") / "base")


@pytest.fixture(scope="module")
def tokenizer(base: Path):
    return load_base(base)[1]


def assistant_text(tokenizer, message: dict) -> str:
    """What the template renders inside one assistant message's generation span."""
    full = tokenizer.apply_chat_template([{"role": "user", "content": "u"}, message], tools=TOOLS, tokenize=False)
    return full.split("<|im_start|>assistant\n", 1)[1].removesuffix("\n")


# --- masks ---------------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.booleans(), st.data())
def test_the_mask_covers_exactly_the_flagged_assistant_turns(tokenizer, seed, failed_first, data):
    messages, _ = conversation(random.Random(seed), failed_first)
    flags = [m["role"] == "assistant" and data.draw(st.booleans()) for m in messages]
    example = encode(trajectory_row(0, messages, flags), tokenizer)
    trained = tokenizer.decode([t for t, m in zip(example.input_ids, example.assistant_masks, strict=True) if m])
    expected = "".join(assistant_text(tokenizer, m) for m, f in zip(messages, flags, strict=True) if f)
    assert trained == expected


def test_train_flags_reach_trl_labels(base, tokenizer):
    """Through TRL's own dataset preparation: labels are -100 exactly where the mask is off."""
    frame = trajectories(3)
    examples, _ = build_examples(frame, tokenizer, 1024)
    trainer = _trainer(base, [e.row(json.loads(r["messages"])) for e, r in examples])
    for (example, _), prepared in zip(examples, trainer.train_dataset, strict=True):
        assert prepared["input_ids"] == example.input_ids
        assert prepared["labels"] == [t if m else -100 for t, m in zip(example.input_ids, example.assistant_masks,
                                                                        strict=True)]


def test_masked_turns_contribute_no_loss(base, tokenizer):
    """Perturbing the tokens of a masked final turn leaves the loss unchanged; perturbing a trained turn does not
    (so the comparison can fail)."""
    import torch

    rng = random.Random(3)
    messages, flags = conversation(rng, failed_first=False)
    flags[-1] = False  # the final answer is masked: its tokens are context for nothing and targets for nothing
    example = encode(trajectory_row(0, messages, flags), tokenizer)
    masked = [i for i, (m, t) in enumerate(zip(example.assistant_masks, example.input_ids, strict=True))
              if not m and i > len(example.input_ids) - 12]
    trained = [i for i, m in enumerate(example.assistant_masks) if m]
    model = load_base(base)[0]

    def loss(ids: list[int]) -> float:
        trainer = _trainer(base, [{**example.row(messages), "input_ids": ids}], model=model)
        batch = next(iter(trainer.get_train_dataloader()))
        with torch.no_grad():
            return float(model(**batch).loss)

    reference = loss(example.input_ids)
    perturbed = list(example.input_ids)
    for i in masked:
        perturbed[i] = (perturbed[i] + 7) % len(tokenizer)
    assert loss(perturbed) == pytest.approx(reference, abs=1e-7)
    changed = list(example.input_ids)
    changed[trained[len(trained) // 2]] = (changed[trained[len(trained) // 2]] + 7) % len(tokenizer)
    assert abs(loss(changed) - reference) > 1e-4


def test_packed_and_padded_batches_give_the_same_loss(base, tokenizer):
    """Best-fit packing (padding-free, position ids restart per example) attends within each example only."""
    import torch

    examples, _ = build_examples(trajectories(2), tokenizer, 1024)
    rows = [e.row(json.loads(r["messages"])) for e, r in examples]
    model = load_base(base)[0]
    losses = []
    for packing in (False, True):
        trainer = _trainer(base, rows, model=model, packing=packing, max_length=1024)
        batch = next(iter(trainer.get_train_dataloader()))
        assert batch["input_ids"].shape[0] == (1 if packing else 2)
        with torch.no_grad():
            losses.append(float(model(**batch).loss))
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def _trainer(base: Path, rows: list[dict], model=None, **config):
    from datasets import Dataset

    from training.sft import _trainer_class, sft_config

    loaded, tokenizer, _ = load_base(base)
    params = SFTParams(**{**FAST, "per_device_train_batch_size": len(rows), "train_sampling_strategy": "random",
                          **config})
    args = sft_config(params, base.parent / "unused", evaluate=False, resuming=False)
    return _trainer_class()(model=model or loaded, args=args, train_dataset=Dataset.from_list(rows),
                            processing_class=tokenizer)


# --- data --------------------------------------------------------------------------------------------------------


def test_unverified_long_and_untrained_trajectories_are_set_aside(tokenizer):
    frame = trajectories(4)
    rows = list(frame.iter_rows(named=True))
    rows[0]["verified"] = False
    rows[1]["train"] = [False] * len(rows[1]["train"])
    frame = TRAJECTORY.frame(rows)
    longest = max(len(encode(r, tokenizer).input_ids) for r in rows[2:])
    kept, rejected = build_examples(frame, tokenizer, longest - 1)
    reasons = dict(zip(rejected["id"], rejected["reason"], strict=True))
    assert reasons["t0000"] == "not_verified" and reasons["t0001"] == "no_trained_turn"
    assert "too_long" in reasons.values() and len(kept) + rejected.height == 4


def test_the_eval_split_is_stable_and_keeps_variants_and_augmentations_with_their_task():
    rows = [{"id": f"r{i}", "parent_id": None} for i in range(400)]
    held = {r["id"] for r in rows if in_eval_split(r, 0.25, 0)}
    assert 60 < len(held) < 140
    assert held == {r["id"] for r in reversed(rows) if in_eval_split(r, 0.25, 0)}
    child = {"id": "child", "parent_id": min(held)}
    assert in_eval_split(child, 0.25, 0)
    # the variants of one task (another phrasing, an augmentation) go where the task goes
    tasks = [[{"id": f"t{i}/{v}", "task_id": f"t{i}", "parent_id": f"t{i}/0" if v == 2 else None} for v in range(3)]
             for i in range(200)]
    splits = [{in_eval_split(r, 0.25, 0) for r in variants} for variants in tasks]
    assert all(len(split) == 1 for split in splits) and 20 < sum(True in s for s in splits) < 80


# --- validity ----------------------------------------------------------------------------------------------------

BOOK = TOOLS[1]


@settings(deadline=None)  # jsonschema's first validator build can pass 200 ms on a loaded machine
@given(st.text(min_size=1, max_size=8), st.integers(1, 9), st.sampled_from(["economy", "business", None]))
def test_valid_arguments_pass_and_each_kind_of_fault_fails(item, seats, cabin):
    good = {"item_id": item, "seats": seats, **({"cabin": cabin} if cabin else {})}
    assert argument_problem(good, BOOK) is None
    assert argument_problem({"seats": seats}, BOOK) is not None  # a required argument missing
    assert argument_problem({**good, "note": "x"}, BOOK) is not None  # an argument the tool does not take
    assert argument_problem({**good, "seats": str(seats)}, BOOK) is not None  # the wrong type
    assert argument_problem({**good, "cabin": "first"}, BOOK) is not None  # outside the enum


def test_score_call_needs_the_right_tool_with_valid_arguments():
    turn = CallTurn((), tuple(TOOLS), "book", {"item_id": "IT1", "seats": 2})

    def text(name: str, args: dict) -> str:
        return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(args)}}}</tool_call>'

    assert score_call(text("book", {"item_id": "IT1", "seats": 2}), turn) == {
        "tool_call_format": True, "tool_call_valid": True, "tool_call_exact": True}
    assert score_call(text("book", {"item_id": "IT9", "seats": 2}), turn)["tool_call_exact"] is False
    assert score_call(text("lookup", {"query": "IT1"}), turn)["tool_call_valid"] is False
    assert score_call(text("book", {"item_id": "IT1"}), turn)["tool_call_valid"] is False
    assert score_call("I will book it.", turn) == dict.fromkeys(turn_figures := score_call("", turn), False)
    assert set(turn_figures) == {"tool_call_format", "tool_call_valid", "tool_call_exact"}


def test_call_turns_take_trained_tool_calls_only():
    turns = call_turns(list(trajectories(3).iter_rows(named=True)), limit=100)
    assert [t.name for t in turns] == ["lookup", "book"] * 3  # the masked failed booking of row 0 is not scored
    assert all(t.messages[-1]["role"] in ("user", "tool") for t in turns)


@given(st.integers(0, 8))
def test_call_turns_take_at_most_the_limit_in_order(limit):
    """``eval_tool_calls: 0`` scores no turn (it scored every one)."""
    rows = list(trajectories(3).iter_rows(named=True))
    every = call_turns(rows, limit=100)
    assert call_turns(rows, limit) == every[:limit]


def test_score_turns_scores_every_turn_in_order_and_keeps_the_training_mode(base, tokenizer, monkeypatch):
    from training import sft_eval

    model = load_base(base)[0]
    model.train()
    turns = call_turns(list(trajectories(3).iter_rows(named=True)), limit=100)
    seen: list[int] = []  # turns reach score_call in their own order whatever the length-sorted batches
    monkeypatch.setattr(sft_eval, "score_call", lambda text, turn: seen.append(next(i for i, t in enumerate(turns) if t is turn)) or {})
    assert len(score_turns(model, tokenizer, turns, max_new_tokens=4, batch_size=4)) == len(turns)
    assert seen == list(range(len(turns))) and model.training


# --- training and resume -----------------------------------------------------------------------------------------


def _rows(tokenizer, n: int = 8) -> list[dict]:
    examples, _ = build_examples(trajectories(n), tokenizer, 1024)
    return [e.row(json.loads(r["messages"])) for e, r in examples]


def _losses(history: list[dict]) -> dict[int, float]:
    return {h["step"]: h["loss"] for h in history if "loss" in h}


class Killed(Exception):
    pass


@pytest.mark.parametrize("sampling", ["group_by_length", "random"])
def test_a_killed_run_resumes_exactly_where_an_uninterrupted_one_would_be(base, tokenizer, tmp_path, sampling):
    """Killed after step 8 (in its second epoch: 5 steps per epoch), resumed from checkpoint 7 in a fresh trainer:
    the same steps follow, on the same batches (tokens seen), to the same losses and the same weights, bit for
    bit."""
    import torch
    from transformers import TrainerCallback

    import training.sft as sft_module

    params = SFTParams(**FAST, max_steps=14, save_steps=7, train_sampling_strategy=sampling)
    rows = _rows(tokenizer, 10)
    whole_model, whole = fit(load_base(base)[0], tokenizer, rows, [], [], params, tmp_path / "whole", None,
                             progress=False)

    class KillAtStep8(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 8:
                raise Killed

    steps: list[int] = []

    class CountSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    def run(extra, directory: str, resume_from=None):
        callbacks = sft_module._callbacks
        sft_module._callbacks = lambda progress: [*callbacks(progress), extra]
        try:
            return fit(load_base(base)[0], tokenizer, rows, [], [], params, tmp_path / directory, resume_from,
                       progress=False)
        finally:
            sft_module._callbacks = callbacks

    with pytest.raises(Killed):
        run(KillAtStep8(), "killed")
    (tmp_path / "killed" / "checkpoint-14").mkdir()  # a save the kill interrupted: no completion marker
    resume_from = prepare_checkpoints(tmp_path / "killed", resume=True)
    assert resume_from == tmp_path / "killed" / "checkpoint-7" and (resume_from / COMPLETE).is_file()
    assert not (tmp_path / "killed" / "checkpoint-14").exists()
    resumed_model, resumed = run(CountSteps(), "killed", resume_from)
    assert steps == list(range(8, 15))  # continued after step 7, not from the start

    def trace(history: list[dict]) -> dict[int, tuple[float, int]]:
        return {h["step"]: (h["loss"], h["num_input_tokens_seen"]) for h in history if "loss" in h}

    assert trace(resumed) == trace(whole) and sorted(trace(whole)) == list(range(1, 15))
    whole_state, resumed_state = whole_model.state_dict(), resumed_model.state_dict()
    assert all(torch.equal(whole_state[name], resumed_state[name]) for name in whole_state)


def test_a_fresh_run_drops_the_checkpoints_of_an_earlier_one(tmp_path):
    old = tmp_path / "checkpoint-3"
    old.mkdir()
    (old / COMPLETE).touch()
    assert prepare_checkpoints(tmp_path, resume=False) is None and not old.exists()


# --- the stage -----------------------------------------------------------------------------------------------------


def _inputs(base: Path, frame=None) -> dict:
    model = FrameArtifact({}, key="basekey", manifest={"kind": "model", "outputs": {}}, directory=base)
    return {"trajs": trajectory_artifact(trajectories(12) if frame is None else frame), "base": model}


def test_the_stage_trains_and_writes_a_model_with_its_card(base, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    params = SFTParams(**FAST, max_steps=4, save_steps=2, eval_fraction=0.25, output_dir=str(tmp_path / "ck"))
    frames = sft.run(_inputs(base), params, "p0", out)
    card = read_card(out)
    assert card["base"] == "base/basekey" and card["data"] == {"trajs": "trajkey"} and card["steps"] == 4
    assert card["config"]["learning_rate"] == 1e-2 and "output_dir" not in card["config"]
    assert {"loss", "tool_call_valid"} <= set(card["metrics"])
    metrics = frames["metrics"]
    evals = metrics.filter(metrics["split"] == "eval")
    assert sorted(set(evals["step"])) == [0, 4]  # before the first step and at the end
    assert frames["summary"]["steps"].to_list() == [4] and frames["rejected"].is_empty()
    from inference.checkpoint import MODEL_DIRECTORY

    assert all(check.fn(out) is None for check in MODEL_DIRECTORY.checks)


def test_bf16_on_a_cpu_without_a_bf16_path_trains_in_float32_and_says_so(base, tmp_path, monkeypatch, caplog):
    """There a bf16 matrix product takes tens of times a float32 one: the run trains in float32, says so once and
    its card records the precision it trained in."""
    monkeypatch.setattr(sft_module, "native_bf16", lambda on_cpu: False)  # test double of the hardware check
    out = tmp_path / "model"
    out.mkdir()
    params = SFTParams(**FAST, max_steps=2, bf16=True, output_dir=str(tmp_path / "ck"))
    with caplog.at_level("WARNING", logger="gymforge.sft"):
        sft.run(_inputs(base), params, "p0", out)
    assert read_card(out)["config"]["bf16"] is False
    assert len([r for r in caplog.records if "bf16 off" in r.getMessage()]) == 1


def test_report_to_tensorboard_writes_the_loss_of_every_logged_step(base, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, logs = tmp_path / "model", tmp_path / "tb"
    out.mkdir()
    params = SFTParams(**{**FAST, "logging_steps": 2, "eval_tool_calls": 0}, max_steps=4, save_steps=2,
                       output_dir=str(tmp_path / "ck"), report_to=["tensorboard"], logging_dir=str(logs))
    frames = sft.run(_inputs(base), params, "p0", out)
    events = EventAccumulator(str(next(p.parent for p in logs.rglob("events.out.tfevents.*")))).Reload()
    losses = events.Scalars("train/loss")
    logged = frames["metrics"].filter((frames["metrics"]["split"] == "train") & (frames["metrics"]["name"] == "loss"))
    assert {2, 4} <= {event.step for event in losses}
    assert [event.step for event in losses] == logged["step"].to_list()
    assert [event.value for event in losses] == pytest.approx(logged["value"].to_list(), rel=1e-5)


def test_metrics_frame_keeps_train_and_eval_figures():
    history = [{"loss": 2.0, "learning_rate": 0.1, "step": 1, "epoch": 0.5},
               {"eval_loss": 1.5, "eval_tool_call_valid": 0.25, "eval_runtime": 3.0, "step": 1},
               {"train_runtime": 9.0, "train_loss": 1.0, "step": 2}]
    frame = metrics_frame(history)
    assert sorted(zip(frame["split"], frame["name"], frame["value"], strict=True)) == [
        ("eval", "loss", 1.5), ("eval", "tool_call_valid", 0.25), ("train", "learning_rate", 0.1),
        ("train", "loss", 2.0)]


# --- bad input ---------------------------------------------------------------------------------------------------


def test_a_data_artifact_without_trajectories_is_named(base, tmp_path):
    other = FrameArtifact({"seeds": trajectories(1).select("id")}, key="seedkey",
                          manifest={"kind": "data", "outputs": {"seeds": {"columns": {"id": "String"}}}})
    with pytest.raises(StageError, match=r"artifact seeds/seedkey holds no trajectories \(its outputs: seeds\)"):
        read_trajectories({"seeds": other})
    with pytest.raises(StageError, match="hold no trajectory rows"):
        read_trajectories({"trajs": trajectory_artifact(TRAJECTORY.frame())})


def test_a_base_that_does_not_load_is_named(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(StageError, match=f"base model {broken} does not load with transformers"):
        load_base(broken)
    with pytest.raises(StageError, match="not a transformers checkpoint directory"):
        load_base(tmp_path)


def test_a_misspelt_config_field_is_named():
    with pytest.raises(StageError, match="lerning_rate"):
        sft.parse_params({"lerning_rate": 1e-3})


def test_inputs_name_one_base_and_some_data(base, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    only_model = {"base": _inputs(base)["base"]}
    with pytest.raises(StageError, match="at least one trajectory artifact"):
        sft.run(only_model, SFTParams(**FAST), "p0", out)
    with pytest.raises(StageError, match="needs a base model"):
        sft.run({"trajs": _inputs(base)["trajs"]}, SFTParams(**FAST), "p0", out)
    assert sft.with_inputs(["tiny_policy", "sft_set"]).inputs == ("sft_set", "tiny_policy")
