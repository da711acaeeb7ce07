"""The offline reference teacher: a deterministic policy for every harness role, over the world knowledge graph
and the real search index. A reference teacher, named so: it stands in where no model can be had, so the whole
harness and its records run end to end on 2 cores; any OpenAI-compatible engine (``openai:URL#MODEL``, a vLLM
server at scale) is the real teacher, through the same code path.

It speaks the Engine protocol: each request is one role's conversation (the role known from its system prompt,
the inputs from the tagged blocks of the user message), and the reply is the role's next move, a turn of tool
calls or the final output, decided from what its tools returned so far. Tokens are UTF-8 bytes with log
probability 0 (the policy is deterministic).

- Planning Writers plan from the knowledge-graph neighbourhood of the query's entities, from their perspective
  (the subject's own links, what links to it, the wider context), with source leads from their own searches.
- The Planning Judge merges candidates section by section (same required entities: one section).
- The Critic reads the query entities' documents and flags entities they name that no section covers.
- The Reviser adds each flagged entity, question and lead to the section the Critic names.
- Researchers search and read (each tool turn says why), then compose their section from the facts the passages
  state (relations with their direction, figures with their attribute: tasks/research/search/claims.py reads them), only
  those about their required entities: each entity's facts in one sentence, the entities a relation links to it
  listed and counted, and between required entities the analysis a reader wants: the difference of two figures
  or years, and the ordering of three or more, every figure cited to the document that states it. A collection
  whose text yields no such facts gets the passages' sentences that name the required entities, cited.
- The Global Editor finds overlapping material by fact (the same relation or figure stated in several sections:
  the owner is the section whose required entities it names most, ties to the lower section id) and conflicting
  figures (one entity's attribute given two values); Local Editors rewrite their own section: the material another
  section owns leaves it, and a sentence names what that section covers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envgen.rewards import normalize
from inference.engine import Completion, Request
from tasks.research.harness.knowledge import KnowledgeGraph, fmt_value, labels
from tasks.research.harness.prompts import PERSPECTIVES, parse_inputs, role_of
from tasks.research.harness.research_spec import extract_json
from tasks.research.harness.text import has_phrase, sentences, strip_citations, tokens
from tasks.research.search.claims import Gazetteer, Triple, extract

MAX_READS = 5
SENTENCES_PER_SECTION = 10
_PRONOUN_STARTS = ("It ", "Its ", "The company ", "The settlement ", "The city ")


@dataclass(frozen=True)
class Move:
    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()


def _observations(messages: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any], Any]]:
    """(tool name, arguments, decoded result) of every tool call answered so far."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    out = []
    for m in messages:
        for c in m.get("tool_calls") or []:
            args = c["function"].get("arguments")
            try:
                parsed = json.loads(args) if isinstance(args, str) else dict(args or {})
            except ValueError:
                parsed = {}
            calls[c.get("id", "")] = (c["function"]["name"], parsed)
        if m.get("role") == "tool" and m.get("tool_call_id") in calls:
            try:
                result = json.loads(m.get("content") or "null")
            except ValueError:
                result = None
            out.append((*calls[m["tool_call_id"]], result))
    return out


def _hits(obs: list[tuple[str, dict[str, Any], Any]]) -> list[dict[str, str]]:
    seen: dict[str, dict[str, str]] = {}
    for name, _, result in obs:
        if name == "search" and isinstance(result, dict):
            for hit in result.get("results", []):
                seen.setdefault(hit["doc_id"], hit)
    return list(seen.values())


def _opened(obs: list[tuple[str, dict[str, Any], Any]]) -> list[dict[str, Any]]:
    return [r for name, _, r in obs if name == "open" and isinstance(r, dict) and "sections" in r]


def _read(obs: list[tuple[str, dict[str, Any], Any]]) -> list[dict[str, Any]]:
    return [r for name, _, r in obs if name == "read" and isinstance(r, dict) and "text" in r]


def _reads_of(opened: list[dict[str, Any]]) -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(("read", {"doc_id": d["doc_id"], "section": s["name"]}) for d in opened for s in d["sections"])


def _json_reply(value: Any) -> str:
    return "```json\n" + json.dumps(value, ensure_ascii=False, indent=1) + "\n```"


class ReferenceTeacher:
    """The offline deterministic reference teacher (see the module docstring); picklable, so Dask workers get it
    with their job."""

    policy_version = 0

    def __init__(self, kg: KnowledgeGraph | None = None) -> None:
        self.kg = kg or KnowledgeGraph.empty()

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        return [[self._complete(r, self._move(r))] * r.sampling.n for r in requests]

    def close(self) -> None:
        pass

    # -- the Engine side ----------------------------------------------------------------------------------------
    def _complete(self, request: Request, move: Move) -> Completion:
        seed = json.dumps([len(request.messages), move.text[:64]], ensure_ascii=False)
        calls = tuple({"id": "call_" + hashlib.sha256(f"{seed}/{i}/{json.dumps(a, sort_keys=True)}".encode())
                       .hexdigest()[:24], "type": "function",
                       "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)}}
                      for i, (n, a) in enumerate(move.calls))
        ids = tuple((move.text + "".join(json.dumps(c["function"]) for c in calls)).encode())
        return Completion(move.text, ids, (0.0,) * len(ids), "tool_calls" if calls else "stop", self.policy_version,
                          tool_calls=calls)

    def _move(self, request: Request) -> Move:
        messages = list(request.messages)
        role = role_of(str(messages[0].get("content"))) if messages else None
        if role is None:
            return Move("The reference teacher plays the research harness's roles only.")
        inputs = parse_inputs(str(messages[1].get("content", ""))) if len(messages) > 1 else {}
        if "original_request" in inputs:  # a repair request: plan again from the original inputs
            inputs = parse_inputs(inputs["original_request"])
        turn = sum(m.get("role") == "assistant" for m in messages)
        obs = _observations(messages)
        handler = getattr(self, f"_{role.name}")
        return handler(inputs, turn, obs)

    # -- planning -----------------------------------------------------------------------------------------------
    def _focal(self, query: str) -> list[str]:
        return self.kg.find(query)[:2]

    def _explore(self, query: str, extra: Sequence[str], turn: int, obs: list[tuple[str, dict[str, Any], Any]],
                 wanted: Sequence[str], others: int = 0) -> Move | None:
        """Search, open the wanted documents (and the ``others`` best other hits), read them: the first three
        turns of an exploring role."""
        if turn == 0:
            named = f", and {_join(list(dict.fromkeys(extra))[:4])} it leads to" if extra else ""
            return Move(f"I search the collection for the query itself{named}, to see what the sources cover "
                        "before deciding the structure.",
                        (("search", {"query": query, "k": 8}),
                         *(("search", {"query": q, "k": 5}) for q in dict.fromkeys(extra))))
        if turn == 1:
            hits = _hits(obs)
            titles = {normalize(t) for t in wanted}
            docs = [h["doc_id"] for h in hits if normalize(h["title"]) in titles] or [h["doc_id"] for h in hits[:3]]
            docs += [h["doc_id"] for h in hits if h["doc_id"] not in docs][:others]
            if docs:
                return Move(f"I open {_join(docs[:MAX_READS])}: the articles of {_join(list(wanted)) or 'the best hits'}"
                            + (" and the other hits that name them" if others else "") + ".",
                            tuple(("open", {"doc_id": d}) for d in docs[:MAX_READS]))
            return None
        if turn == 2 and _opened(obs):
            opened = _opened(obs)
            return Move(f"I read {_join([d['doc_id'] for d in opened])} in full: their sections show which entities "
                        "and facts the report can rest on.", _reads_of(opened))
        return None

    def _planning_writer(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        query = inputs.get("query", "")
        perspective = PERSPECTIVES.index(inputs["perspective"]) if inputs.get("perspective") in PERSPECTIVES else 0
        focal = self._focal(query)
        neighbours = [n for f in focal for n in self._perspective_nodes(f, perspective)]
        move = self._explore(query, [self.kg.name(n) for n in [*focal, *neighbours]][:8], turn, obs,
                             [self.kg.name(f) for f in focal])
        if move is not None:
            return move
        hits = _hits(obs)
        if not hits:
            return Move("No document of the collection matches the query; there is nothing to plan from.")
        limit = _limit(inputs.get("limits", ""))
        leads = {normalize(h["title"]): h["doc_id"] for h in hits}
        if not focal:  # not about the world's entities: one section per document found
            groups = [("Sources", [_leaf(h["title"], f"What {h['title']} says about the query.",
                                         [f"What does {h['title']} say about: {query}?"], [h["title"]],
                                         [h["doc_id"]]) for h in hits[:limit]])]
        else:
            groups = [("Overview", [self._overview(f, leads) for f in focal])]
            for f in focal:
                groups += self._perspective_groups(f, perspective, leads)
        return Move(_json_reply(_spec(query, self._title(query, focal), groups, limit)))

    def _title(self, query: str, focal: Sequence[str]) -> str:
        return f"Research report: {' and '.join(self.kg.names(focal))}" if focal else f"Research report: {query}"

    def _perspective_nodes(self, node: str, perspective: int) -> list[str]:
        if perspective == 0:
            return [o for _, o in self.kg.out_edges(node)]
        if perspective == 1:
            return [s for _, s in self.kg.in_edges(node)][:6]
        return [o2 for _, o in self.kg.out_edges(node) for _, o2 in self.kg.out_edges(o)][:6]

    def _overview(self, node: str, leads: dict[str, str]) -> dict[str, Any]:
        name = self.kg.name(node)
        return _leaf(f"{name}: overview", f"What {name} is: its kind, attributes and key dates.",
                     [f"What is {name}, and what are its main attributes and dates?"], [name],
                     _leads(leads, [name]))

    def _perspective_groups(self, node: str, perspective: int,
                            leads: dict[str, str]) -> list[tuple[str, list[dict[str, Any]]]]:
        kg, name = self.kg, self.kg.name(node)
        if perspective == 0:
            leaves = []
            for rel, obj in kg.out_edges(node):
                label, o = labels(rel)[0], kg.name(obj)
                leaves.append(_leaf(f"{o}, {label} of {name}", f"The {label} of {name}: who or what {o} is and "
                                    f"how it relates to {name}.",
                                    [f"What is the {label} of {name}, and what is known about {o}?"], [o, name],
                                    _leads(leads, [o, name])))
            return [(f"Direct links of {name}", leaves)] if leaves else []
        if perspective == 1:
            by_rel: dict[str, list[str]] = {}
            for rel, subject in kg.in_edges(node):
                by_rel.setdefault(rel, []).append(kg.name(subject))
            leaves = [_leaf(f"{labels(rel)[1].capitalize()} of {name}",
                            f"The {labels(rel)[1]} of {name}, each with what the collection says of it.",
                            [f"Which are the {labels(rel)[1]} of {name}, and what is each?"], subjects[:4],
                            _leads(leads, subjects[:4] + [name])) for rel, subjects in sorted(by_rel.items())]
            return [(f"What links to {name}", leaves)] if leaves else []
        leaves = []
        for rel, obj in kg.out_edges(node):
            further = [kg.name(o2) for _, o2 in kg.out_edges(obj)][:3]
            if further:
                o = kg.name(obj)
                leaves.append(_leaf(f"The wider context of {o}", f"How {o}, the {labels(rel)[0]} of {name}, is "
                                    f"linked to {', '.join(further)}.",
                                    [f"How is {o} linked to {f}?" for f in further], [o, *further],
                                    _leads(leads, [o, *further])))
        return [(f"Wider context of {name}", leaves)] if leaves else []

    def _planning_judge(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        try:
            candidates = json.loads(inputs.get("candidate_specs", "[]"))
        except ValueError:
            candidates = []
        groups: dict[str, list[dict[str, Any]]] = {}
        leaf_by_key: dict[frozenset[str], dict[str, Any]] = {}
        query, title, boundaries = inputs.get("query", ""), "", []
        for spec in candidates if isinstance(candidates, list) else []:
            title = title or spec.get("title", "")
            boundaries += [b for b in spec.get("boundaries", []) if b not in boundaries]
            heads = {s["id"]: s["title"] for s in spec.get("sections", [])}
            parents = {s.get("parent") for s in spec.get("sections", [])}
            for s in spec.get("sections", []):
                if s["id"] in parents:
                    continue
                key = frozenset(normalize(e) for e in s.get("required_entities", [])) or frozenset([s["title"]])
                if key in leaf_by_key:
                    merged = leaf_by_key[key]
                    for f in ("research_questions", "source_leads"):
                        merged[f] += [v for v in s.get(f, []) if v not in merged[f]]
                    continue
                leaf = {k: s.get(k) for k in ("title", "scope", "research_questions", "required_entities",
                                              "source_leads")}
                leaf_by_key[key] = leaf
                groups.setdefault(heads.get(s.get("parent"), "Sections"), []).append(leaf)
        return Move(_json_reply(_spec(query, title or f"Research report: {query}", list(groups.items()), None,
                                      boundaries)))

    def _critic(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        query = inputs.get("query", "")
        spec = _loads(inputs.get("research_spec"))
        focal = self._focal(query)
        move = self._explore(query, self.kg.names(focal), turn, obs, self.kg.names(focal), others=MAX_READS - 1)
        if move is not None:
            return move
        covered = {normalize(e) for s in spec.get("sections", []) for e in s.get("required_entities", [])}
        near_plan = set(focal) | {n for c in covered for n in self.kg.find(c)[:1]}
        leaves = [s for s in spec.get("sections", []) if s["id"] not in {x.get("parent") for x in spec["sections"]}]
        issues: list[dict[str, Any]] = []
        for read in _read(obs):
            for node in self.kg.find(read["text"]):
                name = self.kg.name(node)
                if (normalize(name) in covered or node in focal or len(issues) >= 3 or not leaves
                        or not self.kg.neighbours(node) & near_plan):
                    continue  # covered already, or not linked to anything the plan treats
                covered.add(normalize(name))
                near = {normalize(n) for n in self.kg.names(self.kg.neighbours(node))} | {normalize(read["title"])}
                target = max(reversed(leaves), key=lambda s: len(near & {normalize(e) for e in
                                                                         s.get("required_entities", [])}))
                issues.append({"id": f"HP{len(issues) + 1}", "section": target["id"], "entity": name,
                               "question": f"How is {name} connected to {read['title']}?",
                               "source_lead": read["doc_id"],
                               "reason": f"{read['title']} ({read['doc_id']}) names {name}, which no section covers"})
        return Move(_json_reply({"issues": issues}))

    def _reviser(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        spec = _loads(inputs.get("research_spec"))
        issues = _loads(inputs.get("critic_issues"), [])
        by_id = {s["id"]: s for s in spec.get("sections", [])}
        for issue in issues if isinstance(issues, list) else []:
            section = by_id.get(str(issue.get("section")))
            if section is None:
                continue
            for field_name, key in (("required_entities", "entity"), ("research_questions", "question"),
                                    ("source_leads", "source_lead")):
                value = issue.get(key)
                if value and value not in section.setdefault(field_name, []):
                    section[field_name].append(value)
        return Move(_json_reply(spec))

    # -- research -----------------------------------------------------------------------------------------------
    def _researcher(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        assignment = _loads(inputs.get("assignment"))
        required = [str(e) for e in assignment.get("required_entities", [])]
        title = str(assignment.get("title", ""))
        if turn == 0:
            queries = [*required[:5], f"{title} {' '.join(required[:2])}"]
            return Move(f"Section '{title}' is about {_join(required[:5]) or 'its scope'}: I search for each of "
                        "them to find the documents that state their facts.",
                        tuple(("search", {"query": q, "k": 5}) for q in dict.fromkeys(queries) if q.strip()))
        if turn == 1:
            hits = _hits(obs)
            names = {normalize(e) for e in required}
            own = [h["doc_id"] for h in hits if normalize(h["title"]) in names]
            mentions = [h["doc_id"] for h in hits
                        if any(has_phrase(tokens(h["snippet"]), e) for e in required)]
            leads = [str(d) for d in assignment.get("source_leads", [])]
            docs = list(dict.fromkeys([*own, *leads, *mentions]))[:MAX_READS]
            if docs:
                why = [f"{d} ({'the article of a required entity' if d in own else 'a planned source' if d in leads else 'its snippet names a required entity'})"
                       for d in docs]
                return Move(f"I open {'; '.join(why)}.", tuple(("open", {"doc_id": d}) for d in docs))
        if turn == 2 and _opened(obs):
            opened = _opened(obs)
            return Move(f"I read every section of {', '.join(d['doc_id'] for d in opened)}: the facts I can cite "
                        "are in their text.", _reads_of(opened))
        return Move(self._write(required, _read(obs)))

    def _gazetteer(self) -> Gazetteer:
        if getattr(self, "_names", None) is None:
            self._names = Gazetteer.of(name for _, name in self.kg.graph.nodes(data="name"))
        return self._names

    def _write(self, required: list[str], reads: list[dict[str, Any]]) -> str:
        """The section composed from the facts the reads state about the required entities; their sentences,
        cited, when the text yields no such facts."""
        facts = _Facts.of(reads, self._gazetteer(), required)
        if facts.relations or facts.values:
            return facts.compose(required)
        picked: list[tuple[int, int, str]] = []
        seen: set[str] = set()
        for order, read in enumerate(reads):
            own = normalize(read["title"]) in {normalize(e) for e in required}
            for sent in sentences(read["text"]):
                claim = _resolve(sent, read["title"])
                toks = tokens(claim.replace("'s ", " "))
                mentioned = [i for i, e in enumerate(required) if has_phrase(toks, e)]
                if not mentioned and own:
                    claim = f"{read['title']}: {claim}"
                    mentioned = [required.index(next(e for e in required if normalize(e) == normalize(read["title"])))]
                if not mentioned or normalize(claim) in seen:
                    continue
                seen.add(normalize(claim))
                picked.append((min(mentioned), order, _cite(claim, read["doc_id"])))
        picked.sort(key=lambda p: (p[0], p[1]))
        lines = [p[2] for p in picked[:SENTENCES_PER_SECTION]]
        if not lines:
            return f"The collection holds no evidence on {', '.join(required) or 'this assignment'}."
        return "\n\n".join(" ".join(lines[i:i + 3]) for i in range(0, len(lines), 3))

    # -- editing ------------------------------------------------------------------------------------------------
    def _global_editor(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        spec = _loads(inputs.get("research_spec"))
        required = {s["id"]: s.get("required_entities", []) for s in spec.get("sections", [])}
        bodies = split_draft(inputs.get("draft", ""))
        where: dict[Any, list[tuple[str, str]]] = {}
        for sid, body in bodies.items():
            for sent in sentences(body):
                key = self._fact_key(strip_citations(sent))
                if key and sid not in [w for w, _ in where.get(key, [])]:
                    where.setdefault(key, []).append((sid, sent))
        ownership, directives = [], []
        for places in where.values():
            if len(places) < 2:
                continue
            toks = tokens(strip_citations(places[0][1]))
            # the section whose required entities the material names most; a tie goes to the lower section id
            owner = max(places, key=lambda p: (sum(has_phrase(toks, e) for e in required.get(p[0], [])),
                                               [-int(x) for x in p[0][1:].split(".")]))[0]
            others = [sid for sid, _ in places if sid != owner]
            ownership.append({"material": strip_citations(places[0][1]), "owner": owner, "others": others})
            directives += [{"section": sid, "action": "cross_reference", "material": strip_citations(sent),
                            "owner": owner, "instruction": f"Remove this material, which {owner} owns, and say "
                                                           f"that {owner} covers it."}
                           for sid, sent in places if sid != owner]
        conflicts, fixes = self._conflicts(bodies)
        return Move(_json_reply({"ownership": ownership, "conflicts": conflicts, "directives": directives + fixes}))

    def _fact_key(self, sentence: str) -> Any:
        """What a sentence states, as facts (its relations and figures), so two wordings of one fact match; the
        normalized words when it states none."""
        claim = extract(sentence, self._gazetteer())
        facts = frozenset([t.key() for t in claim.triples]
                          + [(normalize(claim.subject or ""), q.attribute, q.value) for q in claim.quantities
                             if q.attribute and not q.derived])
        return facts or normalize(sentence)

    def _conflicts(self, bodies: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """One entity's attribute given different values in two sections: recorded with both section ids, and the
        later section directed to check its figure against the earlier one's source."""
        seen: dict[tuple[str, str], tuple[str, str]] = {}
        conflicts, fixes = [], []
        for sid, body in bodies.items():
            for sent in sentences(body):
                plain = strip_citations(sent)
                claim = extract(plain, self._gazetteer())
                for q in claim.quantities:
                    if not q.attribute or q.derived or not claim.subject:
                        continue
                    key = (normalize(claim.subject), q.attribute)
                    if key in seen and seen[key][1] != q.value and seen[key][0] != sid:
                        first_sid, value = seen[key]
                        conflicts.append({"sections": [first_sid, sid], "description": f"{claim.subject}'s "
                                          f"{q.attribute}: {value} in {first_sid}, {q.value} in {sid}"})
                        fixes.append({"section": sid, "action": "resolve_conflict", "material": plain,
                                      "owner": first_sid, "instruction": f"Check the {q.attribute} of "
                                      f"{claim.subject} against the cited source and keep the figure {first_sid} "
                                      "states if it is right."})
                    seen.setdefault(key, (sid, q.value))
        return conflicts, fixes

    def _local_editor(self, inputs: dict[str, str], turn: int, obs: list) -> Move:
        """The section rewritten within itself: material another section owns leaves, and one sentence names what
        each owner covers instead; a section left empty keeps its first sentence (a brief mention)."""
        text = inputs.get("section_text", "")
        directives = _loads(inputs.get("directives"), [])
        moved: dict[str, list[str]] = {}
        for d in directives:
            if d.get("action") == "cross_reference" and d.get("owner") and d.get("material"):
                moved.setdefault(str(d["owner"]), []).append(str(d["material"]))
        drop = {normalize(m) for ms in moved.values() for m in ms}
        paragraphs = []
        for paragraph in text.split("\n\n"):
            kept = [s for s in sentences(paragraph) if normalize(strip_citations(s)) not in drop]
            if kept:
                paragraphs.append(" ".join(kept))
        if not paragraphs:
            paragraphs = sentences(text)[:1]
        pointers = [f"Section {owner} covers {self._describe(materials)}." for owner, materials in moved.items()]
        if pointers:
            paragraphs.append(" ".join(pointers))
        return Move("\n\n".join(paragraphs))

    def _describe(self, materials: list[str]) -> str:
        """What moved material is about: "the founder of X and X's employees"."""
        parts: list[str] = []
        for material in materials:
            claim = extract(material, self._gazetteer())
            parts += [f"the {labels(t.relation)[0]} of {t.subject}" for t in claim.triples]
            parts += [f"the {_NOUN.get(q.attribute, q.attribute)} of {claim.subject}" for q in claim.quantities
                      if q.attribute and claim.subject and not q.derived]
        parts = list(dict.fromkeys(parts))
        return _join(parts[:4]) + (" and more" if len(parts) > 4 else "") if parts else "that material"


# How a composed section states a relation (subject, object) and lists several subjects of one object.
_SAY = {"located_in": ("{s} lies in {o}", "{s} lie in {o}"), "born_in": ("{s} was born in {o}", "{s} were born in {o}"),
        "works_for": ("{s} works for {o}", "{s} work for {o}"), "married_to": ("{s} is married to {o}", ""),
        "founded_by": ("{s} was founded by {o}", "{s} were founded by {o}"),
        "headquartered_in": ("{s} is headquartered in {o}", "{s} are headquartered in {o}"),
        "created_by": ("{s} was created by {o}", "{s} were created by {o}"),
        "published_by": ("{s} was released by {o}", "{s} were released by {o}"),
        "organized_by": ("The {s} was organised by {o}", "{s} were organised by {o}"),
        "held_in": ("The {s} was held in {o}", "{s} were held in {o}")}
_VALUE = {"founded": "was founded in {v}", "born": "was born on {v}", "released": "was released on {v}",
          "held": "took place on {v}", "population": "has a population of {v}", "employees": "employs {v} people",
          "budget": "has an annual budget of ${v}", "attendance": "was attended by {v} people"}
_YEARS = ("founded", "born", "released", "held")
_EVENT = {"founded": "founding", "born": "birth", "released": "release", "held": "staging"}
_NOUN = {"founded": "founding year", "born": "birth year", "released": "release year", "held": "year",
         "population": "population", "employees": "employees", "budget": "annual budget", "attendance": "attendance"}


@dataclass
class _Facts:
    """The facts a Researcher's reads state about its required entities: relations and attribute values, each with
    the document that states it."""

    relations: dict[tuple[str, str, str], tuple[Triple, str]]
    values: dict[tuple[str, str], tuple[str, str]]  # (entity, attribute) -> (value, doc id)

    @classmethod
    def of(cls, reads: list[dict[str, Any]], gazetteer: Gazetteer, required: list[str]) -> _Facts:
        wanted = {normalize(e) for e in required}
        relations: dict[tuple[str, str, str], tuple[Triple, str]] = {}
        values: dict[tuple[str, str], tuple[str, str]] = {}
        for read in reads:
            for sent in sentences(read["text"]):
                claim = extract(sent, gazetteer, read["title"])
                if claim.negated:
                    continue
                for t in claim.triples:
                    if normalize(t.subject) in wanted or normalize(t.object) in wanted:
                        relations.setdefault(t.key(), (t, read["doc_id"]))
                # a figure belongs to the entity the passage is about when the sentence speaks of it ("Levine
                # and Sons released it on ...": the date is the work's), else to the sentence's subject
                subject = read["title"] if any(m.name == read["title"] for m in claim.mentions) else claim.subject
                if subject and normalize(subject) in wanted:
                    for q in claim.quantities:
                        if q.attribute and not q.derived:
                            values.setdefault((subject, q.attribute), (q.value, read["doc_id"]))
        return cls(relations, values)

    def compose(self, required: list[str]) -> str:
        """The first required entity is the section's subject; another one gets its own facts only when no
        relation ties it to the subject (a list of peers: the employees of X), else only those relations (the
        section on X's founder does not retell X)."""
        paragraphs = []
        subject = normalize(required[0]) if required else ""
        for n, entity in enumerate(required):
            ties = [(t, d) for t, d in self.relations.values()
                    if {normalize(t.subject), normalize(t.object)} == {subject, normalize(entity)}]
            if n and ties:
                lines = [_say(t) + f" [cite:{d}]." for t, d in ties if not self._said(t, required[0])]
            else:
                lines = self._about(entity)
            if lines:
                paragraphs.append(" ".join(lines))
        analysis = self._analysis(required)
        if analysis:
            paragraphs.append(" ".join(analysis))
        return "\n\n".join(paragraphs) or f"The collection holds no evidence on {', '.join(required)}."

    def _said(self, t: Triple, entity: str) -> bool:
        """Whether ``_about(entity)`` states ``t`` already."""
        return normalize(entity) in (normalize(t.subject), normalize(t.object))

    def _about(self, entity: str) -> list[str]:
        key = normalize(entity)
        lines = []
        values = [(a, v, d) for (e, a), (v, d) in self.values.items() if normalize(e) == key]
        parts = [_VALUE[a].format(v=_shown(a, v)) + f" [cite:{d}]" for a, v, d in values if a in _VALUE]
        if parts:
            lines.append(f"{entity} {_join(parts, ', ')}.")
        for t, d in self.relations.values():
            if normalize(t.subject) == key:
                lines.append(_say(t) + f" [cite:{d}].")
        by_relation: dict[str, list[tuple[str, str]]] = {}
        for t, d in self.relations.values():
            if normalize(t.object) == key and normalize(t.subject) != key:
                by_relation.setdefault(t.relation, []).append((t.subject, d))
        for relation, subjects in by_relation.items():
            single, plural = _SAY.get(relation, ("{s} " + relation.replace("_", " ") + " {o}", ""))
            cites = " ".join(f"[cite:{d}]" for d in dict.fromkeys(d for _, d in subjects))
            names = [s for s, _ in subjects]
            if len(names) > 1 and plural:
                lines.append(f"{plural.format(s=_join(names), o=entity)}: {len(names)} in all that the sources "
                             f"name {cites}.")
            else:
                lines += [single.format(s=n, o=entity) + f" [cite:{d}]." for n, d in subjects]
        return lines

    def _dated(self, entity: str) -> list[tuple[str, str, float, str]]:
        """(entity, attribute, year, doc id) of the entity's dated facts, founding and birth first."""
        return sorted(((e, a, float(v[:4]), d) for (e, a), (v, d) in self.values.items()
                       if normalize(e) == normalize(entity) and a in _YEARS), key=lambda r: _YEARS.index(r[1]))

    def _analysis(self, required: list[str]) -> list[str]:
        """Differences between two required entities' figures, the ordering of three or more."""
        out = []
        keys = {normalize(e): e for e in required}
        by_attribute: dict[str, list[tuple[str, float, str, str]]] = {}
        for (e, a), (v, d) in self.values.items():
            if normalize(e) in keys:
                number = float(v[:4]) if a in _YEARS else float(v)
                by_attribute.setdefault(a, []).append((e, number, v, d))
        # the subject's dates against each other required entity's: the gap in years (a founding and its
        # founder's birth, a work's release and its creator's)
        dates = {normalize(e): rows[0] for e in required if (rows := self._dated(e))}
        first = dates.get(normalize(required[0])) if required else None
        for e in required[1:]:
            other = dates.get(normalize(e))
            if first is not None and other is not None and first[0] != other[0]:
                (a, na, x, da), (b, nb, y, db) = sorted([first, other], key=lambda r: r[2])
                out.append(f"{_possessive(b)} {_EVENT[nb]} in {int(y)} [cite:{db}] came {int(y - x)} years after "
                           f"{_possessive(a)} {_EVENT[na]} in {int(x)} [cite:{da}].")
        for attribute, rows in sorted(by_attribute.items()):
            rows.sort(key=lambda r: r[1])
            noun = _NOUN.get(attribute, attribute)
            if len(rows) == 2 and attribute not in _YEARS:
                (a, x, va, da), (b, y, vb, db) = rows
                out.append(f"{b} has {_amount(attribute, vb)} [cite:{db}], {int(y - x):,} more than {a} "
                           f"with {_amount(attribute, va)} [cite:{da}].")
            elif len(rows) > 2:
                order = ", ".join(f"{e} ({int(n) if attribute in _YEARS else _shown(attribute, v)} [cite:{d}])"
                                  for e, n, v, d in rows)
                out.append(f"By {noun}, {'earliest' if attribute in _YEARS else 'smallest'} first: {order}.")
        return out


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _say(t: Triple) -> str:
    return _SAY.get(t.relation, ("{s} " + t.relation.replace("_", " ") + " {o}", ""))[0].format(s=t.subject,
                                                                                              o=t.object)


def _amount(attribute: str, value: str) -> str:
    """A figure with its attribute named, so the citation check binds each figure to it: "a population of 2,260",
    "1,466 employees"."""
    shown = _shown(attribute, value)
    noun = _NOUN[attribute]
    return f"{shown} employees" if attribute == "employees" else f"a{'n' * (noun[0] in 'aeiou')} {noun} of {shown}"


def _shown(attribute: str, value: str) -> str:
    """A value as the documents write it: "March 5, 1895", "79,116", a year as is."""
    if "-" in value:
        from datetime import date

        return fmt_value(date.fromisoformat(value))
    return value if attribute in _YEARS else fmt_value(int(float(value)))


def _join(items: Sequence[str], sep: str | None = None) -> str:
    """A list in prose; names holding commas ("Wells, Carpenter and Jacobs") are separated by semicolons."""
    items = list(items)
    if len(items) <= 2:
        return " and ".join(items)
    sep = sep or ("; " if any("," in i for i in items) else ", ")
    return f"{sep.join(items[:-1])}{sep.strip()} and {items[-1]}"


def split_draft(draft: str) -> dict[str, str]:
    """Section id -> body of an assembled draft (headings ``## S1 Title``; the text up to the next heading)."""
    bodies: dict[str, list[str]] = {}
    current = None
    for line in draft.splitlines():
        head = line.lstrip("#")
        if line.startswith("#") and head.startswith(" S") and head.split()[0][1:2].isdigit():
            current = head.split()[0]
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    return {sid: "\n".join(lines).strip() for sid, lines in bodies.items()}


def _resolve(sentence: str, title: str) -> str:
    """A sentence of an entity's own article with its subject spelled out ("It was founded ..." ->
    "Diazborough was founded ...", "Maria was born ..." -> "Maria S. Huff was born ...")."""
    for start in _PRONOUN_STARTS:
        if sentence.startswith(start):
            subject = f"{title}'s " if start == "Its " else f"{title} "
            return subject + sentence[len(start):]
    first = title.split()[0]
    if len(title.split()) > 1 and sentence.startswith(first + " ") and not sentence.startswith(title):
        return title + sentence[len(first):]
    if " it " in sentence and title not in sentence:  # "Berg-Arroyo released it on ..."
        return sentence.replace(" it ", f" {title} ", 1)
    return sentence


def _cite(sentence: str, doc_id: str) -> str:
    body, end = (sentence[:-1], sentence[-1]) if sentence[-1:] in ".!?" else (sentence, ".")
    return f"{body} [cite:{doc_id}]{end}"


def _limit(text: str) -> int:
    digits = [int(w) for w in text.split() if w.isdigit()]
    return digits[0] if digits else 8


def _loads(text: str | None, default: Any = None) -> Any:
    if not text:
        return {} if default is None else default
    try:
        return json.loads(text)
    except ValueError:
        try:
            return extract_json(text)
        except ValueError:
            return {} if default is None else default


def _leads(leads: dict[str, str], names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(leads[normalize(n)] for n in names if normalize(n) in leads))


def _leaf(title: str, scope: str, questions: list[str], required: list[str], leads: list[str]) -> dict[str, Any]:
    return {"title": title, "scope": scope, "research_questions": questions, "required_entities": required,
            "source_leads": leads}


def _spec(query: str, title: str, groups: list[tuple[str, list[dict[str, Any]]]], limit: int | None,
          boundaries: list[str] | None = None) -> dict[str, Any]:
    """A spec of top-level groups with their leaves, numbered S1, S1.1, ...; at most ``limit`` leaves."""
    sections: list[dict[str, Any]] = []
    budget = limit if limit is not None else 10**9
    for head, leaves in groups:
        leaves = [leaf for leaf in leaves][: max(budget, 0)]
        if not leaves:
            continue
        budget -= len(leaves)
        gid = f"S{sum(s['parent'] is None for s in sections) + 1}"
        sections.append({"id": gid, "parent": None, "order": int(gid[1:]), "title": head,
                         "scope": f"{head}.", "research_questions": [], "required_entities": [],
                         "source_leads": []})
        for i, leaf in enumerate(leaves, start=1):
            sections.append({"id": f"{gid}.{i}", "parent": gid, "order": i, **leaf})
    return {"query": query, "title": title, "sections": sections,
            "boundaries": boundaries if boundaries is not None else
            ["Use only the document collection; cite a document for every fact.",
             "Report what the documents state; do not speculate beyond them."]}
