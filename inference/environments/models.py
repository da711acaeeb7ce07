"""The observations of gymforge's environment server, as its server sends them and its client reads them.

This module imports OpenEnv for the package, so the server and the client import it first. OpenEnv's server package
imports gradio for a web UI gymforge does not serve, and gradio's import writes type stubs of its components (a
`gymforge serve-env` that refuses at once took 8.9 CPU-s with it, 4.3 without: bench_cli_start.py). OpenEnv takes a
missing gradio for no web UI, so gradio is hidden while OpenEnv is imported, and only then: a trainer that logs
through gradio still can.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import Field


@contextmanager
def _gradio_hidden() -> Iterator[None]:
    if "gradio" in sys.modules:
        yield
        return
    sys.modules["gradio"] = None  # type: ignore[assignment]  # importing it raises ModuleNotFoundError
    try:
        yield
    finally:
        if "gradio" in sys.modules and sys.modules["gradio"] is None:
            del sys.modules["gradio"]


with _gradio_hidden():
    from openenv.core.env_server import CallToolObservation, Observation, Tool


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
