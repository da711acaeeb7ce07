"""Random Complex Tasks variants: every identifier and enum value renamed consistently into words a person would
use, still a valid spec."""

from __future__ import annotations

import random
import re

import pytest
import yaml

from envgen.domain_spec import domain_paths, load_domain, parse_domain_spec
from tasks.environments.eval_random_envs import SYNONYMS, renamed_variant, vocabulary

DOMAINS = sorted(domain_paths())


@pytest.mark.parametrize("name", DOMAINS)
def test_renamed_variant_is_a_valid_spec_with_new_names(name: str) -> None:
    spec = load_domain(name)
    variant = renamed_variant(spec, random.Random(7), "r7")
    reparsed = parse_domain_spec(yaml.safe_dump(variant.model_dump(mode="json")))  # every cross-reference check again
    assert reparsed.spec_hash == variant.spec_hash
    assert not {e.id_prefix for e in spec.entities} & {e.id_prefix for e in variant.entities}
    assert [len(e.fields) for e in spec.entities] == [len(e.fields) for e in variant.entities]
    # the customer (the entity a task's user is) is the renamed counterpart of the original's
    customer = [e.name for e in spec.entities].index(spec.customer_entity.name) if spec.customer_entity else None
    assert (variant.customer_entity is None if customer is None else
            variant.customer_entity.name == variant.entities[customer].name)


@pytest.mark.parametrize("name", DOMAINS)
def test_renamed_names_and_labels_are_words_a_person_uses(name: str) -> None:
    """Every word of a renamed identifier, label and intent is a word of the original spec or a synonym a person
    uses ("due var date alt of the invoice alt" came from suffixes made up for words without a synonym)."""
    spec = load_domain(name)
    variant = renamed_variant(spec, random.Random(3), "r3")
    words = vocabulary(spec.model_dump(mode="json")) | {p for opts in SYNONYMS.values() for s in opts
                                                        for p in s.split("_")}
    dump = variant.model_dump(mode="json", exclude={"entities": {"__all__": {"fields": {"__all__": {"pattern",
                                                                                                        "faker"}}}}})
    said = {w for w in vocabulary(dump) if len(w) > 1}
    assert said <= words, sorted(said - words)[:10]
    for a in variant.actions:
        assert not re.search(r"\b(alt|var|nova|neo|sub|pro)\b", a.intent), a.intent


def test_most_names_change_and_none_collide() -> None:
    """A word without a synonym the spec leaves free keeps its name, so a few names stay; most change."""
    changed = total = 0
    for name in DOMAINS:
        spec = load_domain(name)
        variant = renamed_variant(spec, random.Random(7), "r7")
        pairs = list(zip([*spec.entities, *spec.actions], [*variant.entities, *variant.actions]))
        changed += sum(a.name != b.name for a, b in pairs)
        total += len(pairs)
        assert len({e.name for e in variant.entities}) == len(variant.entities)
    assert changed / total >= 0.9, (changed, total)


def test_variants_are_deterministic_and_differ_per_run() -> None:
    spec = load_domain("airline")
    assert renamed_variant(spec, random.Random(1), "r1") == renamed_variant(spec, random.Random(1), "r1")
    assert renamed_variant(spec, random.Random(1), "r1").spec_hash != renamed_variant(spec, random.Random(2), "r2").spec_hash
