"""The environment server (`gymforge serve-env`) against the in-process environment, on a data root's environment
artifacts, side by side in one run:

- the same golden replays through the server (OpenEnv's MCP tool client over WebSocket) and in process
  (``envgen.environment.replay``) give the same reward on every task of every artifact;
- steps per second and p50/p99 step latency (one step = one MCP tool call or ``respond``, timed at the client) at 1,
  16 and 64 concurrent sessions replaying golden episodes, against the same episodes stepped in process;
- memory per session: the server's resident memory with 64 open sessions (each reset, holding its database copy)
  over its memory with none, per session.

The server runs as `gymforge serve-env` in its own process, the clients in this one (both on this machine).

    .venv/bin/python -m bench.bench_env_server --data-dir /work/base_data [--seconds 4] [--no-record]

About a minute: the servers start together, and each load level runs ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import date
from pathlib import Path
from typing import Any, Self

import httpx
import psutil
from openenv.core.env_server import CallToolAction

from envgen.environment import outcome_message, replay
from envgen.noise.environment import NoisyEnvironment
from inference.environments.client import GymforgeEnvClient
from inference.environments.episode import ServedEpisode
from inference.environments.tasks import ServedTasks, golden_actions, served_artifact

ARTIFACTS = ("environments", "small_envs", "noisy_tasks", "eval_random_envs")
SESSIONS = (1, 16, 64)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`gymforge serve-env REF` in a process of its own, until the block ends."""

    def __init__(self, ref: str, data_dir: str, max_sessions: int = 64) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [str(Path(sys.executable).parent / "gymforge"), "serve-env", ref, "--data-dir", data_dir,
                     "--port", str(self.port), "--max-sessions", str(max_sessions), "--idle-timeout", "0"]

    def start(self) -> None:
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL)

    def __enter__(self) -> Self:
        if not hasattr(self, "process"):
            self.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"{' '.join(self.args)} did not start")

    def rss(self) -> int:
        return psutil.Process(self.process.pid).memory_info().rss

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


async def server_episode(client: GymforgeEnvClient, task: dict[str, Any], latencies: list[float]) -> float:
    await client.reset(task_id=task["task_id"])
    calls = [(a["name"], a["arguments"]) for a in golden_actions(task)]
    calls.append(("respond", {"message": outcome_message(task)}))
    result = None
    for name, arguments in calls:
        start = time.perf_counter()
        result = await client.step(CallToolAction(tool_name=name, arguments=arguments))
        latencies.append(time.perf_counter() - start)
        if result.done:
            break
    return float(result.reward or 0.0)


def inprocess_episode(episode: ServedEpisode, task: dict[str, Any], latencies: list[float]) -> float:
    episode.start(task)
    outcome = None
    for action in golden_actions(task):
        start = time.perf_counter()
        outcome = episode.call(action["name"], action["arguments"])
        latencies.append(time.perf_counter() - start)
        if outcome.done:
            return outcome.reward
    start = time.perf_counter()
    outcome = episode.respond(outcome_message(task))
    latencies.append(time.perf_counter() - start)
    return outcome.reward


def same_rewards(url: str, served: ServedTasks) -> tuple[int, int, int]:
    """(tasks, tasks whose server reward equals the in-process one, tasks scoring 1 in process)."""
    async def through_server() -> dict[str, float]:
        async with GymforgeEnvClient(base_url=url) as client:
            return {tid: await server_episode(client, t, []) for tid, t in sorted(served.tasks.items())}

    remote = asyncio.run(through_server())
    local = {tid: replay(NoisyEnvironment(served.environment_of(t)), t).reward for tid, t in served.tasks.items()}
    return len(local), sum(remote[t] == local[t] for t in local), sum(r == 1.0 for r in local.values())


def load(url: str, tasks: list[dict[str, Any]], sessions: int, seconds: float) -> tuple[int, float, list[float]]:
    """``sessions`` clients replaying golden episodes (each its own task order) for ``seconds``; (steps, wall
    seconds, step latencies)."""
    latencies: list[float] = []

    async def session(i: int, stop: float) -> None:
        async with GymforgeEnvClient(base_url=url, message_timeout_s=120) as client:
            n = i
            while time.perf_counter() < stop:
                await server_episode(client, tasks[n % len(tasks)], latencies)
                n += sessions

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(session(i, start + seconds) for i in range(sessions)))
        return time.perf_counter() - start

    wall = asyncio.run(run())
    return len(latencies), wall, latencies


def in_process(served: ServedTasks, seconds: float) -> tuple[int, float, list[float]]:
    latencies: list[float] = []
    episode = ServedEpisode(served)
    tasks = [served.tasks[t] for t in sorted(served.tasks)]
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        inprocess_episode(episode, tasks[n % len(tasks)], latencies)
        n += 1
    return len(latencies), time.perf_counter() - start, latencies


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1] if len(values) > 1 else values[0]


def memory_per_session(url: str, server: Server, tasks: list[dict[str, Any]], sessions: int = 64) -> tuple[float, float]:
    """(resident MiB with no session, MiB per open session) after ``sessions`` sessions each reset."""
    time.sleep(1)
    idle = server.rss()

    async def hold() -> int:
        clients = [GymforgeEnvClient(base_url=url) for _ in range(sessions)]
        for i, client in enumerate(clients):
            await client.connect()
            await client.reset(task_id=tasks[i % len(tasks)]["task_id"])
        held = server.rss()
        for client in clients:
            await client.close()
        return held

    held = asyncio.run(hold())
    return idle / 2**20, (held - idle) / sessions / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="a data root holding the environment artifacts (a demo)")
    parser.add_argument("--artifacts", nargs="+", default=list(ARTIFACTS), help="stage names or keys to replay")
    parser.add_argument("--load-artifact", default="environments", help="the artifact the throughput load replays")
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each load level")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to bench/RESULTS.md")
    args = parser.parse_args()

    lines = ["", f"## Environment server vs in-process environment ({date.today()}, bench/bench_env_server.py)", "",
             (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, shared "
              f"(load average {os.getloadavg()[0]:.1f} at the start). Server: `gymforge serve-env` in its own "
              "process; clients: OpenEnv's MCPToolClient (gymforge's subclass) over WebSocket in this one."), "",
             "Golden replays, server vs in process, on every task of the data root's artifacts:", "",
             "| artifact | tasks | same reward | reward 1 in process |", "| --- | --- | --- | --- |"]
    with ExitStack() as started:
        # every server starts at once (their imports overlap); the last one stays untouched for the memory figure
        servers = [Server(ref, args.data_dir, max_sessions=128) for ref in (*args.artifacts, args.load_artifact)]
        for server in servers:
            server.start()
        for server in servers:
            started.enter_context(server)
        for ref, server in zip(args.artifacts, servers, strict=False):
            served = served_artifact(ref, args.data_dir)
            n, same, ones = same_rewards(server.url, served)
            lines.append(f"| {served.source} | {n} | {same} | {ones} |")
            print(lines[-1], flush=True)

        served = served_artifact(args.load_artifact, args.data_dir)
        tasks = [served.tasks[t] for t in sorted(served.tasks)]
        steps, wall, latencies = in_process(served, args.seconds)
        base = steps / wall
        lines += ["", (f"Throughput and step latency on {served.source} ({len(tasks)} tasks, golden episodes, "
                       f"{args.seconds:g} s per level):"), "",
                  "| where | sessions | steps/s | vs in process | p50 step ms | p99 step ms |",
                  "| --- | --- | --- | --- | --- | --- |",
                  (f"| in process (ServedEpisode) | 1 | {base:.0f} | 1.00 | {quantile(latencies, .5) * 1e3:.2f} | "
                   f"{quantile(latencies, .99) * 1e3:.2f} |")]
        print(lines[-1], flush=True)
        loaded = servers[args.artifacts.index(args.load_artifact)] if args.load_artifact in args.artifacts \
            else servers[-1]
        for sessions in SESSIONS:
            steps, wall, latencies = load(loaded.url, tasks, sessions, args.seconds)
            lines.append(f"| serve-env | {sessions} | {steps / wall:.0f} | {steps / wall / base:.2f} | "
                         f"{quantile(latencies, .5) * 1e3:.2f} | {quantile(latencies, .99) * 1e3:.2f} |")
            print(lines[-1], flush=True)
        idle_mb, per_session_mb = memory_per_session(servers[-1].url, servers[-1], tasks)
    db_kib = sum(len(served.environment_of(t)["db"]) for t in tasks) / len(tasks) / 1024
    lines += ["", (f"Memory: the server holds {idle_mb:.0f} MiB resident with no session; each open session (reset: "
                   f"its FastMCP server, episode and SQLite connection) adds {per_session_mb:.2f} MiB resident (64 "
                   f"sessions), and its database copy, a file of {db_kib:.0f} KiB on average, on disk."), ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        with (Path(__file__).parent / "RESULTS.md").open("a") as out:
            out.write(text)


if __name__ == "__main__":
    main()
