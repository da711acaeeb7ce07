"""Teachers: who writes the words of synthesized trajectories (reasoning, the user's requests and replies).

A teacher is ``reference`` — the offline, deterministic reference teacher, which keeps the texts written from the
graph and the specs (``envgen.trajectory_checks``' ``Slot.default``) — or any engine spec, usually an OpenAI-compatible
server (``openai:URL#MODEL``). An engine teacher is probed once before any work (an endpoint that is down or answers
garbage is one clear ``TeacherError``); afterwards a failure on one item (an error, an empty answer, a rewrite that
drops a value it had to keep) rejects that item with its reason and never the stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from data_contracts.stage import StageError
from envgen.trajectory_checks import Slot, slot_problem
from inference.engine import Request, SamplingParams
from inference.engine_spec import REFERENCE, engine_or

SYSTEM = "You write short, natural texts for training conversations. Answer with the text only."


class TeacherError(StageError):
    """The teacher cannot be used at all (unreachable, or answering garbage); the message names it."""


def check_teacher(spec: str) -> str:
    """``reference`` or an engine spec (hf:DIR, openai:URL#MODEL, vllm:DIR); raises ValueError naming the forms."""
    return engine_or(spec, {REFERENCE: "the offline teacher"})


class Teacher:
    """Writes every slot of one item at a time; ``write`` returns the texts, or the reason the item is rejected."""

    def __init__(self, spec: str = REFERENCE, max_tokens: int = 256, temperature: float = 0.7, seed: int = 0,
                 timeout_s: float = 60.0, retries: int = 2, engine: Any = None) -> None:
        """``engine``: an Engine already built, named ``spec`` (the scripted test doubles of the tests)."""
        self.spec = check_teacher(spec) if engine is None else spec
        self.engine: Any = engine
        self.sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
        if engine is not None:
            self._probe()
        elif spec != REFERENCE:
            from inference.engine_factory import load_engine
            from inference.engine_spec import EngineSpec

            served = not EngineSpec.parse(spec).local
            options = {"timeout_s": timeout_s, "max_retries": retries} if served else {}
            self.engine = load_engine(spec, **options)
            self._probe()

    @property
    def name(self) -> str:
        return self.spec

    def _probe(self) -> None:
        try:
            [[completion]] = self.engine.generate([self._request("Say hello in three words.")])
        except Exception as exc:  # noqa: BLE001 - whatever the transport says, the teacher is unusable
            self.close()
            raise TeacherError(f"teacher {self.spec} is unreachable or broken: {type(exc).__name__}: {exc}") from None
        if not completion.text.strip():
            self.close()
            raise TeacherError(f"teacher {self.spec} answers garbage: an empty completion to a plain prompt")

    def _request(self, prompt: str) -> Request:
        return Request([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                       sampling=self.sampling)

    def write(self, slots: Sequence[Slot]) -> list[str] | str:
        """The texts of one item's slots, or why the item is rejected (prefixed ``teacher:``)."""
        if self.engine is None:
            return [s.default for s in slots]
        try:
            completions = self.engine.generate([self._request(s.prompt) for s in slots])
        except Exception as exc:  # noqa: BLE001 - one item's failure rejects that item only
            return f"teacher: {type(exc).__name__}: {str(exc)[:200]}"
        texts = [c[0].text.strip() for c in completions]
        for slot, text in zip(slots, texts, strict=True):
            if (problem := slot_problem(slot, text)) is not None:
                return f"teacher: {problem}"
        return texts

    def ask(self, prompt: str) -> str:
        """One free answer (an extraction); raises on a failure, which the caller turns into that item's reason."""
        if self.engine is None:
            raise TeacherError("the reference teacher writes no free text; name a teacher engine")
        [[completion]] = self.engine.generate([self._request(prompt)])
        return completion.text

    def write_all(self, items: Sequence[Sequence[Slot]], concurrency: int = 8) -> list[list[str] | str]:
        """``write`` for many items, ``concurrency`` at a time (an HTTP teacher answers requests in parallel)."""
        if self.engine is None or len(items) <= 1:
            return [self.write(slots) for slots in items]
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(self.write, items))

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
