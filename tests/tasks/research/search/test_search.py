"""The local search environment (envgen/search): corpus loaders, the index, the tools and agent-loop episodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from agent_fixtures import n_calls_made
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import QA_FIXTURES, ROOT

from inference.agent import AgentConfig, Episode, run_episodes
from inference.engine import Request
from inference.testing import ScriptedEngine, ScriptedReply
from tasks.readers import InputFileError
from tasks.research.search import CorpusError, SearchConfig, SearchEnvironment, SearchIndex, load_corpus
from tasks.research.search.environment import MAX_K, TOOL_SCHEMAS

RECORDS = [
    {"id": "zorvex", "title": "Zorvex Labs",
     "text": "Zorvex Labs is a robotics company founded by Mira Talven.\n\nIts headquarters are in Brindlemoor."},
    {"id": "mira", "title": "Mira Talven",
     "text": "Mira Talven is an engineer and inventor.\n\nMira Talven was born in Quillport, a harbour town."},
    {"id": "quillport", "title": "Quillport", "text": "Quillport is a harbour town known for its salt marshes."},
    {"id": "brindlemoor", "title": "Brindlemoor", "text": "Brindlemoor is a city of glass towers and canals."},
    {"id": "secret", "title": "How the question was built",
     "text": "Zorvex Labs founder Mira Talven was born in Quillport."},
]
GUIDE = """# Field Guide

A preamble before any heading.

## Birds
Herons wade in the salt marshes.

```bash
# not a heading: a comment in a fence
```

## Birds
A second section of the same name.

## Insects
"""
TASK = {"task_id": "t1", "question": "In which town was the founder of Zorvex Labs born?", "answer": "Quillport",
        "aliases": json.dumps(["Quillport harbour"]), "excluded_doc_ids": ["secret"]}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (root / "notes").mkdir()
    (root / "notes" / "guide.md").write_text(GUIDE)
    (root / "plain.txt").write_text("First paragraph about lanterns.\n\n  \nSecond paragraph about orbits.\n")
    (root / "ignored.csv").write_text("a,b\n1,2\n")
    return root


@pytest.fixture(scope="module")
def index(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SearchIndex:
    return SearchIndex.build(load_corpus(corpus_dir), tmp_path_factory.mktemp("index") / "ix")


def tree_bytes(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- corpus


def test_world_documents_frame() -> None:
    from tasks.longctx.world import WorldParams
    from tasks.longctx.world import world as world_stage

    frame = world_stage.run({}, WorldParams(n_entities=120, n_questions=0), "p0")["documents"]
    corpus = load_corpus(frame)
    assert [d.doc_id for d in corpus.documents] == frame["doc_id"].to_list()
    doc = corpus.documents[0]
    assert doc.title == frame["title"][0]
    assert [s.name for s in doc.sections] == [f"Paragraph {i + 1}" for i in range(len(doc.text.split("\n\n")))]


def test_directory_of_text_markdown_and_jsonl(corpus_dir: Path) -> None:
    corpus = load_corpus(corpus_dir)
    docs = {d.doc_id: d for d in corpus.documents}
    assert sorted(docs) == sorted(["notes/guide.md", "plain.txt", *(r["id"] for r in RECORDS)])
    guide = docs["notes/guide.md"]
    assert guide.title == "Field Guide"
    assert [s.name for s in guide.sections] == ["Field Guide", "Birds", "Birds (2)"]  # "Insects" is empty
    assert "# not a heading" in guide.sections[1].text
    plain = docs["plain.txt"]
    assert (plain.title, [s.text for s in plain.sections]) == (
        "plain", ["First paragraph about lanterns.", "Second paragraph about orbits."])
    assert [s.name for s in docs["mira"].sections] == ["Paragraph 1", "Paragraph 2"]
    assert load_corpus(corpus_dir / "docs.jsonl").documents == tuple(
        d for d in corpus.documents if d.doc_id in {r["id"] for r in RECORDS})


@pytest.mark.parametrize("kind, suffix, title", [("hotpotqa", "json", "Ed Wood"), ("2wiki", "json", "Kathy Najimy"),
                                                  ("musique", "jsonl", "Lenny Bruce")])
def test_qa_file_paragraphs_one_document_per_title(kind: str, suffix: str, title: str) -> None:
    corpus = load_corpus(f"{kind}:{QA_FIXTURES / kind}.{suffix}")
    ids = [d.doc_id for d in corpus.documents]
    assert title in ids and len(ids) == len(set(ids))
    doc = next(d for d in corpus.documents if d.doc_id == title)
    assert doc.title == title and doc.text == doc.text.strip() and not doc.text.startswith(" ")
    paragraphs = [s.text for d in corpus.documents for s in d.sections]
    assert len(paragraphs) == len({(d.doc_id, s.text) for d in corpus.documents for s in d.sections})


def test_qa_paragraphs_merge_by_title(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    records = [{"paragraphs": [{"title": "A", "paragraph_text": "one"}, {"title": "B", "paragraph_text": "two"}]},
               {"paragraphs": [{"title": "A", "paragraph_text": "three"}, {"title": "A", "paragraph_text": "one"}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    docs = load_corpus(f"musique:{path}").documents
    assert [(d.doc_id, [s.text for s in d.sections]) for d in docs] == [("A", ["one", "three"]), ("B", ["two"])]


@pytest.mark.parametrize("make", ["empty_dir", "blank_files", "empty_frame", "missing", "empty_paragraphs"])
def test_empty_corpus_is_an_error_naming_the_source(make: str, tmp_path: Path) -> None:
    source: Any = tmp_path / "src"
    if make in ("empty_dir", "blank_files"):
        source.mkdir()
    if make == "blank_files":
        (source / "a.txt").write_text("  \n\n")
        (source / "b.csv").write_text("x")
    if make == "empty_frame":
        source = pl.DataFrame(schema={"doc_id": pl.String, "title": pl.String, "text": pl.String})
    if make == "empty_paragraphs":
        source.write_text(json.dumps({"paragraphs": [{"title": "A", "paragraph_text": " "}]}) + "\n")
        source = f"musique:{source}"
    with pytest.raises(CorpusError, match="documents frame" if make == "empty_frame" else "src"):
        load_corpus(source)


@pytest.mark.parametrize("content, problem", [
    ('{"id": "a", "text": "x"}\n{"id": "b", "text": \n', "line 2: invalid JSON"),
    ('{"id": "a", "title": "t"}\n', "line 1: record needs a 'text'"),
    ('["a", "b"]\n', "line 1: expected a JSON object"),
])
def test_malformed_jsonl_names_file_and_line(content: str, problem: str, tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(content)
    with pytest.raises(InputFileError, match=problem):
        load_corpus(tmp_path)


def test_duplicate_ids_and_bad_qa_records(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": "x", "text": "one"}\n{"id": "x", "text": "two"}\n')
    with pytest.raises(CorpusError, match="'x' occurs twice"):
        load_corpus(tmp_path)
    (tmp_path / "h.json").write_text('[{"_id": "1", "question": "q"}]')
    with pytest.raises(InputFileError, match="line 1: a hotpotqa record needs 'context'"):
        load_corpus(f"hotpotqa:{tmp_path / 'h.json'}")


# --------------------------------------------------------------------------- index


def test_index_is_deterministic_across_processes(corpus_dir: Path, index: SearchIndex, tmp_path: Path) -> None:
    code = ("import sys; from tasks.research.search import SearchIndex, load_corpus; "
            "SearchIndex.build(load_corpus(sys.argv[1]), sys.argv[2])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # set iteration order differs from this process
    subprocess.run([sys.executable, "-c", code, str(corpus_dir), str(tmp_path / "again")], cwd=ROOT, env=env,
                   check=True)
    assert tree_bytes(tmp_path / "again") == tree_bytes(index.directory)


def test_index_round_trip(corpus_dir: Path, index: SearchIndex) -> None:
    opened = SearchIndex.open(index.directory)
    corpus = load_corpus(corpus_dir)
    assert opened.info == index.info
    assert (opened.info.documents, opened.info.corpus_fingerprint) == (len(corpus.documents), corpus.fingerprint())
    assert opened.info.engine == "bm25s" and len(opened) == len(corpus.documents)
    assert [opened.document(d.doc_id) for d in corpus.documents] == list(corpus.documents)
    for query in ("salt marshes", "Mira Talven born", "glass towers canals"):
        assert opened.search(query, 10) == index.search(query, 10)


def test_build_and_open_refuse_wrong_directories(corpus_dir: Path, index: SearchIndex, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not empty"):
        SearchIndex.build(load_corpus(corpus_dir), index.directory)
    with pytest.raises(FileNotFoundError, match="not a search index"):
        SearchIndex.open(tmp_path)


@pytest.mark.parametrize("phrase, doc_id", [("glass towers", "brindlemoor"), ("herons wade", "notes/guide.md"),
                                            ("lanterns", "plain.txt"), ("robotics company", "zorvex")])
def test_search_finds_a_document_by_a_distinctive_phrase(index: SearchIndex, phrase: str, doc_id: str) -> None:
    [hit, *_] = index.search(phrase, 3)
    assert hit.doc_id == doc_id
    assert phrase.split()[0].lower() in hit.snippet.lower()


def test_search_ranks_by_score_drops_non_matches_and_exclusions(index: SearchIndex) -> None:
    assert index.search("the of and", 5) == [] and index.search("zzzqqq", 5) == []
    hits = index.search("Quillport", MAX_K)
    assert {h.doc_id for h in hits} == {"mira", "quillport", "secret"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert index.search("Quillport", MAX_K, exclude={"secret", "unknown"}) == [h for h in hits if h.doc_id != "secret"]


def test_ties_rank_in_corpus_order(tmp_path: Path) -> None:
    twins = [{"id": i, "title": "Twin", "text": "A lighthouse keeper."} for i in ("m", "c", "x", "a")]
    (tmp_path / "twins.jsonl").write_text("".join(json.dumps(r) + "\n" for r in twins))
    index = SearchIndex.build(load_corpus(tmp_path / "twins.jsonl"), tmp_path / "ix")
    assert [h.doc_id for h in index.search("lighthouse", 4)] == ["m", "c", "x", "a"]
    assert [h.doc_id for h in index.search("lighthouse keeper", 2)] == ["m", "c"]


# --------------------------------------------------------------------------- tools


def call(env: SearchEnvironment, name: str, arguments: Any) -> dict[str, Any]:
    return env.call_tool(name, arguments if isinstance(arguments, str) else json.dumps(arguments)).content


@pytest.fixture
def env(index: SearchIndex) -> SearchEnvironment:
    env = SearchEnvironment(index, SearchConfig(read_chars=20))
    env.reset(TASK)
    return env


def test_open_and_read(env: SearchEnvironment) -> None:
    outline = call(env, "open", {"doc_id": "notes/guide.md"})
    assert outline["title"] == "Field Guide"
    assert outline["sections"][1] == {"name": "Birds", "first_line": "Herons wade in the salt marshes."}
    by_name = call(env, "read", {"doc_id": "notes/guide.md", "section": "birds (2)"})
    assert by_name == {"doc_id": "notes/guide.md", "title": "Field Guide", "section": "Birds (2)",
                       "text": "A second section of the same name."[:20],
                       "truncated": "the first 20 of 34 characters"}
    assert call(env, "read", {"doc_id": "mira", "section": 2})["text"] == "Mira Talven was born"
    assert call(env, "read", {"doc_id": "mira", "section": "2"}) == call(env, "read", {"doc_id": "mira", "section": 2})
    result = call(env, "search", {"query": "harbour town", "k": 2})
    assert [r["doc_id"] for r in result["results"]] == ["quillport", "mira"]
    assert set(result["results"][0]) == {"doc_id", "title", "snippet"}


@pytest.mark.parametrize("name, arguments, problem", [
    ("search", {"query": "x", "k": 0}, "k: Input should be greater than or equal to 1"),
    ("search", {"query": "x", "k": MAX_K + 1}, "less than or equal to 20"),
    ("search", {"query": "x", "k": "many"}, "k: Input should be a valid integer"),
    ("search", {"query": "x" * 10_000}, "at most 500 characters"),
    ("search", {"query": 42}, "query: Input should be a valid string"),
    ("search", {}, "query: Field required"),
    ("search", {"query": "x", "page": 2}, "page: Extra inputs are not permitted"),
    ("search", '{"query": "x"', "not valid JSON"),
    ("search", "[1, 2]", "must be a JSON object"),
    ("search", "x" * 70_000, "the limit is"),
    ("search", '{"query": "x", "k": ' + "9" * 5000 + "}", "unusable arguments for search: Exceeds the limit"),
    ("open", {"doc_id": "nope"}, "no document with doc_id 'nope'"),
    ("open", {"doc_id": ["mira"]}, "doc_id: Input should be a valid string"),
    ("read", {"doc_id": "mira", "section": 3}, "has no section '3'; its sections are 'Paragraph 1', 'Paragraph 2'"),
    ("read", {"doc_id": "mira", "section": None}, "section"),
    ("browse", {"url": "x"}, "unknown tool 'browse'; the tools are search, open, read"),
])
def test_hostile_arguments_get_tool_errors(env: SearchEnvironment, name: str, arguments: Any, problem: str) -> None:
    assert problem in call(env, name, arguments)["error"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["search", "open", "read", "", "search "]),
       arguments=st.one_of(JSON, st.text(max_size=200), st.fixed_dictionaries(
           {}, optional={"query": JSON, "k": JSON, "doc_id": JSON | st.sampled_from(["mira", "secret"]),
                         "section": JSON})))
def test_any_arguments_answer_and_never_raise(env: SearchEnvironment, name: str, arguments: Any) -> None:
    result = env.call_tool(name, arguments)
    assert isinstance(result.content, dict) and not result.internal_error
    json.dumps(result.content)
    assert "secret" not in json.dumps(result.content).replace("'secret'", "")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(["Zorvex", "Labs", "founder", "Mira", "Talven", "was", "born", "in",
                                       "Quillport", "question", "built"]), min_size=1, max_size=6),
       k=st.integers(1, MAX_K))
def test_excluded_documents_are_never_returned(env: SearchEnvironment, words: list[str], k: int) -> None:
    results = call(env, "search", {"query": " ".join(words), "k": k}).get("results", [])
    assert "secret" not in {r["doc_id"] for r in results}
    for name, arguments in (("open", {"doc_id": "{}"}), ("read", {"doc_id": "{}", "section": 1})):
        hidden = call(env, name, json.loads(json.dumps(arguments).replace("{}", "secret")))
        unknown = call(env, name, json.loads(json.dumps(arguments).replace("{}", "secrets")))
        assert hidden["error"] == unknown["error"].replace("secrets", "secret")


def test_tool_schemas_are_derived_from_argument_models() -> None:
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}
    assert by_name["search"]["required"] == ["query"]
    assert by_name["search"]["properties"]["k"] == {"default": 5, "description": "how many documents to return",
                                                           "maximum": MAX_K, "minimum": 1, "type": "integer"}
    assert by_name["read"]["required"] == ["doc_id", "section"] and not by_name["open"]["additionalProperties"]
    assert '"title"' not in json.dumps(by_name)  # pydantic's generated titles are dropped


# --------------------------------------------------------------------------- episodes


def last_tool_result(request: Request) -> dict[str, Any]:
    message = request.messages[-1]
    return json.loads(message["content"]) if message["role"] == "tool" else {}


def researcher(final_answer: str):
    """Searches for the company, reads it, searches for its founder, opens and reads her page, then answers."""

    def policy(request: Request, index: int) -> ScriptedReply:
        last, turn = last_tool_result(request), n_calls_made(request)
        first_hit = (last.get("results") or [{}])[0].get("doc_id")
        script = [
            ("search", {"query": "Zorvex Labs founder", "k": 3}),
            ("read", {"doc_id": first_hit, "section": 1}),
            ("search", {"query": "Mira Talven"}),
            ("open", {"doc_id": first_hit}),
            ("read", {"doc_id": last.get("doc_id"), "section": "Paragraph 2"}),
        ]
        if turn < len(script):
            name, arguments = script[turn]
            return ScriptedReply(tool_calls=({"name": name, "arguments": arguments},))
        return ScriptedReply(text=f"The founder was born in \\boxed{{{final_answer}}}.")

    return policy


@pytest.mark.parametrize("answer, reward, failure", [("Quillport", 1.0, None), ("Brindlemoor", 0.0, "agent")])
def test_agent_loop_episode(index: SearchIndex, answer: str, reward: float, failure: str | None) -> None:
    episodes = [Episode(id=f"t1#{i}", group_id="t1", make_env=lambda: SearchEnvironment(index), task=TASK,
                        task_id="t1", sample_index=i) for i in range(2)]
    for trajectory in run_episodes(ScriptedEngine(researcher(answer)), episodes, AgentConfig(max_turns=8)):
        assert (trajectory.reward, trajectory.failure, trajectory.stop_reason) == (reward, failure, "done")
        assert trajectory.reward_components == {"answer": reward}
        tool_results = [json.loads(m["content"]) for m in trajectory.messages if m["role"] == "tool"]
        assert [r.get("doc_id") for r in tool_results] == [None, "zorvex", None, "mira", "mira"]
        assert "Quillport" in tool_results[4]["text"] and not any("error" in r for r in tool_results)
        assert "secret" not in json.dumps(trajectory.messages)


def test_cut_off_episode_scores_zero_for_the_agent(index: SearchIndex) -> None:
    env = SearchEnvironment(index, SearchConfig(max_steps=2))
    env.reset(TASK)
    search = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"query": "Quillport"}'}}]}
    assert env.step(search)[1:3] == (0.0, False)
    _, reward, done, info = env.step(search)
    assert (reward, done, info["failure"], info["answer"], info["tool_calls"]) == (0.0, True, "agent", None, 2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(search)


def test_a_broken_index_is_a_tool_failure(index: SearchIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    env = SearchEnvironment(index)
    env.reset(TASK)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("index file vanished")

    monkeypatch.setattr(index, "search", broken)
    result = env.call_tool("search", {"query": "Quillport"})
    assert result.internal_error and result.content == {"error": "search failed: OSError"}
    env.step({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"query": "Quillport"}'}}]})
    _, reward, done, info = env.step({"role": "assistant", "content": "I could not search: \\boxed{unknown}"})
    assert (reward, done, info["failure"]) == (0.0, True, "tool")
