"""Running a harness role: an agent over any Engine and the local search environment, with its own context.

Each role call is an episode of the project's agent loop (``inference.agent.run_episodes``: lock-step batches,
malformed tool calls answered with errors, context management, the turn budget) in a :class:`RoleEnvironment`:
the role's system prompt and inputs, the search environment's tools (search, open, read) for the roles that
search, the task's excluded documents hidden from them. The episode ends when the role replies without a tool
call; that reply is its output. An engine failure (a timeout, a dropped connection) is retried ``retries`` times,
then the call is marked failed with the error; other calls of the same batch are kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field

from data_contracts.stage import Params
from envgen.environment import EpisodeScore, Observation, ToolEnvironment
from envgen.tools import ToolResult
from inference.agent import AgentConfig, Episode, SamplingConfig, run_episodes
from inference.engine import Engine
from tasks.research.harness.prompts import ROLES
from tasks.research.search import TOOL_SCHEMAS, SearchEnvironment, SearchIndex

Status = Literal["complete", "failed"]


def default_agent() -> AgentConfig:
    return AgentConfig(max_turns=8, sampling=SamplingConfig(temperature=0.7, max_tokens=4096))


class RoleConfig(Params):
    agent: AgentConfig = Field(default_factory=default_agent,
                               description="sampling, turn budget, context management and seed of every role call")
    retries: int = Field(1, ge=0, le=5, description="re-runs of a role call after an engine failure")


@dataclass(frozen=True)
class RoleCall:
    """One call of a role: its id in the run (``plan/writer/1``, ``research/S1.2``), its inputs, and the calls
    whose outputs those inputs were made from (the parallel branches' dependencies)."""

    call_id: str
    role: str
    user: str
    branch: str | None = None
    depends_on: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()


@dataclass
class RoleResult:
    call_id: str
    role: str
    branch: str | None
    depends_on: tuple[str, ...]
    messages: list[dict[str, Any]]
    output: str | None
    status: Status
    error: str | None = None
    attempts: int = 1
    tool_calls: int = 0
    search_hits: int = 0
    """Documents the role's searches returned in all (zero: it found nothing)."""
    stop_reason: str = "done"
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoleResult:
        return cls(**{**data, "depends_on": tuple(data.get("depends_on") or ())})


class RoleEnvironment(ToolEnvironment):
    """A role's episode: its prompt and inputs, and the search tools when the role searches; its first message
    without tool calls is the role's output and ends the episode."""

    max_steps = 1 << 30  # the agent loop's turn budget bounds a role

    def __init__(self, index: SearchIndex, call: RoleCall) -> None:
        self.call = call
        self.role = ROLES[call.role]
        self.search = SearchEnvironment(index)
        # Only the search environment's tools are used, never its answer reward: the role's output is the answer.
        self.search.reset({"task_id": call.call_id, "question": call.user, "answer": "",
                           "excluded_doc_ids": list(call.excluded)})
        self.schemas = list(TOOL_SCHEMAS) if self.role.tools else []
        self.tool_log: list[dict[str, Any]] = []
        self.output: str | None = None
        self.messages: list[dict[str, Any]] = []

    def reset(self, task: Any = None) -> Observation:
        first = [{"role": "system", "content": self.role.system}, {"role": "user", "content": self.call.user}]
        self.messages, self.tool_log, self.output, self.steps, self.done = list(first), [], None, 0, False
        return Observation(first, self.schemas)

    def call_tool(self, name: str, arguments: Any) -> ToolResult:
        return self.search.call_tool(name, arguments)

    def respond(self, text: str) -> tuple[list[dict[str, Any]], bool]:
        self.output = text
        return [], True

    def score(self) -> EpisodeScore:
        self.done = True
        answered = float(bool(self.output and self.output.strip()))
        return EpisodeScore(answered, {"answered": answered}, None if answered else "agent", self.messages,
                            {"reward_components": {"answered": answered}})

    def hits(self) -> int:
        return sum(len(c["content"].get("results", [])) for c in self.tool_log
                   if c["name"] == "search" and isinstance(c["content"], dict))


def run_roles(engine: Engine, index: SearchIndex, calls: Sequence[RoleCall], config: RoleConfig,
              source: str = "research") -> list[RoleResult]:
    """Run the calls as one lock-step batch; if the engine fails, each call again on its own, with retries, so
    one failing call never takes the others down."""
    if not calls:
        return []
    try:
        return _run(engine, index, calls, config, source, attempt=1)
    except Exception as exc:  # noqa: BLE001 - an engine failure: isolate the failing calls below
        error = f"{type(exc).__name__}: {exc}"
        return [run_role(engine, index, call, config, source, first_attempt=2, error=error) for call in calls]


def run_role(engine: Engine, index: SearchIndex, call: RoleCall, config: RoleConfig, source: str = "research",
             first_attempt: int = 1, error: str = "") -> RoleResult:
    """One call, re-run after an engine failure until ``config.retries`` re-runs are spent, then failed (the
    attempts before ``first_attempt`` failed already, the last with ``error``)."""
    for attempt in range(first_attempt, config.retries + 2):
        try:
            return _run(engine, index, [call], config, source, attempt)[0]
        except Exception as exc:  # noqa: BLE001 - any engine failure (timeouts, connection errors) is retried
            error = f"{type(exc).__name__}: {exc}"
    return RoleResult(call.call_id, call.role, call.branch, call.depends_on,
                      [{"role": "system", "content": ROLES[call.role].system},
                       {"role": "user", "content": call.user}],
                      None, "failed", error=f"engine failed on every attempt; last: {error}"[:2000],
                      attempts=config.retries + 1, stop_reason="engine_error")


def _run(engine: Engine, index: SearchIndex, calls: Sequence[RoleCall], config: RoleConfig, source: str,
         attempt: int) -> list[RoleResult]:
    envs = [RoleEnvironment(index, call) for call in calls]
    agent = config.agent.model_copy(update={"seed": config.agent.seed + attempt - 1})
    episodes = [Episode(id=call.call_id, group_id=call.call_id, make_env=_constant(env), task=None)
                for call, env in zip(calls, envs, strict=True)]
    rollouts = run_episodes(engine, episodes, agent, source)
    results = []
    for call, env, rollout in zip(calls, envs, rollouts, strict=True):
        complete = rollout.stop_reason == "done" and env.output is not None
        results.append(RoleResult(
            call.call_id, call.role, call.branch, call.depends_on, rollout.messages,
            env.output if complete else None, "complete" if complete else "failed",
            error=None if complete else f"no final reply ({rollout.stop_reason})", attempts=attempt,
            tool_calls=len(env.tool_log), search_hits=env.hits(), stop_reason=rollout.stop_reason))
    return results


def _constant(env: RoleEnvironment) -> Callable[[], RoleEnvironment]:
    return lambda: env


@lru_cache(maxsize=4)
def open_index(directory: str) -> SearchIndex:
    """The index at ``directory``, opened once per process (memory-mapped: processes share its pages)."""
    return SearchIndex.open(os.fspath(directory))
