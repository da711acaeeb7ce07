"""MkDocs hook: the measured results live beside the code they measure (EXPERIMENTS.md, bench/RESULTS.md and the
figures under bench/figures/); the site serves them at the same relative paths, so their own image links and the
pages' links to them resolve, and the numbers are never copied into the docs."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ("EXPERIMENTS.md", "bench/RESULTS.md")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path in [*RESULTS, *(p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "bench/figures").glob("*.png")))]:
        files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files
