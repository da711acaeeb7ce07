"""Where a command's CPU goes on the whole machine, by kind of process: the command runs while every process is
sampled once a second (its CPU-s so far, its command line), and the summary adds them up by kind (test processes,
Prefect servers, Dask workers, rollout controllers, `gymforge` commands, ...) beside the wall time and the machine's
busy CPU-s (``/proc/stat``: every process, the detached ones nobody waits for included).

    .venv/bin/python -m bench.suite_processes -- make test        # prints the table; --out FILE keeps the samples

Unlike bench/suite_cpu.py (per test, the test process and its children), this sees processes that outlive or escape
their parent (a server's guardian, a Dask worker). A process that lives less than a second may be missed, and one
seen only after its exit has no command line ("unnamed"). Processes running before the command count from then on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import psutil

KINDS: tuple[tuple[str, str], ...] = (
    ("test process", r"-c import sys;exec\(eval\(sys.stdin.readline\(\)\)\)"),
    ("pytest (controller)", r"-m pytest"),
    ("Prefect server", r"prefect server start"),
    ("Prefect server guardian", r"flows\.prefect_server"),
    ("gymforge train", r"bin/gymforge (--\S+ \S+ )*train"),
    ("gymforge run / backfill", r"bin/gymforge (--\S+ \S+ )*(run|backfill)"),
    ("gymforge worker", r"bin/gymforge (--\S+ \S+ )*worker"),
    ("gymforge, other commands", r"bin/gymforge"),
    ("rollout controllers and their fork server",
     r"multiprocessing\.forkserver.*'training\.async_rl\.controllers'|multiprocessing\.spawn"),
    ("Dask fork server and workers", r"multiprocessing\.forkserver|distributed|dask"),
    ("Prefect commands and workers", r"prefect (worker|work-pool|--no-prompt|deploy|server database)"),
    ("flow runs of deployments", r"prefect\.engine"),
    ("Chromium", r"chrom"),
    ("PostgreSQL", r"postgres|initdb"),
    ("python -c / -m (test helpers)", r"python[\d.]* (-c|-m)"),
)


def kind_of(cmdline: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, cmdline)), "unnamed" if not cmdline
                else "other")


def busy_cpu_s() -> float:
    """The machine's busy CPU-s since boot: user + nice + system + irq + softirq + steal."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # idle and iowait left out


def sample(command: list[str], interval_s: float = 1.0) -> dict:
    """Run ``command``; every process's last seen CPU-s (less what it had when the command started) and name."""
    seen: dict[str, dict] = {}
    busy, start = busy_cpu_s(), time.monotonic()
    me, first = psutil.Process().pid, True
    process = subprocess.Popen(command)
    while True:
        for proc in psutil.process_iter(["pid", "cmdline", "cpu_times", "create_time"]):
            info = proc.info
            if info["pid"] == me or info["cpu_times"] is None:
                continue
            key, cpu = f"{info['pid']}-{info['create_time']}", sum(info["cpu_times"][:2])
            row = seen.setdefault(key, {"base": cpu if first else 0.0, "cmdline": ""})
            row["cpu_s"] = cpu - row["base"]
            row["cmdline"] = " ".join(info["cmdline"] or [])[:300] or row["cmdline"]
        first = False
        if process.poll() is not None:
            break
        time.sleep(interval_s)
    return {"command": command, "returncode": process.returncode, "wall_s": time.monotonic() - start,
            "busy_cpu_s": busy_cpu_s() - busy, "processes": list(seen.values())}


def summary(run: dict) -> str:
    """A markdown table of CPU-s and processes by kind, under a line with the wall and the machine's busy CPU-s."""
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for row in run["processes"]:
        if row["cpu_s"] > 0:
            totals = by_kind[kind_of(row["cmdline"])]
            totals[0] += row["cpu_s"]
            totals[1] += 1
    head = (f"{' '.join(run['command'])}: exit {run['returncode']}, {run['wall_s']:.0f} s wall, "
            f"{run['busy_cpu_s']:.0f} busy CPU-s on the machine")
    lines = [head, "", "| kind | CPU-s | processes |", "|---|---|---|"]
    lines += [f"| {kind} | {cpu:.1f} | {n} |" for kind, (cpu, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])]
    lines.append(f"| all sampled | {sum(cpu for cpu, _ in by_kind.values()):.1f} | "
                 f"{sum(n for _, n in by_kind.values())} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a command; its machine-wide CPU by kind of process.")
    parser.add_argument("--out", type=Path, help="also write the samples (JSON) here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name a command after --, e.g. -- make test")
    run = sample(command)
    if args.out is not None:
        args.out.write_text(json.dumps(run))
    print(summary(run))


if __name__ == "__main__":
    main()
