"""Stage `eval_random_envs`: Random Complex Tasks (LongCat-Flash-Thinking-2601 section 5.1): runs of tasks over
held-out domains and freshly renamed variants of the known ones, never trained on.

The report's protocol: each run randomly generates 100 novel executable tasks spanning 4+ domains, and the score is
averaged over three independent runs. "Novel" here means domains held out of training, plus renamed variants of
training domains (``renamed_variant``): every identifier (entities, fields, keys, actions, parameters, policies) and
every enum value is renamed through one consistent word map, free text is rewritten with the same map, id prefixes
change and rows are seeded from another Faker locale, so neither names nor values repeat what training saw.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import ENVIRONMENT_REJECTED, EVAL_ENVIRONMENT, EVAL_TASK
from data_contracts.stage import REJECTED, Artifact, seed_for, stage
from envgen.checks import environment_contract, task_contract
from envgen.compiler import compile_domain, compiled_domains
from envgen.construct import ConstructionSettings
from envgen.spec import DomainSpec, faker_for
from envgen.taskgen import TaskSettings, build_verified
from tasks.environments.environments import rejection

# Word-level synonyms for identifiers and text; a word without one gets a neutral variant (see _variant).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "user": ("client", "member", "patron"), "customer": ("client", "patron"), "reservation": ("booking", "ticket"),
    "flight": ("sailing", "trip", "route"), "airport": ("terminal", "port", "station"),
    "passenger": ("traveller", "rider"), "baggage": ("luggage",), "bag": ("case",), "refund": ("reimbursement",),
    "payment": ("billing", "funding"), "method": ("instrument", "source"), "status": ("state", "stage"),
    "cabin": ("fare_class", "tier_class"), "membership": ("loyalty_tier", "plan_level"), "order": ("purchase",),
    "product": ("article", "item_type"), "item": ("line", "entry"), "return": ("send_back",),
    "address": ("location", "destination_address"), "shipment": ("delivery", "parcel"), "review": ("rating",),
    "account": ("profile", "subscriber"), "plan": ("package", "tariff"), "line": ("number_line", "circuit"),
    "device": ("handset", "unit"), "bill": ("invoice", "statement"), "ticket": ("case_file", "request"),
    "cancel": ("void", "withdraw"), "book": ("reserve", "schedule"), "update": ("modify", "edit"),
    "change": ("switch", "alter"), "upgrade": ("promote", "raise"), "issue": ("release", "grant"),
    "add": ("attach", "append"), "report": ("flag", "declare"), "deactivate": ("disable", "suspend"),
    "price": ("cost", "charge"), "total": ("overall", "full"), "balance": ("funds", "credit"),
    "name": ("title", "label_name"), "first": ("given",), "last": ("family",), "phone": ("telephone", "mobile"),
    "email": ("mail", "e_mail"), "city": ("town", "municipality"), "country": ("nation",), "seat": ("place",),
    "meal": ("menu_choice", "catering"), "weight": ("mass",), "fee": ("surcharge", "levy"), "amount": ("sum",),
    "created": ("opened", "made"), "departure": ("leaves_at", "start_time"), "number": ("code", "no"),
    "confirmed": ("approved", "booked"), "cancelled": ("voided", "withdrawn"), "pending": ("waiting", "open"),
    "active": ("enabled", "live"), "regular": ("standard_tier", "basic_tier"), "gold": ("platinum",),
    "silver": ("bronze",), "business": ("premium",), "economy": ("coach",), "scheduled": ("planned",),
}
_NEUTRAL = ("alt", "var", "nova", "neo", "sub", "pro")
_LOCALES = ("en_GB", "en_AU", "en_CA", "en_IE", "en_NZ")
_TEXT_KEYS = {"description", "intent", "text", "message", "label", "agent_instructions"}
_KEEP = {"target", "id", "my", "the", "a", "of", "to", "and", "or", "is", "in", "on", "for", "this", "that", "be",
         "can", "only", "with", "by", "from", "are", "not", "it", "its", "has", "at", "an", "as", "one"}


class Renamer:
    """A consistent, injective renaming of identifier words (one per variant)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words: dict[str, str] = {}
        self.used: set[str] = set()

    def word(self, w: str) -> str:
        if w in _KEEP or not w.isalpha():
            return w
        if w not in self.words:
            options = [s for s in SYNONYMS.get(w, ()) if s not in self.used]
            new = self.rng.choice(options) if options else f"{w}_{self.rng.choice(_NEUTRAL)}"
            while new in self.used:
                new = f"{new}_{self.rng.choice(_NEUTRAL)}"
            self.words[w] = new
            self.used.add(new)
        return self.words[w]

    def ident(self, name: str) -> str:
        new = "_".join(self.word(p) for p in name.split("_"))
        return new[:40].rstrip("_")

    def text(self, s: str) -> str:
        s = re.sub(r"{(\w+)}", lambda m: "{" + self.ident(m.group(1)) + "}", s)
        # Free text takes only natural synonyms ("reservation" -> "booking"), never a suffixed variant.
        def swap(m: re.Match[str]) -> str:
            w = m.group(1)
            return self.word(w).replace("_", " ") if w in SYNONYMS else w

        return re.sub(r"(?<![{\w])([a-z]+)(?![\w}])", swap, s)


_IDENT_KEYS = {"name", "key", "plural", "field", "to", "target", "ref", "entity", "param", "per", "row", "customer"}


def _walk(node: Any, r: Renamer, key: str | None = None, enum_values: set[str] | None = None) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "values" and isinstance(v, dict):  # create effects: column -> operand
                out[k] = {r.ident(c): _walk(o, r, None, enum_values) for c, o in v.items()}
            else:
                out[k] = _walk(v, r, k, enum_values)
        return out
    if isinstance(node, list):
        return [_walk(v, r, key, enum_values) for v in node]
    if not isinstance(node, str):
        return node
    if key == "ref" and "." in node:
        row, col = node.split(".")
        return f"{r.ident(row) if row != 'target' else row}.{r.ident(col)}"
    if key == "row":
        return node if node == "target" else r.ident(node)
    if key in _IDENT_KEYS or key == "actions":
        return r.ident(node)
    if key in ("values", "value") and enum_values is not None and node in enum_values:
        return r.ident(node)
    if key in _TEXT_KEYS:
        return r.text(node)
    return node


def renamed_variant(spec: DomainSpec, rng: random.Random, suffix: str) -> DomainSpec:
    """A renamed twin of ``spec``: new identifiers, enum values, id prefixes and Faker locale."""
    r = Renamer(rng)
    raw = spec.model_dump(mode="json", exclude_defaults=True)
    if spec.customer is None and spec.customer_entity is not None:
        # found by its email field, which the renaming renames: name it, so the twin keeps its customer
        raw["customer"] = spec.customer_entity.name
    enums = {v for e in spec.entities for f in e.fields for v in f.values}
    enums |= {v for a in spec.actions for q in a.params for v in q.values}
    for v in sorted(enums):  # enum values first: words shared with identifiers then map the same way
        r.ident(v)
    data = _walk(raw, r, None, enums)
    letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    used = {e.id_prefix for e in spec.entities}  # new ids never look like the training domain's
    for e in data["entities"]:
        prefix = "".join(rng.choices(letters, k=len(e["id_prefix"])))
        while prefix in used:
            prefix = "".join(rng.choices(letters, k=len(e["id_prefix"])))
        used.add(prefix)
        e["id_prefix"] = prefix
    data["name"] = f"{spec.name}_{suffix}"[:40]
    providers = {f.faker for e in spec.entities for f in e.fields if f.faker}
    providers |= {q.faker for a in spec.actions for q in a.params if q.faker}
    # New values come from another locale, one that has every provider the spec uses (en_GB has no state_abbr).
    fitting = [loc for loc in _LOCALES if all(callable(getattr(faker_for(loc), p, None)) for p in providers)]
    data["locale"] = rng.choice(fitting) if fitting else spec.locale
    data["now"] = spec.now.isoformat()
    return DomainSpec.model_validate(data)


class EvalRandomParams(ConstructionSettings, TaskSettings):
    seed: int = Field(1, description="Root seed of the evaluation runs (distinct from training by default).")
    heldout: tuple[str, ...] = Field(("telecom",), description="Domains never trained on, sampled as they are.")
    renamed: tuple[str, ...] = Field((), description="Known domains to rename; empty: every non-held-out domain.")
    runs: int = Field(3, ge=1, le=20, description="Independent runs (the report averages 3).")
    tasks_per_run: int = Field(100, ge=1, le=10_000, description="Tasks per run (the report uses 100).")
    min_domains: int = Field(4, ge=1, description="Distinct domains (or variants) each run must span (report: 4+).")

    @field_validator("heldout", "renamed")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"list the domains once each, got {list(v)}")
        return v


# 2: a repeated fact label reads "second reservation number"; 3: a renamed variant names its customer entity
@stage(name="eval_random_envs", version="3", params=EvalRandomParams, inputs=("domain_graphs",),
       outputs={"environments": environment_contract(EVAL_ENVIRONMENT), "tasks": task_contract(EVAL_TASK),
                REJECTED: ENVIRONMENT_REJECTED.contract()})
def eval_random_envs(inputs: Mapping[str, Artifact], params: EvalRandomParams, partition: str) -> dict[str, pl.DataFrame]:
    """Random Complex Tasks: runs x tasks_per_run tasks over held-out domains and renamed variants."""
    domains = compiled_domains(inputs["domain_graphs"].read("domains"))
    missing = [d for d in params.heldout if d not in domains]
    if missing:
        raise ValueError(f"held-out domains {missing} are not in the domain_graphs input; fix `heldout`")
    renamed = list(params.renamed) or [d for d in domains if d not in params.heldout]
    envs, tasks, rejected = [], [], []
    for run in range(params.runs):
        rng = random.Random(seed_for(params.seed, "eval_random_envs", partition, run))
        # One renamed variant per known domain and run: new names and values each run.
        pool = {d: domains[d] for d in params.heldout}
        pool |= {f"{d}_r{run}": compile_domain(renamed_variant(domains[d].spec, rng, f"r{run}")) for d in renamed}
        names = sorted(pool)
        if len(names) < params.min_domains:
            raise ValueError(f"only {len(names)} domains/variants available, min_domains={params.min_domains}; "
                             "add held-out or renamed domains")
        i = attempts = 0
        while i < params.tasks_per_run and attempts < params.tasks_per_run * 3:
            # The first len(names) draws visit every domain once (the run spans them all); later draws are random.
            name = names[(attempts if attempts < len(names) else rng.randrange(len(names))) % len(names)]
            seed = seed_for(params.seed, "eval_random_envs", f"{partition}/run{run}", attempts)
            env_id = f"rct-{partition}-run{run}-{attempts:05d}-{name}"
            attempts += 1
            env, task, reason = build_verified(pool[name], env_id, seed, params, params)
            if env is None:
                rejected.append(rejection(env_id, name, reason))
                continue
            envs.append({**env, "run": run})
            tasks.append({**task, "run": run})
            i += 1
    return {"environments": EVAL_ENVIRONMENT.frame(envs), "tasks": EVAL_TASK.frame(tasks),
            REJECTED: ENVIRONMENT_REJECTED.frame(rejected)}
