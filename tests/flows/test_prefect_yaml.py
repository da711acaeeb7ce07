"""prefect.yaml: every deployment's entrypoint imports, names a flow, and passes only parameters the flow takes;
GPU work goes to the `gpu` pool one run at a time."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
import yaml

DEPLOYMENTS = yaml.safe_load((Path(__file__).resolve().parents[2] / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_the_entrypoint_is_a_flow_taking_the_deployments_parameters(deployment):
    module, name = deployment["entrypoint"].split(":")
    flow = getattr(importlib.import_module(module), name)
    assert flow.name == deployment["name"]
    accepted = set(inspect.signature(flow.fn).parameters)
    assert set(deployment.get("parameters") or {}) <= accepted
    if "gpu" in deployment.get("tags", []):
        assert deployment["work_pool"]["name"] == "gpu"
        assert deployment["concurrency_limit"]["limit"] == 1
