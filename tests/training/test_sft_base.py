"""SFT from an ordinary Hugging Face checkpoint: a stock chat template (no `{% generation %}` markers, maybe no ChatML
tokens at all) trains with a training template that is recorded in the model card; `keep` refuses; a template file
is taken as given. A run that leaves the model equal to its base is an error unless asked for, and every model
directory carries a Hugging Face README.md model card."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from sft_fixtures import corpus, micro_base, trajectories, trajectory_artifact

from data_contracts.stage import StageError
from inference.checkpoint import MODEL_DIRECTORY, equals_parent, read_card
from inference.tokenizer import CHAT_TEMPLATE, IM_END
from training.sft import SFTParams, load_base, sft

FAST = {"max_length": 1024, "learning_rate": 1e-2, "per_device_train_batch_size": 2, "use_cpu": True,
        "eval_tool_calls": 1, "warmup_steps": 0, "max_steps": 2, "save_steps": 2, "eval_fraction": 0.2}

# A stock ChatML template as checkpoints ship it: no generation markers, no tool calls.
PLAIN_CHATML = ("{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '')"
                " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{%- endif %}")
# The instruction format of a checkpoint whose vocabulary has none of the ChatML tokens.
INSTRUCTION = ("{%- for message in messages %}{%- if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + "
               "' [/INST]' }}{%- else %}{{ ' ' + (message['content'] or '') + '</s>' }}{%- endif %}{%- endfor %}")


@pytest.fixture(scope="module")
def gymforge_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return micro_base(tmp_path_factory.mktemp("bases") / "gymforge")


def with_template(base: Path, directory: Path, template: str) -> Path:
    shutil.copytree(base, directory)
    (directory / "chat_template.jinja").write_text(template)
    return directory


def instruction_base(directory: Path) -> Path:
    """A Llama-style checkpoint: a BPE with only <s>, </s> and <unk>, an [INST] template, a micro Qwen2 model."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=380, special_tokens=["<unk>", "<s>", "</s>"],
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                          show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        chat_template=INSTRUCTION)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    directory.mkdir(parents=True)
    Qwen2ForCausalLM(config).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def train(base: Path, out: Path, **params) -> dict:
    out.mkdir(parents=True)
    config = SFTParams(**{**FAST, "model_name_or_path": str(base), "output_dir": str(out.parent / "ck"), **params})
    sft.run({"trajs": trajectory_artifact(trajectories(10))}, config, "p0", out)
    return read_card(out)


def test_a_stock_chatml_template_trains_with_gymforges_and_the_card_says_so(gymforge_base, tmp_path):
    plain = with_template(gymforge_base, tmp_path / "plain", PLAIN_CHATML)
    card = train(plain, tmp_path / "model")
    assert card["chat_template"]["source"] == "gymforge"
    assert "without {% generation %} markers" in card["chat_template"]["reason"]
    assert "<tool_call>" in (tmp_path / "model" / "chat_template.jinja").read_text()  # the template it trained with
    assert all(check.fn(tmp_path / "model") is None for check in MODEL_DIRECTORY.checks)
    assert "## Chat template" in (tmp_path / "model" / "README.md").read_text()


def test_a_base_without_chatml_tokens_gets_them_spells_tool_tags_and_still_generates(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = instruction_base(tmp_path / "llama-style")
    assert "<|im_start|>" not in AutoTokenizer.from_pretrained(str(base)).get_vocab()
    card = train(base, tmp_path / "model")
    assert card["chat_template"]["source"] == "gymforge"
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    assert {"<|im_start|>", IM_END} <= set(tokenizer.get_vocab())
    # tool tags are spelt in the base's own pieces (trained rows), not added as untrained ones
    assert "<tool_call>" not in tokenizer.get_vocab()
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert tokenizer.decode(tokenizer.encode(call, add_special_tokens=False)) == call
    assert tokenizer.eos_token == IM_END and model.config.eos_token_id == tokenizer.eos_token_id
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert all(check.fn(tmp_path / "model") is None for check in MODEL_DIRECTORY.checks)


def test_keep_refuses_a_template_without_markers_on_one_line(gymforge_base, tmp_path):
    plain = with_template(gymforge_base, tmp_path / "plain", PLAIN_CHATML)
    with pytest.raises(StageError, match=r"without \{% generation %\} markers.*--chat-template auto or gymforge") as info:
        load_base(plain, "keep")
    assert "\n" not in str(info.value)
    assert load_base(gymforge_base, "keep")[2].source == "model"  # a template with markers is kept as it is


def test_a_template_file_is_taken_as_given_and_checked(gymforge_base, tmp_path):
    good, bad = tmp_path / "good.jinja", tmp_path / "bad.jinja"
    good.write_text(CHAT_TEMPLATE)
    bad.write_text(PLAIN_CHATML)
    plain = with_template(gymforge_base, tmp_path / "plain", PLAIN_CHATML)
    assert load_base(plain, str(good))[2].source == f"file:{good.resolve()}"
    with pytest.raises(StageError, match="has no {% generation %} markers"):
        load_base(plain, str(bad))
    with pytest.raises(StageError, match="no such file"):
        load_base(plain, str(tmp_path / "missing.jinja"))


def test_trls_training_variant_of_a_known_template_keeps_the_models_format(gymforge_base, tmp_path):
    from importlib.resources import files

    qwen3 = files("trl").joinpath("chat_templates", "qwen3.jinja").read_text()
    base = with_template(gymforge_base, tmp_path / "qwen3-style", qwen3)
    _, tokenizer, choice = load_base(base)
    assert choice.source == "trl" and "generation" in tokenizer.chat_template
    card = train(base, tmp_path / "model")
    assert card["chat_template"]["source"] == "trl"


def test_a_model_equal_to_its_base_is_told_apart_from_a_trained_one(gymforge_base):
    import torch

    model = load_base(gymforge_base)[0]
    assert equals_parent(model, gymforge_base)  # tied output embeddings are saved once: still equal
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1e-6
    assert not equals_parent(model, gymforge_base)


def test_a_run_that_leaves_the_model_equal_to_its_base_is_an_error(gymforge_base, tmp_path, monkeypatch):
    import training.sft as sft_module

    def untrained_fit(model, *args, **kwargs):  # test double: a trainer whose steps changed nothing
        return model, [{"loss": 2.0, "step": 1}, {"loss": 2.0, "step": 2}]

    monkeypatch.setattr(sft_module, "fit", untrained_fit)
    with pytest.raises(StageError, match=r"sft trained nothing: after 2 steps on \d+ examples the model equals its base"):
        train(gymforge_base, tmp_path / "model")
    assert train(gymforge_base, tmp_path / "allowed", allow_untrained=True)["steps"] == 2


def test_the_readme_is_a_hugging_face_model_card_of_the_json_card(gymforge_base, tmp_path):
    card = train(gymforge_base, tmp_path / "model")
    text = (tmp_path / "model" / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    metadata = yaml.safe_load(front)
    assert metadata["base_model"] == card["base"] == str(gymforge_base)
    assert metadata["library_name"] == "transformers" and {"gymforge", "sft", "trl"} <= set(metadata["tags"])
    assert metadata["datasets"] == ["trajs/trajkey"]
    assert "## Training data" in body and "| trajs | trajkey |" in body
    assert f"| learning_rate | {card['config']['learning_rate']:.4g} |" in body
    loss_before, loss_after = card["metrics_before"]["loss"], card["metrics"]["loss"]
    assert f"| loss | {loss_before:.4g} | {loss_after:.4g} |" in body  # the evaluation, before and after
