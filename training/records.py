"""The records of the training stages: what a run did to its model, its logged figures and dropped trajectories, the RL
run's samples and steps, and the evaluation's items and held-out scores."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, cols

LOSS_CURVE = Record("loss_curve", "Mean training loss per window of steps.", cols(
    step=(pl.Int64, "the window's last step"),
    loss=(pl.Float64, "mean loss over the window"),
), key=("step",))

TRAINING_SUMMARY = Record("training_summary", "What a training stage did to its model.", cols(
    base=(pl.String, "the base model: an embedded size, a local directory or a model artifact key"),
    steps=(pl.Int64, "optimizer steps taken"),
    examples=(pl.Int64, "training examples"),
    final_loss=(pl.Float64, "loss of the last step"),
    parameters=(pl.Int64, "parameters of the model"),
    dtype=(pl.String, "dtype of the weights"),
))

TRAINING_METRIC = Record("training_metric", "One logged figure of a training run (long format: one row per step, split "
                         "and name).", cols(
    step=(pl.Int64, "optimizer step the figure was logged at (0: before the first step)"),
    split=(pl.String, "train | eval"),
    name=(pl.String, "loss, learning_rate, grad_norm, num_tokens, tool_call_format, tool_call_valid, ..."),
    value=(pl.Float64, "its value"),
), key=("step", "split", "name"))

SFT_REJECTED = Record("sft_rejected", "A trajectory an SFT run did not train on.", cols(
    id=(pl.String, "the trajectory"),
    source=(pl.String, "its synthesis route"),
    tokens=(pl.Int64, "its chat-templated length with the base model's tokenizer"),
    reason=(pl.String, "not_verified | too_long | no_trained_turn"),
))

RL_SAMPLE = Record("rl_sample", "A sample an RL run consumed or dropped: the audit trail of its staleness bound.", cols(
    sample_id=(pl.String, "<group id>#<index>"),
    group_id=(pl.String, "the group: samples of one task copy, advantages taken within it"),
    task_id=(pl.String, "the task or prompt"),
    source=(pl.String, "the domain of an environment task, the category of a prompt"),
    min_policy_version=(pl.Int64, "oldest policy version among the sample's tokens (null: it has none)"),
    max_policy_version=(pl.Int64, "newest policy version among the sample's tokens (null: it has none)"),
    trainer_version=(pl.Int64, "the trainer version that consumed (or dropped) it"),
    staleness=(pl.Int64, "trainer_version - min_policy_version (0 for a sample without tokens)"),
    max_staleness=(pl.Int64, "the run's staleness bound S: a trained sample has staleness <= S"),
    admission_version=(pl.Int64, "the trainer version when the sample was admitted"),
    admission_slot=(pl.Int64, "accepted + running samples, this one included, when it was admitted"),
    admission_limit=(pl.Int64, "AReaL's bound then: (S + admission_version + 1) x batch_size >= admission_slot"),
    reward=(pl.Float64, "the sample's reward"),
    advantage=(pl.Float64, "the advantage it was trained with (times its weight); null when not trained"),
    weight=(pl.Float64, "its weight (a self-verification sample's: the judged group's uncertainty)"),
    trained=(pl.Boolean, "whether it entered the loss"),
    drop_reason=(pl.String, "why it was not trained (stale, equal rewards, a reward that raised...); null if trained"),
    n_output_tokens=(pl.Int64, "sampled tokens"),
), key=("sample_id",), required=("trainer_version", "staleness", "trained"))

RL_STEP = Record("rl_step", "One optimizer step of an RL run.", cols(
    version=(pl.Int64, "the policy version the step produced"),
    loss=(pl.Float64, "the policy loss"),
    kl=(pl.Float64, "k3 KL to the starting policy (0 when beta is 0)"),
    clip_ratio=(pl.Float64, "share of tokens (of sequences, at sequence level) clipped where the clip binds"),
    ratio_mean=(pl.Float64, "mean importance ratio"),
    behaviour_weight_mean=(pl.Float64, "mean behaviour weight (1 when not used)"),
    tokens=(pl.Float64, "trained tokens"),
    grad_norm=(pl.Float64, "gradient norm before clipping"),
    learning_rate=(pl.Float64, "the learning rate after the step"),
    groups=(pl.Float64, "groups consumed"),
    zero_variance_groups=(pl.Float64, "groups whose rewards were all equal: reported, not trained"),
    trained_samples=(pl.Float64, "samples in the loss"),
    ratio_on_policy=(pl.Float64, "mean token ratio (trainer / engine) of samples this version drew; null if none"),
    reward_mean=(pl.Float64, "mean reward of the consumed samples"),
    reward_std=(pl.Float64, "their standard deviation"),
    staleness_mean=(pl.Float64, "mean staleness of the consumed samples"),
    staleness_max=(pl.Int64, "their largest staleness (never above max_staleness)"),
    queue_depth=(pl.Int64, "samples waiting after the step"),
    samples_per_s=(pl.Float64, "trained samples per second since the run started"),
    consumed_per_s=(pl.Float64, "consumed samples (trained or equal-reward) per second"),
    engine_load=(pl.Float64, "engine-busy time over wall time, over every controller"),
    wall_s=(pl.Float64, "seconds since the run started (across resumes)"),
    verifying=(pl.Boolean, "whether the self-verification phase is on"),
    noise_level=(pl.Int64, "the noise curriculum's level (0 when off)"),
    drops=(pl.Int64, "samples dropped at consumption so far"),
    requeued=(pl.Int64, "samples handed out again after a controller died, so far"),
), key=("version",))

EVAL_ITEM = Record("eval_item", "One evaluation item under one strategy at one width: what it scored and what it "
                   "cost.", cols(
    suite=(pl.String, "the suite (keychain, needles, qa, math, noise, random_tasks, context)"),
    variant=(pl.String, "the suite's held-out variant (its data partition: eval-4096, default, ...)"),
    item_id=(pl.String, "the item: a prompt row's id or a task id"),
    source=(pl.String, "the item's category (keychain, regular, needles, math, world, a domain, ...)"),
    domain=(pl.String, "the environment's domain, or the prompt's source"),
    difficulty=(pl.String, "the item's difficulty bucket (math kind, golden calls, hops), null when none"),
    length=(pl.Int64, "prompt tokens with the data's tokenizer, null when not counted"),
    noise_level=(pl.Int64, "0 for a clean task, the twin's level otherwise; null for prompts"),
    noise_types=(STRINGS, "the noise transforms a twin carries"),
    clean_task_id=(pl.String, "a noisy twin's clean task (pairs them for the robustness gap)"),
    run=(pl.Int64, "the Random Complex Tasks run, null elsewhere"),
    strategy=(pl.String, "sample | single | self_consistency | best_of_k | heavy_thinking | context:<name>"),
    k=(pl.Int64, "width: samples the strategy drew (for sample and context rows: the samples averaged)"),
    score=(pl.Float64, ("the strategy's score of the item in [0, 1] (sample and context rows: Avg@k); null when "
                       "not scored")),
    n_samples=(pl.Int64, "samples scored (tool and user failures are not the agent's and are left out)"),
    n_correct=(pl.Int64, "of them, fully correct (Pass@k's c)"),
    tokens=(pl.Int64, "tokens generated for this result: every stage-1 sample used plus the summaries"),
    summary_prompt_tokens=(pl.Int64, "prompt tokens the summary model read (heavy_thinking), 0 otherwise"),
    answer=(pl.String, "the final answer (the vote, the summary's box), null for episodes"),
    failures=(JSON, "{agent, user, tool}: failure labels over the samples"),
    stop_reasons=(JSON, "{done, max_turns, length, context_overflow}: why the samples ended"),
    status=(pl.String, "scored | infra_error (the engine failed after its retries: never scored as wrong)"),
    error=(pl.String, "the infrastructure error, null when scored"),
    overlap=(pl.Boolean, ("the item appears in the model's training data (found through the catalog lineage); "
                         "summaries leave it out")),
), key=("item_id", "strategy", "k"), required=("suite", "strategy", "k", "status", "overlap"),
    json={"failures": "object", "stop_reasons": "object"})

HELDOUT_SCORE = Record("heldout_score", "One sampled attempt of a model at a held-out RL task, scored by the task's own "
                        "reward (the experiments' unit of measurement).", cols(
    task_id=(pl.String, "the task, as the RL sources name it (source:id for prompts)"),
    source=(pl.String, "the task's source: keychain, regular, qa... for prompts, the domain for environment tasks"),
    kind=(pl.String, "prompt | env"),
    noise_level=(pl.Int64, "0 for a clean task, a noisy twin's level otherwise"),
    clean_task_id=(pl.String, "a noisy twin's clean task (pairs them for the robustness gap), null otherwise"),
    sample=(pl.Int64, "the attempt's index, 0..k-1"),
    reward=(pl.Float64, "the task's reward of the attempt, in [0, 1]"),
), key=("task_id", "sample"), required=("source", "kind", "noise_level", "reward"))
