"""The ASGI app OpenEnv's manifest (``openenv.yaml`` beside this file) names: the server of the environment artifact
in ``$GYMFORGE_ENV_ARTIFACT`` (a key, or a stage with one published artifact) of the data root ``$GYMFORGE_DATA``,
for ``uvicorn inference.environments.app:app`` and OpenEnv's packaging; ``gymforge serve-env`` is the same server
with its settings as options."""

from __future__ import annotations

import os

from inference.environments.server import create_app
from inference.environments.tasks import served_artifact

ARTIFACT_ENV = "GYMFORGE_ENV_ARTIFACT"

if ARTIFACT_ENV not in os.environ:
    raise RuntimeError(f"set {ARTIFACT_ENV} to the environment artifact to serve (a key, or a stage such as "
                       "environments), and GYMFORGE_DATA to its data root")
app = create_app(served_artifact(os.environ[ARTIFACT_ENV]))
