"""`imported_model` / `gymforge model import`: a GGUF file or a transformers directory becomes a model artifact
whose weights compute what the source's do, with a chat template training can mask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inference_support import tiny_checkpoint
from sft_fixtures import micro_base, write_gguf

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from flows.registry import stage_named


def imported(root: Path, **params: str):
    store = open_store(root)
    stage = stage_named("imported_model")
    run = execute_stage(store, Catalog(root), stage, stage.parse_params(params), {}, "default")
    artifact = store.get("imported_model", run.key)
    return run, artifact, Path(artifact.directory)


def logits(directory: Path, text: str, **where: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory), **where)
    model = AutoModelForCausalLM.from_pretrained(str(directory), **where)
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits


def test_a_gguf_file_imports_with_the_weights_and_tokenizer_it_holds(tmp_path):
    source = write_gguf(tiny_checkpoint(), tmp_path / "tiny.gguf")
    run, artifact, directory = imported(tmp_path / "data", source=str(source))
    card = json.loads((directory / "gymforge_model.json").read_text())
    assert card["format"] == "gguf" and card["method"] == "imported_model" and card["base"] == "tiny.gguf"
    assert card["chat_template"]["source"] == "model"  # gymforge's own template already marks assistant turns
    assert (directory / "README.md").read_text().count("imported from a pretrained checkpoint") == 1
    text = "Book flight FL123 for two"
    assert logits(directory, text).allclose(logits(tiny_checkpoint(), text), atol=1e-5)
    assert artifact.read("summary")["parameters"].item() == card["parameters"] > 0
    again, _, _ = imported(tmp_path / "data", source=str(source))
    assert again.cached and again.key == run.key  # the same file is the same artifact


def test_a_template_without_generation_markers_gets_gymforges(tmp_path):
    base = micro_base(tmp_path / "stock")
    config = json.loads((base / "tokenizer_config.json").read_text())
    (base / "chat_template.jinja").unlink(missing_ok=True)
    config["chat_template"] = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                               "{% endfor %}")
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    _, _, directory = imported(tmp_path / "data", source=str(base))
    card = json.loads((directory / "gymforge_model.json").read_text())
    assert card["format"] == "transformers" and card["chat_template"]["source"] in ("gymforge", "trl")
    assert "generation" in (directory / "chat_template.jinja").read_text()
    with pytest.raises(StageError, match="without {% generation %} markers"):
        imported(tmp_path / "data", source=str(base), chat_template="keep")


@pytest.mark.parametrize("make", [lambda p: p / "missing.gguf", lambda p: p])
def test_a_source_that_is_no_model_is_one_clear_error(tmp_path, make):
    with pytest.raises(StageError, match="give a .gguf file or a transformers directory"):
        stage_named("imported_model").parse_params({"source": str(make(tmp_path))})


def test_a_corrupt_gguf_file_names_the_file_and_publishes_nothing(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(StageError, match="cannot load .*broken.gguf"):
        imported(tmp_path / "data", source=str(broken))
    assert Catalog(tmp_path / "data").entries(status="published") == []


def test_the_command_prints_the_key_to_train_from(tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    source = write_gguf(tiny_checkpoint(), tmp_path / "tiny.gguf")
    result = CliRunner().invoke(app, ["model", "import", str(source), "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    assert "parameters (float32)" in result.output and "gymforge train sft --base " in result.output
    missing = CliRunner().invoke(app, ["model", "import", str(tmp_path / "nope.gguf")])
    assert missing.exit_code != 0 and "give a .gguf file" in missing.output
