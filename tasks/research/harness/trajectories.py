"""Research trajectories (LongCat-DeepResearch, section 3.2): every role call of a teacher's run, filtered and
written as rows of the project's ``trajectory`` record.

A call's trajectory is kept only when it passes three checks (the report's filter): role identity (the first
message is exactly its role's system prompt, a role without tools made no tool call), tool-call/response closure
(every tool call answered by exactly one tool message, no answer without its call, the conversation ending in a
reply without tool calls), and artifact validity (its output is what the role must produce: a valid spec, a
readable critique or directive set, a usable section). Runs keep their status (complete, partial, failed)
distinct in the ``research_run`` record; each call's status and the filter's verdict are in ``research_call``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from envgen.trajectory_checks import RESEARCH
from tasks.research.harness.editors import parse_directives
from tasks.research.harness.planning import parse_issues
from tasks.research.harness.prompts import ROLES
from tasks.research.harness.research_spec import parse_research_spec
from tasks.research.harness.researchers import section_problems
from tasks.research.harness.roles import RoleResult
from tasks.research.harness.run import ResearchRun
from tasks.research.search import TOOL_SCHEMAS, SearchIndex

SOURCE = "research"
VERIFIER = RESEARCH


def identity_problems(result: RoleResult) -> list[str]:
    role = ROLES.get(result.role)
    if role is None:
        return [f"unknown role {result.role!r}"]
    m = result.messages
    if len(m) < 2 or m[0].get("role") != "system" or m[0].get("content") != role.system or m[1].get("role") != "user":
        return [f"the conversation does not open with the {result.role} system prompt and its inputs"]
    if not role.tools and any(x.get("tool_calls") for x in m):
        return [f"the {result.role} has no tools but called one"]
    return []


def closure_problems(messages: Sequence[dict[str, Any]]) -> list[str]:
    problems, open_calls = [], {}
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            if open_calls:
                problems.append(f"message {i}: calls {sorted(open_calls)} were never answered")
                open_calls = {}
            open_calls = {c.get("id"): i for c in m.get("tool_calls") or []}
        elif m.get("role") == "tool":
            if m.get("tool_call_id") not in open_calls:
                problems.append(f"message {i}: a tool result answers no open call ({m.get('tool_call_id')!r})")
            else:
                open_calls.pop(m["tool_call_id"])
    last = messages[-1] if messages else {}
    if open_calls or last.get("role") != "assistant" or last.get("tool_calls"):
        problems.append("the conversation does not end with a reply without tool calls")
    return problems


def artifact_problems(result: RoleResult, index: SearchIndex, excluded: Sequence[str]) -> list[str]:
    output = ROLES[result.role].output
    text = result.output or ""
    if output == "spec":
        return [str(p) for p in parse_research_spec(text)[1]]
    if output == "issues":
        return parse_issues(text)[1]
    if output == "directives":
        return [d["reason"] for d in parse_directives(text, set())[1] if d["dropped"] == "reply"]
    return section_problems(text, index, excluded)


def call_problems(result: RoleResult, index: SearchIndex, excluded: Sequence[str]) -> list[str]:
    if result.status != "complete":
        return [f"the call failed: {result.error}"]
    return (identity_problems(result) or closure_problems(result.messages)
            or artifact_problems(result, index, excluded))


def trajectory_rows(run: ResearchRun, index: SearchIndex, topic: str | None = None,
           count: Callable[[Sequence[dict[str, Any]], Sequence[dict[str, Any]]], int] | None = None,
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(trajectory rows kept, trajectory rows filtered out with their reason, research_call rows) of a run;
    ``topic`` is the task's, the rows' domain; ``count(messages, tools)`` gives a row's tokens."""
    kept, rejected, calls = [], [], []
    for result in run.calls:
        problems = call_problems(result, index, run.excluded) if result.role in ROLES else ["unknown role"]
        row_id = f"{run.run_id}/{result.call_id}"
        row = {
            "id": row_id, "source": SOURCE, "env_id": None, "task_id": None, "seed_id": run.task_id,
            "domain": topic, "messages": json.dumps(result.messages, ensure_ascii=False),
            "tools": json.dumps(tools := TOOL_SCHEMAS if ROLES.get(result.role) and ROLES[result.role].tools else []),
            "train": [m.get("role") == "assistant" for m in result.messages],
            "verified": not problems, "verifier": f"{VERIFIER} ({result.role})", "parent_id": None,
            "transform": None, "transform_settings": None,
            "tokens": count(result.messages, tools) if count is not None else None,
            "verify_input": json.dumps({"role": result.role, "run_id": run.run_id, "call_id": result.call_id,
                                        "teacher": run.teacher, "harness": run.harness,
                                        "excluded_doc_ids": run.excluded}),
            "env_db": None,
        }
        if problems:
            rejected.append({**row, "reason": "not_verified: " + "; ".join(problems)[:500]})
        else:
            kept.append(row)
        calls.append({"id": row_id, "run_id": run.run_id, "call_id": result.call_id, "role": result.role,
                      "branch": result.branch, "depends_on": list(result.depends_on), "status": result.status,
                      "error": result.error, "attempts": result.attempts, "tool_calls": result.tool_calls,
                      "teacher": run.teacher, "harness": run.harness, "kept": not problems,
                      "filter_reason": "; ".join(problems)[:500] or None})
    return kept, rejected, calls
