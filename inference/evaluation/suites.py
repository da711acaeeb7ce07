"""Suites: each a declared evaluation over artifacts: which data stage holds its items, the held-out variants of that
stage to evaluate on (a partition and params overrides each), how its items are read, which strategies apply and
what the results are broken down by.

| suite | items | held-out how | reported as |
| --- | --- | --- | --- |
| keychain | KeyChain and regular multi-hop QA prompts (LoongRL 3.1) | eval-split seeds, one partition per length | accuracy vs context length |
| needles | RULER multi-key / multi-value needles | a partition per length | accuracy vs context length |
| qa | multi-hop QA seeds (world, local HotpotQA / MuSiQue / 2Wiki files) | the eval split | per source, hops |
| math | hard and four-choice math | a partition of their own | per difficulty |
| noise | Random Complex Tasks and their noisy twins at levels 1-4 | unseen domains | robustness gap per level and transform |
| random_tasks | Random Complex Tasks (LongCat-Flash-Thinking-2601 5.1) | held-out and renamed domains | Avg@4 over 3 runs |
| context | the longest Random Complex Tasks under each context strategy | as above | per strategy (summary thresholds, discard-all, hybrid) |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from data_contracts.stage import Artifact, Params, StageError
from inference.evaluation.items import (
    EvalItem,
    TaskLike,
    env_items,
    math_items,
    output_rows,
    prompt_items,
    qa_items,
)
from inference.evaluation.strategies import StrategyName

ItemReader = Callable[[Mapping[str, Artifact], Sequence[TaskLike]], list[EvalItem]]


class SuiteSettings(Params):
    """How the evaluate flow builds and runs one suite (a section of the profile's ``evaluate.suites``)."""

    lengths: tuple[int, ...] = Field((), description="prompt lengths of the held-out variants (keychain, needles); "
                                                     "empty: the suite's defaults")
    data: dict[str, Any] = Field(default_factory=dict, description="overrides of the suite's data stage params, on "
                                                                   "top of the profile's and the suite's own")
    evaluate: dict[str, Any] = Field(default_factory=dict, description="overrides of the evaluate params for this "
                                                                       "suite (strategies, ks, samples, max_items...)")


@dataclass(frozen=True)
class Variant:
    """One held-out artifact of a suite's data stage: where it lives (``partition``) and how it differs from the
    profile's (``overrides``)."""

    partition: str
    overrides: Mapping[str, Any]
    label: str


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    stages: tuple[str, ...]
    """Data stages read: the first is the one varied; the rest are read as the profile makes them."""
    read: ItemReader
    breakdowns: tuple[str, ...]
    strategies: tuple[StrategyName, ...]
    uses_tasks: bool
    """Whether the stage hands it ``load_tasks`` of its inputs."""
    held_out: Mapping[str, Any]
    """Overrides of the data stage that make its items held out."""
    lengths: tuple[int, ...] = ()
    length_param: str | None = None
    partition: str = "default"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Evaluate params this suite needs whatever the profile says (Random Complex Tasks: 4 samples)."""

    def variants(self, settings: SuiteSettings | None = None) -> list[Variant]:
        settings = settings or SuiteSettings()
        base = {**self.held_out, **settings.data}
        lengths = settings.lengths or self.lengths
        if self.length_param is None or not lengths:
            return [Variant(self.partition, base, self.partition)]
        return [Variant(f"eval-{n}", {**base, self.length_param: n}, f"{n} tokens") for n in lengths]


def _prompts(inputs: Mapping[str, Artifact], tasks: Sequence[TaskLike]) -> list[EvalItem]:
    rows = {}
    for artifact in inputs.values():
        if artifact.manifest.get("kind") != "model":
            rows |= output_rows({name: artifact.read(name) for name in artifact.outputs})
    return prompt_items(tasks, rows)


def _qa(inputs: Mapping[str, Artifact], tasks: Sequence[TaskLike]) -> list[EvalItem]:
    return qa_items(inputs["qa_seeds"].read("seeds"))


def _math(inputs: Mapping[str, Artifact], tasks: Sequence[TaskLike]) -> list[EvalItem]:
    return math_items(inputs["math_seeds"].read("problems"))


def _envs(inputs: Mapping[str, Artifact], tasks: Sequence[TaskLike]) -> list[EvalItem]:
    return env_items(tasks)


def _twins(inputs: Mapping[str, Artifact], tasks: Sequence[TaskLike]) -> list[EvalItem]:
    """Clean tasks that have noisy twins, each followed by its twins: the pairs the robustness gap is taken on."""
    items = env_items(tasks)
    twins: dict[str, list[EvalItem]] = {}
    for item in items:
        if item.attributes["clean_task_id"]:
            twins.setdefault(item.attributes["clean_task_id"], []).append(item)
    return [x for item in items if item.id in twins for x in (item, *twins[item.id])]


def _long_horizon(inputs: Mapping[str, Artifact], tasks: Sequence[TaskLike]) -> list[EvalItem]:
    """The tasks with the longest golden chains first: context management matters where episodes are long."""
    return sorted(env_items(tasks), key=lambda item: (-item.attributes["golden_calls"], item.id))


SUITES: dict[str, Suite] = {suite.name: suite for suite in (
    Suite("keychain", "held-out KeyChain and regular multi-hop QA prompts at several context lengths (LoongRL)",
          ("keychain",), _prompts, ("length", "source", "difficulty"),
          ("single", "self_consistency", "best_of_k", "heavy_thinking"), True, {"split": "eval"},
          lengths=(4096, 8192, 16384), length_param="target_tokens"),
    Suite("needles", "RULER multi-key and multi-value needles at several context lengths",
          ("needles",), _prompts, ("length", "source"), ("single", "self_consistency", "best_of_k"), True,
          {"seed": 1}, lengths=(4096, 8192, 16384), length_param="target_tokens"),
    Suite("qa", "held-out multi-hop QA (the eval split of the world or local HotpotQA/MuSiQue/2Wiki files)",
          ("qa_seeds",), _qa, ("domain", "difficulty"),
          ("single", "self_consistency", "best_of_k", "heavy_thinking"), False, {}),
    Suite("math", "hard open-ended and four-choice math, a partition never trained on",
          ("math_seeds",), _math, ("difficulty",), ("single", "self_consistency", "best_of_k", "heavy_thinking"),
          False, {}, partition="eval"),
    Suite("noise", "Random Complex Tasks clean vs their noisy twins at levels 1-4 (the -Noise benchmarks' "
          "robustness gap)", ("noisy_eval", "eval_random_envs"), _twins, ("noise_level", "noise_type", "domain"),
          (), True, {"levels": [1, 2, 3, 4]}, defaults={"samples": 4, "ks": [1, 2, 4]}),
    Suite("random_tasks", "Random Complex Tasks on unseen domains: Avg@4 over 3 runs",
          ("eval_random_envs",), _envs, ("run", "domain", "difficulty"), (), True, {},
          defaults={"samples": 4, "ks": [1, 2, 4]}),
    Suite("context", "context-management ablation (summary at thresholds, discard-all, hybrid) on the longest "
          "Random Complex Tasks", ("eval_random_envs",), _long_horizon, ("difficulty",), ("context",), True, {},
          defaults={"samples": 4, "ks": [1, 2, 4]}),
)}


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise StageError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}") from None


def check_suites(names: Sequence[str]) -> list[Suite]:
    """The suites named, in order, once each; an unknown one is a StageError listing the known ones."""
    if not names:
        raise StageError(f"name at least one suite: {', '.join(SUITES)}")
    return [get_suite(name) for name in dict.fromkeys(names)]
