from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from inference_support import tiny_checkpoint

from training.tiny_model import SIZES, build_model, init_model, parameter_count


def _weights_sha(directory: Path) -> str:
    return hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()


def test_init_round_trips_through_auto_classes() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

    directory = tiny_checkpoint()
    model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    assert isinstance(model, Qwen2ForCausalLM)
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.chat_template and "generation" in tokenizer.chat_template
    assert 0.5e6 < parameter_count(model, include_embeddings=False) < 1.5e6


def test_init_is_deterministic_per_seed(tmp_path: Path) -> None:
    tokenizer_dir = tiny_checkpoint()
    same = init_model("tiny", tokenizer_dir, tmp_path / "a", seed=0)
    other = init_model("tiny", tokenizer_dir, tmp_path / "b", seed=1)
    assert _weights_sha(same) == _weights_sha(tiny_checkpoint())
    assert _weights_sha(other) != _weights_sha(same)


def test_small_is_about_ten_million_parameters() -> None:
    from inference.tokenizer import load

    tokenizer = load(tiny_checkpoint())
    model = build_model("small", tokenizer)
    assert model.config.num_hidden_layers == SIZES["small"]["num_hidden_layers"]
    # With the default 8192-token vocabulary the embedding adds 2.1M to these ~7.9M.
    assert 7e6 < parameter_count(model, include_embeddings=False) < 9e6


@pytest.mark.parametrize(
    ("size", "prepare", "message"),
    [
        ("huge", None, "unknown model size"),
        ("tiny", "non-empty", "not empty"),
    ],
)
def test_init_rejects_bad_input(tmp_path: Path, size: str, prepare: str | None, message: str) -> None:
    out = tmp_path / "out"
    if prepare == "non-empty":
        out.mkdir()
        (out / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match=message):
        init_model(size, tiny_checkpoint(), out)  # type: ignore[arg-type]
    assert not any(p.name.startswith(".out.") for p in tmp_path.iterdir()), "a failed init left a temp dir"


def test_cli_trains_a_tokenizer_and_inits_a_model(tmp_path: Path) -> None:
    from inference_support import corpus
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from flows.cli import app

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("\n".join(corpus(200)))
    runner = CliRunner()
    trained = runner.invoke(
        app,
        [
            "tokenizer",
            "train",
            "--out",
            str(tmp_path / "tok"),
            "--corpus",
            str(tmp_path / "corpus"),
            "--vocab",
            "400",
        ],
    )
    assert trained.exit_code == 0, trained.output
    made = runner.invoke(
        app, ["model", "init", "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "m")]
    )
    assert made.exit_code == 0, made.output
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), local_files_only=True)
    assert model.config.vocab_size == 400
    again = runner.invoke(
        app, ["model", "init", "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "m")]
    )
    assert again.exit_code != 0 and "not empty" in again.output
