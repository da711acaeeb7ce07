"""Long-context RL data (LoongRL): the synthetic ``world`` and its ``qa_seeds``, the ``qa_filtered`` difficulty
filter, ``keychain`` and ``needles`` built to a token budget (``token_budget``), ``math_seeds``, and the ``rl_mix``
mixture."""
