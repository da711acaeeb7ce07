"""Environment construction: golden chains, grounding, BFS expansion, multi-chain growth and the fallback.

Follows "Verifiability-Preserving Environment Expansion", "Multi-Chain Environment Construction" and "Fallback
Mechanism" of LongCat-Flash-Thinking-2601 section 3.1.1:

1. sample a seed golden chain s1 (a path of read tools through the dependency graph ending in a write action);
2. instantiate the database along it (``ground_chain``: choose rows and argument values, patch the rows the
   preconditions and policies name, dry-run the write);
3. expand R(s) by BFS, adding a tool only when every required parameter type is supplied by already-instantiated
   tools and every table it touches is instantiated;
4. add chains sampled from the unused nodes D_n while p = f(c(E_n), g(D_n), |D_n|) > tau (f monotone: falls with
   the current complexity c and the solver attempts g, rises with |D_n|);
5. if the environment has fewer than ``min_tools`` tools, add moderate chains from all of G (the fallback).

Rows a chain patched are reserved, so a later chain never edits them (database consistency across chains); the
task generator re-verifies all chains together by replay anyway.
"""

from __future__ import annotations

import math
import random
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field
from sqlalchemy import Connection, select

from data_contracts.stage import Params
from envgen.canonical import canonical_state
from envgen.compiler import PAGE_LIMIT, CompiledDomain, Tool, sem_type
from envgen.customers import carriers, database_rows, owned_entities, row_owners, written_rows
from envgen.domain_spec import (
    ActionSpec,
    Condition,
    EntitySpec,
    FieldSpec,
    action_rows,
    faker_for,
    name_field,
)
from envgen.seeding import field_value, seeded_memory_engine, sqlite_bytes
from envgen.tools import ActionContext, Executor, ToolError, action_conditions, fmt_time, render_value, spoken

PATCH_ROUNDS = 3  # a patched row can break another condition; three rounds settle every shipped domain

CHAIN_KINDS = frozenset({"get", "lookup", "find", "list_by", "parent_of"})
ACTORS = ("customer", "staff", "system")


@dataclass
class Fact:
    """A value the user knows: stated in the task text or only in the profile (the agent must ask). Only what a
    person knows becomes a fact (an email, a code they were given, a name, a date, an amount), never an internal
    key: the agent finds those with the tools (``Grounder.reveal``)."""

    name: str
    label: str
    value: Any
    source: str  # "task" | "profile"


@dataclass
class GroundedChain:
    tools: list[str]
    actions: list[dict[str, Any]]  # golden calls {"name", "arguments"} in order
    facts: list[Fact]
    intent: str
    reserved: set[tuple[str, str]]  # (entity, key) rows this chain patched, acts on or reads


@dataclass
class ExpansionStats:
    decisions: list[dict[str, float]] = field(default_factory=list)
    fallback_used: bool = False
    solver_attempts: int = 0


class GroundingFailed(Exception):
    pass


def sample_chain(domain: CompiledDomain, rng: random.Random, allowed: set[str], max_reads: int,
                 actors: tuple[str, ...] = ("customer",)) -> list[str] | None:
    """A seed chain: reads walked backwards along graph edges from a write action in ``allowed`` that one of
    ``actors`` may request (a customer's task asks only for customer actions)."""
    writes = sorted(t for t in allowed if domain.tools[t].is_write
                    and domain.spec.action(domain.tools[t].action).actor in actors)
    if not writes:
        return None
    chain = [rng.choice(writes)]
    for _ in range(rng.randint(1, max_reads)):
        head = domain.tools[chain[0]]
        preds = sorted(
            u for u in domain.graph.predecessors(head.name)
            if u in allowed and u not in chain and domain.tools[u].kind in CHAIN_KINDS
            and (head.is_write or domain.tools[u].entity != head.entity)
        )
        if not preds:
            break
        chain.insert(0, rng.choice(preds))
    # A user knows ids, unique values (an email) and names, not an internal status: trim starts they could not give.
    while len(chain) > 1 and not user_knowable(domain, domain.tools[chain[0]]):
        chain.pop(0)
    return chain


def user_knowable(domain: CompiledDomain, tool: Tool) -> bool:
    """Whether a user can give every required argument of ``tool`` that is not a key: a unique or searchable
    string field a customer knows (keys are found with the tools)."""
    for p in tool.params:
        if p.required and p.field_type != "key":
            f = domain.spec.entity(tool.entity).field(p.name)
            if f is None or f.internal or not (f.unique or (f.type == "string" and f.searchable)):
                return False
    return True


def key_entity(tool: Tool, param: str) -> str | None:
    """The entity whose key argument ``param`` of ``tool`` holds (a key or a relation column); None for values."""
    p = next((p for p in tool.params if p.name == param), None)
    return p.sem if p is not None and p.sem is not None and "." not in p.sem else None


@dataclass
class Known:
    """What the task has given the agent so far: the acting customer (identified once), and (entity, key) of every
    row an earlier call singled out or linked to (a returned row's key and its relation columns)."""

    customer: str | None = None
    identified: bool = False
    keys: set[tuple[str, Any]] = field(default_factory=set)

    def copy(self) -> Known:
        return Known(self.customer, self.identified, set(self.keys))


@dataclass
class Reveal:
    """Read calls that return a row's key, starting from what the user can say, and the facts they state."""

    calls: list[dict[str, Any]]
    facts: list[Fact]
    known: Known


def spoken_intent(domain: CompiledDomain, conn: Connection, action: ActionSpec, args: dict[str, Any]) -> str:
    """The action's intent as the user says it for these arguments: a row parameter by the row's name (a flight
    number), an enum by its words ("wrong order"), other values as task records write them, "1 day" for "1 days"."""
    said = {k: spoken(v) for k, v in args.items()}
    for q in action.params:
        if q.ref is not None and f"{{{q.name}}}" in action.intent:
            row = Executor(domain).get(conn, q.ref, args[q.name])
            field = name_field(domain.spec.entity(q.ref))
            said[q.name] = render_value(row[field.name]) if row is not None and field is not None else said[q.name]
    return re.sub(r"(?<![\d.])1 ([a-z]+)s\b", r"1 \1", action.intent.format(**said))


class Grounder:
    """Instantiates chains on one environment database (a connection inside a transaction) for one acting customer:
    every write names the customer's own rows or shared ones, and every internal key a golden call takes is found
    with the tools (``allowed``: the tools the environment offers; None: any tool of the domain)."""

    def __init__(self, domain: CompiledDomain, conn: Connection, rng: random.Random,
                 allowed: set[str] | None = None) -> None:
        self.domain, self.conn, self.rng = domain, conn, rng
        conn.execution_options(compiled_cache=domain.sql_cache)
        self.ex = Executor(domain)
        self.ents = self.ex.ents
        self.reserved: set[tuple[str, str]] = set()
        self.hinted: set[str] = set()  # "entity.field" of every list hint given: another chain names its row otherwise
        self.now = domain.spec.now
        self.allowed = set(domain.tools) if allowed is None else set(allowed)
        self.known = Known()
        # Owners never change while grounding: a carrying relation is never patched (``patch``).
        found = row_owners(domain.spec, database_rows(domain, conn))
        self._owner = {(e, k): next(iter(o)) if len(o) == 1 else None for e, keyed in found.items() for k, o in keyed.items()}

    @property
    def customer(self) -> str | None:
        """The acting customer's key: set by the first chain grounded, or given (a task for that customer)."""
        return self.known.customer

    @customer.setter
    def customer(self, key: str | None) -> None:
        self.known.customer = key

    def snapshot(self) -> tuple[set[tuple[str, str]], Known]:
        return set(self.reserved), self.known.copy()

    def restore(self, state: tuple[set[tuple[str, str]], Known]) -> None:
        self.reserved, self.known = set(state[0]), state[1].copy()

    def owner(self, entity: str, key: Any) -> str | None:
        return self._owner.get((entity, key))

    def mine(self, entity: str, row: dict[str, Any]) -> bool:
        """Whether a write may name ``row``: no customer is set, the row is shared, or the customer owns it."""
        owner = self.owner(entity, row[self.ents[entity].key])
        return self.customer is None or owner is None or owner == self.customer

    # -- rows ------------------------------------------------------------------------------------------------
    def rows(self, entity: str, column: str | None = None, value: Any = None) -> list[dict[str, Any]]:
        t = self.domain.tables[entity]
        q = select(t).order_by(t.c[self.ents[entity].key])
        if column is not None:
            q = q.where(t.c[column] == value)
        return [dict(r._mapping) for r in self.conn.execute(q)]

    def _update(self, entity: str, key: str, column: str, value: Any) -> None:
        if (entity, key) in self.reserved:
            raise GroundingFailed(f"{entity} {key} is reserved by another chain")
        if any(r.field == column for r in carriers(self.domain.spec, entity)):
            raise GroundingFailed(f"{entity}.{column} carries ownership; patching it would re-own the row")
        e, t = self.ents[entity], self.domain.tables[entity]
        self.conn.execute(t.update().where(t.c[e.key] == key).values({column: value}))

    # -- values ----------------------------------------------------------------------------------------------
    def sample_value(self, ftype: str, values: tuple[str, ...], lo: float | None, hi: float | None,
                     faker: str | None = None) -> Any:
        f = FieldSpec(name="value", type=ftype, description="-", values=values, min=lo, max=hi,
                      faker=faker, pattern=None if faker or ftype != "string" else "??###")
        return field_value(f, self.domain.spec, seeded_faker(self.domain.spec.locale, self.rng), self.rng)

    def _satisfying(self, f: FieldSpec | None, op: str, target: Any, current: Any) -> Any:
        """A value for a field that makes ``field op target`` true, or raise GroundingFailed."""
        rng = self.rng
        if op in ("eq", "ge", "le"):
            return target
        if op == "in":
            return rng.choice(list(target))
        if f is None:  # a relation column: only equality is patchable
            raise GroundingFailed("cannot patch a relation for op " + op)
        if op in ("ne", "not_in"):
            bad = set(target) if op == "not_in" else {target}
            if f.type == "enum":
                options = [v for v in f.values if v not in bad]
            elif f.type == "bool":
                options = [v for v in (True, False) if v not in bad]
            else:
                options = [current] if current not in bad else []
            if not options:
                raise GroundingFailed(f"no value of {f.name} avoids {sorted(map(str, bad))}")
            return rng.choice(options)
        step = 1 if op == "gt" else -1
        if f.type in ("date", "datetime"):
            base = self.now if target is None else _parse_time(target)
            return fmt_time(base + timedelta(days=step * rng.randint(1, 20), minutes=step * 15 * rng.randint(0, 8)),
                            f.type)
        if f.type in ("int", "float", "money"):
            return target + step * (1 if f.type == "int" else 0.5)
        raise GroundingFailed(f"cannot order {f.type} field {f.name}")

    def patch(self, ctx: ActionContext, conds: list[Condition]) -> None:
        """Patch rows until every condition holds (bounded rounds)."""
        for _ in range(PATCH_ROUNDS):
            failing = [c for c in conds if not ctx.holds(c)]
            if not failing:
                return
            for c in failing:
                row = ctx.rows.get(c.row)
                if row is None:
                    raise GroundingFailed(f"row {c.row} missing")
                ent = ctx.ents[c.row]
                if c.field == ent.key:
                    raise GroundingFailed("keys cannot be patched")
                f = ent.field(c.field)
                target = ctx.value(c, ctx.field_kind(c.row, c.field))
                value = self._satisfying(f, c.op, target, row.get(c.field))
                if f is not None:
                    value = Executor._coerce(ent, c.field, value)
                    if f.type in ("int", "float", "money") and (
                        (f.min is not None and value < f.min) or (f.max is not None and value > f.max)
                    ):
                        raise GroundingFailed(f"{ent.name}.{f.name} cannot satisfy {c.op} {target}")
                self._update(ent.name, row[ent.key], c.field, value)
                row[c.field] = value
        if any(not ctx.holds(c) for c in conds):
            raise GroundingFailed("conditions still fail after patching")

    # -- chains ----------------------------------------------------------------------------------------------
    def ground_action(self, tool: Tool) -> dict[str, Any]:
        """Golden arguments for a write whose dry run succeeds; patches rows; raises GroundingFailed."""
        action = self.domain.spec.action(tool.action)
        target_e = self.ents[action.target]
        candidates = [r for r in self.rows(target_e.name) if (target_e.name, r[target_e.key]) not in self.reserved
                      and self.mine(target_e.name, r)]
        self.rng.shuffle(candidates)
        # Row parameters of the target's owner first; acting for nobody, any owner's next (an issue assigned to
        # another member).
        for target in candidates[:6]:
            for own in (True,) if self.customer is not None else (True, False):
                sp = self.conn.begin_nested()
                try:
                    args = self._try_action(tool, action, target, own)
                    sp.commit()
                    return args
                except (GroundingFailed, ToolError):
                    sp.rollback()
        raise GroundingFailed(f"no row of {target_e.name} can be grounded for {tool.name}")

    def _try_action(self, tool: Tool, action: ActionSpec, target: dict[str, Any], own: bool = True) -> dict[str, Any]:
        args, ctx, conds = self.draft_action(action, target, own)
        self.patch(ctx, conds)
        dry = self.conn.begin_nested()
        try:
            before = canonical_state(self.conn, self.domain, list(tool.writes))
            self.ex.act(self.conn, tool, args, self.now)
            # A golden write that changes nothing (a row set to the value it has) is indistinguishable from a
            # dropped write; another row is tried instead.
            if canonical_state(self.conn, self.domain, list(tool.writes)) == before:
                raise GroundingFailed(f"{tool.name} would change nothing here")
        finally:
            dry.rollback()
        for name, row in ctx.rows.items():
            if row is not None:
                ent = ctx.ents[name]
                self.reserved.add((ent.name, row[ent.key]))
        return args

    def draft_action(self, action: ActionSpec, target: dict[str, Any], own: bool = True
                     ) -> tuple[dict[str, Any], ActionContext, list[Condition]]:
        """Arguments for ``action`` on ``target`` (ref rows not reserved, of the target's owner where ``own``,
        values drawn within their bounds), the context the action would check them in, and its conditions
        (enforced ones and policies); patches nothing."""
        target_e = self.ents[action.target]
        args: dict[str, Any] = {target_e.key: target[target_e.key]}
        parents = {r.to: target[r.field] for r in target_e.relations}
        rows: dict[str, Any] = {"target": target}
        owner = self.customer or self.owner(target_e.name, target[target_e.key])
        owned = owned_entities(self.domain.spec)
        for q in action.params:
            if q.ref is not None:
                key = self.ents[q.ref].key
                options = [r for r in self.rows(q.ref) if (q.ref, r[key]) not in self.reserved
                           and r[key] != target[target_e.key] and self.mine(q.ref, r)]
                if own:  # the target owner's own rows (the guest's cards)
                    options = [r for r in options if q.ref not in owned or owner is None
                               or self.owner(q.ref, r[key]) == owner]
                # Prefer rows sharing a parent with the target (a room of the booking's hotel).
                shared = [r for r in options if any(r.get(rel.field) == parents.get(rel.to)
                                                    for rel in self.ents[q.ref].relations)]
                pick = self.rng.choice(shared or options) if (shared or options) else None
                if pick is None:
                    raise GroundingFailed(f"no {q.ref} row for {q.name}")
                args[q.name] = pick[key]
                rows[q.name] = pick
                parents.setdefault(q.ref, args[q.name])
                owner = owner or self.owner(q.ref, pick[key])
            else:
                args[q.name] = self.sample_value(q.type or "string", q.values, q.min, q.max, q.faker)
        for r in target_e.relations:
            if r.field not in rows and target[r.field] is not None:
                rows[r.field] = self.ex.get(self.conn, r.to, target[r.field])
        ctx = ActionContext(rows, action_rows(action, self.ents), args, self.now)
        enforced, soft = action_conditions(self.domain, action)
        return args, ctx, enforced + [c for _, c in soft]

    def ground_chain(self, chain: list[str], reveal: bool = True) -> GroundedChain:
        """Instantiate the database for ``chain``'s write and derive every golden argument.

        With ``reveal`` (a chain a user asks for) the chain acts for one customer, identified by its first call
        when no earlier chain did, and every internal key the write takes is returned by an earlier read that
        starts from what the user can say (``reveal``): the reads follow the user's words, not the sampled walk.
        Without it (a chain that only grows the environment's tools) the sampled reads are inverted backwards from
        the write for anyone's rows, and arguments may be facts of any kind."""
        if not reveal:
            return self._ground_walk(chain)
        earlier = set(self.reserved)
        write = self.domain.tools[chain[-1]]
        write_args = self.ground_action(write)
        call = {"name": write.name, "arguments": write_args}
        action = self.domain.spec.action(write.action)
        known = self.known.copy()
        self._adopt_customer(write, write_args, known)
        plan: list[dict[str, Any]] = []
        facts: list[Fact] = []
        if known.customer is not None and not known.identified:
            found = self.reveal(self.domain.spec.customer_entity.name, known.customer, known, lookup_only=True)
            plan, facts, known = found.calls, found.facts, found.known
            known.identified = True
        params = {q.name: q for q in action.params}
        for p in write.params:
            entity, value = key_entity(write, p.name), write_args.get(p.name)
            if not p.required or entity is None or value is None:
                continue
            q = params.get(p.name)
            by = None
            if q is not None and q.ref is not None and f"{{{p.name}}}" in action.intent:
                by = name_field(self.ents[q.ref]).name  # the intent names the row: it is found by that name
            found = self.reveal(entity, value, known, by=by)
            plan += found.calls
            facts += found.facts
            known = found.known
        plan.append(call)
        self.known = self._learn(call, known)
        facts += self._stated([call], [set()], action, lambda tool, name: key_entity(tool, name) is not None)
        return GroundedChain(list(dict.fromkeys(c["name"] for c in plan)), plan, facts,
                             spoken_intent(self.domain, self.conn, action, write_args), self.reserved - earlier)

    def _ground_walk(self, chain: list[str]) -> GroundedChain:
        """``chain`` grounded as sampled, for nobody in particular: the write on anyone's rows, each read inverted
        backwards from the call after it (the value it supplies), the arguments no read supplies stated."""
        earlier = set(self.reserved)
        tools = [self.domain.tools[n] for n in chain]
        write = tools[-1]
        acting, self.customer = self.customer, None
        try:
            write_args = self.ground_action(write)
        finally:
            self.customer = acting
        calls: list[dict[str, Any]] = [{"name": write.name, "arguments": write_args}]
        linked: list[set[str]] = [set()]  # per call, the params supplied by the previous tool's output
        hints: list[Fact] = []
        head, head_args = write, write_args
        for u in reversed(tools[:-1]):
            types = sorted(set(self.domain.graph.edges[u.name, head.name]["types"]) & head.requires)
            if not types:
                raise GroundingFailed(f"{u.name} does not supply {head.name}")
            link = self.rng.choice(types)
            param = next(p.name for p in head.params if p.required and p.sem == link)
            linked[0].add(param)
            u_args, hint = self._invert(u, link, head_args[param])
            if hint is not None:
                hints.append(hint)
            calls.insert(0, {"name": u.name, "arguments": u_args})
            linked.insert(0, set())
            head, head_args = u, u_args
        if len({h.label for h in hints}) < len(hints):
            raise GroundingFailed("two list hints would share a label; the user could not tell them apart")
        action = self.domain.spec.action(write.action)
        facts = list(reversed(hints)) + self._stated(calls, linked, action, lambda *_: False)
        return GroundedChain(chain, calls, facts, spoken_intent(self.domain, self.conn, action, write_args),
                             self.reserved - earlier)

    def _stated(self, calls: list[dict[str, Any]], linked: list[set[str]], action: ActionSpec, skip: Any
                ) -> list[Fact]:
        """Facts for the required arguments no earlier call supplies, except those ``skip(tool, param)`` names."""
        params = {q.name: q for q in action.params}
        facts = []
        for call, done in zip(calls, linked):
            tool = self.domain.tools[call["name"]]
            for p in tool.params:
                if not p.required or p.name in done or skip(tool, p.name):
                    continue
                q = params.get(p.name) if tool.is_write else None
                if q is not None and f"{{{p.name}}}" in action.intent:
                    source = "task"
                else:
                    source = q.source if q is not None and q.ref is None else "profile"
                facts.append(Fact(p.name, self._label(tool, p.name, q), call["arguments"][p.name], source))
        return facts

    def _adopt_customer(self, write: Tool, args: dict[str, Any], known: Known) -> None:
        """The chain acts for the customer owning the rows its write names; the first chain sets the customer."""
        owners = {o for e, k in written_rows(self.domain, write.name, args) if (o := self.owner(e, k)) is not None}
        if len(owners) > 1 or (known.customer is not None and owners - {known.customer}):
            raise GroundingFailed(f"{write.name} names rows of several customers")
        if known.customer is None and owners:
            known.customer = owners.pop()

    def _learn(self, call: dict[str, Any], known: Known, singled: Any = None) -> Known:
        """``known`` plus the row ``call`` singles out, its key and the keys it links to: the one row a read
        returns, or row ``singled`` of a list the user's hint picks (the other rows of a list are nobody's
        choice); a write returns its target row."""
        tool = self.domain.tools[call["name"]]
        if tool.is_write:
            action = self.domain.spec.action(tool.action)
            target = self.ex.get(self.conn, action.target, call["arguments"][self.ents[action.target].key])
            returned = [(action.target, target)] if target is not None else []
        else:
            result = self.ex.read(self.conn, tool, tool.args_model.model_validate(call["arguments"]).model_dump())
            key = self.ents[tool.entity].key
            rows = [r for r in (result.get("results", [result]) if isinstance(result, dict) else [])
                    if isinstance(r, dict) and key in r]
            rows = rows if len(rows) == 1 else [r for r in rows if r[key] == singled]
            returned = [(tool.entity, r) for r in rows]
        out = known.copy()
        for entity, row in returned:
            e = self.ents[entity]
            out.keys.add((entity, row[e.key]))
            out.keys |= {(r.to, row[r.field]) for r in e.relations if row.get(r.field) is not None}
        return out

    def reveal(self, entity: str, key: Any, known: Known, by: str | None = None, lookup_only: bool = False,
               depth: int = 2) -> Reveal:
        """Reads that return row ``key`` of ``entity`` starting from what a person knows, tried in random order: a
        lookup by a unique field they know (an email, a confirmation code), a search by a name they know, the list
        of a known or revealed parent's rows (the customer's cards), or the parent row of a known child. A list
        showing several rows is narrowed by a hint (a date, an amount, the last four digits). ``by``: the row must
        be found by that field (the name the request says); ``lookup_only``: by a unique field only (identifying
        the customer). Raises GroundingFailed when no way exists within ``depth`` parents."""
        e = self.ents[entity]
        row = self.ex.get(self.conn, entity, key)
        if row is None:
            raise GroundingFailed(f"no {entity} {key}")
        if (entity, key) in known.keys and by is None and not lookup_only:
            return Reveal([], [], known)
        carrying = carriers(self.domain.spec, entity)
        # (cost, kind, how): the cheapest ways first, equal costs in random order. A list through a relation that
        # carries no ownership (the reservations of a flight) shows other customers' rows: it comes after the
        # customer's own lists.
        plans = ([(1, "lookup", f) for f in e.fields if f.unique and not f.internal]
                 + [(2, "find", f) for f in e.fields if f.searchable and not f.internal and not f.unique
                    and (f.type == "string" or by == f.name)])
        if by is None and not lookup_only:
            plans += [(1 + 2 * ((r.to, row[r.field]) not in known.keys) + 2 * (r not in carrying), "list_by", r)
                      for r in e.relations if row.get(r.field) is not None and depth > 0]
            plans += [(2, "parent_of", t) for t in sorted(self.allowed) if self.domain.tools[t].kind == "parent_of"
                      and self.domain.tools[t].entity == entity]
        if by is not None:
            plans = [p for p in plans if p[2].name == by]
        if lookup_only:
            # a customer identifies themselves by email first
            plans = [(0 if f.name == "email" else 1, kind, f) for _, kind, f in plans if kind == "lookup"]
        self.rng.shuffle(plans)
        plans.sort(key=lambda p: p[0])
        for _, kind, how in plans:
            try:
                found = self._reveal_by(kind, how, e, row, known, by, depth)
            except GroundingFailed:
                continue
            if found is not None:
                self.reserved.add((entity, key))
                return found
        raise GroundingFailed(f"no way for the agent to find {entity} {key} from what the user knows")

    def _reveal_by(self, kind: str, how: Any, e: EntitySpec, row: dict[str, Any], known: Known, by: str | None,
                   depth: int) -> Reveal | None:
        key = row[e.key]
        if kind == "lookup":
            tool = f"lookup_{e.name}_by_{how.name}"
            if tool not in self.allowed or row.get(how.name) is None:
                return None
            call = {"name": tool, "arguments": {how.name: row[how.name]}}
            fact = Fact(how.name, how.label or how.name.replace("_", " "), row[how.name], "task" if by else "profile")
            return Reveal([call], [fact], self._learn(call, known))
        if kind == "find":
            tool = f"find_{e.plural_name}_by_{how.name}"
            if tool not in self.allowed or row.get(how.name) is None:
                return None
            shown = self.rows(e.name, how.name, row[how.name])[:PAGE_LIMIT]
            if not any(r[e.key] == key for r in shown):
                return None
            call = {"name": tool, "arguments": {how.name: row[how.name]}}
            facts = [Fact(how.name, how.label or how.name.replace("_", " "), row[how.name], "task" if by else "profile")]
            hint = self._hint(e, row, shown)
            return Reveal([call], facts + ([hint] if hint else []), self._learn(call, known, key))
        if kind == "list_by":
            tool = f"list_{e.plural_name}_by_{how.field}"
            if tool not in self.allowed:
                return None
            parent = self.reveal(how.to, row[how.field], known, depth=depth - 1)
            shown = self.rows(e.name, how.field, row[how.field])[:PAGE_LIMIT]
            if not any(r[e.key] == key for r in shown):
                return None
            call = {"name": tool, "arguments": {how.field: row[how.field]}}
            hint = self._hint(e, row, shown)
            return Reveal([*parent.calls, call], parent.facts + ([hint] if hint else []),
                          self._learn(call, parent.known, key))
        tool = self.domain.tools[how]  # parent_of: the row is the parent of a child the agent knows
        child = self.ents[tool.child]
        kids = sorted(k for ent, k in known.keys if ent == child.name
                      and (kid := self.ex.get(self.conn, child.name, k)) is not None and kid[tool.column] == key)
        if not kids:
            return None
        call = {"name": tool.name, "arguments": {child.key: kids[0]}}
        return Reveal([call], [], self._learn(call, known))

    def _label(self, tool: Tool, param: str, q) -> str:
        if q is not None and q.label:
            return q.label
        e = self.ents[tool.child or tool.entity]
        if param == e.key:
            return e.label or f"{e.name.replace('_', ' ')} id"
        f = e.field(param)
        if f is not None and f.label:
            return f.label
        rel = e.relation(param)
        if rel is not None and rel.label:
            return rel.label
        if rel is not None:
            target = self.ents[rel.to]
            return target.label or f"{target.name.replace('_', ' ')} id"
        return param.replace("_", " ")

    def _invert(self, u: Tool, link: str, value: Any) -> tuple[dict[str, Any], Fact | None]:
        """Arguments of read tool ``u`` whose result contains ``value`` in a column of semantic type ``link``."""
        e = self.ents[u.entity]
        cols = [c for c in e.column_names if sem_type(e, c) == link]
        # A lookup/find/list_by call passes the row's own column value: rows where an optional relation is empty
        # could only give a call with a null argument.
        own = u.column if u.kind in ("lookup", "find", "list_by") else None
        matches = [r for c in cols for r in self.rows(e.name, c, value) if own is None or r[own] is not None]
        if not matches:
            raise GroundingFailed(f"no {e.name} row carries {link}={value!r}")
        row = self.rng.choice(matches)
        # A later chain must not patch a row this chain reads, or the read no longer shows the golden argument.
        self.reserved.add((e.name, row[e.key]))
        if u.kind == "get":
            return {e.key: row[e.key]}, None
        if u.kind == "lookup":
            return {u.column: row[u.column]}, None
        if u.kind in ("find", "list_by"):
            shown = self.rows(e.name, u.column, row[u.column])[:PAGE_LIMIT]
            if not any(r[e.key] == row[e.key] for r in shown):
                raise GroundingFailed("the needed row is beyond the first page")
            distinct = {r[c] for r in shown for c in cols}
            return {u.column: row[u.column]}, (self._hint(e, row, shown) if len(distinct) > 1 else None)
        if u.kind == "parent_of":
            child = self.ents[u.child]
            kids = self.rows(child.name, u.column, row[e.key])
            if not kids:
                raise GroundingFailed(f"no {child.name} points at {e.name} {row[e.key]}")
            kid = self.rng.choice(kids)
            self.reserved.add((child.name, kid[child.key]))
            return {child.key: kid[child.key]}, None
        raise GroundingFailed(f"{u.kind} tools cannot start a chain")

    def _hint(self, e: EntitySpec, row: dict[str, Any], shown: list[dict[str, Any]]) -> Fact | None:
        """When a list holds several rows, the task names the wanted one by a field a customer knows that is
        unique among them, so the chain stays uniquely solvable (otherwise the golden row would be a guess)."""
        if len(shown) == 1:
            return None
        fields = [f for f in e.fields if not f.internal and row.get(f.name) is not None and f.type in _HINT_TIERS]
        self.rng.shuffle(fields)
        # What a person tells their records apart by: a date or the record's own code first, an amount next, a
        # count ("the one whose days added after booking is 27") last.
        named = name_field(e)
        fields.sort(key=lambda f: (f"{e.name}.{f.name}" in self.hinted,
                                   0 if named is not None and f.name == named.name else _HINT_TIERS[f.type]))
        for f in fields:
            if sum(r[f.name] == row[f.name] for r in shown) == 1:
                self.hinted.add(f"{e.name}.{f.name}")
                label = f"{f.label or f.name.replace('_', ' ')} of the {e.name.replace('_', ' ')}"
                return Fact(f"{e.name}.{f.name}", label, row[f.name], "task")
        raise GroundingFailed(f"no field tells the wanted {e.name} apart")


_HINT_TIERS = {"date": 0, "datetime": 0, "money": 1, "string": 2, "float": 3, "int": 3}


def seeded_faker(locale: str, rng: random.Random):
    """A Faker of ``locale`` seeded from ``rng`` (one draw)."""
    fake = faker_for(locale)
    fake.seed_instance(rng.getrandbits(32))
    return fake


def _parse_time(v: str) -> datetime:
    return datetime.fromisoformat(v) if "T" in v else datetime.fromisoformat(v + "T12:00:00")


# -- expansion -------------------------------------------------------------------------------------------------
def tables_of(domain: CompiledDomain, tools: set[str]) -> set[str]:
    return {t for n in tools for t in (*domain.tools[n].reads, *domain.tools[n].writes)}


def bfs_expand(domain: CompiledDomain, env: set[str], seeds: list[str]) -> set[str]:
    """R(s): BFS from the chain; a tool joins only when all its required parameter types are supplied by tools
    already in the environment and every table it touches is instantiated (no cascade of new database state)."""
    env = set(env) | set(seeds)
    tables = tables_of(domain, env)
    supplied = {s for n in env for s in domain.tools[n].outputs}

    def admissible(name: str) -> bool:
        t = domain.tools[name]
        return name not in env and t.requires <= supplied and set(t.reads) | set(t.writes) <= tables

    queue = deque(sorted(seeds))
    while queue:
        u = queue.popleft()
        for v in sorted(domain.graph.successors(u)):
            if admissible(v):
                env.add(v)
                supplied |= domain.tools[v].outputs
                queue.append(v)
    # Tools without required parameters have no incoming edge; their dependencies are trivially satisfied.
    env |= {n for n, t in domain.tools.items() if not t.requires and admissible(n)}
    return env


def complexity(domain: CompiledDomain, env: set[str]) -> float:
    """c(E): structural complexity in [0, 1], the mean of node share and induced edge density."""
    sub = domain.graph.subgraph(env)
    n = len(env)
    density = sub.number_of_edges() / (n * (n - 1)) if n > 1 else 0.0
    return 0.5 * (n / len(domain.tools)) + 0.5 * min(1.0, density / max(domain.density, 1e-9) / 2)


def growth_probability(c: float, g: int, max_attempts: int, unused: int, total: int) -> float:
    """p = f(c, g, |D|): logistic, decreasing in c and g, increasing in |D| (monotone in each argument)."""
    z = 2.0 - 4.0 * c - 3.0 * (g / max_attempts) + 2.0 * (unused / total)
    return 1.0 / (1.0 + math.exp(-z))


# -- one environment -------------------------------------------------------------------------------------------
class ConstructionFailed(Exception):
    pass


@dataclass
class BuiltEnvironment:
    tools: list[str]
    chains: list[GroundedChain]
    fallback_chains: list[GroundedChain]
    stats: ExpansionStats
    db: bytes
    customer: str | None = None  # the key of the customer the chains act for


MIN_TOOLS = 20  # the report's fallback floor: at least 20 tools per environment
MIN_DOMAIN_TOOLS = 60  # the report's domains compile to 60+ tools each


class ConstructionSettings(Params):
    """How one environment is built (LongCat-Flash-Thinking-2601 3.1.1); the environment stages take these as
    params, so every one can be set from a profile."""

    max_reads: int = Field(3, ge=0, le=8, description="Most read tools before the write in a sampled chain.")
    max_chains: int = Field(3, ge=1, le=8, description="Most seed chains per environment (multi-chain growth).")
    solver_attempts: int = Field(8, ge=1, le=64, description="Budget of the solver whose attempt count is g(D).")
    tau: float = Field(0.3, ge=0.0, lt=1.0, description="A chain is added only while p = f(c, g, |D|) > tau.")
    min_tools: int = Field(MIN_TOOLS, ge=1, description="Fallback floor on tools per environment (report: 20).")
    seed_chain_attempts: int = Field(20, ge=1, description="Chains tried for the first grounded chain before the "
                                                           "environment is given up.")
    fallback_attempts: int = Field(30, ge=1, description="Chains tried by the fallback to reach min_tools.")


def _try_ground(g: Grounder, chain: list[str] | None, reveal: bool = True) -> GroundedChain | None:
    """The chain grounded, or None (every patch rolled back, the grounder as it was)."""
    if chain is None:
        return None
    sp = g.conn.begin_nested()
    state = g.snapshot()
    try:
        grounded = g.ground_chain(chain, reveal)
        sp.commit()
        return grounded
    except (GroundingFailed, ToolError):
        sp.rollback()
        g.restore(state)
        return None


def build_environment(domain: CompiledDomain, seed: int, settings: ConstructionSettings) -> BuiltEnvironment:
    """Seed chain, grounding, BFS expansion, multi-chain growth and fallback on a freshly seeded database."""
    rng = random.Random(seed)
    engine = seeded_memory_engine(domain, seed)
    everything = set(domain.tools)
    stats = ExpansionStats()
    chains: list[GroundedChain] = []
    fallbacks: list[GroundedChain] = []
    with engine.begin() as conn:
        g = Grounder(domain, conn, rng)
        for _ in range(settings.seed_chain_attempts):
            first = _try_ground(g, sample_chain(domain, rng, everything, settings.max_reads))
            if first is not None:
                break
        else:
            raise ConstructionFailed(f"{domain.name}: no seed chain could be grounded in "
                                     f"{settings.seed_chain_attempts} attempts")
        chains.append(first)
        env = bfs_expand(domain, set(), first.tools)
        while len(chains) < settings.max_chains:
            unused = everything - env
            outer = conn.begin_nested()
            state = g.snapshot()
            found, attempts = None, 0
            while found is None and attempts < settings.solver_attempts:
                attempts += 1
                found = _try_ground(g, sample_chain(domain, rng, unused, settings.max_reads))
            stats.solver_attempts += attempts
            c = complexity(domain, env)
            p = growth_probability(c, attempts if found else settings.solver_attempts + 1,
                                   settings.solver_attempts, len(unused), len(everything))
            add = found is not None and p > settings.tau and rng.random() < p
            stats.decisions.append({"c": round(c, 4), "g": attempts, "unused": len(unused), "p": round(p, 4),
                                    "added": add})
            if not add:
                outer.rollback()
                g.restore(state)
                break
            outer.commit()
            chains.append(found)
            env = bfs_expand(domain, env, found.tools)
        for _ in range(settings.fallback_attempts):
            if len(env) >= settings.min_tools:
                break
            # "a moderate-size tool chain": at least one read before the write.
            # Any actor's write: the chain only grows the tool set (staff tools the agent must leave alone).
            chain = sample_chain(domain, rng, everything, max(2, settings.max_reads), ACTORS)
            extra = _try_ground(g, chain, reveal=False) if chain is not None and len(chain) >= 2 else None
            if extra is not None:
                fallbacks.append(extra)
                stats.fallback_used = True
                env = bfs_expand(domain, env, extra.tools)
    if len(env) < settings.min_tools:
        raise ConstructionFailed(f"{domain.name}: {len(env)} tools after the fallback, below {settings.min_tools}")
    return BuiltEnvironment(sorted(env), chains, fallbacks, stats, sqlite_bytes(engine), g.customer)


def executability(domain: CompiledDomain, seed: int) -> tuple[float, list[str]]:
    """Execute every compiled tool against a seeded database; returns (rate, names of tools that failed).

    Reads get arguments taken from an existing row (and must return it); writes are grounded first (rows patched
    so the preconditions hold), then run. Each tool runs in a savepoint rolled back afterwards.
    """
    engine = seeded_memory_engine(domain, seed)
    failed: list[str] = []
    with engine.begin() as conn:
        g = Grounder(domain, conn, random.Random(seed))
        for name in sorted(domain.tools):
            tool = domain.tools[name]
            # Every tool runs on the seeded state (its changes are rolled back), so it starts with nothing reserved:
            # a shared set made tools that sort later fail on small tables, the rate depending on tool names.
            g.reserved = set()
            sp = conn.begin_nested()
            try:
                if tool.is_write:
                    args = g.ground_action(tool)
                    tool.args_model.model_validate(args)
                    g.ex.act(conn, tool, args, g.now)
                else:
                    source = domain.spec.entity(tool.child or tool.entity)
                    needed = [tool.params[0].name] if tool.kind == "search" else [
                        p.name for p in tool.params if p.required]
                    # Optional relations are empty in some rows; a read is exercised with values a row really has.
                    filled = [*needed, *([tool.column] if tool.column else [])]
                    rows = [r for r in g.rows(source.name) if all(r[n] is not None for n in filled)]
                    row = g.rng.choice(rows)
                    args = {n: row[n] for n in needed}
                    result = g.ex.read(conn, tool, tool.args_model.model_validate(args).model_dump())
                    if "results" in result and not result["results"]:
                        raise GroundingFailed("no rows returned for values taken from a row")
            except (GroundingFailed, ToolError, IndexError, ValueError):
                failed.append(name)
            finally:
                sp.rollback()
    return 1.0 - len(failed) / len(domain.tools), failed
