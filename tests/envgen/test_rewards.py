"""Rewards: boxed extraction, normalization, each scorer's range and symmetry, and the reward hacks of DESIGN.md
section 7."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envgen.rewards import (
    NAME_GLUE,
    REWARDS,
    YES_NO,
    extract_boxed,
    get_reward,
    normalize,
    score_by_reward_fn,
    score_exact,
    score_token_f1,
    score_two_way_naive,
)


def boxed(answer: str) -> str:
    return f"Let me trace the chain and reason.\nSo the answer is \\boxed{{{answer}}}"


# Balanced-brace content: text without braces, or {inner} groups, concatenated.
_plain = st.text(alphabet=st.characters(blacklist_characters="{}\\", blacklist_categories=("Cs",)), max_size=8)
balanced = st.recursive(_plain, lambda inner: st.lists(st.one_of(_plain, inner.map(lambda s: "{" + s + "}")),
                                                       max_size=4).map("".join), max_leaves=12)
answers = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
words = st.lists(st.sampled_from(["paris", "north", "korea", "1984", "the", "of", "madrid", "atlético", "new", "york",
                                  "or", "and", "yes", "no", "river"]), max_size=6).map(" ".join)


@given(balanced, st.text(alphabet=st.characters(blacklist_characters="\\", blacklist_categories=("Cs",)), max_size=20))
def test_extract_boxed_round_trips_nested_braces(content: str, prefix: str) -> None:
    assert extract_boxed(f"{prefix}\\boxed{{ignored}} then \\boxed{{{content}}}") == content


@pytest.mark.parametrize(("text", "expected"), [
    ("no box here", None),
    ("\\boxed{unclosed", None),
    ("\\boxed 42$ done", "42"),
    ("\\fbox{A}", "A"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{a \\{ b}", "a \\{ b"),
    ("\\boxed{first} and \\boxed{second}", "second"),
])
def test_extract_boxed_cases(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@given(answers)
def test_normalize_is_idempotent(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)


@pytest.mark.parametrize("name", sorted(REWARDS))
@given(pred=answers, gold=answers)
def test_every_reward_is_in_unit_interval(name: str, pred: str, gold: str) -> None:
    gold = gold or "x"
    (score,) = get_reward(name)([boxed(pred)], answer=[gold], aliases=[[]])
    assert 0.0 <= score <= 1.0


@pytest.mark.parametrize("scorer", [score_exact, score_token_f1, score_two_way_naive])
@given(a=words.filter(bool), b=words.filter(bool))
def test_symmetric_scorers(scorer, a: str, b: str) -> None:
    assert scorer(a, [b]) == scorer(b, [a])


@given(gold=words.filter(lambda w: normalize(w) and not set(normalize(w).split()) <= {"of", "or", "and"}))
def test_gold_scores_one_and_aliases_count(gold: str) -> None:
    assert two_way([boxed("Zanzibar")], answer=["Unguja"], aliases=[[gold, "Zanzibar"]]) == [1.0]
    assert score_exact(gold, [gold]) == 1.0


two_way = REWARDS["two_way"]


@pytest.mark.parametrize(("pred", "gold"), [
    ("the", "Paris"),
    ("", "Paris"),
    ("no", "North Korea"),
    ("19", "1984"),
    ("Paris or London", "Paris"),
    ("London, Paris", "Paris"),
    ("Paris / Lyon", "Paris"),
    (("Paris is a lovely city and " * 20)[:500], "Paris"),
    ("of the", "Bank of America"),
    ("yes", "Yes Minister"),
    ("no", "No Doubt"),
    ("New", "New York City"),
    ("4,120 or 5,000", "4,120"),
    ("Carlos Martinez", "Martinez LLC"),
    ("1984 1985 1986", "1984"),
    ("1984\n1985", "1984"),
    ("Paris London", "Paris"),
    ("Lyon\nParis", "Paris"),
    ("Paris" + "-" * 400, "Paris"),
    ("." * 90 + " Paris", "Paris"),
    # Half of a two-word name or less: which half identifies it is not in the text ("Albert" or "Einstein",
    # "Mexico" or "City"), and "Madrid" is a city, not the club; accepted short forms come as aliases.
    ("Albert", "Albert Einstein"),
    ("Einstein", "Albert Einstein"),
    ("Madrid", "Atlético Madrid"),
    ("City", "Mexico City"),
    ("America", "Bank of America"),
    ("Garfunkel", "Simon & Garfunkel"),
    ("York", "New York City"),
])
def test_reward_hacks_score_zero(pred: str, gold: str) -> None:
    assert two_way([boxed(pred)], answer=[gold]) == [0.0]


def test_the_naive_reward_is_hacked() -> None:
    """The unhardened two-way substring match of the report pays every hack; the hardened one pays none."""
    hacks = [("the", "Paris"), ("no", "North Korea"), ("19", "1984"), ("Paris or London", "Paris")]
    completions, golds = [boxed(p) for p, _ in hacks], [g for _, g in hacks]
    assert REWARDS["two_way_naive"](completions, answer=golds) == [1.0] * 4
    assert two_way(completions, answer=golds) == [0.0] * 4


@pytest.mark.parametrize(("pred", "gold"), [
    ("Atletico Madrid", "Atlético Madrid"),
    ("Atlético Madrid", "Atletico Madrid"),
    ("the answer is Paris", "Paris"),
    ("It is Paris.", "Paris"),
    ("\\text{Paris}", "Paris"),
    ("New York", "New York City"),
    ("Yes", "yes"),
    ("Simon and Garfunkel", "Simon & Garfunkel"),
    ("Wells, Carpenter and Jacobs", "Wells, Carpenter and Jacobs"),
    ("Chief of Protocol of the United States", "Chief of Protocol"),
    ("The Who", "The Who"),
    ("4120 seats", "4,120"),
    ("Martinez", "Martinez LLC"),
    ("Smith", "Smith and Sons"),
    ("Martinez LLC", "Martinez"),
    ("about 1,250,000 people", "1250000 people"),
    ("The answer is 1984.", "1984"),
])
def test_correct_answers_score_one(pred: str, gold: str) -> None:
    assert two_way([boxed(pred)], answer=[gold]) == [1.0]


def test_a_short_form_is_accepted_through_an_alias() -> None:
    assert two_way([boxed("Einstein")], answer=["Albert Einstein"], aliases=[["Einstein"]]) == [1.0]


name_word = st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=9).filter(
    lambda w: w not in NAME_GLUE | YES_NO | {"either"}).map(str.capitalize)
names = st.lists(name_word, min_size=1, max_size=3).map(" ".join)
numbers = st.integers(0, 10**6).map(str)
JOINERS = (" ", "  ", "\n", ", ", ",\n", " or ", "; ", " and ", " / ", " | ", " & ")
SENTENCES = ("{}", "The answer is {}.", "It is {}", "So the final answer is {}", "{} is the answer", "\\text{{{}}}")


@given(data=st.data(), kind=st.sampled_from([numbers, names]), joiner=st.sampled_from(JOINERS))
def test_a_list_of_candidates_scores_zero(data: st.DataObject, kind, joiner: str) -> None:
    """The gold among distractors, whatever joins them, is a list of candidates, never an answer."""
    gold = data.draw(kind)
    words = set(normalize(gold).split())
    distractors = data.draw(st.lists(kind.filter(lambda d: not words & set(normalize(d).split())), min_size=1,
                                     max_size=4))
    at = data.draw(st.integers(0, len(distractors)))
    listed = joiner.join([*distractors[:at], gold, *distractors[at:]])
    assert two_way([boxed(listed)], answer=[gold]) == [0.0]


@given(gold=st.one_of(numbers, names), sentence=st.sampled_from(SENTENCES))
def test_the_gold_alone_or_in_a_sentence_scores_one(gold: str, sentence: str) -> None:
    assert two_way([boxed(sentence.format(gold))], answer=[gold]) == [1.0]


@given(words=st.lists(name_word, min_size=2, max_size=5, unique=True), data=st.data())
def test_a_fragment_holding_half_of_a_name_or_less_scores_zero(words: list[str], data: st.DataObject) -> None:
    size = data.draw(st.integers(1, len(words) // 2))
    start = data.draw(st.integers(0, len(words) - size))
    assert two_way([boxed(" ".join(words[start:start + size]))], answer=[" ".join(words)]) == [0.0]


@given(gold=st.one_of(numbers, names), pad=st.sampled_from("-.*_=~#"), n=st.integers(100, 400),
       before=st.booleans())
def test_padding_past_the_character_cap_scores_zero(gold: str, pad: str, n: int, before: bool) -> None:
    """Punctuation is dropped by normalization, so a 400-character box can hold one token: the cap counts
    characters too."""
    padded = pad * n + gold if before else gold + pad * n
    assert two_way([boxed(padded)], answer=[gold]) == [0.0]


def test_completion_formats_and_columns() -> None:
    messages = [[{"role": "assistant", "content": boxed("USA")}],
                [{"role": "assistant", "content": [{"type": "text", "text": boxed("Canada")}]}]]
    out = two_way(messages, answer=["United States", "United States"], aliases=['["USA"]', None],
                  prompts=["p", "p"], completion_ids=[[1], [2]], extra_column=[0, 0])
    assert out == [1.0, 0.0]
    assert two_way(["no box"], answer=["x"]) == [0.0]
    import numpy as np

    arrays = two_way([boxed("USA"), boxed("US")], answer=np.array(["United States", "Canada"]),
                     aliases=np.array([np.array(["USA"]), np.array(["CA"])], dtype=object))
    assert arrays == [1.0, 0.0]
    with pytest.raises(ValueError, match="answer"):
        two_way([boxed("x")])
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        two_way([boxed("x")], answer=["x", "y"])
    with pytest.raises(ValueError, match="known rewards"):
        get_reward("nope")


@pytest.mark.parametrize(("name", "pred", "gold", "expected"), [
    ("exact_match", "The Paris", "paris", 1.0),
    ("exact_match", "Paris, France", "Paris", 0.0),
    ("token_f1", "new york", "new york city", 0.8),
    ("token_f1", "no", "north korea", 0.0),
    ("pred_in_gold", "york", "new york", 1.0),
    ("pred_in_gold", "the answer is york", "new york", 0.0),
    ("gold_in_pred", "the answer is new york", "new york", 1.0),
    ("gold_in_pred", "york", "new york", 0.0),
    ("math", "\\frac{3}{4}", "0.75", 1.0),
    ("math", "1,000", "1000", 1.0),
    ("math", "-2/4", "-1/2", 1.0),
    ("math", "x + 1", "x+1", 1.0),
    ("math", "3", "4", 0.0),
    ("choice", "B", "B", 1.0),
    ("choice", "(b) 42", "B", 1.0),
    ("choice", "B or C", "B", 0.0),
    ("choice", "C", "B", 0.0),
])
def test_ablation_and_math_rewards(name: str, pred: str, gold: str, expected: float) -> None:
    assert get_reward(name)([boxed(pred)], answer=[gold]) == [pytest.approx(expected)]


@given(st.permutations(["4821", "1177", "9030", "5512"]))
def test_needle_reward_is_order_free_and_needs_every_value(values: list[str]) -> None:
    gold = '["4821", "1177", "9030", "5512"]'
    assert REWARDS["needle_all"]([boxed(", ".join(values))], answer=[gold]) == [1.0]
    assert REWARDS["needle_all"]([boxed(", ".join(values[:3]))], answer=[gold]) == [0.0]
    assert REWARDS["needle_all"]([boxed(", ".join([*values, "1234"]))], answer=[gold]) == [0.0]
    assert REWARDS["needle_recall"]([boxed(", ".join(values[:3]))], answer=[gold]) == [0.75]


def test_configured_rewards_change_one_option() -> None:
    from envgen.rewards import configure

    long_answer = boxed("as far as we can tell from these documents it is Paris")
    assert two_way([long_answer], answer=["Paris"]) == [0.0]
    assert configure("two_way", cap_factor=20)([long_answer], answer=["Paris"]) == [1.0]
    assert configure("needle_all", allow_extra=True)([boxed("1, 2, 3")], answer=["1,2"]) == [1.0]
    with pytest.raises(ValueError, match="options: cap_factor, cap_min, min_gold_coverage"):
        configure("two_way", cap=3)


# One row per reward of the mixture, each answered so that only its own reward pays it.
MIXED = [
    ("two_way", "It is Paris", "Paris", 1.0),
    ("choice", "B) 42", "B", 1.0),
    ("choice", "B", "C", 0.0),
    ("math", "\\frac{3}{4}", "0.75", 1.0),
    ("needle_all", "1177, 4821", '["4821", "1177"]', 1.0),
]


def test_the_router_scores_each_row_with_the_reward_it_names() -> None:
    names, preds, golds, expected = map(list, zip(*MIXED, strict=True))
    completions = [[{"role": "assistant", "content": boxed(p)}] for p in preds]
    trl_kwargs = {"prompts": [[{"role": "user", "content": "q"}]] * len(MIXED), "completion_ids": [[1]] * len(MIXED),
                  "trainer_state": object(), "log_metric": lambda *a: None}
    scores = score_by_reward_fn(completions, reward_fn=names, answer=golds, aliases=[[] for _ in MIXED],
                                **trl_kwargs)
    assert scores == expected
    for name in set(names):  # each row's own reward would score the others differently
        assert REWARDS[name](completions, answer=golds) != expected


def test_the_router_refuses_a_missing_column_or_an_unknown_reward() -> None:
    with pytest.raises(ValueError, match="needs a 'reward_fn' column"):
        score_by_reward_fn([boxed("Paris")], answer=["Paris"])
    with pytest.raises(ValueError, match=r"unknown reward\(s\) 'f1', None"):
        score_by_reward_fn([boxed("Paris")] * 3, reward_fn=["two_way", "f1", None], answer=["Paris"] * 3)


@pytest.mark.parametrize(("pred", "gold"), [
    ("the Spanish club Atlético Madrid", "Atlético Madrid"),
    ("the river Thames", "Thames"),
    ("Thames (river)", "Thames"),
    ("Dickens (novelist)", "Dickens"),
    ("Charles Dickens (English novelist)", "Charles Dickens"),
    ("Paris, the capital of France", "Paris"),
    ("The answer is the river Thames.", "Thames"),
    ("the painter Vincent van Gogh", "Vincent van Gogh"),
    ("the year 1984", "1984"),
    ("\\text{the river Thames}", "Thames"),
    ("the Danube river", "Danube"),  # a type word after the name, as a descriptor before it
    ("Danube river", "Danube"),
    ("It is the Danube river.", "Danube"),
    ("Niue island", "Niue"),
    ("the famous Danube river", "Danube"),
])
def test_a_descriptor_beside_the_answer_is_the_answer_in_context(pred: str, gold: str) -> None:
    assert two_way([boxed(pred)], answer=[gold]) == [1.0]


@pytest.mark.parametrize(("pred", "gold"), [
    ("Paris, the capital of France", "France"),  # a name inside the descriptor is not the answer
    ("the river Thames or Severn", "Severn"),
    ("the river Thames or Severn", "Thames"),
    ("the river Lyon Paris", "Paris"),
    ("Paris, the city or Lyon", "Paris"),
    ("Paris (London)", "Paris"),
    ("Paris (London)", "London"),
    ("London (the Paris city)", "Paris"),
    ("the Spanish club Madrid", "Atlético Madrid"),
    ("the city " + "very " * 30 + "Paris", "Paris"),  # the caps measure the whole prediction
    ("the Rhine Danube river", "Danube"),  # a type word after a list names no one of it
    ("the Danube river or Rhine", "Danube"),
    ("Rhine or the Danube river", "Danube"),
    ("the Danube river Rhine", "Danube"),
    ("Paris lyon", "Paris"),  # a lower-case word after the name that is no type word may be a candidate
    ("the Davis Inc Heatherfurt city", "Heatherfurt"),  # a designator before the gold ends another name
    ("the city Davis Inc Heatherfurt", "Heatherfurt"),
    ("Paris " + "river " * 30, "Paris"),
])
def test_a_descriptor_does_not_hide_a_list_or_a_fragment(pred: str, gold: str) -> None:
    assert two_way([boxed(pred)], answer=[gold]) == [0.0]


NOUNS = ("river", "club", "city", "novelist", "band", "team", "capital", "painter", "company", "village")
ADJECTIVES = ("", "Spanish ", "English ", "famous ", "old ", "Korean ")
DESCRIBED = ("the {adj}{noun} {gold}", "{gold} ({adj}{noun})", "{gold}, the {noun} of {other}",
             "{gold}, a {adj}{noun} in {other}", "The answer is the {noun} {gold}.", "the {gold} {noun}",
             "{gold} {noun}", "The answer is the {gold} {noun}.")


@given(gold=names, other=names, noun=st.sampled_from(NOUNS), adj=st.sampled_from(ADJECTIVES),
       form=st.sampled_from(DESCRIBED))
def test_generated_verbose_correct_answers_score_one(gold: str, other: str, noun: str, adj: str, form: str) -> None:
    assert two_way([boxed(form.format(gold=gold, other=other, noun=noun, adj=adj))], answer=[gold]) == [1.0]


# The gold placed where no descriptor makes it the answer: inside the descriptor, in a list beside a distractor,
# or behind a descriptor that joins candidates.
HACKS = ("{other}, the {noun} of {gold}", "{other} ({gold})", "{gold} ({other})", "the {noun} {other} {gold}",
         "the {noun} {gold} {other}", "the {noun} {other} or {gold}", "the {noun} {gold} or {other}",
         "the {noun} {other}, {gold}", "{other}, the {noun} or {gold}",
         "the {gold} {noun} {other}", "{other}, {gold} ({noun})", "the {other} {gold} {noun}",
         "the {gold} {other} {noun}", "{other} or the {gold} {noun}", "the {gold} {noun} or {other}",
         "{other}, the {gold} {noun}", "{gold} {noun} ({other})", "{other} ({gold} {noun})",
         "{other} {noun} {gold} {noun}")


@given(data=st.data(), noun=st.sampled_from(NOUNS), form=st.sampled_from(HACKS))
def test_generated_descriptor_hacks_score_zero(data: st.DataObject, noun: str, form: str) -> None:
    gold = data.draw(names)
    other = data.draw(names.filter(lambda d: not set(normalize(d).split()) & set(normalize(gold).split())))
    assert two_way([boxed(form.format(gold=gold, other=other, noun=noun))], answer=[gold]) == [0.0]


def test_two_typed_names_are_a_list_even_when_the_first_reads_as_a_demonym() -> None:
    """"Aach" ends like "Czech": as a descriptor it would make "Aach river" say what "Aaa river" is."""
    assert two_way([boxed("Aach river Aaa river")], answer=["Aaa"]) == [0.0]
    assert two_way([boxed("the Aaa river")], answer=["Aaa"]) == [1.0]
