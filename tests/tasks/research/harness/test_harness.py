"""The research harness end to end on a small world with the reference teacher, and on bad input: researchers see
only the query, the spec and their assignment; assembly follows the spec; Local Editors change only their
section; an engine timeout fails one section and keeps the others; malformed specs are repaired, reverted, or
stop the run with every problem named; a query with no hits stops; the journal resumes an interrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from research_fixtures import (
    WrappedTeacher,
    branch,
    index_dir,
    query,
    role,
    teacher,
    text_completion,
)

from tasks.research.harness.editors import assemble
from tasks.research.harness.prompts import parse_inputs
from tasks.research.harness.reference import split_draft
from tasks.research.harness.research_spec import ResearchSpec
from tasks.research.harness.researchers import SectionOutcome
from tasks.research.harness.roles import open_index
from tasks.research.harness.run import ResearchRun, run_research
from tasks.research.harness.session import HarnessConfig
from tasks.research.harness.trajectories import trajectory_rows

CONFIG = HarnessConfig()


def research(engine, q: str | None = None, **kw) -> ResearchRun:
    return run_research(q or query(), engine=engine, index_dir=index_dir(), teacher="reference-test", **kw)


@pytest.fixture(scope="module")
def baseline() -> tuple[ResearchRun, WrappedTeacher]:
    engine = WrappedTeacher(teacher())
    return research(engine), engine


def test_a_reference_run_is_complete_cited_and_written_as_rows(baseline) -> None:
    run, _ = baseline
    assert run.status == "complete" and run.stop_reason is None
    spec = ResearchSpec.model_validate(run.spec)
    assert len(spec.leaves()) >= 3 and len(run.candidate_specs) == CONFIG.writers
    assert run.citations["citations"] >= 10 and run.citations["dangling"] == 0
    assert run.citations["rate"] >= 0.9
    roles = {c.role for c in run.calls}
    assert roles == {"planning_writer", "planning_judge", "critic", "reviser", "researcher", "global_editor",
                     "local_editor"}
    kept, rejected, calls = trajectory_rows(run, open_index(index_dir()), "organization")
    assert rejected == [] and len(kept) == len(calls) == len(run.calls)
    assert all(json.loads(row["messages"])[0]["role"] == "system" for row in kept)


def test_researchers_see_only_the_query_the_spec_and_their_assignment(baseline) -> None:
    run, engine = baseline
    texts = [s["text"] for s in run.sections]
    for request in (r for r in engine.requests if role(r) == "researcher"):
        inputs = parse_inputs(str(request.messages[1]["content"]))
        assert set(inputs) == {"query", "research_spec", "assignment"}
        assert json.loads(inputs["research_spec"]) == run.spec
        for message in request.messages[:2]:
            assert not any(t[:80] in str(message["content"]) for t in texts)
    final = {c.call_id: c for c in run.calls}
    spec_call = next(c for c in run.calls if c.role == "reviser").call_id
    assert all(c.depends_on == (spec_call,) for c in final.values() if c.role == "researcher")


def test_assembly_follows_the_spec_order(baseline) -> None:
    run, _ = baseline
    spec = ResearchSpec.model_validate(run.spec)
    positions = [run.report.index(f" {s.id} {s.title}\n") for s in spec.sections]
    assert positions == sorted(positions)
    outcomes = {s.id: SectionOutcome(s.id, f"Text of {s.id}.", "complete", s.id) for s in reversed(spec.leaves())}
    draft = assemble(spec, outcomes)
    assert list(split_draft(draft)) == [s.id for s in spec.sections]


def test_local_editors_change_only_their_section(baseline) -> None:
    run, _ = baseline
    directed = {d["section"] for d in run.directives}
    target = min(directed)
    foreign = "A rewrite of the whole report [cite:E1].\n\n## S9 Another section\n\nMore text [cite:E2]."

    def rewrite(request, completion):
        if role(request) == "local_editor" and branch(request) == target:
            return text_completion(foreign)
        return None

    edited = research(WrappedTeacher(teacher(), rewrite=rewrite))
    before, after = split_draft(run.report), split_draft(edited.report)
    assert after[target] == next(s["text"] for s in edited.sections if s["id"] == target)
    assert "Another section" not in edited.report
    assert any(d["decision"] == "edit_rejected" and d["section"] == target for d in edited.decisions)
    assert {k: v for k, v in after.items() if k != target} == {k: v for k, v in before.items() if k != target}


def test_an_engine_timeout_fails_its_section_and_keeps_the_others(baseline) -> None:
    run, _ = baseline
    victim = ResearchSpec.model_validate(run.spec).leaves()[1].id

    def fail(request):
        return TimeoutError("teacher timed out") if role(request) == "researcher" and branch(request) == victim else None

    partial = research(WrappedTeacher(teacher(), fail=fail))
    sections = {s["id"]: s for s in partial.sections}
    assert partial.status == "partial"
    assert sections[victim]["status"] == "failed" and "TimeoutError" in sections[victim]["reason"]
    assert all(s["status"] == "complete" for sid, s in sections.items() if sid != victim)
    assert f"{victim}" in partial.report and "Not researched" in partial.report


def test_a_transient_timeout_is_retried(baseline) -> None:
    run, _ = baseline
    victim = ResearchSpec.model_validate(run.spec).leaves()[0].id
    failures = []

    def fail_once(request):
        if role(request) == "researcher" and branch(request) == victim and not failures:
            failures.append(1)
            return TimeoutError("once")
        return None

    again = research(WrappedTeacher(teacher(), fail=fail_once))
    assert again.status == "complete" and failures == [1]
    assert next(c for c in again.calls if c.branch == victim and c.role == "researcher").attempts == 2


def _writer_reply(text: str, only: set[str] | None = None):
    def rewrite(request, completion):
        if role(request) == "planning_writer" and not completion.tool_calls:
            who = json.loads(json.dumps(request.messages[1]["content"]))
            if only is None or any(o in who for o in only):
                return text_completion(text)
        return None

    return rewrite


def test_malformed_candidates_are_dropped_and_a_malformed_judge_reverts() -> None:
    def rewrite(request, completion):
        if role(request) == "planning_judge":
            return text_completion("The plan, in prose: first the founder, then the staff.")
        return _writer_reply("no plan", {"connections"})(request, completion)

    run = research(WrappedTeacher(teacher(), rewrite=rewrite))
    assert run.status == "complete" and len(run.candidate_specs) == CONFIG.writers - 1
    journal_free = {c.call_id for c in run.calls}
    assert "plan/writer/2/repair1" in journal_free and "plan/judge/repair1" in journal_free


def test_only_malformed_specs_stop_the_run_naming_each_problem() -> None:
    run = research(WrappedTeacher(teacher(), rewrite=_writer_reply("I will not write JSON.")))
    assert run.status == "failed" and run.report == ""
    for i in range(1, CONFIG.writers + 1):
        assert f"plan/writer/{i}" in run.stop_reason
    assert "[malformed]" in run.stop_reason
    assert not any(c.role == "researcher" for c in run.calls)


def test_a_query_with_no_hits_stops_with_a_clear_reason() -> None:
    run = research(teacher(), "zzqx vrumble plonk")
    assert run.status == "failed" and "no document of the collection" in run.stop_reason
    with pytest.raises(ValueError, match="empty"):
        research(teacher(), "   ")


def _canonical(event: dict) -> str:
    return json.dumps(event, sort_keys=True)


def test_the_journal_resumes_an_interrupted_run(tmp_path: Path, baseline) -> None:
    run, _ = baseline
    journal = tmp_path / "journal.jsonl"
    first = research(WrappedTeacher(teacher()), journal=journal)
    lines = journal.read_bytes().splitlines(keepends=True)
    calls = [i for i, line in enumerate(lines) if b'"event": "call"' in line]
    cut = calls[len(calls) // 2]
    journal.write_bytes(b"".join(lines[:cut]) + lines[cut][:40])  # killed mid-write
    engine = WrappedTeacher(teacher())
    resumed = research(engine, journal=journal)
    assert resumed.report == first.report == run.report
    assert 0 < len(engine.requests) < sum(len(c.messages) for c in first.calls)
    recorded = {json.loads(line)["result"]["call_id"] for line in lines[:cut] if b'"event": "call"' in line}
    asked = {r.messages[1]["content"] for r in engine.requests}
    assert not any(c.messages[1]["content"] in asked for c in first.calls if c.call_id in recorded
                   and c.role != "researcher")
    untouched = WrappedTeacher(teacher())
    assert research(untouched, journal=journal).report == first.report and untouched.requests == []
    # the resumed journal holds each event once, as an uninterrupted run's does: nothing journaled is appended again
    complete = [json.loads(line) for line in lines]
    resumed_events = [json.loads(line) for line in journal.read_bytes().splitlines()]
    assert len(resumed_events) == len(complete) and [e["event"] for e in resumed_events].count("end") == 1
    before_the_end = [e for e in complete if e["event"] != "end"]
    assert sorted(map(_canonical, (e for e in resumed_events if e["event"] != "end"))) == sorted(
        map(_canonical, before_the_end))


def test_sections_synthesize_the_facts_they_read_and_every_tool_turn_says_why(baseline) -> None:
    from research_fixtures import small_world

    from tasks.research.harness.text import sentences as split
    from tasks.research.harness.text import strip_citations

    run, _ = baseline
    corpus = {s.rstrip(".") for text in small_world()["documents"]["text"] for s in split(text)}
    written = [strip_citations(s).rstrip(".") for s in split(run.report) if "[cite:" in s]
    copied = sum(s in corpus for s in written)
    assert copied <= len(written) // 4, f"{copied} of {len(written)} cited sentences are the corpus's own"
    # the analysis a reader wants, computed from the sources and cited to them, and supported by the check
    derived = [c for c in run.citations["checks"] if " years after " in c["sentence"] or "first:" in c["sentence"]
               or " in all" in c["sentence"]]
    assert derived and all(c["verdict"] == "supported" for c in derived)
    assert run.citations["rate"] == 1.0
    tool_turns = [m for r in run.calls for m in r.messages if m.get("role") == "assistant" and m.get("tool_calls")]
    assert tool_turns and all((m.get("content") or "").strip() for m in tool_turns)


def test_local_editors_name_what_the_owning_section_covers(baseline) -> None:
    run, _ = baseline
    from tasks.research.harness.text import sentences

    pointers = [s for s in sentences(run.report) if s.startswith("Section S")]
    assert pointers and all(" covers the " in p for p in pointers)
    assert "for the material it covers" not in run.report
