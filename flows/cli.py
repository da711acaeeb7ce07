"""The ``gymforge`` command line."""

from __future__ import annotations

import typer

from flows import cli_data, cli_envgen, cli_inference, cli_noise

app = typer.Typer(no_args_is_help=True, help="gymforge: agentic and long-context LLM training data and training.")

for room in (cli_data, cli_envgen, cli_noise, cli_inference):
    room.register(app)


def main() -> None:
    app()
