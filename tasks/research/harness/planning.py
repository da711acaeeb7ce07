"""The planning roles (LongCat-DeepResearch, section 3.1): Planning Writers, the Planning Judge, the Critic and the
Reviser, turning a query into the ResearchSpec that is then held fixed for section research.

Writers search and read independently, each from its own perspective, and propose candidate specs; the Judge
consolidates the valid candidates; each Critic/Reviser cycle searches for missing questions and cases and folds
them into the plan. Every spec a role returns goes through ``research_spec.resolve``: repaired (renumbered, or the role
asked to fix the named problems), else reverted to the last valid candidate; with no valid candidate at all,
dispatch stops with every problem named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tasks.research.harness import prompts
from tasks.research.harness.research_spec import (
    Problem,
    ResearchSpec,
    ResearchSpecError,
    extract_json,
    resolve,
)
from tasks.research.harness.roles import RoleCall, RoleResult
from tasks.research.harness.session import ResearchStop, Session


@dataclass
class Plan:
    spec: ResearchSpec
    spec_call: str
    """The call whose output is the final spec (the researchers depend on it)."""
    candidates: list[dict[str, Any]] = field(default_factory=list)


def parse_issues(text: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The Critic's issues and what is wrong with its reply (an unreadable reply counts as no issue)."""
    try:
        data = extract_json(text or "")
    except ValueError as exc:
        return [], [str(exc)]
    issues = data.get("issues") if isinstance(data, dict) else None
    if not isinstance(issues, list) or not all(isinstance(i, dict) for i in issues):
        return [], ["the reply has no 'issues' list of objects"]
    return issues, []


def plan(session: Session, query: str) -> Plan:
    config = session.config
    writers = [session.role_call(f"plan/writer/{i + 1}", "planning_writer",
                                 prompts.writer_input(query, prompts.PERSPECTIVES[i % len(prompts.PERSPECTIVES)],
                                                      config.max_sections))
               for i in range(config.writers)]
    results = session.run(writers)
    done = [r for r in results if r.status == "complete"]
    if not done:
        raise ResearchStop("every Planning Writer failed: " + "; ".join(f"{r.call_id}: {r.error}" for r in results))
    if not any(r.search_hits for r in done):
        raise ResearchStop(f"no document of the collection ({len(session.index):,} documents) matches the query "
                           f"{query!r}: none of the Planning Writers' searches returned a hit; rephrase it with "
                           "words the documents use")
    candidates: list[tuple[ResearchSpec, str]] = []
    problems: list[Problem] = []
    for call, result in _pairs(writers, done):
        try:
            spec, source = _resolve(session, call, result, None, "candidate")
        except ResearchSpecError as exc:
            problems += [Problem(p.kind, f"{call.call_id}: {p.message}", p.section) for p in exc.problems]
            continue
        candidates.append((spec, source))
    if not candidates:
        session.note("stop", reason="no valid candidate spec", problems=[str(p) for p in problems])
        raise ResearchSpecError(problems, "planning writers")
    judge = session.role_call("plan/judge", "planning_judge",
                              prompts.judge_input(query, [s.model_dump() for s, _ in candidates]),
                              depends_on=[source for _, source in candidates])
    spec, source = _resolve(session, judge, session.run([judge])[0], candidates[0][0], "judged",
                            fallback_call=candidates[0][1])
    for round_ in range(1, config.critic_rounds + 1):
        critic = session.role_call(f"plan/critic/{round_}", "critic", prompts.critic_input(query, spec.model_dump()),
                                   depends_on=[source])
        critique = session.run([critic])[0]
        issues, issue_problems = parse_issues(critique.output)
        session.note("critique", call_id=critic.call_id, issues=issues, problems=issue_problems)
        if not issues:
            continue
        reviser = session.role_call(f"plan/reviser/{round_}", "reviser",
                                    prompts.reviser_input(query, spec.model_dump(), issues),
                                    depends_on=[source, critic.call_id])
        spec, source = _resolve(session, reviser, session.run([reviser])[0], spec, "revised", fallback_call=source)
    session.note("spec", stage="final", call_id=source, outcome="final", spec=spec.model_dump())
    return Plan(spec, source, [s.model_dump() for s, _ in candidates])


def _pairs(calls: list[RoleCall], done: list[RoleResult]) -> list[tuple[RoleCall, RoleResult]]:
    by_id = {c.call_id: c for c in calls}
    return [(by_id[r.call_id], r) for r in done]


def _resolve(session: Session, call: RoleCall, result: RoleResult, fallback: ResearchSpec | None, stage: str,
             fallback_call: str | None = None) -> tuple[ResearchSpec, str]:
    """The valid spec of a planner's reply and the call it came from (a repair call, or the reverted-to one)."""
    source = [call.call_id]

    def model_repair(reply: str, problems: list[Problem]) -> str:
        attempt = sum(s.startswith(f"{call.call_id}/repair") for s in source) + 1
        fix = session.role_call(f"{call.call_id}/repair{attempt}", call.role,
                                prompts.repair_input(call.user, reply, [str(p) for p in problems]),
                                depends_on=[source[-1]])
        source.append(fix.call_id)
        return session.run([fix])[0].output or ""

    reply = result.output if result.status == "complete" else ""
    try:
        resolution = resolve(reply or "", fallback=fallback, model_repair=model_repair,
                             attempts=session.config.repair_attempts, context=call.call_id)
    except ResearchSpecError as exc:
        session.note("spec", stage=stage, call_id=call.call_id, outcome="invalid",
                     problems=[str(p) for p in exc.problems])
        raise
    origin = fallback_call if resolution.outcome == "reverted" and fallback_call else source[-1]
    session.note("spec", stage=stage, call_id=call.call_id, outcome=resolution.outcome, source=origin,
                 problems=[str(p) for p in resolution.problems], repairs=list(resolution.repairs),
                 spec=resolution.spec.model_dump())
    return resolution.spec, origin
