"""The noisy environment: :class:`~envgen.environment.Environment` with a task's tool faults applied.

It overrides ``call_tool``, the seam the environment provides for tool noise, and nothing else: episodes, the
user simulator and scoring are the base environment's. Injected faults are part of the task (its ``noise``
record); they are not failures of the environment. A real failure of a tool implementation stays
``internal_error`` so the environment labels the episode ``tool`` and it is never scored as the agent's failure (DESIGN.md section 7).
"""

from __future__ import annotations

from typing import Any

from envgen.environment import Environment, Observation, UserSimulator
from envgen.noise.records import NoiseRecord
from envgen.noise.tools import ToolNoise
from envgen.tools import ToolError, ToolResult, parse_arguments


class _Infrastructure(Exception):
    """Raised inside the noise layer when the wrapped tool reported an internal error."""


class NoisyEnvironment(Environment):
    """An environment whose tool responses follow the task's recorded fault schedule (clean tasks: none)."""

    def reset(self, task: dict[str, Any], user: UserSimulator | None = None) -> Observation:
        record = NoiseRecord.from_json(task.get("noise") if isinstance(task.get("noise"), str) else None)
        self.noise = ToolNoise(record.tool_faults if record else ())
        self.noise_events: list[dict[str, Any]] = []
        self.simulated_latency_ms = 0
        if not hasattr(self, "clean_schemas"):
            self.clean_schemas = list(self.schemas)  # the base environment's schemas, before any fault extends them
        self.schemas = self.noise.tool_schemas(self.clean_schemas)
        obs = super().reset(task, user)
        return Observation(obs.messages, self.schemas)

    def call_tool(self, name: str, arguments: Any) -> ToolResult:
        try:
            args = parse_arguments(arguments)
        except ToolError:
            return super().call_tool(name, arguments)  # the base environment words the refusal
        ran: list[ToolResult] = []

        def execute(tool: str, clean_args: dict[str, Any]) -> Any:
            result = super(NoisyEnvironment, self).call_tool(tool, clean_args)
            ran.append(result)
            if result.internal_error:
                raise _Infrastructure(str(result.content.get("error")))
            return result.content

        response = self.noise.call(name, args, execute)
        self.noise_events.extend(response.events)
        self.simulated_latency_ms += response.latency_ms
        base = ran[0] if ran else ToolResult({})
        return ToolResult(response.content, wrote=base.wrote, violations=base.violations,
                          internal_error=response.infra_error is not None)

    def score(self):
        episode = super().score()
        episode.info["noise"] = {
            "events": list(self.noise_events),
            "simulated_latency_ms": self.simulated_latency_ms,
            "injected_errors": sum(e["kind"] == "transient_failure" for e in self.noise_events),
            "infrastructure_errors": sum(e["kind"] == "infrastructure" for e in self.noise_events),
        }
        return episode


def scored_for_agent(info: dict[str, Any]) -> bool:
    """Whether an episode's outcome counts for or against the agent: infrastructure (``tool``) and user-simulator
    (``user``) failures are excluded from agent-failure scoring."""
    return info.get("failure") not in ("tool", "user")
