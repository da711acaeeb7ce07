"""Environment synthesis throughput: verified environments per second and golden replays per second.

A verified environment = construction (seed chain, grounding, BFS expansion, multi-chain, fallback) plus its task
and the verification that keeps it (golden replay in the environment, derivability, four mutations). A golden
replay = a fresh episode database, every golden tool call through ``Environment.step``, the user's final turn,
and the canonical-state comparison that scores it. Reference: tau2-bench's evaluator needs about 220 ms per
airline task on this kind of machine (about 4.5 tasks/s), mostly rebuilding and hashing its database.

Run: ``.venv/bin/python -m bench.bench_envgen [--envs 12] [--rounds 10]``. Wall-clock figures depend on what
else runs on the machine (the load average is printed); CPU-time figures much less so.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import time
from pathlib import Path

DOMAINS = ("airline", "retail", "telecom")
TAU2_MS_PER_TASK = 220.0


def _build(n: int, offset: int = 0) -> list[tuple[dict, dict]]:
    from envgen.compiler import compiled
    from envgen.taskgen import build_verified

    pairs = []
    i = offset
    while len(pairs) < n:
        name = DOMAINS[i % len(DOMAINS)]
        env, task, _ = build_verified(compiled(name), f"{name}-{i}", i)
        if task is not None:
            pairs.append((env, task))
        i += 1
    return pairs


def _replay_all(pairs: list[tuple[dict, dict]], rounds: int) -> tuple[int, float, float]:
    from envgen.environment import Environment, replay

    envs = [(Environment(e), t) for e, t in pairs]
    for env, task in envs:  # warm: compiled SQL, before-states
        replay(env, task)
    wall, cpu, n = time.perf_counter(), time.process_time(), 0
    for _ in range(rounds):
        for env, task in envs:
            if replay(env, task).reward != 1.0:
                raise RuntimeError(f"golden replay of {task['task_id']} did not score 1")
            n += 1
    return n, time.perf_counter() - wall, time.process_time() - cpu


def _worker(args: tuple[int, int, int]) -> tuple[int, float]:
    n_envs, rounds, offset = args
    pairs = _build(n_envs, offset)
    n, wall, _ = _replay_all(pairs, rounds)
    return n, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=12, help="Verified environments to build (and replay).")
    parser.add_argument("--rounds", type=int, default=10, help="Replays of each task.")
    parser.add_argument("--no-append", action="store_true", help="Do not append to bench/RESULTS.md.")
    args = parser.parse_args()

    from envgen.compiler import compiled
    from envgen.construct import executability

    for name in DOMAINS:  # compile outside the timed region
        compiled(name)
    exec_s = time.perf_counter()
    rates = {name: executability(compiled(name), 0)[0] for name in DOMAINS}
    exec_s = time.perf_counter() - exec_s

    wall, cpu = time.perf_counter(), time.process_time()
    pairs = _build(args.envs)
    build_wall, build_cpu = time.perf_counter() - wall, time.process_time() - cpu

    n, replay_wall, replay_cpu = _replay_all(pairs, args.rounds)

    # Two processes, one per core: each builds its own environments and replays them.
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        half = max(1, args.envs // 2)
        results = pool.map(_worker, [(half, args.rounds, 0), (half, args.rounds, 1000)])
    n2 = sum(r[0] for r in results)
    par_rate = n2 / max(r[1] for r in results)

    load = os.getloadavg()[0]
    rows = [
        ("domains compiled, every tool executed", f"{len(DOMAINS)} in {exec_s:.2f} s, executability "
                                                    + ", ".join(f"{k} {v:.0%}" for k, v in rates.items())),
        ("verified environments per second (1 process, wall)", f"{args.envs / build_wall:.2f}"),
        ("verified environments per CPU-second", f"{args.envs / build_cpu:.2f}"),
        ("golden replays per second (1 process, wall)", f"{n / replay_wall:.1f}"),
        ("golden replays per CPU-second", f"{n / replay_cpu:.1f}"),
        ("golden replays per second (2 processes, wall)", f"{par_rate:.1f}"),
        ("ms per replayed and scored task (1 process, wall)", f"{1000 * replay_wall / n:.2f}"),
        ("speed-up over tau2-bench's ~220 ms per airline task", f"{TAU2_MS_PER_TASK / (1000 * replay_wall / n):.0f}x"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if args.no_append:
        return
    machine = (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
               f"shared with other jobs (load average {load:.1f}). {args.envs} environments "
               f"({', '.join(DOMAINS)}), each task replayed {args.rounds} times.")
    table = "\n".join(["| figure | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)])
    with (Path(__file__).parent / "RESULTS.md").open("a") as fh:
        fh.write(f"\n## Environment synthesis and golden replay (bench/bench_envgen.py)\n\n{machine}\n\n{table}\n")


if __name__ == "__main__":
    main()
