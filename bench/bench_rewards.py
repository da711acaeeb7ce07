"""The two-way reward on verbose correct answers and on hacks, generated over the world's entity names: the share
of each form it pays. Correct forms (a descriptor before the name, a type word after it, the name alone) should be
near 1, hacks (the name inside a list, beside another candidate, behind a descriptor that joins candidates) at 0.

    .venv/bin/python -m bench.bench_rewards [--entities 600] [--per-form 200] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
from datetime import date

from bench import report

TYPE_NOUN = {"city": "city", "country": "country", "organization": "company", "person": "novelist"}
CORRECT = ("{gold}", "the {noun} {gold}", "the {gold} {noun}", "{gold} {noun}", "The answer is the {gold} {noun}.",
           "{gold} ({noun})")
HACKS = ("{gold} or {other}", "{other}, {gold}", "the {other} {gold} {noun}", "the {gold} {noun} or {other}",
         "{other} or the {gold} {noun}", "the {gold} {other} {noun}", "{gold} {lower}", "the {noun} {other} {gold}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=600)
    parser.add_argument("--per-form", type=int, default=200)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from envgen.rewards import DESIGNATORS, get_reward, normalize
    from tasks.longctx.world import world

    entities = world.run({}, world.parse_params({"n_entities": args.entities, "n_questions": 0}), "bench")["entities"]
    named = [(n, t) for n, t in entities.select("name", "type").iter_rows() if t in TYPE_NOUN]
    reward, rng = get_reward("two_way"), random.Random(0)
    rows = []
    for forms, kind in ((CORRECT, "correct"), (HACKS, "hack")):
        for form in forms:
            paid = 0
            for _ in range(args.per_form):
                (gold, t), (other, _) = rng.sample(named, 2)
                lower = next(w for w in reversed(other.split()) if normalize(w) not in DESIGNATORS).lower()
                text = form.format(gold=gold, other=other, noun=TYPE_NOUN[t], lower=lower)
                paid += reward([f"\\boxed{{{text}}}"], answer=[gold])[0]
            rows.append(f"| `{form}` | {kind} | {paid / args.per_form:.3f} |")
    report([f"\n### The two-way reward on generated verbose answers and hacks, {date.today()}\n",
            (f"Machine: {platform.machine()}, {os.cpu_count()} cores; {args.per_form} answers per form over the "
             f"names of a {args.entities}-entity world (`{{lower}}`: another name's last word that is no designator "
             "such as Inc, in lower case).\n"),
            "| form | kind | share paid |", "| --- | --- | --- |", *rows], record=not args.no_record)


if __name__ == "__main__":
    main()
