"""Noisy twins of clean tasks, and the solvability check by execution.

LongCat-Flash-Thinking-2601, section 3.3.3: noise must make a task harder, never impossible ("we ensure that the
injected imperfections do not invalidate task solvability"), and robustness is the gap "between perfect and
imperfect environments on the same task". So every noisy task here is the twin of a clean task, carries the full
record of its transforms, and is kept only if :class:`~tasks.noise.agents.RobustReferenceAgent` solves it in the
real environment (:class:`~envgen.noise.environment.NoisyEnvironment`); the naive reference agent runs on both
twins so the success drop of each transform is measured.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from envgen.environment import json_field, replay
from envgen.noise.curriculum import NoiseLevel
from envgen.noise.environment import NoisyEnvironment, scored_for_agent
from envgen.noise.instruction import INSTRUCTION_TRANSFORMS, Draft, find_details
from envgen.noise.records import NoiseRecord, Skipped, Transform
from envgen.noise.tools import draw_tool_fault, parse_content
from tasks.noise.agents import NaiveReferenceAgent, ReferenceAgent, RobustReferenceAgent
from tasks.noise.plot import ALL


def noisy_task_id(task_id: str, level: int) -> str:
    return f"{task_id}~noise{level}"


@dataclass(frozen=True)
class Outcome:
    """One reference-agent episode."""

    success: bool
    reward: float
    failure: str | None
    gave_up: str | None
    scored: bool  # False for infrastructure/user-simulator failures: not the agent's
    resolved: frozenset[str]
    info: Mapping[str, Any]


@dataclass(frozen=True)
class CleanSurvey:
    """What the clean task offers: its golden outputs, and what the robust agent can observe in it."""

    outputs: list[Any]
    robust: Outcome
    naive: Outcome

    @property
    def observable(self) -> set[str]:
        return set(self.robust.resolved)


def writes_of(env: NoisyEnvironment) -> frozenset[str]:
    return frozenset(n for n in env.tool_names if env.domain.tools[n].is_write)


def run_reference(env: NoisyEnvironment, task: Mapping[str, Any], agent: ReferenceAgent) -> Outcome:
    """Drive ``agent`` through one episode of ``task``; an agent that gives up ends the episode (scored as is)."""
    obs = env.reset(dict(task))
    agent.observe(obs.messages)
    done, reward, info = False, 0.0, {}
    while not done:
        if agent.gave_up is not None:
            episode = env.score()
            reward, info = episode.reward, episode.info
            break
        obs, reward, done, info = env.step(agent.act())
        agent.observe(obs.messages)
    return Outcome(reward >= 1.0, reward, info.get("failure"), agent.gave_up, scored_for_agent(info),
                   frozenset(agent.resolved), info)


def _agent(kind: type[ReferenceAgent], env: NoisyEnvironment, task: Mapping[str, Any],
           observable: set[str] | None) -> ReferenceAgent:
    return kind(json_field(task["golden_actions"]), json_field(task["rubric"]).get("required_outputs", []),
                writes_of(env), observable)


def survey(env: NoisyEnvironment, task: Mapping[str, Any]) -> CleanSurvey:
    """Replay the clean task's golden plan for its outputs, then run both reference agents on it: the robust one
    surveys what is observable, the naive one is the clean baseline of the success drop."""
    clean = {**task, "noise": None}
    outputs = [parse_content(m["content"]) for m in replay(env, clean).messages if m.get("role") == "tool"]
    robust = run_reference(env, clean, _agent(RobustReferenceAgent, env, clean, None))
    naive = run_reference(env, clean, _agent(NaiveReferenceAgent, env, clean, set(robust.resolved)))
    return CleanSurvey(outputs, robust, naive)


def make_noisy_task(
    task: Mapping[str, Any],
    outputs: Sequence[Any],
    level: NoiseLevel,
    seed: int,
    writes: frozenset[str] = frozenset(),
    only: str | None = None,
) -> dict[str, Any]:
    """The noisy twin of ``task`` at ``level``: every choice from ``random.Random(seed)``, every transform recorded.

    Kinds are tried in a seeded order until the level's count per family is applied; a kind that does not fit
    this task is recorded in ``skipped`` with the reason, never silently dropped. ``only`` restricts the twin to
    that one kind at the level's intensity (the single-transform variant that attributes the naive agent's drop).
    """
    rng = random.Random(seed)
    golden = json_field(task["golden_actions"])
    profile = copy.deepcopy(json_field(task["user_profile"]))
    draft = Draft(task["description"], profile, find_details(task["description"], profile, golden, outputs))
    applied: list[Transform] = []
    skipped: list[Skipped] = []
    taken: set[tuple[str, int]] = set()

    def instruction(kind: str) -> Transform | str:
        return INSTRUCTION_TRANSFORMS[kind](draft, rng, level.level)

    def tool(kind: str) -> Transform | str:
        return draw_tool_fault(kind, golden, outputs, rng, level.max_failures, taken, writes)

    for kinds, count, apply in ((level.instruction_kinds, level.n_instruction, instruction),
                                (level.tool_kinds, level.n_tool, tool)):
        if only is not None:
            kinds, count = ((only,), 1) if only in kinds else ((), 0)
        for kind in rng.sample(list(kinds), len(kinds)):
            if count == 0:
                break
            result = apply(kind)
            if isinstance(result, str):
                skipped.append(Skipped(kind=kind, reason=result))
            else:
                applied.append(result)
                count -= 1
    record = NoiseRecord(level=level.level, seed=seed, clean_task_id=str(task["task_id"]),
                         transforms=tuple(applied), skipped=tuple(skipped))
    return {
        **task,
        "task_id": noisy_task_id(str(task["task_id"]), level.level),
        "description": draft.description,
        "user_profile": json.dumps(draft.user_profile, sort_keys=True),
        "noise": record.to_json(),
        "clean_task_id": str(task["task_id"]),
        "noise_level": level.level,
        "transforms": list(record.kinds),
    }


@dataclass(frozen=True)
class Verdict:
    """The solvability check of one noisy task."""

    task: dict[str, Any]
    robust: Outcome
    naive: Outcome
    reason: str | None  # None: solvable and kept
    naive_by_transform: Mapping[str, bool] = field(default_factory=dict)  # naive success with that kind alone

    @property
    def kept(self) -> bool:
        return self.reason is None


def verify(env: NoisyEnvironment, noisy: Mapping[str, Any], clean: CleanSurvey, infra_retries: int = 1) -> Verdict:
    """Run both reference agents on ``noisy``; it is kept only if the robust one succeeds.

    An episode lost to infrastructure (a real tool failure, labelled ``tool``) is re-run up to ``infra_retries``
    times and, if it keeps failing, rejected as infrastructure: never counted as the noise breaking the task.
    """
    observable = clean.observable
    for _ in range(infra_retries + 1):
        robust = run_reference(env, noisy, _agent(RobustReferenceAgent, env, noisy, observable))
        if robust.scored:
            break
    naive = run_reference(env, noisy, _agent(NaiveReferenceAgent, env, noisy, observable))
    if not robust.scored:
        reason = f"infrastructure: {robust.failure} failure in every attempt"
    elif not robust.success:
        why = robust.gave_up or f"reward {robust.reward:g} ({robust.info.get('reward_components')})"
        reason = f"unsolvable under noise: robust reference agent failed: {why}"
    else:
        reason = None
    return Verdict(dict(noisy), robust, naive, reason)


def noisy_twins(
    env: NoisyEnvironment,
    task: Mapping[str, Any],
    levels: Iterable[NoiseLevel],
    seeds: Iterable[int],
) -> tuple[CleanSurvey, list[Verdict]]:
    """Survey one clean task, then build and verify its twin at each level (``seeds`` pairs with ``levels``)."""
    clean = survey(env, task)
    verdicts = []
    for level, seed in zip(levels, seeds):
        noisy = make_noisy_task(task, clean.outputs, level, seed, writes_of(env))
        if not clean.robust.success:
            why = clean.robust.gave_up or f"reward {clean.robust.reward:g}"
            verdicts.append(Verdict(noisy, clean.robust, clean.naive,
                                    f"clean task not solved by the robust reference agent: {why}"))
            continue
        verdict = verify(env, noisy, clean)
        verdicts.append(replace(verdict, naive_by_transform=isolated_naive(env, task, clean, level, seed,
                                                                            noisy["transforms"])))
    return clean, verdicts


def isolated_naive(env: NoisyEnvironment, task: Mapping[str, Any], clean: CleanSurvey, level: NoiseLevel,
                   seed: int, kinds: Iterable[str]) -> dict[str, bool]:
    """Naive success on single-transform twins, one per kind of a combined twin: a twin holds several
    transforms, so this is what attributes the naive agent's drop to each of them."""
    out = {}
    for kind in sorted(set(kinds)):
        alone = make_noisy_task(task, clean.outputs, level, seed, writes_of(env), only=kind)
        if alone["transforms"] == [kind]:
            naive = _agent(NaiveReferenceAgent, env, alone, clean.observable)
            out[kind] = run_reference(env, alone, naive).success
    return out


def summarize(rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """Success of both reference agents per level and transform, plus ``all`` per level and the clean tasks as
    level 0 (the baseline of the robustness gap).

    ``rows`` are kept and rejected twins (``noise_level``, ``transforms``, ``robust_success``, ``naive_success``,
    ``scored``, and ``clean_task_id`` with ``robust_clean_success``/``naive_clean_success``). Rejected twins
    count with robust success 0, so noise that breaks solvability shows; infrastructure losses do not count.
    Per transform, the naive success is that of the single-transform twin (``naive_by_transform``) when there is
    one; ``naive_clean_success`` is the naive agent's success on the clean twins of the same tasks, so the drop a
    transform causes is ``naive_clean_success - naive_success``.
    """
    acc: dict[tuple[str, int], list[float]] = {}

    def add(name: str, level: int, robust: Any, naive: Any, naive_clean: Any) -> None:
        a = acc.setdefault((name, level), [0.0, 0.0, 0.0, 0.0])
        for i, v in enumerate((robust, naive, naive_clean, True)):
            a[i] += float(bool(v))

    clean_seen: set[str] = set()
    for row in rows:
        clean_id = row.get("clean_task_id")
        if clean_id is not None and clean_id not in clean_seen and row.get("robust_clean_success") is not None:
            clean_seen.add(clean_id)
            add(ALL, 0, row["robust_clean_success"], row["naive_clean_success"], row["naive_clean_success"])
        if not row.get("scored", True):
            continue
        alone = json_field(row.get("naive_by_transform") or "{}")
        for name in [ALL, *sorted(set(row["transforms"]))]:
            add(name, int(row["noise_level"]), row["robust_success"], alone.get(name, row["naive_success"]),
                row.get("naive_clean_success"))
    records = [
        {"transform": t, "level": lvl, "robust_success": r / n, "naive_success": nv / n,
         "naive_clean_success": nc / n, "tasks": int(n)}
        for (t, lvl), (r, nv, nc, n) in sorted(acc.items())
    ]
    schema = {"transform": pl.String, "level": pl.Int64, "robust_success": pl.Float64,
              "naive_success": pl.Float64, "naive_clean_success": pl.Float64, "tasks": pl.Int64}
    return pl.DataFrame(records, schema=schema)


def summary_frame(tasks: pl.DataFrame, rejected: pl.DataFrame) -> pl.DataFrame:
    """:func:`summarize` over a noise stage's ``tasks`` and ``rejected`` outputs."""
    return summarize([*tasks.iter_rows(named=True), *rejected.iter_rows(named=True)])
