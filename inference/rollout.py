"""Rollouts: what a policy's sampled episode leaves behind for training and analysis (the ``rollout`` record,
declared here).

Rollouts are stored as tokens, not re-rendered text (DESIGN.md section 5): each engine call is a ``Turn`` holding
the exact prompt ids the engine saw, the sampled output ids, their behaviour log-probabilities and the policy version.
A ``Segment`` is one continuous context; when context management summarizes or resets, a new segment starts under
the same rollout id and group id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import polars as pl

from data_contracts.schemas import JSON, Record, between, cols, in_set
from data_contracts.stage import Check
from inference.engine import Completion, Message

TurnKind = Literal["agent", "summary"]
SegmentStart = Literal["initial", "summary", "reset"]
FailureLabel = Literal["agent", "user", "tool"]
StopReason = Literal["done", "max_turns", "length", "context_overflow"]
"""Why a rollout ended: the environment said done (or the single turn finished), the turn budget ran out, the single
turn hit its token budget, or the next prompt would not fit the engine's context window."""

ROLLOUT = Record("rollout", "A policy's rollout, stored as tokens (DESIGN.md section 5).", cols(
    id=(pl.String, "<item>#<sample>"),
    group_id=(pl.String, "the item: samples of one group share it"),
    source=(pl.String, "the stage or run that sampled it"),
    item_id=(pl.String, "the prompt or task id"),
    env_id=(pl.String, "the environment, for tool tasks"),
    task_id=(pl.String, "the task, for tool tasks"),
    sample_index=(pl.Int64, "index within the group"),
    messages=(JSON, "the conversation in OpenAI format, tool calls and results included"),
    segments=(JSON, "per context segment: turns of prompt ids, output ids, logprobs, policy version, loss mask"),
    n_segments=(pl.Int64, "segments (context management starts a new one on summary or reset)"),
    n_turns=(pl.Int64, "agent turns"),
    n_output_tokens=(pl.Int64, "sampled tokens"),
    min_policy_version=(pl.Int64, "oldest policy version among the tokens"),
    max_policy_version=(pl.Int64, "newest policy version among the tokens"),
    reward=(pl.Float64, "the product of reward_components"),
    reward_components=(JSON, "named reward components"),
    verified=(pl.Boolean, "reward 1"),
    failure=(pl.String, "agent | user | tool; null when verified"),
    stop_reason=(pl.String, "done | max_turns | length | context_overflow"),
), key=("id",), required=("segments",), json={"messages": "list", "segments": "list", "reward_components": "object"})


@dataclass
class Turn:
    """One engine call: ``loss_mask[i]`` says whether ``output_ids[i]`` is trained on."""

    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    policy_version: int
    loss_mask: list[int]
    finish_reason: str
    kind: TurnKind = "agent"

    @classmethod
    def from_completion(cls, completion: Completion, kind: TurnKind = "agent", trained: bool = True) -> Turn:
        return cls(
            prompt_ids=list(completion.prompt_token_ids),
            output_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs),
            policy_version=completion.policy_version,
            loss_mask=[int(trained)] * len(completion.token_ids),
            finish_reason=completion.finish_reason,
            kind=kind,
        )


@dataclass
class Segment:
    """One continuous context window of a rollout; ``start`` says why it began."""

    start: SegmentStart = "initial"
    turns: list[Turn] = field(default_factory=list)

    def n_tokens(self) -> int:
        """Tokens in this context so far: the last prompt plus its output."""
        if not self.turns:
            return 0
        last = self.turns[-1]
        return len(last.prompt_ids) + len(last.output_ids)

    def n_agent_turns(self) -> int:
        return sum(turn.kind == "agent" for turn in self.turns)


@dataclass
class Rollout:
    """A finished (or cut-off) rollout; ``to_row`` gives one row of the ``rollout`` frame."""

    id: str
    group_id: str
    source: str
    item_id: str
    messages: list[Message]
    segments: list[Segment]
    reward: float
    reward_components: dict[str, float]
    verified: bool
    failure: FailureLabel | None = None
    env_id: str | None = None
    task_id: str | None = None
    sample_index: int = 0
    stop_reason: StopReason = "done"

    def turns(self) -> list[Turn]:
        return [turn for segment in self.segments for turn in segment.turns]

    def to_row(self) -> dict[str, Any]:
        turns = self.turns()
        versions = [turn.policy_version for turn in turns]
        return {
            "id": self.id,
            "group_id": self.group_id,
            "source": self.source,
            "item_id": self.item_id,
            "env_id": self.env_id,
            "task_id": self.task_id,
            "sample_index": self.sample_index,
            "messages": json.dumps(self.messages, ensure_ascii=False),
            "segments": json.dumps([asdict(segment) for segment in self.segments]),
            "n_segments": len(self.segments),
            "n_turns": sum(segment.n_agent_turns() for segment in self.segments),
            "n_output_tokens": sum(len(turn.output_ids) for turn in turns),
            "min_policy_version": min(versions, default=0),
            "max_policy_version": max(versions, default=0),
            "reward": float(self.reward),
            "reward_components": json.dumps(self.reward_components, sort_keys=True),
            "verified": self.verified,
            "failure": self.failure,
            "stop_reason": self.stop_reason,
        }


def rollouts_frame(rollouts: Sequence[Rollout]) -> pl.DataFrame:
    return ROLLOUT.frame([t.to_row() for t in rollouts])


def segments_from_json(text: str) -> list[Segment]:
    """Inverse of the ``segments`` column."""
    return [
        Segment(start=raw["start"], turns=[Turn(**turn) for turn in raw["turns"]]) for raw in json.loads(text)
    ]


def _misaligned_turns(frame: pl.DataFrame) -> list[bool]:
    """A row fails when any turn's output ids, log-probabilities and loss mask differ in length."""
    failing = []
    for text in frame["segments"]:
        turns = [turn for segment in segments_from_json(text) for turn in segment.turns]
        failing.append(
            any(not (len(t.output_ids) == len(t.logprobs) == len(t.loss_mask)) or not t.prompt_ids for t in turns)
        )
    return failing


ROLLOUT_CONTRACT = ROLLOUT.contract(
    expectations=(between("n_segments", min_value=1), in_set("failure", get_args(FailureLabel)),
                  in_set("stop_reason", get_args(StopReason))),
    checks=(
        Check(
            "turn_tokens_aligned",
            _misaligned_turns,
            description="every turn has prompt ids, and as many logprobs and loss-mask entries as output ids",
        ),
    ),
)
