"""The OpenEnv-compatible environment server (``gymforge serve-env``): OpenEnv's own ``HTTPEnvServer`` around an
``MCPEnvironment`` whose MCP tools are the current task's tools.

OpenEnv owns the wire: the ``/ws`` session protocol (reset, step, state, close; one environment per connection, a cap
on sessions, an idle-session reaper), ``/mcp``, ``/schema``, ``/metadata``, its error frames for malformed JSON and
invalid messages. gymforge adds what it serves: each session's :class:`GymforgeEnvironment` holds an
:class:`~inference.environments.episode.ServedEpisode` (its own copy of the task's database), and on reset registers the
task's tools, with their JSON schemas, on the session's FastMCP server, plus ``respond`` (the simulated user). Tool
calls travel as MCP ``tools/call`` through FastMCP's client and server, into the episode's environment.

A reset takes ``task_id`` (or ``seed`` to draw one), ``episode_id`` and ``noise_level``; its observation carries the
messages to start from and the tools. A step's observation carries the tool's ``content`` (what the agent reads),
the messages it added and, when the episode ends, the reward, its ``reward_components`` (``db_state``,
``required_outputs``, ``policy``) and the ``failure`` label. A step without an episode, after the end, or naming a
tool the task does not offer answers an observation whose ``error`` says so; the session and every other one go on.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from inference.environments.models import EpisodeStart, EpisodeStep  # isort: skip - first: it imports OpenEnv
from fastapi import FastAPI, Request, WebSocketDisconnect
from fastapi.responses import JSONResponse
from fastmcp import FastMCP
from fastmcp.tools import Tool as MCPServerTool
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent
from openenv.core.env_server import (
    CallToolAction,
    ConcurrencyConfig,
    HTTPEnvServer,
    MCPEnvironment,
    Observation,
    State,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from inference.environments.episode import RESPOND, ServedEpisode, StepOutcome
from inference.environments.tasks import ServedTasks, noise_level_of

RESET_PARAMETERS = ("task_id", "seed", "episode_id", "noise_level")


class ServerSettings(BaseModel):
    """How ``gymforge serve-env`` serves its tasks."""

    max_sessions: int = Field(64, ge=1, description="Cap on concurrent sessions (one environment and database copy "
                                                    "each); a session past it gets a CAPACITY_REACHED error.")
    idle_timeout_s: float | None = Field(300.0, gt=0, description="Close a session idle this long (OpenEnv's reaper "
                                                                  "checks every max(timeout/4, 5 s)); None: never.")
    max_steps: int = Field(40, ge=1, description="Calls per episode before it is scored as it stands.")
    distractors: int | None = Field(None, ge=0, description="Offer each task its task view (its golden tools plus "
                                                             "this many others, compact schemas); None: every tool of "
                                                             "its environment.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest HTTP request body; larger ones get 413.")
    max_message_bytes: int = Field(1 << 20, ge=1024, description="Largest WebSocket message; the connection "
                                                                 "carrying a larger one is closed with code 1009.")


# The result is also structured content wrapped as {"result": text}, so an MCP client's parsed data (OpenEnv's
# ``MCPToolClient.call_tool`` returns it) is the text the agent reads.
RESULT_SCHEMA = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"],
                 "x-fastmcp-wrap-result": True}


class EpisodeTool(MCPServerTool):
    """An MCP tool of the current task: its schema is the task's, a call runs one episode step."""

    call: Annotated[SkipJsonSchema[Callable[[dict[str, Any]], str]], Field(exclude=True)]

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        text = self.call(arguments)
        return ToolResult(content=[TextContent(type="text", text=text)], structured_content={"result": text},
                          meta={"fastmcp": {"wrap_result": True}})


def _failed(name: str, kind: ToolErrorType, message: str) -> EpisodeStep:
    return EpisodeStep(tool_name=name, error=ToolError(error_type=kind, message=message))


class GymforgeEnvironment(MCPEnvironment):
    """One session: an episode of a served task, its tools on the session's own FastMCP server."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session has its own episode database

    def __init__(self, served: ServedTasks, settings: ServerSettings) -> None:
        super().__init__(FastMCP(name="gymforge"))
        self.served = served
        self.episode = ServedEpisode(served, settings.max_steps, settings.distractors)
        self.episode_id: str | None = None
        self._registered: list[str] = []

    # -- OpenEnv's Environment -------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              noise_level: int | None = None, **unknown: Any) -> EpisodeStart:
        if unknown:
            raise ValueError(f"reset got unknown parameters {sorted(unknown)}; it takes {', '.join(RESET_PARAMETERS)}")
        task = self.served.choose(task_id, seed, noise_level)
        messages = self.episode.start(task)
        self.episode_id = episode_id or str(uuid.uuid4())
        self._register_tools()
        tools = [Tool(name=t["function"]["name"], description=t["function"].get("description", ""),
                      input_schema=t["function"].get("parameters") or {"type": "object", "properties": {}})
                 for t in self.episode.tools]
        return EpisodeStart(task_id=task["task_id"], env_id=task["env_id"], episode_id=self.episode_id,
                            noise_level=noise_level_of(task), messages=messages, tools=tools)

    def _register_tools(self) -> None:
        server = self._require_mcp_server()
        for name in self._registered:
            server.local_provider.remove_tool(name)
        self._registered = []
        for schema in self.episode.tools:
            fn = schema["function"]
            server.add_tool(EpisodeTool(
                name=fn["name"], description=fn.get("description") or fn["name"].replace("_", " "),
                parameters=fn.get("parameters") or {"type": "object", "properties": {}}, output_schema=RESULT_SCHEMA,
                call=functools.partial(self._run, fn["name"])))
            self._registered.append(fn["name"])

    def _run(self, name: str, arguments: dict[str, Any]) -> str:
        if name != RESPOND:
            return self.episode.call(name, arguments).content
        if set(arguments) != {"message"} or not isinstance(arguments["message"], str):
            return '{"error":"respond takes one argument, message (a string)"}'
        return self.episode.respond(arguments["message"]).content

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if not isinstance(action, CallToolAction):
            return await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if self.episode.done:
            message = ("no episode is running: reset first (a task_id, or a seed)" if self.episode.task is None
                       else f"the episode of task {self.episode.task['task_id']} has ended "
                            f"(reward {self.episode.outcome().reward:g}); reset to start another")
            return _failed(action.tool_name, ToolErrorType.EXECUTION_ERROR, message)
        before = self.episode.last
        called = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        outcome = self.episode.last
        if outcome is before or outcome is None:  # refused before it reached the episode (an unknown tool)
            return called
        return self._observation(action.tool_name, outcome)

    @staticmethod
    def _observation(name: str, outcome: StepOutcome) -> EpisodeStep:
        # ``result`` as OpenEnv's MCPToolClient.call_tool reads it ({"data": text}), not FastMCP's result object
        return EpisodeStep(tool_name=name, result={"data": outcome.content}, content=outcome.content, messages=outcome.messages,
                           reward=outcome.reward, done=outcome.done,
                           reward_components=outcome.info.get("reward_components") if outcome.done else None,
                           failure=outcome.info.get("failure") if outcome.done else None,
                           info=outcome.info if outcome.done else None)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError("actions are MCP tool calls: {type: call_tool, tool_name, arguments} or {type: list_tools}")

    @property
    def state(self) -> State:
        task = self.episode.task
        environment = self.episode.environment
        return State(episode_id=self.episode_id, step_count=environment.steps if environment is not None and task else 0,
                     task_id=task["task_id"] if task else None, done=self.episode.done,
                     reward=self.episode.last.reward if self.episode.last else None)

    def get_metadata(self) -> EnvironmentMetadata:
        described = self.served.describe()
        return EnvironmentMetadata(
            name="gymforge", version=f"{self.served.source} (stage version {self.served.version})",
            description=f"gymforge environment tasks of {self.served.source}: {described['tasks']} tasks in "
                        f"{described['environments']} environments ({', '.join(described['domains'])}); reset with "
                        "task_id (or seed), episode_id, noise_level; tools over MCP, the user through respond")

    def close(self) -> None:
        self.episode.close()
        super().close()


def create_app(served: ServedTasks, settings: ServerSettings | None = None) -> FastAPI:
    """The FastAPI app: OpenEnv's routes (``/ws``, ``/mcp``, ``/reset``, ``/step``, ``/state``, ``/schema``,
    ``/metadata``) for :class:`GymforgeEnvironment`, and what it serves: ``/health`` (the artifact, its version,
    counts and sessions) and ``/tasks``."""
    settings = settings or ServerSettings()
    app = FastAPI(title="gymforge environment server", version="1",
                  description=f"OpenEnv-compatible sessions over the environment tasks of {served.source}.")
    server = HTTPEnvServer(
        functools.partial(GymforgeEnvironment, served, settings), CallToolAction, EpisodeStep,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=settings.max_sessions,
                                             session_timeout=settings.idle_timeout_s))

    # Registered before OpenEnv's routes, so these answer /health (OpenEnv's says only the status).
    @app.get("/health", tags=["Health"])
    async def health() -> dict[str, Any]:
        return {"status": "healthy", **served.describe(),
                "sessions": {"active": server.active_sessions, "max": server.max_concurrent_envs,
                             "idle_timeout_s": settings.idle_timeout_s}}

    @app.get("/tasks", tags=["Environment Info"])
    async def tasks() -> dict[str, Any]:
        return {"artifact": served.source, "tasks": served.listing()}

    @app.exception_handler(ValueError)
    async def refused(request: Request, exc: ValueError) -> JSONResponse:  # a reset naming no served task
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > settings.max_body_bytes:
            return JSONResponse(status_code=413, content={"detail": f"request body of {length} bytes is over the "
                                                                    f"limit of {settings.max_body_bytes} bytes"})
        return await call_next(request)

    server.register_routes(app)
    app.add_middleware(_QuietDisconnects)
    return app


class _QuietDisconnects:
    """openenv-core 0.3.0 closes a session's socket after the client has closed it, and the refusal escapes as an
    "Exception in ASGI application" log for every ordinary disconnect; the session is already cleaned up then."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


def serve(served: ServedTasks, host: str = "127.0.0.1", port: int = 8000,
          settings: ServerSettings | None = None) -> None:
    """Serve until interrupted."""
    import uvicorn

    settings = settings or ServerSettings()
    uvicorn.run(create_app(served, settings), host=host, port=port, ws_max_size=settings.max_message_bytes,
                log_level="warning")

