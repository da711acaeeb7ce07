"""The noise levels and the curriculum controller: it promotes and holds exactly per its rule."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envgen.noise.curriculum import (
    CurriculumConfig,
    CurriculumController,
    noise_level,
)
from envgen.noise.instruction import INSTRUCTION_TRANSFORMS
from envgen.noise.tools import TOOL_FAULTS

RATES = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])
PAIRS = st.lists(st.tuples(RATES, RATES), max_size=120)
CONFIGS = st.builds(
    CurriculumConfig,
    max_level=st.integers(1, 5),
    window=st.integers(1, 12),
    threshold=st.sampled_from([Fraction(k, 8) for k in range(-2, 9)]).map(float),
    start_level=st.just(0),
)


def reference_levels(config: CurriculumConfig, pairs: list[tuple[float, float]]) -> list[int]:
    """The rule, restated with exact arithmetic: after each pair, the level."""
    level, window, out = config.start_level, [], []
    for clean, noisy in pairs:
        window = (window + [(Fraction(clean), Fraction(noisy))])[-config.window :]
        gap = sum(c - n for c, n in window) / len(window)
        if level < config.max_level and len(window) == config.window and gap <= Fraction(config.threshold):
            level, window = level + 1, []
        out.append(level)
    return out


@settings(max_examples=200, deadline=None)
@given(CONFIGS, PAIRS)
def test_controller_follows_the_rule_exactly(config: CurriculumConfig, pairs: list[tuple[float, float]]) -> None:
    controller = CurriculumController(config)
    levels = []
    for clean, noisy in pairs:
        before = controller.level
        promoted = controller.record(clean, noisy)
        assert promoted == (controller.level == before + 1)
        levels.append(controller.level)
    assert levels == reference_levels(config, pairs)
    assert len(controller.promotions) == controller.level - config.start_level
    assert all(p["gap"] <= config.threshold for p in controller.promotions)


@settings(max_examples=100, deadline=None)
@given(CONFIGS, st.integers(0, 60))
def test_zero_gap_promotes_every_full_window(config: CurriculumConfig, n: int) -> None:
    controller = CurriculumController(config)
    for _ in range(n):
        controller.record(0.5, 0.5)
    expected = min(config.max_level, n // config.window) if config.threshold >= 0 else 0
    assert controller.level == expected


@settings(max_examples=100, deadline=None)
@given(CONFIGS, st.integers(0, 60))
def test_gap_above_threshold_holds(config: CurriculumConfig, n: int) -> None:
    controller = CurriculumController(config.model_copy(update={"threshold": min(config.threshold, 0.875)}))
    for _ in range(n):
        controller.record(1.0, 0.0)
    assert controller.level == 0
    assert controller.gap() in (None, 1.0)


def test_results_of_another_level_do_not_enter_the_window() -> None:
    controller = CurriculumController(CurriculumConfig(window=2, threshold=0.0, start_level=1))
    for _ in range(5):
        assert not controller.record(1.0, 1.0, level=0)
    assert controller.stale_results == 5 and controller.gap() is None
    controller.record(1.0, 1.0, level=1)
    assert controller.record(1.0, 1.0, level=1)
    assert controller.level == 2 and controller.spec.level == 2


@settings(max_examples=50, deadline=None)
@given(config=CONFIGS, first=PAIRS, second=PAIRS)
def test_state_round_trips_mid_run(config: CurriculumConfig, first, second, tmp_path_factory) -> None:
    straight = CurriculumController(config)
    for pair in first + second:
        straight.record(*pair)

    resumed = CurriculumController(config)
    for pair in first:
        resumed.record(*pair)
    path = tmp_path_factory.mktemp("ckpt") / "noise_curriculum.json"
    resumed.save(path)
    restored = CurriculumController.load(path)
    assert restored.state_dict() == resumed.state_dict()
    for pair in second:
        restored.record(*pair)
    assert restored.state_dict() == straight.state_dict()


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"level": 1}, "missing keys"),
        ({**CurriculumController().state_dict(), "level": 9}, "outside"),
        ({**CurriculumController().state_dict(), "window": [[1.5, 0.0]]}, r"must be in \[0, 1\]"),
    ],
)
def test_bad_state_is_refused(state: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CurriculumController().load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"window": 0}, "window"), ({"threshold": 2.0}, "threshold"), ({"start_level": 7}, "start_level")],
)
def test_bad_config_says_what_to_set(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CurriculumConfig(**kwargs)


@pytest.mark.parametrize("max_level", [1, 2, 4, 6])
def test_levels_grow_in_diversity_and_intensity(max_level: int) -> None:
    levels = [noise_level(k, max_level) for k in range(max_level + 1)]
    assert levels[0].kinds == ()
    for lower, higher in pairwise(levels):
        assert set(lower.kinds) <= set(higher.kinds)
        for attr in ("n_instruction", "n_tool", "max_failures"):
            assert getattr(lower, attr) <= getattr(higher, attr)
    assert set(levels[-1].kinds) == set(INSTRUCTION_TRANSFORMS) | set(TOOL_FAULTS)
