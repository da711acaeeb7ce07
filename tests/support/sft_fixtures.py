"""Shared fixtures of the SFT tests: short tool-calling trajectories (a lookup, then a booking; some with a failed,
masked attempt first), a tokenizer trained on them and a micro Qwen2 model, so a training step takes milliseconds."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import polars as pl

from data_contracts.stage import FrameArtifact, Params, stage
from envgen.records import TRAJECTORY

TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"item_id": {"type": "string"}, "seats": {"type": "integer"},
                                         "cabin": {"enum": ["economy", "business"]}},
        "required": ["item_id", "seats"]}}},
]


def _call(i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def conversation(rng: random.Random, failed_first: bool) -> tuple[list[dict[str, Any]], list[bool]]:
    """Messages and train flags: a failed booking (when asked) is an assistant turn with train false."""
    code, item, seats = f"X{rng.randint(10, 99)}", f"IT{rng.randint(100, 999)}", rng.randint(1, 4)
    messages = [{"role": "system", "content": "You book seats with the tools."},
                {"role": "user", "content": f"Book {seats} seats on {code}."},
                _call(0, "lookup", {"query": code}),
                {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"item_id": item})}]
    flags = [False, False, True, False]
    if failed_first:
        messages += [_call(1, "book", {"item_id": code, "seats": seats}),
                     {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"error": "unknown item"})}]
        flags += [False, False]
    messages += [_call(2, "book", {"item_id": item, "seats": seats}),
                 {"role": "tool", "tool_call_id": "call_2", "content": json.dumps({"ok": True})},
                 {"role": "assistant", "content": f"Booked {seats} seats on {item}."}]
    flags += [True, False, True]
    return messages, flags


def trajectory_row(i: int, messages: list[dict[str, Any]], flags: list[bool], **extra: Any) -> dict[str, Any]:
    return {"id": f"t{i:04d}", "source": "test", "env_id": None, "task_id": None, "seed_id": None, "domain": "test",
            "messages": json.dumps(messages), "tools": json.dumps(TOOLS), "train": flags, "verified": True,
            "verifier": "schema", "parent_id": None, "transform": None, "transform_settings": None, "tokens": 0,
            "verify_input": None, "env_db": None, **extra}


def trajectories(n: int, seed: int = 0) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        messages, flags = conversation(rng, failed_first=i % 3 == 0)
        rows.append(trajectory_row(i, messages, flags))
    return TRAJECTORY.frame(rows)


def trajectory_artifact(frame: pl.DataFrame, key: str = "trajkey", output: str = "trajectories") -> FrameArtifact:
    """An in-memory trajectory artifact, with the manifest a published one has (kind, output columns)."""
    columns = {name: str(dtype) for name, dtype in frame.schema.items()}
    return FrameArtifact({output: frame}, key=key,
                         manifest={"kind": "data", "outputs": {output: {"columns": columns, "rows": frame.height}}})


def corpus() -> list[str]:
    texts = []
    for i, row in enumerate(trajectories(40, seed=99).iter_rows(named=True)):
        texts += [row["messages"], row["tools"], f"call {i}"]
    return texts * 3


def micro_base(directory: Path, vocab_size: int = 400, seed: int = 0) -> Path:
    """A tokenizer trained on these conversations and a two-layer Qwen2 of hidden size 32, saved together."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from inference.tokenizer import save, train_tokenizer

    tokenizer = train_tokenizer(corpus(), vocab_size=vocab_size)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
                                               bos_token_id=None)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory))
    save(tokenizer, directory)
    return directory


class NoParams(Params):
    pass


@stage(name="test_double_trajectories", version="1", params=NoParams,
       outputs={"trajectories": TRAJECTORY.contract(min_rows=1)})
def double_trajectories(inputs, params: NoParams, partition: str) -> dict[str, pl.DataFrame]:
    """Test double: ten short tool-calling conversations, as a published trajectory artifact."""
    return {"trajectories": trajectories(10)}


# The tiny profile's sft section, shortened for the micro model: every other field is the profile's.
MICRO_SFT = {"max_steps": 6, "save_steps": 3, "max_length": 1024, "learning_rate": 1e-2, "eval_tool_calls": 2}


def training_root(directory: Path) -> tuple[Path, str, Path]:
    """A data root under ``directory`` holding a published trajectory artifact (its key), and a micro base model."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import execute_stage

    data = directory / "data"
    key = execute_stage(open_store(data), Catalog(data), double_trajectories, {}, {}, "p0").key
    return data, key, micro_base(directory / "base")


def write_gguf(checkpoint: Path, out: Path) -> Path:
    """``checkpoint`` (a Qwen2 model and gymforge's byte-level BPE) written as an unquantized GGUF file, as llama.cpp
    converts one: architecture metadata, the tokenizer as a gpt2-style token list with merges, the chat
    template, tensors under GGUF names."""
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(checkpoint))
    template = AutoTokenizer.from_pretrained(str(checkpoint)).chat_template
    config = model.config
    spec = json.loads((checkpoint / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    by_id = {i: t for t, i in {**spec["model"]["vocab"], **added}.items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    writer = gguf.GGUFWriter(str(out), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float((config.rope_parameters or {}).get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_pad_token_id(config.pad_token_id)
    writer.add_chat_template(template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        base, _, suffix = name.rpartition(".")
        if (mapped := names.get_name(base)) is not None:  # lm_head: tied to the embeddings, not stored
            writer.add_tensor(f"{mapped}.{suffix}", tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
