"""Local inputs enter artifact keys by content: a file edited in place is never served from the cache."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from data_contracts import content
from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import Contract, Params, Stage


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(content.CACHE_ENV, str(tmp_path / "cache"))
    content._db.cache_clear()
    content._memo.clear()


def test_file_digest_follows_content_even_with_size_and_mtime_kept(tmp_path: Path) -> None:
    path = tmp_path / "seeds.jsonl"
    path.write_text("abcdef\n")
    first = content.digest(path)
    stat = path.stat()
    path.write_text("ABCDEF\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime
    assert content.digest(path).sha256 != first.sha256
    path.write_text("abcdef\n")
    assert content.digest(path).sha256 == first.sha256


def test_digest_survives_a_new_process_through_the_cache_file(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("x" * 1000)
    first = content.digest(path)
    content._memo.clear()  # as in a fresh process: the answer comes from digests.sqlite
    assert content.digest(path) == first
    assert (tmp_path / "cache" / "digests.sqlite").is_file()


def test_directory_digest_sees_edits_additions_and_renames_not_hidden_files(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("one")
    (root / "sub" / "b.md").write_text("two")
    base = content.digest(root)
    assert (base.files, base.bytes) == (2, 6)
    (root / ".cache").write_text("ignored")
    assert content.digest(root) == base
    (root / "sub" / "b.md").rename(root / "sub" / "c.md")
    renamed = content.digest(root)
    assert renamed.sha256 != base.sha256
    (root / "d.txt").write_text("three")
    assert content.digest(root).sha256 not in (base.sha256, renamed.sha256)


def test_missing_local_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(content.LocalInputError, match="no such file or directory"):
        content.digest(tmp_path / "gone.json")


class _FileParams(Params):
    path: str

    def local_inputs(self) -> list[str]:
        return [self.path]


def _count_lines(inputs, params: _FileParams, partition: str) -> dict[str, pl.DataFrame]:
    lines = Path(params.path).read_text().splitlines()
    return {"lines": pl.DataFrame({"line": lines}, schema={"line": pl.String})}


STAGE = Stage("_test_double_reads_file", "1", (), _FileParams, {"lines": Contract()}, _count_lines)


def test_a_seed_file_cut_in_place_is_not_served_from_the_cache(tmp_path: Path) -> None:
    store, catalog = open_store(tmp_path / "data"), Catalog(tmp_path / "data")
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("".join(f"{{\"id\": {i}}}\n" for i in range(6)))
    params = {"path": str(seeds)}
    first = execute_stage(store, catalog, STAGE, params, {}, "p0")
    assert first.outputs == {"lines": 6}
    seeds.write_text("".join(f"{{\"id\": {i}}}\n" for i in range(2)))
    second = execute_stage(store, catalog, STAGE, params, {}, "p0")
    assert not second.cached and second.key != first.key and second.outputs["lines"] == 2
    manifest = store.get(STAGE.name, second.key).manifest
    assert manifest["local_inputs"][str(seeds)]["bytes"] == seeds.stat().st_size
    assert execute_stage(store, catalog, STAGE, params, {}, "p0").cached  # unchanged file: a cache hit
