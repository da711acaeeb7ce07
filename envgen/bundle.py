"""Environment bundles: one directory per environment, readable without the artifact store.

``<out>/<env_id>/`` holds ``env.json`` (the environment record without its database and tool schemas; JSON
fields decoded), ``tools.json`` (OpenAI schemas), ``graph.json`` (edges, chains, expansion decisions),
``tasks.jsonl`` (one task record per line, JSON fields decoded) and ``db.sqlite`` (the seeded database).
Files are written with sorted keys, so the same seed gives byte-identical bundles.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

BUNDLE_FILES = ("env.json", "tools.json", "graph.json", "tasks.jsonl", "db.sqlite")
_ENV_JSON_FIELDS = ("spec_json", "chains", "fallback_chains", "expansion", "edges", "tools", "task_json")
TASK_JSON_FIELDS = ("user_profile", "rubric", "golden_actions", "difficulty", "noise")
_GRAPH_FIELDS = ("edges", "chains", "fallback_chains", "expansion")


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def tasks_jsonl(tasks: list[dict[str, Any]], json_fields: tuple[str, ...] = TASK_JSON_FIELDS) -> str:
    """tasks.jsonl text: one task per line, ``json_fields`` decoded, keys sorted."""
    lines = [json.dumps({k: json.loads(v) if k in json_fields and isinstance(v, str) else v for k, v in t.items()},
                        sort_keys=True, ensure_ascii=False) for t in tasks]
    return "".join(f"{line}\n" for line in lines)


def write_bundle(root: Path, env: dict[str, Any], tasks: list[dict[str, Any]]) -> Path:
    path = root / env["env_id"]
    path.mkdir(parents=True, exist_ok=False)
    decoded = {k: json.loads(v) if k in _ENV_JSON_FIELDS and isinstance(v, str) else v for k, v in env.items()}
    record = {k: v for k, v in decoded.items() if k not in ("db", "tools", "task_json", *_GRAPH_FIELDS)}
    (path / "env.json").write_text(_dump(record))
    (path / "tools.json").write_text(_dump(decoded["tools"]))
    (path / "graph.json").write_text(_dump({k: decoded[k] for k in _GRAPH_FIELDS}))
    (path / "tasks.jsonl").write_text(tasks_jsonl(tasks))
    (path / "db.sqlite").write_bytes(bytes(env["db"]))
    return path


def write_bundles(root: Path, environments: pl.DataFrame, tasks: pl.DataFrame) -> list[Path]:
    """One bundle per environment record under ``root``, each with its own tasks."""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for task in tasks.iter_rows(named=True):
        by_env.setdefault(task["env_id"], []).append(task)
    return [write_bundle(root, env, by_env.get(env["env_id"], [])) for env in environments.iter_rows(named=True)]


def write_task_variant(source: Path, target: Path, tasks: list[dict[str, Any]],
                       json_fields: tuple[str, ...] = TASK_JSON_FIELDS) -> Path:
    """A bundle of other tasks on the same environment (noisy twins, say): ``source``'s files with ``tasks.jsonl``
    holding ``tasks``."""
    target.mkdir(parents=True)
    for f in source.iterdir():
        if f.is_file() and f.name != "tasks.jsonl":
            shutil.copyfile(f, target / f.name)
    (target / "tasks.jsonl").write_text(tasks_jsonl(tasks, json_fields))
    return target


class BundleError(ValueError):
    """A bundle that cannot be read; the message names its file (and line)."""


REQUIRED_TASK_FIELDS = ("task_id", "env_id", "description", "user_profile", "rubric", "golden_actions")


def read_bundles(root: Path) -> list[tuple[Path, dict[str, Any], list[dict[str, Any]]]]:
    """Every bundle under ``root`` as (path, environment record, task records), each task holding the fields an
    episode needs."""
    if not root.is_dir():
        raise BundleError(f"{root} is not a directory of environment bundles (gymforge envgen --out)")
    loaded = []
    for path in bundle_dirs(root):
        env, tasks = read_bundle(path)
        for n, task in enumerate(tasks, start=1):
            missing = [k for k in REQUIRED_TASK_FIELDS if k not in task]
            if missing:
                raise BundleError(f"{path / 'tasks.jsonl'}:{n}: task lacks field(s) {missing}")
        loaded.append((path, env, tasks))
    return loaded


def bundle_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a bundle, else the bundles directly under it, sorted."""
    if (root / "env.json").exists():
        return [root]
    dirs = sorted(p.parent for p in root.glob("*/env.json"))
    if not dirs:
        raise BundleError(f"{root} holds no environment bundle (expected {', '.join(BUNDLE_FILES)})")
    return dirs


def read_bundle(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(environment record as ``Environment`` takes it, task records with JSON fields as strings)."""
    missing = [f for f in BUNDLE_FILES if not (path / f).exists()]
    if missing:
        raise BundleError(f"bundle {path} lacks {', '.join(missing)}")
    try:
        env = json.loads((path / "env.json").read_text())
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path / 'env.json'}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    env["spec_json"] = json.dumps(env["spec_json"]) if isinstance(env["spec_json"], dict) else env["spec_json"]
    env["db"] = (path / "db.sqlite").read_bytes()
    tasks = []
    for n, line in enumerate((path / "tasks.jsonl").read_text().splitlines(), start=1):
        if line.strip():
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BundleError(f"{path / 'tasks.jsonl'}:{n}: invalid JSON: {exc.msg}") from None
            tasks.append({k: json.dumps(v) if k in TASK_JSON_FIELDS and not isinstance(v, str) else v
                          for k, v in raw.items()})
    return env, tasks
