"""Asynchronous RL (LongCat-Flash-Thinking-2601 "The DORA Asynchronous RL Framework" and "RL Training Strategy";
LoongRL's GRPO settings), one concern per module: ``config`` (the run's settings), ``controllers`` (the rollout
manager and its controller processes), ``queue`` (the sample queue and its staleness bounds), ``losses``,
``scheduling``, ``weights`` (weight sync to every engine kind), ``trainer`` (the policy update), ``run`` (``RLRun``,
which wires them), ``sources`` (RL tasks from artifacts), ``tensorboard_steps`` and ``plot``. The ``rl`` stage on them is
``training/rl.py``.
"""
