"""ResearchSpec: the executable research plan of the deep-research harness (LongCat-DeepResearch, section 3.1).

A spec records each section's scope ("What to Cover"), research questions, required entities or cases and
provisional source leads (corpus doc ids). Every section has a unique hierarchical id (``S1``, ``S1.2``); the
leaves are the dispatchable units a Researcher gets, the inner sections are headings.

Before dispatch the validators check (report, section 3.1): id uniqueness, that parents exist (and are the id's
prefix), consecutive ordering, and the required fields. ``resolve`` turns a planner's raw output into a valid spec:
parse, validate, repair (mechanical renumbering first, then the model asked to fix the named problems, bounded),
else revert to the last valid candidate; with none, :class:`ResearchSpecError` stops dispatch naming every problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ID_PATTERN = re.compile(r"^S[1-9][0-9]*(\.[1-9][0-9]*)*$")
_JSON_BLOCK = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)

ProblemKind = Literal["malformed", "schema", "no_sections", "bad_id", "duplicate_id", "missing_parent",
                      "parent_mismatch", "ordering", "missing_field"]
PROBLEM_KINDS: tuple[str, ...] = ProblemKind.__args__  # type: ignore[attr-defined]
STRUCTURAL = frozenset({"bad_id", "duplicate_id", "missing_parent", "parent_mismatch", "ordering"})
"""Problems a mechanical renumbering of the section tree repairs; the others need the planner."""


class SpecSection(BaseModel):
    """One section of the plan; a leaf is one Researcher's assignment."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="hierarchical id: S1, S1.2, S1.2.3 (unique; a child's id extends its parent's)")
    parent: str | None = Field(None, description="the parent section's id; null for a top-level section")
    order: int = Field(description="1-based position among its siblings (consecutive)")
    title: str = Field(description="the section's heading")
    scope: str = Field("", description="What to Cover: the section's responsibility in the report")
    research_questions: list[str] = Field(default_factory=list, description="what its Researcher must answer")
    required_entities: list[str] = Field(default_factory=list,
                                         description="entities or cases the section must treat")
    source_leads: list[str] = Field(default_factory=list,
                                    description="provisional corpus doc ids to start from; still to be verified")


class ResearchSpec(BaseModel):
    """The plan: the query, the report's title and shared boundaries, and the sections in report order."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="the research query as the user asked it")
    title: str = Field(description="the report's title")
    boundaries: list[str] = Field(default_factory=list,
                                  description="shared limits every section respects (scope, cut-off, sources)")
    sections: list[SpecSection] = Field(description="every section, parents before children, in report order")

    def section(self, section_id: str) -> SpecSection:
        for s in self.sections:
            if s.id == section_id:
                return s
        raise KeyError(f"the spec has no section {section_id!r}")

    def children(self, section_id: str | None) -> list[SpecSection]:
        return [s for s in self.sections if s.parent == section_id]

    def leaves(self) -> list[SpecSection]:
        """The dispatchable sections, in report order."""
        parents = {s.parent for s in self.sections}
        return [s for s in self.sections if s.id not in parents]

    def depth(self, section_id: str) -> int:
        return section_id.count(".") + 1

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), ensure_ascii=False, indent=1)


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    message: str
    section: str | None = None

    def __str__(self) -> str:
        where = f"section {self.section}: " if self.section else ""
        return f"[{self.kind}] {where}{self.message}"


class ResearchSpecError(ValueError):
    """No valid ResearchSpec could be had: dispatch stops; the message names every problem."""

    def __init__(self, problems: Sequence[Problem], context: str = "") -> None:
        self.problems = list(problems)
        head = f"{context}: " if context else ""
        super().__init__(f"{head}the ResearchSpec is invalid and was neither repaired nor reverted "
                         f"({len(self.problems)} problem(s)):\n" + "\n".join(f"  {p}" for p in self.problems))


# --- parsing and validation ------------------------------------------------------------------------------------


def extract_json(text: str) -> Any:
    """The JSON object of a planner's reply: a fenced json block, else the outermost ``{...}``; raises
    ValueError when there is none that parses."""
    blocks = _JSON_BLOCK.findall(text)
    candidates = blocks or ([text[text.index("{"): text.rindex("}") + 1]] if "{" in text and "}" in text else [])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError("no JSON object found in the reply" if not candidates else "the JSON object does not parse")


def parse_research_spec(text: str) -> tuple[ResearchSpec | None, list[Problem]]:
    """A spec from a reply (or JSON text) and its problems; ``None`` when it is not a spec at all."""
    try:
        data = extract_json(text)
    except ValueError as exc:
        return None, [Problem("malformed", str(exc))]
    return spec_from_data(data)


def spec_from_data(data: Any) -> tuple[ResearchSpec | None, list[Problem]]:
    try:
        spec = ResearchSpec.model_validate(data)
    except ValidationError as exc:
        problems = [Problem("schema", f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}")
                    for e in exc.errors()[:20]]
        return None, problems
    return spec, validate_spec(spec)


def validate_spec(spec: ResearchSpec) -> list[Problem]:
    """Every problem of a parsed spec, each named by kind and section."""
    problems: list[Problem] = []
    if not spec.sections:
        return [Problem("no_sections", "the spec has no section")]
    if not spec.title.strip():
        problems.append(Problem("missing_field", "the report has no title"))
    ids = [s.id for s in spec.sections]
    seen: set[str] = set()
    for s in spec.sections:
        if not ID_PATTERN.match(s.id):
            problems.append(Problem("bad_id", f"id {s.id!r} is not hierarchical (S1, S1.2, ...)", s.id))
        if s.id in seen:
            problems.append(Problem("duplicate_id", f"id {s.id!r} is used by more than one section", s.id))
        seen.add(s.id)
    known = set(ids)
    for s in spec.sections:
        expected = s.id.rsplit(".", 1)[0] if "." in s.id else None
        if s.parent is not None and s.parent not in known:
            problems.append(Problem("missing_parent", f"parent {s.parent!r} does not exist", s.id))
        elif s.parent is None and expected is not None and ID_PATTERN.match(s.id):
            problems.append(Problem("missing_parent", f"a subsection needs its parent {expected!r}", s.id))
        elif s.parent != expected and ID_PATTERN.match(s.id):
            problems.append(Problem("parent_mismatch",
                                    f"parent is {s.parent!r} but the id says {expected!r}", s.id))
    problems += _ordering_problems(spec)
    parents = {s.parent for s in spec.sections}
    for s in spec.sections:
        if not s.title.strip():
            problems.append(Problem("missing_field", "no title", s.id))
        if s.id not in parents:  # a dispatchable section: its Researcher needs a scope and questions
            if not s.scope.strip():
                problems.append(Problem("missing_field", "no scope (What to Cover)", s.id))
            if not [q for q in s.research_questions if q.strip()]:
                problems.append(Problem("missing_field", "no research question", s.id))
    return problems


def _ordering_problems(spec: ResearchSpec) -> list[Problem]:
    """Siblings numbered 1..n in listed order, the id's last number equal to ``order``, a child listed after its
    parent (report order)."""
    problems = []
    position = {s.id: i for i, s in enumerate(spec.sections)}
    by_parent: dict[str | None, list[SpecSection]] = {}
    for s in spec.sections:
        by_parent.setdefault(s.parent, []).append(s)
    for parent, siblings in by_parent.items():
        orders = [s.order for s in siblings]
        if orders != list(range(1, len(siblings) + 1)):
            where = f"under {parent}" if parent else "at the top level"
            problems.append(Problem("ordering", f"sibling orders {orders} {where} are not 1..{len(siblings)} in "
                                                "listed order", parent))
        for s in siblings:
            last = s.id.rsplit(".", 1)[-1].lstrip("S")
            if ID_PATTERN.match(s.id) and last.isdecimal() and int(last) != s.order:
                problems.append(Problem("ordering", f"order {s.order} disagrees with the id's number {last}", s.id))
            if parent is not None and parent in position and position[parent] > position[s.id]:
                problems.append(Problem("ordering", f"listed before its parent {parent}", s.id))
    return problems


# --- repair and revert ------------------------------------------------------------------------------------------


def renumber(spec: ResearchSpec) -> ResearchSpec:
    """The mechanical repair of structural problems: rebuild the tree (a section's parent is its ``parent`` when
    that names an earlier section, else its id's prefix when that exists, else the top level) and number it
    afresh in listed order. Content is never changed; ids, parents and orders are."""
    first: dict[str, int] = {}
    for i, s in enumerate(spec.sections):
        first.setdefault(s.id, i)
    parent_of: list[int | None] = []
    for i, s in enumerate(spec.sections):
        prefix = s.id.rsplit(".", 1)[0] if "." in s.id else None
        candidates = [p for p in (s.parent, prefix) if p is not None and p in first and first[p] < i]
        parent_of.append(first[candidates[0]] if candidates else None)
    children: dict[int | None, list[int]] = {}
    for i, p in enumerate(parent_of):
        children.setdefault(p, []).append(i)
    new_ids: dict[int, str] = {}
    out: list[SpecSection] = []

    def visit(parent: int | None) -> None:
        for order, i in enumerate(children.get(parent, []), start=1):
            new_ids[i] = f"S{order}" if parent is None else f"{new_ids[parent]}.{order}"
            out.append(spec.sections[i].model_copy(update={
                "id": new_ids[i], "order": order, "parent": None if parent is None else new_ids[parent]}))
            visit(i)

    visit(None)
    return spec.model_copy(update={"sections": out})


@dataclass(frozen=True)
class Resolution:
    """How a spec was obtained: ``valid`` as written, ``repaired`` (mechanically or by the model) or ``reverted``
    to an earlier valid candidate; ``problems`` are those found on the way, in order."""

    spec: ResearchSpec
    outcome: Literal["valid", "repaired", "reverted"]
    problems: tuple[Problem, ...]
    repairs: tuple[str, ...]


ModelRepair = Callable[[str, Sequence[Problem]], str]
"""``fix(previous_reply, problems) -> new reply``: asks the planner to fix the named problems."""


def resolve(reply: str, *, fallback: ResearchSpec | None = None, model_repair: ModelRepair | None = None,
            attempts: int = 1, context: str = "") -> Resolution:
    """A valid spec from a planner's reply: as written; else renumbered when only the structure is wrong; else
    repaired by the model (at most ``attempts`` times, each attempt renumbered too); else ``fallback`` (the last
    valid candidate). Raises :class:`ResearchSpecError` naming every problem when nothing is valid."""
    seen: list[Problem] = []
    repairs: list[str] = []
    current = reply
    for attempt in range(attempts + 1):
        spec, problems = parse_research_spec(current)
        if spec is not None and not problems:
            return Resolution(spec, "valid" if attempt == 0 and not repairs else "repaired", tuple(seen),
                              tuple(repairs))
        seen += problems
        if spec is not None and {p.kind for p in problems} <= STRUCTURAL:
            fixed = renumber(spec)
            if not validate_spec(fixed):
                repairs.append("renumbered")
                return Resolution(fixed, "repaired", tuple(seen), tuple(repairs))
        if model_repair is None or attempt == attempts:
            break
        repairs.append(f"model repair {attempt + 1}")
        current = model_repair(current, problems)
    if fallback is not None:
        return Resolution(fallback, "reverted", tuple(seen), tuple(repairs))
    last = parse_research_spec(current)[1]
    raise ResearchSpecError(last or seen, context)
