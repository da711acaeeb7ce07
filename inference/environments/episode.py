"""One episode of a served task, driven one call at a time: what the OpenEnv server and the TRL adapter both run.

``envgen.environment`` steps on assistant messages (tool calls, or text the simulated user answers). Trainers outside
gymforge call one tool at a time, and TRL ends a rollout at the first reply without a tool call, so the user is
reached through a tool too: ``respond(message)`` sends the agent's text to the simulated user and returns the
reply. The rubric's required outputs are read from what the agent told the user, so the final answer reaches the
environment through ``respond`` as well. Each call is one environment step (a golden replay through calls is the same
sequence of steps as ``envgen.environment.replay``, so it scores the same), on the environment's own episode database.

With ``distractors`` set, a task is offered its task view (its golden tools plus that many others, compact schemas:
``envgen.small.task_view``) instead of every tool of its environment: a domain's 54 airline tools render to about
14K tokens, past a small model's context.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envgen.noise.environment import NoisyEnvironment
from envgen.small import task_view
from inference.environments.tasks import ServedTasks

RESPOND = "respond"
RESPOND_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": RESPOND,
    "description": "Send a message to the user and return the user's reply: ask for what you need, and tell the "
                   "user the outcome, with the values they asked for, when the request is done.",
    "parameters": {"type": "object", "properties": {
        "message": {"type": "string", "description": "What to say to the user."}}, "required": ["message"]}}}
ENDED = "(the user has ended the conversation)"


class EpisodeError(RuntimeError):
    """A call the episode cannot take (none started, or it has ended); the message says what to do."""


@dataclass
class StepOutcome:
    """What one call returns: ``content`` is what the agent reads (a tool's result or the user's reply),
    ``messages`` the conversation messages the step added, ``reward`` 0 until ``done``, and at the end ``info``
    holds the rubric's ``reward_components``, the ``failure`` label and the environment's counts."""

    content: str
    messages: list[dict[str, Any]]
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def wire_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The environment's end-of-episode info as plain JSON (its diff holds dates and decimals)."""
    return json.loads(json.dumps(dict(info), default=str))


class ServedEpisode:
    """Runs the tasks of ``served`` one episode at a time; ``start`` begins one on a fresh database copy."""

    def __init__(self, served: ServedTasks, max_steps: int = 40, distractors: int | None = None) -> None:
        self.served = served
        self.max_steps = max_steps
        self.distractors = distractors
        self.environment: NoisyEnvironment | None = None
        self.task: dict[str, Any] | None = None
        self.tools: list[dict[str, Any]] = []
        self.last: StepOutcome | None = None

    def offered_environment(self, task: Mapping[str, Any]) -> dict[str, Any]:
        env = self.served.environment_of(task)
        return env if self.distractors is None else task_view(env, task, self.distractors)

    def start(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        """Start ``task`` on a fresh copy of its database; the first messages (system prompt, the user's
        request). The environment is kept while tasks share an environment (a reset copies the database again)."""
        env = self.offered_environment(task)
        if self.environment is None or self.distractors is not None or self.environment.record["env_id"] != env["env_id"]:
            self.close()
            self.environment = NoisyEnvironment(env, max_steps=self.max_steps)
        if RESPOND in self.environment.tool_names:
            raise ValueError(f"environment {env['env_id']} has a tool named {RESPOND!r}, the name of the user tool")
        observation = self.environment.reset(task)
        self.task, self.last = task, None
        self.tools = [*observation.tools, RESPOND_SCHEMA]
        return observation.messages

    @property
    def done(self) -> bool:
        return self.environment is None or self.environment.done

    def _step(self, message: dict[str, Any]) -> StepOutcome:
        if self.environment is None or self.task is None:
            raise EpisodeError("no episode is running: reset first (a task_id, or a seed)")
        if self.environment.done:
            reward = self.last.reward if self.last else 0.0
            raise EpisodeError(f"the episode of task {self.task['task_id']} has ended (reward {reward:g}); "
                               "reset to start another")
        observation, reward, done, info = self.environment.step(message)
        added = observation.messages
        content = added[0]["content"] if added else ENDED
        self.last = StepOutcome(content, added, reward, done, wire_info(info) if done else {})
        return self.last

    def call(self, name: str, arguments: Mapping[str, Any] | str | None) -> StepOutcome:
        """Run one tool call as one assistant turn (the environment validates the arguments against the tool's schema
        and refuses oversized ones)."""
        raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
        n = self.environment.steps if self.environment is not None else 0
        call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": raw}}
        return self._step({"role": "assistant", "content": "", "tool_calls": [call]})

    def respond(self, message: str) -> StepOutcome:
        """Tell the simulated user ``message``; its reply (or the end of the episode when the user is done)."""
        return self._step({"role": "assistant", "content": str(message)})

    def outcome(self) -> StepOutcome:
        """The episode's score: as it ended, or scored now as it stands when it was cut off (the environment's
        ``score``, as when an episode runs out of steps)."""
        if self.environment is None or self.task is None:
            raise EpisodeError("no episode is running: reset first (a task_id, or a seed)")
        if not self.environment.done:
            score = self.environment.score()
            self.last = StepOutcome("", [], score.reward, True, wire_info(score.info))
        return self.last if self.last is not None else StepOutcome("", [], 0.0, True)

    def close(self) -> None:
        if self.environment is not None:
            self.environment.close()
            self.environment = None
