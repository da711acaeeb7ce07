"""An experiment, declared: arms (what each trains on and how), seeds, training budgets, the held-out data, the
metrics and the statistical test. Strict pydantic models (extra keys forbidden, a description per field), so a
declaration with a typo fails at import, and every knob is data a reader can check against the report it replays.

Stage overrides are the profiles' format (stage -> params overrides) applied on top of the chosen profile, so an
arm's data are ordinary artifacts of the pipeline's own stages, keyed by their params like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from data_contracts.stage import Params, StageError
from flows.experiments.stats import Test

Overrides = dict[str, dict[str, Any]]
Metric = Literal["mean_reward", "pass_at_k", "noisy_score", "clean_score", "robustness_gap"]
Trainer = Literal["rl", "sft"]


class ColdStart(Params):
    """One phase of the base's cold start: SFT of the model so far on trajectory stages."""

    sft_on: list[str] = Field(min_length=1, description="trajectory stages to train on")
    data: Overrides = Field(default_factory=dict, description="stage overrides of this phase's data, on top of the "
                                                              "experiment's")
    sft: dict[str, Any] = Field(default_factory=dict, description="overrides of this phase's sft config")


class Base(Params):
    """The model every arm starts from, the same for all arms and seeds (built once, then a cache hit)."""

    model: str = Field("tiny_policy", description="stage of the base model artifact (built with the profile), or a "
                                                  "local transformers directory")
    cold_start: list[ColdStart] = Field(default_factory=list, description="SFT phases run in order, each from the "
                                        "model the one before made (none: the base model as it is)")

    @property
    def directory(self) -> Path | None:
        """The local transformers directory ``model`` names, resolved; None when it names a stage."""
        path = Path(self.model).expanduser()
        return path.resolve() if path.is_dir() else None


class Arm(Params):
    description: str = Field(description="what this arm trains on, in a sentence")
    train_on: list[str] = Field(min_length=1, description="stages whose artifacts are the arm's training inputs "
                                                          "(tasks for rl, trajectories for sft)")
    data: Overrides = Field(default_factory=dict, description="stage overrides of this arm's data, on top of the "
                                                              "experiment's")
    trainer: Trainer = Field("rl", description="rl (the rl stage) or sft (the sft stage)")
    train: dict[str, Any] = Field(default_factory=dict, description="overrides of the trainer's config for this arm")


class Evaluation(Params):
    """The held-out units every arm's models are scored on (the heldout_score stage)."""

    heldout: list[str] = Field(min_length=1, description="stages whose tasks are held out (built with the "
                                                         "experiment's data overrides plus ``data``)")
    data: Overrides = Field(default_factory=dict, description="stage overrides of the held-out data only")
    score: dict[str, Any] = Field(default_factory=dict, description="overrides of heldout_score (k, max_tasks...)")
    groups: list[str] = Field(default_factory=list, description="task sources to report on their own as well "
                                                                "(e.g. keychain and regular)")


class Statistics(Params):
    metrics: list[Metric] = Field(min_length=1, description="the first is primary (the comparison the conclusion "
                                  "rests on); mean_reward: a task's mean reward over its k attempts; pass_at_k: "
                                  "unbiased Pass@k; noisy_score / clean_score: mean reward on noisy twins / clean "
                                  "tasks; robustness_gap: clean minus noisy, per clean task with twins")
    pass_k: int = Field(1, ge=1, description="k of pass_at_k (at most heldout_score's k)")
    test: Test = Field("hierarchical_bootstrap", description="hierarchical_bootstrap (seeds and tasks) or "
                                                             "paired_permutation (tasks only)")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="interval coverage; alpha = 1 - confidence")
    resamples: int = Field(2000, ge=200, description="bootstrap resamples / permutations")
    comparisons: list[tuple[str, str]] = Field(default_factory=list, description="(a, b) arm pairs, a - b; "
                                               "default: the first arm against each other")


class Experiment(Params):
    name: str = Field(description="the name `gymforge experiment run` takes")
    title: str = Field(description="one line")
    claim: str = Field(description="the report's result this replays, with its source (table / figure / section)")
    expected: str = Field(description="the direction the report found, as an arm comparison (e.g. keychain > qa)")
    equivalence: bool = Field(False, description="the report's claim is that the arms do not differ (a = b): "
                                                 "no significant difference is then consistent with it, and the "
                                                 "interval's width says how close")
    arms: dict[str, Arm] = Field(min_length=2, description="arm name -> arm")
    base: Base = Field(default_factory=Base, description="the shared starting model")
    data: Overrides = Field(default_factory=dict, description="stage overrides shared by every arm and the "
                                                              "held-out data")
    evaluation: Evaluation = Field(description="the held-out scoring")
    statistics: Statistics = Field(description="metrics and test")
    seeds: int = Field(3, ge=1, le=32, description="training seeds per arm (the trainer's seed = 0..seeds-1)")
    budgets: dict[str, dict[str, Any]] = Field(default_factory=dict, description="budget name (smoke, default) -> "
                                               "trainer overrides every arm gets (steps, batch size...), on top of "
                                               "the profile's trainer config")
    budget: str = Field("default", description="the budget of ``budgets`` a run uses (no budgets: the profile's "
                                               "trainer config as it is)")
    curve: Literal["reward", "loss"] = Field("reward", description="learning curve: rl training reward against "
                                             "trained samples, or sft training loss against steps")
    notes: str = Field("", description="what a reader should know: scale choices, what is not measured")

    @model_validator(mode="after")
    def _consistent(self) -> Experiment:
        for a, b in self.statistics.comparisons:
            if a not in self.arms or b not in self.arms:
                raise ValueError(f"comparison ({a}, {b}) names an arm not declared (arms: {', '.join(self.arms)})")
        if self.statistics.pass_k > int(self.evaluation.score.get("k", 4)):
            raise ValueError(f"pass_k={self.statistics.pass_k} exceeds the attempts per task "
                             f"(evaluation.score.k={self.evaluation.score.get('k', 4)})")
        if unknown := self._unknown_budget(self.budget):
            raise ValueError(unknown)
        return self

    def _unknown_budget(self, budget: str) -> str | None:
        if self.budgets and budget not in self.budgets:
            return f"no budget {budget!r}; declared: {', '.join(self.budgets)}"
        return None

    @property
    def comparisons(self) -> list[tuple[str, str]]:
        if self.statistics.comparisons:
            return list(self.statistics.comparisons)
        first, *others = self.arms
        return [(first, other) for other in others]

    @property
    def trainer_budget(self) -> dict[str, Any]:
        """The trainer overrides of the chosen budget."""
        return dict(self.budgets.get(self.budget, {}))

    def with_budget(self, budget: str) -> Experiment:
        """This experiment under another of its budgets; a StageError (one line for the user) names an unknown one."""
        if unknown := self._unknown_budget(budget):
            raise StageError(f"experiment {self.name}: {unknown}")
        return self.model_copy(update={"budget": budget})

    def with_base(self, model: str) -> Experiment:
        """This experiment from another base model (a model stage or a local transformers directory: a real model),
        as it is: the declared cold start belongs to the declared base."""
        return self.model_copy(update={"base": Base(model=model)})
