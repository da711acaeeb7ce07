"""Engine construction from a spec string, and the run-start checks that an engine can serve.

Specs (DESIGN.md section 5):

- ``hf:DIR`` — a local transformers checkpoint, generated in-process (:class:`inference.hf_engine.HFEngine`);
  ``hf:KEY`` — the same for a model artifact of the data root's catalog (``hf:`` and ``vllm:`` both take either).
- ``openai:URL#MODEL`` — any OpenAI-compatible server: ``vllm serve`` or ``gymforge serve``
  (:class:`inference.http_engine.HTTPEngine`). ``URL`` is the API base, e.g. ``http://127.0.0.1:8000/v1``.
- ``vllm:DIR`` — in-process vLLM (optional ``vllm`` extra, CUDA only; :class:`inference.vllm_engine.VLLMEngine`).

What the engines share (prompt rendering, tool-call output, :class:`EngineUnavailable`) is in
:mod:`inference.engine_support`, which they import; this module only picks and checks one.
"""

from __future__ import annotations

from typing import Any

from inference.engine import Engine
from inference.engine_spec import EngineSpec, EngineSpecError
from inference.engine_support import EngineUnavailable


def _parsed(spec: str) -> EngineSpec:
    """The spec checked for form only; a malformed one is the :class:`EngineUnavailable` line run-start checks catch."""
    try:
        return EngineSpec.parse(spec)
    except EngineSpecError as exc:
        raise EngineUnavailable(str(exc)) from None


def load_engine(spec: str, policy_version: int = 0, **options: Any) -> Engine:
    """Build the engine a spec names; ``options`` go to the engine's constructor."""
    parsed = _parsed(spec)
    if parsed.kind == "openai":
        from inference.http_engine import HTTPEngine

        return HTTPEngine(parsed.target, str(parsed.model), policy_version=policy_version, **options)
    from inference.checkpoint import checkpoint_directory

    if parsed.kind == "hf":
        from inference.hf_engine import HFEngine

        return HFEngine.load(checkpoint_directory(parsed.target), policy_version=policy_version, **options)
    from inference.vllm_engine import VLLMEngine

    return VLLMEngine(checkpoint_directory(parsed.target), policy_version=policy_version, **options)


def probe_engine(spec: str, *, weights: bool = False, timeout_s: float = 5.0) -> None:
    """Check, within seconds and without loading a model, that ``spec`` can serve: a checkpoint directory for
    ``hf:``, vLLM and a GPU for ``vllm:``, an endpoint that answers and serves the model for ``openai:``; with
    ``weights``, also that it can load new policy weights (asynchronous RL). Raises :class:`EngineUnavailable`."""
    parsed = _parsed(spec)
    kind, target = parsed.kind, parsed.target
    if kind == "openai":
        from inference.http_engine import probe_endpoint

        probe_endpoint(target, str(parsed.model), weights=weights, timeout_s=timeout_s)
        return
    from inference.checkpoint import checkpoint_directory

    try:
        path = checkpoint_directory(target)
    except ValueError as exc:
        raise EngineUnavailable(f"engine {spec}: {exc}") from None
    if not (path / "config.json").is_file():
        raise EngineUnavailable(f"engine {spec}: {path} is not a checkpoint directory (no config.json)")
    if kind == "vllm":
        import importlib.util

        import torch

        from inference.vllm_engine import INSTALL_HINT

        if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
            raise EngineUnavailable(f"engine {spec}: {INSTALL_HINT}")


def check_weight_loading(engine: Any, name: str) -> None:
    """An engine object (not a spec) must have the weight-update path asynchronous RL drives."""
    if not callable(getattr(engine, "load_weights", None)):
        raise EngineUnavailable(
            f"engine {name} cannot load new policy weights (no load_weights): its completions would stay at "
            "version 0 and every sample go stale; use hf:DIR, vllm:DIR, or openai:URL#MODEL against gymforge "
            "serve or vllm serve")
