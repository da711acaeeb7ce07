"""The five declared experiments: the reports' causal claims about data, replayed on the pipeline's own flows.

Scale choices for the tiny model on 2 CPU cores (measured in EXPERIMENTS.md, not guessed): KeyChain and QA prompts
are built at 1,024 tokens instead of the report's 16K, with a larger world whose eval split (30% of the questions)
gives enough held-out seeds; every arm starts from the same base; the budget (smoke or default) sets the trainer's
steps.
"""

from __future__ import annotations

from flows.experiments.config import Experiment

# A world whose eval split holds ~400 multi-hop seeds (qa_seeds splits by a hash of the question: 440 of 1,500 at
# eval_fraction 0.3, measured), the held-out size EXPERIMENTS.md's power table needs to see LoongRL's +0.062; the
# difficulty filter keeps at most 2 seeds per answer, so a policy guessing the commonest answer (Brazil: 48 of 1,500
# questions) is not what training rewards.
WORLD = {"world": {"n_entities": 2000, "n_questions": 1500, "n_distractors": 2, "eval_fraction": 0.3},
         "qa_filtered": {"max_per_answer": 2}}
# 1,024 tokens: at 512 every seed's own documents (median 304, max 503 tokens) left no room for the chain, the
# instruction and the question (all 32 items rejected: own_context_exceeds_target); the report builds 16K.
SHORT_CONTEXT = {"keychain": {"target_tokens": 1024}}
# Held out: every eval-split seed (kept or not by the filter, so the reference's skill does not choose them), each a
# KeyChain or a regular item, never both.
HELDOUT_QA = {"keychain": {"n": 200, "n_regular": 200, "split": "eval", "items_from": "all"}}
# smoke: minutes, to see an experiment run end to end; default: under an hour per experiment on 2 cores; profile: the
# profile's own trainer config (a GPU profile's scale, with a real model as --base).
# The KeyChain experiments' base: tiny_policy, trained on 128-token QA prompts, answers the 1,024-token items with
# years whatever is asked (0/76 held-out attempts), and a cold start on long multi-hop QA alone taught it the answer's
# type, not to read (held-out reward 0.001, under the answer-prior baselines, EXPERIMENTS.md). A reading curriculum
# comes first, measured with bench/bench_reading.py on held-out rows: links KEY: "value" in ~256-token contexts
# (3,000 steps of 8 look the value up in 0.64 of held-out needles, 0.48 of one-hop chains; 900 steps at 1,024 tokens
# from tiny_policy: none), then 1,024 tokens (500 more steps: 0.64 / 0.60 / 0.64 with two-hop chains), here mixed
# with the train split's multi-hop QA with its documents (207-702 tokens) and the boxed answer alone (the 48 tokens
# it samples would cut any reasoning short). At 12 reading rows to 1 QA row that base answered held-out questions in
# the curriculum's value words ("sleek walnut"), so a third phase trains on the QA alone (the earlier cold start).
# In the experiment's own world the first phase at 2,000 rows per level memorised its 1,757 rows (15 epochs: 0.01 of
# held-out needles) and the base read nothing; at 8,000 per level (6,963 rows, 3.8 epochs) it reads: 0.76 of held-out
# needles, 0.68 of one-hop chains; after the second phase 0.95 / 0.95 / 0.97 at 1,024 tokens, and after the third (QA
# alone, 300 steps at 1e-3) 0.00 again: it erases the reading (bench/RESULTS.md, "Reading"). The third phase needs to
# keep reading rows in its mix, measured, before the experiment runs from this base. KeyChain items stay out of all
# of it: they are the keychain arm's training data.
READ_BATCH = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
LONG_QA_BASE = {"model": "tiny_policy", "cold_start": [
    {"sft_on": ["reading_curriculum"], "data": {"reading_curriculum": {"n_per_level": 8000, "target_tokens": 256}},
     "sft": {**READ_BATCH, "max_steps": 3000, "max_length": 512, "save_steps": 1000}},
    {"sft_on": ["reading_curriculum", "midtrain_longctx"],
     "data": {"reading_curriculum": {"n_per_level": 1000, "target_tokens": 1024}},
     "sft": {**READ_BATCH, "max_steps": 500, "max_length": 1280, "save_steps": 250}},
    {"sft_on": ["midtrain_longctx"], "sft": {"max_steps": 300}}]}
LONG_QA = {"midtrain_longctx": {"n_keychain": 0, "n_qa": 256, "answer": "direct", "qa_doc_chars": 4000}}
# Environment tasks are read as small environments (task tools + 3 distractors, compact schemas) in training, RL and
# held-out scoring alike, as small_envs' cold-start trajectories show them: the full environments render to
# 5.1K-19.4K tokens against the tiny model's 4,096 positions, so every episode ended before the policy wrote.
SMALL_TOOLS = 3
RL_BUDGETS = {"smoke": {"steps": 12, "batch_size": 16, "num_generations": 4, "checkpoint_every": 12, "controllers": 1},
              "default": {"steps": 60, "batch_size": 16, "num_generations": 4, "checkpoint_every": 20}, "profile": {}}
SFT_BUDGETS = {"smoke": {"max_steps": 60}, "default": {"max_steps": 300}, "profile": {}}

KEYCHAIN_VS_QA = Experiment(
    name="keychain_vs_qa",
    title="KeyChain RL vs RL on plain long-context multi-hop QA",
    claim=("LoongRL Table 4: RL on KeyChain data beats RL on the same multi-hop QA without the chains (72.4 vs 66.2 "
           "on LongBench multi-hop QA)."),
    expected="keychain > qa on held-out multi-hop QA with distractors",
    arms={"keychain": {"description": "KeyChain items (2-hop UUID chains to the hidden question)",
                       "train_on": ["keychain"], "data": {"keychain": {"n": 32, "n_regular": 0}}},
          "qa": {"description": "the same seeds asked directly, same context extension, no chains",
                 "train_on": ["keychain"], "data": {"keychain": {"n": 0, "n_regular": 32}}}},
    base=LONG_QA_BASE,
    data={**WORLD, **SHORT_CONTEXT, **LONG_QA},
    evaluation={"heldout": ["keychain"], "data": HELDOUT_QA, "groups": ["regular", "keychain"],
                "score": {"k": 4}},
    statistics={"metrics": ["mean_reward", "pass_at_k"], "pass_k": 4},
    budgets=RL_BUDGETS,
    notes=("Arm qa trains on the keychain stage's `regular` output built from the same seeds (n = 0, n_regular = 32 "
           "takes the first 32 kept seeds, as n = 32, n_regular = 0 does for the chains). Held out: KeyChain and "
           "regular items built from the eval split's seeds only (no seed or distractor document of training)."),
)

KEYCHAIN_ARM = KEYCHAIN_VS_QA.arms["keychain"]

NOISE_CURRICULUM = Experiment(
    name="noise_curriculum",
    title="RL with a noise curriculum vs clean-only RL",
    claim=("LongCat-Flash-Thinking-2601 Table 1 / section 3.3.3: training with the noise curriculum lifts the noisy "
           "score (VitaBench-Noise 13.3 -> 20.5) and shrinks the clean-noisy gap."),
    expected="curriculum > clean on noisy twins of held-out tasks",
    base={"model": "tiny_policy", "cold_start": [{"sft_on": ["small_envs"], "sft": {"max_steps": 300}}]},
    data=WORLD,  # the same world (and so the same tiny_policy) as the KeyChain experiments
    arms={"curriculum": {"description": "clean tasks plus noisy twins admitted by the noise curriculum controller",
                         "train_on": ["environments", "noisy_tasks"],
                         "train": {"scheduling": {"noise_curriculum": True}, "small_tools": SMALL_TOOLS}},
          "clean": {"description": "the same clean tasks only", "train_on": ["environments"],
                    "train": {"small_tools": SMALL_TOOLS}}},
    evaluation={"heldout": ["eval_random_envs", "noisy_eval"],
                "score": {"k": 2, "max_turns": 4, "small_tools": SMALL_TOOLS}},
    statistics={"metrics": ["noisy_score", "robustness_gap", "clean_score"]},
    budgets=RL_BUDGETS,
    notes=("The base is cold-started on small_envs' golden trajectories (SFT), so tool-call formats are known before "
           "RL. Held out: tasks of unseen environments (eval_random_envs, the telecom domain held out) and their "
           "noisy twins (noisy_eval); robustness_gap is clean minus noisy per clean task with twins (lower is "
           "more robust)."),
)

MIDTRAIN_AUGMENTATION = Experiment(
    name="midtrain_augmentation",
    title="Mid-training with vs without planning and decomposition augmentations",
    claim=("LongCat-Flash-Thinking-2601 Figure 2: planning-oriented mid-training data raises pass@k on agentic "
           "tasks."),
    expected="augmented > plain on pass@k of held-out environment tasks",
    arms={"augmented": {"description": "environment trajectories plus their planning and decomposition rewrites",
                        "train_on": ["midtrain_env", "midtrain_plan", "midtrain_decompose"], "trainer": "sft"},
          "plain": {"description": "the environment trajectories alone", "train_on": ["midtrain_env"],
                    "trainer": "sft"}},
    data=WORLD,
    evaluation={"heldout": ["eval_random_envs"], "score": {"k": 4, "max_turns": 4, "small_tools": SMALL_TOOLS}},
    statistics={"metrics": ["pass_at_k", "mean_reward"], "pass_k": 4},
    budgets=SFT_BUDGETS, curve="loss",
    notes="Same SFT steps for both arms: the augmented arm sees more distinct data per step, not more steps.",
)

KCG_SELECTION = Experiment(
    name="kcg_selection",
    title="Cold-start SFT on the KCG-selected subset vs a random subset of the same size vs the full set",
    claim=("LongCat-Flash-Thinking-2601 section 3.1.2: selecting cold-start data by sliding-window perplexity with "
           "K-Center-Greedy beats training on the full candidate set."),
    expected="kcg > full and kcg > random on held-out environment tasks",
    arms={"kcg": {"description": "sft_set's perplexity-weighted K-Center-Greedy selection", "train_on": ["sft_set"],
                  "trainer": "sft"},
          "random": {"description": "a seeded random subset of the same size", "train_on": ["sft_set"],
                     "trainer": "sft", "data": {"sft_set": {"selection": "random"}}},
          "full": {"description": "every candidate", "train_on": ["sft_set"], "trainer": "sft",
                   "data": {"sft_set": {"k": 100000}}}},
    data=WORLD,
    evaluation={"heldout": ["eval_random_envs"], "score": {"k": 4, "max_turns": 4, "small_tools": SMALL_TOOLS}},
    statistics={"metrics": ["pass_at_k", "mean_reward"], "pass_k": 4},
    budgets=SFT_BUDGETS, curve="loss",
    notes=("The three arms select from the same candidates with the same per-route quotas (`selection: random` "
           "draws each route's share at random; `k` above the candidates keeps them all)."),
)

ASYNC_VS_SYNC = Experiment(
    name="async_vs_sync",
    title="Asynchronous vs synchronous RL at matched trained samples",
    claim=("LongCat-Flash-Thinking-2601, DORA: streaming rollouts with bounded staleness raise throughput without "
           "costing learning: reward against trained samples overlaps."),
    expected="async = sync (no significant difference) at matched samples", equivalence=True,
    arms={"async": {"description": "streaming rollouts, max_staleness 2", "train_on": ["keychain"],
                    "data": KEYCHAIN_ARM.data, "train": {"mode": "async", "max_staleness": 2}},
          "sync": {"description": "a barrier per step (max_staleness 0)", "train_on": ["keychain"],
                   "data": KEYCHAIN_ARM.data, "train": {"mode": "sync", "max_staleness": 0}}},
    base=LONG_QA_BASE,
    data=KEYCHAIN_VS_QA.data,
    evaluation={"heldout": ["keychain"], "data": HELDOUT_QA, "score": {"k": 4}},
    statistics={"metrics": ["mean_reward"]},
    budgets=RL_BUDGETS,
    notes=("An equivalence claim: 'no difference detected' is evidence of overlap only as far as the interval is "
           "narrow; read its width. The base and the training data are keychain_vs_qa's KeyChain arm's (the same "
           "artifacts: the async arm is that arm's runs). "
           "Throughput is bench_rl's (bench/RESULTS.md)."),
)

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (KEYCHAIN_VS_QA, NOISE_CURRICULUM, MIDTRAIN_AUGMENTATION,
                                                          KCG_SELECTION, ASYNC_VS_SYNC)}


def get_experiment(name: str) -> Experiment:
    from data_contracts.stage import StageError

    if name not in EXPERIMENTS:
        raise StageError(f"no experiment {name!r}; declared: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
