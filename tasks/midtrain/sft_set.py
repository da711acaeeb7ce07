"""Stage `sft_set`: the cold-start curation (LongCat-Flash-Thinking-2601 3.1.2, "Cold-Start Policy Initialization").

1. candidates: every route's trajectories (environment-grounded, decomposed, reasoning-enriched, planned, text-driven,
   long-context, deep-research role calls); turn-level masks recomputed (failed tool calls, format violations, the user's turns: no loss);
2. each candidate re-verified; a held-out domain or evaluation environment dropped; one over the token window is
   step-compressed (earlier tool results summarized, recorded as transform ``compress``) when it is an environment
   trajectory or a research call that then fits and still verifies (fewer whole results first, then the earliest
   steps folded into the request), else dropped as too long;
3. dedup: exact (same messages and tools), then near-duplicate (MiniLM cosine similarity >= ``near_duplicate``);
4. score: sliding-window perplexity under the reference model (max over ``window``-token windows of the window's
   mean perplexity) over the tokens the loss trains on (assistant turns whose ``train`` flag is set: never the
   system prompt and tool schemas every candidate shares, which made the first window every candidate's maximum);
   the default reference is a bigram cross-fitted on the candidates (fitted on one half, scoring the other), since
   an untrained tiny policy scores worse than uniform guessing and its perplexities rank noise; the summary states
   the reference's mean NLL per trained token against ln V;
5. mixture and selection: each route gets its share of ``k`` (``proportions``, else its share of the candidates),
   filled by one K-Center-Greedy over the whole pool whose routes take picks up to their quotas (each pick covers
   every route's candidates), over embeddings of the trained text, centred on the candidates' mean (MiniLM vectors
   of one domain's conversations sit at cosine ~0.9 of one another; centring spreads their distances so the
   geometry, not the weights alone, picks), with distances weighted by score ** ``alpha``.

Outputs: ``trajectories`` (selected), ``rejected`` (every other candidate with its reason), ``scores`` (per
candidate: score, weight, status, pick order, distance to the nearest selected) and ``summary`` (coverage against a
random selection of the same size, in the embedding space and on measures the selection never sees: the word
bigrams of the trained text and the domains covered; score quantiles; the reference's NLL; the mixture).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import in_set
from data_contracts.stage import REJECTED, Artifact, Check, StageError, rng_for, stage
from envgen.environment import json_field
from envgen.records import TRAJECTORY
from envgen.trajectory_checks import EXECUTION, RESEARCH, SUMMARY_TAG, tool_failed, turn_mask, verify_row
from inference.engine_spec import engine_or, hf_spec
from inference.plotting import save_figure
from tasks.midtrain.kcenter import k_center_greedy
from tasks.midtrain.records import SELECTION_SCORE, SELECTION_SUMMARY
from tasks.midtrain.trajectory_stages import (
    EVAL_ENV_PREFIX,
    TrajectoryParams,
    token_counter,
    trajectory_contract,
)
from tasks.records import TRAJECTORY_REJECTED


def _later_text(messages: Sequence[dict[str, Any]], start: int) -> str:
    parts = []
    for m in messages[start:]:
        if m["role"] == "assistant":
            parts.append(str(m.get("content") or ""))
            parts += [str(c["function"].get("arguments")) for c in m.get("tool_calls") or []]
    return "\n".join(parts)


_FIGURE = re.compile(r"\d(?:[\d,.]*\d)?")
PROSE_WORDS = 8  # a result's text of this many words is prose (a document read), not a field value (an id, a date)


def _kept(obj: Any, later: str) -> Any:
    """The fields of a result whose value a later turn uses (nested lists and objects pruned alike); of a text a
    later turn does not repeat whole (a document a researcher read), the sentences whose every figure it uses."""
    if isinstance(obj, str) and obj not in later and len(obj.split()) >= PROSE_WORDS:
        from tasks.research.harness.text import sentences

        used = [s for s in sentences(obj) if (figures := _FIGURE.findall(s)) and all(f in later for f in figures)]
        return " ".join(used) or None
    if isinstance(obj, dict):
        kept = {k: v for k, v in ((k, _kept(v, later)) for k, v in obj.items()) if v is not None}
        return kept or None
    if isinstance(obj, list):
        kept = [v for v in (_kept(v, later) for v in obj) if v is not None]
        return kept or None
    if obj is None or isinstance(obj, bool):
        return None
    return obj if (obj if isinstance(obj, str) else json.dumps(obj)) in later else None


def compress_steps(messages: Sequence[dict[str, Any]], keep_last: int) -> tuple[list[dict[str, Any]], int]:
    """The conversation with every successful tool result but the last ``keep_last`` summarized; returns it and
    how many results were summarized."""
    out = [dict(m) for m in messages]
    tools = [i for i, m in enumerate(out) if m["role"] == "tool" and not tool_failed(m)]
    done = 0
    for i in tools[:max(0, len(tools) - keep_last)]:
        kept = _kept(json.loads(out[i]["content"]), _later_text(out, i + 1))
        out[i]["content"] = SUMMARY_TAG + json.dumps(kept or {})
        done += 1
    return out, done


def fold_steps(messages: Sequence[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """The conversation with its first ``steps`` tool-calling steps (an assistant turn with tool calls and the
    results answering it) folded into the request: their results' summary is appended to the first user message
    and the steps themselves leave (a research call that reads many documents fits only so: its summarized results
    alone outgrow the window)."""
    out = [dict(m) for m in messages]
    first_user = next((i for i, m in enumerate(out) if m["role"] == "user"), None)
    calls = [i for i, m in enumerate(out) if m["role"] == "assistant" and m.get("tool_calls")]
    if first_user is None or steps <= 0 or not calls:
        return out
    end = calls[steps] if steps < len(calls) else next(
        (i for i in range(calls[-1] + 1, len(out)) if out[i]["role"] != "tool"), len(out))
    folded = range(calls[0], end)
    results = [_parsed(out[i]["content"].removeprefix(SUMMARY_TAG)) for i in folded if out[i]["role"] == "tool"]
    kept = _kept(results, _later_text(out, end)) or []
    out[first_user] = {**out[first_user],
                       "content": f"{out[first_user]['content']}\n\n{SUMMARY_TAG}{json.dumps(kept, ensure_ascii=False)}"}
    return [m for i, m in enumerate(out) if i not in folded]


def _parsed(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:  # a plain-text result
        return content


STAGE = "sft_set"
ROUTES = {"midtrain_env": "midtrain_env", "midtrain_decompose": "decompose", "midtrain_reason": "reason",
          "midtrain_plan": "plan", "midtrain_text": "midtrain_text", "midtrain_longctx": "midtrain_longctx",
          "research_trajectories": "research", "reading_curriculum": "reading_curriculum"}
"""Input stage -> the route (``source``) its trajectories carry."""
SOURCES = (*ROUTES.values(), "compress")
STATUSES = ("selected", "not_selected", "duplicate", "near_duplicate", "too_long", "not_verified", "heldout",
            "mixture_cap")


class SFTSetParams(TrajectoryParams):
    k: int = Field(512, ge=1, description="trajectories selected")
    selection: Literal["kcg", "random"] = Field("kcg", description="kcg: perplexity-weighted K-Center-Greedy; "
                                                "random: a seeded random subset of the same size per route (the "
                                                "baseline the selection is measured against)")
    proportions: dict[str, float] = Field(default_factory=dict, description="route -> share of k (routes: "
                                          "midtrain_env, decompose, reason, plan, midtrain_text, midtrain_longctx, research); "
                                          "empty: each route's share of the candidates")
    reference: str = Field("bigram", description="reference model of the perplexity score: 'bigram' (fitted on "
                           "one half of the candidates, scoring the other), 'tiny' (the tiny_policy artifact), "
                           "hf:DIR (the SFT'd policy), or openai:URL#MODEL (an engine returning prompt "
                           "log-probabilities)")
    window: int = Field(512, ge=8, description="tokens per sliding window (the report: 512)")
    stride: int = Field(256, ge=1, description="tokens between window starts")
    # 0.25: the weight breaks ties between similarly distant candidates; at 1 the scores (a 10x range) overrode the
    # geometry and the selection covered its candidates worse than a random pick (bench/RESULTS.md, sft_set)
    alpha: float = Field(0.25, ge=0.0, le=8.0, description="KCG distance weight = score ** alpha (0: plain KCG)")
    near_duplicate: float = Field(0.98, gt=0.0, le=1.0, description="cosine similarity at or above which a "
                                  "candidate is a near-duplicate of an earlier one")
    embed_chars: int = Field(2000, ge=100, description="characters of each conversation (request and assistant "
                             "turns) embedded")
    compress_keep_last: int = Field(2, ge=0, description="tool results kept whole when a too-long environment "
                                    "trajectory is step-compressed")

    @field_validator("reference")
    @classmethod
    def _reference(cls, value: str) -> str:
        # hf and openai engines score prompt log-probabilities; vllm's does not here
        return engine_or(value, {"bigram": "fitted on the candidates", "tiny": "the tiny_policy artifact"},
                         kinds=("hf", "openai"))

    @field_validator("proportions")
    @classmethod
    def _proportions(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(ROUTES.values()))
        if unknown or any(v < 0 for v in value.values()) or (value and sum(value.values()) <= 0):
            raise ValueError(f"proportions {value}: routes are {', '.join(ROUTES.values())}, shares >= 0, not all 0")
        return value

    def local_inputs(self) -> list[str]:
        from inference.engine_spec import EngineSpec

        spec = EngineSpec.named_in(self.reference)
        return super().local_inputs() + (spec.local_inputs() if spec else [])


def embed_text(messages: list[dict[str, Any]], train: list[bool], chars: int) -> str:
    """What the model learns from a conversation: the text of its trained assistant turns (words and tool calls)."""
    parts = []
    for m, trained in zip(messages, train, strict=True):
        if trained and m["role"] == "assistant":
            calls = " ".join(f"{c['function']['name']}({c['function'].get('arguments', '')})"
                             for c in m.get("tool_calls") or [])
            parts.append(f"{m.get('content') or ''} {calls}".strip())
    return "\n".join(parts)[:chars]


def trained_spans(tok: Any, messages: list[dict[str, Any]], tools: Any, train: list[bool]) -> list[tuple[int, int]]:
    """Character spans of the rendered conversation the loss trains on: each trained assistant turn, found as
    the text its message adds to the rendering of the messages before it (the chat template renders a prefix of
    a conversation as a prefix of its text)."""

    def render(upto: int) -> str:
        return tok.apply_chat_template(messages[:upto], tools=tools or None, tokenize=False) if upto else ""

    full = render(len(messages))
    spans = []
    for i, (m, trained) in enumerate(zip(messages, train, strict=True)):
        if trained and m["role"] == "assistant":
            before, after = render(i), render(i + 1)
            if not (full.startswith(after) and after.startswith(before)):
                raise StageError("sft_set: the chat template does not render a conversation's prefix as a prefix "
                                 "of its text; trained spans cannot be located")
            spans.append((len(before), len(after)))
    return spans


def trained_logprobs(logprobs: np.ndarray, offsets: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """The log-probabilities of the tokens that start inside a trained span."""
    keep = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        keep |= (offsets >= start) & (offsets < end)
    return logprobs[keep[:len(logprobs)]]


def centred(vectors: np.ndarray) -> np.ndarray:
    """Unit vectors about the candidates' mean direction: distances spread over (0, 2) instead of about 1."""
    if len(vectors) < 2:
        return vectors
    shifted = vectors - vectors.mean(axis=0, keepdims=True)
    norms = np.linalg.norm(shifted, axis=1, keepdims=True)
    return (shifted / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def _candidates(inputs: Mapping[str, Artifact]) -> pl.DataFrame:
    """Every route's trajectories the stage reads (all routes, or those ``with_inputs`` names: one artifact)."""
    frames = [inputs[name].read("trajectories") for name in ROUTES if name in inputs]
    return pl.concat(frames).unique("id", keep="first", maintain_order=True) if frames else TRAJECTORY.frame()


def _admit(row: dict[str, Any], params: SFTSetParams, count: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(the row to consider, None) or (None, why it is dropped); a too-long environment trajectory comes back
    step-compressed as a new row."""
    messages, tools = json_field(row["messages"]), json_field(row["tools"])
    vi = json_field(row["verify_input"]) or {}
    row = {**row, "train": turn_mask(messages, tools), "verify_input": json.dumps({**vi, "limits": params.limits()})}
    if row["domain"] in params.heldout or str(row["env_id"] or "").startswith(EVAL_ENV_PREFIX):
        return None, f"heldout: {row['domain']}"
    if (reason := verify_row(row)) is not None:
        return None, f"not_verified: {reason}"
    if row["tokens"] <= params.max_tokens:
        return row, None
    if row["verifier"] != EXECUTION and not str(row["verifier"]).startswith(RESEARCH):
        return None, f"too_long: {row['tokens']} tokens > {params.max_tokens}"
    # fewer whole results until it fits, then the earliest steps folded into the request, one more at a time (a
    # research call's only: an environment trajectory replays its calls to verify, so a folded one never does)
    n_steps = 0 if row["verifier"] == EXECUTION else sum(
        1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
    for keep, folded in [*((k, 0) for k in range(params.compress_keep_last, -1, -1)),
                         *((0, n) for n in range(1, n_steps))]:
        short, summarized = compress_steps(messages, keep)
        short = fold_steps(short, folded)
        if (tokens := count(short, tools)) <= params.max_tokens:
            break
    compressed = {**row, "id": f"compress:{row['id']}", "source": "compress", "messages": json.dumps(short),
                  "train": turn_mask(short, tools), "tokens": tokens, "parent_id": row["id"], "transform": "compress",
                  "transform_settings": json.dumps({"summarized_results": summarized, "kept_last": keep,
                                                    "folded_steps": folded})}
    if summarized == 0 or tokens > params.max_tokens or verify_row(compressed) is not None:
        return None, f"too_long: {row['tokens']} tokens > {params.max_tokens}, also after step compression"
    return compressed, None


def _near_duplicates(vectors: np.ndarray, threshold: float) -> list[int | None]:
    """For each row, the earlier kept row it nearly duplicates (cosine >= threshold), else None."""
    out: list[int | None] = []
    kept: list[int] = []
    for i in range(len(vectors)):
        if kept:
            sims = vectors[kept] @ vectors[i]
            j = int(np.argmax(sims))
            if sims[j] >= threshold:
                out.append(kept[j])
                continue
        kept.append(i)
        out.append(None)
    return out


def quotas(routes: list[str], k: int, proportions: Mapping[str, float]) -> dict[str, int]:
    """Each route's share of ``k`` (largest remainders), by the given proportions or by its candidates."""
    counts = {r: routes.count(r) for r in dict.fromkeys(routes)}
    shares = {r: proportions.get(r, 0.0) if proportions else n for r, n in counts.items()}
    total = sum(shares.values()) or 1.0
    raw = {r: min(k, len(routes)) * s / total for r, s in shares.items()}
    out = {r: min(counts[r], int(v)) for r, v in raw.items()}
    for r in sorted(raw, key=lambda r: raw[r] - int(raw[r]), reverse=True):
        if sum(out.values()) < min(k, len(routes)) and out[r] < counts[r]:
            out[r] += 1
    return out


def open_scorer(params: SFTSetParams, inputs: Mapping[str, Artifact]) -> Any:
    from tasks.midtrain.perplexity import load_scorer

    return load_scorer(hf_spec(inputs["tiny_policy"].directory) if params.reference == "tiny" else params.reference)


def reference_scores(texts: Sequence[str], spans: Sequence[list[tuple[int, int]]], ids: Sequence[str], tok: Any,
                     params: SFTSetParams, inputs: Mapping[str, Artifact]) -> tuple[np.ndarray, np.ndarray, float,
                                                                                   int, int]:
    """Per candidate, the sliding-window score and the mean perplexity of its trained tokens; then the reference's
    mean NLL per trained token, the trained tokens counted and the reference's vocabulary size. Each candidate's
    log-probabilities are reduced to its scores as they arrive and dropped: memory follows the candidates, never
    every token of the pool (at the small profile's 38M tokens, holding them killed an 11 GB Dask worker)."""
    from tasks.midtrain.perplexity import mean_perplexity, sliding_window_score

    scores, means = np.empty(len(texts)), np.empty(len(texts))
    total, count = 0.0, 0
    scorer = None
    try:  # without scores there is no selection: a reference that fails is the stage's error, not a row's
        if params.reference == "bigram":
            stream, vocab = _bigram_stream(texts, ids, tok), len(tok)
        else:
            scorer = open_scorer(params, inputs)
            stream = scorer.token_logprobs_at(iter(texts))
            vocab = len(scorer.tokenizer) if hasattr(scorer, "tokenizer") else len(tok)
        for i, ((logprobs, offsets), trained) in enumerate(zip(stream, spans, strict=True)):
            kept = trained_logprobs(logprobs, offsets, trained)
            scores[i], means[i] = sliding_window_score(kept, params.window, params.stride), mean_perplexity(kept)
            total, count = total - float(kept.sum()), count + len(kept)
    except (RuntimeError, ValueError, OSError) as exc:
        raise StageError(f"sft_set: reference {params.reference}: {exc}") from None
    finally:
        if scorer is not None:
            scorer.close()
    return scores, means, total / count if count else float("nan"), count, vocab


def _bigram_stream(texts: Sequence[str], ids: Sequence[str], tok: Any) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The cross-fitted bigram's log-probabilities and token offsets, text by text: the candidates split in two by
    a hash of their id, each half scored by a bigram fitted on the other (each text tokenized once to fit and once
    to score, so no token list outlives its text)."""
    from tasks.midtrain.perplexity import BigramReference

    fold = [int(hashlib.sha256(i.encode()).hexdigest(), 16) % 2 for i in ids]
    models = {f: BigramReference(len(tok)).fit(tok(t, add_special_tokens=False)["input_ids"]
                                               for t, g in zip(texts, fold, strict=True) if g != f) for f in (0, 1)}
    for text, f in zip(texts, fold, strict=True):
        encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        yield (models[f].logprobs(encoded["input_ids"]),
               np.array([start for start, _ in encoded["offset_mapping"][1:]], dtype=np.int64))


def _scores_lineage(frame: pl.DataFrame) -> list[bool]:
    ids = set(frame["id"].to_list())
    return [p is not None and p not in ids for p in frame["parent_id"].to_list()]


SCORES_CONTRACT = SELECTION_SCORE.contract(
    expectations=(in_set("status", list(STATUSES)), in_set("source", list(SOURCES))),
    checks=(Check("lineage_resolvable", _scores_lineage,
                  description="every candidate's parent is itself a candidate of the selection"),))


def selection_figure(artifact: Artifact, path: Path) -> None:
    """The figure of an sft_set artifact: score distribution of the selected and the other scored candidates, with
    the coverage in the title."""
    scored, summary = artifact.read("scores").filter(pl.col("score").is_not_null()), artifact.read("summary")
    figures = dict(zip(summary["name"].to_list(), summary["value"].to_list(), strict=True))
    with save_figure(path, figsize=(5, 3)) as (_, ax):
        for status, color in (("selected", "#4477aa"), ("not_selected", "#bbbbbb")):
            values = np.log10(scored.filter(pl.col("status") == status)["score"].to_numpy())
            if len(values):
                ax.hist(values, bins=20, alpha=0.7, color=color, label=status)
        ax.set_xlabel("log10 sliding-window perplexity")
        ax.set_ylabel("candidates")
        ax.set_title(f"coverage: mean distance {figures.get('coverage_mean_distance', float('nan')):.3f} "
                     f"(random {figures.get('coverage_mean_distance_random', float('nan')):.3f})", fontsize=9)
        ax.legend(fontsize=8)


# 2: scores over trained tokens under a cross-fitted bigram, embeddings of the trained text centred, coverage
# measured on bigrams and domains, research trajectories a route; 3: one K-Center-Greedy over the pool with route
# quotas (alpha 0.25), research trajectories step-compressed (earliest steps folded into the request), scores
# streamed per candidate
@stage(name=STAGE, version="3", params=SFTSetParams, inputs=(*ROUTES, "tiny_policy", "tokenizer"),
       outputs={"trajectories": trajectory_contract(SOURCES), REJECTED: TRAJECTORY_REJECTED.contract(),
                "scores": SCORES_CONTRACT, "summary": SELECTION_SUMMARY.contract()}, figure=selection_figure)
def sft_set(inputs: Mapping[str, Artifact], params: SFTSetParams, partition: str) -> dict[str, pl.DataFrame]:
    """The cold-start SFT set: masked, re-verified, deduplicated, mixed across routes and selected by sliding-window
    perplexity K-Center-Greedy (or at random, as its baseline)."""
    from tasks.midtrain.embeddings import embed

    count = token_counter(params, inputs)
    status: dict[str, str] = {}
    rejected, pool = [], []
    candidates = _candidates(inputs)
    databases = candidates.select(pl.col("id").alias(DB_OF), "env_db")
    for row, db in zip(candidates.drop("env_db").iter_rows(named=True), candidates["env_db"], strict=True):
        admitted, reason = _admit({**row, "env_db": db}, params, count)
        row[DB_OF] = row["id"]
        if admitted is None:
            rejected.append({**row, "reason": reason})
            status[row["id"]] = reason.split(":")[0]
            continue
        admitted = {**{k: v for k, v in admitted.items() if k != "env_db"}, DB_OF: row["id"]}
        if admitted["id"] != row["id"]:  # the compressed child replaces its too-long parent
            rejected.append({**row, "reason": f"too_long: replaced by {admitted['id']}"})
            status[row["id"]] = "too_long"
        pool.append(admitted)
    # Exact duplicates: the same conversation and tools.
    seen: dict[str, str] = {}
    unique = []
    for row in pool:
        digest = hashlib.sha256((row["messages"] + row["tools"]).encode()).hexdigest()
        if digest in seen:
            rejected.append({**row, "reason": f"duplicate: of {seen[digest]}"})
            status[row["id"]] = "duplicate"
        else:
            seen[digest] = row["id"]
            unique.append(row)
    vectors = embed([embed_text(json_field(r["messages"]), r["train"], params.embed_chars) for r in unique])
    near = _near_duplicates(vectors, params.near_duplicate)
    keep = [i for i, j in enumerate(near) if j is None]
    for i, j in enumerate(near):
        if j is not None:
            rejected.append({**unique[i], "reason": f"near_duplicate: of {unique[j]['id']}"})
            status[unique[i]["id"]] = "near_duplicate"
    pool, vectors = [unique[i] for i in keep], centred(vectors[keep])

    from tasks.tokenizer import resolve_tokenizer

    tok = resolve_tokenizer(params.tokenizer, inputs)
    # the conversation as the model reads it: the project's chat template, tools included
    texts = [tok.apply_chat_template(json_field(r["messages"]), tools=json_field(r["tools"]) or None,
                                     tokenize=False) for r in pool]
    spans = [trained_spans(tok, json_field(r["messages"]), json_field(r["tools"]), r["train"]) for r in pool]
    scores, means, nll, trained_tokens, vocab = reference_scores(texts, spans, [r["id"] for r in pool], tok, params,
                                                                 inputs)
    weights = (scores / scores.max()) ** params.alpha if len(scores) else scores

    routes = [r["source"] for r in pool]
    quota = quotas(routes, params.k, params.proportions)
    order: dict[int, int] = {}
    if params.selection == "kcg":
        names = list(quota)
        groups = np.array([names.index(r) for r in routes], dtype=np.int64)
        picks, _ = k_center_greedy(vectors, params.k, weights, groups, [quota[r] for r in names])
        order = {int(p): n for n, p in enumerate(picks)}
    for n_route, (route, wanted) in enumerate(quota.items()):
        if params.selection == "random":  # stream 0 is the summary's random baseline
            members = np.array([i for i, r in enumerate(routes) if r == route])
            picks = rng_for(params.seed, STAGE, partition, n_route + 1).sample(range(len(members)),
                                                                              min(wanted, len(members)))
            order.update({int(members[p]): len(order) + n for n, p in enumerate(picks)})
    chosen = sorted(order, key=order.get)
    distance = _nearest(vectors, chosen)
    selected = [pool[i] for i in chosen]
    for i, row in enumerate(pool):
        if i not in order:  # a route the proportions give no share is capped; the others lost to the selection
            reason = "not_selected" if quota.get(row["source"]) else "mixture_cap"
            rejected.append({**row, "reason": f"{reason}: score {scores[i]:.3f}"})
            status[row["id"]] = reason
    score_rows = []
    for i, row in enumerate(pool):
        score_rows.append({"id": row["id"], "source": row["source"], "domain": row["domain"],
                           "parent_id": row["parent_id"], "tokens": row["tokens"], "score": float(scores[i]),
                           "mean_perplexity": float(means[i]), "weight": float(weights[i]),
                           "status": "selected" if i in order else status[row["id"]],
                           "pick": order.get(i), "distance": float(distance[i])})
    scored = {r["id"] for r in score_rows}
    for r in rejected:
        if r["id"] not in scored:
            score_rows.append({"id": r["id"], "source": r["source"], "domain": r["domain"], "parent_id": r["parent_id"],
                               "tokens": r["tokens"], "score": None, "mean_perplexity": None, "weight": None,
                               "status": status[r["id"]], "pick": None, "distance": None})
    summary = _summary(vectors, chosen, distance, scores, quota, routes, params, partition)
    summary += _independent_coverage(pool, chosen, params, partition) + [
        {"name": "reference_mean_nll", "value": nll, "note": f"{params.reference}: nats per trained token over "
                                                             f"{trained_tokens} tokens"},
        {"name": "uniform_nll", "value": float(np.log(vocab)), "note": f"ln V of the reference's {vocab} tokens: a "
                                                                       "reference above it scores worse than guessing"}]
    return {"trajectories": _framed(TRAJECTORY, selected, databases),
            REJECTED: _framed(TRAJECTORY_REJECTED, rejected, databases),
            "scores": SELECTION_SCORE.frame(score_rows), "summary": SELECTION_SUMMARY.frame(summary)}


DB_OF = "_database_of"
"""The candidate whose environment database a row carries (a compressed child its parent's): rows travel without
their databases, joined back onto the outputs (at the small profile the databases are 2.3 GB, and a copy of them
in every row's dict brought the stage to 9.7 GB)."""


def _framed(record: Any, rows: list[dict[str, Any]], databases: pl.DataFrame) -> pl.DataFrame:
    frame = record.frame(rows)
    if frame.is_empty():
        return frame
    return (frame.drop("env_db").with_columns(pl.Series(DB_OF, [r[DB_OF] for r in rows], dtype=pl.String))
            .join(databases, on=DB_OF, how="left", maintain_order="left").select(frame.columns))


def _nearest(vectors: np.ndarray, chosen: list[int]) -> np.ndarray:
    """Each candidate's distance to its nearest selected candidate."""
    if not chosen or not len(vectors):
        return np.full(len(vectors), np.nan)
    sims = vectors @ vectors[chosen].T
    return np.sqrt(np.maximum(2.0 - 2.0 * sims.max(axis=1), 0.0))


def _summary(vectors: np.ndarray, chosen: list[int], distance: np.ndarray, scores: np.ndarray,
             quota: Mapping[str, int], routes: list[str], params: SFTSetParams, partition: str) -> list[dict[str, Any]]:
    from data_contracts.stage import rng_for

    rows = [{"name": "candidates", "value": float(len(vectors)), "note": "after verification and dedup"},
            {"name": "selected", "value": float(len(chosen)), "note": f"k={params.k}"}]
    if chosen:
        rng = rng_for(params.seed, STAGE, partition, 0)
        random_pick = rng.sample(range(len(vectors)), len(chosen))
        baseline = _nearest(vectors, random_pick)
        rows += [{"name": "coverage_mean_distance", "value": float(np.mean(distance)),
                  "note": "mean distance of every candidate to its nearest selected one (lower covers better)"},
                 {"name": "coverage_mean_distance_random", "value": float(np.mean(baseline)),
                  "note": "the same for a seeded random selection of equal size"},
                 {"name": "coverage_max_distance", "value": float(np.max(distance)),
                  "note": "the covering radius K-Center-Greedy minimizes (unweighted)"},
                 {"name": "coverage_max_distance_random", "value": float(np.max(baseline)),
                  "note": "the same for the random selection"}]
    if len(scores):
        for q in (10, 50, 90):
            rows.append({"name": f"score_p{q}", "value": float(np.percentile(scores, q)),
                         "note": "sliding-window perplexity of the candidates"})
        rows.append({"name": "score_p50_selected", "value": float(np.median(scores[chosen])) if chosen else 0.0,
                     "note": "median score of the selected"})
    for route, n in sorted(quota.items()):
        share = params.proportions.get(route) if params.proportions else routes.count(route) / max(len(routes), 1)
        rows.append({"name": f"mixture:{route}", "value": float(n),
                     "note": f"selected of {routes.count(route)} candidates, share {share:.3f}"})
    return rows



def _bigrams(text: str) -> set[str]:
    words = text.lower().split()
    return {f"{a} {b}" for a, b in pairwise(words)}


def _independent_coverage(pool: list[dict[str, Any]], chosen: list[int], params: SFTSetParams,
                          partition: str) -> list[dict[str, Any]]:
    """Coverage on what the selection never sees, against the summary's random selection of equal size: the share
    of the candidates' distinct word bigrams of trained text, and of their domains, that the selected hold."""
    if not chosen:
        return []
    random_pick = rng_for(params.seed, STAGE, partition, 0).sample(range(len(pool)), len(chosen))
    grams = [_bigrams(embed_text(json_field(r["messages"]), r["train"], 10**9)) for r in pool]
    every = set().union(*grams) or {""}
    domains = {r["domain"] for r in pool}
    rows = []
    for label, picks in (("", chosen), ("_random", random_pick)):
        rows.append({"name": f"coverage_bigrams{label}", "value": len(set().union(*(grams[i] for i in picks))
                                                                      & every) / len(every),
                     "note": "share of the candidates' distinct trained-text word bigrams in the selection"
                             + (" (random)" if label else "")})
        rows.append({"name": f"coverage_domains{label}", "value": len({pool[i]["domain"] for i in picks})
                     / len(domains), "note": "share of the candidates' domains in the selection"
                                             + (" (random)" if label else "")})
    return rows
