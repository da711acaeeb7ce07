"""Short-context math with verifiable answers, the capability-preserving slice of the RL mixture.

LoongRL mixes 2,500 hard open-ended problems (DAPO) and 2,500 easy multiple-choice problems (MATH) into RL "to
preserve general short-context reasoning capabilities" (LoongRL report, "The data mixture", Table 1). Without those
datasets on disk, hard problems are synthesized (multi-step arithmetic, linear systems, modular arithmetic) with
answers that are recomputed by an independent method before a problem is kept; easy ones are four-choice
arithmetic with a letter answer. Local DAPO/MATH-style JSONL files replace either kind.
"""

from __future__ import annotations

import ast
import operator
import random
from collections import Counter
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field

from data_contracts.schemas import in_set, min_length
from data_contracts.stage import REJECTED, Params, seed_for, stage
from envgen.rewards import extract_boxed, parse_number
from tasks.longctx.records import MATH_PROBLEM
from tasks.readers import InputFileError, all_rejected, iter_jsonl
from tasks.records import ITEM_REJECTED

STAGE = "math_seeds"
LETTERS = "ABCD"
PROBLEMS_CONTRACT = MATH_PROBLEM.contract(expectations=(
    in_set("kind", ["hard", "easy_mc"]), in_set("reward_fn", ["math", "choice"]), min_length("answer", 1)))
Problem = tuple[str, Fraction, Callable[[], Fraction]]  # question, answer, independent recomputation


def fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


# --------------------------------------------------------------------------- hard generators

_OPS: dict[str, Callable[[Fraction, Fraction], Fraction]] = {"+": operator.add, "-": operator.sub,
                                                              "*": operator.mul, "/": operator.truediv}
_AST_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def eval_expression(text: str) -> Fraction:
    """Exact value of an arithmetic expression text (integers, + - * /, parentheses), parsed with ``ast``."""

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
            return _AST_OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression element {ast.dump(node)}")

    return walk(ast.parse(text.replace("×", "*").replace("÷", "/"), mode="eval"))


def arithmetic(rng: random.Random) -> Problem:
    """A nested expression of 4-6 operations; the answer is computed on the tree, rechecked by parsing the text."""

    def build(depth: int, top: bool = False) -> tuple[str, Fraction]:
        if depth == 0 or (not top and rng.random() < 0.2):
            n = rng.randint(2, 30)
            return str(n), Fraction(n)
        op = rng.choice("+-*/")
        (lt, lv), (rt, rv) = build(depth - 1), build(depth - 1)
        if op == "/" and rv == 0:
            op = "+"
        return f"({lt} {op} {rt})", _OPS[op](lv, rv)

    text, value = build(3, top=True)
    shown = text[1:-1].replace("*", "×").replace("/", "÷")  # the outer parentheses wrap the whole expression
    question = (f"Compute the exact value of {shown}. Give the answer as an integer or a fraction in lowest "
                "terms.")
    return question, value, lambda: eval_expression(shown)


def linear_system(rng: random.Random) -> Problem:
    """A 2x2 or 3x3 integer system built from a chosen integer solution; rechecked by Gaussian elimination."""
    names = "xyz"[: rng.choice((2, 3))]
    n = len(names)
    while True:
        matrix = [[rng.randint(-6, 6) for _ in range(n)] for _ in range(n)]
        if _solve(matrix, [Fraction(0)] * n) is not None:
            break
    solution = [rng.randint(-9, 9) for _ in range(n)]
    rhs = [sum(a * s for a, s in zip(row, solution, strict=True)) for row in matrix]
    weights = [rng.choice((-2, -1, 1, 2, 3)) for _ in range(n)]
    lines = [_equation(row, names, b) for row, b in zip(matrix, rhs, strict=True)]
    target = _linear(weights, names)
    question = f"Solve the system {'; '.join(lines)}. What is the value of {target}?"

    def recheck() -> Fraction:
        solved = _solve(matrix, [Fraction(b) for b in rhs])
        return sum((w * v for w, v in zip(weights, solved, strict=True)), Fraction(0))

    return question, Fraction(sum(w * s for w, s in zip(weights, solution, strict=True))), recheck


def _linear(coefficients: list[int], names: str) -> str:
    terms = [f"{'-' if c < 0 else '+'} {abs(c) if abs(c) != 1 else ''}{v}" for c, v in zip(coefficients, names,
                                                                                            strict=True) if c]
    text = " ".join(terms) or "0"
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _equation(row: list[int], names: str, rhs: int) -> str:
    return f"{_linear(row, names)} = {rhs}"


def _solve(matrix: list[list[int]], rhs: list[Fraction]) -> list[Fraction] | None:
    """Gauss-Jordan over the rationals; None for a singular matrix."""
    n = len(matrix)
    rows = [[Fraction(a) for a in row] + [b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        rows[col] = [v / rows[col][col] for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col]:
                rows[r] = [a - rows[r][col] * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [row[-1] for row in rows]


def modular(rng: random.Random) -> Problem:
    """A power residue (rechecked by repeated multiplication) or a linear congruence (rechecked by search)."""
    m = rng.choice([p for p in range(11, 98) if all(p % d for d in range(2, p))])
    if rng.random() < 0.5:
        a, b = rng.randint(2, 60), rng.randint(50, 900)
        question = f"What is the remainder when {a}^{{{b}}} is divided by {m}?"

        def by_multiplication() -> Fraction:
            value = 1
            for _ in range(b):
                value = value * a % m
            return Fraction(value)

        return question, Fraction(pow(a, b, m)), by_multiplication
    a, c = rng.randint(2, m - 1), rng.randint(1, m - 1)
    question = f"Find the smallest positive integer x such that {a}x ≡ {c} (mod {m})."
    answer = Fraction(pow(a, -1, m) * c % m)
    return question, answer, lambda: Fraction(next(x for x in range(1, m) if (a * x - c) % m == 0))


HARD: dict[str, Callable[[random.Random], Problem]] = {"arithmetic": arithmetic, "linear_system": linear_system,
                                                        "modular": modular}


# --------------------------------------------------------------------------- easy multiple choice


def choices_for(value: Fraction, rng: random.Random) -> list[Fraction]:
    """The answer and three plausible wrong ones (off by one, off by ten, sign or doubling slips)."""
    wrong = [value + 1, value - 1, value + 10, value - 10, 2 * value, -value, value + 2]
    distinct = list(dict.fromkeys(w for w in wrong if w != value))
    options = [value, *rng.sample(distinct, 3)]
    rng.shuffle(options)
    return options


def multiple_choice(question: str, value: Fraction, rng: random.Random) -> tuple[str, str, list[str]]:
    options = [fmt(v) for v in choices_for(value, rng)]
    listed = "\n".join(f"{letter}) {text}" for letter, text in zip(LETTERS, options, strict=True))
    text = f"{question}\n{listed}\nAnswer with the letter of the correct choice."
    return text, LETTERS[options.index(fmt(value))], options


def easy_arithmetic(rng: random.Random) -> Problem:
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 12)
    shown = rng.choice((f"{a} + {b} × {c}", f"({a} + {b}) × {c}", f"{a} × {c} - {b}", f"{a * c} ÷ {c} + {b}"))
    return f"What is {shown}?", eval_expression(shown), lambda: eval_expression(shown)


# --------------------------------------------------------------------------- local JSONL (DAPO / MATH style)


def _text_field(record: Mapping[str, Any]) -> str | None:
    for key in ("problem", "question", "prompt"):
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list):  # DAPO: prompt is chat messages
            users = [m.get("content", "") for m in value if isinstance(m, dict) and m.get("role") == "user"]
            if users and users[-1].strip():
                return users[-1].strip()
    return None


def _answer_field(record: Mapping[str, Any]) -> str | None:
    if isinstance(record.get("answer"), (str, int, float)) and str(record["answer"]).strip():
        return str(record["answer"]).strip()
    if isinstance(record.get("solution"), str) and (boxed := extract_boxed(record["solution"])):
        return boxed.strip()
    truth = (record.get("reward_model") or {}).get("ground_truth") if isinstance(record.get("reward_model"), dict) \
        else None
    return str(truth).strip() if truth not in (None, "") else None


def load_math_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """``[{line, question, answer, choices}]`` from a DAPO/MATH-style JSONL file: the question from ``problem``,
    ``question`` or ``prompt`` (text or chat messages), the answer from ``answer``, the last ``\\boxed{}`` of
    ``solution``, or ``reward_model.ground_truth``; optional ``choices``. Errors name the file and line; a file
    without a record is one."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, None, "no such math JSONL file")
    rows = []
    for line, record in iter_jsonl(path):
        if not isinstance(record, dict):
            raise InputFileError(path, line, f"expected a JSON object, got {type(record).__name__}")
        question, answer = _text_field(record), _answer_field(record)
        if question is None:
            raise InputFileError(path, line, "no question: expected a non-empty 'problem', 'question' or 'prompt'")
        if answer is None:
            raise InputFileError(path, line, "no answer: expected 'answer', a \\boxed{} in 'solution', or "
                                            "reward_model.ground_truth")
        choices = record.get("choices") or record.get("options")
        rows.append({"line": line, "question": question, "answer": answer,
                     "choices": [str(c) for c in choices] if isinstance(choices, list) else None})
    return rows


# --------------------------------------------------------------------------- the stage


class MathParams(Params):
    seed: int = Field(0, description="generator seed")
    n_hard: int = Field(256, ge=0, description="hard open-ended problems (LoongRL: 2,500 from DAPO)")
    n_easy: int = Field(256, ge=0, description="easy four-choice problems (LoongRL: 2,500 from MATH)")
    hard_file: str | None = Field(None, description="local DAPO/MATH-style JSONL for the hard problems "
                                                    "(default: synthesized)")
    easy_file: str | None = Field(None, description="local JSONL for the easy problems; records without choices "
                                                    "get four numeric choices when the answer is a number")

    def local_inputs(self) -> list[str]:
        return [path for path in (self.hard_file, self.easy_file) if path]


def _hard_rows(p: MathParams, partition: str) -> tuple[list[dict], list[dict]]:
    rows, rejected, kinds = [], [], sorted(HARD)
    if p.hard_file:
        for rec in load_math_jsonl(p.hard_file)[: p.n_hard]:
            rows.append({"id": f"math:{Path(p.hard_file).stem}:{rec['line']}", "kind": "hard",
                         "question": rec["question"], "answer": rec["answer"], "choices": [],
                         "source": f"file:{Path(p.hard_file).name}", "reward_fn": "math"})
        return rows, rejected
    for i in range(p.n_hard):
        rng = random.Random(seed_for(p.seed, STAGE, f"{partition}/hard", i))
        kind = kinds[i % len(kinds)]
        question, value, recheck = HARD[kind](rng)
        row_id = f"math:hard:{partition}:{i}"
        if recheck() != value:  # an independent recomputation disagrees: never ship an unverified answer
            rejected.append({"id": row_id, "reason": f"{kind}: answer {fmt(value)} failed its recomputation"})
            continue
        rows.append({"id": row_id, "kind": "hard", "question": question, "answer": fmt(value), "choices": [],
                     "source": f"synthetic:{kind}", "reward_fn": "math"})
    return rows, rejected


def _easy_rows(p: MathParams, partition: str) -> tuple[list[dict], list[dict]]:
    rows, rejected = [], []
    if p.easy_file:
        name = Path(p.easy_file)
        for i, rec in enumerate(load_math_jsonl(name)[: p.n_easy]):
            rng = random.Random(seed_for(p.seed, STAGE, f"{partition}/easy-file", i))
            row_id = f"math:{name.stem}:{rec['line']}"
            if rec["choices"] and len(rec["choices"]) <= len(LETTERS):
                letter = rec["answer"].strip("() .").upper()
                listed = "\n".join(f"{ch}) {c}" for ch, c in zip(LETTERS, rec["choices"], strict=False))
                question = f"{rec['question']}\n{listed}\nAnswer with the letter of the correct choice."
                choices = rec["choices"]
                if letter not in LETTERS[: len(choices)]:
                    rejected.append({"id": row_id, "reason": f"answer {rec['answer']!r} is not a choice letter"})
                    continue
            elif (value := parse_number(rec["answer"])) is not None:
                question, letter, choices = multiple_choice(rec["question"], value, rng)
            else:
                rejected.append({"id": row_id, "reason": "no choices and a non-numeric answer: cannot make "
                                                         "four choices"})
                continue
            rows.append({"id": row_id, "kind": "easy_mc", "question": question, "answer": letter,
                         "choices": choices, "source": f"file:{name.name}", "reward_fn": "choice"})
        if rejected and not rows:
            raise InputFileError(name, None, all_rejected(len(rejected), Counter(r["reason"] for r in rejected)))
        return rows, rejected
    for i in range(p.n_easy):
        rng = random.Random(seed_for(p.seed, STAGE, f"{partition}/easy", i))
        question, value, recheck = easy_arithmetic(rng)
        text, letter, choices = multiple_choice(question, value, rng)
        row_id = f"math:easy:{partition}:{i}"
        if recheck() != parse_number(choices[LETTERS.index(letter)]):
            rejected.append({"id": row_id, "reason": "the lettered choice does not equal the recomputed answer"})
            continue
        rows.append({"id": row_id, "kind": "easy_mc", "question": text, "answer": letter, "choices": choices,
                     "source": "synthetic:arithmetic", "reward_fn": "choice"})
    return rows, rejected


@stage(name=STAGE, version="1", params=MathParams,
       outputs={"problems": PROBLEMS_CONTRACT, REJECTED: ITEM_REJECTED.contract()})
def math_seeds(inputs: Mapping[str, Any], params: MathParams, partition: str) -> dict[str, pl.DataFrame]:
    """Hard open-ended and easy multiple-choice math with verified answers (synthetic or local JSONL)."""
    hard, hard_rejected = _hard_rows(params, partition)
    easy, easy_rejected = _easy_rows(params, partition)
    rows = hard + easy
    seen: set[str] = set()
    kept, dropped = [], hard_rejected + easy_rejected
    for row in rows:
        if row["question"] in seen:
            dropped.append({"id": row["id"], "reason": "duplicate question"})
            continue
        seen.add(row["question"])
        kept.append(row)
    return {
        "problems": MATH_PROBLEM.frame(kept),
        REJECTED: ITEM_REJECTED.frame(dropped),
    }
