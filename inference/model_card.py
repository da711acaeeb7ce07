"""The ``README.md`` of a model artifact: a Hugging Face model card (YAML metadata, then base model, data, training
config and evaluation), written from the ``gymforge_model.json`` card beside it so the two never disagree.

The Hub and ``huggingface_hub.ModelCard`` read the metadata block (``base_model``, ``library_name``, ``tags``,
``datasets``, ``pipeline_tag``); people read the rest. Every figure comes from the JSON card; nothing is restated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

README = "README.md"
TRAINERS = {"sft": "cold-start SFT with TRL's `SFTTrainer`", "rl": "asynchronous RL (GRPO/GSPO with bounded "
            "staleness, `training/async_rl/`)", "tiny_policy": "next-token pretraining of the embedded tiny policy",
            "imported_model": "imported from a pretrained checkpoint (`gymforge model import`), weights unchanged"}


def model_card(card: Mapping[str, Any], versions: Mapping[str, str]) -> str:
    """The README.md text of a checkpoint whose JSON card is ``card``; ``versions`` names the libraries used."""
    method = str(card.get("method", "model"))
    base = str(card.get("base", "")) or None
    data = dict(card.get("data") or {})
    metadata = {"library_name": "transformers", "pipeline_tag": "text-generation",
                "tags": ["gymforge", method, *(["trl"] if method == "sft" else [])],
                **({"base_model": base} if base else {}),
                **({"datasets": [f"{stage}/{key}" for stage, key in sorted(data.items())]} if data else {})}
    title = f"gymforge {method}" + (f" of {base}" if base else "")
    made = f"Made by gymforge's `{method}` stage: {TRAINERS.get(method, method)}"
    if card.get("steps") is not None:
        made += f", {card['steps']} optimizer steps"
    if card.get("examples") is not None:
        made += f" on {card['examples']} examples"
    if isinstance(card.get("parameters"), int):
        made += f"; {card['parameters']:,} parameters in {card.get('dtype')}"
    lines = ["---", yaml.safe_dump(metadata, sort_keys=True).strip(), "---", "", f"# {title}", "", made + ".", "",
             "## Use", "", "```bash", "gymforge serve --model MODEL_KEY   # an OpenAI-compatible server", "```", "",
             "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
             "model = AutoModelForCausalLM.from_pretrained(DIRECTORY)",
             "tokenizer = AutoTokenizer.from_pretrained(DIRECTORY)  # its chat template renders tool calls", "```"]
    if base:
        lines += ["", "## Base model", "", f"`{base}`"]
    if data:
        lines += ["", "## Training data", "", *_table(("artifact", "key"), sorted(data.items()))]
    template = card.get("chat_template")
    if isinstance(template, Mapping):
        lines += ["", "## Chat template", "", f"{template.get('source')}: {template.get('reason')}"]
    adapter = card.get("adapter")
    if isinstance(adapter, Mapping):
        lines += ["", "## Adapter", "", (f"Low-rank adapters (peft, rank {adapter.get('r')}, alpha {adapter.get('alpha')}) "
                                         f"trained on a frozen base, layers {adapter.get('layers') or 'all'}, modules "
                                         f"{', '.join(adapter.get('target_modules') or [])}, merged into these "
                                         f"weights; the adapter itself is in `{adapter.get('directory')}/`.")]
    config = card.get("config") or {}
    if config:
        lines += ["", "## Training config", "", *_table(("field", "value"), ((k, _value(v)) for k, v in
                                                                             sorted(config.items())))]
    lines += ["", "## Evaluation", "", *_evaluation(card)]
    lines += ["", "## Framework versions", "", *(f"- {name}: {version}" for name, version in sorted(versions.items()))]
    code = card.get("code_version") or {}
    if code:
        lines.append(f"- gymforge: {code.get('git_sha')}{' (uncommitted changes)' if code.get('dirty') else ''}")
    return "\n".join(lines) + "\n"


def _evaluation(card: Mapping[str, Any]) -> list[str]:
    after = dict(card.get("metrics") or {})
    before = dict(card.get("metrics_before") or {})
    if not after:
        return ["No held-out evaluation was run; `gymforge eval run --model MODEL_KEY --suites ...` measures it."]
    if before:
        rows = ((name, _value(before.get(name, "")), _value(value)) for name, value in sorted(after.items()))
        return ["Held-out split, before the first step and at the end:", "",
                *_table(("figure", "before", "after"), rows)]
    return [*_table(("figure", "value"), ((name, _value(value)) for name, value in sorted(after.items())))]


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else json.dumps(value)


def _table(header: tuple[str, ...], rows: Iterable[tuple[Any, ...]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]


def library_versions() -> dict[str, str]:
    """The versions of the libraries a checkpoint was made with (those installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("transformers", "trl", "torch", "accelerate"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found
