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
from typing import Any

import polars as pl

from data_contracts.schemas import SFT_REJECTED, TRAJECTORY
from data_contracts.stage import Artifact, StageError

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


def check_template(tokenizer: Any, where: str) -> None:
    """The chat template must mark assistant tokens: without ``{% generation %}`` there is no assistant mask (TRL
    would silently swap in a template of its own)."""
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    if not template:
        raise StageError(f"{where}: the tokenizer has no chat template")
    if not GENERATION_MARKER.search(template):
        raise StageError(f"{where}: the chat template has no {{% generation %}} markers, so assistant tokens cannot "
                         "be masked; wrap each assistant turn and its end-of-turn token in "
                         "{% generation %}...{% endgeneration %}")


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
    """A stable split by lineage: a trajectory and its augmentations (same ``parent_id`` root) are held out together,
    whatever else the data holds."""
    group = row.get("parent_id") or row["id"]
    digest = hashlib.blake2b(f"{seed}/{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < eval_fraction
