"""A minimal valid domain spec, the starting point of the spec tests' broken variants."""

from __future__ import annotations

MINIMAL = {
    "name": "mini",
    "description": "A tiny shop.",
    "now": "2026-01-01T00:00:00",
    "entities": [
        {"name": "owner", "description": "d", "key": "owner_id", "id_prefix": "OW",
         "fields": [{"name": "email", "type": "string", "faker": "email", "unique": True, "description": "d"}]},
        {"name": "box", "description": "d", "key": "box_id", "id_prefix": "BX",
         "relations": [{"field": "owner_id", "to": "owner", "description": "d"}],
         "fields": [{"name": "state", "type": "enum", "values": ["open", "shut"], "description": "d"}]},
    ],
    "actions": [{"name": "shut_box", "description": "d", "target": "box", "intent": "shut my box",
                 "actor": "customer", "words": ["shut"],
                 "preconditions": [{"field": "state", "op": "eq", "value": "open", "message": "already shut"}],
                 "effects": [{"kind": "set", "field": "state", "to": {"value": "shut"}}]}],
}
