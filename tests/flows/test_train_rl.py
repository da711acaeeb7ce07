"""The `train_rl` flow on a real Prefect server, as an ML engineer runs it: two controller processes serve the
tiny model, one of them is killed with samples handed to it, and the run still publishes a model artifact, its
sample audit trail and its step metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from inference_support import tiny_checkpoint
from rl_fixtures import double_prompts

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The tiny profile's rl section, shortened: every other field is the profile's. The untrained tiny model scores 0 on
# these prompts, so nothing is learned: this test is about surviving a killed engine, and publishes anyway.
OVERRIDES = {"steps": 6, "batch_size": 8, "num_generations": 4, "controllers": 2, "concurrency": 4,
             "checkpoint_every": 3, "sampling": {"max_tokens": 8}, "allow_untrained": True}
GYMFORGE = str(Path(sys.executable).parent / "gymforge")


def kill_a_controller_holding_samples(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL a rollout controller process half a second after it appeared: the manager hands a new controller its
    first samples within milliseconds, and loading torch and the engine takes seconds, so the dead engine holds
    samples that no "done" message has reported (killed later, it may have reported them all, and nothing is handed
    out again). Processes running before this thread are no controllers (a session's Dask workers), nor is a fork
    server (this process's child; the controllers it forks are its children)."""
    earlier = {child.pid for child in psutil.Process().children(recursive=True)}
    seen: dict[int, float] = {}  # when each new controller process was first seen (psutil's create_time can be off)
    while not stop.is_set():
        for child in psutil.Process().children(recursive=True):
            try:
                command = " ".join(child.cmdline())
                fork_server = "multiprocessing.forkserver" in command and child.ppid() == os.getpid()
                if child.pid in earlier or "multiprocessing." not in command or fork_server:
                    continue
                if time.monotonic() - seen.setdefault(child.pid, time.monotonic()) > 0.5:
                    child.kill()
                    killed.append(child.pid)
                    return
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)


def test_the_flow_survives_a_killed_engine_and_publishes_a_model(tmp_path, runtime):
    from flows.runtime import Runtime
    from flows.train import plan_rl, train_rl

    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    base = str(tiny_checkpoint())
    run = plan_rl([prompts], base, overrides=OVERRIDES, data_dir=str(data))
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=kill_a_controller_holding_samples, args=(killed, stop), daemon=True)
    killer.start()
    try:
        with Runtime(data, prefect_api_url=runtime.prefect_api_url, dask=False):
            result = train_rl(tasks=[prompts], base=base, overrides=OVERRIDES, data_dir=str(data))
    finally:
        stop.set()
        killer.join()
    assert killed, "no controller process was running"
    assert not result["cached"] and result["steps"] == 6
    artifact = open_store(data).get("rl", result["key"])
    steps, samples = artifact.read("steps"), artifact.read("samples")
    assert steps["version"].to_list() == [1, 2, 3, 4, 5, 6]
    assert steps["requeued"].max() >= 1  # the killed controller's samples were handed out again
    consumed = samples.filter(samples["trained"] | (samples["drop_reason"] == "equal rewards: no gradient"))
    assert consumed.height == 6 * 8 and consumed["staleness"].max() <= 2  # every step trained on whole batches
    assert (artifact.directory / "config.json").is_file()
    assert Catalog(data).entry(result["key"]).kind == "model"
    assert not run.checkpoints.exists()  # published: the run directory is gone


def test_a_task_artifact_that_offers_no_tasks_is_refused_before_anything_starts(tmp_path):
    from flows.train import plan_rl

    data = tmp_path / "data"
    store, catalog = open_store(data), Catalog(data)
    from sft_fixtures import double_trajectories

    key = execute_stage(store, catalog, double_trajectories, {}, {}, "p0").key
    with pytest.raises(StageError, match="offers no RL tasks"):
        plan_rl([key], str(tiny_checkpoint()), data_dir=str(data))
    with pytest.raises(StageError, match="no artifact 'nothing'"):
        plan_rl(["nothing"], str(tiny_checkpoint()), data_dir=str(data))


def test_a_run_that_trained_nothing_fails_with_its_reason_and_publishes_nothing(tmp_path, attached):
    """The untrained tiny model never answers these prompts right: every group has equal rewards, no sample
    carries a gradient, and the command says so on one line and exits 1; with --allow-untrained it publishes. Slow
    (about 30 s on 2 cores) by its subject: two `train rl` processes, each starting its controllers (side by side,
    each on a data root of its own)."""
    base = str(tiny_checkpoint())
    runs = []
    for data, allow in ((tmp_path / "data", []), (tmp_path / "allowed", ["--allow-untrained"])):
        prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
        command = [GYMFORGE, "train", "rl", "--from", base, "--tasks", prompts, "--set", "steps=2", "--set",
                   "batch_size=8", "--set", "controllers=1", "--set", "sampling.max_tokens=8", *allow]
        runs.append(subprocess.Popen(command, env=attached(data, dask=False), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True))
    try:
        (refused_out, refused_err), (allowed_out, allowed_err) = (run.communicate(timeout=900) for run in runs)
    finally:
        for run in runs:
            run.kill()
    refused, allowed = runs
    assert refused.returncode == 1, refused_out + refused_err
    errors = [line for line in refused_err.splitlines() if "rl trained nothing" in line]
    assert errors == [line for line in refused_err.splitlines() if line.startswith("error: ")] and len(errors) == 1
    assert "no sample of 16 carried a gradient in 2 steps (dropped: 16 equal rewards: no gradient)" in errors[0]
    assert "ERROR" not in refused_err and "Traceback" not in refused_err  # said once, by the command
    assert Catalog(tmp_path / "data").entries(stage="rl") == []

    assert allowed.returncode == 0, allowed_out + allowed_err
    assert "0 of 16 consumed samples trained" in allowed_out
    assert "staleness of the consumed samples mean" in allowed_out and "no on-policy sample" in allowed_out


@pytest.mark.parametrize(("signum", "code", "by"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_stops_train_rl_with_one_line_and_its_controllers(tmp_path, attached, signum, code, by):
    """Ctrl-C reaches the terminal's whole process group, SIGTERM only the command: either way the run stops within
    seconds with one line, no traceback and no controller left behind. Slow (about 30 s on 2 cores) by its subject:
    the signal comes after the first step, so the command and its two controller processes have each imported torch
    and transformers and loaded the model."""
    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    command = [GYMFORGE, "train", "rl", "--from", str(tiny_checkpoint()), "--tasks", prompts, "--set", "steps=2000",
               "--set", "batch_size=8", "--set", "sampling.max_tokens=8", "--allow-untrained"]
    run = subprocess.Popen(command, env=attached(data, dask=False), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        assert run.stderr is not None
        while " rl step " not in run.stderr.readline():  # piped: a timestamped line per step
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
        controllers = psutil.Process(run.pid).children(recursive=True)
        os.killpg(run.pid, signum) if signum == signal.SIGINT else run.send_signal(signum)
        started = time.monotonic()
        out, err = run.communicate(timeout=60)
        assert time.monotonic() - started < 30
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    lines = [line for line in err.splitlines() if " rl step " not in line]
    said = f"stopped by {by}: nothing unfinished was published; checkpoints of a training run are kept for --resume"
    assert run.returncode == code and lines == [said], err[-2000:]
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err and "restarted" not in out + err
    assert len(controllers) >= 2
    deadline = time.monotonic() + 5
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in controllers):
        assert time.monotonic() < deadline, "a controller outlived the stopped run"
        time.sleep(0.1)
    assert Catalog(data).entries(stage="rl") == []


def test_a_dead_endpoint_fails_train_rl_within_seconds_with_one_line(tmp_path):
    """Nothing listens on port 9: the command says so on one line, before any server or controller starts."""
    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    env = {**{k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")},
           "GYMFORGE_DATA": str(data)}
    command = [GYMFORGE, "train", "rl", "--from", str(tiny_checkpoint()), "--tasks", prompts,
               "--engine", "openai:http://127.0.0.1:9/v1#m", "--set", "steps=1"]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert time.monotonic() - started < 60  # the CLI's imports included; the probe itself takes milliseconds
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "openai:http://127.0.0.1:9/v1#m: nothing answers at" in errors[0], done.stderr
    assert Catalog(data).entries(stage="rl") == []


def test_train_rl_against_a_gymforge_serve_endpoint_loads_every_version(tmp_path):
    """The server path of docs/train-rl.md on a CPU: `gymforge serve` holds the base model, `train rl --engine openai:...`
    trains three versions, and the server reports loading each version a batch was generated with. Slow (about 30 s
    on 2 cores) by its subject: a server and a `train rl` process, three weight syncs between them."""
    import httpx

    from inference.server import create_app, serve_in_background

    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    base = str(tiny_checkpoint())
    env = {**{k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")},
           "GYMFORGE_DATA": str(data)}
    with serve_in_background(create_app(base, served_model_name="tiny")) as url:
        command = [GYMFORGE, "train", "rl", "--from", base, "--tasks", prompts, "--engine", f"openai:{url}#tiny",
                   "--set", "steps=3", "--set", "batch_size=8", "--set", "max_staleness=0", "--set", "controllers=1",
                   "--set", "sampling.max_tokens=8", "--allow-untrained"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        [served] = httpx.get(f"{url}/models").json()["data"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 steps" in done.stdout
    assert served["loaded_versions"] == [1, 2]  # max_staleness 0: each batch is generated by the newest version
    key = done.stdout.split("rl ", 1)[1].split(" ", 1)[0]
    samples = open_store(data).get("rl", key).read("samples")
    assert sorted(set(samples["min_policy_version"])) == [0, 1, 2]
