"""Executable tool-use environments (LongCat-Flash-Thinking-2601 section 3.2): ``domain_graphs`` -> ``environments``
-> ``task_filtered``; ``eval_random_envs`` (unseen evaluation runs); ``small_envs`` (cold-start golden trajectories
in small, compactly rendered environments)."""
