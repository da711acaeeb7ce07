"""The in-process vLLM engine, ``vllm:DIR`` (optional extra: ``pip install 'gymforge[vllm]'``, CUDA GPU only).

Prompts are rendered with the checkpoint's own chat template by :func:`inference.engine_support.render_prompt` and passed
to vLLM as token ids, so all three engines see byte-identical prompts. vLLM is started with
``logprobs_mode="processed_logprobs"`` so the returned logprobs are those of the sampling distribution (temperature
and top-p applied); its default, ``raw_logprobs``, would score tokens under the unscaled model distribution.
Extra keyword arguments go to ``vllm.LLM`` (``gpu_memory_utilization``, ``tensor_parallel_size``, ``dtype`` ...).

New policy weights (asynchronous RL): :class:`WeightLoader` is vLLM's worker extension (``worker_extension_cls``)
that loads a published safetensors file into each worker's model (``model_runner.model.load_weights``, which maps
checkpoint names to vLLM's fused layers); :meth:`VLLMEngine.load_weights` runs it on every worker through
``collective_rpc`` and resets the prefix cache, whose KV the old weights computed. ``vllm serve`` takes the same
extension (``VLLM_SERVER_DEV_MODE=1 vllm serve DIR --worker-extension-cls inference.vllm_engine.WeightLoader``),
driven over HTTP by :meth:`inference.http_engine.HTTPEngine.load_weights`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inference.engine import Completion, Request
from inference.engine_support import make_completion, render_prompt, stop_token_ids, validate_request

INSTALL_HINT = (
    "the vllm: engine needs the optional vLLM extra on a CUDA machine: pip install 'gymforge[vllm]'. "
    "Without a GPU use hf:DIR, or openai:URL#MODEL against a running `vllm serve` / `gymforge serve`."
)


WEIGHT_LOADER = "inference.vllm_engine.WeightLoader"


class WeightLoader:
    """Mixed into each vLLM worker (``worker_extension_cls``): ``self`` is the worker."""

    model_runner: Any

    def load_weights_from_path(self, path: str) -> None:
        from safetensors.torch import load_file

        self.model_runner.model.load_weights(weights=load_file(path).items())


class VLLMEngine:
    def __init__(self, model_dir: str | Path, policy_version: int = 0, **llm_options: Any) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise RuntimeError(INSTALL_HINT) from exc
        from inference.tokenizer import load as load_tokenizer

        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path}: not a transformers checkpoint directory (no config.json)")
        self.policy_version = policy_version
        self.tokenizer = load_tokenizer(path)
        self.stop_ids = sorted(stop_token_ids(self.tokenizer))
        options = {"logprobs_mode": "processed_logprobs", "worker_extension_cls": WEIGHT_LOADER, **llm_options}
        self.llm = vllm.LLM(model=str(path), tokenizer=str(path), **options)

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        prompts, params = [], []
        for request in requests:
            validate_request(request)
            s = request.sampling
            prompts.append(render_prompt(self.tokenizer, request.messages, request.tools))
            params.append(
                VSamplingParams(
                    n=s.n,
                    temperature=s.temperature,
                    top_p=s.top_p,
                    max_tokens=s.max_tokens,
                    seed=s.seed,
                    stop=list(s.stop) or None,
                    stop_token_ids=self.stop_ids,
                    logprobs=0,  # only the sampled token's logprob
                )
            )
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
        )
        results = []
        for request, prompt, output in zip(requests, prompts, outputs):
            samples = []
            for o in sorted(output.outputs, key=lambda o: o.index):
                token_ids = list(o.token_ids)
                logprobs = [o.logprobs[k][t].logprob for k, t in enumerate(token_ids)]
                samples.append(
                    make_completion(
                        o.text,
                        token_ids,
                        logprobs,
                        o.finish_reason or "length",
                        self.policy_version,
                        prompt,
                        parse_tools=bool(request.tools),
                    )
                )
            results.append(samples)
        return results

    def load_weights(self, path: str | Path, policy_version: int) -> None:
        """Load a published version into every worker; completions from now on carry ``policy_version``."""
        self.llm.collective_rpc("load_weights_from_path", args=(str(path),))
        self.llm.reset_prefix_cache()
        self.policy_version = policy_version

    def close(self) -> None:
        self.llm = None
