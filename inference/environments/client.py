"""The client of gymforge's environment server: OpenEnv's ``MCPToolClient`` (its WebSocket session, ``reset``,
``list_tools``, ``call_tool``, ``step``) reading the episode's fields too. The stock client reads a reset as a tool
list and a step as a bare tool call, dropping the messages to start from, the tool's text, the reward components
and the failure label; this one keeps them as :class:`~inference.environments.models.EpisodeStart` and
:class:`~inference.environments.models.EpisodeStep`.

    async with GymforgeEnvClient(base_url="http://127.0.0.1:8000") as env:
        start = (await env.reset(task_id="airline-0-t0")).observation   # messages, tools
        result = await env.step(CallToolAction(tool_name="get_user", arguments={"user_id": "US1"}))
        result.observation.content, result.reward, result.observation.reward_components
"""

from __future__ import annotations

from typing import Any

from inference.environments.models import EpisodeStart, EpisodeStep  # isort: skip - first: it imports OpenEnv
from openenv.core.client_types import StepResult
from openenv.core.mcp_client import MCPToolClient


class GymforgeEnvClient(MCPToolClient):
    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Any]:
        fields = dict(payload.get("observation") or {})
        given = {"done": payload.get("done", False), "reward": payload.get("reward")}
        if "episode_id" in fields and "messages" in fields:
            observation: Any = EpisodeStart.model_validate({**fields, **given})
        elif "tool_name" in fields and "content" in fields:
            observation = EpisodeStep.model_validate({**fields, **given})
        else:
            return super()._parse_result(payload)
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))
