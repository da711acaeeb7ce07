"""Which groups to roll out next (LongCat-Flash-Thinking-2601 section 3.3 "RL Training Strategy"; LoongRL's hard
mining): the pieces are small functions, and ``Scheduler`` composes them.

- Oversampling by pass rate ("Dynamic Budget Allocation in the Asynchronous Setting"): a task is duplicated into
  ``oversampling_copies`` groups, more the lower its historical pass rate; each copy computes its own advantages.
- Cross-domain ratios ("Cross-Domain Balancing"): a domain's rollout quota per unit time is its ratio, so slow or
  rare domains keep pace without blocking the pipeline.
- Dynamic budget allocation: a value ``learning_value`` per task from its recent pass rates, and a heap-based greedy
  allocation of a step's rollout budget under diminishing returns (``allocate_budget``).
- The two-axis curriculum: difficulty (pass rate) x capability (basic tool use, multi-step planning, autonomous
  decisions), easy and basic first, shifting with training progress (``curriculum_weight``).
- Hard mining (LoongRL Stage II): a task solved by every sample of its last group is retired.
- Self-verification: on a reward plateau the policy also judges its own recent rollouts; each judgment weighs as
  much as the judged group was uncertain (the report couples its influence to the rollouts' quality and emphasises
  challenging cases; 4 p (1 - p) is our reading of both).
- The noise curriculum (envgen/noise/curriculum.py): noisy twins are admitted at the controller's level, which rises
  as the measured robustness gap closes.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from envgen.noise.curriculum import CurriculumController
from training.async_rl.config import SchedulingSettings

CAPABILITIES = ("basic", "planning", "autonomy")
"""Capability tags of the curriculum's second axis, from the first a task exercises to the last."""

VERIFY_PROMPT = ("Here is a task and a proposed answer. Decide whether the answer is correct.\n\nTask:\n{task}\n\n"
                 "Proposed answer:\n{answer}\n\nReply with \\boxed{{yes}} if it is correct, \\boxed{{no}} if not.")


@dataclass(frozen=True)
class RLTask:
    """One task to roll out: a tool-environment task or a prompt with its reward."""

    task_id: str
    kind: Literal["env", "prompt"]
    source: str  # the domain of an environment task, the category of a prompt (keychain, qa, math_hard, ...)
    payload: Mapping[str, Any]  # env: {"env": record, "task": record}; prompt: {"prompt", "answer", "aliases", "reward_fn"}
    capability: str = "basic"
    prior_pass_rate: float | None = None  # the difficulty filter's pass count / k, when known
    noise_level: int = 0  # 0: a clean task; a noisy twin's curriculum level otherwise
    clean_task_id: str | None = None


@dataclass(frozen=True)
class GroupSpec:
    group_id: str
    task: RLTask
    weight: float = 1.0  # a self-verification group's weight


def oversampling_copies(pass_rate: float | None, max_copies: int) -> int:
    """Groups a task is duplicated into: 1 for a task always solved, up to ``max_copies`` for one never solved;
    unknown pass rates count as 0.5."""
    p = 0.5 if pass_rate is None else pass_rate
    return 1 + round((max_copies - 1) * (1.0 - p))


def learning_value(pass_rates: Sequence[float]) -> float:
    """V(task | policy, metrics): p (1 - p) of the latest pass rate (0 for tasks always or never solved), raised by
    recent improvement, so tasks the policy is learning now get the budget (the report's "improved but not
    saturated")."""
    if not pass_rates:
        return 0.25  # unknown: as valuable as a task at 50%
    p = pass_rates[-1]
    trend = pass_rates[-1] - pass_rates[0] if len(pass_rates) > 1 else 0.0
    return p * (1.0 - p) * (1.0 + max(0.0, trend))


def allocate_budget(values: Mapping[str, float], budget: int, decay: float = 0.5) -> dict[str, int]:
    """Groups per task maximizing the summed learning value when a task's k-th group is worth ``value * decay**k``
    (diminishing returns): the heap-based greedy the report names, optimal for such concave returns."""
    allocation = dict.fromkeys(values, 0)
    heap = [(-value, task) for task, value in values.items() if value > 0]
    heapq.heapify(heap)
    for _ in range(budget):
        if not heap:
            break
        negative, task = heapq.heappop(heap)
        allocation[task] += 1
        heapq.heappush(heap, (negative * decay, task))
    return allocation


def curriculum_weight(pass_rate: float | None, capability: str, progress: float) -> float:
    """Two-axis curriculum weight in (0, 1]: early on (progress 0) easy tasks and basic capabilities weigh most; by
    the end (progress 1) hard tasks and the last capabilities do."""
    p = 0.5 if pass_rate is None else pass_rate
    target = 1.0 - progress  # the pass rate the curriculum seeks now
    rank = CAPABILITIES.index(capability) / (len(CAPABILITIES) - 1) if capability in CAPABILITIES else 0.0
    return math.exp(-2.0 * abs(target - p)) * math.exp(-2.0 * max(0.0, rank - progress))


class PlateauDetector:
    """Stagnation: the mean reward of the last ``window`` steps is no better than that of the window before."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.rewards: deque[float] = deque(maxlen=2 * window)

    def record(self, reward: float) -> bool:
        self.rewards.append(reward)
        if not self.window or len(self.rewards) < 2 * self.window:
            return False
        earlier, recent = list(self.rewards)[: self.window], list(self.rewards)[self.window:]
        return sum(recent) / self.window <= sum(earlier) / self.window + 1e-9


@dataclass
class Scheduler:
    """Turns the task pool into groups to admit; its state (pass rates, retired tasks, the noise level, the verify
    phase) is saved with a checkpoint."""

    tasks: Sequence[RLTask]
    settings: SchedulingSettings
    total_steps: int
    seed: int = 0
    history: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    retired: set[str] = field(default_factory=set)
    verifying: bool = False
    issued: int = 0
    verify_credit: float = 0.0  # verification groups owed by the share (a deficit counter): not lost to rounding
    noise: CurriculumController | None = None
    _recent: deque[tuple[RLTask, str, float, float]] = field(default_factory=lambda: deque(maxlen=64))
    _plateau: PlateauDetector | None = None

    def __post_init__(self) -> None:
        self._plateau = PlateauDetector(self.settings.self_verification_window)
        if self.settings.noise_curriculum and self.noise is None:
            self.noise = CurriculumController()

    # -- outcomes ---------------------------------------------------------------------------------------------

    def record_group(self, task: RLTask, rewards: Sequence[float], answers: Sequence[str]) -> None:
        """A completed group: its pass rate enters the history; an all-solved group retires the task (hard mining);
        its samples become candidates for self-verification."""
        rate = sum(r >= 1.0 for r in rewards) / len(rewards)
        self.history[task.task_id].append(rate)
        del self.history[task.task_id][:-8]
        if self.settings.hard_mining and rate == 1.0:
            self.retired.add(task.task_id)
        uncertainty = 4.0 * rate * (1.0 - rate)
        self._recent.extend((task, answer, reward, uncertainty) for answer, reward in zip(answers, rewards, strict=True))
        if self.noise is not None and task.kind == "env":
            self._record_noise(task, rate)

    def _record_noise(self, task: RLTask, rate: float) -> None:
        """Pairs a noisy twin's pass rate with its clean task's latest one (the robustness gap of the report)."""
        if task.noise_level and task.clean_task_id in self.history:
            self.noise.record(self.history[task.clean_task_id][-1], rate, level=task.noise_level)

    def record_step(self, mean_reward: float) -> None:
        """After a trainer step: a plateau starts the self-verification phase, which then stays on."""
        if self._plateau.record(mean_reward):
            self.verifying = True

    def pass_rate(self, task: RLTask) -> float | None:
        rates = self.history.get(task.task_id)
        return rates[-1] if rates else task.prior_pass_rate

    # -- admission ------------------------------------------------------------------------------------------------

    def next_groups(self, n: int, step: int) -> list[GroupSpec]:
        """At least ``n`` groups to admit (a task's oversampled copies come together). While the self-verification
        phase is on, each group asked for adds ``self_verification_share`` to a credit and every whole unit of it is
        a verification group, so over a run the share holds whatever ``n`` is (one group per admission included)."""
        groups: list[GroupSpec] = []
        rng = random.Random(f"{self.seed}/{step}/{self.issued}")
        if self.verifying and self._recent:
            self.verify_credit += n * self.settings.self_verification_share
            while self.verify_credit >= 1.0 - 1e-9 and len(groups) < n:
                groups.append(self._verification_group(rng))
                self.verify_credit -= 1.0
        while len(groups) < n:
            task = self._pick(rng, step)
            copies = oversampling_copies(self.pass_rate(task), self.settings.max_copies) \
                if self.settings.oversampling else 1
            for _ in range(copies):
                groups.append(GroupSpec(f"{task.task_id}~g{self.issued}", task))
                self.issued += 1
        return groups

    def _eligible(self) -> list[RLTask]:
        level = self.noise.level if self.noise is not None else None
        eligible = [t for t in self.tasks if t.task_id not in self.retired
                    and (level is None or t.noise_level in (0, level))]
        return eligible or list(self.tasks)  # every task mined out: keep training on all rather than stop

    def _pick(self, rng: random.Random, step: int) -> RLTask:
        eligible = self._eligible()
        by_source: dict[str, list[RLTask]] = defaultdict(list)
        for task in eligible:
            by_source[task.source].append(task)
        ratios = self.settings.domain_ratios
        sources = sorted(by_source)
        source = rng.choices(sources, weights=[ratios.get(s, 1.0) for s in sources])[0]
        candidates = by_source[source]
        progress = step / max(1, self.total_steps)
        weights = [curriculum_weight(self.pass_rate(t), t.capability, progress) if self.settings.curriculum else 1.0
                   for t in candidates]
        if self.settings.budget_allocation:
            budget = allocate_budget({t.task_id: learning_value(self.history.get(t.task_id, [])) for t in candidates},
                                     budget=len(candidates))
            weights = [w * (budget[t.task_id] + 1e-6) for w, t in zip(weights, candidates, strict=True)]
        return rng.choices(candidates, weights=weights)[0]

    def _verification_group(self, rng: random.Random) -> GroupSpec:
        """A self-verification prompt over one recent rollout: reward 1 for the right judgment."""
        task, answer, reward, uncertainty = rng.choice(list(self._recent))
        question = _task_text(task)
        payload = {"prompt": json.dumps([{"role": "user", "content": VERIFY_PROMPT.format(task=question,
                                                                                           answer=answer)}]),
                   "answer": "yes" if reward >= 1.0 else "no", "aliases": [], "reward_fn": "exact_match"}
        verify = RLTask(f"verify:{task.task_id}:{self.issued}", "prompt", "self_verification", payload)
        self.issued += 1
        return GroupSpec(f"{verify.task_id}~g{self.issued}", verify, weight=uncertainty)

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"history": dict(self.history), "retired": sorted(self.retired), "verifying": self.verifying,
                "issued": self.issued, "verify_credit": self.verify_credit, "plateau": list(self._plateau.rewards),
                "noise": self.noise.state_dict() if self.noise is not None else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = defaultdict(list, {k: list(v) for k, v in state["history"].items()})
        self.retired = set(state["retired"])
        self.verifying = state["verifying"]
        self.issued = state["issued"]
        self.verify_credit = state.get("verify_credit", 0.0)
        self._plateau.rewards.extend(state["plateau"])
        if self.noise is not None and state.get("noise"):
            self.noise.load_state_dict(state["noise"])


def _task_text(task: RLTask) -> str:
    if task.kind == "env":
        return str(task.payload["task"]["description"])
    messages = json.loads(task.payload["prompt"]) if isinstance(task.payload["prompt"], str) else task.payload["prompt"]
    return str(messages[-1]["content"])[-2000:]  # the question sits at the end of a long-context prompt
