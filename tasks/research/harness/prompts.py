"""Every role's prompt, in one place (open_deep_research keeps its prompts in one module too).

A role is identified by its system prompt, exactly: the trajectory filter checks each recorded call against it
(role identity), and the reference teacher reads it to know which role it plays. Inputs go in the user message as
tagged blocks (``<query>...</query>``), which models read well and :func:`parse_inputs` reads back; structured
inputs (specs, assignments, directives) are JSON inside their block.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

RoleName = Literal["planning_writer", "planning_judge", "critic", "reviser", "researcher", "global_editor",
                   "local_editor"]
Output = Literal["spec", "issues", "section", "directives", "edit"]

CITATION_RULE = (
    "Cite the collection for every factual sentence with [cite:DOC_ID] before the sentence's final punctuation, "
    "using doc ids exactly as the tools returned them, e.g. 'The company was founded in 1919 [cite:E380].' Cite "
    "only documents you read and only for what they state."
)
SPEC_FORMAT = (
    "Reply with the ResearchSpec as one JSON object in a ```json block: {\"query\", \"title\", \"boundaries\": "
    "[...], \"sections\": [{\"id\", \"parent\", \"order\", \"title\", \"scope\", \"research_questions\": [...], "
    "\"required_entities\": [...], \"source_leads\": [doc ids]}]}. Ids are hierarchical (S1, S1.2), unique, "
    "numbered 1..n among siblings in order; a subsection names its parent; parents come before children. Every "
    "section without subsections is one Researcher's assignment and needs a scope and research questions."
)


@dataclass(frozen=True)
class Role:
    name: RoleName
    system: str
    tools: bool
    output: Output


ROLES: dict[str, Role] = {r.name: r for r in (
    Role("planning_writer", (
        "You are a Planning Writer of a deep-research team. Explore the document collection briefly with the "
        "search, open and read tools, from the perspective you are given, then propose a candidate research plan "
        "(a ResearchSpec) for the query: the report's sections, what each covers, the questions its researcher "
        "must answer, the entities or cases it must treat, and the documents to start from. " + SPEC_FORMAT),
        True, "spec"),
    Role("planning_judge", (
        "You are the Planning Judge of a deep-research team. Consolidate the candidate ResearchSpecs of the "
        "planning writers into one plan: keep every distinct question, entity and source lead, merge sections "
        "that cover the same material, and order the sections as the report should read. " + SPEC_FORMAT),
        False, "spec"),
    Role("critic", (
        "You are the Critic of a deep-research team. Search the collection for what the ResearchSpec misses: "
        "questions, entities or cases the report needs that no section covers. Reply with one JSON object in a "
        "```json block: {\"issues\": [{\"id\": \"HP1\", \"section\": an existing section id that should take it, "
        "\"entity\": the missing entity or case, \"question\": the research question to add, \"source_lead\": a "
        "doc id, \"reason\": why}]} (an empty list when nothing is missing)."),
        True, "issues"),
    Role("reviser", (
        "You are the Reviser of a deep-research team. Apply the Critic's issues to the ResearchSpec: add each "
        "missing entity, question and source lead to the section the issue names, expanding existing assignments "
        "rather than adding sections. Keep everything else as it is. " + SPEC_FORMAT),
        False, "spec"),
    Role("researcher", (
        "You are a Researcher of a deep-research team. You are given the query, the whole ResearchSpec and one "
        "assignment. Gather evidence for your assignment with the search, open and read tools, then write the "
        "complete text of your section only: plain paragraphs, no heading (the report adds it), covering its "
        "scope, questions and required entities from the evidence you read. " + CITATION_RULE),
        True, "section"),
    Role("global_editor", (
        "You are the Global Editor of a deep-research team. Read the assembled draft against the ResearchSpec. "
        "Assign ownership of material repeated across sections to one section, identify conflicting statements, "
        "and write directives for the sections that must change. Reply with one JSON object in a ```json block: "
        "{\"ownership\": [{\"material\", \"owner\", \"others\": [ids]}], \"conflicts\": [{\"sections\": [ids], "
        "\"description\"}], \"directives\": [{\"section\": id, \"action\": \"cross_reference\" | "
        "\"resolve_conflict\" | \"revise\", \"material\": the passage concerned, \"owner\": id or null, "
        "\"instruction\"}]}."),
        False, "directives"),
    Role("local_editor", (
        "You are a Local Editor of a deep-research team. Apply the Global Editor's directives to your section "
        "only, using the draft and the ResearchSpec as context and only facts and citations already in the draft. "
        "Reply with the revised text of your section alone: plain paragraphs, no heading, citations kept. "
        + CITATION_RULE),
        False, "edit"),
)}

PERSPECTIVES = (
    "the subject itself: what it is, its attributes, and what it is directly linked to",
    "its connections: the people, organisations, works, places and events that point to it",
    "the wider context: the neighbours of its direct links and how they relate back to the subject",
)
"""Planning writers' perspectives, one per writer in turn (perspective-guided planning, as in STORM)."""

REPAIR_INSTRUCTION = (
    "Your previous reply is not a valid ResearchSpec. Fix every problem listed and reply with the whole corrected "
    "ResearchSpec in a ```json block."
)


def role_of(system_prompt: str) -> Role | None:
    """The role whose system prompt this is, exactly; None for any other text."""
    for role in ROLES.values():
        if role.system == system_prompt:
            return role
    return None


def render_inputs(blocks: Mapping[str, Any]) -> str:
    """Tagged blocks, one per input; non-string values as indented JSON."""
    parts = []
    for tag, value in blocks.items():
        body = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
        parts.append(f"<{tag}>\n{body}\n</{tag}>")
    return "\n\n".join(parts)


_BLOCK = re.compile(r"<([a-z_]+)>\n(.*?)\n</\1>", re.DOTALL)


def parse_inputs(text: str) -> dict[str, str]:
    """The tagged blocks of a user message (the first block of each tag)."""
    found: dict[str, str] = {}
    for tag, body in _BLOCK.findall(text):
        found.setdefault(tag, body)
    return found


def writer_input(query: str, perspective: str, max_sections: int) -> str:
    return render_inputs({"query": query, "perspective": perspective,
                          "limits": f"at most {max_sections} sections without subsections"})


def judge_input(query: str, candidates: list[dict[str, Any]]) -> str:
    return render_inputs({"query": query, "candidate_specs": candidates})


def critic_input(query: str, spec: dict[str, Any]) -> str:
    return render_inputs({"query": query, "research_spec": spec})


def reviser_input(query: str, spec: dict[str, Any], issues: list[dict[str, Any]]) -> str:
    return render_inputs({"query": query, "research_spec": spec, "critic_issues": issues})


def repair_input(original_user: str, reply: str, problems: list[str]) -> str:
    return render_inputs({"original_request": original_user, "previous_reply": reply,
                          "problems": "\n".join(problems), "instruction": REPAIR_INSTRUCTION})


def researcher_input(query: str, spec: dict[str, Any], assignment: dict[str, Any]) -> str:
    return render_inputs({"query": query, "research_spec": spec, "assignment": assignment})


def global_editor_input(query: str, spec: dict[str, Any], draft: str) -> str:
    return render_inputs({"query": query, "research_spec": spec, "draft": draft})


def local_editor_input(spec: dict[str, Any], draft: str, section_id: str, text: str,
                       directives: list[dict[str, Any]]) -> str:
    return render_inputs({"research_spec": spec, "draft": draft, "section_id": section_id, "section_text": text,
                          "directives": directives})
