"""Engine specs: the one parser of the strings that name an inference engine.

``hf:DIR`` (the in-process transformers engine on a checkpoint directory or a model artifact key),
``vllm:DIR`` (in-process vLLM, CUDA only) and ``openai:http(s)://HOST:PORT/v1#MODEL`` (any OpenAI-compatible
server: ``gymforge serve``, ``vllm serve``). Every params validator, CLI option and engine factory reads a spec
through :meth:`EngineSpec.parse`, so the kinds, their forms and the local inputs a spec names (what an artifact key
hashes) are written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Literal

KINDS = ("hf", "openai", "vllm")
FORM = {"hf": "hf:DIR", "openai": "openai:URL#MODEL", "vllm": "vllm:DIR"}
FORMS = "hf:DIR, openai:URL#MODEL or vllm:DIR"
Kind = Literal["hf", "openai", "vllm"]
REFERENCE = "reference"
"""Where a teacher or an answer agent is asked, the offline reference one instead of an engine spec."""


class EngineSpecError(ValueError):
    """A spec that names no engine: one line with the spec and the forms allowed."""


@dataclass(frozen=True)
class EngineSpec:
    kind: Kind
    target: str  # hf/vllm: a directory or model artifact key; openai: the base URL, without a trailing slash
    model: str | None = None  # openai: the served model's name

    @classmethod
    def parse(cls, spec: str) -> EngineSpec:
        """The spec's parts, checked for form only (nothing is loaded or reached)."""
        kind, sep, target = str(spec).partition(":")
        if not sep or not target or kind not in KINDS:
            what = f"unknown kind {kind!r}" if sep and target else "not KIND:TARGET"
            raise EngineSpecError(f"engine spec {spec!r}: {what}; expected {FORMS}")
        if kind == "openai":
            url, hash_, model = target.partition("#")
            if not hash_ or not model or not url.startswith(("http://", "https://")):
                raise EngineSpecError(f"engine spec {spec!r}: expected openai:http(s)://HOST:PORT/v1#MODEL")
            return cls("openai", url.rstrip("/"), model)
        return cls(kind, target)  # type: ignore[arg-type]

    @classmethod
    def named_in(cls, value: str) -> EngineSpec | None:
        """The spec ``value`` is, or None when it names no engine kind at all (a model artifact key, a stage); a
        known kind in a bad form is still an :class:`EngineSpecError`."""
        if str(value).partition(":")[0] not in KINDS:
            return None
        return cls.parse(value)

    @property
    def local(self) -> bool:
        """Whether the engine runs here on a checkpoint (hf, vllm), not behind a server."""
        return self.kind != "openai"

    def local_inputs(self) -> list[str]:
        """What an artifact key hashes: the checkpoint a local engine reads (a served model's weights are not ours
        to hash)."""
        return [self.target] if self.local else []

    def __str__(self) -> str:
        return f"openai:{self.target}#{self.model}" if self.kind == "openai" else f"{self.kind}:{self.target}"


def hf_spec(directory: str | PathLike[str]) -> str:
    """The spec of the transformers engine on a checkpoint directory (or a model artifact key)."""
    return str(EngineSpec("hf", str(directory)))


def engine_or(value: str, names: Mapping[str, str], kinds: tuple[Kind, ...] = KINDS) -> str:
    """``value`` when it is one of ``names`` (a word standing for an engine the caller builds itself, mapped to what
    it is) or an engine spec of one of ``kinds``; else a ValueError naming the forms allowed (params validators,
    CLI options)."""
    if value in names:
        return value
    words = ", or ".join(f"{name!r} ({what})" for name, what in names.items())
    try:
        kind = EngineSpec.parse(value).kind
    except EngineSpecError as exc:
        raise ValueError(f"{exc}, or {words}") from None
    if kind not in kinds:
        expected = ", ".join(FORM[k] for k in kinds)
        raise ValueError(f"engine spec {value!r}: a {kind} engine cannot serve here; expected {expected}, or {words}")
    return value
