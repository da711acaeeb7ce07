"""The evaluation runner and its figures with scripted test-double engines of known skill: measured accuracy within
the interval of the configured one, matched-budget token accounting, votes, outages retried and never scored as
wrong answers, resume, breakdowns, robustness gaps, comparisons and the report."""

from __future__ import annotations

import json

import polars as pl
import pytest
from agent_fixtures import airline_env_and_task, golden_policy
from eval_fixtures import prompt_item, question

from inference.context import ContextConfig
from inference.evaluation.items import EvalItem
from inference.evaluation.report import budget_figure, length_figure, robustness_figure, write_report
from inference.evaluation.strategies import (
    Checkpoint,
    Context,
    EvalConfig,
    cap,
    is_infrastructure,
    run_items,
)
from inference.evaluation.summary import EVAL_SUMMARY, compare, summarize
from inference.http_engine import EngineError
from inference.metrics import pass_at_k
from inference.testing import BernoulliTestEngine, HeavyTestEngine, ScriptedEngine, byte_ids
from training.records import EVAL_ITEM

ALL = ("single", "self_consistency", "best_of_k", "heavy_thinking")


def run(engine, items, config, strategies=ALL, **kwargs):
    outcome = run_items(engine, items, Context("qa", "eval", config, frozenset(kwargs.pop("overlap", ())),
                                              strategies), **kwargs)
    return outcome, EVAL_ITEM.frame(outcome.rows)


def overall(summary: pl.DataFrame, strategy: str, k: int, metric: str = "accuracy") -> dict:
    return summary.filter((pl.col("strategy") == strategy) & (pl.col("k") == k) & (pl.col("metric") == metric)
                          & (pl.col("group") == "all")).row(0, named=True)


def test_measured_accuracy_matches_the_configured_one_within_its_interval():
    p, n_items = 0.3, 60
    engine = BernoulliTestEngine({question(i): (p, f"city{i}") for i in range(n_items)}, exact=False)
    _, items = run(engine, [prompt_item(i) for i in range(n_items)], EvalConfig(ks=(1, 2, 4, 8)), ())
    summary = summarize(items, (), (1, 2, 4, 8), resamples=500)
    avg = overall(summary, "sample", 8, "avg@k")
    assert avg["ci_lo"] <= p <= avg["ci_hi"] and avg["n"] == n_items
    for k in (1, 4):  # unbiased Pass@k of a Bernoulli(p) item is 1 - (1 - p)^k
        row = overall(summary, "sample", k, "pass@k")
        assert row["ci_lo"] <= 1 - (1 - p) ** k <= row["ci_hi"]
    EVAL_SUMMARY.frame(summary.to_dicts())  # the summary holds its record's columns exactly


def test_every_strategy_is_charged_the_tokens_it_generated():
    engine = HeavyTestEngine({question(i): (0.4, f"city{i}") for i in range(6)}, summary_skill=1.0)
    _, items = run(engine, [prompt_item(i) for i in range(6)], EvalConfig(ks=(1, 2, 4)))
    stage1 = {r.messages[-1]["content"]: r for r in engine.requests if r.sampling.n == 4}
    replay = HeavyTestEngine(engine.items)  # the same seeds give the same samples
    for item_id, rows in items.group_by("item_id"):
        by = {(r["strategy"], r["k"]): r for r in rows.iter_rows(named=True)}
        [samples] = replay.generate([stage1[question(int(item_id[0][1:]))]])
        per_sample = [len(byte_ids(c.text)) for c in samples]
        assert by[("sample", 4)]["tokens"] == sum(per_sample)
        assert by[("single", 1)]["tokens"] == per_sample[0]
        for k in (1, 2, 4):
            assert by[("self_consistency", k)]["tokens"] == by[("best_of_k", k)]["tokens"] == sum(per_sample[:k])
            heavy = by[("heavy_thinking", k)]
            assert heavy["tokens"] > sum(per_sample[:k]) and heavy["summary_prompt_tokens"] > 0
    summary = summarize(items, (), (1, 2, 4), resamples=200)
    matched = summary.filter(pl.col("metric") == "sc_at_budget")
    assert not matched.is_empty()  # Heavy Thinking's budgets fall inside self-consistency's curve
    for row in matched.iter_rows(named=True):
        assert overall(summary, "heavy_thinking", row["k"])["tokens"] == row["tokens"]


def test_known_skills_give_the_expected_ordering_of_strategies():
    """Trajectories right with p = 0.35 among three wrong answers, a summary that finds a right attempt 90% of the
    time: best-of-4 (the oracle) >= Heavy Thinking@4 > a single sample."""
    n = 80
    engine = HeavyTestEngine({question(i): (0.35, f"city{i}") for i in range(n)}, summary_skill=0.9)
    _, items = run(engine, [prompt_item(i) for i in range(n)], EvalConfig(ks=(1, 4)))
    summary = summarize(items, (), (1, 4), resamples=300)
    single, heavy, oracle = (overall(summary, s, k)["estimate"] for s, k in
                             (("single", 1), ("heavy_thinking", 4), ("best_of_k", 4)))
    assert oracle >= heavy > single
    assert abs(oracle - (1 - 0.65 ** 4)) < 0.15


def test_self_consistency_takes_the_vote_and_best_of_k_the_verifier():
    """Attempt 0 is right, samples 1 and 2 agree on a wrong answer."""
    engine = ScriptedEngine(lambda r, i: "\\boxed{city0}" if i == 0 else "\\boxed{Paris}")
    _, items = run(engine, [prompt_item(0)], EvalConfig(ks=(1, 3)), ("single", "self_consistency", "best_of_k"))
    by = {(r["strategy"], r["k"]): r for r in items.iter_rows(named=True)}
    assert by[("single", 1)]["score"] == 1.0 and by[("best_of_k", 3)]["score"] == 1.0
    assert by[("self_consistency", 3)]["score"] == 0.0 and by[("self_consistency", 3)]["answer"] == "paris"
    assert by[("self_consistency", 1)]["score"] == 1.0
    assert by[("sample", 3)]["score"] == pytest.approx(1 / 3) and by[("sample", 3)]["n_correct"] == 1


class Flaky:
    """Fails the first ``failures`` calls with ``error``, then answers as ``engine``."""

    def __init__(self, engine, failures: int, error: Exception) -> None:
        self.engine, self.failures, self.error, self.calls = engine, failures, error, 0
        self.policy_version = 0

    def generate(self, requests):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.engine.generate(requests)

    def close(self) -> None:
        pass


def right_engine(n: int) -> BernoulliTestEngine:
    return BernoulliTestEngine({question(i): (1.0, f"city{i}") for i in range(n)})


def test_outages_are_never_scored_as_wrong_answers():
    """The engine retries its own transient failures (the HTTP engine's tests); what still fails leaves its batch
    unscored, and the batches after it are served."""
    flaky = Flaky(right_engine(4), failures=1, error=EngineError("http://x/v1: ConnectError after 6 attempts"))
    outcome, items = run(flaky, [prompt_item(i) for i in range(4)], EvalConfig(ks=(1, 2), batch_size=2), ())
    assert set(outcome.infra_errors) == {"q0", "q1"} and flaky.calls == 2
    assert items.filter(pl.col("status") == "scored")["score"].to_list() == [1.0] * 2

    down = Flaky(right_engine(4), failures=10**6, error=OSError("connection refused"))
    outcome, items = run(down, [prompt_item(i) for i in range(4)], EvalConfig(ks=(1, 2)), ())
    assert set(outcome.infra_errors) == {"q0", "q1", "q2", "q3"}
    assert items["status"].to_list() == ["infra_error"] * 4 and items["score"].null_count() == 4
    summary = summarize(items, (), (1, 2), resamples=100)
    assert overall(summary, "sample", 2, "avg@k")["n"] == 0  # nothing scored, nothing counted as wrong
    assert overall(summary, "sample", 2, "avg@k")["n_infra_errors"] == 4


def test_a_model_error_is_not_retried():
    broken = Flaky(right_engine(1), failures=1, error=ValueError("bad sampling settings"))
    with pytest.raises(ValueError, match="bad sampling"):
        run(broken, [prompt_item(0)], EvalConfig(ks=(1,)), ())
    assert broken.calls == 1


@pytest.mark.parametrize(("error", "infrastructure"), [
    (EngineError("http://h/v1/chat/completions: HTTP 503 after 6 attempts: busy"), True),
    (EngineError("http://h/v1/chat/completions: HTTP 429 after 6 attempts: slow down"), True),
    (EngineError("http://h/v1/chat/completions: ReadTimeout after 6 attempts: "), True),
    (EngineError("http://h/v1/chat/completions: HTTP 400 after 1 attempts: prompt too long"), False),
    (EngineError("http://h/v1: the response carries no logprobs"), False),
    (ConnectionRefusedError(), True), (TimeoutError(), True), (ValueError("x"), False),
])
def test_what_counts_as_an_infrastructure_error(error, infrastructure):
    assert is_infrastructure(error) is infrastructure



def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    items = [prompt_item(i) for i in range(6)]
    config = EvalConfig(ks=(1, 2), batch_size=2)
    _, expected = run(right_engine(6), items, config, ())

    class DownAfter(Flaky):
        def generate(self, requests):
            self.calls += 1
            if self.calls > 1:
                raise OSError("endpoint went away")
            return self.engine.generate(requests)

    checkpoint = Checkpoint(tmp_path / "ckpt")
    first, _ = run(DownAfter(right_engine(6), 0, OSError()), items, config, (), checkpoint=checkpoint)
    assert len(first.infra_errors) == 4 and first.resumed == 0
    engine = right_engine(6)
    second, resumed = run(engine, items, config, (), checkpoint=checkpoint)
    assert second.resumed == 2 and not second.infra_errors
    assert sorted(r.messages[-1]["content"] for r in engine.requests) == [question(i) for i in range(2, 6)]
    assert resumed.sort("item_id", "strategy", "k").equals(expected.sort("item_id", "strategy", "k"))


def test_a_prompt_past_the_context_window_fails_without_a_call():
    engine = ScriptedEngine(lambda r, i: "\\boxed{city0}", max_positions=64)
    long_item = EvalItem(id="long", kind="prompt", source="qa", messages=[{"role": "user", "content": "x" * 200}],
                         reward="two_way", answer="city0")
    _, items = run(engine, [long_item, prompt_item(0)], EvalConfig(ks=(1,), sampling={"max_tokens": 8}), ())
    by = {r["item_id"]: r for r in items.iter_rows(named=True)}
    assert by["long"]["score"] == 0.0 and json.loads(by["long"]["stop_reasons"]) == {"context_overflow": 1}
    assert len(engine.requests) == 1


def test_overlapping_items_are_flagged_and_left_out_of_the_figures():
    _, items = run(right_engine(3), [prompt_item(i) for i in range(3)], EvalConfig(ks=(1,)), ("single",),
                   overlap={"seed1"})
    assert items.filter(pl.col("overlap"))["item_id"].unique().to_list() == ["q1"]
    row = overall(summarize(items, (), (1,), resamples=100), "single", 1)
    assert row["n"] == 2 and row["n_overlap"] == 1


def test_cap_keeps_twins_with_their_clean_task_and_takes_every_run():
    def item(i, run, clean=None):
        return EvalItem(id=f"t{i}", kind="env", source="d", attributes={"run": run, "clean_task_id": clean})

    items = [item(0, 0), item(1, 0), item(2, 1), item(3, 1), item(4, 0, "t0"), item(5, 0, "t0")]
    assert [i.id for i in cap(items, 4)] == ["t0", "t2", "t4", "t5"]  # t0's group is whole, run 1 counts
    assert [i.id for i in cap(items, 3)] == ["t0", "t4", "t5"]
    assert cap(items, None) == items


def test_episodes_under_every_strategy_and_context():
    env, task = airline_env_and_task()
    item = EvalItem(id=task["task_id"], kind="env", source="airline", env=env, task=task,
                    attributes={"domain": "airline", "run": 0, "difficulty": "3 calls", "noise_level": 0},
                    known_as=(task["task_id"],))
    config = EvalConfig(ks=(1, 2), max_turns=12, contexts={"none": ContextConfig(), "discard": ContextConfig(
        strategy="discard", discard_after_turns=1, max_resets=20)})
    _, items = run(ScriptedEngine(golden_policy), [item], config, (*ALL, "context"))
    by = {(r["strategy"], r["k"]): r for r in items.iter_rows(named=True)}
    assert by[("sample", 2)]["score"] == 1.0 and by[("single", 1)]["score"] == 1.0
    assert by[("self_consistency", 2)]["score"] == by[("best_of_k", 2)]["score"] == 1.0
    assert by[("heavy_thinking", 2)]["score"] == 1.0 and by[("heavy_thinking", 2)]["tokens"] > by[("sample", 2)]["tokens"]
    assert by[("context:none", 2)]["score"] == 1.0
    # Reset after every turn: the history loses the call, so the policy repeats it until the turn limit (12 turns
    # against the golden's 4 calls and answer).
    discard, none = by[("context:discard", 2)], by[("context:none", 2)]
    assert json.loads(discard["stop_reasons"]) == {"max_turns": 2} and discard["tokens"] > 3 * none["tokens"]
    assert json.loads(by[("sample", 2)]["stop_reasons"]) == {"done": 2}


def test_episodes_without_strategies_are_the_plain_samples():
    env, task = airline_env_and_task()
    item = EvalItem(id=task["task_id"], kind="env", source="airline", env=env, task=task)
    _, items = run(ScriptedEngine(golden_policy), [item], EvalConfig(ks=(1, 2), max_turns=4), ())
    assert items.select("strategy", "k", "score", "n_samples").rows() == [("sample", 2, 1.0, 2)]


def rows(specs):
    base = {"suite": "noise", "variant": "default", "source": "d", "domain": "d", "difficulty": None, "length": None,
            "run": 0, "strategy": "sample", "k": 4, "n_samples": 4, "tokens": 40, "summary_prompt_tokens": 0,
            "answer": None, "failures": "{}", "stop_reasons": "{}", "status": "scored", "error": None,
            "overlap": False}
    return EVAL_ITEM.frame([{**base, **spec, "n_correct": round(spec["score"] * 4)} for spec in specs])


def test_the_robustness_gap_pairs_each_twin_with_its_clean_task():
    items = rows([
        {"item_id": "a", "score": 1.0, "noise_level": 0, "noise_types": [], "clean_task_id": None},
        {"item_id": "a~1", "score": 0.5, "noise_level": 1, "noise_types": ["paraphrase"], "clean_task_id": "a"},
        {"item_id": "a~4", "score": 0.0, "noise_level": 4, "noise_types": ["paraphrase", "truncation"],
         "clean_task_id": "a"},
        {"item_id": "b", "score": 0.5, "noise_level": 0, "noise_types": [], "clean_task_id": None},
        {"item_id": "b~4", "score": 0.5, "noise_level": 4, "noise_types": ["truncation"], "clean_task_id": "b"},
    ])
    summary = summarize(items, ("noise_level", "noise_type"), (1, 4), resamples=100)
    gap = {(r["group"], r["value"]): r["estimate"] for r in summary.filter(pl.col("metric") == "gap").iter_rows(named=True)}
    assert gap[("noise_level", "1")] == 0.5 and gap[("noise_level", "4")] == 0.5  # (1.0 + 0.0) / 2
    assert gap[("noise_type", "paraphrase")] == 0.75 and gap[("noise_type", "truncation")] == 0.5
    assert gap[("all", "all")] == pytest.approx(0.5)
    level_avg = summary.filter((pl.col("metric") == "avg@k") & (pl.col("group") == "noise_level"))
    assert dict(level_avg.select("value", "estimate").iter_rows()) == {"0": 0.75, "1": 0.5, "4": 0.25}
    pass_rows = summary.filter((pl.col("metric") == "pass@k") & (pl.col("group") == "all") & (pl.col("k") == 1))
    assert pass_rows["estimate"][0] == pytest.approx(sum(pass_at_k(4, round(s * 4), 1) for s in
                                                         (1.0, 0.5, 0.0, 0.5, 0.5)) / 5)


def test_compare_pairs_items_of_both_models():
    a = rows([{"item_id": f"i{i}", "score": 0.0, "noise_level": 0, "noise_types": [], "clean_task_id": None}
              for i in range(5)])
    b = a.with_columns(pl.when(pl.col("item_id").is_in(["i0", "i1"])).then(1.0).otherwise(0.0).alias("score"))
    [row] = compare(a, b, resamples=200).to_dicts()
    assert row["n"] == 5 and row["difference"] == pytest.approx(0.4) and row["ci_lo"] <= 0.4 <= row["ci_hi"]


def test_the_report_draws_budget_length_and_robustness_figures(tmp_path):
    engine = HeavyTestEngine({question(i): (0.4, f"city{i}") for i in range(8)})
    _, items = run(engine, [prompt_item(i, length=900 + 300 * (i % 2)) for i in range(8)], EvalConfig(ks=(1, 2, 4)))
    summary = summarize(items, ("length",), (1, 2, 4), resamples=100)
    budget = budget_figure({"m": summary}, "qa", tmp_path / "budget.png")
    length = length_figure({"m": items}, "qa", tmp_path / "length.png")
    gaps = rows([{"item_id": "a", "score": 1.0, "noise_level": 0, "noise_types": [], "clean_task_id": None},
                 {"item_id": "a~1", "score": 0.0, "noise_level": 1, "noise_types": ["x"], "clean_task_id": "a"}])
    robustness = robustness_figure({"m": summarize(gaps, ("noise_level", "noise_type"), (1,), resamples=50)},
                                   tmp_path / "robust.png")
    assert all(p is not None and p.stat().st_size > 1000 for p in (budget, length, robustness))
    assert robustness_figure({"m": summary}, tmp_path / "none.png") is None  # no gaps, no figure
    page = write_report([{"heading": "qa", "text": "t", "figures": [budget], "tables": [summary]}], "report",
                        tmp_path / "r.html").read_text()
    assert page.count("<img") == 1 and "heavy_thinking" in page and "sc_at_budget" in page


def test_evaluation_offers_a_task_the_tools_training_and_rl_offer_it():
    from agent_fixtures import airline_env_and_task

    from envgen.small import task_view
    from inference.evaluation.items import EvalItem
    from inference.evaluation.strategies import environment_factory

    env, task = airline_env_and_task()
    twin = {**task, "task_id": "twin", "clean_task_id": task["task_id"]}
    offered = [environment_factory(EvalItem(t["task_id"], "task", "airline", env=env, task=t), 1)().schemas
               for t in (task, twin)]
    assert offered[0] == offered[1]  # the twin is offered its clean task's tools
    assert [s["function"]["name"] for s in offered[0]] == task_view(env, task, 1)["tool_names"]


class WindowedHeavyEngine(HeavyTestEngine):
    """The Heavy Thinking double with a context window of 4000 characters (one token each)."""

    max_positions = 4000

    def render(self, request) -> list[int]:
        return [0] * sum(len(str(m.get("content", ""))) for m in request.messages)


def test_matched_budget_compares_strategies_on_the_same_items_with_a_paired_interval():
    """An item whose prompt overflows scores 0 under every strategy, Heavy Thinking included, so no strategy is
    averaged over a subset; the summary stage's prompt tokens make a second budget; each budget's difference is
    paired per item."""
    engine = WindowedHeavyEngine({question(i): (0.4, f"city{i}") for i in range(8)}, summary_skill=1.0)
    long_item = EvalItem(id="long", kind="prompt", source="qa", messages=[{"role": "user", "content": "x" * 5000}],
                         reward="two_way", answer="city0")
    ks = (1, 2, 4)
    _, items = run(engine, [long_item, *(prompt_item(i) for i in range(8))], EvalConfig(ks=ks))
    long_rows = items.filter(pl.col("item_id") == "long")
    assert set(long_rows.filter(pl.col("strategy") == "heavy_thinking")["k"]) == set(ks)
    assert (long_rows["score"] == 0.0).all()
    counts = items.filter(pl.col("strategy") != "sample").group_by("strategy", "k").len()["len"]
    assert set(counts) == {9}  # every strategy at every width over the same nine items
    summary = summarize(items, (), ks, resamples=200)
    paired = summary.filter(pl.col("metric").str.starts_with("ht_minus_sc"))
    assert not paired.is_empty() and (paired["n"] == 9).all()
    assert ((paired["ci_lo"] <= paired["estimate"]) & (paired["estimate"] <= paired["ci_hi"])).all()
    # The read budget adds the summary stage's prompt (the k answers it read) to the generated tokens; where it lies
    # beyond self-consistency's widest measured width there is no matched figure, rather than an extrapolated one.
    widest = overall(summary, "self_consistency", max(ks))["tokens"]
    for k in ks[1:]:
        heavy = items.filter((pl.col("strategy") == "heavy_thinking") & (pl.col("k") == k))
        budget = overall(summary, "heavy_thinking", k)["tokens"] + heavy["summary_prompt_tokens"].mean()
        read = summary.filter((pl.col("metric") == "sc_at_read_budget") & (pl.col("k") == k))
        assert budget > overall(summary, "heavy_thinking", k)["tokens"]
        assert (read.height == 1 and read["tokens"][0] == pytest.approx(budget)) or (read.is_empty() and budget > widest)
    EVAL_SUMMARY.frame(summary.to_dicts())
