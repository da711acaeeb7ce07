"""Citation support on claims generated from the world's facts: the precision and recall of "supported" verdicts
over true claims (a document's own sentence, paraphrases of its relations and figures) and false ones of each
class (figures swapped between two attributes, a relation inverted, the wrong relation between the right
entities, a negation the source lacks, another entity's figure, the citation moved to another document), each
cited to the document that states the true fact. Three arms: the fact-level check on the documents alone, with
the world's knowledge graph as its facts, and on the documents with every citation written after the sentence's
period ("... employees. [cite:E361]") instead of before it.

    .venv/bin/python -m bench.bench_citations [--entities 2000] [--claims 100] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import report

TRUE_CLASSES = ("own sentence", "relation paraphrase", "figure paraphrase", "free paraphrase")
FALSE_CLASSES = ("swapped figures", "inverted relation", "wrong relation", "negation", "another's figure",
                 "moved citation", "wrong occupation")


def claims(kg: Any, docs: dict[str, str], n: int, seed: int) -> list[tuple[str, bool, str]]:
    """(text with its citation, true?, class) for ``n`` claims of every class."""
    from tasks.research.harness.text import sentences

    rng = random.Random(seed)
    orgs = [o for o in kg.of_type("organization") if kg.attributes(o)["employees"] != kg.attributes(o)["budget"]]
    founded = [(u, v) for u, v, k in kg.graph.edges(keys=True) if k == "founded_by"]
    employed = [(u, v) for u, v, k in kg.graph.edges(keys=True) if k == "works_for" and (v, u) not in founded]
    born = [(u, v) for u, v, k in kg.graph.edges(keys=True) if k == "born_in"]
    cities = kg.of_type("city")
    out: list[tuple[str, bool, str]] = []
    for _ in range(n):
        doc_id = rng.choice(list(docs))
        out.append((f"{rng.choice(sentences(docs[doc_id])).rstrip('.')} [cite:{doc_id}].", True, "own sentence"))
        org, founder = rng.choice(founded)
        person, employer = rng.choice(employed)
        o, f, p, e = kg.name(org), kg.name(founder), kg.name(person), kg.name(employer)
        out.append((rng.choice([f"{f} founded {o} [cite:{org}].", f"{o} was established by {f} [cite:{org}].",
                                f"{e} employs {p} [cite:{person}].", f"{p} has worked for {e} [cite:{person}]."]),
                    True, "relation paraphrase"))
        x = rng.choice(orgs)
        name, a = kg.name(x), kg.attributes(x)
        out.append((rng.choice([f"{name} has a workforce of {a['employees']:,} [cite:{x}].",
                                (f"With {a['employees']:,} employees, {name} spends ${a['budget']:,} a year "
                                f"[cite:{x}]."), f"The annual budget of {name} is ${a['budget']:,} [cite:{x}]."]),
                    True, "figure paraphrase"))
        out.append(((f"{name} employs {a['budget']:,} people and its annual budget is ${a['employees']:,} "
                     f"[cite:{x}]."), False, "swapped figures"))
        out.append((f"{o} founded {f} [cite:{rng.choice([org, founder])}].", False, "inverted relation"))
        out.append((f"{p} founded {e} [cite:{person}].", False, "wrong relation"))
        subject, city = rng.choice(born)
        # Phrasings outside the check's relation and attribute cues: what a model writes that no template has.
        out.append((rng.choice([f"{kg.name(city)} is the hometown of {kg.name(subject)} [cite:{subject}].",
                                f"{o} owes its existence to {f} [cite:{org}].",
                                f"{p} draws a salary from {e} [cite:{person}].",
                                f"Some {a['employees']:,} people earn their living at {name} [cite:{x}]."]),
                    True, "free paraphrase"))
        job = kg.category(person)
        out.append(((f"{p} is a {rng.choice([j for j in ('chemist', 'lawyer', 'pilot', 'banker') if j != job])} "
                    f"[cite:{person}]."), False, "wrong occupation"))
        out.append((rng.choice([f"{kg.name(subject)} was not born in {kg.name(city)} [cite:{subject}].",
                                f"{p} does not work for {e} [cite:{person}].",
                                f"{o} was never founded by {f} [cite:{org}]."]), False, "negation"))
        c, other = rng.sample(cities, 2)
        if kg.attributes(c)["population"] != kg.attributes(other)["population"]:
            out.append((f"{kg.name(c)} has a population of {kg.attributes(other)['population']:,} [cite:{c}].",
                        False, "another's figure"))
        wrong = rng.choice([d for d in docs if d != org and founder not in (d,)])
        out.append((f"{o} was founded by {f} [cite:{wrong}].", False, "moved citation"))
    return out


def measure(items: list[tuple[str, bool, str]], index: Any, facts: Any) -> dict[str, Any]:
    from tasks.research.harness.citations import check_citations

    by_class: dict[str, list[bool]] = defaultdict(list)
    tp = fp = fn = 0
    start = time.perf_counter()
    for text, true, cls in items:
        supported = all(c.supported for c in check_citations(text, index, facts=facts).checks)
        by_class[cls].append(supported)
        tp += supported and true
        fp += supported and not true
        fn += (not supported) and true
    seconds = time.perf_counter() - start
    return {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / (tp + fn) if tp + fn else 0.0,
            "classes": {k: sum(v) / len(v) for k, v in by_class.items()}, "n": len(items),
            "ms_per_claim": 1000 * seconds / len(items)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--claims", type=int, default=100, help="claims generated per class")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from tasks.longctx.world import world
    from tasks.research.harness.knowledge import KnowledgeGraph, WorldFacts
    from tasks.research.search import SearchIndex, load_corpus

    frames = world.run({}, world.parse_params({"n_entities": args.entities, "n_questions": 0}), "bench")
    kg = KnowledgeGraph.from_frames(frames["entities"], frames["relations"])
    docs = dict(zip(frames["documents"]["doc_id"], frames["documents"]["text"], strict=True))
    items = claims(kg, docs, args.claims, seed=0)
    with tempfile.TemporaryDirectory(prefix="bench-citations-") as tmp:
        index = SearchIndex.build(load_corpus(frames["documents"]), Path(tmp) / "index")
        after_period = [(re.sub(r"\s*((?:\[cite:[^\]]*\])+)\.$", r". \1", text), true, cls)
                        for text, true, cls in items]
        arms = {"documents": measure(items, index, None), "documents + world facts": measure(items, index,
                                                                                           WorldFacts(kg)),
                "documents, cited after the period": measure(after_period, index, None)}
    print(json.dumps(arms, indent=1))
    lines = ["", (f"## Citation support on generated true and false claims (bench_citations.py, "
                 f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} CPUs)"), "",
             (f"{args.entities} world entities, {len(items)} generated claims ({args.claims} per class; a claim is "
             "counted supported when every citation of it is). Share of each class the check calls supported: "
             "true classes should be near 1, false ones near 0."), "",
             "| class | true? | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    for cls in (*TRUE_CLASSES, *FALSE_CLASSES):
        lines.append(f"| {cls} | {'yes' if cls in TRUE_CLASSES else 'no'} | "
                     + " | ".join(f"{a['classes'].get(cls, float('nan')):.3f}" for a in arms.values()) + " |")
    for metric in ("precision", "recall", "ms_per_claim"):
        lines.append(f"| **{metric.replace('_', ' ')}** | | " + " | ".join(f"{a[metric]:.3f}" for a in arms.values())
                     + " |")
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()
