"""The data stages of the DAG, one package per branch (docs/concepts/house.md); a stage lives in the module named
after it inside its branch, with the procedure only it uses beside it:

- ``environments``: domain graphs, executable environments and their tasks, the unseen Random Complex Tasks, the
  small environments and the difficulty-filtered tasks;
- ``noise``: noisy twins of environment tasks on a curriculum, for training and evaluation;
- ``longctx``: the synthetic world, QA seeds and their difficulty filter, KeyChain, needles, math and the RL mixture;
- ``midtrain``: mid-training and cold-start trajectories (environment-grounded and its augmentations, text-driven,
  long-context, the reading curriculum) and the cold-start selection ``sft_set``;
- ``research``: the search index, search QA and research tasks and trajectories, with the local search environment
  and the deep-research harness they are made with.

Each branch declares its records in its ``records.py``. Shared by several branches, at the top: ``tokenizer`` (the
stage every token count uses), ``difficulty`` (the keep decision and figure of both difficulty filters), ``readers``
(the streamed readers of the local files users point stages at) and ``records`` (the records several branches use).
"""
