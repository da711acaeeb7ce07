"""Step compression of long horizons (LongCat-Flash-Thinking-2601 3.1.2: long-horizon trajectories "are preserved
through step compression"): the results of earlier tool calls are replaced by a summary holding only the fields a
later turn uses, so the trajectory fits its window and still re-verifies (``records.verify_execution`` accepts a
summary whose values the tool really returned)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envgen.midtrain.records import SUMMARY_TAG, tool_failed


def _later_text(messages: Sequence[dict[str, Any]], start: int) -> str:
    parts = []
    for m in messages[start:]:
        if m["role"] == "assistant":
            parts.append(str(m.get("content") or ""))
            parts += [str(c["function"].get("arguments")) for c in m.get("tool_calls") or []]
    return "\n".join(parts)


def _kept(obj: Any, later: str) -> Any:
    """The fields of a result whose value a later turn uses (nested lists and objects pruned alike)."""
    if isinstance(obj, dict):
        kept = {k: v for k, v in ((k, _kept(v, later)) for k, v in obj.items()) if v is not None}
        return kept or None
    if isinstance(obj, list):
        kept = [v for v in (_kept(v, later) for v in obj) if v is not None]
        return kept or None
    if obj is None or isinstance(obj, bool):
        return None
    return obj if (obj if isinstance(obj, str) else json.dumps(obj)) in later else None


def compress_steps(messages: Sequence[dict[str, Any]], keep_last: int) -> tuple[list[dict[str, Any]], int]:
    """The conversation with every successful tool result but the last ``keep_last`` summarized; returns it and
    how many results were summarized."""
    out = [dict(m) for m in messages]
    tools = [i for i, m in enumerate(out) if m["role"] == "tool" and not tool_failed(m)]
    done = 0
    for i in tools[:max(0, len(tools) - keep_last)]:
        kept = _kept(json.loads(out[i]["content"]), _later_text(out, i + 1))
        out[i]["content"] = SUMMARY_TAG + json.dumps(kept or {})
        done += 1
    return out, done
