"""Test doubles for the RL tests: prompt tasks with known answers and an engine that follows published policy
versions, answers each prompt right with a known probability and can be slowed down per call. Never a default a
user gets."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from data_contracts.stage import REJECTED, Params, stage
from inference.engine import Completion, Request
from inference.testing import BernoulliTestEngine, last_user_content
from tasks.longctx.records import FILTERED_SEED, FILTERED_SEED_REJECTED, RL_MIX
from training.async_rl.scheduling import RLTask


def prompt_task(index: int, source: str = "qa", reward_fn: str = "two_way") -> RLTask:
    question = f"Question {index}: which city?"
    payload = {"prompt": json.dumps([{"role": "user", "content": question}]), "answer": f"city{index}",
               "aliases": [], "reward_fn": reward_fn}
    return RLTask(f"q{index}", "prompt", source, payload)


def prompt_tasks(n: int, source: str = "qa") -> list[RLTask]:
    return [prompt_task(i, source) for i in range(n)]


@dataclass
class VersionedTestEngine:
    """Answers ``Question i`` right with probability ``p[i]`` (seeded by the request), takes ``latency(rng)``
    seconds per engine call (a long tail when asked), follows
    ``load_weights`` versions (ignoring the weights), and hangs on call number ``hang_on_call`` when set."""

    p: Sequence[float]
    latency_median_s: float = 0.0
    latency_sigma: float = 0.0  # lognormal sigma; 0: a constant latency
    hang_on_call: int | None = None  # this call waits ``hang_s`` or until ``release`` is set (a straggler)
    hang_s: float = 0.0
    release: threading.Event = field(default_factory=threading.Event)
    seed: int = 0
    policy_version: int = 0
    calls: int = 0
    versions_seen: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        items = {f"Question {i}: which city?": (p, f"city{i}") for i, p in enumerate(self.p)}
        self._answers = BernoulliTestEngine(items, exact=False, key=last_user_content)

    def load_weights(self, path: str, policy_version: int) -> None:
        self.policy_version = policy_version

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        self.calls += 1
        if self.calls == self.hang_on_call:
            self.release.wait(self.hang_s)
        if self.latency_median_s:
            time.sleep(self.latency_median_s * self._rng.lognormvariate(0.0, self.latency_sigma))
        self.versions_seen.append(self.policy_version)
        out = self._answers.generate(requests)
        return [[_with_version(c, self.policy_version) for c in cs] for cs in out]

    def close(self) -> None:
        pass


def _with_version(completion: Completion, version: int) -> Completion:
    return replace(completion, policy_version=version)


class NoParams(Params):
    pass


@stage(name="test_double_prompts", version="1", params=NoParams, outputs={"mix": RL_MIX.contract(min_rows=1)})
def double_prompts(inputs, params: NoParams, partition: str) -> dict[str, pl.DataFrame]:
    """Test double: twelve short prompts with their answers and reward, as a published prompt artifact."""
    return {"mix": RL_MIX.frame([
        {"id": f"p{i}", "category": "qa", "curriculum_stage": "stage1", "answer": f"{i}", "aliases": [],
         "prompt": json.dumps([{"role": "user", "content": f"What is {i} + 0? Put it in \\boxed{{}}."}]),
         "reward_fn": "two_way", "source_id": f"p{i}", "tokens": None, "pass_count": None, "pass_k": None}
        for i in range(12)])}


class QASeedParams(Params):
    max_prompt_tokens: int = 16


def _seed(i: int) -> dict:
    return {"id": f"q{i}", "source": "world", "question": f"Who founded firm {i}?", "answer": f"Founder {i}",
            "aliases": [], "hops": 2, "type": "bridge", "split": "train", "pass_count": i, "pass_k": 4,
            "docs": json.dumps([{"title": f"Firm {i}", "text": "x" * 400, "is_supporting": True}])}


@stage(name="test_qa_seeds", version="1", params=QASeedParams,
       outputs={"seeds": FILTERED_SEED.contract(min_rows=1), REJECTED: FILTERED_SEED_REJECTED.contract()})
def qa_seed_rows(inputs, params: QASeedParams, partition: str) -> dict[str, pl.DataFrame]:
    """Test double: a difficulty filter's output (its prompt budget in ``max_prompt_tokens``): three kept QA seeds
    with long documents and pass counts 0-2 of 4, and one set aside as too easy."""
    return {"seeds": FILTERED_SEED.frame([_seed(i) for i in range(3)]),
            REJECTED: FILTERED_SEED_REJECTED.frame([{**_seed(4), "reason": "too_easy"}])}


def manager_that_dies(weights_dir: str, engine: str, pids: Any) -> None:
    """Test helper run as a process: a manager that starts one controller process, reports its pid and waits to be
    killed."""
    from training.async_rl.config import RLConfig
    from training.async_rl.controllers import ControllerSpec, ProcessLauncher

    launcher = ProcessLauncher()
    inbox, outbox = launcher.queue(), launcher.queue()  # held: the controller unpickles them after start returns
    handle = launcher.start(0, ControllerSpec(engine, weights_dir, RLConfig()), inbox, outbox)
    pids.put(handle.pid)
    time.sleep(600)
