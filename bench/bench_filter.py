"""Difficulty-filter throughput: QA items per second at k = 8 with the tiny policy, through the transformers engine
(one sample at a time vs batches of 16) and through `gymforge serve` over HTTP.

The data are the tiny profile's own: the `world`, `qa_seeds` and `tokenizer` stages run in-process, then the
`tiny_policy` stage trains for ``--steps`` steps (its loss curve is printed). Each variant filters the same
``--items`` seeds with the same seeded sampling, so the pass-count histograms must agree between the in-process
variants; the figures are measured side by side in one run.

    .venv/bin/python -m bench.bench_filter [--items 32] [--steps 60] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from bench import report

# Before torch loads: OpenMP's active wait slows the tiny model badly on a shared, oversubscribed machine (see the
# inference section of RESULTS.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "flows" / "profiles" / "tiny.yaml"


def tiny_profile() -> dict:
    import yaml

    return yaml.safe_load(PROFILE.read_text(encoding="utf-8")) or {}


def tiny_inputs(steps: int | None, root: Path) -> tuple[object, object, float]:
    """(qa_seeds frame, tiny_policy model artifact, training seconds), published under ``root`` by the stages
    themselves with the tiny profile."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import run_serially
    from flows.profiles import stage_params

    params = stage_params("tiny", {"tiny_policy": {"steps": steps}} if steps else None)
    store = open_store(root)
    runs = run_serially(store, Catalog(root), ["qa_seeds", "tokenizer"], params, "bench", progress=False)
    start = time.perf_counter()
    policy = run_serially(store, Catalog(root), ["tiny_policy"], params, "bench", progress=False)["tiny_policy"]
    seconds = time.perf_counter() - start
    policy = store.get("tiny_policy", policy.key)
    print(f"tiny_policy: {policy.read('summary').to_dicts()} in {seconds:.0f} s")
    return store.get("qa_seeds", runs["qa_seeds"].key).read("seeds"), policy, seconds


def timed_filter(seeds, engine) -> tuple[float, list[int]]:
    """Seconds to filter ``seeds`` with the tiny profile's qa_filtered params, and the pass-count histogram."""
    from tasks.longctx.qa_filtered import QAFilterParams, filter_qa

    raw = {key: value for key, value in (tiny_profile().get("qa_filtered") or {}).items() if key != "engine"}
    params = QAFilterParams(**{**raw, "k": 8})
    start = time.perf_counter()
    out = filter_qa(seeds, engine, params)
    return time.perf_counter() - start, out["histogram"]["n"].to_list()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=32, help="QA seeds filtered per variant")
    parser.add_argument("--steps", type=int, help="tiny_policy training steps (default: the tiny profile's)")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args, _ = parser.parse_known_args()

    import torch

    from inference.engine_factory import load_engine
    from inference.server import create_app, serve_in_background
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp:
        seeds, policy, train_seconds = tiny_inputs(args.steps, Path(tmp))
        summary = policy.read("summary").row(0, named=True)
        steps = summary["steps"]
        seeds = seeds.sort("id").head(args.items)
        checkpoint = policy.directory
        one = load_engine(f"hf:{checkpoint}", max_batch_size=1)
        timed_filter(seeds.head(2), one)  # warm-up
        figures = {"transformers engine, one sample at a time": timed_filter(seeds, one)}
        one.close()
        hf = load_engine(f"hf:{checkpoint}", max_batch_size=16)
        figures["transformers engine, batches of 16 samples"] = timed_filter(seeds, hf)
        with serve_in_background(create_app(checkpoint, "tiny", max_batch_size=16, engine=hf)) as url:
            http = load_engine(f"openai:{url}#tiny", max_concurrency=16)
            try:
                figures["gymforge serve (HTTP), batches of 16, 16 concurrent requests"] = timed_filter(seeds, http)
            finally:
                http.close()
        hf.close()

    machine = (f"{platform.machine()}, {os.cpu_count()} cores (shared, load {os.getloadavg()[0]:.1f}), torch "
               f"{torch.__version__}, {torch.get_num_threads()} threads")
    lines = [
        "",
        f"## Difficulty filter throughput (bench_filter.py, tiny policy after {steps} steps, k = 8)",
        "",
        f"Machine: {machine}. {args.items} QA seeds of the tiny profile, its qa_filtered params (k = 8).",
        "",
        "| path | items/s | samples/s | pass-count histogram (0..8) |",
        "| --- | --- | --- | --- |",
        *(f"| {name} | {args.items / s:.2f} | {8 * args.items / s:.1f} | {hist} |"
          for name, (s, hist) in figures.items()),
    ]
    lines.append(f"\ntiny_policy: {steps} steps in {train_seconds:.0f} s, final loss {summary['final_loss']:.3f}")
    single, batched = (figures[k][0] for k in list(figures)[:2])
    lines.append(f"\nBatching: batches of 16 / one sample at a time = {single / batched:.1f}x items/s")
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()
