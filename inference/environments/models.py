"""The observations of gymforge's environment server, as its server sends them and its client reads them."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import CallToolObservation, Observation, Tool
from pydantic import Field


class EpisodeStart(Observation):
    """A reset's observation: the task, the messages to start from (system prompt, the user's request) and the
    tools, MCP-style (``name``, ``description``, ``input_schema``)."""

    task_id: str
    env_id: str
    episode_id: str
    noise_level: int
    messages: list[dict[str, Any]]
    tools: list[Tool]


class EpisodeStep(CallToolObservation):
    """A tool call's observation: ``content`` is what the agent reads (the tool's result, or the user's reply to
    ``respond``), ``messages`` what the call added to the conversation; at the end of the episode ``done``, the
    ``reward`` with its ``reward_components``, the ``failure`` label (``agent``, ``user``, ``tool`` or None) and the
    environment's ``info``."""

    content: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    reward_components: dict[str, float] | None = None
    failure: str | None = None
    info: dict[str, Any] | None = None
