"""Stage `heldout_score`: a model's rewards on held-out RL tasks, ``k`` sampled attempts per task, as an artifact.

The experiments' unit of measurement (flows/experiments): every arm's model is scored on the same held-out tasks
with the same sampling seeds, by the reward the RL stage trains on (``training.async_rl.controllers.score_tasks``: prompt
tasks through their reward function, environment tasks as agent episodes in a fresh environment). Inputs are chosen
per run (``with_inputs``): the model as a model artifact, or ``model_name_or_path``, and any artifacts that offer RL
tasks (``training.async_rl.sources.load_tasks``: keychain and its ``regular`` output, tool-environment tasks and their
noisy twins). The artifact key follows the model's key, so a scored model is never scored twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import polars as pl
from pydantic import Field

from data_contracts.schemas import between
from data_contracts.stage import Artifact, Params, StageError, stage
from training.records import HELDOUT_SCORE

STAGE = "heldout_score"


class HeldoutScoreParams(Params):
    k: int = Field(4, ge=1, le=64, description="sampled attempts per task (Avg@k, Pass@k for k' <= k)")
    max_tasks: int = Field(0, ge=0, description="score at most this many tasks, chosen by a stable hash of their ids "
                                                "(0: every task)")
    seed: int = Field(0, description="seeds the attempts: attempt i of task t uses seed_for(seed, 'eval', t, i)")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature of prompt tasks")
    tool_temperature: float = Field(0.6, gt=0.0, description="sampling temperature in tool environments")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="nucleus mass")
    max_tokens: int = Field(48, gt=0, description="output tokens per engine call")
    max_turns: int = Field(4, gt=0, description="agent turns per environment episode")
    concurrency: int = Field(8, ge=1, description="attempts in flight at once (one continuous batcher)")
    small_tools: int | None = Field(None, ge=0, description="offer each environment task's tools plus this many "
                                    "distractors with compact schemas, as the policy trained on (None: as built)")
    model_name_or_path: str | None = Field(None, description="a local transformers directory to score; None when "
                                                             "the model is a model artifact input")

    def local_inputs(self) -> list[str]:
        return [self.model_name_or_path] if self.model_name_or_path else []


def _stable_order(task_id: str) -> bytes:
    return hashlib.blake2b(task_id.encode(), digest_size=8, person=b"heldout").digest()


@stage(name=STAGE, version="1", inputs=("rl", "keychain"), params=HeldoutScoreParams, resources="gpu",
       outputs={"scores": HELDOUT_SCORE.contract(expectations=(between("reward", 0.0, 1.0),), min_rows=1)})
def heldout_score(inputs: Mapping[str, Artifact], params: HeldoutScoreParams, partition: str
                  ) -> dict[str, pl.DataFrame]:
    """``k`` rewards per held-out task of one model, sampled as RL samples them."""
    from inference.cpu import tune_allocator
    from inference.engine_factory import load_engine
    from inference.engine_spec import hf_spec
    from training.async_rl.config import RLConfig
    from training.async_rl.controllers import score_tasks
    from training.async_rl.sources import load_tasks

    tune_allocator()  # before torch allocates (inference/cpu.py)
    models = [a for a in inputs.values() if a.manifest.get("kind") == "model"]
    if len(models) + bool(params.model_name_or_path) != 1:
        raise StageError(f"heldout_score scores exactly one model: a model artifact input or model_name_or_path "
                         f"(got {len(models)} model inputs, model_name_or_path={params.model_name_or_path!r})")
    model_dir = Path(models[0].directory) if models else Path(str(params.model_name_or_path))
    tasks = load_tasks({name: a for name, a in inputs.items() if a.manifest.get("kind") != "model"}, params.small_tools)
    if params.max_tasks:
        tasks = sorted(tasks, key=lambda t: _stable_order(t.task_id))[: params.max_tasks]
    config = RLConfig(concurrency=params.concurrency, seed=params.seed, sampling={
        "temperature": params.temperature, "tool_temperature": params.tool_temperature, "top_p": params.top_p,
        "max_tokens": params.max_tokens, "max_turns": params.max_turns})
    rewards = score_tasks(load_engine(hf_spec(model_dir)), tasks, params.k, config, seed=params.seed)
    rows = [{"task_id": task.task_id, "source": task.source, "kind": task.kind, "noise_level": task.noise_level,
             "clean_task_id": task.clean_task_id, "sample": i, "reward": float(reward)}
            for task in tasks for i, reward in enumerate(rewards[task.task_id])]
    return {"scores": HELDOUT_SCORE.frame(rows)}
