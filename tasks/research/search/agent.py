"""The reference search agent: an offline, deterministic-given-its-seed policy for question answering in the
search environment (``tasks.research.search.SearchEnvironment``), named so. It stands in for a model as the answer agent
of agent-based QA synthesis where none can be had; any Engine (``openai:URL#MODEL``, ``hf:DIR``) is the real one.

It reads the question's clauses ("Which person matches all of these: a chemist; born in 1861; employed by X?"),
searches with a random subset of them (drawn from the request's sampling seed, so k samples differ the way
sampled models do: a sample that drops a distinguishing clause may land on the wrong entity), opens and reads the
best hits, and answers with the title of the document that satisfies the most clauses, in ``\\boxed{}``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from typing import Any

from inference.engine import Completion, Request
from tasks.research.harness.text import terms

MAX_OPEN = 5
_QUESTION = re.compile(r"^Which\s+\w+\s+matches all of these:\s*(.*?)\??$", re.IGNORECASE | re.DOTALL)
_RELATION_WORDS = frozenset({"born", "employed", "founded", "released", "organised", "held", "located",
                             "headquartered", "created", "married", "population", "employees", "annual", "budget",
                             "attended", "people", "industry", "works", "lies", "hosted", "employs"})


def clauses(question: str) -> list[str]:
    """The constraints of a "Which <noun> matches all of these: A; B; C?" question (the whole question, for any
    other)."""
    match = _QUESTION.match(question.strip())
    parts = match.group(1).split(";") if match else [question]
    return [p.strip(" ?.") for p in parts if p.strip(" ?.")]


class ReferenceSearchAgent:
    """The reference search agent (see the module docstring); speaks the Engine protocol."""

    policy_version = 0

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        return [[self._complete(r, i) for i in range(r.sampling.n)] for r in requests]

    def close(self) -> None:
        pass

    def _complete(self, request: Request, sample: int) -> Completion:
        text, calls = self._move(request, random.Random(f"{request.sampling.seed}/{sample}"))
        seed = f"{len(request.messages)}/{request.sampling.seed}/{sample}"
        tool_calls = tuple({"id": "call_" + hashlib.sha256(f"{seed}/{i}".encode()).hexdigest()[:24],
                            "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                           for i, (n, a) in enumerate(calls))
        ids = tuple((text + "".join(json.dumps(c["function"]) for c in tool_calls)).encode())
        return Completion(text, ids, (0.0,) * len(ids), "tool_calls" if tool_calls else "stop", 0,
                          tool_calls=tool_calls)

    def _move(self, request: Request, rng: random.Random) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        messages = list(request.messages)
        question = next(str(m.get("content")) for m in messages if m.get("role") == "user")
        parts = clauses(question) or [question]
        results = _results(messages)
        turn = sum(m.get("role") == "assistant" for m in messages)
        if turn == 0:
            subset = rng.sample(parts, rng.randint(1, len(parts)))
            return "", [("search", {"query": " ".join(subset), "k": 8})]
        hits = [h for name, r in results if name == "search" for h in r.get("results", [])]
        opened = [r for name, r in results if name == "open" and "sections" in r]
        if turn == 1 and hits:
            return "", [("open", {"doc_id": h["doc_id"]}) for h in hits[:MAX_OPEN]]
        if turn == 2 and opened:
            return "", [("read", {"doc_id": d["doc_id"], "section": s["name"]}) for d in opened
                        for s in d["sections"]]
        texts: dict[str, list[str]] = {}
        for name, r in results:
            if name == "read" and "text" in r:
                texts.setdefault(r["title"], []).append(r["text"])
        if not texts:
            return "I could not find the answer in the collection.", []
        wanted = [t - _RELATION_WORDS for t in terms(parts)]
        scored = [(sum(bool(w) and w <= have for w in wanted), title) for title, have in
                  ((title, set().union(*terms([title, *chunks]))) for title, chunks in texts.items())]
        best = max(scored, key=lambda s: s[0])[1]  # max keeps the first of equals: the best-ranked hit
        return f"The answer is \\boxed{{{best}}}", []


def _results(messages: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    names = {c.get("id"): c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    out = []
    for m in messages:
        if m.get("role") == "tool" and m.get("tool_call_id") in names:
            try:
                result = json.loads(m.get("content") or "{}")
            except ValueError:
                continue
            if isinstance(result, dict):
                out.append((names[m["tool_call_id"]], result))
    return out
