"""The environment: a gym-style tool environment over one seeded SQLite database per episode.

Records (rows of the ``environments`` and ``tasks`` outputs; nested values are JSON strings)
------------------------------------------------------------------------------------------
environment: ``env_id`` str, ``domain`` str, ``spec_json`` (the parsed DomainSpec; renamed variants carry their own),
    ``spec_hash``, ``seed`` int, ``now`` (the database's time, also in its ``_clock`` table), ``tool_names`` (list[str]), ``tools`` (OpenAI
    schemas), ``edges`` ([[u, v], ...] among the environment's tools), ``chains`` (seed chains, lists of tool names;
    the task uses all of them), ``fallback_chains``, ``n_tools``, ``n_edges``, ``density``, ``n_chains``,
    ``fallback_used`` bool, ``expansion`` (JSON: p and g per multi-chain decision), ``db`` (SQLite bytes, Binary),
    ``db_sha256``.
task: ``task_id``, ``env_id``, ``domain``, ``system_prompt`` (agent instructions + policy texts), ``description``
    (the user's first message), ``user_profile`` ({"persona": str, "facts": [{"name", "label", "value"}]}: what the
    user knows and tells when asked), ``rubric`` ({"expected_diff", "required_outputs", "tables", "components"},
    and ``customer``, the key of the acting customer, when the task acts for one: then ``policy`` also fails a
    write before the customer is identified or one on another customer's record, ``envgen.customers``),
    ``golden_actions`` ([{"name", "arguments"}], in order), ``difficulty`` (JSON features), ``noise``
    ({"level": 0, "transforms": []}; filled by the noise stage).

API
---
``env = Environment(env_record)`` then ``obs = env.reset(task_record)`` -> ``Observation(messages, tools)``:
``messages`` are the messages to append to the conversation (after reset: system + first user message), ``tools``
the OpenAI tool schemas. ``obs, reward, done, info = env.step(assistant_message)`` where the message is an OpenAI
assistant dict: with ``tool_calls`` each call runs and one ``{"role": "tool", "tool_call_id", "content"}`` message
per call comes back; without them the user simulator answers. ``reward`` is 0 until ``done``; then it is the product
of ``info["reward_components"]`` (``db_state``, ``required_outputs``, ``policy``) and ``info["failure"]`` is
None, ``"agent"``, ``"user"`` or ``"tool"``. ``areset``/``astep`` are the async variants. ``env.call_tool(name,
args)`` is the seam tool-noise wrappers override; ``UserSimulator`` is the seam for another user
(``CallableUserSimulator`` wraps any ``messages -> text`` callable, e.g. an LLM engine).
``replay(env_record, task_record, actions)`` runs a list of actions (golden or mutated) and scores them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from envgen.canonical import State, canonical_state, diff_states
from envgen.compiler import CLOCK_TABLE, CompiledDomain, compile_domain
from envgen.customers import customer_policy_problem
from envgen.domain_spec import DomainSpec
from envgen.seeding import engine_from_bytes, sqlite_engine
from envgen.tools import Executor, ToolResult, call_tool

_COMPILED: dict[str, CompiledDomain] = {}
_BEFORE: dict[tuple[str, tuple[str, ...]], State] = {}  # (db sha256, tables) -> canonical state, oldest first
_BEFORE_LIMIT = 512


def domain_for(env_record: dict[str, Any]) -> CompiledDomain:
    """The compiled domain of an environment record, cached by spec hash."""
    key = env_record["spec_hash"]
    if key not in _COMPILED:
        _COMPILED[key] = compile_domain(DomainSpec.model_validate_json(env_record["spec_json"]))
    return _COMPILED[key]


def json_field(v: Any) -> Any:
    """A record's JSON field: decoded when stored as text (stage outputs), as is when already decoded."""
    return json.loads(v) if isinstance(v, str) else v


def offered_schemas(env_record: dict[str, Any], domain: CompiledDomain) -> list[dict[str, Any]]:
    """The tool schemas an environment offers: the record's own ``tools`` when they name exactly its ``tool_names``
    (a small environment's compact schemas, ``envgen.small``), else the domain's schemas of those tools."""
    names = list(env_record["tool_names"])
    own = json_field(env_record["tools"]) if env_record.get("tools") else None
    if own is not None and [s["function"]["name"] for s in own] == names:
        return own
    return [domain.tools[n].schema() for n in names]


@dataclass
class Observation:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


class UserSimulator(Protocol):
    def first_message(self) -> str: ...

    def reply(self, assistant_text: str, final_write_done: bool) -> tuple[str, bool]:
        """(the user's answer, whether the user ends the conversation)."""
        ...


def _phrase_in(phrase: str, text: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text) is not None


class ProfileUserSimulator:
    """A rule-based user grounded in the task's profile (DESIGN.md section 7: simulators cause false failures).

    It answers a question by matching the asked field (label, or field name with spaces) against its facts, never
    invents a value, and never ends the conversation before the task's final write has happened.
    """

    def __init__(self, task: dict[str, Any]) -> None:
        self.description = task["description"]
        self.facts = json_field(task["user_profile"])["facts"]

    def first_message(self) -> str:
        return self.description

    def say(self, fact: dict[str, Any]) -> str:
        """How the user states one fact of their profile."""
        return f"My {fact['label']} is {fact['value']}."

    def reply(self, assistant_text: str, final_write_done: bool) -> tuple[str, bool]:
        text = assistant_text.lower()
        if final_write_done and "?" not in text:  # the outcome told, naming fields ("cabin business"), asks nothing
            return "Thank you, that is all I needed.", True
        answers = [
            self.say(f)
            for f in self.facts
            if _phrase_in(f["label"].lower(), text) or _phrase_in(f["name"].replace("_", " "), text)
            or _phrase_in(f["name"], text)
        ]
        if answers:
            return " ".join(answers), False
        if final_write_done:
            return "Thank you, that is all I needed.", True
        if "?" in text:
            known = ", ".join(f["label"] for f in self.facts) or "nothing more"
            return f"I'm not sure what you need. I can tell you my {known}.", False
        return f"That doesn't complete my request yet. {self.description}", False


class CallableUserSimulator:
    """The seam for an LLM-backed user: ``respond(messages) -> text`` (e.g. an inference engine; envgen does not
    import one). It sees a user-side transcript: a system prompt holding the request and the profile facts, then
    the conversation with the agent's turns as ``user`` messages. The environment keeps the grounding rule: a stop
    token before the task's final write does not end the episode (the user is told the request is not done)."""

    STOP = "###STOP###"

    def __init__(self, task: dict[str, Any], respond: Any) -> None:
        self.description = task["description"]
        facts = json_field(task["user_profile"])["facts"]
        known = "\n".join(f"- {f['label']}: {f['value']}" for f in facts) or "- (nothing else)"
        self.respond = respond
        self.transcript: list[dict[str, Any]] = [{"role": "system", "content": (
            f"You are a customer talking to a support agent. Your request: {self.description}\n"
            f"Facts you know (give one only when asked for it; never invent others):\n{known}\n"
            f"When your request has been completed, reply with {self.STOP}.")}]

    def first_message(self) -> str:
        self.transcript.append({"role": "assistant", "content": self.description})
        return self.description

    def reply(self, assistant_text: str, final_write_done: bool) -> tuple[str, bool]:
        self.transcript.append({"role": "user", "content": assistant_text})
        text = str(self.respond(list(self.transcript)))
        self.transcript.append({"role": "assistant", "content": text})
        wants_stop = self.STOP in text
        text = text.replace(self.STOP, "").strip()
        if wants_stop and final_write_done:
            return text or "Thank you.", True
        if wants_stop:  # never end before the final write (DESIGN.md section 7)
            return text or f"That doesn't complete my request yet. {self.description}", False
        return text, False


def required_outputs_met(required: list[str], texts: list[str]) -> bool:
    """Each required value appears in what the agent told the user (numbers on token boundaries, 1,234.50 ok)."""
    said = " ".join(texts).lower().replace(",", "").replace("$", " ").replace("_", " ")
    for value in required:
        v = str(value).lower().replace("_", " ")  # an enum value told in words ("checked in") counts
        variants = {v}
        try:
            num = float(v)
            variants |= {f"{num:.2f}", f"{num:g}"}
        except ValueError:
            pass
        if not any(re.search(rf"(?<![\w.]){re.escape(x)}(?![\w]|\.\d)", said) for x in variants):
            return False
    return True


@dataclass
class EpisodeScore:
    reward: float
    components: dict[str, float]
    failure: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def render_result(content: Any) -> str:
    """A tool result as the model reads it: JSON without padding spaces and with letters unescaped ("Atlético",
    not "Atl\\u00e9tico"), about a tenth fewer tokens than ``json.dumps``'s default and every value findable as the
    records write it."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


class ToolEnvironment(ABC):
    """The gym-style interface of every environment here (DESIGN.md section 5), and the step loop they share:
    ``reset(task) -> Observation``; ``step(assistant message) -> (Observation, reward, done, info)`` runs the
    message's tool calls through ``call_tool`` (the seam noise wrappers override), or, for a message without calls,
    lets the environment ``respond`` (a user's reply, or the end of the episode); the episode is ``score``d when it
    ends or runs out of ``max_steps``. ``areset``/``astep`` are the async twins the agent loop awaits."""

    schemas: list[dict[str, Any]]
    max_steps: int
    done: bool = True  # until reset

    @abstractmethod
    def reset(self, task: dict[str, Any]) -> Observation:
        """Start an episode: set ``messages``, ``tool_log``, ``steps = 0``, ``done = False``; the first messages."""

    @abstractmethod
    def call_tool(self, name: str, arguments: Any) -> ToolResult:
        """Run one tool call of the episode."""

    @abstractmethod
    def respond(self, text: str) -> tuple[list[dict[str, Any]], bool]:
        """The answer to an assistant message without tool calls: the messages it adds and whether it ends the
        episode."""

    @abstractmethod
    def score(self) -> EpisodeScore:
        """Score the episode as it stands (also when it was cut off); ``done`` afterwards."""

    def close(self) -> None:
        """Release what the episode holds."""
        self.done = True

    async def areset(self, task: dict[str, Any]) -> Observation:
        # Tool calls are local work taking about a millisecond: running them inline beats a thread hop.
        return self.reset(task)

    def step(self, message: dict[str, Any]) -> tuple[Observation, float, bool, dict[str, Any]]:
        if self.done:
            raise RuntimeError("no episode is running; call reset(task) first")
        self.steps += 1
        self.messages.append(message)
        calls = message.get("tool_calls") or []
        out = self._run_tool_calls(calls)
        ended = False
        if not calls:
            replies, ended = self.respond(message.get("content") or "")
            out += replies
        self.messages.extend(out)
        if not ended and self.steps < self.max_steps:
            return Observation(out, self.schemas), 0.0, False, {}
        episode = self.score()
        return Observation(out, self.schemas), episode.reward, True, episode.info

    async def astep(self, message: dict[str, Any]) -> tuple[Observation, float, bool, dict[str, Any]]:
        return self.step(message)

    def _run_tool_calls(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each call run, logged in ``tool_log`` and answered with its ``role: tool`` message."""
        out = []
        for call in calls:
            fn = call.get("function", {})
            result = self.call_tool(str(fn.get("name")), fn.get("arguments"))
            self.tool_log.append({"name": fn.get("name"), "arguments": fn.get("arguments"), "ok": result.ok,
                                  "wrote": result.wrote, "violations": list(result.violations),
                                  "internal_error": result.internal_error, "content": result.content})
            out.append({"role": "tool", "tool_call_id": call.get("id", ""),
                        "content": render_result(result.content)})
        return out


class Environment(ToolEnvironment):
    """One environment (its tools and seeded database); each ``reset`` starts an episode on a fresh copy."""

    def __init__(self, env_record: dict[str, Any], max_steps: int = 40, workdir: str | None = None) -> None:
        self.record = env_record
        self.domain = domain_for(env_record)
        self.executor = Executor(self.domain)
        self.tool_names = list(env_record["tool_names"])
        self.schemas = offered_schemas(env_record, self.domain)
        self.max_steps = max_steps
        self._db = bytes(env_record["db"])
        self._dir = workdir or tempfile.mkdtemp(prefix="gymforge-episode-")
        self._engine = None
        self._path: str | None = None
        self._db_key = hashlib.sha256(self._db).hexdigest()  # of the bytes themselves, never a stored field
        self._episodes = 0
        self.done = True  # until reset

    # -- episode lifecycle -------------------------------------------------------------------------------------
    def _fresh_db(self) -> None:
        self.close()
        self._episodes += 1
        self._path = os.path.join(self._dir, f"episode-{self._episodes}.sqlite")
        with open(self._path, "wb") as fh:
            fh.write(self._db)
        raw = sqlite3.connect(self._path, check_same_thread=False)
        # An episode's database is a disposable copy: no fsync per commit (it cost ~6 ms per tool call).
        raw.execute("PRAGMA synchronous=OFF")
        raw.execute("PRAGMA journal_mode=MEMORY")
        self._raw = raw
        self._engine = sqlite_engine(raw)
        # Tools compare against the database's own now, never the wall clock (databases built before the clock
        # table existed carry it in the record only).
        try:
            now = raw.execute(f"SELECT now FROM {CLOCK_TABLE}").fetchone()[0]
        except sqlite3.OperationalError:
            now = self.record["now"]
        self.now = datetime.fromisoformat(now)

    def close(self) -> None:
        if self._engine is not None:
            self._raw.close()
            self._engine = None
        if self._path and os.path.exists(self._path):
            os.remove(self._path)
            self._path = None

    def __del__(self) -> None:
        try:
            self.close()
            os.rmdir(self._dir)
        except OSError:
            pass

    def reset(self, task: dict[str, Any], user: UserSimulator | None = None) -> Observation:
        self.task = task
        self.rubric = json_field(task["rubric"])
        self.golden_writes = {a["name"] for a in json_field(task["golden_actions"]) if self.domain.tools[a["name"]].is_write}
        self.user = user or ProfileUserSimulator(task)
        self._fresh_db()
        self.tool_log: list[dict[str, Any]] = []
        self.said: list[str] = []
        self.steps = 0
        self.done = False
        self.user_error = False
        first = [{"role": "system", "content": task["system_prompt"]}, {"role": "user", "content": self.user.first_message()}]
        self.messages = list(first)
        return Observation(first, self.schemas)

    def call_tool(self, name: str, arguments: Any) -> ToolResult:
        """Run one tool call on this episode's database (override to inject tool noise)."""
        if name not in self.tool_names:
            return ToolResult({"error": f"unknown tool {name!r}; available tools are listed in the tool schemas"})
        return call_tool(self.executor, self._engine.begin, name, arguments, self.now)

    @property
    def final_write_done(self) -> bool:
        done = {c["name"] for c in self.tool_log if c["wrote"]}
        return self.golden_writes <= done

    def respond(self, text: str) -> tuple[list[dict[str, Any]], bool]:
        """The user's reply (grounded in the task's facts, never ending before the final write)."""
        self.said.append(text)
        try:
            answer, ended = self.user.reply(text, self.final_write_done)
        except Exception:  # noqa: BLE001 - an LLM-backed simulator can fail; never the agent's fault
            answer, ended, self.user_error = "", True, True
        return ([] if ended else [{"role": "user", "content": answer}]), ended

    # -- scoring -----------------------------------------------------------------------------------------------
    def _before_state(self, tables: tuple[str, ...]) -> State:
        """The seeded database's canonical state, shared by every Environment over the same bytes (agent loops
        build one Environment per episode)."""
        key = (self._db_key, tables)
        if key not in _BEFORE:
            engine = engine_from_bytes(self._db)
            with engine.connect() as conn:
                _BEFORE[key] = canonical_state(conn, self.domain, list(tables))
            engine.dispose()
            while len(_BEFORE) > _BEFORE_LIMIT:
                _BEFORE.pop(next(iter(_BEFORE)))
        return _BEFORE[key]

    def score(self) -> EpisodeScore:
        """Score the episode as it stands (also used when an episode is cut off)."""
        self.done = True
        tables = tuple(self.rubric["tables"])
        with self._engine.connect() as conn:
            after = canonical_state(conn, self.domain, list(tables))
        diff = diff_states(self._before_state(tables), after, self.domain)
        expected = self.rubric["expected_diff"]
        customer_problem = None
        if self.rubric.get("customer") is not None:  # a task acted for one customer (envgen.customers)
            with self._engine.connect() as conn:
                customer_problem = customer_policy_problem(self.domain, conn, self.tool_log)
        components = {
            "db_state": float(json.loads(json.dumps(diff, default=str)) == expected),
            "required_outputs": float(required_outputs_met(self.rubric["required_outputs"], self.said)),
            "policy": float(not any(c["violations"] for c in self.tool_log) and customer_problem is None),
        }
        components = {k: v for k, v in components.items() if k in self.rubric.get("components", components)}
        reward = math.prod(components.values(), start=1.0)
        failure = None
        if reward < 1.0:
            if any(c["internal_error"] for c in self.tool_log):
                failure = "tool"
            elif self.user_error:
                failure = "user"
            else:
                failure = "agent"
        info = {"reward_components": components, "failure": failure, "diff": diff, "steps": self.steps,
                "tool_calls": len(self.tool_log), "tool_errors": sum(not c["ok"] for c in self.tool_log),
                "violations": sorted({v for c in self.tool_log for v in c["violations"]}
                                     | ({customer_problem} if customer_problem else set()))}
        return EpisodeScore(reward, components, failure, self.messages, info)


def outcome_message(task: dict[str, Any]) -> str:
    """The message a golden episode ends with: the task's required outputs told to the user."""
    outputs = ", ".join(str(v) for v in json_field(task["rubric"])["required_outputs"])
    return f"Your request is complete. Details: {outputs or 'none'}."


def replay(env: Environment | dict[str, Any], task: dict[str, Any], actions: list[dict[str, Any]] | None = None,
           final_message: str | None = None) -> EpisodeScore:
    """Run ``actions`` (default: the task's golden actions) as one tool call per assistant turn, then tell the user
    the required outputs, and score. Used by the verifier, ``gymforge envgen replay`` and the bench."""
    env = env if isinstance(env, Environment) else Environment(env)
    env.reset(task)
    actions = actions if actions is not None else json_field(task["golden_actions"])
    turns = []
    for i, a in enumerate(actions):
        args = a["arguments"] if isinstance(a["arguments"], str) else json.dumps(a["arguments"])
        call = {"id": f"call_{i}", "type": "function", "function": {"name": a["name"], "arguments": args}}
        turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
    text = final_message if final_message is not None else outcome_message(task)
    turns.append({"role": "assistant", "content": text})
    for turn in turns:
        _, reward, done, info = env.step(turn)
        if done:
            return EpisodeScore(reward, info["reward_components"], info["failure"], env.messages, info)
    return env.score()
