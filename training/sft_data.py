"""Trajectories into SFT examples: token ids and a loss mask that honours both the chat template's generation markers
and the per-message ``train`` flags of the ``trajectory`` record.

TRL's ``assistant_only_loss`` masks every token outside the template's ``{% generation %}`` spans, but it cannot see
that one assistant turn of a trajectory is a failed call to be masked (LongCat-Flash-Thinking-2601, "Cold-Start
Policy Initialization": turn-level loss masking). So the examples are tokenized here, exactly as TRL does
(``apply_chat_template(..., tools=..., return_assistant_tokens_mask=True)``), and each generation span, one per
assistant message in order, is kept only when that message's flag is true. TRL then folds ``assistant_masks`` into
``labels`` (-100 elsewhere).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_contracts.stage import Artifact, StageError
from envgen.records import TRAJECTORY
from inference.tokenizer import CHAT_TEMPLATE, IM_END, IM_START, PAD_TOKEN, RESPONSE_TEMPLATE
from training.records import SFT_REJECTED

GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")  # TRL's has_generation_markers


def trajectory_outputs(artifact: Artifact) -> list[str]:
    """The outputs of an artifact that hold ``trajectory`` records (matched by their columns)."""
    wanted = set(TRAJECTORY.schema)
    return sorted(name for name, out in artifact.manifest.get("outputs", {}).items()
                  if set(out.get("columns", {})) == wanted)


def read_trajectories(artifacts: Mapping[str, Artifact]) -> pl.DataFrame:
    """Every trajectory of the data artifacts (stage name -> artifact), sorted by id; a StageError names an artifact
    without a trajectory output, and says so when there is no trajectory at all."""
    frames = []
    for stage, artifact in sorted(artifacts.items()):
        names = trajectory_outputs(artifact)
        if not names:
            outputs = ", ".join(sorted(artifact.manifest.get("outputs", {}))) or "none"
            raise StageError(f"artifact {stage}/{artifact.key} holds no trajectories (its outputs: {outputs}); "
                             "train on a trajectory artifact such as sft_set or small_envs")
        frames += [artifact.read(name) for name in names]
    frame = pl.concat(frames, how="vertical") if frames else TRAJECTORY.frame()
    if frame.is_empty():
        raise StageError(f"the data artifacts {', '.join(f'{s}/{a.key}' for s, a in sorted(artifacts.items()))} "
                         "hold no trajectory rows to train on")
    return frame.sort("id")


KEEP, GYMFORGE, AUTO = "keep", "gymforge", "auto"


@dataclass(frozen=True)
class TemplateChoice:
    """The chat template a run trains with: ``source`` is ``model`` (the base's own), ``trl`` (TRL's training
    variant of the base's template), ``gymforge`` (inference/tokenizer.py's) or ``file:PATH``; ``reason`` says why."""

    source: str
    template: str | None  # None: the base's own, untouched
    reason: str

    def card(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


def own_template(tokenizer: Any) -> str | None:
    template = tokenizer.chat_template
    return template.get("default") if isinstance(template, dict) else template


def choose_template(tokenizer: Any, setting: str, where: str) -> TemplateChoice:
    """The template ``setting`` (``auto``, ``keep``, ``gymforge`` or a path to a Jinja file) picks for a base.

    Training needs ``{% generation %}`` markers around assistant turns (the loss mask; TRL would silently use a
    template of its own without them), which stock templates lack. ``auto`` keeps a template that has them, else
    takes TRL's training variant of the same template when TRL ships one (the model keeps its own format), else
    gymforge's ChatML template with tool calls; ``keep`` refuses a template without them."""
    own = own_template(tokenizer)
    if setting in (AUTO, KEEP) and own and GENERATION_MARKER.search(own):
        return TemplateChoice("model", None, "its chat template marks assistant turns with {% generation %}")
    missing = ("has no chat template" if not own else
               "has a chat template without {% generation %} markers, so assistant turns cannot be masked")
    if setting == KEEP:
        raise StageError(f"{where} {missing}; --chat-template auto or gymforge trains with gymforge's template, "
                         "or give a template file with the markers (--chat-template PATH)")
    if setting == AUTO:
        trl_variant = _trl_training_template(tokenizer) if own else None
        if trl_variant is not None:
            return TemplateChoice("trl", trl_variant, f"the base {missing}: TRL's training variant of it is used")
        return TemplateChoice(GYMFORGE, CHAT_TEMPLATE, f"the base {missing}: gymforge's ChatML template with tool "
                                                       "calls is used")
    if setting == GYMFORGE:
        return TemplateChoice(GYMFORGE, CHAT_TEMPLATE, "asked for (--chat-template gymforge)")
    path = Path(setting).expanduser()
    if not path.is_file():
        raise StageError(f"--chat-template {setting}: no such file; use auto, keep, gymforge or a Jinja file")
    text = path.read_text(encoding="utf-8")
    if not GENERATION_MARKER.search(text):
        raise StageError(f"--chat-template {path}: the template has no {{% generation %}} markers; wrap each "
                         "assistant turn and its end-of-turn token in {% generation %}...{% endgeneration %}")
    return TemplateChoice(f"file:{path.resolve()}", text, "asked for (--chat-template PATH)")


def _trl_training_template(tokenizer: Any) -> str | None:
    from trl.chat_template_utils import get_training_chat_template

    try:
        return get_training_chat_template(tokenizer)
    except ValueError:  # TRL ships no training variant of this template
        return None


def apply_template(model: Any, tokenizer: Any, choice: TemplateChoice) -> None:
    """Give the tokenizer the chosen template; gymforge's needs its ChatML tokens, so a base without them gets them
    added (the embeddings grow by as many rows) and ``<|im_end|>`` as its end-of-turn (eos) token. Tool tags a base's
    vocabulary lacks are spelt in its own pieces: a new row starts untrained, and a pretrained model never learnt to
    write one (SmolLM2-135M: no call in 80 SFT steps with new rows, bench/RESULTS.md)."""
    if choice.template is None:
        return
    tokenizer.chat_template = choice.template
    if choice.source != GYMFORGE:
        return
    tokenizer.response_template = RESPONSE_TEMPLATE
    from tokenizers import AddedToken

    vocab = tokenizer.get_vocab()
    wanted = [IM_START, IM_END, *([PAD_TOKEN] if tokenizer.pad_token is None else [])]
    new = [AddedToken(t, special=True, normalized=False) for t in wanted if t not in vocab]
    if new:
        tokenizer.add_tokens(new)
        model.resize_token_embeddings(len(tokenizer))
    tokenizer.eos_token = IM_END
    if tokenizer.pad_token is None:
        tokenizer.pad_token = PAD_TOKEN
    for config in (model.config, model.generation_config):
        config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id


@dataclass(frozen=True)
class Example:
    id: str
    input_ids: list[int]
    assistant_masks: list[int]

    @property
    def trained_tokens(self) -> int:
        return sum(self.assistant_masks)

    def row(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """A row of TRL's dataset: tokenized (TRL then skips its own tokenization) with the conversation's roles and
        texts, which TRL reads only to see that the data is conversational (``assistant_only_loss`` requires it)."""
        return {"input_ids": self.input_ids, "assistant_masks": self.assistant_masks,
                "messages": [{"role": m["role"], "content": str(m.get("content") or "")} for m in messages]}


def _spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def encode(row: Mapping[str, Any], tokenizer: Any) -> Example:
    """Token ids and the loss mask of one trajectory row: a generation span per assistant message, kept where the
    message's ``train`` flag is true."""
    messages = json.loads(row["messages"]) if isinstance(row["messages"], str) else list(row["messages"])
    tools = json.loads(row["tools"]) if isinstance(row["tools"], str) else list(row["tools"] or [])
    flags = list(row["train"])
    if len(flags) != len(messages):
        raise ValueError(f"trajectory {row['id']}: {len(flags)} train flags for {len(messages)} messages")
    encoded = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
    ids, mask = list(encoded["input_ids"]), list(encoded["assistant_masks"])
    spans = _spans(mask)
    assistant = [flag for message, flag in zip(messages, flags, strict=True) if message["role"] == "assistant"]
    if len(spans) != len(assistant):
        raise ValueError(f"trajectory {row['id']}: the chat template marks {len(spans)} assistant spans for "
                         f"{len(assistant)} assistant messages")
    kept = [0] * len(ids)
    for (start, end), trained in zip(spans, assistant, strict=True):
        if trained:
            kept[start:end] = [1] * (end - start)
    return Example(str(row["id"]), ids, kept)


def build_examples(frame: pl.DataFrame, tokenizer: Any, max_length: int) -> tuple[list[tuple[Example, dict]], pl.DataFrame]:
    """``([(example, row)], rejected)``: unverified trajectories, ones longer than ``max_length`` (cutting a tool
    trajectory would teach a conversation that never ends) and ones with no trained token are set aside with their
    reason."""
    kept, rejected = [], []
    for row in frame.iter_rows(named=True):
        if not row["verified"]:
            rejected.append({"id": row["id"], "source": row["source"], "tokens": row.get("tokens"),
                             "reason": "not_verified"})
            continue
        example = encode(row, tokenizer)
        reason = ("too_long" if len(example.input_ids) > max_length
                  else "no_trained_turn" if not example.trained_tokens else None)
        if reason is not None:
            rejected.append({"id": row["id"], "source": row["source"], "tokens": len(example.input_ids),
                             "reason": reason})
            continue
        kept.append((example, row))
    return kept, SFT_REJECTED.frame(rejected)


def in_eval_split(row: Mapping[str, Any], eval_fraction: float, seed: int) -> bool:
    """A stable split by lineage: the trajectories of one task (its variants and their augmentations share the
    ``task_id``), else a trajectory and its augmentations (same ``parent_id`` root), are held out together, whatever
    else the data holds; so the held-out turns are of tasks never trained on."""
    group = row.get("task_id") or row.get("parent_id") or row["id"]
    digest = hashlib.blake2b(f"{seed}/{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < eval_fraction
