"""The `train_sft` flow on a real Prefect server, as an ML engineer runs it: the tiny profile's config publishes a
model artifact that `gymforge serve` and the `hf:` engine load, a re-run is a cache hit, a killed run publishes
nothing and `--resume` continues from its last complete checkpoint (the `train-sft` deployment on a `gpu` pool worker:
tests/flows/test_deploy.py). A micro model and short conversations keep the training itself to seconds."""

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
from sft_fixtures import MICRO_SFT, training_root

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from inference.checkpoint import read_card

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GYMFORGE = str(Path(sys.executable).parent / "gymforge")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    return training_root(tmp_path_factory.mktemp("train"))


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
    args = {"data": [key], "base": str(base), "profile": "tiny", "overrides": MICRO_SFT, "data_dir": str(data)}
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

    continued = plan_sft([key], first["key"], overrides=MICRO_SFT, data_dir=str(data))
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
    settings = {**MICRO_SFT, "max_steps": 20, "save_steps": 10, "logging_steps": 5, "eval_tool_calls": 0,
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
