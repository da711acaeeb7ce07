"""Mid-training and cold-start trajectories (LongCat-Flash-Thinking-2601 section 2 and 3.1.2): the episode routes
(``midtrain_env``, played from ``synth``'s environment-grounded episodes, and its augmentations ``midtrain_decompose``,
``midtrain_reason``, ``midtrain_plan``), ``midtrain_text``, ``midtrain_longctx``, ``reading_curriculum``, and the
cold-start selection ``sft_set`` (with ``kcenter``, the sliding-window ``perplexity`` of its reference model and the
sentence ``embeddings`` it covers). ``routes`` holds what every trajectory stage shares: params, the
row, token counting and the contract."""
