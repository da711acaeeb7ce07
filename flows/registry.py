"""Stage discovery: import every module of the ``tasks`` and ``training`` packages so their ``@stage``
declarations register themselves (STYLE.md guideline 8: a unit is registered beside its code).

Extra stage modules (a user's own stages, the test doubles of the test suite) are named in the environment
variable ``GYMFORGE_STAGE_MODULES`` (comma-separated module names). The variable is inherited by Dask worker
processes and deployment runs, so a stage registered in the driver is registered in every worker too.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from functools import cache

from data_contracts.stage import STAGES, Stage, StageError, get_stage

STAGE_PACKAGES = ("tasks", "training")
EXTRA_MODULES_ENV = "GYMFORGE_STAGE_MODULES"


def _stage_modules() -> list[str]:
    names: list[str] = []
    for package_name in STAGE_PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            names.append(info.name)
    extra = os.environ.get(EXTRA_MODULES_ENV, "")
    names.extend(name.strip() for name in extra.split(",") if name.strip())
    return names


@cache
def discover() -> dict[str, Stage]:
    """Import every stage module once per process and return the registry (name -> Stage)."""
    for module_name in _stage_modules():
        try:
            importlib.import_module(module_name)
        except Exception as exc:  # a broken stage module must name itself, not fail somewhere downstream
            raise StageError(f"cannot import stage module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    return STAGES


def stage_named(name: str) -> Stage:
    """The registered stage called ``name``; the error lists the known stages."""
    discover()
    return get_stage(name)
