"""The SampleQueue: finished rollouts wait here, grouped, until the trainer takes a batch of whole groups.

Staleness is bounded twice (DESIGN.md section 7). The RolloutManager admits a request only while the admission bound
holds (``RolloutManager.capacity``); this queue checks again when the trainer consumes: a sample whose oldest token
was sampled more than ``max_staleness`` versions before the consuming trainer version is dropped and counted, so the
bound holds for every trained sample, the long rollouts that outlived several versions included (AReaL and SkyRL
bound admission only). A group is trained whole or not at all: advantages are taken within it, and pass rates are
counted over completed groups only.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inference.rollout import Rollout


@dataclass
class Sample:
    """One finished sample of a group, as the trainer sees it."""

    sample_id: str
    group_id: str
    task_id: str
    source: str
    rollout: Rollout | None
    reward: float
    drop_reason: str | None = None  # set when the sample failed (a reward that raised, an engine that died)
    weight: float = 1.0  # a self-verification sample's weight: the quality of the rollout it judges
    admission: tuple[int, int, int] | None = None  # (trainer version, slot, limit) at admission: the bound's audit

    @property
    def versions(self) -> tuple[int, int] | None:
        """(oldest, newest) policy version among the sample's tokens; None when no policy wrote any (an episode
        whose first prompt overflowed the context window ends before an engine call)."""
        found = [turn.policy_version for turn in self.rollout.turns()] if self.rollout is not None else []
        return (min(found), max(found)) if found else None

    def staleness(self, trainer_version: int) -> int:
        """Versions between the sample's oldest token and ``trainer_version``. A sample no policy wrote is never
        stale: counting it as version 0 once dropped every such group for good after max_staleness + 1 versions,
        and a run whose tasks all overflow the context stalled there."""
        versions = self.versions
        return 0 if versions is None else trainer_version - versions[0]


@dataclass
class Group:
    group_id: str
    size: int
    samples: dict[str, Sample] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.samples) == self.size


Dropped = Callable[[Sample, str, int], None]
"""Told of every sample that will not be trained: (sample, reason, trainer version)."""


class SampleQueue:
    """Groups of samples in arrival order; thread-safe (controllers' results arrive on a collector thread)."""

    def __init__(self, group_size: int, max_staleness: int, on_drop: Dropped | None = None) -> None:
        self.group_size = group_size
        self.max_staleness = max_staleness
        self.on_drop = on_drop or (lambda sample, reason, version: None)
        self.drops: Counter[str] = Counter()
        self._groups: OrderedDict[str, Group] = OrderedDict()
        self._ready = threading.Condition()

    def put(self, sample: Sample) -> None:
        with self._ready:
            group = self._groups.setdefault(sample.group_id, Group(sample.group_id, self.group_size))
            group.samples[sample.sample_id] = sample
            if group.complete:
                self._ready.notify_all()

    def depth(self) -> int:
        """Samples waiting."""
        with self._ready:
            return sum(len(g.samples) for g in self._groups.values())

    def take(self, n_groups: int, trainer_version: int, timeout: float | None = None,
             stop: Callable[[], bool] = lambda: False) -> list[list[Sample]]:
        """The next ``n_groups`` complete groups trainable at ``trainer_version``, oldest first; groups holding a
        failed or stale sample are dropped (each sample counted by reason). Blocks until enough are ready; returns
        fewer when ``timeout`` passes or ``stop()`` says the run is ending."""
        taken: list[list[Sample]] = []
        with self._ready:
            while len(taken) < n_groups:
                for group_id in [gid for gid, g in self._groups.items() if g.complete]:
                    group = self._groups.pop(group_id)
                    if (reason := self._unusable(group, trainer_version)) is not None:
                        self._drop(group, reason, trainer_version)
                        continue
                    taken.append(sorted(group.samples.values(), key=lambda s: s.sample_id))
                    if len(taken) == n_groups:
                        break
                if len(taken) == n_groups or stop():
                    break
                if not self._ready.wait(timeout=timeout if timeout is not None else 0.2) and timeout is not None:
                    break
        return taken

    def _unusable(self, group: Group, trainer_version: int) -> str | None:
        failed = [s.drop_reason for s in group.samples.values() if s.drop_reason]
        if failed:
            return failed[0]
        if any(s.staleness(trainer_version) > self.max_staleness for s in group.samples.values()):
            return "stale"
        return None

    def _drop(self, group: Group, reason: str, trainer_version: int) -> None:
        for sample in group.samples.values():
            why = sample.drop_reason or (f"group: {reason}" if reason != "stale" else "stale")
            self.drops[why] += 1
            self.on_drop(sample, why, trainer_version)

    def state(self) -> list[Sample]:
        """Every waiting sample (a checkpoint keeps them, so a resumed run trains what was already sampled)."""
        with self._ready:
            return [s for g in self._groups.values() for s in g.samples.values()]

    def restore(self, samples: list[Sample], drops: dict[str, Any]) -> None:
        for sample in samples:
            self.put(sample)
        self.drops.update(drops)
