"""The transformers engine: batched generation from a local checkpoint directory, with its own decode loop.

The loop is written here rather than calling ``model.generate`` because the engine contract needs two things
``generate`` does not give: the log-probability of each sampled token under the distribution it was actually
drawn from (temperature and top-p applied, DESIGN.md section 5 — what asynchronous RL importance weights need), and
one seeded ``torch.Generator`` per sample so a request's samples do not depend on what else is in the batch.
Prompts are left-padded; temperature 0 is greedy, and its logprobs are those of the unscaled distribution (the
same convention as vLLM's ``processed_logprobs`` for greedy requests).

A row generated on its own reuses the KV cache of the previous one-row generation up to their common token prefix
(``prefix_cache``): the turns of one conversation, each the one before plus a few messages, then prefill only what
is new (bench/RESULTS.md, bench_sft scoring). New weights drop the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference.cpu import tune_allocator
from inference.engine import Completion, Request, SamplingParams
from inference.engine_support import make_completion, render_prompt, stop_token_ids, validate_request

if TYPE_CHECKING:
    import torch

SEED_STRIDE = 1_000_003  # sample j of a request seeded s draws from generator seed s * SEED_STRIDE + j


@dataclass
class Row:
    """One sample to generate: a prompt and its sampling settings; ``sample_index`` picks its seeded stream."""

    prompt_ids: list[int]
    sampling: SamplingParams
    sample_index: int = 0
    top_logprobs: int = 0


@dataclass
class RowOutput:
    """A row's output so far; ``finish_reason`` is set (and ``text`` final) once it is done."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    text: str = ""
    policy_version: int = 0  # the weights that generated it (read under the engine's lock)


Progress = Callable[[int, RowOutput], None]
"""Called after every decode step for each row still running (and once when it finishes): ``(row index, sample)``."""


def process_logits(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probabilities of the sampling distribution: logits / temperature, then top-p (nucleus) truncation.

    ``temperature`` of 0 marks a greedy row and is treated as 1; top-p keeps the smallest set of tokens whose
    probability reaches ``top_p`` (the most likely token always stays). ``keep`` (one token id per row) stays in
    the nucleus whatever its mass: the RL trainer scores sampled tokens with this same function, and a token that
    another policy version sampled must keep a finite log-probability. Differentiable in ``logits``."""
    import torch

    scale = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    scaled = logits.float() / scale[:, None]
    sorted_logits, order = scaled.sort(dim=-1, descending=True, stable=True)  # tied logits keep one order: deterministic
    sorted_probs = sorted_logits.softmax(dim=-1)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    drop_sorted = (mass_before >= top_p[:, None]) & (temperature > 0)[:, None]
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    if keep is not None:
        drop = drop.scatter(-1, keep[:, None], False)
    return scaled.masked_fill(drop, float("-inf")).log_softmax(dim=-1)


class HFEngine:
    """In-process generation with transformers; thread-safe (one generation at a time)."""

    def __init__(self, model: Any, tokenizer: Any, policy_version: int = 0, max_batch_size: int = 16,
                 prefix_cache: bool = True) -> None:
        """Around a loaded model (``load`` reads a checkpoint directory); the model is put in eval mode."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}: must be >= 1")
        self.model, self.tokenizer = model, tokenizer
        self.policy_version = policy_version
        self.max_batch_size = max_batch_size
        self.prefix_cache = prefix_cache
        self._prefix: tuple[list[int], Any] | None = None  # the token ids in the kept cache, and the cache
        self.device = next(model.parameters()).device
        self.model.eval()
        self.stop_ids = stop_token_ids(self.tokenizer)
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.stop_ids)
        )
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        policy_version: int = 0,
        device: str | None = None,
        dtype: str = "float32",
        max_batch_size: int = 16,
    ) -> HFEngine:
        """The engine of a checkpoint directory."""
        tune_allocator()  # before the model loads: decode steps reuse their buffers (inference/cpu.py)
        import torch
        from transformers import AutoModelForCausalLM

        from inference.tokenizer import load as load_tokenizer

        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path}: not a transformers checkpoint directory (no config.json)")
        target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), local_files_only=True)
        return cls(model.to(target), load_tokenizer(path), policy_version, max_batch_size)

    # -- the Engine interface -------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        rows, owners, prompts = [], [], []
        for r, request in enumerate(requests):
            validate_request(request)
            prompt = self.render(request)
            prompts.append(prompt)
            for j in range(request.sampling.n):
                rows.append(Row(prompt, request.sampling, sample_index=j))
                owners.append(r)
        samples = self.generate_rows(rows)
        out: list[list[Completion]] = [[] for _ in requests]
        for owner, sample in zip(owners, samples):
            out[owner].append(
                self.completion(sample, prompts[owner], parse_tools=bool(requests[owner].tools))
            )
        return out

    def close(self) -> None:
        self.model = None

    # -- building blocks, also used by the server ------------------------------------------------------------------

    def render(self, request: Request) -> list[int]:
        return render_prompt(self.tokenizer, request.messages, request.tools)

    def completion(self, sample: RowOutput, prompt_ids: Sequence[int], parse_tools: bool) -> Completion:
        return make_completion(
            sample.text,
            sample.token_ids,
            sample.logprobs,
            sample.finish_reason or "length",
            sample.policy_version,
            prompt_ids,
            parse_tools,
        )

    def update_weights(self, state_dict: dict[str, Any], policy_version: int) -> None:
        """Load new policy weights (asynchronous RL); completions from now on carry ``policy_version``."""
        with self._lock:
            self.model.load_state_dict(state_dict)
            self.policy_version = policy_version
            self._prefix = None  # computed by the old weights

    def load_weights(self, path: str | Path, policy_version: int) -> None:
        """Load a published version (a safetensors file of the model's state dict): the weight-sync path."""
        from safetensors.torch import load_file

        self.update_weights(load_file(str(path), device=str(self.device)), policy_version)

    def generate_rows(self, rows: Sequence[Row], progress: Progress | None = None) -> list[RowOutput]:
        """Samples for ``rows`` in order, generated in batches of at most ``max_batch_size``."""
        for row in rows:
            if len(row.prompt_ids) + row.sampling.max_tokens > self.max_positions:
                raise ValueError(
                    f"prompt of {len(row.prompt_ids)} tokens + max_tokens={row.sampling.max_tokens} exceeds the "
                    f"model's {self.max_positions} positions: shorten the prompt or lower max_tokens"
                )
        samples: list[RowOutput] = []
        with self._lock:
            for start in range(0, len(rows), self.max_batch_size):
                batch = rows[start : start + self.max_batch_size]
                shifted = None if progress is None else _offset(progress, start)
                samples.extend(self._generate_batch(batch, shifted))
        return samples

    # -- the decode loop -----------------------------------------------------------------------------------------

    def _generator(self, row: Row) -> torch.Generator:
        import torch

        gen = torch.Generator(device=self.device)
        if row.sampling.seed is None:
            gen.manual_seed(int(torch.randint(0, 2**62, ()).item()))
        else:
            gen.manual_seed((row.sampling.seed * SEED_STRIDE + row.sample_index) % 2**63)
        return gen

    def _generate_batch(self, rows: Sequence[Row], progress: Progress | None) -> list[RowOutput]:
        import torch

        size = len(rows)
        cache, fed = None, None  # fed: the ids a one-row cache holds, kept for the next prompt's prefix
        if self.prefix_cache and all(len(r.prompt_ids) > 1 for r in rows):
            cache, ids, mask, positions = self._prefill_apart(rows)
            fed = list(rows[0].prompt_ids) if size == 1 else None
        else:
            width = max(len(r.prompt_ids) for r in rows)
            ids = torch.full((size, width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((size, width), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
                mask[i, width - len(row.prompt_ids) :] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            self._prefix = None
        temperature = torch.tensor([r.sampling.temperature for r in rows], device=self.device)
        top_p = torch.tensor([r.sampling.top_p for r in rows], device=self.device)
        generators = [None if r.sampling.temperature == 0 else self._generator(r) for r in rows]
        top_k = max(r.top_logprobs for r in rows)
        samples = [RowOutput(policy_version=self.policy_version) for _ in rows]
        running = list(range(size))
        with torch.inference_mode():
            for _ in range(max(r.sampling.max_tokens for r in rows)):
                out = self.model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    cache=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                cache = out.cache
                logprobs = process_logits(out.logits[:, -1, :], temperature, top_p)
                chosen = logprobs.argmax(dim=-1)
                for i in running:
                    if generators[i] is not None:
                        chosen[i] = torch.multinomial(logprobs[i].exp(), 1, generator=generators[i])[0]
                tops = logprobs.topk(top_k, dim=-1) if top_k else None
                next_running = []
                for i in running:
                    token = int(chosen[i])
                    sample = samples[i]
                    sample.token_ids.append(token)
                    sample.logprobs.append(float(logprobs[i, token]))
                    if tops is not None and rows[i].top_logprobs:
                        k = rows[i].top_logprobs
                        pairs = zip(tops.indices[i, :k].tolist(), tops.values[i, :k].tolist())
                        sample.top_logprobs.append([(int(t), float(v)) for t, v in pairs])
                    self._check_finished(rows[i], sample)
                    if sample.finish_reason is None:
                        next_running.append(i)
                    if progress is not None:
                        progress(i, sample)
                running = next_running
                if not running:
                    break
                ids = chosen[:, None]
                if fed is not None:
                    fed.append(int(chosen[0]))
                mask = torch.cat([mask, mask.new_ones((size, 1))], dim=-1)
                positions = positions[:, -1:] + 1
        if fed is not None:  # one row decoded in its own cache: that cache serves the next prompt's prefix
            self._prefix = (fed, cache)
        return samples

    def _prefill_apart(self, rows: Sequence[Row]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each prompt but its last token prefilled on its own (no padding: the attention's fast path), reusing the
        kept cache's common prefix, then the caches left-padded into one for decoding the rows together: the cache,
        and the ids, attention mask and positions of the first decode step (each row's last prompt token)."""
        import torch
        from transformers.cache_utils import DynamicCache

        kept: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        cache = None
        for row in rows:
            cache = self._prefill_alone(row.prompt_ids[:-1])
            kept.append([(layer.keys, layer.values) for layer in cache.layers])  # before the next row crops it
        lengths = [len(r.prompt_ids) - 1 for r in rows]
        width = max(lengths)
        ids = torch.tensor([[r.prompt_ids[-1]] for r in rows], device=self.device)
        mask = torch.tensor([[0] * (width - n) + [1] * (n + 1) for n in lengths], device=self.device)
        positions = torch.tensor([[n] for n in lengths], device=self.device)
        if len(rows) == 1:
            return cache, ids, mask, positions
        padded = [tuple(torch.cat([torch.nn.functional.pad(layers[i][k], (0, 0, width - n, 0))
                                   for layers, n in zip(kept, lengths, strict=True)]) for k in (0, 1))
                  for i in range(len(kept[0]))]
        return DynamicCache(ddp_cache_data=padded, config=self.model.config), ids, mask, positions

    def _prefill_alone(self, prompt: list[int]) -> Any:
        """A cache holding ``prompt``: the kept one cut to their common prefix and extended by the rest (the kept
        cache becomes this one)."""
        import torch

        common, cache = 0, None
        if self._prefix is not None and self._prefix[1].is_croppable:
            kept, cache = self._prefix
            for a, b in zip(kept, prompt):
                if a != b:
                    break
                common += 1
            common = min(common, len(prompt) - 1)  # at least one token to run: the cache is filled by a forward
            cache.crop(common - len(kept))  # a negative count: the tokens to drop from the end
        if cache is None:
            from transformers.cache_utils import DynamicCache

            cache = DynamicCache(config=self.model.config)
        rest = torch.tensor([prompt[common:]], device=self.device)
        with torch.inference_mode():
            self.model(input_ids=rest, attention_mask=torch.ones((1, len(prompt)), dtype=torch.long,
                                                                  device=self.device),
                       position_ids=torch.arange(common, len(prompt), device=self.device)[None, :], cache=cache,
                       use_cache=True, logits_to_keep=1)
        self._prefix = (list(prompt), cache)
        return cache

    def _check_finished(self, row: Row, sample: RowOutput) -> None:
        """Set the finish reason and final text when the row hit a stop token, a stop string or max_tokens."""
        last = sample.token_ids[-1]
        if last in self.stop_ids:
            sample.finish_reason = "stop"
            sample.text = self._decode(sample.token_ids[:-1])
            return
        if row.sampling.stop:
            text = self._decode(sample.token_ids)
            cuts = [text.find(s) for s in row.sampling.stop if s and s in text]
            if cuts:
                sample.finish_reason, sample.text = "stop", text[: min(cuts)]
                return
        if len(sample.token_ids) >= row.sampling.max_tokens:
            sample.finish_reason = "length"
            sample.text = self._decode(sample.token_ids)

    def _decode(self, token_ids: Sequence[int]) -> str:
        # Special tokens (<|im_end|>, <|im_start|>) are dropped; the tool-call tags are ordinary added tokens.
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def _offset(progress: Progress, start: int) -> Progress:
    return lambda i, sample: progress(start + i, sample)
