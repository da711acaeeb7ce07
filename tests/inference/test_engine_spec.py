"""EngineSpec: every engine kind's form parsed once, malformed specs refused in one line, round trips; a params
value that is an engine spec or a word standing for one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference.engine_spec import EngineSpec, EngineSpecError, engine_or, hf_spec

paths = st.text(st.characters(blacklist_characters="#\n", blacklist_categories=("Cs",)), min_size=1, max_size=30)
names = st.from_regex(r"[A-Za-z0-9_.\-/]{1,20}", fullmatch=True)


@given(kind=st.sampled_from(["hf", "vllm"]), target=paths)
def test_local_specs_name_their_checkpoint(kind, target):
    spec = EngineSpec.parse(f"{kind}:{target}")
    assert (spec.kind, spec.target, spec.model) == (kind, target, None)
    assert spec.local_inputs() == [target] and str(spec) == f"{kind}:{target}"


@given(host=st.from_regex(r"[a-z0-9.]{1,15}(:[0-9]{1,5})?", fullmatch=True), model=names,
       scheme=st.sampled_from(["http", "https"]), slash=st.booleans())
def test_served_specs_name_url_and_model_and_no_local_input(host, model, scheme, slash):
    spec = EngineSpec.parse(f"openai:{scheme}://{host}/v1{'/' if slash else ''}#{model}")
    assert (spec.kind, spec.target, spec.model) == ("openai", f"{scheme}://{host}/v1", model)
    assert spec.local_inputs() == [] and EngineSpec.parse(str(spec)) == spec


@pytest.mark.parametrize("bad", ["", "tiny", "hf:", "gpt:model", "openai:http://h/v1", "openai:h/v1#m",
                                 "openai:http://h/v1#", "garbage-spec"])
def test_a_malformed_spec_is_one_line_naming_it(bad):
    with pytest.raises(EngineSpecError, match="engine spec") as info:
        EngineSpec.parse(bad)
    assert repr(bad) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("value", "named"), [("0123456789abcdef0123", None), ("tiny_policy", None),
                                               ("hf:0123456789abcdef0123", EngineSpec("hf", "0123456789abcdef0123"))])
def test_a_value_that_names_no_engine_kind_is_no_spec(value, named):
    assert EngineSpec.named_in(value) == named
    with pytest.raises(EngineSpecError):
        EngineSpec.named_in("openai:nowhere")


@given(st.text(max_size=40))
def test_parse_never_fails_but_with_its_own_error(text):
    try:
        spec = EngineSpec.parse(text)
    except EngineSpecError:
        return
    assert EngineSpec.parse(str(spec)) == spec


WORDS = {"tiny": "the tiny_policy artifact", "bigram": "fitted on the candidates"}


@given(value=st.one_of(st.sampled_from([*WORDS, "hf:d", "openai:http://h/v1#m", "vllm:d"]), st.text(max_size=20)),
       kinds=st.sampled_from([("hf", "openai", "vllm"), ("hf", "openai")]))
def test_engine_or_keeps_a_word_or_an_allowed_spec_and_names_every_form_otherwise(value, kinds):
    try:
        spec = EngineSpec.named_in(value)
    except EngineSpecError:
        spec = None
    allowed = value in WORDS or (spec is not None and spec.kind in kinds)
    if allowed:
        assert engine_or(value, WORDS, kinds) == value
        return
    with pytest.raises(ValueError) as info:
        engine_or(value, WORDS, kinds)
    assert repr(value) in str(info.value) and "'tiny' (the tiny_policy artifact)" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_kind_not_allowed_is_refused_by_its_name():
    with pytest.raises(ValueError, match="a vllm engine cannot serve here; expected hf:DIR, openai:URL#MODEL"):
        engine_or("vllm:d", WORDS, ("hf", "openai"))


@given(target=paths)
def test_hf_spec_is_the_spec_that_parses_back_to_its_directory(target):
    assert EngineSpec.parse(hf_spec(target)) == EngineSpec("hf", target)
