"""Verifiable rewards for QA, needle and math rollouts, TRL-compatible.

Every reward is ``fn(completions, **columns) -> list[float]``: completions are strings or chat messages
(``[{"role": "assistant", "content": ...}]``); the gold comes from the dataset columns (``answer``, ``aliases``);
other columns and TRL's own kwargs (``prompts``, ``completion_ids``, ...) are ignored. ``REWARDS`` maps the names
used in the mixture's ``reward_fn`` column to the functions; ``score_by_reward_fn`` scores a mixed dataset, each row
with the reward it names.

The main QA reward is LoongRL's two-way substring exact match on the last ``\\boxed{}`` (LoongRL report, "Rule-Based
Reward Design", Eq. 3), hardened against the hacks of DESIGN.md section 7: a plain substring test accepts
``\\boxed{the}`` (normalizes to "", inside everything), "no" for "North Korea", "19" for "1984", and a list of
every candidate. The plain variants stay available for ablations (LoongRL report, Table 5).

They live in ``envgen``, the lowest room above the data contracts, because they are the verifiers of the
single-turn and search environments and everything above scores with them: the agent loop (``inference``), the
difficulty filters (``tasks``) and RL (``training``).
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

RewardFn = Callable[..., list[float]]

# Closed-class words that carry no answer on their own (SQuAD drops only articles; a reward must also refuse
# "of", "is", "it" as a complete answer).
STOP_WORDS = frozenset({
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "but", "nor",
    "is", "are", "was", "were", "be", "been", "being", "it", "its", "this", "that", "these", "those",
    "there", "here", "as", "than", "then", "so", "such", "which", "who", "whom", "whose", "what", "when",
    "where", "why", "how", "answer", "final",
})
YES_NO = frozenset({"yes", "no"})
# Organisation designators: "Martinez" answers "Martinez LLC" and "Smith" answers "Smith and Sons" (the world's
# organisations have no aliases for that reason). With the stop words, the words that glue a name to its context.
DESIGNATORS = frozenset({"inc", "llc", "ltd", "plc", "corp", "group", "sons"})
NAME_GLUE = STOP_WORDS | DESIGNATORS
CHARS_PER_TOKEN = 8  # the character cap's floor is cap_min tokens of this width

_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+\*?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # "4,120" -> "4120", so it is one number, not a list
_PUNCT = frozenset(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014", "\u00bf", "\u00a1"}
# Separators of an answer that lists several candidates ("A or B", "A, B", "A / B", "A; B", "A & B", "A and B").
_CANDIDATE_SPLIT = re.compile(r"\s*(?:,|;|/|&|\bor\b|\band\b|\beither\b)\s*")


# --------------------------------------------------------------------------- extraction


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, a message dict, or a list of messages (the last assistant one)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        content = completion.get("content", "")
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return content or ""
    if isinstance(completion, Sequence):
        assistant = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        return completion_text(assistant[-1]) if assistant else ""
    raise TypeError(f"a completion must be a string or chat messages, got {type(completion).__name__}")


BOXED_INSTRUCTION = "Put the final answer in \\boxed{}."
"""Where the answer goes, worded once for every prompt whose reward reads the last ``\\boxed{}``."""


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces balanced; ``\\fbox{}`` too) or ``\\boxed x``.

    Returns None when there is no box or the last one is never closed (a truncated rollout has no answer).
    """
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)\s*(\{|\s)", text)]
    if not starts:
        return None
    last = starts[-1]
    if last.group(1) != "{":  # "\boxed 42": the answer runs to the next whitespace or "$"
        rest = re.match(r"[^\s$]+", text[last.end() :])
        return rest.group(0) if rest else None
    depth, i = 1, last.end()
    while i < len(text):
        ch = text[i]
        if ch == "\\" and text[i + 1 : i + 2] in ("{", "}"):
            i += 2  # an escaped brace is content
            continue
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return text[last.end() : i]
        i += 1
    return None


# --------------------------------------------------------------------------- normalization


def fold_accents(text: str) -> str:
    """NFKD and drop combining marks: "Atlético" -> "Atletico"."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))


_PUNCT_TABLE = {**{ord(ch): " " for ch in _PUNCT}, ord("'"): None, ord("\u2019"): None}


@functools.lru_cache(maxsize=65536)
def normalize(text: str) -> str:
    """SQuAD-style normalization plus accent folding and LaTeX command removal; idempotent.

    Punctuation becomes a space (so "Jones-Smith" keeps two tokens) except apostrophes, which are dropped
    ("O'Brien" -> "obrien"); "&" reads "and"; thousands separators go ("4,120" -> "4120")."""
    text = _THOUSANDS.sub("", _LATEX_COMMAND.sub(" ", text))
    if not text.isascii():
        text = fold_accents(text)
    text = text.lower().replace("&", " and ").translate(_PUNCT_TABLE)
    if not text.isascii():  # other Unicode punctuation (str.translate covered ASCII and the common quotes)
        text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(normalize(text).split())


def _contains(hay: Sequence[str], needle: Sequence[str]) -> bool:
    """``needle`` occurs in ``hay`` as a contiguous run of whole tokens."""
    n = len(needle)
    if n == 0 or n > len(hay):
        return False
    return any(tuple(hay[i : i + n]) == tuple(needle) for i in range(len(hay) - n + 1))


def _contentless(tokens: Sequence[str]) -> bool:
    return not tokens or all(t in STOP_WORDS for t in tokens)


# --------------------------------------------------------------------------- scorers (one prediction, many golds)


def score_two_way(
    pred: str | None,
    golds: Sequence[str],
    *,
    cap_factor: int = 3,
    cap_min: int = 10,
    min_gold_coverage: float = 0.6,
) -> float:
    """Hardened two-way substring match of one prediction against the gold answer and its aliases.

    1 when, on whole normalized tokens, the gold stands alone inside the prediction (see ``_stands_alone``), or the
    prediction is inside the gold and holds at least ``min_gold_coverage`` of the gold's content words. 0 for: no
    answer; an empty or stop-word-only answer; a prediction longer than ``max(cap_factor * gold, cap_min)`` tokens
    or ``max(cap_factor * gold, cap_min * CHARS_PER_TOKEN)`` characters (normalization drops punctuation, so
    "Paris-----…" is one token); yes/no against anything but the same yes/no; a list of candidates.

    The coverage default needs most of a name: which half of "Albert Einstein" identifies it cannot be read from
    the text ("Einstein", but "Mao" of "Mao Zedong", "Amazon" of "Amazon River"), and a half is often another
    entity ("Madrid" of "Atlético Madrid", "America" of "Bank of America"). Accepted short forms come as aliases.
    """
    if pred is None:
        return 0.0
    forms = [pred, *([slot] if (slot := answer_slot(pred)) is not None else [])]
    return max(_two_way_form(form, golds, measured=pred, cap_factor=cap_factor, cap_min=cap_min,
                             min_gold_coverage=min_gold_coverage) for form in forms)


def _two_way_form(
    pred: str, golds: Sequence[str], *, measured: str, cap_factor: int, cap_min: int, min_gold_coverage: float
) -> float:
    """``score_two_way`` of one form of the prediction; the caps measure the whole prediction (``measured``), so
    a descriptor never buys room for padding."""
    p, width, measured_len = _tokens(pred), len(" ".join(measured.split())), len(_tokens(measured))
    gold_tokens = [g for g in (_tokens(g) for g in golds)
                   if g and width <= max(cap_factor * len(" ".join(g)), cap_min * CHARS_PER_TOKEN)]
    if p and p in gold_tokens:  # an exact answer counts even when it is all closed-class words ("The Who")
        return 1.0
    if _contentless(p) or not gold_tokens:
        return 0.0
    if not _candidates_consistent(pred, gold_tokens):
        return 0.0
    for g in gold_tokens:
        if " ".join(g) in YES_NO or " ".join(p) in YES_NO:  # "no" must not match "North Korea" nor "No Doubt"
            if p == g:
                return 1.0
            continue
        if measured_len > max(cap_factor * len(g), cap_min):
            continue
        if _stands_alone(p, g):
            return 1.0
        content = [t for t in g if t not in NAME_GLUE] or list(g)
        covered = sum(1 for t in content if t in p) / len(content)
        if _contains(g, p) and covered >= min_gold_coverage:
            return 1.0
    return 0.0


# A descriptor names what kind of thing the answer is: a lower-case common noun ("river", "club", "novelist"),
# led by words that are lower case, closed-class or adjectives of nationality ("the Spanish club"). Name particles
# ("van", "de") belong to the name that follows them.
_SEPARATOR_WORDS = frozenset({"or", "and", "either", "nor"})
_SEPARATOR_CHARS = frozenset(",;/&|\n")
_DEMONYM = re.compile(r"[A-Z][a-z]+(?:an|ish|ese|ic|i|ch|ek|ss)$")
_PARTICLES = frozenset({"van", "von", "de", "der", "den", "du", "da", "di", "del", "della", "la", "le", "bin", "al"})
# What a type word after a name may be ("the Danube river", "Niue island"): a fixed set of common nouns naming a
# kind of place, organisation, work, event or person. A lower-case word after a name that is not one of them may be
# a candidate written in lower case ("Paris lyon"), so it stays part of the answer.
TYPE_WORDS = frozenset({
    "river", "lake", "sea", "ocean", "mountain", "mountains", "range", "island", "islands", "desert", "valley",
    "bay", "peninsula", "canal", "strait", "gulf", "city", "town", "village", "country", "nation", "state",
    "province", "region", "county", "district", "capital", "kingdom", "republic", "empire", "company",
    "corporation", "firm", "business", "band", "group", "club", "team", "orchestra", "choir", "party", "university",
    "college", "school", "museum", "hospital", "airport", "station", "bridge", "tower", "cathedral", "church",
    "temple", "palace", "castle", "stadium", "park", "festival", "conference", "marathon", "exhibition", "summit",
    "tournament", "regatta", "fair", "symposium", "carnival", "concert", "championship", "novel", "film", "movie",
    "album", "song", "single", "game", "documentary", "series", "show", "book", "poem", "collection", "play",
    "opera", "painting", "novelist", "painter", "author", "writer", "poet", "director", "composer", "singer",
    "actor", "actress", "architect", "artist", "designer", "scientist", "chemist", "physician", "engineer",
    "lawyer", "journalist", "politician", "diplomat", "explorer",
})
_PARENTHETICAL = re.compile(r"(?s)(.+?)\s*\(([^()]+)\)\s*\.?")
_APPOSITIVE = re.compile(r"(?s)([^,]+?),\s*((?:the|a|an)\s+\S.*?)\s*\.?", re.IGNORECASE)


def _is_name_word(word: str) -> bool:
    return word[:1].isupper() or any(ch.isdigit() for ch in word)


def _is_head(word: str) -> bool:
    """A common noun that can head a descriptor: lower-case letters, not a closed-class word."""
    return word.isalpha() and word.islower() and word not in STOP_WORDS


def _is_descriptor(words: Sequence[str]) -> bool:
    """Words that describe the answer and name no candidate: every word lower case (or closed-class, or an adjective
    of nationality), the last one a common noun, no word that joins candidates."""
    if not words or not _is_head(words[-1]) or any(set(w) & _SEPARATOR_CHARS for w in words):
        return False
    return all(w.lower() not in _SEPARATOR_WORDS and (w.islower() or w.lower() in STOP_WORDS or _DEMONYM.fullmatch(w))
               for w in words)


def _is_appositive(words: Sequence[str]) -> bool:
    """"the capital of France", "a Spanish river in Aragon": a descriptor up to its first common noun, then any
    words that join no candidates."""
    head = next((i for i, w in enumerate(words) if i and _is_head(w)), None)
    return head is not None and _is_descriptor(words[: head + 1]) and not any(
        set(w) & _SEPARATOR_CHARS or w.lower() in _SEPARATOR_WORDS for w in words)


def answer_slot(pred: str) -> str | None:
    """The answer a descriptor stands beside, or None when the prediction holds no descriptor.

    The answer in context is one name, and the descriptor says what it is: "the Spanish club Atlético Madrid",
    "the river Thames", "the Danube river", "Thames (river)", "Dickens (English novelist)", "Paris, the capital of
    France". A type word after the name comes from ``TYPE_WORDS``. A name
    inside the descriptor ("France") is never the answer, and a descriptor with a word that joins candidates
    ("the river Thames or Severn", "Paris, the city or Lyon") or a capitalised name in its head position is no
    descriptor: what remains is scored as written, so lists stay lists."""
    text = " ".join(_LATEX_COMMAND.sub(" ", pred).replace("{", " ").replace("}", " ").split())
    stripped = text
    for pattern, described in ((_PARENTHETICAL, _is_descriptor), (_APPOSITIVE, _is_appositive)):
        if (m := pattern.fullmatch(stripped)) and described(m.group(2).split()):
            stripped = m.group(1)
            break
    words = stripped.rstrip(".").split()
    # A type word after the name ("the Danube river") says what it is, as a descriptor before it does.
    typed = len(words) >= 2 and _is_name_word(words[-2]) and words[-1] in TYPE_WORDS
    if typed:
        words = words[:-1]
    start = len(words)
    while start > 0 and (_is_name_word(words[start - 1])
                         or (words[start - 1] in _PARTICLES and start < len(words) and _is_name_word(words[start]))):
        start -= 1
    # a type word on both sides of the name is two typed names ("Aach river Aaa river", "Aach" read as a
    # demonym like "Czech"): a list, not a descriptor
    two_typed = typed and 0 < start and words[start - 1] in TYPE_WORDS
    if 0 < start < len(words) and not two_typed and _is_descriptor(words[:start]):
        return " ".join(words[start:])
    if typed:
        return " ".join(words)
    return stripped if stripped != text else None


def _stands_alone(p: Sequence[str], g: Sequence[str]) -> bool:
    """``g`` occurs in ``p`` as the answer, not as one candidate among others joined by spaces or lines.

    A run of names ("Lyon Paris Nice") is a list: no content word may touch a word of the gold; function words and
    designators glue a sentence ("it is Paris", "Chief of Protocol of the United States"). A number may touch
    words (a unit or qualifier: "4,120 seats", "about 1,250,000 people") but a gold holding a number may meet no
    other number ("1984 1985 1986")."""
    n = len(g)
    numeric = any(t.isdigit() for t in g)
    for i in range(len(p) - n + 1):
        if tuple(p[i : i + n]) != tuple(g):
            continue
        if numeric and any(t.isdigit() for t in (*p[:i], *p[i + n :])):
            continue
        # A designator ends a name ("Martinez LLC"): after the gold it glues, before it it ends another candidate
        # ("Davis Inc Heatherfurt").
        touching = [(p[i - 1], g[0], STOP_WORDS)] if i else []
        touching += [(p[i + n], g[-1], NAME_GLUE)] if i + n < len(p) else []
        if all(word in glue or edge.isdigit() for word, edge, glue in touching):
            return True
    return False


def _candidates_consistent(pred: str, gold_tokens: Sequence[Sequence[str]]) -> bool:
    """False when the prediction lists several candidates and one of them is not (part of) a gold answer.

    A list that is itself a gold form ("Simon and Garfunkel", "Paris, France") passes: each part lies in it."""
    parts = [_tokens(part) for part in _CANDIDATE_SPLIT.split(_THOUSANDS.sub("", fold_accents(pred).lower()))]
    parts = [p for p in parts if not _contentless(p)]
    if len(parts) < 2:
        return True
    return all(any(_contains(g, part) or _contains(part, g) for g in gold_tokens) for part in parts)


def score_two_way_naive(pred: str | None, golds: Sequence[str]) -> float:
    """LoongRL's Eq. 3 as written: normalized character substring in either direction. Gameable; for ablations."""
    if pred is None:
        return 0.0
    p = normalize(pred)
    return float(any(normalize(g) in p or p in normalize(g) for g in golds if g))


def score_exact(pred: str | None, golds: Sequence[str]) -> float:
    """Normalized equality with the gold answer or an alias."""
    if pred is None or not normalize(pred):
        return 0.0
    return float(any(normalize(pred) == normalize(g) for g in golds if g))


def score_pred_in_gold(pred: str | None, golds: Sequence[str]) -> float:
    """One-way: the prediction's tokens lie inside a gold answer (abbreviated answers)."""
    if pred is None or _contentless(p := _tokens(pred)):
        return 0.0
    return float(any(_contains(_tokens(g), p) for g in golds if g))


def score_gold_in_pred(pred: str | None, golds: Sequence[str]) -> float:
    """One-way: a gold answer's tokens lie inside the prediction (verbose answers)."""
    if pred is None:
        return 0.0
    p = _tokens(pred)
    return float(any(_contains(p, g) for g in (_tokens(g) for g in golds if g) if g))


def score_token_f1(pred: str | None, golds: Sequence[str]) -> float:
    """SQuAD token F1, best over gold forms; yes/no answers score only on exact match."""
    if pred is None:
        return 0.0
    p = _tokens(pred)
    best = 0.0
    for g in (_tokens(g) for g in golds if g):
        if " ".join(g) in YES_NO or " ".join(p) in YES_NO:
            best = max(best, float(p == g))
            continue
        common = sum((Counter(p) & Counter(g)).values())
        if common:
            precision, recall = common / len(p), common / len(g)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


# --------------------------------------------------------------------------- needles (RULER multi-value / multi-key)

_VALUE_SPLIT = re.compile(r"[\s,;|]+")


def _values(answer: Any) -> list[str]:
    """Gold values from a list, a JSON list string, or a comma/whitespace separated string."""
    if isinstance(answer, str):
        try:
            parsed = json.loads(answer) if answer.lstrip().startswith("[") else None
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, list):
            return [v for v in _VALUE_SPLIT.split(answer) if v]
        answer = parsed
    return [str(v).strip() for v in answer if str(v).strip()]


def score_needle_all(pred: str | None, gold_values: Sequence[str], *, allow_extra: bool = False) -> float:
    """1 when every gold value is given, in any order; extra values score 0 unless ``allow_extra`` (listing every
    number in the context must not pay)."""
    if pred is None:
        return 0.0
    given = {normalize(v) for v in _VALUE_SPLIT.split(pred) if normalize(v)}
    gold = {normalize(v) for v in gold_values}
    return float(bool(gold) and gold <= given and (allow_extra or given <= gold))


def score_needle_recall(pred: str | None, gold_values: Sequence[str]) -> float:
    """RULER's partial score: the fraction of gold values given."""
    if pred is None or not gold_values:
        return 0.0
    given = {normalize(v) for v in _VALUE_SPLIT.split(pred)}
    gold = {normalize(v) for v in gold_values}
    return len(gold & given) / len(gold)


# --------------------------------------------------------------------------- math

_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")
_RATIONAL = re.compile(r"^(-?\d+(?:\.\d+)?)(?:/(-?\d+))?$")


def parse_number(text: str) -> Fraction | None:
    """An integer, decimal, ``a/b`` or ``\\frac{a}{b}`` (spaces, ``$``, ``\\left``/``\\right`` and thousands
    separators ignored); None for anything else."""
    s = re.sub(r"\$|\\left|\\right|\\!|\s", "", text)
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    if m := _FRACTION.match(s):
        sign, num, den = m.groups()
        return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign else 1)
    if m := _RATIONAL.match(s):
        num, den = m.groups()
        return None if den is not None and int(den) == 0 else Fraction(num) / Fraction(den or 1)
    return None


def score_math(pred: str | None, golds: Sequence[str]) -> float:
    """Numeric equality when both sides parse as rationals, else equality of whitespace-free normalized text."""
    if pred is None or not pred.strip():
        return 0.0
    value = parse_number(pred)
    for gold in golds:
        gold_value = parse_number(gold)
        if value is not None and gold_value is not None:
            if value == gold_value:
                return 1.0
        elif normalize(pred).replace(" ", "") == normalize(gold).replace(" ", "") != "":
            return 1.0
    return 0.0


_CHOICE = re.compile(r"^\(?([A-Za-z])(?:[.):]|\s*$)")


def score_choice(pred: str | None, golds: Sequence[str]) -> float:
    """Multiple choice: the boxed answer must name exactly the gold letter ("B", "(B)", "B) 42", "B. 42")."""
    if pred is None:
        return 0.0
    m = _CHOICE.match(_LATEX_COMMAND.sub("", pred).strip().strip("{}"))
    return float(bool(m) and any(m.group(1).upper() == g.strip().upper() for g in golds))


# --------------------------------------------------------------------------- TRL wrappers

REWARDS: dict[str, RewardFn] = {}


def _gold_forms(answer: Any, aliases: Any) -> list[str]:
    if isinstance(aliases, str):
        aliases = json.loads(aliases) if aliases.strip().startswith("[") else [aliases]
    return [str(answer)] + [str(a) for a in (aliases if aliases is not None else [])]


def _scalar(values: Any) -> bool:
    """Not a column: TRL passes columns as lists (numpy arrays and pandas Series count too)."""
    return values is None or isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__")


def _column(values: Any, n: int, name: str) -> list[Any]:
    """One gold value per completion: TRL passes columns as lists; a scalar applies to every completion."""
    if _scalar(values):
        return [values] * n
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values for {n} completions; pass one per completion")
    return list(values)


def _wrap(name: str, scorer: Callable[..., float], values: bool) -> RewardFn:
    """The TRL-facing function: extract the last box of each completion, score it against that row's gold."""

    def reward(completions: Sequence[Any], answer: Any = None, aliases: Any = None, **_: Any) -> list[float]:
        if answer is None:
            raise ValueError(f"reward {name!r} needs an 'answer' column (the gold answer of each row)")
        answers = _column(answer, len(completions), "answer")
        alias_rows = _column(aliases, len(completions), "aliases") if aliases is not None else [None] * len(answers)
        out = []
        for completion, gold, alias in zip(completions, answers, alias_rows, strict=True):
            pred = extract_boxed(completion_text(completion))
            golds = _values(gold) if values else _gold_forms(gold, alias)
            out.append(float(scorer(pred, golds)))
        return out

    reward.__name__ = f"reward_{name}"
    reward.__doc__ = f"TRL reward {name!r} on the last \\boxed{{}} answer. {scorer.__doc__ or ''}"
    return reward


_SCORERS: dict[str, tuple[Callable[..., float], bool]] = {}


def _register(name: str, scorer: Callable[..., float], *, values: bool = False) -> RewardFn:
    if name in REWARDS:
        raise ValueError(f"reward {name!r} is registered twice")
    _SCORERS[name] = (scorer, values)
    REWARDS[name] = _wrap(name, scorer, values)
    return REWARDS[name]


def configure(name: str, **options: Any) -> RewardFn:
    """A registered reward with its scorer's keyword options changed, e.g. ``configure("two_way", cap_factor=5)``
    or ``configure("needle_all", allow_extra=True)``; unknown options are an error that lists the allowed ones."""
    get_reward(name)
    scorer, values = _SCORERS[name]
    allowed = [p.name for p in inspect.signature(scorer).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"reward {name!r} has no option {', '.join(unknown)}; options: {', '.join(allowed) or 'none'}")
    return _wrap(name, functools.partial(scorer, **options), values)


two_way = _register("two_way", score_two_way)
two_way_naive = _register("two_way_naive", score_two_way_naive)
exact_match = _register("exact_match", score_exact)
token_f1 = _register("token_f1", score_token_f1)
pred_in_gold = _register("pred_in_gold", score_pred_in_gold)
gold_in_pred = _register("gold_in_pred", score_gold_in_pred)
needle_all = _register("needle_all", score_needle_all, values=True)
needle_recall = _register("needle_recall", score_needle_recall, values=True)
math_answer = _register("math", score_math)
multiple_choice = _register("choice", score_choice)


def get_reward(name: str) -> RewardFn:
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}") from None


def score_by_reward_fn(completions: Sequence[Any], reward_fn: Any = None, **columns: Any) -> list[float]:
    """TRL reward for a mixed dataset such as ``rl_mix``: each row is scored by the reward its ``reward_fn`` column
    names, ``GRPOTrainer(..., reward_funcs=[score_by_reward_fn])``.

    Every column (one value per completion) is split with the rows; other keyword arguments (TRL's
    ``trainer_state``, ``log_metric``) reach each reward unchanged. A missing ``reward_fn`` column or a name that
    is not in ``REWARDS`` is an error: a silent default would score math rows by substring match."""
    n = len(completions)
    if reward_fn is None:
        raise ValueError(f"score_by_reward_fn needs a 'reward_fn' column naming each row's reward in REWARDS "
                         f"(rl_mix rows have one); columns given: {', '.join(sorted(columns)) or 'none'}")
    names = _column(reward_fn, n, "reward_fn")
    unknown = sorted({repr(name) for name in names if name not in REWARDS})
    if unknown:
        raise ValueError(f"reward_fn names unknown reward(s) {', '.join(unknown)}; known rewards: "
                         f"{', '.join(sorted(REWARDS))}")
    per_row = {key: list(values) for key, values in columns.items() if not _scalar(values) and len(values) == n}
    scores = [0.0] * n
    for name in dict.fromkeys(names):
        rows = [i for i, row_name in enumerate(names) if row_name == name]
        subset = {key: [values[i] for i in rows] for key, values in per_row.items()}
        scored = REWARDS[name]([completions[i] for i in rows], **{**columns, **subset})
        for i, score in zip(rows, scored, strict=True):
            scores[i] = score
    return scores
