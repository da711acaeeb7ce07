"""The noise record stored in a noisy task's ``noise`` column.

Every transform says what it changed and how an agent recovers it; tool faults carry their schedule (which tool,
which arguments, how many failing attempts), so the verifier and the tool wrapper read the same record. Injected
noise is part of the task (DESIGN.md section 7): the verifier knows it and never scores it as infrastructure.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data_contracts.content import canonical_json

Family = Literal["instruction", "tool"]

DECLARED: dict[Family, dict[str, Any]] = {"instruction": {}, "tool": {}}
"""Every kind of noise by family, in curriculum order (mildest first), each declared once beside its code: the
instruction transforms in ``instruction.py``, the tool faults in ``tools.py`` (the package imports both, so every
kind is known before a record is read)."""


def declare(family: Family, kind: str, declared: Any) -> None:
    """Declare a kind of noise of ``family``; a kind declared twice is an error, not a silent overwrite."""
    if kind in DECLARED[family]:
        raise ValueError(f"{family} noise kind {kind!r} is declared twice")
    DECLARED[family][kind] = declared

Recovery = Literal[
    "none",  # nothing to recover: the information is intact, only its surface changed
    "map_synonym",  # map a synonym back to the canonical term (tool enums, the shared lexicon)
    "ask_user",  # ask the user: the detail is kept in the user profile
    "look_up",  # call a tool: the detail is in an earlier tool output
    "retry",  # call again with the same arguments
    "follow_continuation",  # call again with the continuation token until none is returned
    "requery",  # call again: the repeated response is complete
    "resolve_alias",  # read the renamed field under its canonical name
    "normalize_format",  # parse the value back to its canonical format
]


class Transform(BaseModel):
    """One applied transform of a task (instruction) or of its tool responses (tool)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: Family = Field(description="instruction: the task text or profile changed; tool: tool responses change.")
    kind: str = Field(description="The transform: a kind declared for its family (DECLARED).")
    changed: dict[str, Any] = Field(description="What changed: before/after text, field, tool, format, page size.")
    recovery: Recovery = Field(description="The action that recovers the original information.")
    hint: str = Field(description="How an agent recovers it, in one sentence.")
    tool: str | None = Field(None, description="Tool faults: the tool whose responses change.")
    arguments: dict[str, Any] | None = Field(
        None, description="Tool faults: the call's arguments it applies to (None: every call of the tool)."
    )
    bites: bool = Field(
        True, description="Whether the change is meant to hide information a literal-minded agent needs "
                          "(paraphrase and latency are not); whether it does is measured by the naive reference agent."
    )

    def model_post_init(self, _: Any) -> None:
        allowed = DECLARED[self.family]
        if self.kind not in allowed:
            raise ValueError(f"{self.family} transform kind {self.kind!r} is not one of {list(allowed)}")
        if (self.family == "tool") != (self.tool is not None):
            raise ValueError(f"{self.kind}: a tool transform names its tool and an instruction transform does not")

    def matches(self, tool: str, arguments: dict[str, Any]) -> bool:
        return self.tool == tool and (self.arguments is None or canonical_json(self.arguments) == canonical_json(arguments))


class Skipped(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    reason: str


class NoiseRecord(BaseModel):
    """The ``noise`` column of a task: level and seed, the clean twin, every transform applied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: int = Field(description="Curriculum level the task was drawn at (0 = clean).")
    seed: int = Field(description="The per-task seed every choice of the transforms came from.")
    clean_task_id: str = Field(description="task_id of the clean task this one is the noisy twin of.")
    transforms: tuple[Transform, ...] = Field((), description="Applied transforms, instruction first.")
    skipped: tuple[Skipped, ...] = Field((), description="Kinds drawn but not applicable to this task, and why.")

    @property
    def tool_faults(self) -> tuple[Transform, ...]:
        return tuple(t for t in self.transforms if t.family == "tool")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(t.kind for t in self.transforms)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | None) -> NoiseRecord | None:
        """The record of a task's ``noise`` column; None for a clean task (empty, null or level 0 with nothing)."""
        if not text:
            return None
        data = json.loads(text)
        clean = not data or (not data.get("level") and not data.get("transforms"))  # taskgen's clean tasks
        return None if clean else cls.model_validate(data)
