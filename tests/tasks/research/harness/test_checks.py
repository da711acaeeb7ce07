"""The harness's checks: citations against the corpus, rubric grading, the trajectory filters, the journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from research_fixtures import index_dir, small_world

from inference.engine import Completion
from tasks.research.harness.citations import check_citations
from tasks.research.harness.prompts import ROLES
from tasks.research.harness.roles import RoleResult, open_index
from tasks.research.harness.rubric import Criterion, Rubric, grade, grade_lexical, score
from tasks.research.harness.session import Journal, JournalMismatch
from tasks.research.harness.text import sentences, terms
from tasks.research.harness.trajectories import call_problems, closure_problems, identity_problems


def docs() -> list[tuple[str, str, str]]:
    frame = small_world()["documents"]
    return list(zip(frame["doc_id"], frame["title"], frame["text"], strict=True))


def test_citations_exist_support_their_sentence_and_respect_exclusions() -> None:
    index = open_index(index_dir())
    (a, _, text_a), (b, _, _) = docs()[40], docs()[41]
    claim = sentences(text_a)[0].rstrip(".")
    report = check_citations(f"{claim} [cite:{a}]. {claim} [cite:{b}]. {claim} [cite:E999999]. "
                             f"{claim} [cite:{a}]. A sentence without a source.", index, excluded={a})
    verdicts = [c.verdict for c in report.checks]
    assert verdicts == ["excluded", "unsupported", "missing", "excluded"]
    assert report.uncited == 1 and len(report.dangling) == 3
    plain = check_citations(f"{claim} [cite:{a}].", index)
    assert [c.verdict for c in plain.checks] == ["supported"] and plain.rate == 1.0


def test_a_changed_number_is_not_supported() -> None:
    index = open_index(index_dir())
    doc_id, _, text = next(d for d in docs() if any(ch.isdigit() for ch in d[2]))
    sent = next(s for s in sentences(text) if any(ch.isdigit() for ch in s)).rstrip(".")
    digit = next(ch for ch in sent if ch.isdigit())
    changed = sent.replace(digit, str((int(digit) + 1) % 10), 1)
    report = check_citations(f"{changed} [cite:{doc_id}].", index)
    assert report.checks[0].verdict == "unsupported"


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_document_supports_its_own_sentences_and_not_an_unrelated_one(data: st.DataObject) -> None:
    index = open_index(index_dir())
    doc_id, title, text = data.draw(st.sampled_from(docs()))
    sent = data.draw(st.sampled_from(sentences(text))).rstrip(".")
    assert check_citations(f"{title}: {sent} [cite:{doc_id}].", index).checks[0].verdict == "supported"
    other = data.draw(st.sampled_from([d for d in docs() if d[1] not in text and title not in d[2]]))
    assert check_citations(f"{title}: {sent} [cite:{other[0]}].", index).checks[0].verdict == "unsupported"


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_claim_about_one_entity_cited_to_another_ones_document_is_unsupported(data: st.DataObject) -> None:
    # The subject swapped, every other word kept: "Anna Navarro is employed by Scott, Hardin and Shaw" cited to
    # Geoffrey Bradshaw's document, which says that of him, shares most of its terms and not the name.
    index = open_index(index_dir())
    about = [(d, [s for s in sentences(d[2]) if s.startswith(d[1] + " ")]) for d in docs()]
    (doc_id, title, text), own = data.draw(st.sampled_from([(d, own) for d, own in about if own]))
    sent = data.draw(st.sampled_from(own))
    assert check_citations(f"{sent.rstrip('.')} [cite:{doc_id}].", index).checks[0].verdict == "supported"
    doc_terms = terms([text])[0]
    other = data.draw(st.sampled_from([d[1] for d in docs() if not terms([d[1]])[0] <= doc_terms]))
    swapped = other + sent.removeprefix(title).rstrip(".")
    assert check_citations(f"{swapped} [cite:{doc_id}].", index).checks[0].verdict == "unsupported"


def _conventions(claims: list[tuple[str, str]]) -> tuple[str, str]:
    """One report in each convention: the citation before the period, and after it."""
    return (" ".join(f"{c.rstrip('.')} [cite:{d}]." for c, d in claims),
            " ".join(f"{c.rstrip('.')}. [cite:{d}]" for c, d in claims))


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_a_citation_after_the_period_is_checked_as_one_before_it(data: st.DataObject) -> None:
    """Both conventions give the same sentences, verdicts and uncited count; a changed figure is refused in both."""
    index = open_index(index_dir())
    claims = []
    for _ in range(data.draw(st.integers(1, 3))):
        doc_id, title, text = data.draw(st.sampled_from(docs()))
        sent = data.draw(st.sampled_from(sentences(text))).rstrip(".")
        if data.draw(st.booleans()) and any(ch.isdigit() for ch in sent):
            digit = next(ch for ch in sent if ch.isdigit())
            sent = sent.replace(digit, str((int(digit) + 1) % 10), 1)
        cited = data.draw(st.sampled_from([doc_id, data.draw(st.sampled_from(docs()))[0]]))
        claims.append((f"{title}: {sent}", cited))
    before, after = (check_citations(text, index) for text in _conventions(claims))
    assert [(c.sentence.rstrip(". "), c.doc_id, c.verdict) for c in after.checks] == [
        (c.sentence.rstrip(". "), c.doc_id, c.verdict) for c in before.checks]
    assert after.uncited == before.uncited == 0 and all(c.sentence for c in after.checks)


@pytest.mark.parametrize("report", ["[cite:{d}]", "# Heading\n\n[cite:{d}]", "[cite:{d}]. [cite:{d}]",
                                    "# Heading\n[cite:{d}] ."])
def test_a_citation_without_a_sentence_is_never_supported(report: str) -> None:
    doc_id = docs()[3][0]
    checks = check_citations(report.format(d=doc_id), open_index(index_dir())).checks
    assert checks and all(c.verdict == "unsupported" and c.reason == "no sentence before the citation"
                          for c in checks)


def test_a_citation_judge_decides_support_for_existing_citations() -> None:
    index = open_index(index_dir())
    doc_id, _, text = docs()[7]

    class Judge:  # a test double: says NOT_SUPPORTED to everything
        policy_version = 0

        def generate(self, requests):
            return [[Completion("NOT_SUPPORTED", (1,), (0.0,), "stop", 0)] for _ in requests]

        def close(self):
            pass

    report = check_citations(f"{sentences(text)[0].rstrip('.')} [cite:{doc_id}].", index, judge=Judge())
    assert report.checks[0].verdict == "unsupported"


CRITERIA = [
    Criterion(id="R1", title="States the founder", weight=3, category="factual", terms=["Zorvex Labs", "Mira Talven"]),
    Criterion(id="R2", title="Covers the towns", weight=2, category="implicit", terms=["Quillport", "Brindlemoor"],
              together=False),
    Criterion(id="R3", title="Claims the wrong founder", weight=-3, category="negative",
              terms=["Zorvex Labs", "Otto Brann"]),
]


@pytest.mark.parametrize(("report", "verdicts"), [
    ("Zorvex Labs was founded by Mira Talven [cite:a]. It moved to Quillport. Later Brindlemoor.",
     {"R1": "satisfied", "R2": "satisfied", "R3": "not"}),
    ("Zorvex Labs makes robots. Nothing else. Still nothing. Filler here. More filler. Mira Talven is an engineer.",
     {"R1": "partially", "R2": "not", "R3": "not"}),
    ("Zorvex Labs was founded by Otto Brann. Quillport is a town.", {"R1": "partially", "R2": "partially",
                                                                    "R3": "satisfied"}),
])
def test_lexical_grading(report: str, verdicts: dict[str, str]) -> None:
    assert {c.id: grade_lexical(report, c) for c in CRITERIA} == verdicts
    graded = grade(report, Rubric(criteria=CRITERIA))
    expected = sum({"satisfied": 1, "partially": 0.5, "not": 0}[verdicts[c.id]] * c.weight for c in CRITERIA) / 5
    assert graded.score == pytest.approx(expected)


@given(st.lists(st.sampled_from(["satisfied", "partially", "not"]), min_size=3, max_size=3))
def test_scores_lie_between_the_penalty_and_one(verdicts: list[str]) -> None:
    value = score(dict(zip(["R1", "R2", "R3"], verdicts, strict=True)), CRITERIA)
    assert -3 / 5 <= value <= 1.0


def _result(messages: list[dict], role: str = "researcher", output: str = "x") -> RoleResult:
    return RoleResult("research/S1", role, "S1", (), messages, output, "complete")


def _conversation(calls: int) -> list[dict]:
    head = [{"role": "system", "content": ROLES["researcher"].system}, {"role": "user", "content": "inputs"}]
    turns = []
    for i in range(calls):
        turns += [{"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
                                                                       "function": {"name": "search",
                                                                                    "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": f"c{i}", "content": "{}"}]
    return [*head, *turns, {"role": "assistant", "content": "done"}]


@settings(max_examples=40)
@given(st.integers(0, 5), st.data())
def test_closure_holds_for_answered_calls_and_breaks_without_an_answer(calls: int, data: st.DataObject) -> None:
    messages = _conversation(calls)
    assert closure_problems(messages) == []
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    if tools:
        drop = data.draw(st.sampled_from(tools))
        assert closure_problems(messages[:drop] + messages[drop + 1:])
    assert closure_problems(messages[:-1]) if calls else closure_problems(messages[:-1] + [messages[1]])


def test_role_identity_and_artifact_validity_filter_calls() -> None:
    index = open_index(index_dir())
    good = _conversation(1)
    assert identity_problems(_result(good)) == []
    impostor = [{"role": "system", "content": "You are a helpful assistant."}, *good[1:]]
    assert identity_problems(_result(impostor))
    assert identity_problems(_result(good, role="planning_judge"))  # a judge has no tools and another prompt
    assert call_problems(_result(good, output="No sources at all."), index, ())  # a section without citation
    doc_id, _, text = docs()[3]
    cited = f"{sentences(text)[0].rstrip('.')} [cite:{doc_id}]."
    assert call_problems(_result(good, output=cited), index, ()) == []
    assert call_problems(_result(good, output=cited), index, (doc_id,))  # cites an excluded document


def test_the_journal_drops_a_torn_line_and_refuses_another_run(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = Journal(path, {"run_id": "r1"})
    journal.append({"event": "call", "result": _result(_conversation(0)).to_json()})
    path.write_bytes(path.read_bytes() + b'{"event": "ca')
    again = Journal(path, {"run_id": "r1"})
    assert [e["event"] for e in again.events] == ["run", "call"] and again.call("research/S1") is not None
    assert path.read_bytes().endswith(b"\n") and json.loads(path.read_text().splitlines()[-1])["event"] == "call"
    with pytest.raises(JournalMismatch, match="run_id"):
        Journal(path, {"run_id": "r2"})


ANALYSIS = Criterion(id="R4", title="Relates Zorvex Labs's founding in 1931 to Mira Talven's birth in 1895, and what "
                     "the gap of 36 years means", weight=4, category="analytical",
                     terms=["Zorvex Labs", "1931", "Mira Talven", "1895"], together=False, derived=["36"])
WRONG_FOUNDER = Criterion(id="R5", title="Claims that the founder of Zorvex Labs is Otto Brann", weight=-3,
                          category="negative", terms=["Zorvex Labs", "Otto Brann"], relation="founded_by")


@pytest.mark.parametrize(("report", "verdict"), [
    (("Zorvex Labs was founded in 1931 [cite:a]. Mira Talven was born in 1895 [cite:b]. Mira Talven founded it 36 "
     "years after her birth."), "satisfied"),
    ("Zorvex Labs was founded in 1931 [cite:a]. Mira Talven was born in 1895 [cite:b].", "partially"),
    ("Zorvex Labs was founded in 1931 [cite:a]. It is 36 years old.", "partially"),  # the gap without its inputs
])
def test_an_analytical_criterion_needs_the_derived_fact_not_only_its_inputs(report: str, verdict: str) -> None:
    assert grade_lexical(report, ANALYSIS) == verdict


@pytest.mark.parametrize(("report", "verdict"), [
    ("Zorvex Labs was founded by Otto Brann.", "satisfied"),
    ("Otto Brann founded Zorvex Labs in 1931.", "satisfied"),
    ("Zorvex Labs was founded by Mira Talven, not by Otto Brann.", "not"),
    ("Zorvex Labs was not founded by Otto Brann.", "not"),
    ("Otto Brann works for Zorvex Labs.", "not"),
    ("Zorvex Labs founded Otto Brann.", "not"),
])
def test_a_negative_criterion_is_met_by_the_claim_not_by_the_names_meeting(report: str, verdict: str) -> None:
    assert grade_lexical(report, WRONG_FOUNDER) == verdict
