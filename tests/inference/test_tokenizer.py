"""The byte-level BPE, its chat template and the `tokenizer` stage."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_contracts.stage import FrameArtifact, StageError, get_stage
from inference import tokenizer as T
from tasks.tokenizer import resolve_tokenizer

CORPUS = [
    f"Document {i}. The river Alder flows past {name} in {year}; its mayor wrote {i * 7} letters to the council."
    for i, (name, year) in enumerate(
        [(n, 1900 + k) for k in range(40) for n in ("Northwick", "Eastmere", "Calder Hall", "Atlético Madrid")]
    )
]
SMALL_VOCAB = 600


@pytest.fixture(scope="module")
def tok():
    return T.train_tokenizer(CORPUS, SMALL_VOCAB)


@pytest.fixture(scope="module")
def world_docs() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(len(CORPUS))],
            "title": [f"Title {i}" for i in range(len(CORPUS))],
            "text": CORPUS,
            "entity_id": [f"e{i}" for i in range(len(CORPUS))],
        }
    )


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]


def conversation(content: str, calls: list[dict]) -> list[dict]:
    return [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is in the ledger?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [{"type": "function", "function": c} for c in calls],
        },
        {"role": "tool", "name": "lookup", "content": "ledger: 42"},
        {"role": "assistant", "content": "It holds 42."},
    ]


def test_training_is_deterministic(tok):
    again = T.train_tokenizer(CORPUS, SMALL_VOCAB)
    assert T.to_row(tok)["sha256"] == T.to_row(again)["sha256"]
    assert T.to_row(tok)["tokenizer_json"] == T.to_row(again)["tokenizer_json"]


def test_special_tokens_are_single_tokens(tok):
    for special in T.SPECIAL_TOKENS:
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    assert tok.eos_token == T.IM_END and tok.pad_token == T.PAD_TOKEN
    # tool tags survive skip_special_tokens, so completions can still be parsed after decoding
    ids = tok("<tool_call>{}</tool_call><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>{}</tool_call>"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_encode_decode_round_trip(tok, text):
    if any(s in text for s in T.SPECIAL_TOKENS):
        return
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_assistant_mask_covers_assistant_turns_and_their_end(tok):
    out = tok.apply_chat_template(
        conversation("Let me look.", [{"name": "lookup", "arguments": {"q": "ledger"}}]),
        tools=TOOLS,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tok.decode(masked) == (
        'Let me look.\n<tool_call>{"name": "lookup", "arguments": {"q": "ledger"}}</tool_call><|im_end|>'
        "It holds 42.<|im_end|>"
    )


def test_trl_accepts_the_template(tok):
    from trl.chat_template_utils import (
        has_generation_markers,
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    assert has_generation_markers(tok.chat_template)
    assert supports_tool_calling(tok)
    assert is_chat_template_prefix_preserving(tok)
    assert is_chat_template_stop_token_trained(tok)


def test_generation_prompt_and_tools_in_system_turn(tok):
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\n# Tools")
    assert json.dumps(TOOLS[0]) in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=8,
)
calls_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True),
            "arguments": st.dictionaries(st.text(max_size=10), json_values, max_size=4),
        }
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=calls_strategy, content=st.text(max_size=40), as_string=st.booleans())
def test_tool_calls_render_and_parse_back(tok, calls, content, as_string):
    if "<tool_call>" in content:
        return
    rendered_calls = [
        {"name": c["name"], "arguments": json.dumps(c["arguments"]) if as_string else c["arguments"]} for c in calls
    ]
    text = tok.apply_chat_template(conversation(content, rendered_calls), tools=TOOLS, tokenize=False)
    assert T.parse_tool_calls(text) == calls


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>not json</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "x", "arguments": [1]}</tool_call>',
        '<tool_call>{"name": "x", "arguments": {}}',
        "no calls at all",
    ],
)
def test_malformed_tool_calls_are_skipped(text):
    assert T.parse_tool_calls(text) == []


def test_save_load_and_row_round_trip(tok, tmp_path):
    row = T.to_row(tok)
    loaded = T.load(T.save(tok, tmp_path / "tok"))
    msgs = conversation("x", [{"name": "lookup", "arguments": {"a": 1}}])
    assert loaded.apply_chat_template(msgs, tokenize=False) == tok.apply_chat_template(msgs, tokenize=False)
    assert T.fingerprint(T.tokenizer_json(loaded), loaded.chat_template) == row["sha256"]
    assert T.tokenizer_from_row(row) is T.tokenizer_from_row(dict(row))  # cached by sha256
    with pytest.raises(ValueError, match="sha256 does not match"):
        T.tokenizer_from_row({**row, "sha256": "0" * 64})
    with pytest.raises(ValueError, match="not a tokenizer directory"):
        T.load(tmp_path)


def test_stage_trains_on_world_documents(world_docs):
    stage = get_stage("tokenizer")
    params = stage.parse_params({"vocab_size": SMALL_VOCAB})
    inputs = {"world": FrameArtifact({"documents": world_docs})}
    out = stage.run(inputs, params, "p0")["tokenizer"]
    assert out.height == 1 and 263 < out["vocab_size"][0] <= SMALL_VOCAB
    assert out.equals(stage.run(inputs, params, "p0")["tokenizer"])
    assert not any(check.fn(out)[0] for check in stage.outputs["tokenizer"].checks)
    tok = resolve_tokenizer("default", {"tokenizer": FrameArtifact({"tokenizer": out})})
    assert tok.decode(tok("Northwick")["input_ids"]) == "Northwick"


def test_stage_trains_on_a_text_directory(tmp_path):
    for i, text in enumerate(CORPUS[:50]):
        (tmp_path / f"{i:03d}.txt").write_text(text)
    stage = get_stage("tokenizer")
    params = stage.parse_params({"corpus": str(tmp_path), "vocab_size": 400})
    out = stage.run({}, params, "p0")["tokenizer"]
    assert out["vocab_size"][0] <= 400


@pytest.mark.parametrize(
    ("raw", "message"),
    [({"vocab_size": 10}, "vocab_size"), ({"corpus": "/no/such/dir"}, "corpus"), ({"vocab": 1}, "vocab")],
)
def test_bad_params_name_the_field(raw, message):
    with pytest.raises(StageError, match=message):
        get_stage("tokenizer").parse_params(raw)


@given(st.lists(st.sampled_from([*'<>/{}[]":, ntool_cal\\', "<tool_call>", "</tool_call>", '{"name": "x"',
                                 '"arguments": {}}']), max_size=60).map("".join))
def test_parse_tool_calls_never_raises_and_returns_well_formed_calls(text):
    for call in T.parse_tool_calls(text):
        assert isinstance(call["name"], str) and isinstance(call["arguments"], dict)


def test_a_corpus_of_empty_files_is_refused(tmp_path: Path) -> None:
    from tasks.tokenizer import corpus_texts

    (tmp_path / "a.txt").write_text("\n\n")
    (tmp_path / "b.md").write_text("")
    with pytest.raises(ValueError, match="every .txt/.md/.markdown file is empty"):
        list(corpus_texts(str(tmp_path), {}))


@pytest.fixture(scope="module")
def domain_graphs() -> pl.DataFrame:
    from envgen.domain_spec import load_domain

    specs = {name: load_domain(name) for name in ("airline", "telecom")}
    return pl.DataFrame({"domain": list(specs), "spec_json": [s.model_dump_json() for s in specs.values()]})


def test_domain_text_holds_schemas_calls_and_records_of_the_known_domains_only(domain_graphs):
    from tasks.tokenizer import domain_texts

    [airline] = list(domain_texts(domain_graphs, heldout=("telecom",)))
    lines = [json.loads(line) for line in airline.splitlines()[1:] if line.startswith("{")]
    calls = [line for line in lines if "arguments" in line]
    assert "Policies:" in airline and calls and all(set(c) == {"name", "arguments"} for c in calls)
    assert any("reservation_id" in line for line in lines if "name" not in line)  # a record's columns
    assert len(list(domain_texts(domain_graphs))) == 2


def test_stage_with_domain_text_writes_tool_calls_in_fewer_tokens(world_docs, domain_graphs):
    stage = get_stage("tokenizer")
    inputs = {"world": FrameArtifact({"documents": world_docs}), "domain_graphs": FrameArtifact({"domains": domain_graphs})}
    call = '<tool_call>{"name": "lookup_user_by_email", "arguments": {"email": "ann@example.com"}}</tool_call>'
    lengths = {}
    for domain_text in (False, True):
        params = stage.parse_params({"vocab_size": 1024, "domain_text": domain_text})
        out = stage.run(inputs, params, "p0")["tokenizer"]
        assert not any(check.fn(out)[0] for check in stage.outputs["tokenizer"].checks)
        tok = resolve_tokenizer("default", {"tokenizer": FrameArtifact({"tokenizer": out})})
        lengths[domain_text] = len(tok(call)["input_ids"])
        assert tok.decode(tok(call)["input_ids"]) == call
    assert lengths[True] < 0.7 * lengths[False]


def test_domain_graphs_enter_the_key_only_with_domain_text():
    from data_contracts.store import ArtifactStore

    stage = get_stage("tokenizer")

    def key(domain_text: bool, graphs: str) -> str:
        params = stage.parse_params({"domain_text": domain_text})
        return ArtifactStore.artifact_key(stage, params, {"world": "w" * 20, "domain_graphs": graphs}, "p0")

    assert key(False, "a" * 20) == key(False, "b" * 20)
    assert key(True, "a" * 20) != key(True, "b" * 20)
    assert stage.read_keys(stage.parse_params({}), {"world": "w", "domain_graphs": "g"}) == {"world": "w"}


@pytest.mark.parametrize(("domain_text", "planned"), [(False, ["world", "tokenizer"]),
                                                      (True, ["domain_graphs", "world", "tokenizer"])])
def test_the_data_dag_builds_domain_graphs_for_the_tokenizer_only_with_domain_text(domain_text, planned):
    from flows.plan import plan_dag

    plan = plan_dag(["tokenizer"], "tiny", "default", overrides={"tokenizer": {"domain_text": domain_text}})
    assert [stage.name for stage in plan] == planned
