"""Environmental noise for robust agentic RL (LongCat-Flash-Thinking-2601, section 3.3.3).

Instruction noise (``instruction``) rewrites a task's text and records how each change can be recovered; tool
noise (``tools``) wraps the runtime's tool execution with a seeded fault schedule stored in the task record;
``solvability`` re-verifies every noisy task by execution with scripted reference agents (``agents``); and
``curriculum`` holds the noise levels and the controller that promotes them on the robustness gap.
"""
