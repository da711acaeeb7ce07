"""Mid-training room: verified trajectories per second per route, the share of synthesized trajectories that verify,
and K-Center-Greedy selection time at 100,000 candidates against the naive O(n k) numpy loop.

- routes: the stages run in-process on environments built by the real construction pipeline (four domains), the
  reference teacher, a tokenizer trained on the world documents; every kept trajectory verified by execution (or
  schema conformance, or the two-way answer); rate = kept / stage seconds (gate excluded), 1 process;
- KCG: 100,000 L2-normalized 384-d float32 vectors drawn around 500 centers (sentence embeddings are clustered;
  computing 100,000 real MiniLM embeddings takes longer on 2 cores than the whole selection), weights uniform in
  [1, 3] like normalized perplexity scores; both implementations side by side in one run, same k;
- tiny: the tiny profile's sections of the mid-training stages and sft_set, run in turn on those inputs (what
  they add to `make demo`).

Wall and CPU seconds are both reported, with the load average: on a shared machine the wall time measures the
other processes too, the process's CPU time (all its threads) what the work itself costs.

    .venv/bin/python -m bench.bench_midtrain [--part all|routes|kcg|tiny] [--tasks 48] [--candidates 100000]
        [--k 1000] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from data_contracts.stage import FrameArtifact
from envgen.compiler import compiled
from envgen.construct import ConstructionSettings
from envgen.taskgen import TaskSettings, build_verified
from tasks.environments.records import ENVIRONMENT
from tasks.midtrain.kcenter import k_center_greedy, k_center_greedy_naive

DOMAINS = ("airline", "retail", "bank", "car_rental")


def environments(n: int) -> list[dict]:
    envs = []
    for seed in range(4 * n):
        if len(envs) == n:
            break
        env, _, _ = build_verified(compiled(DOMAINS[seed % 4]), f"{DOMAINS[seed % 4]}-bench-{seed:05d}", seed,
                                   ConstructionSettings(min_tools=8, max_chains=2), TaskSettings())
        if env is not None:
            envs.append(env)
    return envs


def _inputs() -> dict[str, FrameArtifact]:
    """What the stages read: a world, a tokenizer trained on it, four domains' graphs, eight environments."""
    from tasks.environments.records import DOMAIN_GRAPH
    from tasks.longctx.records import KEYCHAIN
    from tasks.longctx.world import world as world_stage
    from tasks.tokenizer import tokenizer as tokenizer_stage

    world = FrameArtifact(world_stage.run({}, world_stage.parse_params(
        {"n_entities": 600, "n_questions": 200, "n_distractors": 2}), "b"))
    tok = FrameArtifact(tokenizer_stage.run({"world": world}, tokenizer_stage.parse_params({"vocab_size": 4096}), "b"))
    graphs = DOMAIN_GRAPH.frame([{"domain": d, "spec_json": compiled(d).spec.model_dump_json()} for d in DOMAINS])
    return {"environments": FrameArtifact({"environments": ENVIRONMENT.frame(environments(8))}), "tokenizer": tok,
            "domain_graphs": FrameArtifact({"domains": graphs}), "world": world,
            "keychain": FrameArtifact({"keychain": KEYCHAIN.frame()})}


def run_plan(inputs: dict[str, FrameArtifact], plan: list[tuple[Any, dict[str, Any]]]
             ) -> list[tuple[str, int, int, float, float]]:
    """(stage, kept, rejected, wall seconds, CPU seconds) of each stage run in turn, each reading the ones before."""
    out = []
    for stage, params in plan:
        start, cpu = time.perf_counter(), time.process_time()
        result = stage.run(inputs, stage.parse_params(params), "b")
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        inputs[stage.name] = FrameArtifact({"trajectories": result["trajectories"]})
        out.append((stage.name, result["trajectories"].height, result["rejected"].height, seconds, cpu))
    return out


def _route_stages() -> list[Any]:
    from tasks.midtrain.midtrain_decompose import midtrain_decompose
    from tasks.midtrain.midtrain_env import midtrain_env
    from tasks.midtrain.midtrain_longctx import midtrain_longctx
    from tasks.midtrain.midtrain_plan import midtrain_plan
    from tasks.midtrain.midtrain_reason import midtrain_reason
    from tasks.midtrain.midtrain_text import midtrain_text

    return [midtrain_env, midtrain_decompose, midtrain_reason, midtrain_plan, midtrain_text, midtrain_longctx]


def route_rates(n_tasks: int) -> list[tuple[str, int, int, float, float]]:
    """(route, kept, rejected, wall seconds, CPU seconds) per route."""
    counts = {"midtrain_env": {"n_tasks": n_tasks}, "midtrain_text": {"texts_per_domain": n_tasks // 4},
              "midtrain_longctx": {"n_keychain": 0, "n_qa": n_tasks}}
    return run_plan(_inputs(), [(stage, counts.get(stage.name, {})) for stage in _route_stages()])


def tiny_profile_cost(workdir: Path) -> list[tuple[str, int, int, float, float]]:
    """The tiny profile's mid-training stages and sft_set (what they add to `make demo`), the reference model an
    untrained tiny policy of the profile's size (scoring costs the same as the trained one's)."""
    from flows.profiles import load_profile
    from tasks.midtrain.sft_set import sft_set
    from tasks.tokenizer import resolve_tokenizer
    from training.tiny_model import init_model

    profile = load_profile("tiny")
    inputs = _inputs()
    tok_dir = workdir / "tokenizer"
    resolve_tokenizer("default", inputs).save_pretrained(tok_dir)
    inputs["tiny_policy"] = FrameArtifact({}, directory=init_model("tiny", tok_dir, workdir / "model"))
    plan = [(stage, profile.get(stage.name, {})) for stage in [*_route_stages(), sft_set]]
    return run_plan(inputs, plan)


def selection_quality(n_tasks: int, workdir: Path, seeds: int = 5) -> list[str]:
    """KCG against random at equal size on the routes' candidates: the references' mean NLL per trained token
    against ln V, how many picks are simply the top scores, and coverage on what the selection never sees (word
    bigrams of the trained text, domains) and in the centred embedding space."""
    import polars as pl

    from tasks.midtrain.sft_set import sft_set
    from tasks.tokenizer import resolve_tokenizer
    from training.tiny_model import init_model

    inputs = _inputs()
    counts = {"midtrain_env": {"n_tasks": n_tasks}, "midtrain_text": {"texts_per_domain": n_tasks // 4},
              "midtrain_longctx": {"n_keychain": 0, "n_qa": n_tasks}}
    run_plan(inputs, [(stage, counts.get(stage.name, {})) for stage in _route_stages()])
    tok_dir = workdir / "tokenizer"
    resolve_tokenizer("default", inputs).save_pretrained(tok_dir)
    inputs["tiny_policy"] = FrameArtifact({}, directory=init_model("tiny", tok_dir, workdir / "model"))
    base = {"max_tokens": 3584}
    probe = sft_set.run(inputs, sft_set.parse_params({**base, "k": 10**6}), "b")
    k = max(4, int(dict(probe["summary"].select("name", "value").iter_rows())["candidates"]) // 4)

    def figures(out: dict[str, pl.DataFrame]) -> dict[str, float]:
        return dict(out["summary"].select("name", "value").iter_rows())

    lines, baselines = [], {}
    for reference, alpha in (("bigram", 1.0), ("bigram", 0.0), ("tiny", 1.0)):
        arm = {**base, "k": k, "reference": reference, "alpha": alpha}
        kcg = sft_set.run(inputs, sft_set.parse_params(arm), "b")
        f = figures(kcg)
        scores = kcg["scores"].filter(pl.col("score").is_not_null())
        top = set(scores.sort("score", descending=True).head(k)["id"])
        picked = set(scores.filter(pl.col("status") == "selected")["id"])
        if reference not in baselines:  # a random selection does not depend on the weights
            randoms = [figures(sft_set.run(inputs, sft_set.parse_params({**arm, "selection": "random", "seed": s}),
                                           "b")) for s in range(seeds)]
            baselines[reference] = {n: float(np.mean([r[n] for r in randoms]))
                                    for n in ("coverage_bigrams", "coverage_domains", "coverage_mean_distance")}
        mean = baselines[reference]
        lines.append(f"| {reference}, alpha {alpha:g} | {f['reference_mean_nll']:.3f} / {f['uniform_nll']:.3f} | "
                     f"{len(top & picked)} of {k} | {f['coverage_bigrams']:.3f} vs {mean['coverage_bigrams']:.3f} | "
                     f"{f['coverage_domains']:.3f} vs {mean['coverage_domains']:.3f} | "
                     f"{f['coverage_mean_distance']:.3f} vs {mean['coverage_mean_distance']:.3f} |")
    header = [(f"sft_set on {int(f['candidates'])} candidates of the six routes ({n_tasks} tasks), k = {k}; KCG "
              f"against the mean of {seeds} seeded random selections of the same size per route. NLL: nats per "
              "trained token of the reference / ln V (uniform guessing); the tiny reference is an untrained "
              "tiny policy."), "",
              ("| reference, KCG weight exponent | NLL / ln V | picks among the top-k scores | trained-text bigram coverage, KCG vs "
              "random | domain coverage | mean distance to the nearest pick (centred MiniLM; lower covers better) |"),
              "|---|---|---|---|---|---|"]
    return header + lines


def _timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return result, time.perf_counter() - start, time.process_time() - cpu


def kcg(n: int, k: int) -> tuple[tuple[float, float], tuple[float, float], int]:
    """((wall, CPU) seconds of k_center_greedy, the same of the naive loop, first step where the orders differ,
    or k when they agree)."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(500, 384))
    x = (centers[rng.integers(0, 500, n)] + 0.5 * rng.normal(size=(n, 384))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(1.0, 3.0, n)
    (fast, _), *fast_s = _timed(k_center_greedy, x, k, w)
    (naive, _), *naive_s = _timed(k_center_greedy_naive, x, k, w)
    differ = np.flatnonzero(fast != naive)
    return tuple(fast_s), tuple(naive_s), int(differ[0]) if len(differ) else k


def _table(rates: list[tuple[str, int, int, float, float]]) -> list[str]:
    lines = [("| stage | kept | rejected | verified share | wall s | CPU s | verified/s (wall) | "
              "verified per CPU-s |"),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, kept, rejected, seconds, cpu in rates:
        share = kept / max(kept + rejected, 1)
        lines.append(f"| {name} | {kept} | {rejected} | {share:.2f} | {seconds:.1f} | {cpu:.1f} | "
                     f"{kept / seconds:.1f} | {kept / max(cpu, 1e-9):.1f} |")
    return lines


def main() -> None:
    from bench import report

    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--part", choices=("all", "routes", "kcg", "tiny", "selection"), default="all",
                        help="routes: rates per route; kcg: selection at --candidates; tiny: the tiny profile's cost")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    lines = [""]
    if args.part in ("all", "routes"):
        lines += ["Verified trajectories per route:", "", *_table(route_rates(args.tasks)), ""]
    if args.part in ("all", "kcg"):
        (fast_s, fast_cpu), (naive_s, naive_cpu), agree = kcg(args.candidates, args.k)
        lines += [(f"K-Center-Greedy, {args.candidates:,} candidates x 384-d, k={args.k}: one BLAS pass per step "
                   f"{fast_s:.1f} s wall / {fast_cpu:.1f} s CPU, naive numpy loop {naive_s:.1f} s wall / "
                   f"{naive_cpu:.1f} s CPU (ratio {naive_s / fast_s:.2f}x wall, {naive_cpu / fast_cpu:.2f}x CPU); "
                   f"orders identical for the first {agree} of {args.k} picks (past that, float32 rounding ties)."),
                  ""]
    if args.part in ("all", "selection"):
        with tempfile.TemporaryDirectory() as tmp:
            lines += [*selection_quality(args.tasks, Path(tmp)), ""]
    if args.part in ("all", "tiny"):
        with tempfile.TemporaryDirectory() as tmp:
            rates = tiny_profile_cost(Path(tmp))
        wall, cpu = sum(r[3] for r in rates), sum(r[4] for r in rates)
        lines += ["The tiny profile's mid-training stages and sft_set, one process (what they add to `make demo`):",
                  "", *_table(rates), "", f"Total: {wall:.1f} s wall, {cpu:.1f} s CPU.", ""]
    load = max(load, os.getloadavg()[0])
    heading = (f"\n## bench_midtrain ({platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, "
               f"load average up to {load:.1f})")
    report([heading, *lines], record=not args.no_record)


if __name__ == "__main__":
    main()
