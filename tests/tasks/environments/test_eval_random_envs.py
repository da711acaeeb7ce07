"""Random Complex Tasks variants: every identifier and enum value renamed consistently, still a valid spec."""

from __future__ import annotations

import random

import pytest
import yaml

from envgen.spec import domain_paths, load_domain, parse_spec
from tasks.environments.eval_random_envs import renamed_variant


@pytest.mark.parametrize("name", sorted(domain_paths()))
def test_renamed_variant_is_a_valid_spec_with_new_names(name: str) -> None:
    spec = load_domain(name)
    variant = renamed_variant(spec, random.Random(7), "r7")
    reparsed = parse_spec(yaml.safe_dump(variant.model_dump(mode="json")))  # every cross-reference check again
    assert reparsed.spec_hash == variant.spec_hash
    assert not {e.name for e in spec.entities} & {e.name for e in variant.entities}
    assert not {a.name for a in spec.actions} & {a.name for a in variant.actions}
    assert not {e.id_prefix for e in spec.entities} & {e.id_prefix for e in variant.entities}
    assert [len(e.fields) for e in spec.entities] == [len(e.fields) for e in variant.entities]
    # the customer (the entity a task's user is) is the renamed counterpart of the original's
    customer = [e.name for e in spec.entities].index(spec.customer_entity.name) if spec.customer_entity else None
    assert (variant.customer_entity is None if customer is None else
            variant.customer_entity.name == variant.entities[customer].name)


def test_variants_are_deterministic_and_differ_per_run() -> None:
    spec = load_domain("airline")
    assert renamed_variant(spec, random.Random(1), "r1") == renamed_variant(spec, random.Random(1), "r1")
    assert renamed_variant(spec, random.Random(1), "r1").spec_hash != renamed_variant(spec, random.Random(2), "r2").spec_hash
