"""What the commands print: tables that fit the terminal and arrive whole in a pipe or a log.

Rich sizes output to the terminal, and to 80 columns when stdout is not one, so a piped table came out with cut
headers (``vari…``) and folded keys. Here a table keeps every header whole; on a terminal rich fits the rest to its
width, and elsewhere the table is printed at its natural width, nothing cut or wrapped.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

UNBOUNDED = 10_000  # columns to measure a table's natural width in


def stdout_console() -> Console:
    """The console of a command's results (its errors and progress go to stderr)."""
    return Console(highlight=False, soft_wrap=not sys.stdout.isatty())


def print_table(console: Console, table: Table) -> None:
    for column in table.columns:
        header = max((len(line) for line in str(column.header).splitlines()), default=0)
        column.min_width = max(column.min_width or 0, header)
        if column.width is not None:
            column.width = max(column.width, header)
    if console.is_terminal:
        console.print(table)
        return
    for column in table.columns:  # a pipe has room: no cell is cut to a column width chosen for a terminal
        column.width = column.max_width = None
    natural = console.measure(table, options=console.options.update_width(UNBOUNDED)).maximum
    width = console.width
    console.width = max(natural, 1)  # print() caps a width to the console's
    try:
        console.print(table)
    finally:
        console.width = width


def after_import(module: str, configure: Callable[[], None]) -> None:
    """Run ``configure`` once ``module`` is imported: now if it is, else right after its import. Console set-up of a
    library (Prefect's log handlers) then costs nothing in a command that never loads the library."""
    if module in sys.modules:
        configure()
        return
    sys.meta_path.insert(0, _AfterImport(module, configure))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds ``module`` through the other finders and runs ``configure`` after the module has executed."""

    def __init__(self, module: str, configure: Callable[[], None]) -> None:
        self.module, self.configure = module, configure

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute, configure = spec.loader.exec_module, self.configure

        def exec_module(module: Any) -> None:
            execute(module)
            configure()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
