"""The search environment: question answering over a local search index, behind the tool environments' interface.

``env = SearchEnvironment(index)`` then ``obs = env.reset(task)`` -> ``Observation(messages, tools)`` (system
prompt + the question), ``obs, reward, done, info = env.step(assistant_message)``; ``areset``/``astep``,
``call_tool(name, args)`` (the seam tool-noise wrappers override), ``score()`` and ``close()`` as in
``envgen.environment.Environment``, so the agent loop, context management and RL use it unchanged.

A task is ``{task_id, question, answer, aliases, excluded_doc_ids?, system_prompt?}`` (lists may be JSON
strings). ``excluded_doc_ids`` hide documents from every tool (a research task constructed from an article
excludes that article, LongCat-DeepResearch section 3.2): search never returns them, and open/read
answer exactly as for an unknown id. The episode ends when the assistant answers without a tool call; the
reward is the two-way match of its last ``\\boxed{}`` against the answer and aliases (component ``answer``),
and a wrong or missing answer is an ``agent`` failure, a ``tool`` failure when a tool itself broke.

Tools (schemas derived from their argument models): ``search(query, k)`` -> doc ids, titles and snippets;
``open(doc_id)`` -> the outline (title, section names and first lines); ``read(doc_id, section)`` -> one
section. Hostile arguments (unknown ids, k out of range, wrong types, oversize strings, malformed JSON) get an
error the agent sees; a tool call never raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from data_contracts.stage import Params
from envgen.environment import EpisodeScore, Observation, ToolEnvironment, json_field
from envgen.rewards import BOXED_INSTRUCTION, extract_boxed, score_two_way
from envgen.tools import ToolError, ToolResult, parse_arguments
from tasks.research.search.corpus import Document, Section
from tasks.research.search.index import SearchIndex, clip

MAX_K = 20
MAX_QUERY_CHARS = 500
MAX_ID_CHARS = 500
FIRST_LINE_CHARS = 120

SYSTEM_PROMPT = (
    "Answer the question using the document collection. Tools: search(query, k) finds documents and shows a "
    "snippet of each; open(doc_id) shows a document's outline; read(doc_id, section) returns one section. A "
    "question may need several documents: follow what one says to the next. When you know the answer, reply "
    f"without a tool call. {BOXED_INSTRUCTION}"
)


class SearchConfig(Params):
    max_steps: int = Field(30, gt=0, description="assistant turns before the episode is cut off and scored")
    read_chars: int = Field(6000, gt=0, description="longest section text read returns; longer ones are cut")
    system_prompt: str = Field(SYSTEM_PROMPT, min_length=1,
                               description="the agent's instructions, unless the task carries its own")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchArgs(_Args):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="keywords or a question")
    k: int = Field(5, ge=1, le=MAX_K, description="how many documents to return")


class OpenArgs(_Args):
    doc_id: str = Field(min_length=1, max_length=MAX_ID_CHARS, description="a doc_id from search results")


class ReadArgs(_Args):
    doc_id: str = Field(min_length=1, max_length=MAX_ID_CHARS, description="a doc_id from search results")
    section: Annotated[str, StringConstraints(max_length=MAX_ID_CHARS)] | int = Field(
        description="a section name from open(doc_id), or its number (1 is the first)")


@dataclass(frozen=True)
class SearchTool:
    name: str
    description: str
    args: type[_Args]
    run: Callable[[SearchEnvironment, Any], dict[str, Any]]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema, derived from the argument model (pydantic's generated titles
        dropped: noise in a prompt)."""
        params = self.args.model_json_schema()
        params.pop("title")
        for prop in params["properties"].values():
            prop.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}


def _first_line(text: str) -> str:
    return clip(text.strip().splitlines()[0] if text.strip() else "", FIRST_LINE_CHARS)


def _section(doc: Document, wanted: str | int) -> Section:
    """By name (exact, then ignoring case) or by 1-based number."""
    sections = doc.sections
    by_name = {s.name: s for s in sections}
    key = str(wanted).strip()
    if key in by_name:
        return by_name[key]
    folded = {s.name.casefold(): s for s in sections}
    if key.casefold() in folded:
        return folded[key.casefold()]
    if key.isdecimal() and 1 <= int(key) <= len(sections):
        return sections[int(key) - 1]
    names = ", ".join(repr(s.name) for s in sections[:30])
    raise ToolError(f"document {doc.doc_id!r} has no section {key[:80]!r}; its sections are {names}")


def _search(env: SearchEnvironment, args: SearchArgs) -> dict[str, Any]:
    hits = env.index.search(args.query, args.k, exclude=env.excluded)
    results = [{"doc_id": h.doc_id, "title": h.title, "snippet": h.snippet} for h in hits]
    if not results:
        return {"results": [], "note": "no document matches these words; try other keywords"}
    return {"results": results}


def _open(env: SearchEnvironment, args: OpenArgs) -> dict[str, Any]:
    doc = env.document(args.doc_id)
    return {"doc_id": doc.doc_id, "title": doc.title,
            "sections": [{"name": s.name, "first_line": _first_line(s.text)} for s in doc.sections]}


def _read(env: SearchEnvironment, args: ReadArgs) -> dict[str, Any]:
    doc = env.document(args.doc_id)
    section = _section(doc, args.section)
    text = section.text[: env.config.read_chars]
    out = {"doc_id": doc.doc_id, "title": doc.title, "section": section.name, "text": text}
    if len(section.text) > len(text):
        out["truncated"] = f"the first {len(text)} of {len(section.text)} characters"
    return out


TOOLS: dict[str, SearchTool] = {t.name: t for t in (
    SearchTool("search", "Search the document collection; returns doc ids, titles and a snippet of each hit.",
               SearchArgs, _search),
    SearchTool("open", "Show a document's outline: its title, section names and the first line of each.",
               OpenArgs, _open),
    SearchTool("read", "Return the text of one section of a document.", ReadArgs, _read),
)}
TOOL_SCHEMAS = [t.schema() for t in TOOLS.values()]


def _invalid(tool: SearchTool, exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in exc.errors()[:5]]
    allowed = ", ".join(tool.args.model_fields)
    return f"invalid arguments for {tool.name} ({'; '.join(parts)}); parameters: {allowed}"


class SearchEnvironment(ToolEnvironment):
    """Episodes of question answering over one opened index (shared by every episode; it is read-only). An
    assistant message without tool calls is the final answer: it ends the episode."""

    def __init__(self, index: SearchIndex, config: SearchConfig | None = None) -> None:
        self.index = index
        self.config = config or SearchConfig()
        self.schemas = list(TOOL_SCHEMAS)
        self.max_steps = self.config.max_steps
        self.excluded: frozenset[str] = frozenset()

    def reset(self, task: dict[str, Any]) -> Observation:
        self.task = task
        self.golds = [str(task["answer"]), *(str(a) for a in json_field(task.get("aliases")) or [])]
        self.excluded = frozenset(str(d) for d in json_field(task.get("excluded_doc_ids")) or [])
        self.tool_log: list[dict[str, Any]] = []
        self.final_text: str | None = None
        self.steps = 0
        self.done = False
        first = [{"role": "system", "content": task.get("system_prompt") or self.config.system_prompt},
                 {"role": "user", "content": str(task["question"])}]
        self.messages = list(first)
        return Observation(first, self.schemas)

    def document(self, doc_id: str) -> Document:
        """A document the task may see; an excluded one is refused exactly like an unknown id."""
        if doc_id in self.excluded or doc_id not in self.index:
            raise ToolError(f"no document with doc_id {doc_id[:80]!r}; use a doc_id from search results")
        return self.index.document(doc_id)

    def call_tool(self, name: str, arguments: Any) -> ToolResult:
        """Run one tool call (override to inject tool noise)."""
        tool = TOOLS.get(name) if isinstance(name, str) else None
        if tool is None:
            return ToolResult({"error": f"unknown tool {str(name)[:80]!r}; the tools are {', '.join(TOOLS)}"})
        try:
            args = tool.args.model_validate(parse_arguments(arguments))
        except ValidationError as exc:
            return ToolResult({"error": _invalid(tool, exc)})
        except (ToolError, ValueError) as exc:  # ValueError: json refuses integers over 4,300 digits
            return ToolResult({"error": f"unusable arguments for {tool.name}: {exc}"})
        try:
            return ToolResult(tool.run(self, args))
        except ToolError as exc:
            return ToolResult({"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a failure of the index itself is never the agent's
            return ToolResult({"error": f"{name} failed: {type(exc).__name__}"}, internal_error=True)

    def respond(self, text: str) -> tuple[list[dict[str, Any]], bool]:
        self.final_text = text
        return [], True

    def score(self) -> EpisodeScore:
        """Score the episode as it stands (also used when an episode is cut off: no answer scores 0)."""
        self.done = True
        answer = extract_boxed(self.final_text) if self.final_text is not None else None
        components = {"answer": float(score_two_way(answer, self.golds))}
        reward = math.prod(components.values(), start=1.0)
        failure = None
        if reward < 1.0:
            failure = "tool" if any(c["internal_error"] for c in self.tool_log) else "agent"
        info = {"reward_components": components, "failure": failure, "answer": answer, "steps": self.steps,
                "tool_calls": len(self.tool_log), "tool_errors": sum(not c["ok"] for c in self.tool_log)}
        return EpisodeScore(reward, components, failure, self.messages, info)
