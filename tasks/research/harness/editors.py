"""Assembly and editing (LongCat-DeepResearch, section 3.1): sections are assembled mechanically in spec order,
keeping their text and citations even where they overlap; the Global Editor reads the whole draft, assigns
ownership of repeated material by section id, names conflicts and writes directives; a Local Editor per directed
section applies them to that section only.

The harness holds the editors to their scope: a directive naming a section that does not exist (or was not
researched) is dropped; a Local Editor's reply replaces its own section and nothing else, and only when it is a
usable section (no heading, no citation of a document the draft does not already cite, none dangling) —
otherwise the section keeps its researched text and the rejection is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tasks.research.harness import prompts
from tasks.research.harness.research_spec import ResearchSpec, extract_json
from tasks.research.harness.researchers import SectionOutcome, section_problems
from tasks.research.harness.session import Session
from tasks.research.harness.text import CITATION

ACTIONS = ("cross_reference", "resolve_conflict", "revise")


@dataclass
class Edit:
    texts: dict[str, str]
    directives: list[dict[str, Any]] = field(default_factory=list)
    ownership: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """One per directive dropped and per Local Editor reply: what the harness did with it and why."""


def assemble(spec: ResearchSpec, outcomes: dict[str, SectionOutcome], texts: dict[str, str] | None = None) -> str:
    """The report in spec order: headings keep the section ids (cross-references name them), each researched
    section its text, a failed one a note saying why."""
    texts = texts if texts is not None else {s: o.text for s, o in outcomes.items() if o.text}
    lines = [f"# {spec.title}", ""]
    leaves = {s.id for s in spec.leaves()}
    for s in spec.sections:
        lines += ["#" * (spec.depth(s.id) + 1) + f" {s.id} {s.title}", ""]
        if s.id in leaves:
            outcome = outcomes.get(s.id)
            body = texts.get(s.id) or f"*Not researched: {outcome.reason if outcome else 'not dispatched'}*"
            lines += [body.strip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def parse_directives(text: str | None, sections: set[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Global Editor's decisions, its directives limited to researched sections; the dropped ones with why."""
    try:
        data = extract_json(text or "")
    except ValueError as exc:
        return {"ownership": [], "conflicts": [], "directives": []}, [{"dropped": "reply", "reason": str(exc)}]
    if not isinstance(data, dict):
        return {"ownership": [], "conflicts": [], "directives": []}, [{"dropped": "reply", "reason": "not an object"}]
    kept, dropped = [], []
    for d in data.get("directives") or []:
        if not isinstance(d, dict) or str(d.get("section")) not in sections:
            dropped.append({"dropped": d, "reason": "names no researched section"})
        elif d.get("action") not in ACTIONS:
            dropped.append({"dropped": d, "reason": f"unknown action; actions are {', '.join(ACTIONS)}"})
        else:
            kept.append(d)
    lists = {k: [x for x in data.get(k) or [] if isinstance(x, dict)] for k in ("ownership", "conflicts")}
    return {**lists, "directives": kept}, dropped


def edit(session: Session, query: str, spec: ResearchSpec, outcomes: dict[str, SectionOutcome],
         depends_on: list[str]) -> Edit:
    """The Global Editor on the assembled draft, then a Local Editor per section it directs."""
    texts = {s: o.text for s, o in outcomes.items() if o.status == "complete" and o.text}
    draft = assemble(spec, outcomes)
    session.note("assembly", draft=draft)
    editor = session.role_call("edit/global", "global_editor",
                               prompts.global_editor_input(query, spec.model_dump(), draft), depends_on=depends_on)
    result = session.run([editor])[0]
    decisions, dropped = parse_directives(result.output if result.status == "complete" else "", set(texts))
    out = Edit(dict(texts), decisions["directives"], decisions["ownership"], decisions["conflicts"],
               [{"decision": "directive_dropped", **d} for d in dropped])
    if result.status != "complete":
        out.decisions.append({"decision": "global_editor_failed", "reason": result.error})
    by_section: dict[str, list[dict[str, Any]]] = {}
    for d in out.directives:
        by_section.setdefault(str(d["section"]), []).append(d)
    calls = [session.role_call(f"edit/local/{sid}", "local_editor",
                               prompts.local_editor_input(spec.model_dump(), draft, sid, texts[sid], directives),
                               branch=sid, depends_on=[editor.call_id, outcomes[sid].call_id])
             for sid, directives in by_section.items()]
    cited = set(CITATION.findall(draft))
    for call, local in zip(calls, session.run(calls), strict=True):
        sid = str(call.branch)
        problems = ([local.error or "failed"] if local.status != "complete"
                    else section_problems(local.output, session.index, session.excluded))
        foreign = sorted(set(CITATION.findall(local.output or "")) - cited)
        if foreign:
            problems.append(f"it cites {', '.join(foreign)}, which the draft does not")
        if problems:
            out.decisions.append({"decision": "edit_rejected", "section": sid, "call_id": call.call_id,
                                  "reason": "; ".join(problems)})
        else:
            out.texts[sid] = str(local.output).strip()
            out.decisions.append({"decision": "edit_applied", "section": sid, "call_id": call.call_id})
    session.note("editing", directives=out.directives, ownership=out.ownership, conflicts=out.conflicts,
                 decisions=out.decisions)
    return out
