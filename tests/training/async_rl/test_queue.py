"""The SampleQueue: whole groups, oldest first; the staleness bound checked again when the trainer consumes."""

from __future__ import annotations

from inference.rollout import Rollout, Segment, Turn
from training.async_rl.queue import Sample, SampleQueue


def sample(group: str, index: int, version: int, reward: float = 1.0, drop: str | None = None) -> Sample:
    turn = Turn([1, 2], [3, 4], [-0.1, -0.2], version, [1, 1], "stop")
    rollout = Rollout(f"{group}#{index}", group, "qa", group, [], [Segment(turns=[turn])], reward, {}, True)
    return Sample(f"{group}#{index}", group, group, "qa", None if drop else rollout, reward, drop_reason=drop)


def fill(queue: SampleQueue, group: str, versions: list[int], drop: str | None = None) -> None:
    for index, version in enumerate(versions):
        queue.put(sample(group, index, version, drop=drop if index == 0 else None))


def test_take_returns_whole_groups_oldest_first_and_waits_for_the_rest():
    queue = SampleQueue(group_size=2, max_staleness=1)
    fill(queue, "a", [0, 0])
    queue.put(sample("b", 0, 0))  # half a group
    fill(queue, "c", [0, 0])
    taken = queue.take(2, trainer_version=0, timeout=0.05)
    assert [[s.sample_id for s in group] for group in taken] == [["a#0", "a#1"], ["c#0", "c#1"]]
    assert queue.take(1, trainer_version=0, timeout=0.05) == []  # b is incomplete
    assert queue.depth() == 1


def test_a_stale_sample_drops_its_group_at_consumption():
    dropped = []
    queue = SampleQueue(group_size=2, max_staleness=1, on_drop=lambda s, why, v: dropped.append((s.sample_id, why, v)))
    fill(queue, "old", [1, 3])  # one token from version 1: staleness 2 at trainer version 3
    fill(queue, "fresh", [2, 3])
    taken = queue.take(1, trainer_version=3, timeout=0.05)
    assert [s.group_id for s in taken[0]] == ["fresh", "fresh"]
    assert dropped == [("old#0", "stale", 3), ("old#1", "stale", 3)]
    assert queue.drops == {"stale": 2}


def test_a_failed_sample_drops_its_group_with_its_reason():
    queue = SampleQueue(group_size=2, max_staleness=4)
    fill(queue, "broken", [0, 0], drop="reward raised ValueError")
    assert queue.take(1, trainer_version=0, timeout=0.05) == []
    assert queue.drops == {"reward raised ValueError": 1, "group: reward raised ValueError": 1}


def test_state_and_restore_keep_waiting_samples_and_counts():
    queue = SampleQueue(group_size=2, max_staleness=1)
    fill(queue, "a", [0, 0])
    fill(queue, "x", [0, 0])
    queue.take(1, trainer_version=5, timeout=0.05)  # both stale
    fill(queue, "b", [5, 5])
    again = SampleQueue(group_size=2, max_staleness=1)
    again.restore(queue.state(), dict(queue.drops))
    assert again.drops == {"stale": 4}
    assert [s.sample_id for s in again.take(1, trainer_version=5, timeout=0.05)[0]] == ["b#0", "b#1"]


def test_take_returns_early_when_told_to_stop():
    queue = SampleQueue(group_size=2, max_staleness=1)
    assert queue.take(1, trainer_version=0, stop=lambda: True) == []


def test_a_sample_no_policy_wrote_is_never_stale():
    """An episode whose first prompt overflows the context window ends before any engine call: it has no policy
    version, and a trainer far ahead must still consume its group (it used to count as version 0 and be dropped at
    every version past max_staleness, so a run on such tasks stalled)."""
    queue = SampleQueue(group_size=2, max_staleness=1)
    for index in range(2):
        empty = Rollout(f"long#{index}", "long", "env", "long", [], [Segment(turns=[])], 0.0, {}, False)
        queue.put(Sample(f"long#{index}", "long", "long", "env", empty, 0.0))
    [group] = queue.take(1, trainer_version=7, timeout=0.05)
    assert [s.versions for s in group] == [None, None] and queue.drops == {}
