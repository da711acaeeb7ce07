"""The house's one rule of imports (DESIGN.md section 1): ``flows -> tasks, training -> inference -> envgen ->
data_contracts``. Every import statement counts, module-level or inside a function, so a lazy import cannot hide
a wrong-way edge. Run it alone with ``make architecture``."""

from __future__ import annotations

import ast
import re
from itertools import takewhile
from pathlib import Path

import pytest

from bench.bench_house import catalog_sql, circles

ROOT = Path(__file__).resolve().parents[1]
# A room may import the rooms of lower rank; tasks and training share a rank and import neither each other.
RANK = {"data_contracts": 0, "envgen": 1, "inference": 2, "tasks": 3, "training": 3, "flows": 4}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement of a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def wrong_way_edges() -> list[str]:
    edges = []
    for room, rank in RANK.items():
        for path in sorted((ROOT / room).rglob("*.py")):
            for line, module in imports(path):
                target = module.split(".")[0]
                if target in RANK and target != room and RANK[target] >= rank:
                    edges.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({room} -> {target})")
    return edges


def test_imports_go_one_way() -> None:
    assert wrong_way_edges() == []


@pytest.mark.parametrize(("source", "expected"), [
    ("import tasks.rewards\n", ["tasks.rewards"]),
    ("def f():\n    from training.tiny_policy import x\n", ["training.tiny_policy"]),
    ("from . import sibling\n", []),
])
def test_the_walk_sees_every_import(tmp_path: Path, source: str, expected: list[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert [module for _, module in imports(path)] == expected


# An engine spec is parsed in one place (inference/engine_spec.py, through inference/engine_factory.py's factory): code
# elsewhere that splits a string at ":" and compares the head with an engine kind, or tests a string for a kind's
# prefix, is a second parser.
SPEC_PARSERS = ("inference/engine_spec.py", "inference/engine_factory.py")
PREFIX_TEST = re.compile(r'startswith\(\(?\s*"(hf|openai|vllm):"')
KIND_COMPARED = re.compile(r'(==|!=|\bin)\s*\(?\s*"(hf|openai|vllm)"')


def spec_parsers(text: str) -> bool:
    """Whether ``text`` tests a string for an engine kind's prefix, or splits at ':' and compares a kind."""
    return bool(PREFIX_TEST.search(text)) or ('partition(":")' in text and bool(KIND_COMPARED.search(text)))


def test_engine_specs_are_parsed_in_one_place() -> None:
    found = [str(path.relative_to(ROOT)) for room in RANK for path in sorted((ROOT / room).rglob("*.py"))
             if str(path.relative_to(ROOT)) not in SPEC_PARSERS and spec_parsers(path.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize(("source", "parses"), [
    ('ok = spec.startswith(("hf:", "vllm:"))', True),
    ('kind, _, target = spec.partition(":")\nif kind == "openai": pass', True),
    ('kind, _, rest = spec.partition(":")\nif kind in ("world", "hotpotqa"): pass', False),
    ('spec = EngineSpec.parse(value)\nif spec.kind not in ("hf", "openai"): pass', False),
])
def test_the_spec_parser_check_sees_a_second_parser(source: str, parses: bool) -> None:
    assert spec_parsers(source) is parses


# No import circle inside a room: of two modules that need each other, one is a helper library the other should
# not be, and the shared part belongs in a module of its own. Edges are between a room's own modules, module-level
# or inside a function (a lazy import only hides a circle).
def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` reads from, a relative one resolved against the importing ``package``."""
    if not node.level:
        return node.module or ""
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def room_graph(room: str) -> dict[str, set[str]]:
    """Module -> the modules of the same room it imports (``from pkg import sub`` counts as importing ``pkg.sub``)."""
    paths = {module_name(path): path for path in sorted((ROOT / room).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = imported_from(node, package)
                targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base for alias in node.names}
        graph[module] = {target for target in targets if target in paths and target != module}
    return graph


@pytest.mark.parametrize("room", sorted(RANK))
def test_no_import_circle_inside_a_room(room: str) -> None:
    assert circles(room_graph(room)) == []


def test_the_circle_check_sees_a_circle() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "a.v": set()}
    assert circles(graph) == [["a.x", "a.y", "a.z"]]
    assert circles({"a.x": {"a.y"}, "a.y": set()}) == []


def test_the_room_graph_sees_lazy_and_submodule_imports() -> None:
    graph = room_graph("inference")
    assert "inference.hf_engine" in graph["inference.engine_factory"]  # imported inside load_engine
    assert graph["inference.hf_engine"] >= {"inference.engine_support"}


# A record is declared beside the code that uses it: in the lowest room that uses it, in the deepest package holding
# that room's users (a record one branch uses lives in that branch, one several branches share at the top of
# tasks/, one a lower room builds in that room), and data_contracts, the Record machinery, declares none. A module
# uses a record when it imports it by name, or, for the module declaring it, when it reads it beyond its declaration.
RECORD_BUILDERS = ("Record", "extend", "rejected")


def declared_records(tree: ast.Module) -> set[str]:
    """Names bound at a module's top level to a record: ``Record(...)``, ``OTHER.extend(...)``, ``OTHER.rejected(...)``."""
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in RECORD_BUILDERS:
                found |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return found


def misplaced_records(root: Path = ROOT) -> list[str]:
    """Each record declared outside the home its users give it, with that home."""
    modules = {module_name(path, root): path for room in RANK for path in sorted((root / room).rglob("*.py"))}
    trees = {module: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for module, path in modules.items()}
    packages = {module: module if path.name == "__init__.py" else module.rpartition(".")[0]
                for module, path in modules.items()}
    users: dict[tuple[str, str], set[str]] = {}
    for module, tree in trees.items():
        for name in declared_records(tree):
            users[module, name] = {module} if any(
                isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
                for node in ast.walk(tree)) else set()
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = imported_from(node, packages[module])
                for alias in node.names:
                    if (base, alias.name) in users:
                        users[base, alias.name].add(module)
    found = []
    for (module, name), by in sorted(users.items()):
        room = module.partition(".")[0]
        if room == "data_contracts":
            found.append(f"{module}.{name}: data_contracts declares no record")
            continue
        if not by:
            continue
        lowest = min((user.partition(".")[0] for user in by), key=RANK.__getitem__)
        parts = [packages[user].split(".") for user in by if user.partition(".")[0] == lowest]
        home = ".".join(takewhile(bool, (p[0] if len(set(p)) == 1 else "" for p in zip(*parts))))
        if packages[module] != home:
            found.append(f"{module}.{name}: used by {sorted(by)}, so it belongs in {home.replace('.', '/')}/")
    return found


def test_records_live_beside_their_users() -> None:
    assert misplaced_records() == []


def test_the_record_check_sees_a_misplaced_record(tmp_path: Path) -> None:
    files = {
        "data_contracts/schemas.py": "class Record: ...\nSHARED = Record('shared')\n",
        "envgen/records.py": "from data_contracts.schemas import Record\nTRAJ = Record('traj')\n",
        "envgen/standard.py": "from envgen.records import TRAJ\n",
        "tasks/records.py": "from data_contracts.schemas import Record\nONE_BRANCH = Record('one_branch')\n",
        "tasks/longctx/records.py": ("from data_contracts.schemas import Record\nfrom envgen.records import TRAJ\n"
                                     "KEYCHAIN = Record('keychain')\nKEYCHAIN_REJECTED = KEYCHAIN.rejected()\n"
                                     "TWO_BRANCHES = TRAJ.extend('two_branches')\n"),
        "tasks/longctx/keychain.py": "from tasks.records import ONE_BRANCH\nfrom .records import KEYCHAIN, TWO_BRANCHES\n",
        "tasks/noise/twins.py": "from tasks.longctx.records import TWO_BRANCHES\n",
        "training/sft.py": "from envgen.records import TRAJ\n",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    assert declared_records(ast.parse(files["tasks/longctx/records.py"])) == {"KEYCHAIN", "KEYCHAIN_REJECTED",
                                                                             "TWO_BRANCHES"}
    assert misplaced_records(tmp_path) == [
        "data_contracts.schemas.SHARED: data_contracts declares no record",
        ("tasks.longctx.records.TWO_BRANCHES: used by ['tasks.longctx.keychain', 'tasks.noise.twins'], so it "
         "belongs in tasks/"),
        "tasks.records.ONE_BRANCH: used by ['tasks.longctx.keychain'], so it belongs in tasks/longctx/",
    ]


# The README's rooms table is the layout as it is: a row per room, naming every package inside it, and every file or
# folder it names exists.
def rooms_table() -> dict[str, str]:
    """Room -> the text of its row in the README's rooms table."""
    return dict(re.findall(r"^\| `(\w+)/` \| (.+) \|$", (ROOT / "README.md").read_text(encoding="utf-8"), re.MULTILINE))


def test_the_readme_rooms_table_is_the_tree() -> None:
    table = rooms_table()
    assert set(table) == set(RANK)
    for room, row in table.items():
        named_dirs = set(re.findall(r"`([\w/]+/)`", row))
        packages = {f"{init.parent.relative_to(ROOT).as_posix()}/" for init in (ROOT / room).rglob("__init__.py")
                    if init.parent != ROOT / room}
        assert packages <= named_dirs, f"{room}: the table does not name {sorted(packages - named_dirs)}"
        missing = [d for d in named_dirs if not (ROOT / d).is_dir()]
        missing += [f for f in re.findall(r"`([\w/]+\.py)`", row)
                    if not (ROOT / room / f).is_file() and not (ROOT / f).is_file()]
        assert missing == [], f"{room}: the table names {missing}, which the tree does not hold"


# The catalog answers typed questions (data_contracts/catalog.py): code or a test elsewhere that writes SQL against its
# tables depends on their layout. Docstrings may show SQL (the `artifacts query` console command's example).
SQL_AT_HOME = {
    "data_contracts/catalog.py": "the catalog",
    "tests/data_contracts/test_catalog.py": "the catalog's own tests read its tables",
    "tests/flows/test_cli.py": "`gymforge artifacts query`, the console's escape hatch",
    "tests/flows/test_dag.py": "plants the row a killed writer never wrote",
    "tests/test_architecture.py": "the planted violations",
}
def test_no_sql_against_the_catalog_outside_it() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for room in [*RANK, "bench", "tests"]
             for path in sorted((ROOT / room).rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in SQL_AT_HOME
             for line in catalog_sql(path.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize(("source", "lines"), [
    ('rows = catalog.query("SELECT key FROM artifacts WHERE stage = ?", [stage])\n', [1]),
    ('def f(c):\n    return c.query("select input_key "\n                   "from lineage")\n', [2]),
    ('def f():\n    """E.g. SELECT stage FROM artifacts."""\n    return catalog.entries(stage="sft")\n', []),
    ('text = "select the artifacts from this list"\n', []),
])
def test_the_sql_check_sees_sql_outside_the_catalog(tmp_path: Path, source: str, lines: list[int]) -> None:
    path = tmp_path / "planted.py"
    path.write_text(source)
    assert catalog_sql(path.read_text()) == lines
