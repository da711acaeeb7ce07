"""Data Docs: self-contained HTML pages of every validation the gate kept (DESIGN.md section 3).

GX's own site builder needs a file-backed context and a checkpoint per validation, which is slow and unsafe with
several Dask workers writing at once; these pages are written from the ``validation.json`` each artifact keeps.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_contracts.files import atomic_file
from data_contracts.gate import GateReport
from data_contracts.roots import open_store

_STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
.ok{color:#1a7f37}.bad{color:#c62828;font-weight:600}.warn{color:#b26a00}code{font-size:12px}"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Cells are HTML already (escaped by the caller)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    return f"<table><tr>{head}</tr>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</table>"


def _verdict(passed: bool, warnings: int = 0) -> str:
    if not passed:
        return "<span class='bad'>failed</span>"
    return f"<span class='warn'>passed, {warnings} warning(s)</span>" if warnings else "<span class='ok'>passed</span>"


def _report_section(output: str, report: Mapping[str, Any]) -> str:
    rows = [
        (html.escape(r["name"]), html.escape(r["kind"]), html.escape(r["severity"]),
         "<span class='ok'>yes</span>" if r["success"] else f"<span class='{'bad' if r['severity'] == 'critical' else 'warn'}'>no</span>",
         str(r["unexpected_count"]), f"<code>{html.escape(r['message'])}</code>")
        for r in report["results"]
    ]
    total = report.get("failing_rows_total", len(report["failing_rows"]))
    return (f"<h2>output <code>{html.escape(output)}</code>: {_verdict(report['passed'])}</h2>"
            f"<p>{report['rows']} rows, {total} failing a critical expectation, validated in {report['seconds']:.3f} s</p>"
            + _table(("expectation", "kind", "severity", "success", "unexpected", "message"), rows))


def _write_text_atomic(path: Path, text: str) -> None:
    # several flows may rebuild the docs at once: readers see the old page or the new one, never half of one
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def build_data_docs(root: Path | str, reports: Iterable[GateReport] | None = None) -> Path:
    """Write the Data Docs site under ``<home>/data_docs`` (the data root's local home: the root itself unless it
    is an object store) and return its ``index.html``.

    Without ``reports`` the site lists every validation kept on disk: each published and quarantined artifact,
    one row per output, linking to a page with every expectation's result. With ``reports`` it lists those only.
    """
    store = open_store(root)
    docs = store.home / "data_docs"
    index_rows = []
    if reports is not None:
        for i, report in enumerate(reports):
            page = f"validations/report-{i}.html"
            dumped = report.model_dump(mode="json")
            _write_text_atomic(docs / page, _page(f"{report.stage} [{report.partition}]", _report_section(report.output, dumped)))
            index_rows.append((report.stage, report.partition, "-", "-", report.output, report.passed,
                               len(report.failures("warning")), report.rows, page))
    else:
        for manifest, status in store.manifests():
            stage, key, partition = manifest["stage"], manifest["key"], manifest["partition"]
            base = store.location(stage, key, status)
            page = f"validations/{stage}/{key}.html"
            details = store.validation(stage, key, status)
            if details is not None:
                title = f"{stage} [{partition}] {key} ({status})"
                body = "".join(_report_section(o, details[o]) for o in sorted(details))
                _write_text_atomic(docs / page, _page(title, f"<p>artifact <code>{html.escape(str(base))}</code></p>{body}"))
            for output, summary in sorted(manifest.get("contract", {}).items()):
                index_rows.append((stage, partition, key, status, output, summary["passed"],
                                   len(summary.get("warnings", [])), summary["rows"],
                                   page if details is not None else ""))
    cells = [
        (html.escape(stage), html.escape(partition), f"<code>{html.escape(key)}</code>", html.escape(status),
         html.escape(output), _verdict(passed, warnings), str(rows),
         f"<a href='{html.escape(page)}'>details</a>" if page else "")
        for stage, partition, key, status, output, passed, warnings, rows, page in index_rows
    ]
    failed = sum(1 for row in index_rows if not row[5])
    body = (f"<p>{len(index_rows)} validations, {failed} failed.</p>"
            + _table(("stage", "partition", "key", "artifact", "output", "contract", "rows", ""), cells))
    index = docs / "index.html"
    _write_text_atomic(index, _page("gymforge Data Docs", body))
    return index
