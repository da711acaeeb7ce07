"""gymforge's environment tasks as TRL environments: ``GRPOTrainer(environment_factory=environment_factories(...))``.

TRL (1.16) probes one instance per factory, reads the public methods of its *class* as the tools (their names, type
hints and docstrings, through ``transformers.utils.get_json_schema``), calls ``reset(**row)`` with the dataset row
before each rollout (instances are pooled and reused), and ``get_reward()`` after it. So each set of offered tools
is a class of its own, built from the task's JSON schemas: one method per tool with a real signature and an
``Args:`` line per parameter, plus ``respond(message)``, the simulated user (a reply without a tool call ends TRL's
rollout, and the rubric's required outputs are read from what the agent tells the user). A dict of factories, one
per environment name, lets one dataset mix environments: each row names its own (``gymforge export --format trl``).

What a method signature can say of a JSON schema: a string, integer, number or boolean parameter keeps its type, an
enum becomes ``Literal[...]``, an array ``list`` and an object ``dict``; bounds (``minimum``, ``maxLength``),
``additionalProperties`` and the fields of nested objects are lost. The environment still validates every call against
the full schema and answers a refused one with its error.

By default a task is offered its task view (its golden tools plus ``DISTRACTORS`` others, compact schemas): a
domain's full tool list (54 airline tools, about 14K tokens) does not fit a small model.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import keyword
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from envgen.environment import domain_for, offered_schemas
from envgen.noise.records import NoiseRecord
from envgen.noise.tools import ToolNoise
from envgen.small import DISTRACTORS, task_view
from inference.environments.episode import RESPOND, RESPOND_SCHEMA, ServedEpisode
from inference.environments.tasks import ServedTasks

JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                               "object": dict}


def task_tools(served: ServedTasks, task: Mapping[str, Any], distractors: int | None = DISTRACTORS) -> list[dict]:
    """The OpenAI tool schemas a task is offered, ``respond`` last: its task view (``distractors`` others; None:
    every tool of its environment), with the continuation argument its noise record adds (as the environment does)."""
    env = served.environment_of(task)
    view = env if distractors is None else task_view(env, task, distractors)
    noise = task.get("noise")
    record = NoiseRecord.from_json(noise if isinstance(noise, str) else None)
    schemas = ToolNoise(record.tool_faults if record else ()).tool_schemas(offered_schemas(view, domain_for(view)))
    return [*schemas, RESPOND_SCHEMA]


def environment_name(task: Mapping[str, Any], tools: list[dict[str, Any]]) -> str:
    """The name of the environment class a task runs in: its environment id and a digest of the ``tools`` it is
    offered (:func:`task_tools`; tasks offered the same tools share a class)."""
    digest = hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()[:8]
    return f"{task['env_id']}-{digest}"


def _annotation(spec: Mapping[str, Any]) -> Any:
    if spec.get("enum"):
        return Literal[tuple(spec["enum"])]
    return JSON_TYPES.get(str(spec.get("type", "string")), str)


def _described(name: str, spec: Mapping[str, Any]) -> str:
    text = str(spec.get("description") or name.replace("_", " ")).replace("\n", " ").strip()
    return text[:1].upper() + text[1:]


def python_name(name: str) -> str:
    """A parameter name a signature can hold: other characters as ``_``, a keyword (``from``) or ``self`` with a
    trailing ``_`` (the model then writes ``from_``; the call passes ``from`` on)."""
    cleaned = re.sub(r"\W", "_", name)
    cleaned = cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else f"_{cleaned}"
    return f"{cleaned}_" if keyword.iskeyword(cleaned) or cleaned == "self" else cleaned


def tool_method(schema: Mapping[str, Any]) -> Callable[..., str]:
    """A method for one OpenAI tool schema: named after the tool, typed and documented from its parameters (an
    optional one defaults to None and is left out of the call), running the call in the instance's episode."""
    fn = schema["function"]
    name = fn["name"]
    parameters = fn.get("parameters") or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    spelled = {python_name(p): p for p in properties}  # the signature's names -> the schema's
    if len(spelled) != len(properties):
        raise ValueError(f"tool {name}: parameters {sorted(properties)} collide as Python names")
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    # required parameters first: a Python signature puts defaults last
    for pname in sorted(spelled, key=lambda p: spelled[p] not in required):
        hint = _annotation(properties[spelled[pname]])
        annotations[pname] = hint if spelled[pname] in required else hint | None
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, annotation=annotations[pname],
                                        default=inspect.Parameter.empty if spelled[pname] in required else None))
    annotations["return"] = str

    def method(self: GymforgeTRLEnvironment, **arguments: Any) -> str:
        return self._call(name, {spelled.get(k, k): v for k, v in arguments.items() if v is not None})

    args = "".join(f"\n    {p}: {_described(spelled[p], properties[spelled[p]])}" for p in spelled)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"{_described(name, fn)}\n" + (f"\nArgs:{args}\n" if args else "")
                      + "\nReturns:\n    The result as JSON.")
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


class GymforgeTRLEnvironment:
    """The base of the generated classes: ``reset(**row)`` starts the row's task (``task_id``) on a fresh database
    copy, ``get_reward()`` is the rubric's reward of the episode as it ended or stands."""

    served: ServedTasks
    distractors: int | None
    max_steps: int

    def __init__(self) -> None:
        self.episode = ServedEpisode(self.served, self.max_steps, self.distractors)
        self.info: dict[str, Any] = {}  # the last episode's reward components, failure label and counts

    def reset(self, **row: Any) -> None:
        task_id = row.get("task_id")
        if task_id not in self.served.tasks:
            raise ValueError(f"reset needs the row's task_id (a task of {self.served.source}); got {task_id!r}")
        self.episode.start(self.served.tasks[task_id])
        self.info = {}
        # the row's prompt already holds the system prompt and the user's request

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        return self.episode.call(name, arguments).content

    def respond(self, message: str) -> str:
        """Send a message to the user and return the user's reply: ask for what you need, and tell the user the outcome, with the values they asked for, when the request is done.

        Args:
            message: What to say to the user.

        Returns:
            The user's reply.
        """
        return self.episode.respond(message).content

    def get_reward(self) -> float:
        outcome = self.episode.outcome()
        self.info = outcome.info
        return float(outcome.reward)


def _class_name(name: str) -> str:
    return "Gymforge_" + re.sub(r"\W", "_", name)


def environment_class(served: ServedTasks, tools: list[dict[str, Any]], name: str, distractors: int | None,
                      max_steps: int) -> type[GymforgeTRLEnvironment]:
    """A class whose public methods are ``tools`` (``respond`` is the base's)."""
    methods = {t["function"]["name"]: tool_method(t) for t in tools if t["function"]["name"] != RESPOND}
    reserved = sorted(set(methods) & {"reset", "get_reward", "respond", "episode", "info"})  # the base's names
    if reserved:
        raise ValueError(f"environment {name}: tools {reserved} collide with the adapter's own methods")
    return type(_class_name(name), (GymforgeTRLEnvironment,),
                {**methods, "served": served, "distractors": distractors, "max_steps": max_steps,
                 "__doc__": f"gymforge environment {name} of {served.source}."})


def environment_factories(served: ServedTasks, distractors: int | None = DISTRACTORS,
                          max_steps: int = 40) -> dict[str, type[GymforgeTRLEnvironment]]:
    """``{environment name: class}`` for ``GRPOTrainer(environment_factory=...)``: one class per set of offered
    tools among ``served``'s tasks (a class is its own factory). A dataset row selects its class by its
    ``environment`` column and its task by ``task_id`` (``gymforge export --format trl`` writes both)."""
    classes: dict[str, type[GymforgeTRLEnvironment]] = {}
    for task in served.tasks.values():
        tools = task_tools(served, task, distractors)
        name = environment_name(task, tools)
        if name not in classes:
            classes[name] = environment_class(served, tools, name, distractors, max_steps)
    return classes
