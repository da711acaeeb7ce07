"""The embedded default policy: a Qwen2-architecture causal LM initialised from config (no model hub is reachable).

``init_model`` writes an ordinary transformers directory (``config.json``, ``model.safetensors``, the tokenizer
files), loadable by ``AutoModelForCausalLM`` / ``AutoTokenizer`` and by TRL. Initialisation is deterministic: the
same size, tokenizer and seed give identical weights. Sizes follow STACK.md ("A tiny policy trained from scratch on
2 CPU cores"): ``tiny`` (~1M parameters plus the embedding) trains at about 2 SFT steps/s on 2 cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Size = Literal["tiny", "small"]

# Architecture per size; vocabulary and special-token ids come from the tokenizer.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 10,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
}
MAX_POSITIONS = 4096


def model_config(size: Size, tokenizer: PreTrainedTokenizerBase) -> Any:
    """The ``Qwen2Config`` of a size, sized to ``tokenizer`` (vocabulary, eos/pad ids), tied embeddings."""
    from transformers import Qwen2Config

    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}: choose one of {sorted(SIZES)}")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token: set eos_token (our tokenizer uses <|im_end|>)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
        **SIZES[size],
    )


def build_model(size: Size, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> PreTrainedModel:
    """A freshly initialised model; the torch RNG is forked so the caller's global state is left alone."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    config = model_config(size, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, bos_token_id=None
    )
    return model


def init_model(size: Size, tokenizer_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """Initialise a ``size`` model for the tokenizer in ``tokenizer_dir`` and save both to ``out_dir``.

    The directory is built next to ``out_dir`` and renamed into place, so a failed run leaves nothing behind.
    """
    import os
    import shutil
    import tempfile

    from inference.tokenizer import load as load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    model = build_model(size, tokenizer, seed)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(
            f"{out}: output directory exists and is not empty; choose another --out or remove it"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def parameter_count(model: PreTrainedModel, include_embeddings: bool = True) -> int:
    """Parameters counted once (tied embeddings are shared with the output head)."""
    total = sum(p.numel() for p in model.parameters())
    return total if include_embeddings else total - model.get_input_embeddings().weight.numel()
