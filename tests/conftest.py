"""Shared fixtures. ``runtime``: one real Prefect server and a 2-process Dask cluster for the whole session."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SUPPORT_DIR = Path(__file__).resolve().parent / "support"

# As the CLI does (flows/cli/__init__.py): passive OpenMP waiting before torch loads, here and in spawned workers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# And its allocator settings (inference/cpu.py), for the same processes.
from inference.cpu import tune_allocator

tune_allocator()
# OpenEnv as gymforge imports it (without gradio's web UI), though test modules import OpenEnv's clients directly.
import inference.environments.models  # noqa: F401

# The tests' helper modules (fixtures, test doubles) are imported by name; Dask worker processes and deployment runs
# import the test-double stages by module name too: put the support directory on every import path and name the
# module for stage discovery, before any process starts. Only that directory: the room directories of the tree
# (tests/flows, ...) would shadow the packages of the same names.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT_DIR), os.environ.get("PYTHONPATH")]))
os.environ["GYMFORGE_STAGE_MODULES"] = ",".join(
    filter(None, [*os.environ.get("GYMFORGE_STAGE_MODULES", "").split(","), "stages_for_tests"])
)
# Prefect workers started by tests (`gymforge worker`, `prefect worker start`) look for scheduled runs every second
# rather than every ten: the tests wait on runs they just created.
os.environ.setdefault("PREFECT_WORKER_QUERY_SECONDS", "1")
if str(SUPPORT_DIR) not in sys.path:
    sys.path.insert(0, str(SUPPORT_DIR))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` a module's tests are spread over the test processes, and each process that runs one
    builds the module-scoped fixtures (a Dask cluster, a trained model, a server) again: the tests that use one run
    in one process, grouped by their file, unless they name a group of their own."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if item.get_closest_marker("xdist_group") is None and fixtures is not None and any(
                definitions[-1].scope == "module" for definitions in fixtures.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A started ``flows.runtime.Runtime`` on a temporary data root (about 10 s to start on 2 cores)."""
    from flows.runtime import Runtime

    with Runtime(tmp_path_factory.mktemp("gymforge-data"), n_workers=2) as rt:
        yield rt


@pytest.fixture(scope="session")
def attached(runtime: object) -> Callable[[Path], dict[str, str]]:
    """The environment of a ``gymforge`` subprocess on a data root, attached to the session's Prefect server and
    Dask cluster (``--prefect-api-url``, ``--dask-address``): for tests whose subject is a command's behaviour, not
    the runtime it would otherwise start (tests/flows/test_runtime.py and test_deploy.py start their own)."""

    def env(data: Path, dask: bool = True) -> dict[str, str]:
        """``dask=False``: the Prefect server only (training runs then keep their controllers local)."""
        environ = {k: v for k, v in os.environ.items() if k != "GYMFORGE_DASK_ADDRESS"}
        return {**environ, "GYMFORGE_DATA": str(data), "PREFECT_API_URL": runtime.prefect_api_url,
                **({"GYMFORGE_DASK_ADDRESS": runtime.dask_address} if dask else {})}

    return env
