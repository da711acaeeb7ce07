"""What the commands print: tables that fit the terminal and arrive whole in a pipe or a log.

Rich sizes output to the terminal, and to 80 columns when stdout is not one, so a piped table came out with cut
headers (``vari…``) and folded keys. Here a table keeps every header whole; on a terminal rich fits the rest to its
width, and elsewhere the table is printed at its natural width, nothing cut or wrapped.
"""

from __future__ import annotations

import sys

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
