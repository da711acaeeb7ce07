"""Streaming rollouts: the admission bound holds at every instant, the consumption check drops what outlived it,
failures are dropped with a counted reason, and a controller whose engine hangs is restarted with its samples
handed out again. Controllers run as threads over a test-double engine here; the flow test runs processes."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import threading
import time

import polars as pl
import psutil
import pytest
from inference_support import tiny_checkpoint
from rl_fixtures import VersionedTestEngine, manager_that_dies, prompt_task, prompt_tasks

from envgen import rewards
from training.async_rl.config import RLConfig
from training.async_rl.controllers import ThreadLauncher, Work
from training.async_rl.run import RLRun, RLRunError
from training.async_rl.weights import FileWeightSync
from training.rl import _within_admission_bound, _within_staleness_bound


def run(tmp_path, engine, tasks=None, **config) -> tuple[RLRun, object]:
    settings = {"steps": 4, "batch_size": 4, "num_generations": 2, "controllers": 2, "concurrency": 2,
                "checkpoint_every": 4, "max_staleness": 1, "beta": 0.0, **config}
    rl = RLRun(tiny_checkpoint(), tasks or prompt_tasks(6), RLConfig(**settings), tmp_path / "run", engine=engine,
               launcher=ThreadLauncher())
    return rl, rl.run()


def test_the_admission_bound_holds_at_every_instant_and_no_trained_sample_exceeds_the_staleness_bound(tmp_path):
    # A long tail: lognormal latency, and a straggler: one engine call that lasts until the trainer has moved three
    # versions on, while the other controller streams on.
    engine = VersionedTestEngine(p=[0.5] * 6, latency_median_s=0.01, latency_sigma=1.5, hang_on_call=4, hang_s=60)

    def on_step(row: dict) -> None:
        if row["version"] == 3:
            engine.release.set()

    config = RLConfig(steps=6, batch_size=4, num_generations=2, controllers=2, concurrency=2, checkpoint_every=6,
                      max_staleness=1, beta=0.0)
    rl = RLRun(tiny_checkpoint(), prompt_tasks(6), config, tmp_path / "run", engine=engine,
               launcher=ThreadLauncher(), on_step=on_step)
    manager, seen, stop = rl.manager, [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with manager.lock:
                limit = (rl.config.max_staleness + manager.version + 1) * rl.config.batch_size
                seen.append((manager.accepted - manager.released + manager.running, limit))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = rl.run()
    finally:
        stop.set()
        watcher.join()
    assert seen and all(load <= limit for load, limit in seen)
    trained = result.samples.filter(result.samples["trained"])
    assert trained.height > 0 and trained["staleness"].max() <= 1
    stale = result.samples.filter(result.samples["drop_reason"] == "stale")
    # The consumption check caught what admission let in: each dropped group held a sample past the bound.
    assert stale.height > 0 and stale.group_by("group_id").agg(pl.col("staleness").max())["staleness"].min() > 1
    assert result.steps["version"].to_list() == [1, 2, 3, 4, 5, 6]


def test_a_reward_that_raises_drops_its_sample_with_a_counted_reason(tmp_path, monkeypatch):
    def broken(completions, **columns):
        raise ValueError("the reward broke")

    monkeypatch.setitem(rewards.REWARDS, "broken", broken)
    tasks = [*prompt_tasks(4), prompt_task(4, reward_fn="broken")]
    _, result = run(tmp_path, VersionedTestEngine(p=[0.5] * 5), tasks=tasks)
    assert result.events.get("reward raised ValueError", 0) > 0
    dropped = result.samples.filter(result.samples["task_id"] == "q4")
    assert dropped.height > 0 and not dropped["trained"].any()
    assert set(dropped["drop_reason"]) <= {"reward raised ValueError", "group: reward raised ValueError"}


def test_equal_reward_groups_are_reported_not_trained(tmp_path):
    _, result = run(tmp_path, VersionedTestEngine(p=[1.0, 0.0, 0.5]), tasks=prompt_tasks(3),
                    scheduling={"hard_mining": False})
    equal = result.samples.filter(result.samples["task_id"].is_in(["q0", "q1"]))
    assert equal.height > 0 and not equal["trained"].any()
    assert set(equal["drop_reason"]) == {"equal rewards: no gradient"}
    reported = result.samples.filter(result.samples["drop_reason"] == "equal rewards: no gradient")
    assert result.steps["zero_variance_groups"].sum() == reported.height / 2


def test_a_hung_engine_restarts_its_controller_and_its_samples_are_handed_out_again(tmp_path):
    # Every call takes 0.15 s, so the run outlasts the 0.5 s timeout the hung call runs into.
    engine = VersionedTestEngine(p=[0.5] * 6, latency_median_s=0.15, hang_on_call=3, hang_s=5.0)
    rl, result = run(tmp_path, engine, request_timeout_s=0.5, steps=6, checkpoint_every=6)
    assert result.events["controller restarted"] >= 1 and result.events["requeued"] >= 1
    assert "outlasted" in rl.manager.last_failure
    assert result.steps.height == 6  # the run went on


def test_a_controller_blocked_outside_the_engine_is_replaced_and_its_samples_handed_out_again(tmp_path, monkeypatch):
    # A reward that blocks the controller's loop once for 5 s: the engine-call timeout cannot fire, the manager's
    # watchdog (request_timeout_s x (max_turns + 1) = 0.4 s) replaces the controller. Engine calls take 0.05 s, so
    # the run outlasts the watchdog.
    blocked = threading.Event()

    def blocks_once(completions, **columns):
        if not blocked.is_set():
            blocked.set()
            time.sleep(5.0)
        return rewards.REWARDS["two_way"](completions, **columns)

    monkeypatch.setitem(rewards.REWARDS, "blocks_once", blocks_once)
    tasks = [prompt_task(i, reward_fn="blocks_once") for i in range(6)]
    engine = VersionedTestEngine(p=[0.5] * 6, latency_median_s=0.05)
    rl, result = run(tmp_path, engine, tasks=tasks, request_timeout_s=0.2, sampling={"max_turns": 1}, steps=8,
                     checkpoint_every=8)
    assert result.events["controller restarted"] >= 1 and result.events["requeued"] >= 1
    assert "held a sample over 0.4 s" in rl.manager.last_failure
    assert result.steps.height == 8


def test_controllers_that_keep_dying_stop_the_run_with_the_last_failure(tmp_path):
    broken = tmp_path / "broken"  # passes the probe (a config.json), fails to load in every controller
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(Exception, match="restarted .* times .*max_restarts=1"):
        run(tmp_path, f"hf:{broken}", max_restarts=1)


def test_an_engine_that_is_no_checkpoint_is_refused_before_any_controller_starts(tmp_path):
    with pytest.raises(RLRunError, match=r"^engine hf:/no/such/model: /no/such/model is not a checkpoint"):
        run(tmp_path, "hf:/no/such/model")


def test_a_manager_that_breaks_ends_the_run_with_the_reason_instead_of_hanging(tmp_path, monkeypatch):
    from training.async_rl.scheduling import Scheduler

    original, calls = Scheduler.next_groups, []

    def breaks_after_a_few(self, n, step):
        calls.append(step)
        if len(calls) > 3:
            raise KeyError("no such task")
        return original(self, n, step)

    monkeypatch.setattr(Scheduler, "next_groups", breaks_after_a_few)
    with pytest.raises(Exception, match="the rollout manager stopped: KeyError"):
        run(tmp_path, VersionedTestEngine(p=[0.5] * 6), steps=8, checkpoint_every=8)


@pytest.mark.slow
def test_a_controller_leaves_when_its_manager_is_killed(tmp_path):
    context = mp.get_context("spawn")
    pids = context.Queue()
    manager = context.Process(target=manager_that_dies, args=(str(tmp_path), f"hf:{tiny_checkpoint()}", pids))
    manager.start()
    controller = psutil.Process(pids.get(timeout=120))
    deadline = time.monotonic() + 120
    while True:  # wait until it idles in its loop, its engine loaded
        busy = sum(controller.cpu_times()[:2])
        time.sleep(1.0)
        if sum(controller.cpu_times()[:2]) - busy < 0.1:
            break
        assert time.monotonic() < deadline, "the controller never became idle"
    manager.kill()  # SIGKILL: no chance to stop its controllers; they leave within a second or two
    deadline = time.monotonic() + 5
    while controller.is_running() and controller.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the orphaned controller is still running"
        time.sleep(0.2)


class CountingLauncher(ThreadLauncher):
    """Records every sample handed to a controller, with the newest policy version published at that moment:
    admissions counted from outside the manager, by what reached the engines."""

    def __init__(self, weights: FileWeightSync) -> None:
        self.weights = weights
        self.dispatched: list[tuple[str, int]] = []

    def queue(self):
        launcher = self

        class Inbox(queue_module.Queue):
            def put(self, item, *args, **kwargs):
                if isinstance(item, Work):
                    launcher.dispatched.append((item.sample_id, launcher.weights.latest() or 0))
                super().put(item, *args, **kwargs)

        return Inbox()


def test_the_output_alone_proves_both_bounds_and_admissions_counted_outside_agree(tmp_path):
    engine = VersionedTestEngine(p=[0.5] * 6, latency_median_s=0.01, latency_sigma=1.5, hang_on_call=4, hang_s=60)
    config = RLConfig(steps=6, batch_size=4, num_generations=2, controllers=2, concurrency=2, checkpoint_every=6,
                      max_staleness=1, beta=0.0)
    launcher = CountingLauncher(FileWeightSync(tmp_path / "run" / "weights"))
    rl = RLRun(tiny_checkpoint(), prompt_tasks(6), config, tmp_path / "run", engine=engine, launcher=launcher,
               on_step=lambda row: engine.release.set() if row["version"] == 3 else None)
    samples = rl.run().samples

    # The rl stage's contract checks, on every row: AReaL's inequality at admission, the gap at consumption.
    assert samples["admission_slot"].null_count() == 0
    assert not _within_admission_bound(samples).any() and not _within_staleness_bound(samples).any()
    assert (samples["admission_limit"] == (1 + samples["admission_version"] + 1) * 4).all()
    forged = samples.with_columns(pl.col("admission_slot") + pl.col("admission_limit"))
    assert _within_admission_bound(forged).all()
    assert _within_staleness_bound(samples.with_columns(pl.col("staleness") + 2)).any()

    # From outside: whatever reached an engine stayed within the bound of the newest published version, less the
    # stale samples the trainer had dropped by then (at consumption by that version or earlier).
    stale = samples.filter(pl.col("drop_reason") == "stale")
    assert stale.height > 0  # the straggler outlived the bound
    seen: set[str] = set()
    for sample_id, latest in launcher.dispatched:
        seen.add(sample_id)
        released = stale.filter(pl.col("trainer_version") <= latest).height
        assert len(seen) - released <= (config.max_staleness + latest + 1) * config.batch_size
    # No over-generation: every admitted sample was consumed or replaced one dropped at consumption.
    assert len(seen) == config.steps * config.batch_size + stale.height == samples.height


FAILING_RUN = """
import sys
from pathlib import Path
from inference_support import tiny_checkpoint
from rl_fixtures import prompt_tasks
from training.async_rl.config import RLConfig
from training.async_rl.run import RLRun, RLRunError

config = RLConfig(steps=4, batch_size=4, num_generations=2, controllers=2, concurrency=2, checkpoint_every=4,
                  beta=0.0, max_restarts=1)
try:
    RLRun(tiny_checkpoint(), prompt_tasks(4), config, Path(sys.argv[1]), engine=f"hf:{sys.argv[2]}").run()
except RLRunError as exc:
    print(f"error: {exc}", flush=True)
    sys.exit(1)
"""


@pytest.mark.slow
def test_a_run_whose_controller_processes_keep_failing_exits_instead_of_hanging(tmp_path):
    """Every controller process fails to load its engine: the run stops with the last failure and the process
    exits (its queues' feeder threads are not waited for), leaving no controller behind."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    support = Path(__file__).parents[2] / "support"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(support), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", FAILING_RUN, str(tmp_path / "run"), str(broken)], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "restarted 2 times (max_restarts=1)" in done.stdout and "Traceback" not in done.stderr


def test_report_to_tensorboard_writes_every_steps_reward_at_its_version(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from training.async_rl.config import RLParams
    from training.async_rl.tensorboard_steps import TensorBoardSteps

    assert RLParams().report_to == "none"
    with TensorBoardSteps(tmp_path / "tb") as report:
        rl = RLRun(tiny_checkpoint(), prompt_tasks(6), RLConfig(steps=2, batch_size=4, num_generations=2,
                                                                  controllers=1, concurrency=2, beta=0.0),
                   tmp_path / "run", engine=VersionedTestEngine(p=[0.5] * 6), launcher=ThreadLauncher(),
                   on_step=report)
        result = rl.run()
    events = EventAccumulator(str(tmp_path / "tb")).Reload()
    rewards = events.Scalars("train/reward_mean")
    assert [event.step for event in rewards] == [1, 2]
    assert [event.value for event in rewards] == pytest.approx(result.steps["reward_mean"].to_list())
    assert {"train/loss", "train/kl", "train/staleness_mean", "train/samples_per_s"} <= set(events.Tags()["scalars"])
