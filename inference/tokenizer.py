"""gymforge's own tokenizer: a byte-level BPE trained with the `tokenizers` library, plus a ChatML chat template.

The tokenizer is trained once on a corpus (the `world` documents by default, see ``tasks/tokenizer.py``) and
published as a one-row artifact (``tokenizer_json``, ``chat_template``, ``sha256``); the tiny policy, the KeyChain
length budget and the needles all build their ``PreTrainedTokenizerFast`` from that row with
:func:`tokenizer_from_row`. Any local transformers tokenizer directory works wherever this one does (:func:`load`).

The chat template is ChatML (``<|im_start|>role ... <|im_end|>``) with OpenAI-style tool calling: tools are listed
as JSON in the system turn, assistant tool calls are rendered as ``<tool_call>{"name": ..., "arguments": ...}
</tool_call>`` and tool results as ``<tool_response>``. Assistant content and its ``<|im_end|>`` sit inside
``{% generation %}`` so TRL's ``assistant_only_loss`` gets a mask (STACK.md, "TRL 1.16 on a tiny local model");
an assistant message carrying ``"train": false`` (the `trajectory` record's turn-level mask, as
``gymforge export --format sft`` writes it) is rendered the same but left outside the mask.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # the eos token: a turn ends the generation
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END, *TOOL_TAGS)
DEFAULT_VOCAB_SIZE = 8192
DEFAULT_NAME = "gymforge-bpe"

CHAT_TEMPLATE = """\
{%- macro tool_call_json(call) -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- set args = fn.arguments if fn.arguments is defined else {} -%}
{"name": {{ fn.name | tojson }}, "arguments": {{ args if args is string else args | tojson }}}
{%- endmacro -%}
{%- macro assistant_turn(message) -%}
{%- if message.content %}{{ message.content }}{% endif -%}
{%- for call in (message.tool_calls or []) -%}
{%- if loop.first and message.content %}{{ '\\n' }}{% elif not loop.first %}{{ '\\n' }}{% endif -%}
{{- '<tool_call>' + tool_call_json(call) + '</tool_call>' }}
{%- endfor -%}
{{- '<|im_end|>' }}
{%- endmacro -%}
{%- set system = messages[0].content if messages and messages[0].role == 'system' else none -%}
{%- if system is not none or tools -%}
{{- '<|im_start|>system\\n' }}
{%- if system is not none %}{{ system }}{% endif -%}
{%- if tools -%}
{%- if system %}{{ '\\n\\n' }}{% endif -%}
{{- '# Tools\\n\\nYou may call one or more functions. Their signatures, one JSON object per line:\\n<tools>' }}
{%- for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor -%}
{{- '\\n</tools>\\n\\nTo call a function, write <tool_call>{\"name\": <function-name>, \"arguments\": <args-json-object>}</tool_call>' }}
{%- endif -%}
{{- '<|im_end|>\\n' }}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' }}
{%- if message.train is defined and message.train is false -%}
{{- assistant_turn(message) }}
{%- else -%}
{%- generation -%}
{{- assistant_turn(message) }}
{%- endgeneration -%}
{%- endif -%}
{{- '\\n' }}
{%- elif message.role == 'tool' -%}
{{- '<|im_start|>tool\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif -%}
"""

RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""How an assistant turn of :data:`CHAT_TEMPLATE` parses back into a message (transformers' ``response_template``,
saved in ``tokenizer_config.json``): TRL's GRPOTrainer parses tool calls with it and refuses a tool-calling run on a
template it does not know without one."""


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it with the chat template. Deterministic for a given corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < 300:
        raise ValueError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least 256 + 7 entries")
    bpe = Tokenizer(models.BPE())
    # Digits one by one: hex keys and numbers then tokenize the same way wherever they occur (STACK.md notes that
    # byte-level BPE fragments hex keys inconsistently, which hurts key tracing).
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    # The tool tags are plain added tokens, not special: decoding with skip_special_tokens must keep them so a
    # completion's tool calls can still be parsed.
    spec = json.loads(bpe.to_str())
    for added in spec["added_tokens"]:
        added["special"] = added["content"] not in TOOL_TAGS
    return _wrap(json.dumps(spec, ensure_ascii=False, sort_keys=True), CHAT_TEMPLATE)


def _wrap(tokenizer_json: str, chat_template: str) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer_json),
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        chat_template=chat_template,
        response_template=RESPONSE_TEMPLATE if chat_template == CHAT_TEMPLATE else None,
        model_max_length=1 << 20,
        clean_up_tokenization_spaces=False,
    )


def tokenizer_json(tok: PreTrainedTokenizerBase) -> str:
    """The canonical JSON of a fast tokenizer's backend (sorted keys, so equal tokenizers give equal bytes)."""
    return json.dumps(json.loads(tok.backend_tokenizer.to_str()), ensure_ascii=False, sort_keys=True)


def fingerprint(tokenizer_json_text: str, chat_template: str) -> str:
    return hashlib.sha256(f"{tokenizer_json_text}\0{chat_template}".encode()).hexdigest()


def to_row(tok: PreTrainedTokenizerBase, name: str = DEFAULT_NAME) -> dict[str, Any]:
    """The `tokenizer` artifact row: name, tokenizer_json, chat_template, special tokens, vocab_size, sha256."""
    text = tokenizer_json(tok)
    template = tok.chat_template or ""
    return {
        "name": name,
        "tokenizer_json": text,
        "chat_template": template,
        "special_tokens": list(SPECIAL_TOKENS),
        "eos_token": tok.eos_token,
        "pad_token": tok.pad_token,
        "vocab_size": len(tok),
        "sha256": fingerprint(text, template),
    }


_CACHE: dict[str, PreTrainedTokenizerFast] = {}
_CACHE_LOCK = threading.Lock()


def tokenizer_from_row(row: Mapping[str, Any]) -> PreTrainedTokenizerFast:
    """Build (once per process, keyed by sha256) the tokenizer of a `tokenizer` artifact row."""
    missing = [k for k in ("tokenizer_json", "chat_template", "sha256") if k not in row]
    if missing:
        raise ValueError(f"not a tokenizer artifact row: missing {missing} (expected the `tokenizer` stage output)")
    sha = str(row["sha256"])
    with _CACHE_LOCK:
        if sha not in _CACHE:
            if fingerprint(row["tokenizer_json"], row["chat_template"]) != sha:
                raise ValueError(f"tokenizer row {row.get('name')!r}: sha256 does not match its contents")
            _CACHE[sha] = _wrap(row["tokenizer_json"], row["chat_template"])
        return _CACHE[sha]


def save(tok: PreTrainedTokenizerBase, directory: str | Path) -> Path:
    """Write a transformers tokenizer directory (``tokenizer.json``, config, ``chat_template.jinja``)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(path))
    return path


def load(directory: str | Path) -> PreTrainedTokenizerBase:
    """Load any local transformers tokenizer directory (never reaches a model hub)."""
    from transformers import AutoTokenizer

    path = Path(directory)
    if not (path / "tokenizer_config.json").is_file() and not (path / "tokenizer.json").is_file():
        raise ValueError(f"{path}: not a tokenizer directory (no tokenizer_config.json or tokenizer.json)")
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def identity(tok: PreTrainedTokenizerBase) -> str:
    """A short, stable identifier of a tokenizer for per-row records: ``name@sha256[:12]``."""
    name = Path(str(getattr(tok, "name_or_path", "") or DEFAULT_NAME)).name or DEFAULT_NAME
    sha = fingerprint(tokenizer_json(tok), tok.chat_template or "") if tok.is_fast else "slow"
    return f"{name}@{sha[:12]}"


_TOOL_CALL_OPEN = re.compile(re.escape("<tool_call>"))
_TOOL_CALL_CLOSE = re.compile(r"\s*" + re.escape("</tool_call>"))


def parse_tool_calls(text: str) -> list[dict[str, Any]]:
    """The tool calls in an assistant completion, as ``[{"name": str, "arguments": dict}]`` (the inverse of the
    template's rendering). A call whose body is not a JSON object with a string ``name`` is skipped.

    The JSON body is decoded with ``raw_decode`` rather than cut at the next ``</tool_call>``, so a closing tag
    inside an argument string does not truncate the call."""
    decoder = json.JSONDecoder()
    calls: list[dict[str, Any]] = []
    pos = 0
    while (start := _TOOL_CALL_OPEN.search(text, pos)) is not None:
        body = start.end()
        while body < len(text) and text[body].isspace():
            body += 1
        pos = start.end()
        try:
            obj, end = decoder.raw_decode(text, body)
        except json.JSONDecodeError:
            continue
        close = _TOOL_CALL_CLOSE.match(text, end)
        if close is None or not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # OpenAI style: arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if not isinstance(args, dict):
            continue
        calls.append({"name": obj["name"], "arguments": args})
        pos = close.end()
    return calls
