"""Shared fixtures of the deep-research tests: a small world, its search index, its knowledge graph, the
reference teacher, and engine wrappers (test doubles) that record, fail or rewrite chosen role calls."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import polars as pl

from inference.engine import Completion, Request
from tasks.research.harness.knowledge import KnowledgeGraph
from tasks.research.harness.prompts import parse_inputs, role_of
from tasks.research.harness.reference import ReferenceTeacher
from tasks.research.search import SearchIndex, load_corpus

WORLD = {"n_entities": 200, "n_questions": 0, "seed": 3}


@lru_cache(maxsize=1)
def small_world() -> dict[str, pl.DataFrame]:
    from tasks.longctx.world import world

    return world.run({}, world.parse_params(WORLD), "p0")


@lru_cache(maxsize=1)
def index_dir() -> str:
    root = Path(tempfile.mkdtemp(prefix="gymforge-research-"))
    atexit.register(shutil.rmtree, root, True)
    directory = root / "index"
    SearchIndex.build(load_corpus(small_world()["documents"]), directory)
    return str(directory)


def kg() -> KnowledgeGraph:
    w = small_world()
    return KnowledgeGraph.from_frames(w["entities"], w["relations"])


def teacher() -> ReferenceTeacher:
    return ReferenceTeacher(kg())


def organisation(i: int = 0) -> str:
    entities = small_world()["entities"]
    return entities.filter(pl.col("type") == "organization")["name"][i]


def query(i: int = 0) -> str:
    return f"Write a report on {organisation(i)}: its founder, its people and what it produced."


def role(request: Request) -> str:
    found = role_of(str(request.messages[0].get("content")))
    return found.name if found else "?"


def branch(request: Request) -> str | None:
    """The section id of a researcher's or local editor's request."""
    inputs = parse_inputs(str(request.messages[1].get("content")))
    if "section_id" in inputs:
        return inputs["section_id"]
    if "assignment" in inputs:
        import json

        return json.loads(inputs["assignment"])["id"]
    return None


Rewrite = Callable[[Request, Completion], Completion | None]


@dataclass
class WrappedTeacher:
    """A test double around the reference teacher: records every request, raises ``fail(request)`` when it returns
    an exception, and lets ``rewrite`` replace a completion (None keeps it)."""

    inner: ReferenceTeacher
    fail: Callable[[Request], Exception | None] = lambda request: None
    rewrite: Rewrite = lambda request, completion: None
    requests: list[Request] = field(default_factory=list)
    policy_version: int = 0

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        for r in requests:
            self.requests.append(r)
            error = self.fail(r)
            if error is not None:
                raise error
        out = self.inner.generate(requests)
        return [[self.rewrite(r, c) or c for c in cs] for r, cs in zip(requests, out, strict=True)]

    def close(self) -> None:
        pass


def text_completion(text: str) -> Completion:
    ids = tuple(text.encode())
    return Completion(text, ids, (0.0,) * len(ids), "stop", 0)
