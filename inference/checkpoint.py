"""Model artifacts (DESIGN.md section 9): a checkpoint is a transformers directory (config, safetensors, tokenizer files,
generation config, chat template) published atomically through the artifact store like any other artifact, under
the kind ``model``. Beside the weights, ``gymforge_model.json`` declares what the stage made (base model, parameter
count, dtype, steps) and ``README.md`` says the same as a Hugging Face model card (inference/model_card.py); the
directory contract loads the checkpoint, generates a few tokens and holds it to the JSON card.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from data_contracts.stage import DirectoryCheck, DirectoryContract

MODEL_CARD = "gymforge_model.json"
GENERATED_TOKENS = 4


def save_model(model: Any, tokenizer: Any, out_dir: Path, card: dict[str, Any]) -> None:
    """Write a loadable checkpoint (weights, config, generation config, tokenizer and its chat template), its JSON
    card and its README.md model card; the card's ``parameters`` and ``dtype`` are measured here."""
    from inference.model_card import README, library_versions, model_card

    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    measured = {"parameters": sum(p.numel() for p in model.parameters()), "dtype": str(model.dtype).split(".")[-1]}
    full = {**card, **measured}
    (out_dir / MODEL_CARD).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    (out_dir / README).write_text(model_card(full, library_versions()), encoding="utf-8")


def equals_parent(model: Any, parent: Path) -> bool:
    """Whether training left ``model`` exactly as the checkpoint it started from (every tensor equal, bit for bit):
    a run that trained nothing. The parent's safetensors are memory-mapped, so no second copy is held."""
    import torch
    from safetensors import safe_open

    files = sorted(parent.glob("*.safetensors"))
    if not files:
        return False
    state = model.state_dict()
    seen = set()
    for file in files:
        with safe_open(str(file), framework="pt") as saved:
            for name in saved.keys():  # noqa: SIM118 - safe_open is no mapping
                if name not in state:
                    return False
                if not torch.equal(state[name].detach().cpu(), saved.get_tensor(name).to(state[name].dtype)):
                    return False
                seen.add(name)
    # tied weights are saved once: every tensor the parent lacks must be a view of one it has
    return all(name in seen or _tied(state, name, seen) for name in state)


def _tied(state: dict[str, Any], name: str, seen: set[str]) -> bool:
    pointer = state[name].data_ptr()
    return any(state[other].data_ptr() == pointer for other in seen)


def read_card(path: Path) -> dict[str, Any]:
    return json.loads((path / MODEL_CARD).read_text(encoding="utf-8"))


def model_card_of(artifact: Any) -> dict[str, Any]:
    """The JSON card of a published model artifact, fetching that one file (not the weights) from an object store."""
    described = artifact.manifest.get("directory") or {}
    if MODEL_CARD not in described.get("files", {}):
        return {}
    if artifact.remote is None:
        return read_card(artifact.path / described["name"])
    name = f"{described['name']}/{MODEL_CARD}"
    local = artifact.remote.fetch(name, described["files"][MODEL_CARD], described.get("sha256", {}).get(MODEL_CARD))
    return json.loads(Path(local).read_text(encoding="utf-8"))


_ARTIFACT_KEY = re.compile(r"^[0-9a-f]{20}$")  # data_contracts.store.ArtifactStore.artifact_key


def looks_like_key(name: str) -> bool:
    """Whether ``name`` is written as an artifact key."""
    return bool(_ARTIFACT_KEY.match(name))


def checkpoint_directory(target: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint directory ``target`` names: the key of a published model artifact in the catalog of the
    data root (``data_dir``, else ``$GYMFORGE_DATA``, else ``./data``), or else a local path, returned as is (its
    loader says what is wrong with it). A ValueError names a key the catalog does not hold as a model."""
    path = Path(target).expanduser()
    key = str(target)
    if path.is_dir() or not looks_like_key(key):
        return path
    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store

    root = data_root(data_dir)

    catalog = Catalog(root)
    found = catalog.entry(key) if catalog.path.is_file() else None
    if found is None:
        raise ValueError(f"model {key!r}: no such directory, and no artifact with that key in the catalog of {root} "
                         "(list model artifacts with `gymforge artifacts ls --kind model`)")
    stage, kind, status = found.stage, found.kind, found.status
    if kind != "model":
        raise ValueError(f"artifact {key} is a {kind} artifact of stage {stage!r}, not a model")
    artifact = open_store(root).get(stage, key) if status == "published" else None
    if artifact is None:
        raise ValueError(f"model artifact {stage}/{key} is {status if status != 'published' else 'missing'} in {root}; "
                         "run `gymforge artifacts fsck`")
    return artifact.directory


def _loads_and_generates(path: Path) -> str | None:
    """The checkpoint loads with transformers, its parameters and dtype are as declared, and it generates."""
    import torch
    from transformers import AutoModelForCausalLM

    from inference.engine_support import render_prompt
    from inference.tokenizer import load

    card = read_card(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    tokenizer = load(path)
    parameters, dtype = sum(p.numel() for p in model.parameters()), str(model.dtype).split(".")[-1]
    if (parameters, dtype) != (card["parameters"], card["dtype"]):
        return f"loads with {parameters} {dtype} parameters, the card declares {card['parameters']} {card['dtype']}"
    prompt = torch.tensor([render_prompt(tokenizer, [{"role": "user", "content": "Hello"}])])
    with torch.inference_mode():
        out = model.generate(prompt, max_new_tokens=GENERATED_TOKENS, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    return None if out.shape[1] > prompt.shape[1] else "generates no token"


def _has_card(path: Path) -> str | None:
    return None if (path / MODEL_CARD).is_file() else f"no {MODEL_CARD}"


MODEL_DIRECTORY = DirectoryContract("model", (
    DirectoryCheck("model_card", _has_card, "the checkpoint declares what it is"),
    DirectoryCheck("loads_and_generates", _loads_and_generates,
                   f"loads with transformers as declared and generates {GENERATED_TOKENS} tokens"),
))
