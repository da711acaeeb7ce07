"""The answer prior of the long-context QA artifacts of data roots: how many countries the world has, the share of
questions asking for a country, and per artifact (world seeds, qa_filtered's kept seeds, KeyChain and regular
long-context items) the share of its rows the commonest answer holds, with ten sampled questions and answers.

    .venv/bin/python -m bench.bench_answer_prior --roots BEFORE_ROOT AFTER_ROOT [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import date

import polars as pl

from bench import report

ARTIFACTS = (("world", "seeds"), ("qa_filtered", "seeds"), ("keychain", "keychain"), ("keychain", "regular"))


def latest(root: str, stage: str, output: str) -> pl.DataFrame | None:
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store

    found = Catalog(root).latest(stage)
    return None if found is None else open_store(root).get(stage, found.key).read(output)


def measure(root: str) -> tuple[list[str], list[str]]:
    from envgen.rewards import normalize

    entities = latest(root, "world", "entities")
    countries = entities.filter(pl.col("type") == "country").height if entities is not None else 0
    seeds = latest(root, "world", "seeds")
    asks_country = seeds.filter(pl.col("question").str.starts_with("In which country")) if seeds is not None else None
    row = [f"{countries}", f"{asks_country.height} of {seeds.height}" if seeds is not None else "-"]
    if asks_country is not None and asks_country.height:
        top2 = asks_country["answer"].value_counts(sort=True)["count"].head(2).sum()
        row.append(f"{top2} of {asks_country.height}")
    samples = []
    for stage, output in ARTIFACTS:
        frame = latest(root, stage, output)
        if frame is None or frame.is_empty():
            row.append("-")
            continue
        counts = frame["answer"].map_elements(normalize, return_dtype=pl.String).value_counts(sort=True)
        top, n = counts.row(0)
        row.append(f"{n} of {frame.height} ({n / frame.height:.1%}, {top!r})")
        if output == "seeds" and stage == "world":
            samples += [f"    {q[:110]} -> {a}" for q, a in frame.sample(min(10, frame.height), seed=0)
                        .select("question", "answer").iter_rows()]
    return row, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", nargs="+", required=True)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    lines = [f"\n### The answer prior of the long-context QA artifacts, {date.today()}\n",
             (f"Machine: {platform.machine()}, {os.cpu_count()} cores. Commonest answer (normalized) per artifact; "
              "the contract's bound is 5% (at least 2 rows).\n"),
             "| root | countries | 'In which country' questions | two commonest countries answer | "
             + " | ".join(f"{s}/{o}" for s, o in ARTIFACTS) + " |",
             "| --- " * (4 + len(ARTIFACTS)) + "|"]
    sampled = []
    for root in args.roots:
        row, samples = measure(root)
        row += ["-"] * (3 + len(ARTIFACTS) - len(row))
        lines.append(f"| {root} | " + " | ".join(row) + " |")
        sampled += [f"\nTen sampled world seeds of {root} (question -> answer):\n", "```", *samples, "```"]
    report(lines + sampled, record=not args.no_record)


if __name__ == "__main__":
    main()
