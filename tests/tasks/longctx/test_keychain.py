"""KeyChain (LoongRL section 3.1): chain construction, length bounds, placement, contract and determinism."""

from __future__ import annotations

import json
import random
import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from longctx_fixtures import qa_filtered, seed_frame, tokenizer, tokenizer_artifact

from data_contracts.stage import FrameArtifact, StageError, get_stage
from tasks.longctx import keychain as K
from tasks.longctx.records import KEYCHAIN

SMALL = {"n": 6, "n_regular": 3, "target_tokens": 1536}


def run(params: dict | None = None, qa: FrameArtifact | None = None, partition: str = "p0") -> dict[str, pl.DataFrame]:
    stage = get_stage("keychain")
    inputs = {"qa_filtered": qa or qa_filtered(), "tokenizer": tokenizer_artifact()}
    return stage.run(inputs, stage.parse_params({**SMALL, **(params or {})}), partition)


def failing_checks(frame: pl.DataFrame) -> dict[str, int]:
    return {c.name: sum(bool(x) for x in c.fn(frame)) for c in K.KEYCHAIN_CONTRACT.checks if any(c.fn(frame))}


def content(row: dict) -> str:
    return json.loads(row["prompt"])[0]["content"]


def cut_last_passage(prompt: str) -> str:
    """The prompt with its last passage ending mid-sentence."""
    messages = json.loads(prompt)
    passages, sep, question = messages[0]["content"].rpartition("\n\n")
    messages[0]["content"] = passages + " Notable people born" + sep + question
    return json.dumps(messages)


def follow(text: str, first: str, key_pattern: str) -> tuple[list[str], str]:
    """Trace a chain in the prompt text the way a reader would: find "KEY: value", repeat until a question."""
    keys, key = [], first
    for _ in range(64):
        keys.append(key)
        value = re.search(re.escape(key) + r': ("[^"]*"|' + key_pattern + ")", text).group(1)
        if value.startswith('"'):
            return keys, value[1:-1]
        key = value
    raise AssertionError("chain does not terminate")


@pytest.fixture(scope="module")
def default_run() -> dict[str, pl.DataFrame]:
    return run()


def test_every_row_passes_the_contract(default_run):
    from data_contracts.gate import validate

    frame = default_run["keychain"]
    assert frame.height == SMALL["n"] and default_run["rejected"].is_empty()
    report = validate("keychain", "keychain", frame, K.KEYCHAIN_CONTRACT, "p0")
    assert report.passed, report.failures()


def test_regular_long_context_qa_uses_other_seeds_and_asks_directly(default_run):
    from data_contracts.gate import validate

    regular, keychain = default_run["regular"], default_run["keychain"]
    assert regular.height == 3 and not set(regular["seed_id"]) & set(keychain["seed_id"])
    assert validate("keychain", "regular", regular, K.REGULAR_CONTRACT, "p0").passed
    for row in regular.iter_rows(named=True):
        text = content(row)
        assert text.rsplit("\n\n", 1)[1].startswith(f"Question: {row['question']}\n")
        assert not re.search(K.KEY_FORMATS["uuid32"][2], text)


def test_same_params_same_bytes(default_run):
    assert run()["keychain"].equals(default_run["keychain"])
    assert not run({"seed": 1})["keychain"].equals(default_run["keychain"])


def test_the_surface_question_leads_through_the_chain_to_the_hidden_question(default_run):
    for row in default_run["keychain"].iter_rows(named=True):
        text = content(row)
        surface = text.rsplit("\n\n", 1)[1]
        assert surface.startswith(f"Starting from key {row['first_key']},") and "\\boxed{}" in surface
        assert row["hidden_question"] not in surface
        keys, question = follow(text, row["first_key"], K.KEY_FORMATS[row["key_format"]][2])
        assert keys == row["chain"] and question == row["hidden_question"]
        for chain in json.loads(row["distractor_chains"]):
            assert follow(text, chain["keys"][0], K.KEY_FORMATS[row["key_format"]][2]) == (
                chain["keys"], chain["question"])
            assert chain["seed_id"] != row["seed_id"] and chain["question"] != row["hidden_question"]


def test_distractors_come_from_filtered_out_seeds_never_own_documents(default_run):
    for row in default_run["keychain"].iter_rows(named=True):
        titles = [p.split("\n", 1)[0] for p in K.passages(content(row))]
        own = {i for i, t in enumerate(titles) if t.startswith(f"Entry {row['seed_id']}-")}
        assert set(row["gold_doc_positions"]) <= own and len(own) == 4
        assert all(titles[i].startswith("Entry r") for i in range(len(titles)) if i not in own)
        assert row["distractor_source"] == "rejected"


def test_too_few_filtered_out_documents_fall_back_to_other_kept_seeds():
    qa = qa_filtered(24, 3)
    frame = run({"min_pool_docs": 50, "n_regular": 0}, qa=qa)["keychain"]
    assert set(frame["distractor_source"]) == {"rejected+kept"}
    assert not failing_checks(frame)


@settings(max_examples=12, deadline=None)
@given(
    hops=st.integers(1, 4),
    chains_per_1k=st.floats(0.0, 4.0),
    key_format=st.sampled_from(["uuid32", "hex8"]),
    placement=st.sampled_from(["uniform", "centred"]),
    target=st.integers(1024, 3072),
    seed=st.integers(0, 2**16),
)
def test_chain_properties_hold_for_any_setting(hops, chains_per_1k, key_format, placement, target, seed):
    params = {"n": 2, "n_regular": 0, "hops": hops, "chains_per_1k": chains_per_1k, "key_format": key_format,
              "placement": placement, "target_tokens": target, "seed": seed}
    out = run(params)
    frame = out["keychain"]
    assert frame.height + out["rejected"].height == 2
    assert not failing_checks(frame)
    n_distractor = round(chains_per_1k * target / 1000)
    for row in frame.iter_rows(named=True):
        assert len(row["chain"]) == hops and row["n_distractor_chains"] == n_distractor
        assert re.fullmatch(K.KEY_FORMATS[key_format][2], row["first_key"])
        assert target * 0.98 <= row["tokens"] <= target
        assert row["tokens"] == len(tokenizer().apply_chat_template(json.loads(row["prompt"]), return_dict=False,
                                                                    add_generation_prompt=True))


@given(keys=st.lists(st.from_regex(r"[0-9A-F]{32}", fullmatch=True), min_size=1, max_size=8, unique=True),
       question=st.text(min_size=1, max_size=40).filter(lambda q: '"' not in q))
def test_link_statements_form_a_linear_acyclic_chain(keys, question):
    links = dict(s.split(": ", 1) for s in K.link_statements(keys, question))
    assert list(links) == keys  # one statement per key, keys distinct
    seen, key = set(), keys[0]
    while not links[key].startswith('"'):
        assert key not in seen
        seen.add(key)
        key = links[key]
    assert links[key] == f'"{question}"' and len(seen) == len(keys) - 1


@given(n_own=st.integers(1, 6), n_dis=st.integers(0, 60), seed=st.integers(0, 1000))
def test_placement(n_own, n_dis, seed):
    total = n_own + n_dis
    uniform = K.place_own(random.Random(seed), n_own, total, "uniform")
    centred = K.place_own(random.Random(seed), n_own, total, "centred")
    for positions in (uniform, centred):
        assert len(set(positions)) == n_own and all(0 <= p < total for p in positions)
    assert set(centred) <= set(K.centred_window(n_own, total))
    if total >= 3 * n_own:
        assert all(total // 3 <= p < total - total // 3 for p in centred)


@pytest.mark.parametrize("key_format", ["uuid32", "hex8"])
def test_keys_are_distinct_and_of_their_format(key_format):
    keys = K.make_keys(random.Random(0), key_format, 200, avoid="")
    assert len(set(keys)) == 200 and all(re.fullmatch(K.KEY_FORMATS[key_format][2], k) for k in keys)


def test_centred_placement_puts_gold_documents_in_the_middle_third():
    frame = run({"placement": "centred", "n": 3, "n_regular": 0})["keychain"]
    for row in frame.iter_rows(named=True):
        window = K.centred_window(4, row["n_docs"])
        assert set(row["gold_doc_positions"]) <= set(window) and len(window) < row["n_docs"]


def test_items_that_cannot_fit_are_rejected_with_a_reason():
    kept = seed_frame(3, "k")
    bad_answer = kept.with_columns(pl.when(pl.col("id") == "k0").then(pl.lit("Atlantis")).otherwise("answer")
                                   .alias("answer"))
    qa = FrameArtifact({"seeds": bad_answer, "rejected": qa_filtered().read("rejected")})
    out = run({"n": 3, "n_regular": 0, "target_tokens": 256}, qa=qa)
    reasons = dict(out["rejected"].select("seed_id", "reason").iter_rows())
    assert reasons["k0"] == "answer_not_in_supporting_docs"
    assert out["keychain"].height + len(reasons) == 3
    assert all(r in {"answer_not_in_supporting_docs", "target_too_small_for_distractors",
                                       "own_context_exceeds_target"} for r in reasons.values())


def test_eval_seeds_are_never_used():
    mixed = pl.concat([seed_frame(4, "k"), seed_frame(4, "v", split="eval")])
    rejected = pl.concat([qa_filtered().read("rejected"),
                          seed_frame(40, "w", split="eval").with_columns(pl.lit("too_easy").alias("reason"))])
    frame = run({"n": 8, "n_regular": 0}, qa=FrameArtifact({"seeds": mixed, "rejected": rejected}))["keychain"]
    assert frame.height == 4 and all(s.startswith("k") for s in frame["seed_id"])
    assert not any("Entry v" in p or "Entry w" in p for p in frame["prompt"])


def test_a_held_out_set_draws_on_every_seed_of_its_split_not_only_the_kept():
    # a distractor pool with room to spare: the subject is which seeds are drawn, not a pool running dry
    kept, rejected = seed_frame(3, "k", split="eval"), seed_frame(48, "w", split="eval")
    qa = FrameArtifact({"seeds": kept, "rejected": rejected.with_columns(pl.lit("too_hard").alias("reason"))})
    only_kept = run({"n": 8, "n_regular": 0, "split": "eval"}, qa=qa)["keychain"]
    every = run({"n": 8, "n_regular": 0, "split": "eval", "items_from": "all"}, qa=qa)["keychain"]
    assert only_kept.height == 3 and every.height == 8
    assert any(s.startswith("w") for s in every["seed_id"])


def test_a_local_tokenizer_directory_measures_the_same(tmp_path, default_run):
    from inference.tokenizer import save

    directory = save(tokenizer(), tmp_path / "tok")
    frame = run({"tokenizer": str(directory)})["keychain"]
    assert frame["tokens"].to_list() == default_run["keychain"]["tokens"].to_list()


@pytest.mark.parametrize(
    ("tamper", "check"),
    [
        (lambda r: {**r, "prompt": r["prompt"].replace(r["chain"][-1] + ":", "0" * len(r["chain"][-1]) + ":")},
         "chains_resolve"),
        (lambda r: {**r, "prompt": r["prompt"].replace("\\\\boxed{}.", json.dumps(r["hidden_question"])[1:-1])},
         "hidden_question_hidden"),
        (lambda r: {**r, "tokens": r["target_tokens"] + 1}, "length_within_window"),
        (lambda r: {**r, "answer": "Atlantis"}, "answer_in_context"),
        (lambda r: {**r, "chain": [r["chain"][0]] * len(r["chain"])}, "keys_unique_linear"),
        (lambda r: {**r, "prompt": cut_last_passage(r["prompt"])}, "passages_end_at_sentences"),
    ],
)
def test_checks_catch_broken_rows(default_run, tamper, check):
    row = default_run["keychain"].row(0, named=True)
    broken = KEYCHAIN.frame([tamper(row)])
    assert check in failing_checks(broken)


@pytest.mark.parametrize(
    ("raw", "field"),
    [({"target_tokens": 10}, "target_tokens"), ({"key_format": "uuid"}, "key_format"),
     ({"tokenizer": "/no/such/dir"}, "tokenizer"), ({"hops": 0}, "hops"), ({"placement": "edge"}, "placement")],
)
def test_bad_params_name_the_field(raw, field):
    with pytest.raises(StageError, match=field):
        get_stage("keychain").parse_params(raw)


def test_on_real_world_seeds():
    from longctx_fixtures import real_world

    world, tok = real_world()
    seeds = world.read("seeds").filter(pl.col("split") == "train").with_columns(
        pl.lit(4).alias("pass_count"), pl.lit(8).alias("pass_k"))
    kept = seeds.filter(pl.int_range(pl.len()) % 4 == 0)
    rejected = seeds.filter(pl.int_range(pl.len()) % 4 != 0).with_columns(pl.lit("too_hard").alias("reason"))
    stage = get_stage("keychain")
    out = stage.run({"qa_filtered": FrameArtifact({"seeds": kept, "rejected": rejected}), "tokenizer": tok},
                    stage.parse_params({"n": 12, "target_tokens": 2048, "hops": 3}), "p0")
    assert out["keychain"].height + out["rejected"].height == 12 and out["keychain"].height >= 10
    assert not failing_checks(out["keychain"])
    own_titles = {r["id"]: {d["title"] for d in json.loads(r["docs"])} for r in kept.iter_rows(named=True)}
    for row in out["keychain"].iter_rows(named=True):
        titles = [p.split("\n", 1)[0] for p in K.passages(content(row))]
        own = own_titles[row["seed_id"]]
        assert sum(t in own for t in titles) == len(own)  # no distractor shares a title with an own document
        assert {titles[i] for i in row["gold_doc_positions"]} <= own


def test_no_answer_holds_more_than_its_share_of_a_kind():
    """The difficulty filter keeps what a guessing reference gets right: its kept seeds may share answers."""
    kept = pl.DataFrame({"id": [f"s{i}" for i in range(120)],
                         "answer": ["Niue" if i % 3 == 0 else f"answer {i}" for i in range(120)]})
    items = K.select_items(kept, K.KeyChainParams(n=40, n_regular=40))
    for kind in ("keychain", "regular"):
        chosen = items.filter(pl.col("kind") == kind)
        assert chosen.height == 40 and chosen["answer"].value_counts()["count"].max() == 2
    assert items["id"].n_unique() == items.height
