"""Stage discovery. A stage lives in the module named after it (``tasks/<branch>/<name>.py``, ``tasks/<name>.py`` or
``training/<name>.py``, STYLE.md guideline 8: a unit is registered beside its code), so the registry imports a stage's
module only when that stage is asked for: a Dask worker running ``world`` never loads torch or transformers for ``tiny_policy``. ``discover``
imports them all, for planning the whole DAG.

Extra stage modules (a user's own stages, the test doubles of the test suite) are named in the environment
variable ``GYMFORGE_STAGE_MODULES`` (comma-separated module names) and imported in every process; the variable is
inherited by Dask worker processes and deployment runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from functools import cache

from data_contracts.stage import STAGES, Stage, StageError, get_stage

# Where stage modules live: the stage packages and the branches of tasks/ (tasks/__init__.py says which is which).
STAGE_HOMES = ("tasks", "tasks.environments", "tasks.noise", "tasks.longctx", "tasks.midtrain", "tasks.research",
               "training")
EXTRA_MODULES_ENV = "GYMFORGE_STAGE_MODULES"


def _import(module_name: str) -> None:
    try:
        importlib.import_module(module_name)
    except Exception as exc:  # a broken stage module must name itself, not fail somewhere downstream
        raise StageError(f"cannot import stage module {module_name!r}: {type(exc).__name__}: {exc}") from exc


@cache
def _extra_modules() -> None:
    for name in os.environ.get(EXTRA_MODULES_ENV, "").split(","):
        if name.strip():
            _import(name.strip())


@cache
def discover() -> dict[str, Stage]:
    """Import every module of the stage packages once per process and return the registry (name -> Stage)."""
    _extra_modules()
    for home in STAGE_HOMES:
        package = importlib.import_module(home)
        for info in pkgutil.iter_modules(package.__path__, prefix=f"{home}."):
            if info.name not in STAGE_HOMES:
                _import(info.name)
    return STAGES


def stage_named(name: str) -> Stage:
    """The registered stage called ``name``, importing only its own module; the error lists the known stages."""
    _extra_modules()
    if name not in STAGES and name.isidentifier():
        for home in STAGE_HOMES:
            module_name = f"{home}.{name}"
            if importlib.util.find_spec(module_name) is not None:
                _import(module_name)
                break
    if name not in STAGES:
        discover()  # for the error message: every stage there is
    return get_stage(name)
