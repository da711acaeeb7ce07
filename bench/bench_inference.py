"""Generation throughput of the tiny model: the transformers engine in-process vs `gymforge serve` over HTTP.

A tokenizer (vocab 4096, the tiny profile's size) is trained on the project's own text files and a `tiny` model is
initialised from it; each path then generates ``--tokens`` new tokens per sample at batch 1 and batch 8 (8
concurrent requests through the HTTP engine, which the server batches). Sampling at temperature 1 with a seed; a
random model rarely emits the end-of-turn token, and only tokens actually generated are counted. Figures are the
median of ``--repeats`` runs after one warm-up, measured side by side in one process.

    .venv/bin/python -m bench.bench_inference [--tokens 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import report

# Before torch loads: with OpenMP's default active wait, the tiny model ran ~50x slower on the caller's thread of
# the shared, oversubscribed 2-core machine (see the inference section of RESULTS.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]


def build_checkpoint(root: Path) -> Path:
    from inference.tokenizer import save, train_tokenizer
    from training.tiny_model import init_model

    files = sorted(p for d in ("inference", "data_contracts", "tasks") for p in (ROOT / d).glob("*.py"))
    texts = [p.read_text(encoding="utf-8") for p in [*files, ROOT / "README.md"] if p.is_file()]
    save(train_tokenizer(texts, vocab_size=4096), root / "tokenizer")
    return init_model("tiny", root / "tokenizer", root / "model", seed=0)


def measure(generate: Callable[[int], int], batch: int, repeats: int) -> float:
    """Median tokens/s of ``generate(batch)``, which returns the number of tokens it generated."""
    generate(batch)  # warm-up: first-call allocation and thread-pool start
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = generate(batch)
        rates.append(tokens / (time.perf_counter() - start))
    return statistics.median(rates)


def forward_rate(checkpoint: Path, steps: int = 30) -> float:
    """Forward passes/s of the model on a batch of 8 x 40 tokens, on the interpreter's main thread."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), local_files_only=True).eval()
    ids = torch.randint(0, model.config.vocab_size, (8, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model(input_ids=ids)
        start = time.perf_counter()
        for _ in range(steps):
            model(input_ids=ids)
    return steps / (time.perf_counter() - start)


def openmp_policies(checkpoint: Path) -> dict[str, float]:
    """forward_rate in a fresh process per OMP_WAIT_POLICY (it is read once, when OpenMP starts)."""
    rates = {}
    for policy in ("ACTIVE", "PASSIVE"):
        done = subprocess.run(
            [sys.executable, "-m", "bench.bench_inference", "--forward-rate", str(checkpoint)],
            env={**os.environ, "OMP_WAIT_POLICY": policy},
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        rates[policy] = float(done.stdout.strip().splitlines()[-1])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per sample")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forward-rate", type=Path, help=argparse.SUPPRESS)  # the per-policy child process
    args = parser.parse_args()
    if args.forward_rate:
        print(forward_rate(args.forward_rate))
        return

    import torch

    from inference.engine import Request, SamplingParams
    from inference.engine_factory import load_engine
    from inference.server import create_app, serve_in_background

    messages = [{"role": "user", "content": "Which river runs through the city, and who founded it?"}]

    def runner(engine) -> Callable[[int], int]:
        def run(batch: int) -> int:
            requests = [
                Request(messages, sampling=SamplingParams(temperature=1.0, max_tokens=args.tokens, seed=i))
                for i in range(batch)
            ]
            return sum(len(c.token_ids) for cs in engine.generate(requests) for c in cs)

        return run

    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
        checkpoint = build_checkpoint(Path(tmp))
        hf = load_engine(f"hf:{checkpoint}", max_batch_size=8)
        figures = {("transformers engine", b): measure(runner(hf), b, args.repeats) for b in (1, 8)}
        with serve_in_background(create_app(checkpoint, "tiny", max_batch_size=8, engine=hf)) as url:
            http = load_engine(f"openai:{url}#tiny", max_concurrency=8)
            try:
                figures |= {
                    ("gymforge serve (HTTP)", b): measure(runner(http), b, args.repeats) for b in (1, 8)
                }
            finally:
                http.close()
        policies = openmp_policies(checkpoint)

    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores (shared, load {os.getloadavg()[0]:.1f}), torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
    )
    lines = [
        "",
        f"## Inference throughput (bench_inference.py, tiny model, {args.tokens} new tokens/sample)",
        "",
        f"Machine: {machine}. Median of {args.repeats} runs after a warm-up.",
        "",
        "| path | batch | tokens/s |",
        "| --- | --- | --- |",
        *(f"| {path} | {batch} | {rate:.0f} |" for (path, batch), rate in figures.items()),
    ]
    for (path, _), rate8 in figures.items():
        if _ == 8:
            lines.append(f"\n{path}: batch 8 / batch 1 = {rate8 / figures[(path, 1)]:.1f}x")
    ratio = figures[("gymforge serve (HTTP)", 1)] / figures[("transformers engine", 1)]
    lines.append(f"\nHTTP overhead at batch 1: served / in-process = {ratio:.2f}")
    lines.append(
        f"\nOpenMP wait policy, forward passes/s (batch 8 x 40 tokens, main thread, one process each): "
        f"ACTIVE {policies['ACTIVE']:.1f}, PASSIVE {policies['PASSIVE']:.1f} "
        f"(PASSIVE / ACTIVE = {policies['PASSIVE'] / policies['ACTIVE']:.1f}x)"
    )
    report(lines)


if __name__ == "__main__":
    main()
