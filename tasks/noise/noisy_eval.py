"""Stage `noisy_eval`: noisy evaluation twins of the unseen Random Complex Tasks, like the report's tau2-Bench-Noise
and VitaBench-Noise (LongCat-Flash-Thinking-2601 Table 1): the robustness gap is success on the clean tasks minus
success on these twins."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, stage
from tasks.noise.records import NOISE_REJECTED, NOISY_EVAL_TASK
from tasks.noise.twins import NoiseParams, build_twins, noise_success_figure, twins_contract


class NoiseEvalParams(NoiseParams):
    levels: tuple[int, ...] = Field((4,), description="Levels of the evaluation twins (default: the hardest).")


# 2: a twin that states an internal key is rejected; the contract checks the twins' words; 3: the policy sees
# through tool noise on the identifying read (twins the robust agent solved are kept)
@stage(name="noisy_eval", version="3", params=NoiseEvalParams, inputs=("eval_random_envs",),
       outputs={"tasks": twins_contract(NOISY_EVAL_TASK), REJECTED: NOISE_REJECTED.contract()},
       figure=noise_success_figure)
def noisy_eval(inputs: Mapping[str, Artifact], params: NoiseEvalParams, partition: str) -> dict[str, pl.DataFrame]:
    """Noisy evaluation twins of the unseen random environments' tasks (the -Noise benchmarks of Table 1)."""
    source = inputs["eval_random_envs"]
    kept, rejected = build_twins(source.read("environments"), source.read("tasks"), params, "noisy_eval",
                                 partition, NOISY_EVAL_TASK)
    return {"tasks": kept, REJECTED: rejected}
