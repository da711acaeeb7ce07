"""Noise (LongCat-Flash-Thinking-2601 section 3.3.3): verified noisy twins of environment tasks, per curriculum level
for training (``noisy_tasks``) and at the hardest level for evaluation (``noisy_eval``); ``twins`` is the procedure
both share, ``solvability`` builds each twin and re-verifies it by execution with the scripted reference agents of
``agents``, and ``plot`` draws the robustness figure."""
