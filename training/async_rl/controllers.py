"""Streaming rollouts: the RolloutManager and its RolloutControllers (LongCat-Flash-Thinking-2601, "The DORA
Asynchronous RL Framework").

The manager is light: it holds the global metadata (what is admitted, running, finished; the trainer's version),
admits new groups while the admission bound allows, hands samples to controllers and collects what they finish
into the SampleQueue. A controller owns a virtual rollout group: its engine (any Engine spec: ``hf:DIR`` in-process,
``openai:URL#MODEL`` for vLLM servers at scale) and the environments of the samples it runs; scale-out is adding
controllers. Every sample is dispatched on its own: generation, environment execution and reward, and a finished
sample goes straight to the queue. There is no batch barrier; the synchronous baseline is the same machinery with
``max_staleness = 0``, which admits exactly one batch per trainer version.

A controller is a local process by default (a thread in tests). One that dies, or whose engine call outlasts the
timeout, is restarted, and its samples in flight are handed out again (counted as ``requeued``), so a dead engine
never deadlocks the run. Between engine calls a controller loads the newest published version into its engine
(``load_weights``: in-process for ``hf:`` and ``vllm:``, over HTTP for ``openai:``) and tells the manager; a run
whose engines stop advancing ends with the reason (``weight_sync_timeout_s``) instead of dropping stale samples
forever. A controller process ignores Ctrl-C (its parent stops it) and leaves when its parent dies.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import queue as queue_module
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from data_contracts.stage import seed_for
from inference.agent import (
    AgentConfig,
    ContinuousBatcher,
    Episode,
    PromptItem,
    play_episode,
    single_turn_rollout,
)
from inference.engine import Engine, Request, SamplingParams
from inference.engine_factory import load_engine
from inference.engine_spec import EngineSpec
from inference.engine_support import assistant_message
from training.async_rl.config import RLConfig
from training.async_rl.queue import Sample, SampleQueue
from training.async_rl.scheduling import GroupSpec, RLTask, Scheduler
from training.async_rl.weights import FileWeightSync

EnvFactory = Callable[[Mapping[str, Any]], Any]
"""Builds an environment from an environment record (default: the environment with the task's noise applied)."""


@dataclass(frozen=True)
class Work:
    """One sample to produce; ``task`` travels with the first sample of a task a controller has not seen."""

    sample_id: str
    group_id: str
    task_id: str
    index: int
    seed: int
    weight: float = 1.0
    task: RLTask | None = None
    admission: tuple[int, int, int] | None = None  # (trainer version, slot, limit) when it was admitted


def default_env(record: Mapping[str, Any]) -> Any:
    from envgen.noise.environment import NoisyEnvironment

    return NoisyEnvironment(dict(record))


async def run_sample(work: Work, task: RLTask, batcher: ContinuousBatcher, config: RLConfig,
                     make_env: EnvFactory = default_env) -> Sample:
    """Roll ``task`` out once: a prompt sample scored by its reward, or an agent episode in a fresh environment.
    A reward that raises drops the sample with the reason; it never stops the run."""
    if task.kind == "env":
        agent = AgentConfig(sampling={"temperature": config.sampling.tool_temperature, "top_p": config.sampling.top_p,
                                      "max_tokens": config.sampling.max_tokens},
                            max_turns=config.sampling.max_turns, seed=work.seed)
        episode = Episode(id=work.sample_id, group_id=work.group_id, task=dict(task.payload["task"]),
                          make_env=partial(make_env, task.payload["env"]), env_id=task.payload["env"]["env_id"],
                          task_id=task.task_id, sample_index=work.index)
        rollout = await play_episode(batcher, work.index, episode, agent, task.source)
        return Sample(work.sample_id, work.group_id, task.task_id, task.source, rollout, rollout.reward,
                      weight=work.weight)
    from envgen.rewards import get_reward

    messages = json.loads(task.payload["prompt"]) if isinstance(task.payload["prompt"], str) else task.payload["prompt"]
    sampling = SamplingParams(config.sampling.temperature, config.sampling.top_p, config.sampling.max_tokens,
                              seed=work.seed)
    [completion] = await batcher.generate(work.index, Request(list(messages), sampling=sampling))
    item = PromptItem(task.task_id, messages, {"answer": task.payload["answer"],
                                               "aliases": list(task.payload.get("aliases") or [])})
    try:
        [reward] = get_reward(task.payload["reward_fn"])([[assistant_message(completion)]], answer=[item.columns["answer"]],
                                                         aliases=[item.columns["aliases"]])
    except Exception as exc:  # noqa: BLE001 - a broken reward drops its sample, counted by reason
        return Sample(work.sample_id, work.group_id, task.task_id, task.source, None, 0.0,
                      drop_reason=f"reward raised {type(exc).__name__}")
    rollout = single_turn_rollout(item, work.index, completion, reward, task.source)
    rollout = replace(rollout, id=work.sample_id, group_id=work.group_id)
    return Sample(work.sample_id, work.group_id, task.task_id, task.source, rollout, float(reward or 0.0),
                  weight=work.weight)


def score_tasks(engine: Engine, tasks: Sequence[RLTask], k: int, config: RLConfig,
                make_env: EnvFactory = default_env, seed: int = 0) -> dict[str, list[float]]:
    """``k`` rewards per task, sampled as the controllers sample them (the same sampling settings and rewards), all
    in flight at once through one continuous batcher: held-out evaluation before and after training."""

    async def score() -> list[Sample]:
        batcher = ContinuousBatcher(engine, max_batch=config.concurrency)
        works = [(Work(f"{task.task_id}#{i}", task.task_id, task.task_id, i, seed_for(seed, "eval", task.task_id, i)),
                  task) for task in tasks for i in range(k)]
        return await asyncio.gather(*(run_sample(work, task, batcher, config, make_env) for work, task in works))

    rewards: dict[str, list[float]] = {task.task_id: [] for task in tasks}
    for sample in asyncio.run(score()):
        rewards[sample.task_id].append(sample.reward)
    return rewards


# --- controllers -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerSpec:
    """What a controller needs to start: its engine (a spec string, or an Engine object for in-process controllers)
    and where new weights appear."""

    engine: str | Engine
    weights_dir: str
    config: RLConfig
    make_env: EnvFactory = default_env


def controller_main(uid: int, spec: ControllerSpec, inbox: Any, outbox: Any) -> None:
    """A controller's life: load the engine, then run the samples it is handed, ``config.concurrency`` at a time,
    reloading the newest published weights between engine calls. Messages out: ``("done", uid, sample)``,
    ``("busy", uid, engine seconds)``, ``("loaded", uid, version)``, and ``("fatal", uid, reason)`` before it leaves
    on a failure (an engine that cannot load, an engine call past the timeout)."""
    from inference.cpu import tune_allocator

    if threading.current_thread() is threading.main_thread() and mp.parent_process() is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
        threading.Thread(target=_leave_with_parent, name="parent-watch", daemon=True).start()
    tune_allocator()
    try:
        engine = load_engine(spec.engine) if isinstance(spec.engine, str) else spec.engine
        asyncio.run(_serve(uid, spec, engine, inbox, outbox))
        if threading.current_thread() is threading.main_thread() and mp.parent_process() is not None:
            os._exit(0)  # stopped: leave now, not after the engine call in progress (nothing collects it)
    except _EngineTimeout:
        if threading.current_thread() is threading.main_thread():
            os._exit(3)  # a hung engine call keeps its thread: leave without waiting for it
    except Exception as exc:  # noqa: BLE001 - reported to the manager, which starts another controller
        outbox.put(("fatal", uid, f"{type(exc).__name__}: {exc}"))


class _EngineTimeout(Exception):
    pass


class _WeightLoadError(Exception):
    """The engine failed to load a published version: the controller is replaced, not its samples dropped."""


def _leave_with_parent() -> None:
    """A controller whose parent was killed leaves within a fraction of a second, even mid-generation."""
    while not _orphaned():
        time.sleep(0.2)
    os._exit(0)


async def _serve(uid: int, spec: ControllerSpec, engine: Engine, inbox: Any, outbox: Any) -> None:
    from inference.engine_factory import check_weight_loading

    check_weight_loading(engine, str(spec.engine))
    weights = FileWeightSync(spec.weights_dir)
    version = {"loaded": getattr(engine, "policy_version", 0)}
    outbox.put(("loaded", uid, version["loaded"]))

    loading = threading.Lock()  # engine calls may run on several threads: one load at a time

    def refresh() -> None:  # on an engine-call thread, before its call
        with loading:
            _refresh()

    def _refresh() -> None:
        latest = weights.latest()
        if latest is not None and latest > version["loaded"]:
            try:
                engine.load_weights(str(weights.path(latest)), latest)
            except FileNotFoundError:  # pruned while we read the pointer: a newer version is there next call
                return
            except Exception as exc:  # re-raised as the controller's failure
                reason = f"loading policy version {latest} failed: {type(exc).__name__}: {exc}"
                raise _WeightLoadError(reason[:300]) from exc
            version["loaded"] = engine.policy_version
            outbox.put(("loaded", uid, version["loaded"]))

    # A server batches concurrent requests itself (``max_concurrency``): each sample goes out as soon as it is ready.
    calls = max(1, min(spec.config.concurrency, getattr(engine, "max_concurrency", 1)))
    batcher = ContinuousBatcher(engine, max_batch=spec.config.concurrency, before_batch=refresh,
                                timeout_s=spec.config.request_timeout_s, max_calls=calls)
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()
    tasks: dict[str, RLTask] = {}
    fatal = asyncio.Event()

    async def one(work: Work) -> None:
        try:
            sample = await run_sample(work, tasks[work.task_id], batcher, spec.config, spec.make_env)
        except TimeoutError:  # reported now, so the manager replaces us without waiting for the hung call
            outbox.put(("fatal", uid, f"an engine call outlasted request_timeout_s={spec.config.request_timeout_s:g}"))
            fatal.set()
            return
        except _WeightLoadError as exc:
            if not fatal.is_set():
                outbox.put(("fatal", uid, str(exc)))
            fatal.set()
            return
        except Exception as exc:  # noqa: BLE001 - reported, the sample dropped with the reason
            sample = Sample(work.sample_id, work.group_id, work.task_id, tasks[work.task_id].source, None, 0.0,
                            drop_reason=f"rollout raised {type(exc).__name__}: {exc}"[:200])
        outbox.put(("done", uid, sample))
        outbox.put(("busy", uid, batcher.busy_s))

    while not fatal.is_set():
        work = await loop.run_in_executor(None, _get, inbox)
        if _orphaned():  # the manager's process was killed without stopping us: generate for no one no longer
            for task in running:
                task.cancel()
            return
        if work is None:
            continue
        if work == "stop":
            break
        if work.task is not None:
            tasks[work.task_id] = work.task
        task = loop.create_task(one(work))
        running.add(task)
        task.add_done_callback(running.discard)
    if fatal.is_set():
        raise _EngineTimeout
    for task in running:  # told to stop: the run is over and nothing collects these samples any more
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


def _orphaned() -> bool:
    parent = mp.parent_process()
    return parent is not None and not parent.is_alive()


def _get(inbox: Any) -> Any:
    try:
        return inbox.get(timeout=0.2)
    except (queue_module.Empty, TimeoutError):  # a local queue, or a Dask queue
        return None


# --- where controllers run -----------------------------------------------------------------------------------------


class Handle(Protocol):
    def is_alive(self) -> bool: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    """Starts controllers and makes the queues they share with the manager."""

    def queue(self) -> Any: ...

    def start(self, uid: int, spec: ControllerSpec, inbox: Any, outbox: Any) -> Handle: ...


CONTROLLER_PRELOAD = ("__main__", "training.async_rl.controllers")
LOCAL_ENGINE_PRELOAD = ("torch", "transformers.modeling_utils", "transformers.models.auto.modeling_auto",
                        "inference.hf_engine")
"""What a controller process imports before it loads its engine (torch and transformers only for an engine that runs
here: ``hf:``, ``vllm:``). The fork server imports them once; each controller, and each restart of one, forks from
it instead of importing them again (bench_controllers.py)."""


class ProcessLauncher:
    """Local processes (the default): one engine per process, so a crashed engine takes only its controller.

    They fork from this process's multiprocessing fork server, which imports the preloads when the first controller
    starts it. A process has one fork server: where a Runtime's Dask cluster started it first, with its own preloads,
    controllers fork from that one and import the rest themselves. A forked controller starts with the fork server's
    environment, this process's as it was when the server started. ``start_method="spawn"`` has each controller
    import everything itself (the launcher before the fork server, for comparison: bench_controllers.py)."""

    def __init__(self, start_method: str = "forkserver") -> None:
        self._context = mp.get_context(start_method)

    def queue(self) -> Any:
        return self._context.Queue()

    def start(self, uid: int, spec: ControllerSpec, inbox: Any, outbox: Any) -> Handle:
        local = not isinstance(spec.engine, str) or EngineSpec.parse(spec.engine).local
        # read only by a fork server not yet running
        self._context.set_forkserver_preload([*CONTROLLER_PRELOAD, *(LOCAL_ENGINE_PRELOAD if local else ())])
        process = self._context.Process(target=controller_main, args=(uid, spec, inbox, outbox),
                                        name=f"rollout-controller-{uid}", daemon=True)
        process.start()
        return process


class ThreadLauncher:
    """Threads of this process: for engines that are objects (test doubles) and single-process runs."""

    def queue(self) -> Any:
        return queue_module.Queue()

    def start(self, uid: int, spec: ControllerSpec, inbox: Any, outbox: Any) -> Handle:
        thread = _Thread(target=controller_main, args=(uid, spec, inbox, outbox), name=f"rollout-controller-{uid}",
                         daemon=True)
        thread.start()
        return thread


class _Thread(threading.Thread):
    def kill(self) -> None:  # a thread cannot be killed; it was told to stop and leaves at its next message
        return None


class DaskLauncher:
    """Long-running tasks on a Dask cluster (``--dask-address``), talking through Dask queues; at scale their
    engines are ``openai:`` endpoints of vLLM servers."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def queue(self) -> Any:
        from distributed import Queue

        return Queue(client=self.client)

    def start(self, uid: int, spec: ControllerSpec, inbox: Any, outbox: Any) -> Handle:
        future = self.client.submit(controller_main, uid, spec, inbox, outbox, pure=False,
                                    key=f"rollout-controller-{uid}-{time.time_ns()}")
        return _DaskHandle(future)


@dataclass
class _DaskHandle:
    future: Any

    def is_alive(self) -> bool:
        return not self.future.done()

    def kill(self) -> None:
        self.future.cancel()


@dataclass
class _Controller:
    uid: int
    inbox: Any
    handle: Handle
    in_flight: dict[str, Work] = field(default_factory=dict)
    loaded: int = -1  # the policy version its engine holds (-1: not reported yet)
    sent_at: dict[str, float] = field(default_factory=dict)  # when each sample in flight was handed out
    known: set[str] = field(default_factory=set)  # task ids this controller has been sent
    busy_s: float = 0.0


# --- the manager ---------------------------------------------------------------------------------------------------


class RolloutManager:
    """Admission, dispatch and collection, on its own thread. The trainer sets ``version`` after publishing each new
    policy version and calls ``release`` for every accepted sample the queue drops at consumption."""

    def __init__(self, config: RLConfig, scheduler: Scheduler, queue: SampleQueue, spec: ControllerSpec,
                 launcher: Launcher | None = None,
                 on_group: Callable[[RLTask, Sequence[Sample]], None] | None = None) -> None:
        self.config = config
        self.scheduler = scheduler
        self.queue = queue
        self.spec = spec
        self.launcher = launcher or ProcessLauncher()
        self.on_group = on_group or (lambda task, samples: None)
        self.version = 0  # written by the trainer only, through publish()
        self.published_at: dict[int, float] = {}
        self.step = 0
        self.accepted = 0  # finished, unfailed samples (written by the manager only)
        self.released = 0  # accepted samples dropped at consumption (written by the trainer only)
        self.events: Counter[str] = Counter()
        self.restarts = 0
        self.last_failure = ""
        self.crash: str | None = None  # why the manager's own loop stopped, if it did: the run cannot go on
        self.stall: str | None = None  # why no engine can produce a trainable sample any more, if so
        self.admissions = 0  # samples admitted (requeued ones are not admitted again)
        self.lock = threading.Lock()  # held by the manager's loop; the trainer takes it to checkpoint
        self._tasks: dict[str, RLTask] = {}
        self._pending: list[Work] = []
        self._next: list[GroupSpec] = []
        self._groups: dict[str, list[Sample]] = {}
        self._group_tasks: dict[str, RLTask] = {}
        self._outbox: Any = None
        self._controllers: list[_Controller] = []
        self._spawned = 0
        self._busy_before = 0.0  # engine seconds of controllers since restarted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rollout-manager", daemon=True)
        self.started = time.monotonic()

    # -- the admission bound --------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._pending) + sum(len(c.in_flight) for c in self._controllers)

    def limit(self) -> int:
        """AReaL's admission bound from the trainer's current version: (max_staleness + version + 1) x batch_size."""
        return (self.config.max_staleness + self.version + 1) * self.config.batch_size

    @property
    def load(self) -> int:
        """Samples counted against the bound: accepted + running (samples dropped at consumption leave
        ``accepted``, so their places are admitted again)."""
        return self.accepted - self.released + self.running

    def capacity(self) -> int:
        """Samples that may still be admitted: accepted + running stays within AReaL's bound, and within the
        samples the run's remaining steps consume (``steps x batch_size`` in all), so nothing is generated for a
        step that will not happen."""
        return min(self.limit(), self.config.steps * self.config.batch_size) - self.load

    def publish(self, version: int) -> None:
        """The trainer published ``version``: the bound moves on, and engines have ``weight_sync_timeout_s`` to
        reach the oldest version still trainable."""
        self.published_at[version] = time.monotonic()
        self.version = version

    def admit(self) -> int:
        """Admit whole groups while the bound allows; returns how many samples were admitted. A task's oversampled
        copies wait their turn when the bound stops short of them."""
        admitted = 0
        while self.capacity() >= self.config.num_generations:
            if not self._next:
                self._next = self.scheduler.next_groups(1, self.step)
            admitted += self._admit_group(self._next.pop(0))
        return admitted

    def _admit_group(self, group: GroupSpec) -> int:
        self._tasks.setdefault(group.task.task_id, group.task)
        self._group_tasks[group.group_id] = group.task
        limit = self.limit()
        for index in range(self.config.num_generations):
            seed = seed_for(self.config.seed, "rl", group.group_id, index)
            slot = self.load + 1  # its place under the bound, recorded so the output shows the bound held
            self._pending.append(Work(f"{group.group_id}#{index}", group.group_id, group.task.task_id, index, seed,
                                      group.weight, admission=(self.version, slot, limit)))
            self.admissions += 1
        return self.config.num_generations

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._outbox = self.launcher.queue()
        self._controllers = [self._spawn() for _ in range(self.config.controllers)]
        self.started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop admitting and restarting, tell every controller to stop, kill what is still alive after 10 s; the
        queues' feeder threads are not waited for at exit (a killed reader would block them for ever)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        for controller in self._controllers:
            controller.inbox.put("stop")
        deadline = time.monotonic() + 10
        while any(c.handle.is_alive() for c in self._controllers) and time.monotonic() < deadline:
            time.sleep(0.05)
        for controller in self._controllers:
            if controller.handle.is_alive():
                controller.handle.kill()
        for q in [self._outbox, *(c.inbox for c in self._controllers)]:
            if hasattr(q, "cancel_join_thread"):
                q.cancel_join_thread()

    def _spawn(self) -> _Controller:
        """A new controller under a new id: results of a replaced one that arrive late are ignored."""
        self._spawned += 1
        inbox = self.launcher.queue()
        return _Controller(self._spawned, inbox, self.launcher.start(self._spawned, self.spec, inbox, self._outbox))

    def engine_load(self) -> float:
        """The request load ratio: engine-busy time over wall time, summed over controllers."""
        wall = (time.monotonic() - self.started) * len(self._controllers)
        busy = self._busy_before + sum(c.busy_s for c in self._controllers)
        return busy / wall if wall > 0 else 0.0

    @property
    def failed(self) -> bool:
        return self.restarts > self.config.max_restarts

    # -- the loop -------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                with self.lock:
                    self._collect()
                    self._revive()
                    self.admit()
                    self._dispatch()
                    self.stall = self._stalled()
                time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 - nothing would admit or collect again: the trainer ends the run
            self.crash = f"the rollout manager stopped: {type(exc).__name__}: {exc}"

    def _dispatch(self) -> None:
        for controller in sorted(self._controllers, key=lambda c: len(c.in_flight)):
            while self._pending and len(controller.in_flight) < self.config.concurrency and controller.handle.is_alive():
                work = self._pending.pop(0)
                controller.in_flight[work.sample_id] = work
                controller.sent_at[work.sample_id] = time.monotonic()
                if work.task_id not in controller.known:
                    controller.known.add(work.task_id)
                    work = replace(work, task=self._tasks[work.task_id])
                controller.inbox.put(work)

    def _collect(self) -> None:
        while (message := _poll(self._outbox)) is not None:
            kind, uid, payload = message
            controller = next((c for c in self._controllers if c.uid == uid), None)
            if controller is None:
                continue  # a replaced controller's late result: its sample was handed out again
            if kind == "busy":
                controller.busy_s = payload
            elif kind == "loaded":
                controller.loaded = payload
            elif kind == "fatal":
                self._replace(controller, payload)
            elif kind == "done" and (work := controller.in_flight.pop(payload.sample_id, None)) is not None:
                controller.sent_at.pop(payload.sample_id, None)
                self._finish(replace(payload, admission=work.admission))

    def _stalled(self) -> str | None:
        """The watchdog: the oldest version a trainable sample may start at was published over
        ``weight_sync_timeout_s`` ago and no engine has loaded it, so every sample the engines make is stale."""
        needed = self.version - self.config.max_staleness
        since = self.published_at.get(needed)
        bound = self.config.weight_sync_timeout_s
        newest = max((c.loaded for c in self._controllers), default=-1)
        if since is None or newest >= needed or time.monotonic() - since < bound:
            return None
        return (f"no engine loaded policy version {needed} within weight_sync_timeout_s={bound:g} s of its "
                f"publication (the newest an engine holds: {newest}), so every sample would be past max_staleness="
                f"{self.config.max_staleness}; check that the engines reach the run's weights directory "
                f"{self.spec.weights_dir}")

    def _finish(self, sample: Sample) -> None:
        if sample.drop_reason:
            self.events[sample.drop_reason] += 1
        else:
            self.accepted += 1
        self.queue.put(sample)
        group = self._groups.setdefault(sample.group_id, [])
        group.append(sample)
        if len(group) == self.config.num_generations:
            task = self._group_tasks.pop(sample.group_id)
            self.on_group(task, self._groups.pop(sample.group_id))

    def _revive(self) -> None:
        if self.failed:
            return
        # No sample takes longer than an engine call per turn: one held past that is stuck outside the engine (an
        # environment step or a reward blocking the controller's loop, where the engine-call timeout cannot fire).
        stuck_after = self.config.request_timeout_s * (self.config.sampling.max_turns + 1)
        now = time.monotonic()
        for controller in list(self._controllers):
            if not controller.handle.is_alive():
                code = getattr(controller.handle, "exitcode", None)
                self._replace(controller, f"controller {controller.uid} exited with code {code}")
            elif controller.sent_at and now - min(controller.sent_at.values()) > stuck_after:
                controller.handle.kill()
                self._replace(controller, f"controller {controller.uid} held a sample over {stuck_after:g} s")

    def _replace(self, controller: _Controller, reason: str) -> None:
        """Retire a dead or failed controller, hand its samples out again, start another in its place."""
        self.last_failure = reason
        # counted up to the one that stops the run: a failure after that is no restart
        self.restarts = min(self.restarts + 1, self.config.max_restarts + 1)
        if self.failed:  # every controller keeps dying: stop restarting, the trainer ends the run
            return
        self.events["controller restarted"] += 1
        self.events["requeued"] += len(controller.in_flight)
        self._pending[:0] = [replace(work, task=None) for work in controller.in_flight.values()]
        self._busy_before += controller.busy_s
        controller.inbox.put("stop")
        self._controllers[self._controllers.index(controller)] = self._spawn()


def _poll(outbox: Any) -> Any:
    try:
        return outbox.get(timeout=0) if not hasattr(outbox, "get_nowait") else outbox.get_nowait()
    except (queue_module.Empty, TimeoutError):
        return None
