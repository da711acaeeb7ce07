"""Multi-hop QA seeds: the ``qa_seed`` record, its contract, loaders for local copies of the real datasets, and the
``qa_seeds`` stage.

LoongRL builds KeyChain from HotpotQA, MuSiQue and 2WikiMultiHopQA (LoongRL report, KeyChain "Stage 1: Seed dataset
curation"); the synthetic ``world`` (tasks/longctx/world/) is the embedded default. Every source is normalized to the
``qa_seed`` record of DESIGN.md section 6. A corrupt, truncated or empty file, or one whose every record is rejected,
raises ``InputFileError`` naming the file (and the line where there is one), and nothing of it is returned.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import Record, between, min_length
from data_contracts.stage import REJECTED, Check, Contract, Params, Severity, stage
from envgen.rewards import normalize
from tasks.longctx.records import QA_SEED, SEED_REJECTED, SPLITS
from tasks.readers import InputFileError, all_rejected, iter_json_array, iter_jsonl

# --------------------------------------------------------------------------- contract


def parse_docs(docs: str) -> list[dict[str, Any]]:
    return json.loads(docs)


def _no_supporting_doc(frame: pl.DataFrame) -> list[bool]:
    def bad(raw: str) -> bool:
        try:
            return not any(isinstance(d, dict) and d.get("is_supporting") is True for d in parse_docs(raw))
        except (TypeError, ValueError):
            return True

    return [bad(d) for d in frame["docs"]]


def _split_leaks(frame: pl.DataFrame) -> pl.Series:
    """No evaluation seed in a training split: an id, or the same normalized question, in both splits."""
    keyed = frame.select("id", "split", pl.col("question").map_elements(normalize, return_dtype=pl.String).alias("q"))
    leaks = [keyed.group_by(key).agg(pl.col("split").n_unique().alias("n")).filter(pl.col("n") > 1)[key]
             for key in ("id", "q")]
    return keyed["id"].is_in(leaks[0].implode()) | keyed["q"].is_in(leaks[1].implode())


def answer_in_support(answer: str, aliases: list[str] | None, docs: str) -> bool:
    """The answer or an alias occurs, on whole tokens, in a supporting document (yes/no answers of comparison
    questions are exempt: they are never written in a document). A verbatim whole-word match is tried first; the
    normalized comparison (accents, punctuation, articles) only when it fails."""
    forms = [answer, *(aliases or [])]
    if any(normalize(f) in ("yes", "no") for f in forms):
        return True
    texts = [f"{d['title']}\n{d['text']}" for d in parse_docs(docs) if d["is_supporting"]]
    if any(re.search(rf"(?<!\w){re.escape(f)}(?!\w)", t) for f in forms if f for t in texts):
        return True
    normalized = [f" {normalize(t)} " for t in texts]
    return any(n and f" {n} " in t for n in map(normalize, forms) for t in normalized)


def _answer_missing(frame: pl.DataFrame) -> list[bool]:
    return [not answer_in_support(a, al, d) for a, al, d in frame.select("answer", "aliases", "docs").iter_rows()]


# --------------------------------------------------------------------------- the answer prior

# No answer may answer more than this share of a QA artifact's questions: where a few answers hold many questions
# (a world of six countries), a policy earns reward by guessing them instead of reading.
MAX_ANSWER_SHARE = 0.05
# Under 40 rows 5% is less than two: a pair of equal answers there is chance, not a prior.
MIN_ANSWER_CAP = 2


def answer_cap(n_rows: int) -> int:
    """The most rows one answer may hold among ``n_rows``."""
    return max(MIN_ANSWER_CAP, int(MAX_ANSWER_SHARE * n_rows))


def share_cap(counts: Collection[int], most: int | None = None) -> int:
    """The largest per-answer cap ``c`` (at most ``most``) that holds the share once every answer is cut to ``c``
    rows (cutting rows shrinks the total the share is taken of). ``counts`` are the rows per answer."""
    cap = min(max(counts, default=MIN_ANSWER_CAP), most or MIN_ANSWER_CAP + sum(counts))
    while cap > MIN_ANSWER_CAP and cap > answer_cap(sum(min(n, cap) for n in counts)):
        cap -= 1
    return cap


def over_share(frame: pl.DataFrame, column: str = "answer") -> list[bool]:
    """True for every row whose answer (normalized: case, accents, punctuation, articles) holds more rows than
    ``answer_cap`` allows."""
    keys = [normalize(a) for a in frame[column]]
    counts, cap = Counter(keys), answer_cap(frame.height)
    return [counts[k] > cap for k in keys]


ANSWER_SHARE = Check("answer_share", over_share,
                     description=f"no answer holds more than {MAX_ANSWER_SHARE:.0%} of the rows "
                                 f"(at least {MIN_ANSWER_CAP} allowed)")


def seed_contract(record: Record = QA_SEED, answer_in_support_severity: Severity = "warning",
                  hops: tuple[int, int] = (1, 20)) -> Contract:
    """The contract of a seeds output: its record plus what seeds must hold for KeyChain. Real datasets phrase
    answers differently from their paragraphs (dates, numbers), and answer yes/no to many comparison questions, so
    "answer in a supporting document" and the answer share are warnings for them and critical for the world."""
    return record.contract(
        expectations=(between("hops", *hops), min_length("answer", 1), min_length("question", 1)),
        checks=(
            Check("has_supporting_doc", _no_supporting_doc, description="at least one document is supporting"),
            Check("no_eval_seed_in_train", _split_leaks,
                  description="an id or a normalized question appears in one split only"),
            Check("answer_in_supporting_doc", _answer_missing, severity=answer_in_support_severity,
                  description="the answer or an alias occurs in a supporting document"),
            replace(ANSWER_SHARE, severity=answer_in_support_severity),
        ),
    )


def eval_split(question: str, eval_fraction: float) -> str:
    """Deterministic split from the normalized question, so a question asked twice lands in one split only."""
    digest = hashlib.blake2b(normalize(question).encode(), digest_size=8, person=b"qa-split").digest()
    return "eval" if int.from_bytes(digest, "big") / 2**64 < eval_fraction else "train"


# --------------------------------------------------------------------------- streaming readers


# --------------------------------------------------------------------------- record converters


class Rejected(Exception):
    """A well-formed record the seeds must not keep (unanswerable, no answer, no supporting document)."""


def _field(record: Mapping[str, Any], name: str, kind: type | tuple[type, ...], path: Path, line: int) -> Any:
    if not isinstance(record, Mapping):
        raise InputFileError(path, line, f"expected a JSON object, got {type(record).__name__}")
    if name not in record:
        have = ", ".join(sorted(record)) or "(none)"
        raise InputFileError(path, line, f"record has no field {name!r} (fields present: {have})")
    value = record[name]
    if not isinstance(value, kind):
        raise InputFileError(path, line, f"field {name!r} must be {getattr(kind, '__name__', kind)}, "
                                        f"got {type(value).__name__}")
    return value


def _hotpot_like(source: str) -> Callable[[Mapping[str, Any], Path, int], dict[str, Any]]:
    """HotpotQA and 2WikiMultihopQA share the record: ``_id, question, answer, supporting_facts [[title, sent_id]],
    context [[title, [sentences]]], type`` (2Wiki adds ``evidences`` and ``entity_ids``)."""

    def convert(record: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
        rid = str(_field(record, "_id", (str, int), path, line))
        question = _field(record, "question", str, path, line)
        context = _field(record, "context", list, path, line)
        facts = _field(record, "supporting_facts", list, path, line)
        answer = record.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            raise Rejected("no answer (a test-set record?)")
        try:
            support = {str(title) for title, _ in facts}
            docs = [{"title": str(title), "text": " ".join(s.strip() for s in sentences if s.strip()),
                     "is_supporting": str(title) in support} for title, sentences in context]
        except (TypeError, ValueError):
            raise InputFileError(path, line, "context must be [[title, [sentences]]] and supporting_facts "
                                            "[[title, sentence_id]]") from None
        if not support or not support <= {d["title"] for d in docs}:
            raise Rejected("supporting-fact titles missing from the context")
        return {"id": f"{source}:{rid}", "source": source, "question": question.strip(), "answer": answer.strip(),
                "aliases": [], "docs": json.dumps(docs, ensure_ascii=False), "hops": len(support),
                "type": str(record.get("type") or "bridge")}

    return convert


def _musique(record: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
    rid = str(_field(record, "id", (str, int), path, line))
    question = _field(record, "question", str, path, line)
    paragraphs = _field(record, "paragraphs", list, path, line)
    if record.get("answerable", True) is False:
        raise Rejected("unanswerable (MuSiQue answerable=false)")
    answer = record.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        raise Rejected("no answer")
    try:
        docs = [{"title": str(p["title"]), "text": str(p["paragraph_text"]).strip(),
                 "is_supporting": bool(p.get("is_supporting", False))} for p in paragraphs]
    except (TypeError, KeyError) as exc:
        raise InputFileError(path, line, f"paragraphs must be objects with title and paragraph_text ({exc!r})") from None
    n_support = sum(d["is_supporting"] for d in docs)
    if not n_support:
        raise Rejected("no supporting paragraph")
    aliases = [str(a) for a in record.get("answer_aliases") or [] if str(a).strip()]
    return {"id": f"musique:{rid}", "source": "musique", "question": question.strip(), "answer": answer.strip(),
            "aliases": aliases, "docs": json.dumps(docs, ensure_ascii=False),
            "hops": len(record.get("question_decomposition") or []) or n_support, "type": "compositional"}


LOADERS: dict[str, tuple[Callable[[Path], Iterator[tuple[int, Any]]], Callable[..., dict[str, Any]]]] = {
    "hotpotqa": (iter_json_array, _hotpot_like("hotpotqa")),
    "2wiki": (iter_json_array, _hotpot_like("2wiki")),
    "musique": (iter_jsonl, _musique),
}


def load_seed_file(
    source: str, path: Path | str, *, split: str | None = None, eval_fraction: float = 0.0, limit: int | None = None,
    batch: int = 4096,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read one local dataset file into ``(seeds, rejected)`` frames. ``split`` names the file's split; without
    it each seed's split comes from a hash of its question (``eval_fraction``). Raises ``InputFileError``, also when
    every record is rejected: a 0-seed artifact is never useful, and the file is the thing to fix."""
    if source not in LOADERS:
        raise ValueError(f"unknown seed source {source!r}; loaders exist for {', '.join(LOADERS)}")
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, None, f"no such {source} file")
    reader, convert = LOADERS[source]
    rows: list[dict[str, Any]] = []
    batches: list[pl.DataFrame] = []  # rows move to Arrow every ``batch`` records, so Python objects stay few
    rejected: list[dict[str, Any]] = []
    reasons: Counter[str] = Counter()
    seen: set[str] = set()
    kept = 0
    for line, record in reader(path):
        try:
            row = convert(record, path, line)
        except Rejected as why:
            rid = record.get("_id", record.get("id")) if isinstance(record, Mapping) else None
            rejected.append({"id": f"{source}:{rid}", "source": source, "reason": f"{why} ({path.name}:{line})"})
            reasons[str(why)] += 1
            continue
        if row["id"] in seen:
            rejected.append({"id": row["id"], "source": source, "reason": f"duplicate id ({path.name}:{line})"})
            continue
        seen.add(row["id"])
        row["split"] = split or eval_split(row["question"], eval_fraction)
        rows.append(row)
        kept += 1
        if len(rows) == batch:
            batches.append(QA_SEED.frame(rows))
            rows = []
        if limit is not None and kept >= limit:
            break
    if not kept:
        raise InputFileError(path, None, all_rejected(len(rejected), reasons))
    return pl.concat([*batches, QA_SEED.frame(rows)]), SEED_REJECTED.frame(rejected)


# --------------------------------------------------------------------------- the stage


def parse_source(spec: str) -> tuple[str, str | None, str | None]:
    """``world`` | ``KIND:PATH`` | ``KIND:PATH@SPLIT`` -> (kind, path, split)."""
    if spec == "world":
        return "world", None, None
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in LOADERS or not rest:
        raise ValueError(f"seed source {spec!r}: use 'world' or KIND:PATH[@train|@eval] with KIND one of "
                         f"{', '.join(LOADERS)}")
    path, at, split = rest.rpartition("@") if "@" in rest else (rest, "", None)
    if at and split not in SPLITS:
        raise ValueError(f"seed source {spec!r}: split after '@' must be one of {', '.join(SPLITS)}")
    return kind, path, split


class QASeedsParams(Params):
    source: str | tuple[str, ...] = Field(
        "world", description="'world' (the synthetic world's seeds) or local files as hotpotqa:PATH, 2wiki:PATH, "
                             "musique:PATH, each optionally suffixed @train or @eval to name its split; a list "
                             "mixes sources")
    eval_fraction: float = Field(
        0.05, ge=0.0, le=1.0, description="fraction of seeds sent to the eval split by question hash, for files "
                                          "without an @split suffix")
    limit: int | None = Field(None, ge=1, description="keep at most this many seeds per source (file order)")

    @field_validator("source")
    @classmethod
    def _known_sources(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        for spec in (value,) if isinstance(value, str) else value:
            parse_source(spec)
        return value

    def local_inputs(self) -> list[str]:
        specs = (self.source,) if isinstance(self.source, str) else self.source
        return [path for path in (parse_source(spec)[1] for spec in specs) if path]


@stage(
    name="qa_seeds",
    version="1",
    inputs=("world",),
    params=QASeedsParams,
    outputs={"seeds": seed_contract(), REJECTED: SEED_REJECTED.contract()},
)
def qa_seeds(inputs: Mapping[str, Any], params: QASeedsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Multi-hop QA seeds in the qa_seed record: the synthetic world's, or local HotpotQA / 2Wiki / MuSiQue files."""
    specs = (params.source,) if isinstance(params.source, str) else params.source
    seeds, rejected = [], []
    for spec in specs:
        kind, path, split = parse_source(spec)
        if kind == "world":
            frame = inputs["world"].read("seeds").select(list(QA_SEED.columns))
            seeds.append(frame.head(params.limit) if params.limit else frame)
            continue
        frame, dropped = load_seed_file(kind, path, split=split, eval_fraction=params.eval_fraction,
                                        limit=params.limit)
        seeds.append(frame)
        rejected.append(dropped)
    all_seeds = pl.concat(seeds) if seeds else QA_SEED.frame()
    # Sources may overlap (one question in a train file and an eval file): the eval copy wins, the train copy is
    # rejected, so no evaluation seed reaches training.
    qnorm = all_seeds["question"].map_elements(normalize, return_dtype=pl.String)
    eval_questions = qnorm.filter(all_seeds["split"] == "eval").unique().implode()
    leaked = (all_seeds["split"] == "train") & qnorm.is_in(eval_questions)
    duplicate = all_seeds["id"].is_duplicated() & ~all_seeds["id"].is_first_distinct()
    drop = leaked | duplicate
    rejected.append(
        all_seeds.filter(drop)
        .with_columns(reason=pl.when(leaked.filter(drop)).then(pl.lit("question also in the eval split"))
                      .otherwise(pl.lit("duplicate id across sources")))
        .select(list(SEED_REJECTED.columns))
    )
    return {"seeds": all_seeds.filter(~drop), REJECTED: pl.concat(rejected)}
