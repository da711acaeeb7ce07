"""CPU training and generation of the tiny model, before and after the allocator settings of inference/cpu.py and
the label-position loss of training/tiny_policy.py.

"before" is glibc's default allocator and the full-logits loss (``model(..., labels=labels).loss``); "before, Dask
worker" the same in the environment a Dask nanny gives the workers it spawns (``MALLOC_TRIM_THRESHOLD_=65536``,
``OMP_NUM_THREADS=1``: the tiny_policy stage of ``gymforge keychain`` and ``make demo`` ran so); "after" is
``tune_allocator()`` and ``label_loss``, and two arms have one change each. Each arm runs in a fresh process
(mallopt cannot be undone, and glibc reads its variables only at start); the arms alternate for ``--repeats``
rounds and the best round of each is kept.
Figures come from ``resource.getrusage`` around the timed steps: steps/s (new tokens/s for generation) of wall
time and of the process's CPU time (steadier on a shared machine), the system-time share of that CPU time, and minor
page faults.

- training loop: the tiny model's shape (training/tiny_model.py) with ``--vocab``, a batch of ``--batch`` x
  ``--tokens`` whose last ``--answer-tokens`` are labelled (a boxed answer), AdamW, ``--threads`` torch threads;
- generation: the transformers engine (inference/hf_engine.py) on a freshly initialised tiny checkpoint, batch 1
  and 8, ``--new-tokens`` per sample at temperature 1;
- with ``--stages``: the first-run path ``world -> qa_seeds, tokenizer -> tiny_policy -> qa_filtered`` through the
  runner with the tiny profile in a fresh data root, for ``--baseline`` and ``--candidate`` (git revisions, exported
  with ``git archive``) one after the other, then for each ``--variant`` (tiny_policy params over the profile's, the
  candidate's code and data root), in a Dask worker's environment: wall and CPU time, system share and minor
  faults of tiny_policy and qa_filtered, tiny_policy's loss, qa_filtered's pass-count histogram.

    .venv/bin/python -m bench.bench_training [--repeats 2] [--stages --baseline REV [--variant JSON ...]] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import report, tree_at

# Before torch loads: OpenMP's active wait slows the tiny model badly on a shared machine (RESULTS.md, inference).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
# arm -> (allocator tuned, label-position loss, Dask worker environment)
ARMS = {
    "before": (False, False, False),
    "before-dask": (False, False, True),
    "allocator": (True, False, False),
    "label-loss": (False, True, False),
    "after": (True, True, False),
}
GENERATION_BATCHES = (1, 8)

# The first-run path in one process: run by ``python -c`` in the tree under test, so the baseline runs its own code.
STAGES_SCRIPT = """
import json, os, resource, sys, time
from pathlib import Path
from data_contracts.catalog import Catalog
from data_contracts.runner import run_serially
from data_contracts.store import ArtifactStore
from data_contracts.roots import open_store
from flows.profiles import stage_params
root = Path(sys.argv[1])
os.environ["GYMFORGE_CACHE"] = str(root / "cache")
params = stage_params("tiny", {"tiny_policy": json.loads(sys.argv[2])})
store = open_store(root)
def run(target):
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    runs = run_serially(store, Catalog(root), [target], params, "p0", progress=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    usage = {"wall": wall, "cpu": user + system, "sys_share": system / max(user + system, 1e-9),
             "faults": after.ru_minflt - before.ru_minflt}
    return store.get(target, runs[target].key), usage
run("qa_seeds"), run("tokenizer")
policy, policy_usage = run("tiny_policy")
filtered, filter_usage = run("qa_filtered")
print(json.dumps({
    "params": params["tiny_policy"], "tiny_policy": policy_usage, "qa_filtered": filter_usage,
    "final_loss": policy.read("summary")["final_loss"][0], "last_window": policy.read("loss_curve")["loss"][-1],
    "histogram": filtered.read("histogram")["n"].to_list(),
}))
"""


def measure(work: Callable[[], int], rounds: int) -> dict[str, float]:
    """Run ``work`` once to warm up, then ``rounds`` times under getrusage; ``work`` returns its unit count (steps or
    tokens)."""
    work()
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    units = sum(work() for _ in range(rounds))
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {"per_s": units / seconds, "per_cpu_s": units / (user + system), "sys_share": system / (user + system),
            "faults_per_unit": (after.ru_minflt - before.ru_minflt) / units}


def training_arm(label_positions: bool, args: argparse.Namespace) -> dict[str, float]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.tiny_model import SIZES
    from training.tiny_policy import label_loss

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=args.vocab, tie_word_embeddings=True, **SIZES["tiny"])).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    ids = torch.randint(0, args.vocab, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    labels = torch.full_like(ids, -100)
    labels[:, -args.answer_tokens:] = ids[:, -args.answer_tokens:]

    def step() -> int:
        if label_positions:
            loss = label_loss(model, ids, attention, labels)
        else:
            loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return 1

    return measure(step, args.steps)


def generation_arm(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    import torch

    from inference.engine import Request, SamplingParams
    from inference.hf_engine import HFEngine

    torch.set_num_threads(args.threads)
    engine = HFEngine.load(args.checkpoint, max_batch_size=max(GENERATION_BATCHES))
    messages = [{"role": "user", "content": "Which river runs through the city, and who founded it?"}]

    def generate(batch: int) -> int:
        requests = [Request(messages, sampling=SamplingParams(temperature=1.0, max_tokens=args.new_tokens, seed=i))
                    for i in range(batch)]
        return sum(len(c.token_ids) for cs in engine.generate(requests) for c in cs)

    return {str(batch): measure(lambda b=batch: generate(b), args.generation_rounds) for batch in GENERATION_BATCHES}


def start_environ(dask_worker: bool) -> dict[str, str]:
    """This environment without allocator settings, as a fresh process has it, or as a Dask nanny gives it to the
    workers it spawns: the nanny exports ``distributed.nanny.pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_``,
    ``OMP_NUM_THREADS``, ...) where the parent's environment lacks them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if dask_worker:
        import dask.config
        import distributed  # noqa: F401  (loads distributed's configuration defaults)

        env |= {k: str(v) for k, v in dask.config.get("distributed.nanny.pre-spawn-environ").items() if v is not None}
    return env


def run_arm(arm: str, args: argparse.Namespace, checkpoint: Path) -> dict:
    """Both measurements of one arm in a fresh process."""
    env = start_environ(ARMS[arm][2])
    passed = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
              ("steps", "tokens", "vocab", "batch", "answer_tokens", "threads", "new_tokens", "generation_rounds")]
    done = subprocess.run([sys.executable, "-m", "bench.bench_training", "--arm", arm, "--checkpoint", str(checkpoint),
                           *passed], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(args: argparse.Namespace) -> None:
    """One arm's figures as a JSON line; generation (which has no loss) only in the before and after arms."""
    import inference.cpu

    tuned, label_positions, _ = ARMS[args.arm]
    if not tuned:
        inference.cpu.SETTINGS = ()  # glibc's defaults: the engine's constructor applies nothing either
    inference.cpu.tune_allocator()
    figures = {"training": training_arm(label_positions, args)}
    if tuned == label_positions:
        figures["generation"] = generation_arm(args)
    print(json.dumps(figures))


def stages(tree: Path, root: Path, tiny_policy: str) -> dict:
    """The first-run path of ``tree`` in a fresh process with a Dask worker's environment, where these stages run."""
    env = {**start_environ(dask_worker=True), "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", STAGES_SCRIPT, str(root), tiny_policy], env=env, cwd=tree,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"first-run path of {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def stage_rows(args: argparse.Namespace, tmp: Path) -> list[str]:
    (base_sha, baseline), (sha, candidate) = tree_at(args.baseline, tmp / "baseline"), tree_at(args.candidate, tmp / "tree")
    lines = [
        "",
        ("First-run path, `world -> qa_seeds, tokenizer -> tiny_policy -> qa_filtered` through the runner, tiny "
         "profile, one process per row in a Dask worker's environment (one torch thread, Dask's 64 KiB trim "
         "threshold); variants reuse the candidate's data root (their upstream is cached). Per stage: wall s / CPU s, "
         "system share of the CPU time, minor faults. Loss: last step / mean of the last logged window. Kept: "
         "0 < pass count < k."),
        "",
        ("| tree | tiny_policy params | tiny_policy s | sys, faults | loss | qa_filtered s | sys, faults | "
         "pass-count histogram (0..k) | kept |"),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    runs = [(f"baseline {base_sha}", baseline, "data-baseline", "{}"), (sha, candidate, "data", "{}"),
            *((f"{sha}, variant", candidate, "data", variant) for variant in args.variant)]
    for name, tree, data, tiny_policy in runs:
        f = stages(tree, tmp / data, tiny_policy)
        print(name, json.dumps(f), flush=True)
        hist, policy, filtered = f["histogram"], f["tiny_policy"], f["qa_filtered"]
        lines.append(
            f"| {name} | {json.dumps(f['params'])} | {policy['wall']:.0f} / {policy['cpu']:.0f} | "
            f"{policy['sys_share']:.1%}, {policy['faults']:,} | {f['final_loss']:.3f} / {f['last_window']:.3f} | "
            f"{filtered['wall']:.0f} / {filtered['cpu']:.0f} | {filtered['sys_share']:.1%}, {filtered['faults']:,} | "
            f"{hist} | {sum(hist[1:-1])} of {sum(hist)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed training steps per round")
    parser.add_argument("--tokens", type=int, default=512, help="sequence length of the training batch")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary of the training model")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--answer-tokens", type=int, default=8, help="labelled tokens at the end of each row")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--new-tokens", type=int, default=64, help="generated tokens per sample")
    parser.add_argument("--generation-rounds", type=int, default=3, help="timed generate calls per batch size")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds of the two arms")
    parser.add_argument("--stages", action="store_true", help="also run the first-run path against --baseline")
    parser.add_argument("--baseline", default="HEAD~1", help="git revision of the baseline tree for --stages")
    parser.add_argument("--candidate", default="HEAD", help="git revision compared with it")
    parser.add_argument("--variant", action="append", default=[],
                        help='tiny_policy params for one more --stages row, e.g. \'{"steps": 200}\'')
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # the per-arm child process
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        child(args)
        return

    import torch

    from bench.bench_inference import build_checkpoint

    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp:
        checkpoint = build_checkpoint(Path(tmp))
        rounds: dict[str, list[dict]] = {arm: [] for arm in ARMS}
        for _ in range(args.repeats):
            for arm in ARMS:
                rounds[arm].append(run_arm(arm, args, checkpoint))
                print(arm, json.dumps(rounds[arm][-1]), flush=True)
        stage_lines = stage_rows(args, Path(tmp)) if args.stages else []

    train = {arm: max((r["training"] for r in rounds[arm]), key=lambda f: f["per_s"]) for arm in ARMS}
    gen = {(arm, b): max((r["generation"][str(b)] for r in rounds[arm]), key=lambda f: f["per_s"])
           for arm in ARMS if "generation" in rounds[arm][0] for b in GENERATION_BATCHES}
    machine = (f"{platform.machine()}, {os.cpu_count()} cores (shared, load {os.getloadavg()[0]:.1f}), "
               f"{platform.libc_ver()[0]} {platform.libc_ver()[1]}, torch {torch.__version__}, {args.threads} torch "
               f"thread(s), OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    lines = [
        "",
        "## CPU training and generation (bench_training.py)",
        "",
        (f"Machine: {machine}. before = glibc's default allocator + full-logits loss; before-dask = the same in the "
         "environment a Dask nanny gives its workers (MALLOC_TRIM_THRESHOLD_=65536, OMP_NUM_THREADS=1); after = "
         "inference/cpu.py's tune_allocator + label-position loss; allocator, label-loss = one change each. One "
         f"process per arm, arms alternating, best of {args.repeats} rounds."),
        "",
        (f"Training loop: tiny model (hidden 128, 4 layers), vocab {args.vocab:,}, batch {args.batch} x "
         f"{args.tokens} tokens, {args.answer_tokens} labelled per row, AdamW, {args.steps} timed steps."),
        "",
        "| arm | steps/s | steps per CPU s | system share of CPU time | minor faults/step |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {arm} | {f['per_s']:.2f} | {f['per_cpu_s']:.2f} | {f['sys_share']:.1%} | {f['faults_per_unit']:,.0f} |"
          for arm, f in train.items()),
        "",
        *(f"Training: after / {base} = {train['after']['per_s'] / train[base]['per_s']:.2f}x steps/s, "
          f"{train['after']['per_cpu_s'] / train[base]['per_cpu_s']:.2f}x steps per CPU s"
          for base in ("before", "before-dask")),
        "",
        (f"Generation: transformers engine, fresh tiny checkpoint (vocab 4096), {args.new_tokens} new tokens per "
         f"sample, temperature 1, {args.generation_rounds} timed calls."),
        "",
        "| arm | batch | new tokens/s | tokens per CPU s | system share of CPU time | minor faults/token |",
        "| --- | --- | --- | --- | --- | --- |",
        *(f"| {arm} | {b} | {f['per_s']:.0f} | {f['per_cpu_s']:.0f} | {f['sys_share']:.1%} | "
          f"{f['faults_per_unit']:,.1f} |" for (arm, b), f in gen.items()),
        "",
        *(f"Generation at batch {b}: after / {base} = {gen['after', b]['per_s'] / gen[base, b]['per_s']:.2f}x "
          f"tokens/s, {gen['after', b]['per_cpu_s'] / gen[base, b]['per_cpu_s']:.2f}x tokens per CPU s"
          for base in ("before", "before-dask") for b in GENERATION_BATCHES),
        *stage_lines,
    ]
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()
