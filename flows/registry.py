"""Stage discovery. A stage lives in the module named after it (``tasks/<branch>/<name>.py``, ``tasks/<name>.py`` or
``training/<name>.py``, STYLE.md guideline 8: a unit is registered beside its code), so the registry imports a stage's
module only when that stage is asked for: a Dask worker running ``world`` never loads torch or transformers for ``tiny_policy``. ``discover``
imports them all, for planning the whole DAG.

Extra stage modules (a user's own stages, the test doubles of the test suite) are named in the environment
variable ``GYMFORGE_STAGE_MODULES`` (comma-separated module names) and imported in every process; the variable is
inherited by Dask worker processes and deployment runs.

Records are found the same way: each is declared beside the branch that uses it, so ``records`` reads them from the
modules the stages import rather than from a list kept by hand.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
from functools import cache

from data_contracts.schemas import Record
from data_contracts.stage import STAGES, Stage, StageError, get_stage

# Where stage modules live: the stage packages and the branches of tasks/ (tasks/__init__.py says which is which).
STAGE_HOMES = ("tasks", "tasks.environments", "tasks.noise", "tasks.longctx", "tasks.midtrain", "tasks.research",
               "training")
EXTRA_MODULES_ENV = "GYMFORGE_STAGE_MODULES"
# The rooms records may be declared in (every room below flows).
RECORD_ROOMS = ("data_contracts", "envgen", "inference", "tasks", "training")


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


def records() -> dict[str, Record]:
    """Every record by name: the Record constants of the rooms' modules once every stage module is imported (a stage's
    module imports the records it emits). Two different records of one name are an error."""
    discover()
    found: dict[str, Record] = {}
    for module_name, module in sorted(sys.modules.items()):
        if module_name.partition(".")[0] in RECORD_ROOMS:
            for value in vars(module).values():
                if isinstance(value, Record) and found.setdefault(value.name, value) != value:
                    raise StageError(f"two records are named {value.name!r}; rename one ({module_name})")
    return found
