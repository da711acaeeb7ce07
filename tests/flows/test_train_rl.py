"""The `train_rl` flow on a real Prefect server, as an ML engineer runs it: two controller processes serve the
tiny model, one of them is killed with samples handed to it, and the run still publishes a model artifact, its
sample audit trail and its step metrics."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from inference_support import tiny_checkpoint
from rl_fixtures import double_prompts

from data_contracts.catalog import Catalog
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The tiny profile's rl section, shortened: every other field is the profile's.
OVERRIDES = {"steps": 6, "batch_size": 8, "num_generations": 4, "controllers": 2, "concurrency": 4,
             "checkpoint_every": 3, "sampling": {"max_tokens": 8}}


def kill_a_controller_holding_samples(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL a rollout controller process half a second after it appeared: the manager hands a new controller its
    first samples within milliseconds, and loading torch and the engine takes seconds, so the dead engine holds
    samples that no "done" message has reported (killed later, it may have reported them all, and nothing is handed
    out again). Processes running before this thread are no controllers (a session's Dask workers)."""
    earlier = {child.pid for child in psutil.Process().children(recursive=True)}
    seen: dict[int, float] = {}  # when each new spawned process was first seen (psutil's create_time can be off)
    while not stop.is_set():
        for child in psutil.Process().children(recursive=True):
            try:
                if child.pid in earlier or "multiprocessing.spawn" not in " ".join(child.cmdline()):
                    continue
                if time.monotonic() - seen.setdefault(child.pid, time.monotonic()) > 0.5:
                    child.kill()
                    killed.append(child.pid)
                    return
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)


def test_the_flow_survives_a_killed_engine_and_publishes_a_model(tmp_path):
    from flows.runtime import Runtime
    from flows.train import plan_rl, train_rl

    data = tmp_path / "data"
    prompts = execute_stage(ArtifactStore(data), Catalog(data), double_prompts, {}, {}, "p0").key
    base = str(tiny_checkpoint())
    run = plan_rl([prompts], base, overrides=OVERRIDES, data_dir=str(data))
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=kill_a_controller_holding_samples, args=(killed, stop), daemon=True)
    killer.start()
    try:
        with Runtime(data, dask=False):
            result = train_rl(tasks=[prompts], base=base, overrides=OVERRIDES, data_dir=str(data))
    finally:
        stop.set()
        killer.join()
    assert killed, "no controller process was running"
    assert not result["cached"] and result["steps"] == 6
    artifact = ArtifactStore(data).get("rl", result["key"])
    steps, samples = artifact.read("steps"), artifact.read("samples")
    assert steps["version"].to_list() == [1, 2, 3, 4, 5, 6]
    assert steps["requeued"].max() >= 1  # the killed controller's samples were handed out again
    consumed = samples.filter(samples["trained"] | (samples["drop_reason"] == "equal rewards: no gradient"))
    assert consumed.height == 6 * 8 and consumed["staleness"].max() <= 2  # every step trained on whole batches
    assert (artifact.directory / "config.json").is_file()
    assert Catalog(data).query("SELECT kind FROM artifacts WHERE key = ?", [result["key"]]).item() == "model"
    assert not run.checkpoints.exists()  # published: the run directory is gone


def test_a_task_artifact_that_offers_no_tasks_is_refused_before_anything_starts(tmp_path):
    from flows.train import plan_rl

    data = tmp_path / "data"
    store, catalog = ArtifactStore(data), Catalog(data)
    from sft_fixtures import double_trajectories

    key = execute_stage(store, catalog, double_trajectories, {}, {}, "p0").key
    with pytest.raises(StageError, match="offers no RL tasks"):
        plan_rl([key], str(tiny_checkpoint()), data_dir=str(data))
    with pytest.raises(StageError, match="no artifact 'nothing'"):
        plan_rl(["nothing"], str(tiny_checkpoint()), data_dir=str(data))
