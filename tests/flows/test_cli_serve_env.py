"""`gymforge serve-env` as a user starts it: an artifact of a data root by key, served until stopped; a name the
root does not hold is refused with the reason and no traceback."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from env_server_fixtures import publish_pair, served_pair
from openenv.core.env_server import CallToolAction
from typer.testing import CliRunner

from envgen.environment import outcome_message
from flows.cli import app
from inference.environments.client import GymforgeEnvClient
from inference.environments.tasks import golden_actions


def test_serve_env_serves_an_artifact_by_key(tmp_path: Path) -> None:
    """Starts the command in a process of its own (10-20 s: its imports, then the server)."""
    key = publish_pair(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gymforge = str(Path(sys.executable).parent / "gymforge")
    server = subprocess.Popen([gymforge, "serve-env", key, "--data-dir", str(tmp_path), "--port", str(port),
                               "--max-sessions", "4"], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                health = httpx.get(f"{url}/health", timeout=1).json()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and server.poll() is None, "serve-env did not start"
                time.sleep(0.2)
        assert health["artifact"] == f"test_double_environments/{key}" and health["sessions"]["max"] == 4
        task = next(iter(served_pair().tasks.values()))

        async def golden() -> float:
            async with GymforgeEnvClient(base_url=url) as env:
                await env.reset(task_id=task["task_id"])
                for action in golden_actions(task):
                    await env.step(CallToolAction(tool_name=action["name"], arguments=action["arguments"]))
                end = await env.step(CallToolAction(tool_name="respond",
                                                    arguments={"message": outcome_message(task)}))
                return end.reward

        assert asyncio.run(golden()) == 1.0
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    assert f"serving 2 tasks of test_double_environments/{key}" in out


def test_serve_env_refuses_an_artifact_the_root_does_not_hold(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve-env", "nonsense", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "no artifact 'nonsense'" in result.output
    assert "Traceback" not in result.output
