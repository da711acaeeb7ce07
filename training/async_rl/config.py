"""The configuration of an RL run: one pydantic model, every field documented, names as TRL names them where TRL has
the same knob (``loss_type``, ``importance_sampling_level``, ``epsilon``, ``epsilon_high``, ``beta``,
``num_generations``, ``learning_rate``), and errors that say what to set.

Defaults follow the reports: GSPO at the sequence level with β = 0.001 (LongCat-Flash-Thinking-2601, "RL Training
Strategy"), temperature 0.6 for tool use and 1.0 otherwise with top-p 0.95, G samples per prompt (LoongRL uses 8).
The clip range follows the importance-sampling level: the GSPO paper's 3e-4 / 4e-4 for sequence ratios (a mean of
per-token log-ratios moves far less than a token's), GRPO/DAPO's 0.2 / 0.28 for token ratios.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from data_contracts.stage import Params
from training.adapters import LoraSettings

Scale = Literal["group", "batch", "none"]
CLIP_DEFAULTS = {"sequence": {"epsilon": 3e-4, "epsilon_high": 4e-4}, "token": {"epsilon": 0.2, "epsilon_high": 0.28}}
LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ImportanceSamplingLevel = Literal["token", "sequence"]


class SamplingSettings(Params):
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature of prompt sources (QA, KeyChain, math)")
    tool_temperature: float = Field(0.6, gt=0.0, description="sampling temperature in tool environments")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="nucleus mass")
    max_tokens: int = Field(64, gt=0, description="output tokens per engine call (per turn in environments)")
    max_turns: int = Field(6, gt=0, description="agent turns per environment episode")


class SchedulingSettings(Params):
    """LongCat-Flash-Thinking-2601 section 3.3: oversampling, budget allocation, curricula, self-verification."""

    oversampling: bool = Field(True, description="duplicate each task into groups by an oversampling coefficient "
                                                 "from its historical pass rate (hard tasks get more groups)")
    max_copies: int = Field(3, ge=1, le=16, description="most groups one task is duplicated into")
    domain_ratios: dict[str, float] = Field(default_factory=dict, description="rollout quota per domain (or source) "
                                            "relative to 1.0: slow or rare domains get more so they keep up")
    budget_allocation: bool = Field(False, description="allocate each step's rollout budget by the dynamic value of "
                                                       "each task (heap-based greedy) instead of uniformly")
    hard_mining: bool = Field(True, description="drop tasks solved in all samples of their last group "
                                                "(LoongRL Stage II)")
    curriculum: bool = Field(True, description="order tasks by difficulty x capability, easy and basic first")
    self_verification_window: int = Field(0, ge=0, description="steps of reward plateau that start the "
                                          "self-verification phase (0: never)")
    self_verification_share: float = Field(0.25, ge=0.0, le=1.0, description="share of the admitted groups that "
                                           "are self-verification prompts while the phase is on")
    noise_curriculum: bool = Field(False, description="admit noisy twins at the level the noise curriculum "
                                                      "controller reaches from the measured robustness gap")


class RLConfig(Params):
    # -- the objective (training/async_rl/losses.py)
    loss_type: LossType = Field("grpo", description="aggregation of the per-token loss, as TRL names it")
    importance_sampling_level: ImportanceSamplingLevel = Field(
        "sequence", description="token (GRPO) or sequence (GSPO, the report's objective) importance ratio")
    epsilon: float = Field(0.2, gt=0.0, lt=1.0, description="lower clip of the ratio: 1 - epsilon (default: 3e-4 "
                           "at sequence level, as the GSPO paper; 0.2 at token level)")
    epsilon_high: float = Field(0.28, gt=0.0, description="upper clip of the ratio: 1 + epsilon_high (default: "
                                "4e-4 at sequence level; 0.28 at token level, DAPO's clip-higher)")
    beta: float = Field(0.001, ge=0.0, description="k3 KL weight to the starting policy (0 skips the reference)")
    scale_rewards: Scale = Field("group", description="advantage normalization, as TRL's scale_rewards")
    old_policy: Literal["behaviour", "proximal"] = Field(
        "behaviour", description="what the ratio is taken against: the engine's sampling log-probabilities "
        "(the report's objective: the clip bounds how far a stale sample moves the policy), or the trainer's current "
        "policy with a truncated behaviour weight for how the sample was drawn (AReaL's decoupled PPO)")
    behaviour_cap: float = Field(2.0, ge=1.0, description="truncation of the behaviour weight (old_policy=proximal)")
    # -- batches and groups
    num_generations: int = Field(4, ge=2, description="G: samples per prompt; advantages are taken within a group")
    batch_size: int = Field(16, ge=2, description="samples per optimizer step, a multiple of num_generations")
    # -- asynchrony
    mode: Literal["async", "sync"] = Field("async", description="streaming rollouts with bounded staleness, or "
                                                                "the synchronous baseline with a barrier per step")
    max_staleness: int = Field(2, ge=0, description="a sample is trained on at most this many versions after the "
                                                    "one that sampled its oldest token (checked at admission and "
                                                    "at consumption)")
    controllers: int = Field(2, ge=1, description="rollout controller processes, each with its own engine")
    concurrency: int = Field(8, ge=1, description="samples in flight per controller")
    request_timeout_s: float = Field(120.0, gt=0.0, description="an engine call slower than this restarts the "
                                                                "engine; its samples are re-queued")
    max_restarts: int = Field(10, ge=0, description="controller restarts after which the run stops with the last "
                                                    "failure, instead of restarting forever")
    weight_sync_timeout_s: float = Field(300.0, gt=0.0, description="the run stops when no engine has loaded the "
                                         "oldest still-trainable policy version this long after it was published")
    # -- optimization
    steps: int = Field(20, ge=1, description="optimizer steps")
    learning_rate: float = Field(5e-5, gt=0.0, description="AdamW learning rate (on the tiny model 3e-4 collapsed "
                                                           "within 10 steps, 5e-5 was stable)")
    warmup_steps: int = Field(0, ge=0, description="steps of linear learning-rate warm-up, constant after")
    max_grad_norm: float = Field(1.0, gt=0.0, description="gradient clipping")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="the trainer's weights (bfloat16 on GPUs; "
                                                                        "the CPU trains in float32)")
    lora: LoraSettings | None = Field(None, description="train low-rank adapters on the frozen policy; engines get "
                                      "each version's merged weights (None: train every weight)")
    micro_batch_size: int = Field(8, ge=1, description="samples per forward/backward; gradients accumulate over "
                                                       "micro-batches with the whole batch's normalisation")
    checkpoint_every: int = Field(10, ge=1, description="steps between resumable checkpoints (at most the run's "
                                                        "steps: a shorter run checkpoints at its last step)")
    seed: int = Field(0, description="seeds sampling, task order and initialisation")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings, description="sampling of every source")
    scheduling: SchedulingSettings = Field(default_factory=SchedulingSettings, description="task scheduling")

    @property
    def batch_groups(self) -> int:
        """Groups per optimizer step."""
        return self.batch_size // self.num_generations

    @model_validator(mode="after")
    def _consistent(self) -> RLConfig:
        if self.batch_size % self.num_generations:
            raise ValueError(f"batch_size={self.batch_size} is not divisible by num_generations="
                             f"{self.num_generations}: a step trains whole groups, so set batch_size to a multiple of "
                             f"{self.num_generations} (e.g. {self.num_generations * max(1, self.batch_size // self.num_generations)})")
        if self.mode == "sync" and self.max_staleness:
            raise ValueError("mode='sync' trains every batch on the version that sampled it: set max_staleness=0")
        if self.epsilon_high < self.epsilon:
            raise ValueError(f"epsilon_high={self.epsilon_high} is below epsilon={self.epsilon}; DAPO's clip-higher "
                             "keeps epsilon_high >= epsilon")
        return self

    @model_validator(mode="before")
    @classmethod
    def _scaled(cls, raw: Any) -> Any:
        """A checkpoint interval longer than the run is the run's length (a profile's interval fits its own
        steps, and `--set steps=2` should not have to set it too); both name one run, so one artifact key."""
        if not isinstance(raw, dict):
            return raw
        if "steps" in raw:
            every = raw.get("checkpoint_every", cls.model_fields["checkpoint_every"].default)
            if isinstance(every, int) and isinstance(raw["steps"], int) and every > raw["steps"] >= 1:
                raw = {**raw, "checkpoint_every": raw["steps"]}
        level = raw.get("importance_sampling_level", cls.model_fields["importance_sampling_level"].default)
        return {**CLIP_DEFAULTS.get(level, {}), **raw}


class RLParams(RLConfig):
    """The ``rl`` stage's params: the training config, the base model when it is not a model artifact input, and
    how this run executes (engines, checkpoints, where controllers run), which is no part of what the model is and so
    no part of its artifact key."""

    model_name_or_path: str | None = Field(None, description="a local transformers directory to start from; None "
                                                              "when the base is a model artifact input")
    small_tools: int | None = Field(None, ge=0, description="offer each environment task's tools plus this many "
                                    "distractors with compact schemas, as small_envs trains on (None: as built)")
    engine: str | None = Field(None, exclude=True, description="the controllers' engine spec (openai:URL#MODEL for "
                               "vLLM servers); default hf:<the base model> in every controller")
    output_dir: str | None = Field(None, exclude=True, description="the run directory (weights for the engines, "
                                   "checkpoints); default: the stage's scratch space, gone with it")
    resume: bool = Field(False, exclude=True, description="continue from the last checkpoint in output_dir")
    dask_address: str | None = Field(None, exclude=True, description="run the controllers as tasks on this Dask "
                                     "scheduler instead of local processes")
    device: str | None = Field(None, exclude=True, description="the trainer's device (default: cuda when present)")
    allow_untrained: bool = Field(False, exclude=True, description="publish a run that trained no sample, or left "
                                  "the model equal to its base (otherwise that run is an error)")
    report_to: Literal["none", "tensorboard"] = Field("none", exclude=True, description="where each step's figures "
                                                      "(reward, loss, kl, staleness, samples/s...) also go, as SFT's "
                                                      "report_to: tensorboard (the flow puts its files under <data "
                                                      "root>/tensorboard/rl/<key>), or none")
    logging_dir: str | None = Field(None, exclude=True, description="TensorBoard's directory (default: <run "
                                                                     "directory>/tensorboard, gone with it)")

    @field_validator("report_to")
    @classmethod
    def _installed(cls, value: str) -> str:
        import importlib.util

        if value == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("report_to tensorboard needs its package installed: pip install tensorboard")
        return value

    def local_inputs(self) -> list[str]:
        return [self.model_name_or_path] if self.model_name_or_path else []

    def to_config(self) -> RLConfig:
        """The training config alone (what a checkpoint records and a resumed run is checked against)."""
        return RLConfig.model_validate(self.model_dump(include=set(RLConfig.model_fields)))
