"""Canonical state and diffs: insertion order, generated ids and creation timestamps never matter; any real change
does."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from envgen.canonical import NEW_ID, TIMESTAMP, canonical_state, diff_states
from envgen.compiler import compiled
from envgen.seeding import generate_rows, load_rows, memory_engine

DOMAIN = compiled("retail")
ROWS = generate_rows(DOMAIN.spec, 21)
TABLES = sorted(DOMAIN.tables)


def state_of(rows: dict) -> dict:
    engine = memory_engine()
    load_rows(DOMAIN, engine, rows)
    with engine.connect() as conn:
        return canonical_state(conn, DOMAIN, TABLES)


BASE = state_of(ROWS)


@settings(max_examples=10, deadline=None)
@given(st.randoms(use_true_random=False))
def test_insertion_order_does_not_matter(rnd: random.Random) -> None:
    shuffled = {name: rnd.sample(rows, len(rows)) for name, rows in ROWS.items()}
    assert state_of(shuffled) == BASE
    assert diff_states(BASE, state_of(shuffled), DOMAIN) == {}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, len(ROWS["order"]) - 1), st.sampled_from(["pending", "processed", "shipped", "delivered"]),
       st.text(min_size=1, max_size=6, alphabet="ABCDEFGHJK0123456789"))
def test_changes_show_and_generated_ids_are_masked(i: int, status: str, suffix: str) -> None:
    after = {name: {k: dict(v) for k, v in rows.items()} for name, rows in BASE.items()}
    order = ROWS["order"][i]
    after["order"][order["order_id"]]["status"] = status
    item = dict(ROWS["order_item"][0], item_id=f"ITNEW{suffix}", order_id=order["order_id"])
    ret = {"return_id": f"RTNEW{suffix}", "item_id": item["item_id"], "reason": "late", "status": "requested",
           "refund_amount": 1.0, "opened_at": "2026-06-02T09:30:00"}
    after["order_item"][item["item_id"]] = item
    after["return_request"][ret["return_id"]] = ret
    diff = diff_states(BASE, after, DOMAIN)
    if status != order["status"]:
        assert diff["order"]["changed"] == {order["order_id"]: {"status": status}}
    created = diff["return_request"]["created"][0]
    assert created["return_id"] == NEW_ID and created["item_id"] == NEW_ID and created["opened_at"] == TIMESTAMP
    # Another generated id for the same content gives the same diff.
    again = {name: {k: dict(v) for k, v in rows.items()} for name, rows in after.items()}
    again["return_request"] = {k: v for k, v in again["return_request"].items() if k != ret["return_id"]}
    again["return_request"]["RTOTHER1"] = dict(ret, return_id="RTOTHER1")
    assert diff_states(BASE, again, DOMAIN) == diff
