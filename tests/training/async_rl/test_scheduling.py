"""Scheduling (LongCat-Flash-Thinking-2601 3.3, LoongRL hard mining): oversampling, the budget allocator against a
brute-force optimum, the curriculum, hard mining, self-verification on a plateau, the noise curriculum, state."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from rl_fixtures import prompt_tasks

from training.async_rl.config import SchedulingSettings
from training.async_rl.scheduling import (
    PlateauDetector,
    RLTask,
    Scheduler,
    allocate_budget,
    curriculum_weight,
    learning_value,
    oversampling_copies,
)


def test_harder_tasks_get_more_copies():
    copies = [oversampling_copies(p, max_copies=4) for p in (1.0, 0.75, 0.5, 0.25, 0.0)]
    assert copies == sorted(copies) and copies[0] == 1 and copies[-1] == 4
    assert oversampling_copies(None, 3) == oversampling_copies(0.5, 3)


def test_learning_value_favours_tasks_being_learned():
    assert learning_value([1.0]) == learning_value([0.0]) == 0.0
    assert learning_value([0.25, 0.5]) > learning_value([0.5, 0.5]) > learning_value([0.9])


def _brute_force(values: dict[str, float], budget: int, decay: float) -> float:
    best = 0.0
    tasks = list(values)
    for split in itertools.product(range(budget + 1), repeat=len(tasks)):
        if sum(split) <= budget:
            best = max(best, sum(values[t] * sum(decay**k for k in range(n)) for t, n in zip(tasks, split)))
    return best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4), st.integers(0, 5), st.sampled_from([0.3, 0.5, 0.9]))
def test_the_greedy_allocation_is_optimal_under_diminishing_returns(raw, budget, decay):
    values = {f"t{i}": v for i, v in enumerate(raw)}
    allocation = allocate_budget(values, budget, decay)
    achieved = sum(values[t] * sum(decay**k for k in range(n)) for t, n in allocation.items())
    assert sum(allocation.values()) <= budget
    assert abs(achieved - _brute_force(values, budget, decay)) < 1e-9


def test_the_curriculum_moves_from_easy_basic_to_hard_autonomous():
    early, late = 0.0, 1.0
    assert curriculum_weight(0.9, "basic", early) > curriculum_weight(0.1, "basic", early)
    assert curriculum_weight(0.1, "basic", late) > curriculum_weight(0.9, "basic", late)
    assert curriculum_weight(0.5, "basic", early) > curriculum_weight(0.5, "autonomy", early)
    assert curriculum_weight(0.5, "autonomy", late) == curriculum_weight(0.5, "basic", late)


def test_a_plateau_is_no_gain_over_the_previous_window():
    rising = PlateauDetector(window=2)
    assert not any(rising.record(r) for r in (0.1, 0.2, 0.3, 0.4, 0.5))
    flat = PlateauDetector(window=2)
    assert [flat.record(r) for r in (0.3, 0.4, 0.35, 0.35)] == [False, False, False, True]


def test_hard_mining_retires_tasks_solved_in_every_sample():
    tasks = prompt_tasks(3)
    scheduler = Scheduler(tasks, SchedulingSettings(oversampling=False, curriculum=False), total_steps=10)
    scheduler.record_group(tasks[0], [1.0, 1.0, 1.0, 1.0], ["a"] * 4)
    scheduler.record_group(tasks[1], [1.0, 0.0, 1.0, 1.0], ["a"] * 4)
    picked = Counter(g.task.task_id for g in scheduler.next_groups(60, step=0))
    assert "q0" not in picked and {"q1", "q2"} <= set(picked)
    assert scheduler.pass_rate(tasks[1]) == 0.75


def test_oversampling_duplicates_a_task_into_groups_by_its_pass_rate():
    hard = RLTask("hard", "prompt", "qa", prompt_tasks(1)[0].payload, prior_pass_rate=0.0)
    scheduler = Scheduler([hard], SchedulingSettings(max_copies=3, curriculum=False), total_steps=10)
    groups = scheduler.next_groups(1, step=0)
    assert len(groups) == 3 and len({g.group_id for g in groups}) == 3


def test_domain_ratios_set_each_sources_share():
    tasks = prompt_tasks(4, "slow") + [RLTask(f"f{i}", "prompt", "fast", t.payload) for i, t in
                                        enumerate(prompt_tasks(4))]
    settings_ = SchedulingSettings(oversampling=False, curriculum=False, domain_ratios={"slow": 3.0})
    picked = Counter(g.task.source for g in Scheduler(tasks, settings_, 10).next_groups(400, step=0))
    assert 2.4 < picked["slow"] / picked["fast"] < 3.8


def test_self_verification_starts_on_a_plateau_and_weighs_by_uncertainty():
    tasks = prompt_tasks(2)
    settings_ = SchedulingSettings(oversampling=False, self_verification_window=2, self_verification_share=0.5)
    scheduler = Scheduler(tasks, settings_, total_steps=10)
    scheduler.record_group(tasks[0], [1.0, 0.0, 0.0, 0.0], ["\\boxed{city0}", "x", "y", "z"])
    for reward in (0.5, 0.5, 0.5, 0.5):
        scheduler.record_step(reward)
    assert scheduler.verifying
    groups = scheduler.next_groups(4, step=5)
    verify = [g for g in groups if g.task.source == "self_verification"]
    assert len(verify) == 2
    assert all(g.weight == 4 * 0.25 * 0.75 for g in verify)
    assert {g.task.payload["answer"] for g in verify} <= {"yes", "no"}


def test_the_noise_curriculum_admits_twins_at_the_controllers_level():
    clean = RLTask("t", "env", "shop", {"task": {"description": "d"}, "env": {"env_id": "e"}})
    twins = [RLTask(f"t~{lvl}", "env", "shop", clean.payload, noise_level=lvl, clean_task_id="t") for lvl in (1, 2)]
    scheduler = Scheduler([clean, *twins], SchedulingSettings(oversampling=False, noise_curriculum=True), 10)
    start = scheduler.noise.level
    admitted = {g.task.noise_level for g in scheduler.next_groups(40, step=0)}
    assert admitted == {0, start}
    for _ in range(64):  # a full window with the twin solved as often as its clean task: the level rises
        scheduler.record_group(clean, [1.0, 0.0], ["a", "b"])
        scheduler.record_group(twins[start - 1], [1.0, 0.0], ["a", "b"])
    assert scheduler.noise.level > start


def test_state_round_trips_through_a_checkpoint():
    tasks = prompt_tasks(3)
    settings_ = SchedulingSettings(self_verification_window=1)
    scheduler = Scheduler(tasks, settings_, total_steps=10, seed=3)
    scheduler.record_group(tasks[0], [1.0, 1.0], ["a", "b"])
    scheduler.record_group(tasks[1], [0.0, 1.0], ["a", "b"])
    scheduler.record_step(0.5)
    scheduler.next_groups(2, step=1)
    again = Scheduler(tasks, settings_, total_steps=10, seed=3)
    again.load_state_dict(scheduler.state_dict())
    assert again.state_dict() == scheduler.state_dict()
    assert [g.group_id for g in again.next_groups(3, step=2)] == [g.group_id for g in scheduler.next_groups(3, 2)]


@settings(max_examples=40, deadline=None)
@given(share=st.floats(0.0, 1.0), calls=st.integers(1, 120))
def test_self_verification_holds_its_share_at_one_group_per_admission(share, calls):
    """The manager admits one group at a time; rounding 1 x share gave no verification at share <= 0.5 and
    nothing else above it. The deficit counter gives floor(calls x share) of them, whatever the share."""
    tasks = prompt_tasks(2)
    settings_ = SchedulingSettings(oversampling=False, self_verification_window=1, self_verification_share=share)
    scheduler = Scheduler(tasks, settings_, total_steps=10)
    scheduler.record_group(tasks[0], [1.0, 0.0], ["\\boxed{city0}", "x"])
    scheduler.record_step(0.5)
    scheduler.record_step(0.5)  # a window of 1 with no gain: the plateau
    assert scheduler.verifying
    groups = [g for _ in range(calls) for g in scheduler.next_groups(1, step=1)]
    verify = sum(g.task.source == "self_verification" for g in groups)
    assert len(groups) == calls and verify == int(calls * share + 1e-9)
