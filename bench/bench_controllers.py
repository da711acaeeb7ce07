"""Rollout controller processes: forked from a fork server that imported torch, transformers and the controller loop
once (``ProcessLauncher``'s default), against spawned ones that each import them (the launcher before).

One measurement is a fresh process running a short RL run of the tiny model on prompt tasks with ``--controllers``
controller processes (``hf:`` engines); every controller is killed after the first step, so the run waits for
their replacements. The arms alternate, ``--repeats`` runs each. Figures: the run's wall seconds, the busy CPU-s of the whole
machine meanwhile (every process: the run, its fork server, its controllers; a quiet machine reads true), and the
seconds from the kill until a replacement controller reported its engine loaded.

    .venv/bin/python -m bench.bench_controllers [--controllers 2] [--repeats 3] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads (RESULTS.md, inference)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the tiny model, prompt tasks

from bench import add_arm_options, report, run_arms
from bench.suite_processes import busy_cpu_s

ARMS = ("spawned", "forked from the fork server")


def measure(arm: str, run_dir: Path, controllers: int) -> dict[str, float]:
    """One short RL run in this process; every controller is killed after the first step, so the run waits for
    their replacements."""
    from inference_support import tiny_checkpoint
    from rl_fixtures import prompt_tasks

    from training.async_rl.config import RLConfig
    from training.async_rl.controllers import ProcessLauncher
    from training.async_rl.run import RLRun

    launcher = ProcessLauncher("spawn" if arm == "spawned" else "forkserver")  # spawned: the launcher before
    checkpoint = tiny_checkpoint()
    config = RLConfig(steps=3, batch_size=8, num_generations=4, controllers=controllers, concurrency=4,
                      checkpoint_every=3, max_staleness=0, beta=0.0, sampling={"max_tokens": 8})
    restart: dict[str, float] = {}

    def watch(killed: set[int], at: float) -> None:  # until a replacement reports its engine loaded
        while not any(c.uid not in killed and c.loaded >= 0 for c in run.manager._controllers):
            time.sleep(0.01)
        restart["s"] = time.monotonic() - at

    def on_step(row: dict) -> None:
        if row["version"] == 1:
            victims = list(run.manager._controllers)
            for victim in victims:
                os.kill(victim.handle.pid, signal.SIGKILL)
            threading.Thread(target=watch, args=({v.uid for v in victims}, time.monotonic()), daemon=True).start()

    started, busy = time.monotonic(), busy_cpu_s()
    run = RLRun(checkpoint, prompt_tasks(8), config, run_dir, engine=f"hf:{checkpoint}", launcher=launcher,
                on_step=on_step)
    run.run()
    return {"wall_s": time.monotonic() - started, "busy_cpu_s": busy_cpu_s() - busy, "restart_s": restart["s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controllers", type=int, default=2)
    add_arm_options(parser, ARMS, repeats=3)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(measure(args.arm, args.root, args.controllers)))
        return
    runs = run_arms("bench.bench_controllers", ARMS, args.repeats, "--controllers", str(args.controllers),
                    server=False)
    setting = (f"Machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}. "
               f"{args.controllers} controllers, all killed after the first step; median of {args.repeats} runs per "
               "arm, alternating.")
    lines = ["", "## Rollout controllers: spawned against forked from a preloaded fork server (bench_controllers.py)",
             "", setting, "",
             "| controllers | run wall s | busy CPU-s (machine) | kill -> a replacement loaded, s |",
             "| --- | --- | --- | --- |"]
    for arm, measured in runs.items():
        cells = [statistics.median(run[name] for run in measured) for name in ("wall_s", "busy_cpu_s", "restart_s")]
        lines.append(f"| {arm} | " + " | ".join(f"{cell:.1f}" for cell in cells) + " |")
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()
