"""Does the generated world hold together? Counted over whole artifacts of a data root (one ``make demo`` root):

- ownership: seeded records with two or more relation paths to the customer entity, and how many reach two
  customers (per database of ``environments``, ``small_envs``, ``eval_random_envs`` and every route storing
  ``env_db``), with the entities they are of;
- actors and intents: tasks whose writes are staff actions, and writes whose own intent says a word of another
  action on the same entity ("withdraw my pending leave request" executed as ``reject_leave``);
- what people know: internal keys (generated primary keys) in task texts, profile facts (environments, noisy twins)
  and what the user says in trajectories;
- rubrics: tasks without required outputs, and tasks that ask something without one;
- renamed variants: ``eval_random_envs`` texts carrying made-up renaming suffixes ("due var date alt");
- base tasks per mid-training route;

then ten sampled task texts with their profiles. Records written before a field existed (an action's actor and
words) take it from the shipped spec of their domain; renamed variants take the defaults below.

    .venv/bin/python -m bench.bench_world_consistency --data-dir DIR [--label before] [--samples 10] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl

from bench import report

ENVIRONMENT_STAGES = ("environments", "small_envs", "eval_random_envs")
TASK_STAGES = ("environments", "eval_random_envs", "noisy_tasks")
SUFFIXES = re.compile(r"\b(alt|var|nova|neo|sub|pro)\b")


def latest(root: Path, stage: str, output: str) -> pl.DataFrame | None:
    """The newest artifact of ``stage`` under ``root`` (published or quarantined), its ``output`` frame."""
    dirs = [p.parent for p in (*root.glob(f"artifacts/{stage}/*/manifest.json"),
                               *root.glob(f"_quarantine/{stage}/*/manifest.json"))
            if (p.parent / f"{output}.parquet").exists() and not p.parent.name.startswith((".", "_"))]
    if not dirs:
        return None
    return pl.read_parquet(max(dirs, key=lambda d: (d / "manifest.json").stat().st_mtime) / f"{output}.parquet")


_DOMAINS: dict[str, Any] = {}


def domain_of(spec_json: str) -> Any:
    """The compiled domain of a record's spec; a spec written before actions declared actor and words takes them
    from the shipped domain of the same name (a renamed variant's: customer, the intent's first word)."""
    from envgen.compiler import compile_domain
    from envgen.domain_spec import DomainSpec, domain_paths, load_domain

    if spec_json in _DOMAINS:
        return _DOMAINS[spec_json]
    raw = json.loads(spec_json)
    shipped = load_domain(raw["name"]) if raw["name"] in domain_paths() else None
    for a in raw["actions"]:
        known = next((s for s in shipped.actions if s.name == a["name"]), None) if shipped else None
        a.setdefault("actor", known.actor if known else "customer")
        a.setdefault("words", list(known.words) if known else [a["intent"].split()[0]])
    if shipped is not None:  # today's relations (crossings declared) over the same tables
        raw["entities"] = [e.model_dump(mode="json") for e in shipped.entities]
    _DOMAINS[spec_json] = compile_domain(DomainSpec.model_validate(raw))
    return _DOMAINS[spec_json]


def databases(root: Path) -> Iterator[tuple[str, Any, bytes]]:
    """(artifact, domain, database) of every distinct seeded database an artifact holds."""
    for stage in ENVIRONMENT_STAGES:
        frame = latest(root, stage, "environments")
        seen: set[str] = set()
        for row in [] if frame is None else frame.iter_rows(named=True):
            if row["db_sha256"] not in seen:
                seen.add(row["db_sha256"])
                yield stage, domain_of(row["spec_json"]), row["db"]
    for stage, frame in trajectory_frames(root):
        seen = set()
        for row in frame.iter_rows(named=True):
            if row.get("env_db") is not None and hash(row["env_db"]) not in seen:
                seen.add(hash(row["env_db"]))
                yield stage, domain_of(json.loads(row["verify_input"])["env"]["spec_json"]), row["env_db"]


def trajectory_frames(root: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    for stage in sorted({p.parent.parent.name for p in root.glob("artifacts/*/*/trajectories.parquet")}):
        frame = latest(root, stage, "trajectories")
        if frame is not None and "env_db" in frame.columns:
            yield stage, frame.filter(pl.col("env_db").is_not_null())


def ownership(root: Path) -> list[str]:
    from envgen.customers import database_rows, path_count, row_owners
    from envgen.seeding import engine_from_bytes

    multi: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    dbs: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for stage, domain, db in databases(root):
        engine = engine_from_bytes(bytes(db))
        with engine.connect() as conn:
            owners = row_owners(domain.spec, database_rows(domain, conn))
        engine.dispose()
        dbs[stage] += 1
        for entity, keyed in owners.items():
            paths = path_count(domain.spec, entity)
            for found in keyed.values():
                anywhere[stage] += len(found) > 1
                if paths >= 2:
                    multi[stage] += 1
                    bad[stage] += len(found) > 1
                    kinds[stage][f"{domain.name}.{entity}"] += len(found) > 1
    lines = [("| artifact | databases | records with 2+ paths to the customer | of them reaching 2+ customers | "
             "any record reaching 2+ customers | most contradicted |"), "|---|---|---|---|---|---|"]
    for stage in dbs:
        top = ", ".join(f"{k} {v}" for k, v in kinds[stage].most_common(3) if v) or "-"
        lines.append(f"| {stage} | {dbs[stage]} | {multi[stage]} | {bad[stage]} | {anywhere[stage]} | {top} |")
    return lines


def tasks(root: Path) -> Iterator[tuple[str, Any, dict[str, Any], bytes | None]]:
    """(artifact, domain, task, database or None) of every task record and trajectory's task."""
    envs: dict[str, dict[str, Any]] = {}
    for stage in ("environments", "eval_random_envs"):
        frame = latest(root, stage, "environments")
        envs |= {r["env_id"]: r for r in ([] if frame is None else frame.iter_rows(named=True))}
    for stage in TASK_STAGES:
        frame = latest(root, stage, "tasks")
        for row in [] if frame is None else frame.iter_rows(named=True):
            env = envs.get(row["env_id"])
            if env is not None:
                yield stage, domain_of(env["spec_json"]), row, env["db"]
    for stage, frame in trajectory_frames(root):
        for row in frame.iter_rows(named=True):
            given = json.loads(row["verify_input"])
            if "task" in given:
                yield stage, domain_of(given["env"]["spec_json"]), {**given["task"], "_messages": row["messages"]}, \
                    row["env_db"]


def people(root: Path) -> tuple[list[str], list[dict[str, Any]]]:
    from envgen.checks import database_keys, keys_said, unanswered_question
    from envgen.domain_spec import domain_paths, load_domain, says
    from envgen.environment import json_field

    c: dict[str, Counter[str]] = defaultdict(Counter)
    samples: list[dict[str, Any]] = []
    keys_of: dict[int, set[str]] = {}
    for stage, domain, task, db in tasks(root):
        n = c[stage]
        keys = keys_of.setdefault(hash(db), database_keys(domain, db))
        facts = json_field(task["user_profile"])["facts"]
        n["tasks"] += 1
        n["facts"] += len(facts)
        n["key facts"] += sum(bool(keys_said([str(f["value"])], keys)) for f in facts)
        n["key in request"] += bool(keys_said([str(task["description"])], keys))
        writes = [domain.spec.action(domain.tools[a["name"]].action)
                  for a in json_field(task["golden_actions"]) if domain.tools[a["name"]].is_write]
        n["staff action asked"] += any(a.actor != "customer" for a in writes)
        # today's actions of a shipped domain claim their words (a record may predate withdraw_leave)
        claims = load_domain(domain.name).actions if domain.name in domain_paths() else domain.spec.actions
        n["intent of another action"] += any(says(a.intent, w) for a in writes for o in claims
                                             if o.target == a.target and o.name != a.name for w in o.words)
        n["no required outputs"] += not json_field(task["rubric"])["required_outputs"]
        n["question unanswered"] += unanswered_question(task)
        n["renaming suffix"] += bool(SUFFIXES.search(str(task["description"])))
        if "_messages" in task:
            said = [str(m.get("content") or "") for m in json.loads(task["_messages"])[2:] if m["role"] == "user"]
            n["user tells a key"] += bool(keys_said(said, keys))
        elif stage == "environments":
            samples.append(task)
    columns = ["tasks", "staff action asked", "intent of another action", "facts", "key facts", "key in request",
               "user tells a key", "no required outputs", "question unanswered", "renaming suffix"]
    lines = ["| artifact | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {stage} | " + " | ".join(str(c[stage][k]) for k in columns) + " |" for stage in c]
    return lines, samples


def base_tasks(root: Path) -> list[str]:
    lines = ["| route | rows | base tasks |", "|---|---|---|"]
    for stage, frame in trajectory_frames(root):
        ids = {re.sub(r"(-t\d+)?(-refusal)?$", "", json.loads(v)["task"]["task_id"]) for v in frame["verify_input"]
               if "task" in json.loads(v)}
        lines.append(f"| {stage} | {frame.height} | {len(ids)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="the data root to read (a `make demo` root)")
    parser.add_argument("--label", default="", help="what the root is (before, after, small profile)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    root = Path(args.data_dir)
    people_lines, samples = people(root)
    lines = [(f"\n## The world holding together: {args.label or root} ({date.today().isoformat()}, "
             f"{platform.machine()}, {platform.python_version()})"), "",
             f"`python -m bench.bench_world_consistency --data-dir {root}`", "", "Ownership:", "",
             *ownership(root), "", "Tasks, profiles and what users say:", "", *people_lines, "",
             "Base tasks per trajectory route:", "", *base_tasks(root), "", "Sampled environment tasks:", ""]
    for task in random.Random(0).sample(samples, min(args.samples, len(samples))):
        facts = "; ".join(f"{f['label']}: {f['value']}" for f in json.loads(task["user_profile"])["facts"])
        lines.append(f"- `{task['domain']}` {' '.join(str(task['description']).split())[:300]} — profile: {facts}")
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()
