"""The TRL adapter: generated environment classes have the signatures and docstrings TRL reads, their golden replays
score as the runtime's, and TRL's GRPOTrainer trains a step on an exported environment task, calling the tools and
taking the rubric's reward from ``get_reward()``."""

from __future__ import annotations

import inspect
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from env_server_fixtures import env_and_task, served_pair
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils import get_json_schema

from envgen.environment import outcome_message, replay
from envgen.noise.environment import NoisyEnvironment
from inference.environments.exports import environment_rows
from inference.environments.tasks import ServedTasks, golden_actions
from inference.environments.trl import (
    environment_factories,
    environment_name,
    python_name,
    task_tools,
    tool_method,
)


def tools_of(cls: type) -> list[Any]:
    """The methods TRL offers as tools, as it finds them (public functions of the class, not reset/get_reward)."""
    instance = cls()
    return [getattr(instance, name) for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def test_each_method_renders_its_tool_schema_as_trl_reads_it() -> None:
    served = served_pair()
    for name, cls in environment_factories(served, distractors=None).items():
        task = next(t for t in served.tasks.values() if environment_name(t, task_tools(served, t, None)) == name)
        offered = {s["function"]["name"]: s["function"] for s in task_tools(served, task, None)}
        rendered = {m.__name__: get_json_schema(m)["function"] for m in tools_of(cls)}
        assert set(rendered) == set(offered)
        for tool, fn in rendered.items():
            want = offered[tool]["parameters"]
            assert set(fn["parameters"]["properties"]) == set(want["properties"])
            assert sorted(fn["parameters"].get("required", [])) == sorted(want.get("required", []))
            for param, spec in want["properties"].items():
                if "enum" in spec:  # an enum is a Literal, its values kept
                    assert set(fn["parameters"]["properties"][param]["enum"]) == set(spec["enum"])


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.one_of(st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True),
                                 st.sampled_from(["from", "class", "self", "return", "first-name"])),
    st.one_of(st.sampled_from([{"type": t} for t in ("string", "integer", "number", "boolean", "array", "object")]),
              st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=4, unique=True).map(
                  lambda values: {"type": "string", "enum": values})), max_size=5).filter(
    lambda properties: len({python_name(p) for p in properties}) == len(properties)),  # no two spelled alike
    st.data())
def test_a_generated_method_keeps_every_parameter(properties: dict[str, Any], data: st.DataObject) -> None:
    required = data.draw(st.lists(st.sampled_from(sorted(properties)), unique=True) if properties else st.just([]))
    method = tool_method({"function": {"name": "do_it", "description": "Do it.", "parameters": {
        "type": "object", "properties": properties, "required": required}}})
    schema = get_json_schema(method)["function"]["parameters"]
    assert set(schema["properties"]) == {python_name(p) for p in properties}
    assert sorted(schema.get("required", [])) == sorted(python_name(p) for p in required)
    hints = typing.get_type_hints(method)
    for original, spec in properties.items():
        name = python_name(original)
        got = schema["properties"][name]
        assert set(got.get("enum", [])) == set(spec.get("enum", []))  # an optional enum's order is transformers'
        assert (got["type"] if isinstance(got["type"], str) else got["type"][0]) == spec["type"]
        assert (type(None) in typing.get_args(hints[name])) == (original not in required)

    class Recorder:  # test double for an environment instance: records the call the method makes
        def _call(self, tool: str, arguments: dict[str, Any]) -> str:
            self.called = (tool, arguments)
            return "{}"

    recorder = Recorder()
    method(recorder, **{python_name(p): 1 for p in required})
    assert recorder.called == ("do_it", dict.fromkeys(required, 1))  # the schema's own names reach the runtime


def test_golden_replays_through_the_adapter_score_as_in_process() -> None:
    served = served_pair()
    classes = environment_factories(served)
    for task in served.tasks.values():
        environment = classes[environment_name(task, task_tools(served, task))]()
        for attempt in range(2):  # TRL reuses an instance: every reset starts a fresh database
            environment.reset(task_id=task["task_id"], prompt=[])
            for action in golden_actions(task):
                getattr(environment, action["name"])(**action["arguments"])
            assert environment.respond(outcome_message(task)) == "(the user has ended the conversation)"
            in_process = replay(NoisyEnvironment(served.environment_of(task)), task).reward
            assert environment.get_reward() == in_process == 1.0, attempt
            assert "has ended" in str(pytest.raises(RuntimeError, environment.respond, "and?").value)
    fresh = classes[environment_name(task, task_tools(served, task))]()
    fresh.reset(task_id=task["task_id"])
    assert fresh.get_reward() == 0.0  # nothing done: scored as it stands
    with pytest.raises(ValueError, match="task_id"):
        fresh.reset(prompt=[])


def memorize(model: Any, tokenizer: Any, prompt_ids: list[int], completion: str, steps: int = 200) -> None:
    """Overfit ``model`` on one completion of one prompt (loss on the completion only), so the test's policy is a
    real torch model that calls the tools: a test double for a trained policy."""
    import torch

    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + completion_ids])
    labels = ids.clone()
    labels[0, : len(prompt_ids)] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 1e-3:
            break
    model.eval()


@pytest.mark.slow
def test_grpo_trainer_trains_a_step_on_an_exported_environment_task(tmp_path: Path) -> None:
    """A real GRPOTrainer step on CPU (about 12 s: a tokenizer, a micro model memorizing the golden calls, one
    step). The dataset is the trl export of the task as ``load_dataset`` reads it; the model calls the task's
    tool and ``respond`` in one turn, and the reward comes from the rubric through ``get_reward()``."""
    import polars as pl
    import torch
    from datasets import load_dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from inference.tokenizer import train_tokenizer

    env, task = env_and_task("airline")
    served = ServedTasks.from_rows([env], [task], "fixture/airline")
    rows = environment_rows(served, "trl")
    pl.DataFrame(rows).write_parquet(tmp_path / "train.parquet")
    dataset = load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train")
    classes = environment_factories(served)
    row = dataset[0]
    calls = [*golden_actions(task), {"name": "respond", "arguments": {"message": outcome_message(task)}}]
    completion = "\n".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls) + "<|im_end|>"

    methods = tools_of(classes[row["environment"]])
    corpus = [json.dumps([get_json_schema(m) for m in methods]), *[m["content"] for m in row["prompt"]], completion]
    tokenizer = train_tokenizer(corpus * 20, vocab_size=1200)
    prompt_ids = tokenizer.apply_chat_template(row["prompt"], tools=methods, add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None))
    memorize(model, tokenizer, prompt_ids, completion)

    config = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=256, max_tool_calling_iterations=1,
                        temperature=0.1, learning_rate=1e-5, beta=0.0, loss_type="grpo", use_cpu=True, bf16=False,
                        gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no")
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                          environment_factory=classes)
    trainer.train()

    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] > 0 and logged["tools/failure_frequency"] == 0
    rewards = {k: v for k, v in logged.items() if k.startswith("rewards/") and k.endswith("/mean")}
    assert rewards == {f"rewards/{classes[row['environment']].__name__}/mean": 1.0}
    used = trainer._environment_pool[row["environment"]]
    assert any(e.info for e in used) and all(e.info["reward_components"] == {"db_state": 1.0, "required_outputs": 1.0, "policy": 1.0}
               for e in used if e.info)
