"""The environment stages on in-memory inputs, gated by their contracts (the replaying checks included)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from data_contracts.gate import validate
from data_contracts.stage import REJECTED, FrameArtifact, StageError, get_stage
from envgen.domain_spec import DomainSpec, load_domain
from tasks.environments.domain_graphs import DomainGraphsParams, domain_graphs
from tasks.environments.environments import EnvironmentsParams, environments
from tasks.environments.eval_random_envs import EvalRandomParams

THREE = "airline,retail,telecom"


@pytest.fixture(scope="module")
def graphs() -> dict[str, pl.DataFrame]:
    return domain_graphs.run({}, DomainGraphsParams(domains=THREE), "p0")


@pytest.fixture(scope="module")
def envs(graphs: dict) -> dict[str, pl.DataFrame]:
    return environments.run({"domain_graphs": FrameArtifact(graphs)},
                            EnvironmentsParams(envs_per_domain=2, heldout=("telecom",)), "p0")


def gate(stage: str, outputs: dict) -> None:
    for name, frame in outputs.items():
        report = validate(stage, name, frame, get_stage(stage).outputs[name], "p0")
        assert report.passed, report.summary()


def test_domain_graphs(graphs: dict) -> None:
    frame = graphs["domains"]
    assert frame["domain"].to_list() == THREE.split(",")
    assert (frame["executability"] == 1.0).all() and (frame["n_tools"] >= 60).all()
    gate("domain_graphs", graphs)


def test_environments_pass_their_contracts(envs: dict) -> None:
    assert envs["environments"].height == 4 and envs["tasks"].height == 4
    assert set(envs["environments"]["domain"]) == {"airline", "retail"}  # telecom is held out
    assert (envs["environments"]["n_tools"] >= 20).all()
    gate("environments", envs)


def test_same_params_give_identical_frames(graphs: dict, envs: dict) -> None:
    again = environments.run({"domain_graphs": FrameArtifact(graphs)},
                             EnvironmentsParams(envs_per_domain=2, heldout=("telecom",)), "p0")
    for name in ("environments", "tasks"):
        assert again[name].equals(envs[name])


def test_a_tampered_database_fails_the_replay_check(envs: dict) -> None:
    """The contract's Python check really replays: a database whose golden row is gone must fail the gate."""
    from envgen.environment import domain_for
    from envgen.seeding import engine_from_bytes, sqlite_bytes

    row = envs["environments"].row(0, named=True)
    domain = domain_for(row)
    task = json.loads(row["task_json"])
    write = next(a for a in json.loads(task["golden_actions"]) if domain.tools[a["name"]].is_write)
    target = domain.spec.entity(domain.tools[write["name"]].entity)
    engine = engine_from_bytes(row["db"])
    with engine.begin() as conn:
        t = domain.tables[target.name]
        conn.execute(t.delete().where(t.c[target.key] == write["arguments"][target.key]))
    bad = envs["environments"].head(1).with_columns(pl.Series("db", [sqlite_bytes(engine)], dtype=pl.Binary))
    report = validate("environments", "environments", bad, get_stage("environments").outputs["environments"], "p0")
    assert not report.passed
    assert any("golden_replays" in f for f in report.summary()["failed"])


def _failed_checks(frame: pl.DataFrame) -> list[str]:
    report = validate("environments", "environments", frame, get_stage("environments").outputs["environments"], "p0")
    return report.summary()["failed"]


def test_a_record_linking_two_customers_is_quarantined(envs: dict) -> None:
    """One reservation paid with another user's card: the world's contract counts it and fails the gate."""
    from envgen.customers import owner_of
    from envgen.environment import domain_for
    from envgen.seeding import engine_from_bytes, sqlite_bytes

    row = envs["environments"].filter(pl.col("domain") == "airline").row(0, named=True)
    domain = domain_for(row)
    engine = engine_from_bytes(row["db"])
    with engine.begin() as conn:
        res, methods = (conn.execute(domain.tables[t].select()).mappings().all() for t in ("reservation",
                                                                                         "payment_method"))
        booked = {a["arguments"].get("reservation_id") for a in json.loads(json.loads(row["task_json"])["golden_actions"])}
        victim = next(r for r in res if r["reservation_id"] not in booked)
        other = next(m for m in methods if owner_of(domain, conn, "payment_method", m["payment_method_id"])
                     != victim["user_id"])
        t = domain.tables["reservation"]
        conn.execute(t.update().where(t.c.reservation_id == victim["reservation_id"])
                     .values(payment_method_id=other["payment_method_id"]))
    bad = envs["environments"].head(1).with_columns(pl.Series("db", [sqlite_bytes(engine)], dtype=pl.Binary))
    assert "one_owner_per_record" in " ".join(_failed_checks(bad))


def test_a_user_stating_an_internal_key_or_a_question_without_answer_is_quarantined(envs: dict) -> None:
    row = envs["environments"].row(0, named=True)
    task = json.loads(row["task_json"])
    key = next(v for a in json.loads(task["golden_actions"]) for v in a["arguments"].values()
               if str(v) not in task["description"] and str(v).isupper())
    told = {**task, "description": f"{task['description']} My booking id is {key}."}
    asked = {**task, "description": f"{task['description']} What is my balance?",
             "rubric": json.dumps({**json.loads(task["rubric"]), "required_outputs": []})}
    spec = load_domain(row["domain"])
    code = next(v for e in spec.entities for f in e.fields for v in f.values if "_" in v)
    coded = {**task, "description": f"{task['description']} It is {code}."}
    for changed, check in ((told, "users_state_what_people_know"), (coded, "users_state_what_people_know"),
                           (asked, "questions_have_answers")):
        bad = envs["environments"].head(1).with_columns(pl.Series("task_json", [json.dumps(changed)]))
        assert check in " ".join(_failed_checks(bad))


def test_eval_random_envs_spans_heldout_and_renamed_domains(graphs: dict) -> None:
    stage = get_stage("eval_random_envs")
    out = stage.run({"domain_graphs": FrameArtifact(graphs)},
                    EvalRandomParams(runs=2, tasks_per_run=3, min_domains=3), "p0")
    tasks = out["tasks"]
    assert tasks.group_by("run").len()["len"].to_list() == [3, 3]
    domains = set(tasks["domain"])
    assert "telecom" in domains and any(d.endswith("_r0") for d in domains) and any(d.endswith("_r1") for d in domains)
    envs = out["environments"]
    for row in envs.filter(pl.col("domain") != "telecom").iter_rows(named=True):
        original = {e.name for e in load_domain(row["domain"].rsplit("_r", 1)[0]).entities}
        renamed = {e.name for e in DomainSpec.model_validate_json(row["spec_json"]).entities}
        assert len(original & renamed) <= len(original) // 4  # a name without a synonym a person uses stays
    gate("eval_random_envs", out)


def test_bad_params_name_what_to_fix(graphs: dict) -> None:
    with pytest.raises(StageError, match="envs_per_domain"):
        get_stage("environments").parse_params({"envs_per_domain": 0})
    with pytest.raises(ValueError, match="not in the domain_graphs input"):
        environments.run({"domain_graphs": FrameArtifact(graphs)}, EnvironmentsParams(domains="atlantis"), "p0")
    assert REJECTED in get_stage("environments").outputs
