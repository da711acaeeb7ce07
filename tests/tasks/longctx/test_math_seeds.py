"""Math seeds: answers re-derived here by other means (numpy, brute force, eval over Fractions), the multiple-choice
format, the DAPO/MATH JSONL loader and its errors."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import QA_FIXTURES

from data_contracts.gate import validate
from envgen.rewards import REWARDS
from tasks.longctx.math_seeds import LETTERS, load_math_jsonl, math_seeds
from tasks.readers import InputFileError

FIXTURES = QA_FIXTURES


def run(**params) -> dict[str, pl.DataFrame]:
    return math_seeds.run({}, math_seeds.parse_params(params), "p0")


def _eval_fractions(expression: str) -> Fraction:
    """Python's own evaluator with every integer literal made a Fraction."""
    text = re.sub(r"\d+", lambda m: f"F({m.group(0)})", expression.replace("×", "*").replace("÷", "/"))
    return eval(text, {"__builtins__": {}, "F": Fraction})


def _solve_system(question: str) -> Fraction:
    equations, target = re.match(r"Solve the system (.*)\. What is the value of (.*)\?", question).groups()
    names = sorted(set(re.findall(r"[xyz]", equations)))

    def coefficients(expr: str) -> list[float]:
        terms = dict.fromkeys(names, 0.0)
        for sign, number, name in re.findall(r"([+-]?)\s*(\d*)([xyz])", expr.replace(" ", "")):
            terms[name] = (-1 if sign == "-" else 1) * (int(number) if number else 1)
        return [terms[n] for n in names]

    rows = [eq.split(" = ") for eq in equations.split("; ")]
    solution = np.linalg.solve([coefficients(lhs) for lhs, _ in rows], [float(rhs) for _, rhs in rows])
    return Fraction(round(float(np.dot(coefficients(target), solution)), 6)).limit_denominator(1000)


def _modular(question: str) -> Fraction:
    if m := re.match(r"What is the remainder when (\d+)\^\{(\d+)\} is divided by (\d+)\?", question):
        a, b, n = map(int, m.groups())
        return Fraction(pow(a, b, n))
    a, c, n = map(int, re.match(r".*such that (\d+)x ≡ (\d+) \(mod (\d+)\)", question).groups())
    return Fraction(min(x for x in range(1, n) if (a * x) % n == c % n))


def rederive(row: dict) -> Fraction:
    question, source = row["question"], row["source"]
    if source == "synthetic:arithmetic":
        return _eval_fractions(re.match(r"Compute the exact value of (.*)\. Give", question).group(1))
    return _solve_system(question) if source == "synthetic:linear_system" else _modular(question)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_hard_answers_rederived_independently(seed: int) -> None:
    problems = run(seed=seed, n_hard=30, n_easy=0)["problems"]
    assert set(problems["source"]) == {"synthetic:arithmetic", "synthetic:linear_system", "synthetic:modular"}
    for row in problems.iter_rows(named=True):
        assert Fraction(row["answer"]) == rederive(row), row["question"]


def test_easy_choices_hold_the_answer_under_its_letter() -> None:
    problems = run(n_hard=0, n_easy=40)["problems"]
    for row in problems.iter_rows(named=True):
        expression = re.match(r"What is (.*)\?\n", row["question"]).group(1)
        assert len(row["choices"]) == 4 == len(set(row["choices"]))
        assert Fraction(row["choices"][LETTERS.index(row["answer"])]) == _eval_fractions(expression)
        assert f"{row['answer']}) {row['choices'][LETTERS.index(row['answer'])]}" in row["question"]


def test_deterministic_contracted_and_scored_by_its_reward() -> None:
    out = run(n_hard=12, n_easy=12)
    assert out["problems"].equals(run(n_hard=12, n_easy=12)["problems"])
    for name, frame in out.items():
        assert validate("math_seeds", name, frame, math_seeds.outputs[name], "p0").passed
    rows = out["problems"].to_dicts()
    for row in rows:
        reward = REWARDS[row["reward_fn"]]
        assert reward([f"\\boxed{{{row['answer']}}}"], answer=[row["answer"]]) == [1.0]
        assert reward(["\\boxed{999999}"], answer=[row["answer"]]) == [0.0]


def test_loader_reads_dapo_and_math_formats() -> None:
    dapo = load_math_jsonl(FIXTURES / "dapo.jsonl")
    assert [(r["line"], r["answer"]) for r in dapo] == [(1, "10"), (2, "9")]
    assert dapo[1]["question"] == "How many positive divisors does 36 have?"
    math = load_math_jsonl(FIXTURES / "math.jsonl")
    assert [r["answer"] for r in math] == ["\\frac{3}{4}", "56", "triangle", "B"]
    assert math[3]["choices"] == ["3", "4", "5", "22"]


def test_stage_with_local_files() -> None:
    out = run(n_hard=5, n_easy=5, hard_file=str(FIXTURES / "dapo.jsonl"), easy_file=str(FIXTURES / "math.jsonl"))
    problems = out["problems"]
    assert problems.filter(pl.col("kind") == "hard")["answer"].to_list() == ["10", "9"]
    easy = problems.filter(pl.col("kind") == "easy_mc")
    assert easy.height == 3 and easy["answer"].to_list()[-1] == "B"
    assert out["rejected"]["reason"].to_list() == ["no choices and a non-numeric answer: cannot make four choices"]
    fraction_row = easy.row(0, named=True)
    assert Fraction(fraction_row["choices"][LETTERS.index(fraction_row["answer"])]) == Fraction(3, 4)


@pytest.mark.parametrize(("line", "message"), [
    ('{"problem": "x"', "line 2: invalid JSON"),
    ('{"problem": "What?", "solution": "no box"}', r"line 2: no answer"),
    ('{"solution": "\\\\boxed{1}"}', "line 2: no question"),
    ("[1, 2]", "line 2: expected a JSON object"),
])
def test_loader_errors_name_file_and_line(line: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "1+1?", "answer": "2"}\n' + line + "\n")
    with pytest.raises(InputFileError, match=rf"bad.jsonl, {message}"):
        load_math_jsonl(path)


@pytest.mark.parametrize("field", ["hard_file", "easy_file"])
@pytest.mark.parametrize("text", ["", "\n  \n\n"])
def test_an_empty_file_is_an_error_naming_it(field: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(InputFileError, match=r"empty.jsonl.*no records"):
        run(n_hard=5, n_easy=5, **{field: str(path)})


def test_an_easy_file_whose_records_are_all_rejected_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "words.jsonl"
    path.write_text('{"problem": "Which shape has three sides?", "answer": "triangle"}\n'
                    '{"question": "Pick one", "choices": ["x", "y"], "answer": "Q"}\n')
    with pytest.raises(InputFileError, match="words.jsonl: all 2 records were rejected"):
        run(n_hard=0, n_easy=5, easy_file=str(path))
