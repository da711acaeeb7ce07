"""The OpenEnv-compatible environment server, driven by OpenEnv's own clients over a real uvicorn server: golden
replays through MCP score 1 and a wrong-row replay 0, concurrent sessions keep their own databases, and every bad
input gets an error naming it while the server goes on serving."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest
import websockets
from env_server_fixtures import env_and_task, running, served_pair
from openenv.core.env_server import CallToolAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from envgen.environment import Environment, domain_for, json_field, outcome_message
from envgen.taskgen import mutate
from inference.environments.client import GymforgeEnvClient
from inference.environments.server import ServerSettings, create_app
from inference.environments.tasks import golden_actions


@pytest.fixture(scope="module")
def served() -> Any:
    return served_pair()


@pytest.fixture(scope="module")
def url(served: Any) -> Any:
    with running(create_app(served, ServerSettings(max_sessions=16)), ws_max_size=1 << 20) as base:
        yield base


async def replay(base: str, task: dict[str, Any], actions: list[dict[str, Any]]) -> Any:
    """Reset on ``task``, call ``actions`` through MCP, tell the user the outcome; the last step's result."""
    async with GymforgeEnvClient(base_url=base) as env:
        await env.reset(task_id=task["task_id"])
        for action in actions:
            await env.step(CallToolAction(tool_name=action["name"], arguments=action["arguments"]))
        return await env.step(CallToolAction(tool_name="respond", arguments={"message": outcome_message(task)}))


def test_golden_replay_through_openenv_mcp_client_scores_one(url: str, served: Any) -> None:
    async def episode(task: dict[str, Any]) -> tuple[list[str], dict[str, Any], Any, Any]:
        async with MCPToolClient(base_url=url) as env:  # OpenEnv's stock client, nothing of gymforge's
            await env.reset(task_id=task["task_id"])
            tools = {t.name: t.input_schema for t in await env.list_tools()}
            results = [await env.call_tool(a["name"], **a["arguments"]) for a in golden_actions(task)]
            end = await env.step(CallToolAction(tool_name="respond", arguments={"message": outcome_message(task)}))
            return results, tools, end, await env.state()

    for task in served.tasks.values():
        results, tools, end, state = asyncio.run(episode(task))
        offered = {s["function"]["name"]: s["function"]["parameters"] for s in json_field(
            served.environment_of(task)["tools"])}
        assert {name: schema for name, schema in tools.items() if name != "respond"} == offered
        assert tools["respond"]["required"] == ["message"]
        assert all("error" not in json.loads(r) for r in results)  # each tool's own JSON result, no refusal
        assert (end.reward, end.done) == (1.0, True)
        assert state.step_count == len(golden_actions(task)) + 1


def test_the_episode_fields_reach_the_gymforge_client(url: str, served: Any) -> None:
    task = next(iter(served.tasks.values()))

    async def run() -> Any:
        async with GymforgeEnvClient(base_url=url) as env:
            return await env.reset(task_id=task["task_id"], episode_id="ep-1")

    start = asyncio.run(run())
    assert start.observation.episode_id == "ep-1"
    assert [m["role"] for m in start.observation.messages] == ["system", "user"]
    assert start.observation.messages[1]["content"] == task["description"]
    end = asyncio.run(replay(url, task, golden_actions(task)))
    assert end.observation.reward_components == {"db_state": 1.0, "required_outputs": 1.0, "policy": 1.0}
    assert end.observation.failure is None and end.observation.info["tool_calls"] == len(golden_actions(task))


def test_a_wrong_row_replay_scores_zero(url: str, served: Any) -> None:
    env, task = env_and_task("airline")
    wrong = mutate(domain_for(env), env, task, "wrong-row", random.Random(0))
    assert wrong is not None
    actions = [{"name": a["name"], "arguments": json_field(a["arguments"])} for a in wrong]
    end = asyncio.run(replay(url, task, actions))
    assert (end.reward, end.done, end.observation.failure) == (0.0, True, "agent")
    assert end.observation.reward_components["db_state"] == 0.0


def test_concurrent_sessions_never_see_each_others_writes(url: str, served: Any) -> None:
    """Eight sessions on two tasks run at once; and a session reading the row another one wrote sees it
    unwritten."""
    env, task = env_and_task("airline")
    write = golden_actions(task)[-1]
    # a read of the task whose result the write changes (the record it books, cancels or charges)
    local = Environment(env)
    local.reset(task)
    reads = golden_actions(task)[:-1]
    before = [local.call_tool(c["name"], c["arguments"]).content for c in reads]
    local.call_tool(write["name"], write["arguments"])
    changed = next(c for c, old in zip(reads, before, strict=True)
                   if local.call_tool(c["name"], c["arguments"]).content != old)
    local.close()

    async def isolated() -> tuple[str, str]:
        async with GymforgeEnvClient(base_url=url) as a, GymforgeEnvClient(base_url=url) as b:
            await a.reset(task_id=task["task_id"])
            await b.reset(task_id=task["task_id"])
            read = CallToolAction(tool_name=changed["name"], arguments=changed["arguments"])
            before = (await b.step(read)).observation.content
            await a.step(CallToolAction(tool_name=write["name"], arguments=write["arguments"]))
            written = (await a.step(read)).observation.content
            return before, written, (await b.step(read)).observation.content

    before, written, after = asyncio.run(isolated())
    assert written != before  # the write changed session a's row...
    assert after == before  # ...and not session b's

    async def many() -> list[Any]:
        tasks = [t for t in served.tasks.values() for _ in range(4)]
        return await asyncio.gather(*(replay(url, t, golden_actions(t)) for t in tasks))

    assert [r.reward for r in asyncio.run(many())] == [1.0] * 8


async def raw(url: str, frames: list[str]) -> list[dict[str, Any]]:
    """Send each frame on one raw WebSocket session and read one answer to each."""
    async with websockets.connect(url.replace("http", "ws") + "/ws") as ws:
        answers = []
        for frame in frames:
            await ws.send(frame)
            answers.append(json.loads(await ws.recv()))
        return answers


def step(name: str, arguments: Any) -> str:
    return json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": name, "arguments": arguments}})


def test_bad_input_gets_an_error_naming_it_and_serving_goes_on(url: str, served: Any) -> None:
    _, task = env_and_task("airline")
    write = golden_actions(task)[-1]
    key = next(iter(write["arguments"]))
    reset = json.dumps({"type": "reset", "data": {"task_id": task["task_id"]}})
    answers = asyncio.run(raw(url, [
        "{not json",
        json.dumps({"type": "dance"}),
        step(write["name"], write["arguments"]),  # before any reset
        json.dumps({"type": "reset", "data": {"task_id": "no-such-task"}}),
        json.dumps({"type": "reset", "data": {"task_id": task["task_id"], "colour": "red"}}),
        reset,
        step("no_such_tool", {}),
        step(write["name"], {key: 12345, "extra": True}),
        step(write["name"], {key: "x" * 70_000}),
        json.dumps({"type": "step", "data": {"type": "call_tool"}}),
        step(*golden_actions(task)[-1].values()),
        step("respond", {"message": outcome_message(task)}),
        step("respond", {"message": "one more thing"}),
    ]))
    codes = [a["data"].get("code") for a in answers]
    assert codes[:2] == ["INVALID_JSON", "UNKNOWN_TYPE"]
    assert "reset first" in answers[2]["data"]["observation"]["error"]["message"]
    assert "unknown task_id 'no-such-task'" in answers[3]["data"]["message"]
    assert "unknown parameters ['colour']" in answers[4]["data"]["message"]
    assert answers[5]["type"] == "observation" and answers[5]["data"]["observation"]["task_id"] == task["task_id"]
    assert "no_such_tool" in answers[6]["data"]["observation"]["error"]["message"]
    refused = json.loads(answers[7]["data"]["observation"]["content"])["error"]
    assert refused.startswith(f"invalid arguments for {write['name']}") and "extra" in refused
    assert "the limit is 65536" in json.loads(answers[8]["data"]["observation"]["content"])["error"]
    assert codes[9] == "VALIDATION_ERROR"
    assert answers[11]["data"]["reward"] == 1.0 and answers[11]["data"]["done"]  # the refusals cost nothing
    assert "has ended (reward 1)" in answers[12]["data"]["observation"]["error"]["message"]

    async def oversized() -> Any:
        async with websockets.connect(url.replace("http", "ws") + "/ws") as ws:
            await ws.send(step("respond", {"message": "x" * (2 << 20)}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            return closed.value

    closed = asyncio.run(oversized())
    assert closed.rcvd.code == 1009  # message too big: that connection only
    with httpx.Client(base_url=url) as http:
        refused_reset = http.post("/reset", json={"task_id": "no-such-task"})
        assert refused_reset.status_code == 422 and "no-such-task" in refused_reset.json()["detail"]
        too_big = http.post("/reset", content=b"{" + b" " * (2 << 20) + b"}",
                            headers={"content-type": "application/json"})
        assert too_big.status_code == 413 and "over the limit" in too_big.json()["detail"]
    assert asyncio.run(replay(url, task, golden_actions(task))).reward == 1.0


def test_the_server_says_what_it_serves(url: str, served: Any) -> None:
    with httpx.Client(base_url=url) as http:
        health = http.get("/health").json()
        listed = http.get("/tasks").json()["tasks"]
        metadata = http.get("/metadata").json()
        schema = http.get("/schema").json()
    assert health["status"] == "healthy" and health["artifact"] == "fixture/pair" and health["version"] == "1"
    assert (health["tasks"], health["domains"], health["sessions"]["max"]) == (2, ["airline", "hotel"], 16)
    assert sorted(t["task_id"] for t in listed) == sorted(served.tasks)
    assert "fixture/pair" in metadata["version"]
    assert "reward_components" in schema["observation"]["properties"]


def test_a_generic_openenv_client_draws_a_task_by_seed(url: str, served: Any) -> None:
    async def draw(seed: int) -> str:
        async with GenericEnvClient(base_url=url) as env:
            return (await env.reset(seed=seed)).observation["task_id"]

    drawn = [asyncio.run(draw(seed)) for seed in (0, 0, 1, 2, 3)]
    assert drawn[0] == drawn[1] and set(drawn) <= set(served.tasks)


def test_sessions_are_capped_and_idle_ones_closed(served: Any) -> None:
    """Waits for OpenEnv's reaper, which looks every max(timeout/4, 5 s): about 6 s."""
    import time

    with running(create_app(served, ServerSettings(max_sessions=1, idle_timeout_s=1.0))) as base:
        async def capped() -> dict[str, Any]:
            async with GymforgeEnvClient(base_url=base) as first:
                await first.reset()
                async with websockets.connect(base.replace("http", "ws") + "/ws") as second:
                    return json.loads(await second.recv())  # refused as it opens, before it asks anything

        assert asyncio.run(capped())["data"]["code"] == "CAPACITY_REACHED"

        async def idle() -> tuple[int, int]:
            with httpx.Client(base_url=base) as http:
                def active() -> int:
                    return http.get("/health").json()["sessions"]["active"]

                async def settled(deadline: float) -> int:
                    while active() and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                    return active()

                await settled(time.monotonic() + 5)  # the capped sessions' closing
                async with websockets.connect(base.replace("http", "ws") + "/ws") as ws:
                    await ws.send(json.dumps({"type": "reset", "data": {}}))
                    assert json.loads(await ws.recv())["type"] == "observation"
                    opened = active()
                    return opened, await settled(time.monotonic() + 12)

        assert asyncio.run(idle()) == (1, 0)


def test_a_session_reset_onto_another_task_offers_that_tasks_tools(url: str, served: Any) -> None:
    first, second = sorted(served.tasks.values(), key=lambda t: t["task_id"])

    async def two_episodes() -> tuple[set[str], set[str], float]:
        async with MCPToolClient(base_url=url) as env:
            await env.reset(task_id=first["task_id"])
            before = {t.name for t in await env.list_tools(use_cache=False)}
            await env.reset(task_id=second["task_id"])
            after = {t.name for t in await env.list_tools(use_cache=False)}
        return before, after, (await replay(url, second, golden_actions(second))).reward

    before, after, reward = asyncio.run(two_episodes())
    def names(task: dict[str, Any]) -> set[str]:
        return {s["function"]["name"] for s in json_field(served.environment_of(task)["tools"])} | {"respond"}

    assert (before, after, reward) == (names(first), names(second), 1.0)


def test_the_openenv_manifest_names_an_app_serving_the_artifact(tmp_path: Any, monkeypatch: Any) -> None:
    import importlib
    import sys
    from pathlib import Path

    import yaml
    from env_server_fixtures import publish_pair
    from fastapi.testclient import TestClient

    from inference.environments import server

    manifest = yaml.safe_load((Path(server.__file__).parent / "openenv.yaml").read_text())
    assert (manifest["spec_version"], manifest["runtime"], manifest["port"]) == (1, "fastapi", 8000)
    module, attribute = manifest["app"].split(":")
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delenv("GYMFORGE_ENV_ARTIFACT", raising=False)
    with pytest.raises(RuntimeError, match="set GYMFORGE_ENV_ARTIFACT"):
        importlib.import_module(module)
    key = publish_pair(tmp_path)
    monkeypatch.setenv("GYMFORGE_ENV_ARTIFACT", key)
    monkeypatch.setenv("GYMFORGE_DATA", str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with TestClient(getattr(importlib.import_module(module), attribute)) as client:
        assert client.get("/health").json()["artifact"] == f"test_double_environments/{key}"


def test_the_server_imports_openenv_without_gradio_and_leaves_it_importable() -> None:
    """OpenEnv's web UI (gradio, about 5 CPU-s to import) is not what gymforge serves: a process that imports the
    server and client has no gradio, nor a hidden one left behind."""
    import subprocess
    import sys

    probe = ("import sys, inference.environments.server, inference.environments.client; "
             "print(sorted(name for name in sys.modules if name.partition('.')[0] in ('gradio', 'gradio_client')), "
             "sys.modules['openenv.core.env_server'].create_web_interface_app)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["[]", "None"], done.stdout + done.stderr
