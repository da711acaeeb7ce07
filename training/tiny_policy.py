"""Stage `tiny_policy`: the embedded reference policy, trained briefly on the project's own QA seeds.

No model hub is reachable, so the difficulty filter's reference engine is made here: the tiny Qwen2 model of
``training/tiny_model.py`` trained with a plain torch AdamW loop on QA prompts (the question and its documents, the
same prompt the filter sends) with the boxed answer as the assistant turn, loss on assistant tokens only. A few
hundred steps teach the answer format and part of the answers, so the filter sees a policy that sometimes
succeeds — LoongRL's filter needs exactly that spread (pass counts strictly between 0 and k).

The artifact is a model artifact (inference/checkpoint.py): the checkpoint directory, with the loss curve and a
summary (steps, final loss, parameters) as Parquet outputs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import polars as pl
from pydantic import Field, model_validator

from data_contracts.stage import Artifact, Params, rng_for, stage
from inference.checkpoint import MODEL_DIRECTORY, read_card, save_model
from inference.cpu import tune_allocator
from inference.plotting import save_figure
from training.records import LOSS_CURVE, TRAINING_SUMMARY

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

STAGE = "tiny_policy"


class TinyPolicyParams(Params):
    size: Literal["tiny", "small"] = Field("tiny", description="model size of training/tiny_model.py")
    steps: int = Field(300, ge=0, description="optimizer steps")
    batch_size: int = Field(16, gt=0, description="examples per step")
    learning_rate: float = Field(3e-3, gt=0, description="peak AdamW learning rate (linear warmup, cosine decay)")
    warmup_steps: int = Field(20, ge=0, description="linear warmup steps")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_seeds: int | None = Field(None, gt=0, description="train on at most this many seeds (None = all)")
    max_prompt_tokens: int = Field(
        512, gt=0, description="prompt budget, as in qa_filtered (keep both equal so the filter sees the prompts "
        "the policy was trained on)",
    )
    log_every: int = Field(10, gt=0, description="loss-curve resolution in steps")
    seed: int = Field(0, description="initialisation and data order")

    @model_validator(mode="after")
    def _warmup(self) -> TinyPolicyParams:
        if self.steps and self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be below steps={self.steps}")
        return self


def training_examples(seeds: pl.DataFrame, tokenizer: PreTrainedTokenizerBase,
                      max_prompt_tokens: int) -> list[tuple[list[int], list[int]]]:
    """``(input_ids, labels)`` per seed: the filter's QA prompt and ``\\boxed{answer}``, labels -100 outside the
    assistant turn (the chat template's generation markers give the mask)."""
    from inference.agent import qa_prompt_items

    examples = []
    for item in qa_prompt_items(seeds, max_prompt_tokens):
        messages = [*item.messages, {"role": "assistant", "content": f"\\boxed{{{item.columns['answer']}}}"}]
        encoded = tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids = list(encoded["input_ids"])
        labels = [t if m else -100 for t, m in zip(ids, encoded["assistant_masks"], strict=True)]
        if not any(m for m in encoded["assistant_masks"]):
            raise ValueError("the chat template marks no assistant tokens: it needs {% generation %} markers")
        examples.append((ids, labels))
    return examples


def train(model: Any, examples: list[tuple[list[int], list[int]]], params: TinyPolicyParams, pad_id: int,
          partition: str) -> list[float]:
    """The optimizer loop; returns the loss of every step. Batches are drawn per epoch in a seeded order."""
    import torch
    from rich.progress import Progress
    from transformers import get_cosine_schedule_with_warmup

    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate, betas=(0.9, 0.95),
                                  weight_decay=params.weight_decay)
    schedule = get_cosine_schedule_with_warmup(optimizer, params.warmup_steps, max(params.steps, 1))
    order: list[int] = []
    epoch = 0
    losses = []
    model.train()
    with Progress(transient=True, disable=not os.isatty(2)) as progress:
        task = progress.add_task("tiny_policy", total=params.steps)
        for _ in range(params.steps):
            batch = []
            while len(batch) < params.batch_size:
                if not order:
                    order = list(range(len(examples)))
                    rng_for(params.seed, STAGE, partition, epoch).shuffle(order)
                    epoch += 1
                batch.append(examples[order.pop()])
            input_ids, labels, attention = _pad(batch, pad_id)
            loss = label_loss(model, input_ids, attention, labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            progress.advance(task)
    model.eval()
    return losses


def label_loss(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               labels: torch.Tensor) -> torch.Tensor:
    """``model(..., labels=labels).loss`` (mean next-token cross-entropy over the labelled positions) with the output
    head applied at those positions only: the answer is a few tokens of a 128-512 token prompt, and the
    full-vocabulary logits of every position were most of a step's memory (16 x 512 x 8192 floats, and as much
    again for their gradient)."""
    import torch.nn.functional as F

    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    targets = labels[:, 1:]
    labelled = targets != -100
    logits = model.get_output_embeddings()(hidden[:, :-1][labelled])
    return F.cross_entropy(logits.float(), targets[labelled])


def _pad(batch: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (x, y) in enumerate(batch):
        ids[row, : len(x)] = torch.tensor(x)
        labels[row, : len(y)] = torch.tensor(y)
        attention[row, : len(x)] = 1
    return ids, labels, attention


def loss_curve(losses: list[float], every: int) -> list[dict[str, float]]:
    """Mean loss per window of ``every`` steps, keyed by the window's last step."""
    return [
        {"step": min(start + every, len(losses)), "loss": round(sum(w) / len(w), 6)}
        for start in range(0, len(losses), every)
        if (w := losses[start:start + every])
    ]


def loss_curve_figure(artifact: Artifact, path: Path) -> None:
    """The figure of a tiny_policy artifact: its training loss curve."""
    curve = artifact.read("loss_curve")
    with save_figure(path, figsize=(5, 3)) as (_, ax):
        ax.plot(curve["step"].to_list(), curve["loss"].to_list(), color="#4477aa")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (assistant tokens)")
        ax.set_title(STAGE)


# 3: a model artifact (a transformers directory), no weights inside Parquet
# 4: the tokenizer carries the response template TRL's GRPOTrainer parses tool calls with
@stage(name=STAGE, version="4", inputs=("tokenizer", "qa_seeds"), params=TinyPolicyParams, kind="model",
       directory=MODEL_DIRECTORY, figure=loss_curve_figure,
       outputs={"loss_curve": LOSS_CURVE.contract(), "summary": TRAINING_SUMMARY.contract(min_rows=1)})
def tiny_policy(inputs: Mapping[str, Artifact], params: TinyPolicyParams, partition: str,
                out_dir: Path) -> dict[str, pl.DataFrame]:
    """Initialise the tiny model and train it briefly on the QA seeds (boxed answers, assistant-only loss)."""
    tune_allocator()  # before torch allocates: the steps' large tensors stay mapped (inference/cpu.py)
    import torch

    from inference.tokenizer import tokenizer_from_row
    from training.tiny_model import build_model

    tokenizer = tokenizer_from_row(inputs["tokenizer"].read("tokenizer").row(0, named=True))
    seeds = inputs["qa_seeds"].read("seeds").sort("id")
    if params.max_seeds is not None:
        seeds = seeds.head(params.max_seeds)
    if seeds.is_empty():
        raise ValueError("tiny_policy: the qa_seeds artifact has no seeds to train on")
    examples = training_examples(seeds, tokenizer, params.max_prompt_tokens)
    model = build_model(params.size, tokenizer, params.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed)
        losses = train(model, examples, params, tokenizer.pad_token_id, partition)
    summary = {"base": params.size, "steps": params.steps, "examples": len(examples),
               "final_loss": losses[-1] if losses else float("nan")}
    save_model(model, tokenizer, out_dir, {**summary, "method": STAGE})
    card = read_card(out_dir)
    return {"loss_curve": LOSS_CURVE.frame(loss_curve(losses, params.log_every)),
            "summary": TRAINING_SUMMARY.frame([{**summary, "parameters": card["parameters"], "dtype": card["dtype"]}])}
