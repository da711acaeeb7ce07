"""Search QA synthesis on the world corpus: the difficulty histogram the answer agent gives (the reference search
agent by default: ``--engine`` any engine spec), constraints per question and how they are stated.

    .venv/bin/python -m bench.bench_qa [--entities 2000] [--n 60] [--engine reference] [--obfuscation 0.6]
        [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--engine", default="reference")
    parser.add_argument("--obfuscation", type=float, default=0.6, help="share of clauses stated obfuscated")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from data_contracts.stage import FrameArtifact
    from tasks.longctx.world import world
    from tasks.research.search import SearchIndex, load_corpus
    from tasks.research.search_qa import DIFFICULTY, search_qa

    frames = world.run({}, world.parse_params({"n_entities": args.entities, "n_questions": 0}), "bench")
    with tempfile.TemporaryDirectory(prefix="bench-qa-") as tmp:
        SearchIndex.build(load_corpus(frames["documents"]), Path(tmp) / "index")
        inputs = {"world": FrameArtifact(frames), "search_index": FrameArtifact({}, directory=Path(tmp) / "index")}
        start = time.perf_counter()
        out = search_qa.run(inputs, search_qa.parse_params({"n": args.n, "answer_engine": args.engine,
                                                              "obfuscation": args.obfuscation}), "bench")
        seconds = time.perf_counter() - start
    items = out["items"]
    grades = Counter(items["difficulty"].to_list())
    sizes = Counter(items["n_constraints"].to_list())
    ops = Counter("relation" if "relation" in c["spec"] else c["spec"]["op"]
                  for row in items["constraints"].to_list() for c in json.loads(row))
    lines = ["", (f"## Search QA difficulty (bench_qa.py, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
                 f"{os.cpu_count()} CPUs)"), "",
             (f"{args.entities} world entities, {args.n} items asked, {items.height} accepted, "
             f"{out['rejected'].height} rejected, {seconds:.0f} s; obfuscation {args.obfuscation}; answer agent "
             f"{args.engine} "
             "(4 samples per question). Difficulty by the answer agent's accuracy:"), "",
             "| " + " | ".join(g for _, g in DIFFICULTY) + " |", "|" + "---|" * len(DIFFICULTY),
             "| " + " | ".join(str(grades.get(g, 0)) for _, g in DIFFICULTY) + " |", "",
             "Constraints per question: " + ", ".join(f"{k}: {v}" for k, v in sorted(sizes.items()))
             + "; clauses by how they are stated: " + ", ".join(f"{k} {v}" for k, v in ops.most_common()) + ".",
             "", "Sample questions:", ""]
    lines += [f"- {q} ({d})" for q, d in zip(items["question"].head(4), items["difficulty"].head(4), strict=True)]
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()
