"""Whether bf16 pays on this machine's CPU: one matrix product of an SFT step's shape (a batch of 512 positions
through a 576 x 1536 projection, SmolLM2-135M's MLP) in float32, in bf16, and under bf16 autocast, side by side,
beside what ``inference.cpu.native_bf16`` says. Where it says no, the SFT stage trains in float32 instead.

    .venv/bin/python -m bench.bench_bf16 [--repeats 20] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from bench import report
from inference.cpu import native_bf16


def seconds(product, repeats: int) -> float:
    product()  # the first call picks and prepares its kernel
    start = time.perf_counter()
    for _ in range(repeats):
        product()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="products timed per arm (the mean is kept)")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()
    import torch

    a, b = torch.randn(512, 576), torch.randn(576, 1536)
    a16, b16 = a.bfloat16(), b.bfloat16()

    def autocast() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return a @ b

    arms = {"float32": lambda: a @ b, "bf16": lambda: a16 @ b16, "bf16 autocast": autocast}
    timed = {name: seconds(product, args.repeats) for name, product in arms.items()}
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, torch CPU capability "
               f"{torch.backends.cpu.get_cpu_capability()}, load {os.getloadavg()[0]:.1f}")
    lines = ["", "## bf16 on this CPU: one SFT-shaped matrix product (bench_bf16.py)", "",
             f"Machine: {machine}. `native_bf16`: {native_bf16(on_cpu=True)}. Mean of {args.repeats} products.", "",
             "| arm | ms | vs float32 |", "| --- | --- | --- |"]
    lines += [f"| {name} | {s * 1e3:.1f} | {s / timed['float32']:.1f}x |" for name, s in timed.items()]
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()
