"""`gymforge` commands of the noise room."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
