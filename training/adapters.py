"""Low-rank adapters (``peft``) on a frozen base, for SFT and RL alike.

Adapters go on the projections of the top ``layers`` transformer layers only: the frozen layers below them need no
backward pass, which is most of what a training step on 2 cores costs (bench/RESULTS.md, bench_sft throughput).
What leaves the trainer is always plain transformers weights: the SFT artifact has the adapter merged into them
(``merge_adapter``), and RL publishes each version's merged weights (``merged_state_dict``), so every engine kind
(in-process, ``gymforge serve``, vLLM in-process or served) loads them as any checkpoint, by the weight-sync path it
already has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from data_contracts.stage import Params, StageError

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Every linear projection of a Llama/Qwen-style layer: adapters on all of them learn as full fine-tuning does."""
ADAPTER = "adapter"  # the subdirectory of a model artifact that keeps the trained adapter (peft's format)


class LoraSettings(Params):
    """Low-rank adapters on a frozen base (peft's ``LoraConfig``)."""

    r: int = Field(16, gt=0, description="adapter rank")
    alpha: int = Field(32, gt=0, description="adapter scale numerator: updates are scaled by alpha / r")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapter's input")
    layers: int | None = Field(8, gt=0, description="adapt the top this many transformer layers only, so the "
                               "backward pass stops below them (None: every layer)")
    target_modules: list[str] = Field(default_factory=lambda: list(PROJECTIONS), min_length=1,
                                      description="the linear modules (by name) that get an adapter")

    def config(self, num_layers: int) -> Any:
        """peft's ``LoraConfig`` for a model of ``num_layers`` transformer layers."""
        from peft import LoraConfig

        if self.layers is not None and self.layers > num_layers:
            raise StageError(f"lora.layers={self.layers}: the base has {num_layers} layers; set at most that, or "
                             "null for every layer")
        top = None if self.layers is None else list(range(num_layers - self.layers, num_layers))
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout, bias="none",
                          target_modules=list(self.target_modules), layers_to_transform=top, task_type="CAUSAL_LM")

    def wrap(self, model: Any) -> Any:
        """``model`` with fresh adapters (peft), its own weights frozen."""
        from peft import get_peft_model

        return get_peft_model(model, self.config(model.config.num_hidden_layers))


def keep_frozen_outputs(model: Any, max_bytes: int) -> Any:
    """Compute the frozen layers below the adapters once per training input and keep their output (up to
    ``max_bytes``), so a later epoch runs only the adapted layers and the output layer; returns the kept outputs'
    record (``hits``, ``bytes``). Nothing changes where every layer trains.

    The frozen layers give the same output for the same input (weights fixed, no dropout), so what a later epoch
    reads is what it would compute; the key is the input itself (the embeddings of a batch's token ids; batches of
    one trajectory, as the CPU recipes train, meet again every epoch). Only training forwards are served: a model in
    eval mode, or one decoding with a KV cache, runs every layer. The layers' forwards are replaced on the instances,
    so names, state dict and the merged artifact are unchanged.
    """
    import hashlib

    import torch

    layers = causal_lm(model).model.layers
    trained = [i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters())]
    kept: dict[bytes, torch.Tensor] = {}
    record = {"hits": 0, "bytes": 0}
    if not trained or trained[0] == 0:
        return record
    frozen = list(layers[: trained[0]])
    forwards = [layer.forward for layer in frozen]

    def served(kwargs: dict[str, Any]) -> bool:
        return frozen[0].training and kwargs.get("cache") is None and torch.is_grad_enabled()

    def below(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not served(kwargs):
            return forwards[0](hidden_states, *args, **kwargs)
        key = hashlib.blake2b(hidden_states.detach().cpu().contiguous().view(torch.uint8).numpy(),
                              digest_size=16).digest() + repr(tuple(hidden_states.shape)).encode()
        if key in kept:
            record["hits"] += 1
            return kept[key]
        with torch.no_grad():
            for forward in forwards:
                hidden_states = forward(hidden_states, *args, **kwargs)
        if record["bytes"] + hidden_states.nbytes <= max_bytes:
            kept[key] = hidden_states
            record["bytes"] += hidden_states.nbytes
        return hidden_states

    def passed(forward: Any) -> Any:
        def through(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return hidden_states if served(kwargs) else forward(hidden_states, *args, **kwargs)
        return through

    frozen[0].forward = below
    for layer, forward in zip(frozen[1:], forwards[1:], strict=True):
        layer.forward = passed(forward)
    return record


def causal_lm(model: Any) -> Any:
    """The transformers model inside an adapter-wrapped one (its adapters in place), or ``model`` itself."""
    from peft import PeftModel

    return model.get_base_model() if isinstance(model, PeftModel) else model


def merge_adapter(model: Any, adapter_dir: Path | None = None) -> Any:
    """A trained model as plain transformers weights: an adapter-wrapped one (peft) has its adapter saved to
    ``adapter_dir`` (when given) and merged into the base weights; any other model is returned as it is."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        return model
    if adapter_dir is not None:
        model.save_pretrained(str(adapter_dir))
    return model.merge_and_unload()


def merged_copy(model: Any) -> Any:
    """A plain transformers copy of an adapter-wrapped model with its adapters merged, leaving ``model`` training;
    any other model as it is."""
    import copy

    from peft import PeftModel

    return copy.deepcopy(model).merge_and_unload() if isinstance(model, PeftModel) else model


def plain_copy(model: Any, dtype: str) -> Any:
    """A plain transformers copy of the model ``model`` stands for (adapters merged) with its weights in ``dtype``,
    for decoding beside a trainer that goes on with ``model``. Built from the config and ``merged_state_dict``, not by
    ``deepcopy``: TRL's fused LM head patches the forward of the model it trains with a closure over that model, so
    a deep copy would still run the original."""
    import torch
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_config(causal_lm(model).config, dtype=getattr(torch, dtype))
    plain.load_state_dict(merged_state_dict(model))
    return plain.eval()


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The state dict of the plain model ``model`` stands for, adapters merged (base weight + scale * B A), under the
    plain model's names; ``model`` itself is left as it is (a trainer keeps training it). Any other model gives its
    own state dict."""
    import torch
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    if not isinstance(model, PeftModel):
        return model.state_dict()
    inner = model.get_base_model()
    with torch.no_grad():
        deltas = {name: module.get_delta_weight(adapter) for name, module in inner.named_modules()
                  if isinstance(module, LoraLayer) for adapter in module.active_adapters}
        state = {}
        for name, tensor in inner.state_dict().items():
            if ".lora_" in name:
                continue
            plain = name.replace(".base_layer.", ".")
            module = plain.removesuffix(".weight")
            state[plain] = tensor + deltas[module].to(tensor.dtype) if module in deltas else tensor
    return state


def adapter_card(directory: Path) -> dict[str, Any] | None:
    """What a saved adapter is (peft's ``adapter_config.json``: rank, scale, layers, modules), for a model card."""
    import json

    config = directory / "adapter_config.json"
    if not config.is_file():
        return None
    saved = json.loads(config.read_text())
    return {"directory": directory.name, "r": saved["r"], "alpha": saved["lora_alpha"],
            "layers": saved.get("layers_to_transform"), "target_modules": sorted(saved["target_modules"])}
