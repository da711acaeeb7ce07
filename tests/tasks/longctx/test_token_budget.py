"""token_budget: a passage counts as cut only when its text stops inside a sentence, links and initials aside."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tasks.longctx.keychain import link_pattern
from tasks.longctx.token_budget import boundaries, cut_mid_sentence

LINK = link_pattern("hex8")
words = st.text("abcdefghij", min_size=2, max_size=8)  # "A." reads as an initial
sentences = st.lists(words, min_size=1, max_size=6).map(lambda ws: " ".join(ws).capitalize() + ".")


@given(st.lists(sentences, min_size=1, max_size=5), st.lists(st.sampled_from(['0a1b2c3d: "red fox"',
                                                                             "0a1b2c3d: 9f8e7d6c"]), max_size=2))
def test_whole_sentences_with_links_anywhere_are_not_cut(body, links):
    text = " ".join(body + links)
    assert not cut_mid_sentence([text], LINK)


@given(st.lists(sentences, min_size=1, max_size=5), st.lists(words, min_size=1, max_size=3))
def test_a_sentence_left_open_is_cut(body, tail):
    assert cut_mid_sentence([" ".join(body), " ".join([*body, *tail])], LINK)


def test_an_initial_is_not_a_sentence_end():
    text = "Matthew X. Dillon works for Martin. He was born in 1900."
    assert [text[b:b + 2] for b in boundaries(text)] == ["He", ""]
    assert cut_mid_sentence(["Works by Matthew X."], LINK)
    assert not cut_mid_sentence(['He said "yes." It ends (here.)'], re.compile("$^"))
