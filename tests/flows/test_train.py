"""The `train_sft` flow on a real Prefect server, as an ML engineer runs it: the tiny profile's config publishes a
model artifact that `gymforge serve` and the `hf:` engine load, a re-run is a cache hit, a killed run publishes
nothing and `--resume` continues from its last complete checkpoint, and the `train-sft` deployment runs on a `gpu`
pool worker, one run at a time. A micro model and short conversations keep the training itself to seconds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sft_fixtures import double_trajectories, micro_base

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from inference.checkpoint import read_card

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GYMFORGE = str(Path(sys.executable).parent / "gymforge")
# The tiny profile's sft section, shortened for the micro model: every other field is the profile's.
OVERRIDES = {"max_steps": 6, "save_steps": 3, "max_length": 1024, "learning_rate": 1e-2, "eval_tool_calls": 2}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A data root holding a published trajectory artifact, and a base model directory."""
    data = tmp_path_factory.mktemp("train") / "data"
    key = execute_stage(open_store(data), Catalog(data), double_trajectories, {}, {}, "p0").key
    return data, key, micro_base(data.parent / "base")


@pytest.fixture()
def env(root: tuple[Path, str, Path]) -> dict[str, str]:
    data, _, _ = root
    environ = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")}
    return {**environ, "GYMFORGE_DATA": str(data)}


def test_the_flow_publishes_a_servable_model_and_is_cached_on_a_rerun(root, env, monkeypatch, runtime):
    from flows.runtime import Runtime
    from flows.train import train_sft
    from inference.engine import Request, SamplingParams
    from inference.engine_factory import load_engine

    data, key, base = root
    args = {"data": [key], "base": str(base), "profile": "tiny", "overrides": OVERRIDES, "data_dir": str(data)}
    with Runtime(data, prefect_api_url=runtime.prefect_api_url, dask=False):
        first = train_sft(**args)
        again = train_sft(**args)
    assert not first["cached"] and again["cached"] and again["key"] == first["key"]
    assert first["steps"] == 6 and first["evaluation"]
    model = open_store(data).get("sft", first["key"]).directory
    assert read_card(model)["config"]["use_cpu"] is True  # the tiny profile's setting
    assert not (data / "checkpoints" / "sft" / first["key"]).exists()  # served their purpose once published
    assert (data / "figures" / f"sft-{first['key']}.png").is_file()
    # A run continuing this model (a cold start's next phase): a stage is never its own input, so the model enters
    # by its directory, whose content keys the run.
    from flows.train import plan_sft

    continued = plan_sft([key], first["key"], overrides=OVERRIDES, data_dir=str(data))
    assert continued.params.model_name_or_path == str(model.resolve()) and "sft" not in continued.input_keys
    assert continued.key != first["key"]
    runs = _flow_runs(data, first["key"], runtime.prefect_api_url)  # the first run and its cache hit, told apart by name
    assert sorted(run["name"] for run in runs) == [f"train-sft base 6 steps -> {first['key'][:8]}",
                                                   f"train-sft base 6 steps -> {first['key'][:8]} (cached)"]
    published_run = next(run for run in runs if not run["name"].endswith("(cached)"))
    lines = [log["message"] for log in published_run["logs"]]
    steps = [line for line in lines if line.startswith("sft step ")]
    assert any("loss" in line and "tokens/s" in line and "eta" in line for line in steps), lines
    assert any(line.startswith("sft step 6/6") and "done in" in line for line in steps)
    artifacts = {a["key"]: a for a in published_run["artifacts"]}
    assert artifacts["sft-progress"]["data"] == 100.0 and "step 6 of 6" in artifacts["sft-progress"]["description"]
    table = json.loads(artifacts["sft-live-metrics"]["data"])
    assert [row["step"] for row in table][-1] == 6 and all("loss" in row for row in table[1:])
    assert not any("Traceback" in line for line in lines)

    monkeypatch.setenv("GYMFORGE_DATA", str(data))
    [[completion]] = load_engine(f"hf:{first['key']}").generate(
        [Request(messages=[{"role": "user", "content": "Book 2 seats on X12."}], sampling=SamplingParams(0.0, 1.0, 4))])
    assert completion.token_ids

    port = _free_port()
    server = subprocess.Popen([GYMFORGE, "serve", "--model", first["key"], "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = _wait_for_json(f"http://127.0.0.1:{port}/v1/models")
        assert body["data"][0]["id"] == first["key"]
        import httpx

        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60, json={
            "model": first["key"], "max_tokens": 4, "messages": [{"role": "user", "content": "Book 2 seats"}]})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["role"] == "assistant"
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_a_killed_run_publishes_nothing_and_resume_continues_it(root, attached):
    """20 steps three times over (killed, resumed, and uninterrupted to compare with); the run is held at its
    step-15 line (tests/support/held_progress_double.py) when it is killed, so the kill lands between its checkpoints
    (10 and 20) however fast the micro model trains. Slow (about 30 s on 2 cores) by its subject: three training
    runs, two of them processes of their own that import torch and transformers."""
    from held_progress_double import HELD

    from flows.train import plan_sft

    data, key, base = root
    env = attached(data)
    settings = {**OVERRIDES, "max_steps": 20, "save_steps": 10, "logging_steps": 5, "eval_tool_calls": 0,
                "learning_rate": 1e-3}
    args = ["train", "sft", "--data", key, "--base", str(base),
            *(arg for name, value in settings.items() for arg in ("--set", f"{name}={value}"))]
    planned = plan_sft([key], str(base), overrides=settings, data_dir=str(data))
    checkpoints = planned.checkpoints

    # held at each logged line (steps 5, 10, 15) until this test lets it through: a line is logged before its
    # step's checkpoint is saved, so the first line held after a complete checkpoint lies between two of them
    run = subprocess.Popen([sys.executable, "-m", "held_progress_double", *args], env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert run.stdin is not None and run.stdout is not None
        while not (held := run.stdout.readline()).startswith(HELD) or not list(
                checkpoints.glob("checkpoint-*/gymforge_checkpoint_complete")):
            assert held, "the run ended before its first checkpoint"
            if held.startswith(HELD):
                run.stdin.write("\n")
                run.stdin.flush()
        assert held.startswith(f"{HELD} 15/20"), held
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    store = open_store(data)
    assert store.get("sft", planned.key) is None and not (data / "artifacts" / "sft" / planned.key).exists()
    assert Catalog(data).entry(planned.key) is None
    saved = max(int(p.parent.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*/gymforge_checkpoint_complete"))

    resumed = subprocess.run([GYMFORGE, *args, "--resume"], env=env, capture_output=True, text=True, timeout=900,
                             check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    artifact = store.get("sft", planned.key)
    assert artifact is not None and f"sft {planned.key} published" in resumed.stdout
    card = read_card(artifact.directory)
    assert card["resumed_from_step"] >= saved and card["steps"] == 20
    assert not store.leftovers() or all(p.name.startswith(".tmp-") for p in store.leftovers())

    # the same run uninterrupted ends with the same weights, bit for bit (the kill fell in a later epoch)
    whole = data.parent / "uninterrupted"
    whole.mkdir()
    inputs = {stage: store.get(stage, input_key) for stage, input_key in planned.input_keys.items()}
    planned.stage.run(inputs, planned.params.model_copy(update={"output_dir": str(data.parent / "whole-ck"),
                                                                 "resume_from_checkpoint": False}), "default", whole)
    assert _tensors(whole / "model.safetensors") == _tensors(artifact.directory / "model.safetensors")


@pytest.mark.xdist_group("deployments")
def test_the_train_sft_deployment_runs_on_a_gpu_pool_worker_one_at_a_time(root, deployed):
    """On the session's deployments (``deployed``: a cpu pool worker holds their data root's server up); the run
    trains on this module's data root, named by its ``data_dir`` parameter."""
    data, key, base = root
    worker = subprocess.Popen([GYMFORGE, "worker", "--pool", "gpu"], env=deployed.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert worker.stdout is not None
        banner = worker.stdout.readline()  # it leases the data root's server while it runs
        assert "worker of pool 'gpu'" in banner, banner
        api_url = banner.split(" at ")[1].split(";")[0].rstrip("/") + "/api"
        state, pool, deployment = _run_deployment(api_url, {
            "data": [key], "base": str(base), "overrides": {**OVERRIDES, "max_steps": 4}, "data_dir": str(data)})
        assert state == "Completed"
        assert pool["concurrency_limit"] == 1 and pool["type"] == "process"
        assert deployment["concurrency_limit"] == 1 and deployment["work_pool_name"] == "gpu"
        # a misspelt deployment parameter: the run fails with one clean line in its logs, no traceback
        state, _, deployment = _run_deployment(api_url, {"data": [key], "base": str(base), "data_dir": str(data),
                                                         "overrides": {"lerning_rate": 1e-3}})
        assert state == "Failed"
        errors = [log["message"] for log in deployment["logs"] if log["level"] >= 40]
        assert errors == ["sft: lerning_rate is not a field (did you mean learning_rate?)"], deployment["logs"]
        assert not any("Traceback" in log["message"] for log in deployment["logs"])
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    assert len(Catalog(data).entries(stage="sft", status="published")) >= 1


def _tensors(path: Path) -> dict[str, bytes]:
    from safetensors.torch import load_file

    return {name: tensor.numpy().tobytes() for name, tensor in load_file(str(path)).items()}


def _flow_runs(data: Path, key: str, api_url: str) -> list[dict]:
    """The training flow runs whose names carry ``key``, with their logs and artifacts, from the data root's server."""
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.client.schemas.sorting import LogSort

    from flows.runtime import Runtime

    async def read() -> list[dict]:
        async with get_client() as client:
            runs = [r for r in await client.read_flow_runs(flow_run_filter=FlowRunFilter()) if key[:8] in r.name]
            out = []
            for run in runs:
                logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])),
                                              sort=LogSort.TIMESTAMP_ASC)
                artifacts = await client.read_artifacts(
                    artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
                out.append({"name": run.name, "logs": [log.model_dump() for log in logs],
                            "artifacts": [a.model_dump(mode="json") for a in artifacts]})
            return out

    with Runtime(data, prefect_api_url=api_url, dask=False):
        return asyncio.run(read())


def _run_deployment(api_url: str, parameters: dict) -> tuple[str, dict, dict]:
    import asyncio

    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        flow_run = run_deployment("train-sft/train-sft", parameters=parameters, timeout=0)

        async def wait() -> tuple[str, dict, dict]:
            async with get_client() as client:
                deadline = time.monotonic() + 600
                while True:
                    run = await client.read_flow_run(flow_run.id)
                    if run.state is not None and run.state.is_final():
                        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

                        pool = await client.read_work_pool("gpu")
                        deployment = await client.read_deployment(run.deployment_id)
                        # the run's process sends its logs in batches: wait for the engine's last line
                        logs = []
                        while not any(log.message.startswith("Finished in state") for log in logs):
                            assert time.monotonic() < deadline, f"the run's logs never ended: {logs}"
                            await asyncio.sleep(0.5)
                            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
                        return (run.state.name, pool.model_dump(mode="json"),
                                {"concurrency_limit": deployment.global_concurrency_limit.limit
                                 if deployment.global_concurrency_limit else None,
                                 "work_pool_name": deployment.work_pool_name,
                                 "logs": [log.model_dump() for log in logs]})
                    assert time.monotonic() < deadline, f"the run is still {run.state}"
                    await asyncio.sleep(2)

        return asyncio.run(wait())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_json(url: str, timeout_s: float = 180) -> dict:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return json.loads(httpx.get(url, timeout=5).text)
        except (httpx.HTTPError, json.JSONDecodeError):
            assert time.monotonic() < deadline, f"{url} did not answer in {timeout_s} s"
            time.sleep(0.5)
