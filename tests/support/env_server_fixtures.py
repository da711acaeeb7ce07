"""Shared fixtures of the environment-server tests: two small verified environments of different domains with a
task each, and a real uvicorn server run in a thread of the test process."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=4)
def env_and_task(domain_name: str, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """A small environment of ``domain_name`` (at least 4 tools, one chain) and a verified task in it."""
    from envgen.compiler import compile_domain
    from envgen.construct import ConstructionSettings, build_environment
    from envgen.domain_spec import load_domain
    from envgen.taskgen import TaskSettings, environment_record, make_task

    domain = compile_domain(load_domain(domain_name))
    built = build_environment(domain, seed, ConstructionSettings(min_tools=4, max_chains=1))
    env = environment_record(domain, built, f"{domain_name}-{seed}", seed)
    task, reason = make_task(domain, env, built, random.Random(seed), TaskSettings())
    if task is None:
        raise RuntimeError(f"fixture task of {domain_name} was rejected: {reason}")
    return env, task


def served_pair() -> Any:
    """Served tasks of two domains (airline, hotel): two environments, two tasks."""
    from inference.environments.tasks import ServedTasks

    pairs = [env_and_task("airline"), env_and_task("hotel")]
    return ServedTasks.from_rows([e for e, _ in pairs], [t for _, t in pairs], "fixture/pair", "1")


@contextmanager
def running(app: Any, ws_max_size: int = 1 << 20) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields its base URL, stops it after."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           ws_max_size=ws_max_size))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@lru_cache(maxsize=1)
def pair_stage() -> Any:
    """The test-double stage ``test_double_environments`` (declared once per process: a stage name is unique)."""
    import polars as pl

    from data_contracts.stage import Contract, Params, stage

    class NoParams(Params):
        pass

    rows = Contract(columns={"env_id": pl.String}, min_rows=1)

    @stage(name="test_double_environments", version="1", params=NoParams,
           outputs={"environments": rows, "tasks": rows})
    def environments(inputs: Any, params: NoParams, partition: str) -> dict[str, Any]:
        """Test double: two environments and their tasks, as the environments stage publishes them."""
        served = served_pair()
        return {"environments": pl.DataFrame(list(served.environments.values())),
                "tasks": pl.DataFrame(list(served.tasks.values()))}

    return environments


def publish_pair(root: Any) -> str:
    """Publish :func:`served_pair`'s environments and tasks as an artifact of ``test_double_environments`` in the
    data root ``root``; its key."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import execute_stage

    return execute_stage(open_store(root), Catalog(root), pair_stage(), {}, {}, "default").key
