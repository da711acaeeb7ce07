"""One encyclopedia-style document per entity of the world, written from its attributes and relations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from tasks.longctx.world.graph import (
    EMPTY,
    EVENT_KINDS,
    INDUSTRIES,
    OCCUPATIONS,
    WORK_CREATION,
    WORK_KINDS,
    World,
)


def fmt_date(d: date) -> str:
    return f"{d:%B} {d.day}, {d.year}"


def fmt_number(n: int) -> str:
    return f"{n:,}"


def render_document(world: World, i: int) -> str:
    """An encyclopedia-like article stating every fact of entity ``i`` (several templates per fact), plus the
    facts in which it is the object ("Notable people born in ...", "Its employees include ...")."""
    w, rec, t = world, world.records[i], world.types[i]
    rng = w.rng("doc", i)
    name = rec["name"]
    ref = {r: w.name(int(arr[i])) for r, arr in w.rel.items() if arr[i] >= 0}

    def pick(*options: str) -> str:
        return rng.choice(options)

    def inverse(relation: str, template: str, limit: int = 3, prefix: str = "") -> list[str]:
        subjects = w.inverse[relation].get(i, EMPTY)[:limit]
        return [template.format(_join([prefix + w.name(int(e)) for e in subjects]))] if len(subjects) else []

    if t == "country":
        pop = fmt_number(rec["population"])
        paragraphs = [[pick(f"{name} is a sovereign state with a population of {pop}.",
                            f"{name} is a country of {pop} inhabitants.")],
                      inverse("located_in", "Its cities include {}.", 4)]
    elif t == "city":
        country, founded, pop = ref["located_in"], rec["founded"], fmt_number(rec["population"])
        paragraphs = [
            [pick(f"{name} is a city in {country}.", f"{name} is a municipality located in {country}."),
             pick(f"It was founded in {founded}.", f"The settlement dates from {founded}, the year it was founded."),
             pick(f"As of the last census the city had a population of {pop}.", f"{name} is home to {pop} people.")],
            inverse("born_in", f"Notable people born in {name} include {{}}.")
            + inverse("headquartered_in", "Organisations headquartered in the city include {}.")
            + inverse("held_in", f"{name} has hosted {{}}.", prefix="the "),
        ]
    elif t == "person":
        job, born, city = OCCUPATIONS[rec["category"]], fmt_date(rec["born"]), ref["born_in"]
        career = [pick(f"{name} works for {ref['works_for']}.", f"{name} is employed by {ref['works_for']}.")]
        if "married_to" in ref:
            spouse = ref["married_to"]
            career.append(pick(f"{name} is married to {spouse}.", f"{name}'s spouse is {spouse}."))
        paragraphs = [
            [pick(f"{name} (born {born}) is {article(job)}.", f"{name} is {article(job)} who was born on {born}."),
             pick(f"{name.split()[0]} was born in {city}.", f"A native of {city}, {name} grew up there.")],
            career,
            inverse("founded_by", f"{name} founded {{}}.") + inverse("created_by", f"Works by {name} include {{}}."),
        ]
    elif t == "organization":
        industry, founder, founded = INDUSTRIES[rec["category"]], ref["founded_by"], rec["founded"]
        staff = fmt_number(rec["employees"])
        paragraphs = [
            [pick(f"{name} is {article(industry)} company founded in {founded} by {founder}.",
                  f"{name} is {article(industry)} company. It was founded by {founder} in {founded}."),
             pick(f"The company is headquartered in {ref['headquartered_in']}.",
                  f"Its headquarters are in {ref['headquartered_in']}.")],
            [pick(f"{name} employs {staff} people.", f"The company has {staff} employees."),
             f"Its annual budget is ${fmt_number(rec['budget'])}."]
            + inverse("works_for", "Its employees include {}."),
            inverse("published_by", f"{name} has released {{}}.") + inverse("organized_by", "It organised {}.", prefix="the "),
        ]
    elif t == "work":
        kind, creator, released = WORK_KINDS[rec["category"]], ref["created_by"], fmt_date(rec["released"])
        verb = WORK_CREATION[kind][0]
        paragraphs = [[pick(f"{name} is {article(kind)} {verb} {creator}.",
                            f"{name} is {article(kind)}; it was {verb} {creator}."),
                       pick(f"It was released on {released} by {ref['published_by']}.",
                            f"{ref['published_by']} released it on {released}.")]]
    else:  # event
        kind, city, held = EVENT_KINDS[rec["category"]], ref["held_in"], fmt_date(rec["held"])
        crowd = fmt_number(rec["attendance"])
        paragraphs = [[pick(f"The {name} was {article(kind)} held in {city} on {held}.",
                            f"The {name} took place in {city} on {held}; it was {article(kind)}."),
                       pick(f"It was organised by {ref['organized_by']}.", f"{ref['organized_by']} organised the event."),
                       pick(f"It was attended by {crowd} people.", f"Attendance reached {crowd}.")]]
    return "\n\n".join(" ".join(p) for p in paragraphs if p)


def _join(names: Sequence[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    sep = "; " if any("," in n for n in names) else ", "  # company names hold commas ("Wells, Carpenter and Jacobs")
    return f"{sep.join(names[:-1])}{sep.strip()} and {names[-1]}"

def article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"
