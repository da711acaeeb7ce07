"""The house's shape, side by side for two revisions: what a newcomer reads (files, lines, median and largest file
outside tests and bench), and what the house's rules count (import circles inside a room, wrong-way imports, lines
in a lower room that only one branch uses, catalog SQL written outside the catalog, records declared on the ground
floor).

Both revisions are read from git objects (``git ls-tree`` and ``git show``), nothing is imported or run, so the
figures are exact and take a second.

    .venv/bin/python -m bench.bench_house [--before REV] [--after REV] [--no-record]
"""

from __future__ import annotations

import argparse
import ast
import datetime
import re
import statistics
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parents[1]
RANK = {"data_contracts": 0, "envgen": 1, "inference": 2, "tasks": 3, "training": 3, "flows": 4}
LOWER = ("data_contracts", "envgen", "inference")
BRANCHES = ("environments", "noise", "longctx", "midtrain", "research")
# A catalog question written as SQL over its tables (tests/test_architecture.py holds the rule with these).
CATALOG_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b[\s\S]*\b(FROM|INTO|UPDATE|JOIN)\s+(artifacts|lineage)\b",
                         re.IGNORECASE)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def sources(revision: str) -> dict[str, str]:
    """Path -> text of every Python file of the rooms at ``revision``."""
    paths = [p for p in git("ls-tree", "-r", "--name-only", revision).splitlines()
             if p.endswith(".py") and p.split("/")[0] in RANK]
    return {path: git("show", f"{revision}:{path}") for path in paths}


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: str, text: str, modules: set[str]) -> set[str]:
    """The modules of the tree a file imports (module-level or inside a function)."""
    package = module_name(path) if path.endswith("__init__.py") else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {target for target in found if target in modules}


def branch_of(module: str) -> str | None:
    """The branch a module belongs to: ``tasks/<branch>/`` and its command module ``flows/cli/<branch>.py``."""
    parts = module.split(".")
    if parts[0] == "tasks" and len(parts) > 2 and parts[1] in BRANCHES:
        return parts[1]
    if parts[:2] == ["flows", "cli"] and len(parts) == 3 and parts[2] in BRANCHES:
        return parts[2]
    return None


def users(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Module -> who uses it: branch names, or ``*`` for code outside every branch (training, flows, a shared
    module of tasks/); a module of a lower room passes on its own users."""
    importers: dict[str, set[str]] = {module: set() for module in graph}
    for module, targets in graph.items():
        for target in targets:
            importers[target].add(module)
    memo: dict[str, set[str]] = {}

    def of(module: str, seen: frozenset[str]) -> set[str]:
        if module in memo:
            return memo[module]
        found: set[str] = set()
        for importer in importers[module]:
            if importer in seen:
                continue
            if (branch := branch_of(importer)) is not None:
                found.add(branch)
            elif importer.split(".")[0] in LOWER:
                found |= of(importer, seen | {module})
            else:
                found.add("*")
        memo[module] = found
        return found

    return {module: of(module, frozenset()) for module in graph}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([*component, node]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def catalog_sql(text: str) -> list[int]:
    """The lines of string literals in a file's ``text`` that are SQL over the catalog's tables, docstrings aside."""
    tree = ast.parse(text)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and CATALOG_SQL.search(node.value)]


@dataclass(frozen=True)
class Shape:
    files: int
    lines: int
    median: float
    largest: tuple[int, str]
    over_800: int
    circles: int
    wrong_way: int
    one_branch_lines: int
    catalog_sql: int
    ground_floor_records: int


def shape(revision: str) -> Shape:
    texts = sources(revision)
    modules = {module_name(path): path for path in texts}
    graph = {module: imported(path, texts[path], set(modules)) for module, path in modules.items()}
    lines = {path: len(text.splitlines()) for path, text in texts.items()}
    wrong_way = sum(1 for module, targets in graph.items() for target in targets
                    if target.split(".")[0] != module.split(".")[0]
                    and RANK[target.split(".")[0]] >= RANK[module.split(".")[0]])
    rooms = {module: {t for t in targets if t.split(".")[0] == module.split(".")[0]} for module, targets in graph.items()}
    used = users(graph)
    one_branch = sum(lines[modules[m]] for m, who in used.items()
                     if m.split(".")[0] in LOWER and len(who) == 1 and "*" not in who)
    sql = sum(len(catalog_sql(text)) for path, text in texts.items() if path != "data_contracts/catalog.py")
    records = sum(len(re.findall(r"^[A-Z_]+ = (?:Record\(|[A-Z_]+\.(?:extend|rejected)\()", text, re.MULTILINE))
                  for path, text in texts.items() if path.startswith("data_contracts/"))
    largest = max((n, path) for path, n in lines.items())
    return Shape(len(texts), sum(lines.values()), statistics.median(lines.values()), largest,
                 sum(n > 800 for n in lines.values()), len(circles(rooms)), wrong_way, one_branch, sql, records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD~1", help="the revision measured first")
    parser.add_argument("--after", default="HEAD", help="the revision measured second")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    before, after = shape(args.before), shape(args.after)
    revs = {name: git("rev-parse", "--short", rev).strip() for name, rev in (("before", args.before),
                                                                            ("after", args.after))}
    rows = [
        ("files (Python, outside tests and bench)", "files"),
        ("lines", "lines"),
        ("median file (lines)", "median"),
        ("files over 800 lines", "over_800"),
        ("import circles inside a room", "circles"),
        ("wrong-way imports", "wrong_way"),
        ("lines of a lower room only one branch uses", "one_branch_lines"),
        ("catalog SQL written outside the catalog", "catalog_sql"),
        ("records declared in data_contracts/", "ground_floor_records"),
    ]
    lines = [(f"\n## The house's shape ({datetime.date.today()}, `python -m bench.bench_house --before "
             f"{args.before} --after {args.after}`)\n"),
             "Read from git objects, nothing run: the figures are exact.\n",
             f"| figure | before ({revs['before']}) | after ({revs['after']}) |", "| --- | ---: | ---: |"]
    for label, field in rows:
        lines.append(f"| {label} | {getattr(before, field):,} | {getattr(after, field):,} |")
    lines.append(f"| largest file | {before.largest[1]} ({before.largest[0]:,}) | {after.largest[1]} "
                 f"({after.largest[0]:,}) |")
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()
