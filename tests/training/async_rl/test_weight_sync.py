"""Weights reach every engine kind, and a run never waits on weights no engine loads: ``openai:`` engines against a
real `gymforge serve` follow each published version, a dead, refusing or wrong-model endpoint is one line within
seconds, an engine without an update path is refused at start, and a run whose engines stop advancing ends with the
reason. The `vllm serve` path is exercised against a test double of its development endpoints (vLLM needs CUDA)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from inference_support import tiny_checkpoint
from rl_fixtures import VersionedTestEngine, prompt_tasks

from inference.engine_factory import probe_engine
from inference.engine_support import EngineUnavailable
from inference.http_engine import HTTPEngine
from inference.server import create_app, serve_in_background
from training.async_rl.config import RLConfig
from training.async_rl.controllers import ThreadLauncher
from training.async_rl.run import RLRun, RLRunError

SMALL = {"batch_size": 4, "num_generations": 2, "controllers": 1, "concurrency": 2, "beta": 0.0,
         "sampling": {"max_tokens": 4}}


def rl_run(tmp_path, engine: Any, **config: Any) -> RLRun:
    settings = {"steps": 2, "checkpoint_every": 2, "max_staleness": 1, **SMALL, **config}
    return RLRun(tiny_checkpoint(), prompt_tasks(4), RLConfig(**settings), tmp_path / "run", engine=engine,
                 launcher=ThreadLauncher())


def test_an_openai_engine_against_gymforge_serve_loads_every_version_and_reports_it(tmp_path):
    with serve_in_background(create_app(tiny_checkpoint(), served_model_name="tiny")) as url:
        # max_staleness 0: each version's batch is admitted only once the version is published, so the engine
        # loads version 1, then 2, before generating them.
        result = rl_run(tmp_path, f"openai:{url}#tiny", steps=3, checkpoint_every=3, max_staleness=0).run()
        [served] = httpx.get(f"{url}/models").json()["data"]
    assert result.steps["version"].to_list() == [1, 2, 3]
    assert served["loaded_versions"] == [1, 2] and served["policy_version"] == 2
    samples = result.samples
    # The versions the server reported in its completions are the samples' versions: each batch its own.
    assert samples["min_policy_version"].to_list() == samples["trainer_version"].to_list()
    assert sorted(set(samples["max_policy_version"])) == [0, 1, 2]


def test_gymforge_serve_loads_a_published_file_and_refuses_a_missing_one(tmp_path):
    import torch
    from safetensors.torch import save_file

    from inference.hf_engine import HFEngine

    engine = HFEngine.load(tiny_checkpoint())
    shifted = {k: v + 0.5 for k, v in engine.model.state_dict().items()}
    save_file({k: v.contiguous().clone() for k, v in shifted.items()}, str(tmp_path / "v000007.safetensors"))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
            "logprobs": True}
    with serve_in_background(create_app(tiny_checkpoint(), "tiny", engine=engine)) as url:
        before = httpx.post(f"{url}/chat/completions", json=body).json()
        missing = httpx.post(f"{url}/load_weights", json={"path": str(tmp_path / "nope"), "policy_version": 1})
        loaded = httpx.post(f"{url}/load_weights",
                            json={"path": str(tmp_path / "v000007.safetensors"), "policy_version": 7})
        after = httpx.post(f"{url}/chat/completions", json=body).json()
    assert before["policy_version"] == 0 and after["policy_version"] == 7 and loaded.json() == {"policy_version": 7}
    assert missing.status_code == 400 and "no such weights file" in missing.json()["error"]["message"]
    assert before["choices"][0]["logprobs"] != after["choices"][0]["logprobs"]
    assert torch.equal(engine.model.state_dict()["lm_head.weight"], shifted["lm_head.weight"])


def test_a_dead_endpoint_fails_the_run_within_seconds_with_one_line(tmp_path):
    started = time.monotonic()
    with pytest.raises(RLRunError) as failure:
        rl_run(tmp_path, "openai:http://127.0.0.1:9/v1#m").run()
    assert time.monotonic() - started < 10
    message = str(failure.value)
    assert message.startswith("engine openai:http://127.0.0.1:9/v1#m: nothing answers at") and "\n" not in message
    assert not (tmp_path / "run" / "weights" / "latest").exists()  # nothing was published


def test_a_wrong_model_and_a_malformed_spec_are_one_line_each():
    with (serve_in_background(create_app(tiny_checkpoint(), served_model_name="tiny")) as url,
          pytest.raises(EngineUnavailable, match=r"serves \['tiny'\], not 'other'")):
        probe_engine(f"openai:{url}#other", weights=True)
    for spec, why in [("garbage-spec", "expected hf:DIR"), ("openai:127.0.0.1:9#m", "expected openai:http"),
                      ("tgi:x", "unknown kind 'tgi'")]:
        with pytest.raises(EngineUnavailable, match=why):
            probe_engine(spec)


class _NoUpdatePath:
    """An engine object without ``load_weights``."""

    policy_version = 0

    def generate(self, requests):  # pragma: no cover - never called: the run is refused first
        raise AssertionError

    def close(self) -> None:
        pass


def test_an_engine_without_an_update_path_is_refused_at_start(tmp_path):
    with pytest.raises(RLRunError, match="^engine _NoUpdatePath cannot load new policy weights"):
        rl_run(tmp_path, _NoUpdatePath()).run()


def _fake_vllm_serve(calls: list[tuple[str, Any]], dev_mode: bool):
    """Test double of `vllm serve`'s model list and, in development mode, its weight-update endpoints."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}

    if dev_mode:
        @app.post("/collective_rpc")
        async def collective_rpc(request: Request) -> dict[str, Any]:
            calls.append(("collective_rpc", await request.json()))
            return {"results": [None]}

        @app.post("/reset_prefix_cache")
        async def reset() -> dict[str, Any]:
            calls.append(("reset_prefix_cache", None))
            return {}

    return app


def test_vllm_serve_is_refused_without_its_update_endpoints_and_driven_through_them_with(tmp_path):
    calls: list[tuple[str, Any]] = []
    with serve_in_background(_fake_vllm_serve(calls, dev_mode=False)) as url:
        with pytest.raises(EngineUnavailable, match="VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
                                                    "inference.vllm_engine.WeightLoader"):
            probe_engine(f"openai:{url}#m", weights=True)
        probe_engine(f"openai:{url}#m")  # generation alone needs no update path
    with serve_in_background(_fake_vllm_serve(calls, dev_mode=True)) as url:
        probe_engine(f"openai:{url}#m", weights=True)
        engine = HTTPEngine(url, "m")
        try:
            engine.load_weights("/run/weights/v000003.safetensors", 3)
        finally:
            engine.close()
    assert engine.policy_version == 3
    assert calls == [("collective_rpc", {"method": "load_weights_from_path",
                                         "args": ["/run/weights/v000003.safetensors"]}),
                     ("reset_prefix_cache", None)]


class _StuckEngine(VersionedTestEngine):
    """Loads nothing: its completions stay at version 0 whatever is published."""

    def load_weights(self, path: str, policy_version: int) -> None:
        return None


def test_a_run_whose_engines_never_advance_ends_with_the_reason(tmp_path):
    started = time.monotonic()
    with pytest.raises(RLRunError, match=r"no engine loaded policy version 1 within weight_sync_timeout_s=1 s"):
        rl_run(tmp_path, _StuckEngine(p=[0.5] * 4), steps=6, checkpoint_every=6, max_staleness=0,
               weight_sync_timeout_s=1.0).run()
    assert time.monotonic() - started < 30


class _LoadingTestEngine(VersionedTestEngine):
    """Answers as ``VersionedTestEngine`` (so groups have rewards to learn from) and loads every published version
    into a real transformers engine's model, as ``hf:`` does."""

    def __init__(self, hf: Any, p: list[float]) -> None:
        super().__init__(p=p)
        self.hf = hf

    def load_weights(self, path: str, policy_version: int) -> None:
        self.hf.load_weights(path, policy_version)
        super().load_weights(path, policy_version)


def test_an_adapter_run_syncs_merged_weights_to_the_in_process_engine_and_gymforge_serve(tmp_path):
    """RL with adapters on the top layer: each version is published as the merged weights, which the in-process
    engine holds after loading it and `gymforge serve` holds after /v1/load_weights; they differ from the base in
    the adapted layer only."""
    import torch
    from safetensors.torch import load_file

    from inference.hf_engine import HFEngine

    base = HFEngine.load(tiny_checkpoint()).model.state_dict()
    in_process = HFEngine.load(tiny_checkpoint())
    result = rl_run(tmp_path, _LoadingTestEngine(in_process, [0.5] * 4), steps=3, checkpoint_every=3,
                    max_staleness=0, learning_rate=1e-2, lora={"r": 4, "alpha": 8, "layers": 1}).run()
    version = in_process.policy_version
    published = load_file(str(tmp_path / "run" / "weights" / f"v{version:06d}.safetensors"))
    assert version >= 1 and set(published) == set(base)
    top = f"layers.{len([k for k in base if k.endswith('self_attn.q_proj.weight')]) - 1}."
    changed = {name for name in base if not torch.equal(published[name], base[name])}
    assert changed and all(top in name and "_proj." in name for name in changed)
    assert all(torch.equal(in_process.model.state_dict()[name], published[name]) for name in published)
    served = HFEngine.load(tiny_checkpoint())
    path = tmp_path / "run" / "weights" / f"v{version:06d}.safetensors"
    with serve_in_background(create_app(tiny_checkpoint(), "tiny", engine=served)) as url:
        assert httpx.post(f"{url}/load_weights", json={"path": str(path), "policy_version": version}).json() == {
            "policy_version": version}
    assert all(torch.equal(served.model.state_dict()[name], published[name]) for name in published)
    final = result.model.state_dict()  # the published model artifact: the adapters of the last step merged
    assert set(final) == set(base) and any(not torch.equal(final[n], base[n]) for n in changed)
