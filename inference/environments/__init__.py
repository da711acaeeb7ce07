"""Environments every trainer can use: gymforge's environment tasks served outside gymforge.

- ``tasks``: the tasks an environment artifact offers (``environments``, ``small_envs``, ``noisy_tasks``,
  ``eval_random_envs``), chosen by task id, by seed, and by noise level.
- ``episode``: one episode driven one call at a time (a tool call, or a message to the simulated user through the
  ``respond`` tool): what the OpenEnv server and the TRL adapter both run on ``envgen.environment``.
- ``server``: the OpenEnv-compatible server (OpenEnv's own ``HTTPEnvServer`` with tools over MCP), ``gymforge
  serve-env``; ``client``: OpenEnv's MCP tool client with the episode fields kept.
- ``trl``: factories for ``GRPOTrainer(environment_factory=...)``.
- ``exports``: environment tasks as the rows TRL, verl and SkyRL read (``gymforge export --format trl|verl|skyrl``).
"""
