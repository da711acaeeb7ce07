"""Environmental noise for robust agentic RL (LongCat-Flash-Thinking-2601, section 3.3.3), as every room that runs
an environment sees it.

Instruction noise (``instruction``) rewrites a task's text and records how each change can be recovered; tool
noise (``tools``) wraps the environment's tool execution with a seeded fault schedule stored in the task record
(``records``), and ``environment`` applies that schedule; ``curriculum`` holds the noise levels and the controller
that promotes them on the robustness gap. Building verified noisy twins (the solvability check and its scripted
reference agents) is the noise branch's own: ``tasks/noise/``.
"""

from envgen.noise import instruction, tools  # noqa: F401 - every kind of noise is declared before a record is read
