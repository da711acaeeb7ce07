"""Stage `eval_random_envs`: Random Complex Tasks (LongCat-Flash-Thinking-2601 section 5.1): runs of tasks over
held-out domains and freshly renamed variants of the known ones, never trained on.

The report's protocol: each run randomly generates 100 novel executable tasks spanning 4+ domains, and the score is
averaged over three independent runs. "Novel" here means domains held out of training, plus renamed variants of
training domains (``renamed_variant``): every identifier (entities, fields, keys, actions, parameters, policies) and
every enum value is renamed through one consistent word map, free text is rewritten with the same map, id prefixes
change and rows are seeded from another Faker locale, so neither names nor values repeat what training saw.
"""

from __future__ import annotations

import keyword
import random
import re
from collections.abc import Mapping
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.stage import REJECTED, Artifact, seed_for, stage
from envgen.checks import environment_contract, task_contract
from envgen.compiler import compile_domain, compiled_domains
from envgen.construct import ConstructionSettings
from envgen.domain_spec import DomainSpec, faker_for
from envgen.taskgen import TaskSettings, build_verified
from tasks.environments.environments import rejection
from tasks.environments.records import ENVIRONMENT_REJECTED, EVAL_ENVIRONMENT, EVAL_TASK

# Word-level synonyms for identifiers and text, each a word a person would use; a word without one that the spec
# does not say already keeps its own name (a made-up suffix would reach the user's words: "due var date alt").
SYNONYMS: dict[str, tuple[str, ...]] = {
    "accept": ("agree", "take"), "active": ("enabled", "live"),
    "add": ("attach", "append"), "adjuster": ("assessor", "examiner"),
    "agent": ("broker", "representative"), "airport": ("terminal", "port", "station"), "amount": ("sum",),
    "apply": ("use", "redeem"), "appointment": ("visit", "consultation", "session"), "approve": ("authorise", "grant"),
    "archive": ("shelve", "retire"), "assign": ("allocate", "give"), "assignee": ("owner", "handler"),
    "author": ("writer",), "bag": ("case",), "baggage": ("luggage",), "balance": ("funds", "credit"),
    "benefit": ("perk", "allowance"), "bill": ("invoice", "statement"), "bind": ("activate", "finalise"),
    "block": ("freeze", "stop"), "boarding": ("kennel", "lodging"), "booking": ("reservation", "appointment"),
    "branch": ("office", "outlet"), "budget": ("allowance", "funding"), "business": ("premium",),
    "buy": ("purchase", "order"), "buyer": ("purchaser",), "cabin": ("fare_class", "travel_class"),
    "cancel": ("void", "withdraw", "drop"), "cancelled": ("voided", "withdrawn"), 
    "catering": ("food", "buffet"), "change": ("switch", "alter"), "charge": ("fee", "cost"),
    "city": ("town", "municipality"), "claim": ("case", "request"),
    "class": ("course", "lesson"), "client": ("customer", "patron"), "clinician": ("doctor", "physician"),
    "close": ("finish", "shut"), "closed": ("shut", "finished"), "club": ("gym", "centre"),
    "code": ("reference", "key"), "collect": ("fetch", "retrieve"), "comment": ("remark", "note"),
    "comp": ("waive", "gift"), "complaint": ("grievance", "objection"), "complete": ("finish", "conclude"),
    "confirm": ("verify", "finalise"), "confirmed": ("approved", "booked"), "contract": ("agreement", "deal"),
    "copy": ("volume", "specimen"), "counter": ("rebid", "answer"), "country": ("nation",),
    "courier": ("rider", "driver"), "course": ("module", "subject"), "created": ("opened", "made"),
    "credits": ("tokens", "points"), "customer": ("client", "patron", "shopper"), "damaged": ("broken", "faulty"),
    "date": ("day",), "days": ("day_count",), "deactivate": ("disable", "suspend"),
    "decline": ("refuse", "turn_down"), "deliver": ("drop_off", "hand_over"), "delivered": ("received", "arrived"),
    "deny": ("refuse", "reject"), "department": ("division", "unit"), "departure": ("leaves_at", "start_time"),
    "deposit": ("down_payment", "advance"), "description": ("summary",), "device": ("handset", "unit"),
    "diner": ("patron", "eater"), "dining": ("eating",), "dish": ("meal", "plate"), "dispatch": ("send", "release"),
    "dispute": ("contest", "query"), "driver": ("operator",), "drop": ("remove", "quit"),
    "drug": ("medicine", "medication"), "due": ("payable",), "economy": ("coach",), 
    "employee": ("worker", "staffer"), "enable": ("activate", "allow"), "enroll": ("register", "sign_up"),
    "enrollment": ("registration", "signup"), "entry": ("record", "log"), "equipment": ("gear", "kit"),
    "event": ("occasion", "function"), "exam": ("consulting", "treatment"), "exchange": ("swap", "trade"),
    "expires": ("lapses", "ends"), "extend": ("lengthen", "prolong"), "fee": ("surcharge", "levy"),
    "file": ("submit", "lodge"), "fill": ("dispensing", "supply", "dispensation"), "fine": ("penalty", "levy"), 
    "flight": ("sailing", "trip", "route"), "folio": ("tab", "ledger"), "freeze": ("suspend", "lock"),
    "freight": ("cargo", "haulage"), "gift": ("present",), "give": ("hand",), "go": ("switch", "move"),
    "gold": ("platinum",), "guest": ("visitor", "lodger"), "guests": ("attendees", "visitors"),
    "holder": ("bearer",), "hotel": ("inn", "lodge"), "hours": ("time_spent",), "house": ("viewing", "showcase"),
    "instructor": ("teacher", "lecturer"), "insurance": ("coverage", "cover"), "insured": ("covered",),
    "invoice": ("bill", "statement"), "issue": ("release", "grant"), "item": ("line", "entry", "article"),
    "itinerary": ("trip", "journey"), "kind": ("type", "sort"), "leave": ("absence", "holiday"),
    "level": ("tier", "grade"), "line": ("connection", "circuit"), "load": ("pack", "stow"),
    "loan": ("credit", "advance"), "location": ("branch", "site"), "log": ("record", "enter"),
    "lost": ("missing", "mislaid"), "make": ("submit", "place"), "manager": ("supervisor",), "mark": ("flag", "set"),
    "meal": ("menu_choice", "catering"), "member": ("subscriber", "participant"),
    "membership": ("loyalty", "plan_level"), "menu": ("carte",), "merchant": ("restaurant", "vendor"),
    "meter": ("gauge", "counter"), "method": ("instrument", "source"), "move": ("shift", "transfer"),
    "nights": ("overnights",), "note": ("message", "remark"), "notes": ("remarks", "comments"),
    "number": ("code",), "offer": ("bid", "proposal"), "order": ("purchase", "request"),
    "owner": ("keeper", "holder"), "package": ("bundle", "deal"), "paid": ("settled", "cleared"),
    "passenger": ("traveller", "rider"), "patient": ("visitor", "attendee"), "pause": ("suspend", "halt"),
    "pay": ("settle", "clear"), "payee": ("recipient", "beneficiary"), "payment": ("billing", "remittance"),
    "payout": ("settlement", "disbursement"), "payslip": ("paystub", "wage_slip"), "pending": ("waiting", "open"),
    "pet": ("animal", "companion"), "phone": ("telephone", "mobile"), "plan": ("package", "tariff", "scheme"),
    "points": ("miles", "credits"), "policy": ("contract", "cover", "plan"), "policyholder": ("insured", "subscriber"),
    "position": ("post", "role"), "post": ("record", "enter"), "postpone": ("delay", "defer"),
    "premise": ("property", "site"), "prescriber": ("doctor", "physician"), "prescription": ("script", "medication"),
    "price": ("cost", "charge"), "priority": ("urgency", "importance"), "product": ("article", "good"),
    "project": ("programme", "initiative"), "promo": ("discount", "voucher"), "property": ("home", "listing", "residence"),
    "pt": ("personal",), "purchase": ("order", "sale"), "quantity": ("count",), "quote": ("estimate", "offer"),
    "rate": ("tariff", "price"), "rating": ("score", "grade"), "reading": ("measurement", "record"),
    "reason": ("cause", "motive"), "reassign": ("reallocate", "transfer"), "receive": ("accept", "take_in"),
    "reconnect": ("restore", "reactivate"), "record": ("note", "register"), "redeem": ("cash", "use"),
    "referral": ("recommendation", "transfer"), "refill": ("renew", "top_up"),
    "refund": ("reimbursement", "repayment"), "regular": ("standard", "basic"), "reinstate": ("restore", "revive"),
    "reject": ("refuse", "decline"), "rename": ("retitle", "relabel"), "renew": ("extend", "prolong"),
    "rent": ("hire", "lease"), "rental": ("hire", "lease"), "reopen": ("restore", "revive"),
    "replace": ("swap", "renew"), "report": ("flag", "declare"), "reschedule": ("rebook", "move"),
    "reservation": ("booking", "ticket"), "reserve": ("hold", "book"), "resolve": ("settle", "close"),
    "restock": ("replenish", "refill"), "resume": ("restart", "continue"), "return": ("bring_back", "hand_back"),
    "reverse": ("undo", "refund"), "review": ("appraisal", "evaluation"), "reviewer": ("assessor", "evaluator"),
    "room": ("chamber", "suite"), "salary": ("pay", "wage"), "scan": ("read", "check"),
    "schedule": ("arrange", "plan"), "scheduled": ("planned",), "scholarship": ("bursary", "grant"),
    "seat": ("place", "position"), "section": ("class", "group"), "segment": ("leg", "hop"), "seller": ("vendor",),
    "send": ("forward",), "service": ("maintenance", "assistance"), "session": ("meeting", "sitting"),
    "set": ("fix", "adjust"), "shipment": ("delivery", "consignment", "parcel"), "shipper": ("sender", "consignor"),
    "showing": ("viewing", "visit"), "silver": ("bronze",), 
    "space": ("hall", "area"), "sprint": ("iteration", "cycle"), "start": ("begin",), "status": ("state", "stage"),
    "stay": ("visit", "residence"), "stock": ("inventory", "supply"), "store": ("pharmacy", "shop"),
    "student": ("learner", "pupil"), "submit": ("send", "hand_in"), "subtotal": ("net_amount",),
    "suspend": ("pause", "halt"), "tab": ("bill", "check"), "table": ("seating", "spot"), "tariff": ("rate", "plan"),
    "team": ("squad", "group"), "terminate": ("end", "close"), "ticket": ("admission", "voucher"), "tip": ("gratuity",),
    "toggle": ("switch", "flip"), "top": ("load",), "tour": ("trip", "excursion"),
    "tracking": ("transit", "trace"), "trainer": ("coach", "instructor"), "transaction": ("entry", "movement"),
    "transfer": ("move", "shift"), "truck": ("lorry", "van"), "trust": ("approve", "verify"),
    "tuition": ("fees", "schooling"), "txn": ("transaction", "entry"), "type": ("kind", "category"),
    "unfreeze": ("unlock", "reactivate"), "update": ("modify", "edit"), "upgrade": ("promote", "raise"),
    "use": ("spend", "redeem"), "user": ("client", "patron", "member"),
    "vaccination": ("immunisation", "inoculation"), "vehicle": ("car", "automobile"), "venue": ("hall", "site"),
    "vet": ("veterinarian", "doctor"), "void": ("annul", "scrap"), "voucher": ("coupon", "credit"),
    "waive": ("forgive", "cancel"), "wallet": ("purse", "balance"), "warehouse": ("depot", "hub"),
    "weight": ("mass",), "withdraw": ("retract", "pull"),
}
_LOCALES = ("en_GB", "en_AU", "en_CA", "en_IE", "en_NZ")
_TEXT_KEYS = {"description", "intent", "text", "message", "label", "agent_instructions", "words"}
_KEEP = {"target", "id", "my", "the", "a", "of", "to", "and", "or", "is", "in", "on", "for", "this", "that", "be",
         "can", "only", "with", "by", "from", "are", "not", "it", "its", "has", "at", "an", "as", "one"}


class Renamer:
    """A consistent, injective renaming of words (one per variant): a word takes a synonym whose words the spec
    does not say anywhere (``vocabulary``) and no other renamed word took, or keeps its own name. No renamed name
    can then read as another one, and every name is made of real words."""

    def __init__(self, rng: random.Random, vocabulary: set[str]) -> None:
        self.rng = rng
        self.words: dict[str, str] = {}
        self.taken = set(vocabulary)

    def word(self, w: str) -> str:
        if w in _KEEP or not w.isalpha():
            return w
        if w not in self.words:
            options = [s for s in SYNONYMS.get(w, ()) if not set(s.split("_")) & (self.taken | _RESERVED)]
            self.words[w] = self.rng.choice(options) if options else w
            self.taken |= set(self.words[w].split("_"))
        return self.words[w]

    def ident(self, name: str) -> str:
        new = "_".join(self.word(p) for p in name.split("_"))
        return new[:40].rstrip("_")

    def text(self, s: str) -> str:
        s = re.sub(r"{(\w+)}", lambda m: "{" + self.ident(m.group(1)) + "}", s)
        return re.sub(r"(?<![{\w])([a-z]+)(?![\w}])", lambda m: self.word(m.group(1)).replace("_", " "), s)


def vocabulary(node: Any) -> set[str]:
    """Every lowercase word of a spec dump: identifiers split at "_" and the words of its text."""
    if isinstance(node, dict):
        return set().union(*(vocabulary(k) | vocabulary(v) for k, v in node.items())) if node else set()
    if isinstance(node, list):
        return set().union(*(vocabulary(v) for v in node)) if node else set()
    return set(re.findall(r"[a-z]+", node)) if isinstance(node, str) else set()


_RESERVED = set(keyword.kwlist) | {"target"}  # what a spec identifier may not be
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
    raw = spec.model_dump(mode="json", exclude_defaults=True)
    r = Renamer(rng, vocabulary(raw))
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


# 2: a repeated fact label reads "second reservation number"; 3: a renamed variant names its customer entity;
# 4: renamed into real words; tasks and contract as `environments` 3; 5: list hints and enum words as
# `environments` 4
@stage(name="eval_random_envs", version="5", params=EvalRandomParams, inputs=("domain_graphs",),
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
