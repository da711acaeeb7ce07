"""Noise levels and the curriculum controller.

LongCat-Flash-Thinking-2601, section 3.3.3 "Curriculum-Based Noise Strategy": noise starts as mild perturbations,
and its difficulty *and* diversity grow "as the model demonstrates sufficient robustness at the current level";
robustness is "the performance gap between perfect and imperfect environments on the same task". A level is
therefore two things: which kinds of noise may be drawn (diversity) and how many are drawn per task and how hard
each is (intensity). The controller promotes the level when the robustness gap over a full window of results at
the current level is at or below a threshold.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envgen.noise.instruction import INSTRUCTION_TRANSFORMS
from envgen.noise.tools import TOOL_FAULTS

DEFAULT_MAX_LEVEL = 4


@dataclass(frozen=True)
class NoiseLevel:
    """What a task at one level may receive.

    ``instruction_kinds`` / ``tool_kinds`` are the kinds that may be drawn (diversity); ``n_instruction`` and
    ``n_tool`` how many are drawn per task and ``max_failures`` how many consecutive transient failures one call
    may see before it succeeds (intensity). Level 0 is the clean task.
    """

    level: int
    instruction_kinds: tuple[str, ...]
    tool_kinds: tuple[str, ...]
    n_instruction: int
    n_tool: int
    max_failures: int

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.instruction_kinds + self.tool_kinds


def _prefix(kinds: tuple[str, ...], level: int, max_level: int) -> tuple[str, ...]:
    return kinds[: math.ceil(len(kinds) * level / max_level)]


def _round(x: float) -> int:
    return int(x + 0.5)  # half up: Python's round() is half-to-even, which would make level 2 milder than 1


def noise_level(level: int, max_level: int = DEFAULT_MAX_LEVEL) -> NoiseLevel:
    """The level ``level`` of a curriculum with levels ``0..max_level``: diversity grows linearly to every kind
    at ``max_level``, intensity grows from one transform per family (and one failing attempt) to two
    instruction transforms, three tool faults and two consecutive failures."""
    if max_level < 1:
        raise ValueError(f"max_level must be >= 1, got {max_level}")
    if not 0 <= level <= max_level:
        raise ValueError(f"level must be in 0..{max_level}, got {level}")
    if level == 0:
        return NoiseLevel(0, (), (), 0, 0, 0)
    frac = level / max_level
    return NoiseLevel(
        level=level,
        instruction_kinds=_prefix(tuple(INSTRUCTION_TRANSFORMS), level, max_level),
        tool_kinds=_prefix(tuple(TOOL_FAULTS), level, max_level),
        n_instruction=1 + _round(frac - 0.25),
        n_tool=1 + _round(frac * 2 - 0.5),
        max_failures=1 + _round(frac),
    )


class CurriculumConfig(BaseModel):
    """The promotion rule: promote when the window at the current level is full and its gap <= ``threshold``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_level: int = Field(DEFAULT_MAX_LEVEL, description="Highest noise level L; levels are 0..L.")
    window: int = Field(64, description="Number of clean/noisy result pairs at the current level the gap is "
                                        "measured over; no promotion before the window is full.")
    threshold: float = Field(0.1, description="Promote when success(clean) - success(noisy) over the window is "
                                              "at or below this value.")
    start_level: int = Field(1, description="Level the curriculum starts at (the report starts from mild noise).")

    @field_validator("max_level")
    @classmethod
    def _max_level(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"max_level must be >= 1 (set max_level: 4 for the report's setting), got {v}")
        return v

    @field_validator("window")
    @classmethod
    def _window(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"window must be >= 1 result pair, got {v}")
        return v

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, v: float) -> float:
        if not -1.0 <= v <= 1.0:
            raise ValueError(f"threshold is a success-rate gap and must be in [-1, 1], got {v}")
        return v

    @model_validator(mode="after")
    def _start(self) -> CurriculumConfig:
        if not 0 <= self.start_level <= self.max_level:
            raise ValueError(f"start_level must be in 0..max_level={self.max_level}, got {self.start_level}")
        return self


def _unit(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} success must be in [0, 1], got {value}")
    return value


class CurriculumController:
    """Tracks the robustness gap at the current level and promotes per :class:`CurriculumConfig`.

    Feed it one pair per task twin: the success (0..1) of the policy on the clean task and on its noisy twin at
    ``level``. Results for another level than the current one (rollouts generated before a promotion arrive
    late in asynchronous RL) are counted but do not enter the window. After a promotion the window restarts, so
    every decision is made on results of the level it concerns. The state round-trips through
    :meth:`state_dict` / :meth:`load_state_dict` (JSON-safe), saved beside a training checkpoint.
    """

    def __init__(self, config: CurriculumConfig | None = None) -> None:
        self.config = config or CurriculumConfig()
        self.level = self.config.start_level
        self._window: deque[tuple[float, float]] = deque(maxlen=self.config.window)
        self.promotions: list[dict[str, Any]] = []
        self.results_seen = 0
        self.stale_results = 0

    @property
    def spec(self) -> NoiseLevel:
        return noise_level(self.level, self.config.max_level)

    @property
    def window_full(self) -> bool:
        return len(self._window) == self.config.window

    def gap(self) -> float | None:
        """success(clean) - success(noisy) over the window at the current level; None while it is empty."""
        if not self._window:
            return None
        # One division of the summed difference: the rule's boundary ("at or below") is then exact for rates
        # that are binary fractions.
        return (sum(c for c, _ in self._window) - sum(n for _, n in self._window)) / len(self._window)

    def record(self, clean: float, noisy: float, level: int | None = None) -> bool:
        """Add one clean/noisy result pair; returns True when this result promoted the level."""
        pair = (_unit("clean", clean), _unit("noisy", noisy))
        self.results_seen += 1
        if level is not None and level != self.level:
            self.stale_results += 1
            return False
        self._window.append(pair)
        gap = self.gap()
        if self.level >= self.config.max_level or not self.window_full or gap is None:
            return False
        if gap > self.config.threshold:
            return False
        self.promotions.append({"from": self.level, "to": self.level + 1, "gap": gap, "result": self.results_seen})
        self.level += 1
        self._window.clear()
        return True

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.model_dump(),
            "level": self.level,
            "window": [list(p) for p in self._window],
            "promotions": [dict(p) for p in self.promotions],
            "results_seen": self.results_seen,
            "stale_results": self.stale_results,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved state; the config travels with it so a resumed run keeps the rule it started with."""
        missing = {"config", "level", "window", "promotions", "results_seen", "stale_results"} - set(state)
        if missing:
            raise ValueError(f"curriculum state is missing keys {sorted(missing)}")
        config = CurriculumConfig.model_validate(state["config"])
        level = int(state["level"])
        if not 0 <= level <= config.max_level:
            raise ValueError(f"curriculum state level {level} is outside 0..{config.max_level}")
        window = [(_unit("clean", c), _unit("noisy", n)) for c, n in state["window"]]
        if len(window) > config.window:
            raise ValueError(f"curriculum state holds {len(window)} results, more than its window {config.window}")
        self.config = config
        self.level = level
        self._window = deque(window, maxlen=config.window)
        self.promotions = [dict(p) for p in state["promotions"]]
        self.results_seen = int(state["results_seen"])
        self.stale_results = int(state["stale_results"])

    def save(self, path: str | Path) -> None:
        """Write the state as JSON atomically (temporary sibling, then rename), so a killed save leaves the
        previous state intact."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.state_dict(), indent=2, sort_keys=True))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> CurriculumController:
        controller = cls()
        try:
            controller.load_state_dict(json.loads(Path(path).read_text()))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a curriculum state (invalid JSON at line {exc.lineno})") from None
        return controller
