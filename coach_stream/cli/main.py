"""Entry point of ``coach-stream``: assembles the command groups and turns errors into one line.

Each command group lives in its own module and exposes ``register(app)``; adding a group
means adding its module name to ``_GROUPS``.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from coach_stream import __version__
from coach_stream.errors import CoachStreamError

_GROUPS: tuple[str, ...] = ("stack", "launch", "train", "rollout")

app = typer.Typer(
    name="coach-stream",
    help="Distributed reinforcement learning whose experience flows through Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"coach-stream {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Show the version."
    ),
) -> None:
    """Distributed reinforcement learning whose experience flows through Kafka."""


for _group in _GROUPS:
    importlib.import_module(f"coach_stream.cli.{_group}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a ``CoachStreamError`` becomes one red line and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except CoachStreamError as error:
        Console(stderr=True).print(f"[bold red]error:[/] {error}", highlight=False)
        return 2
    except typer.Exit as done:
        return int(done.exit_code or 0)
    except typer.Abort:
        return 130
    except Exception as error:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(error, click.ClickException):
            error.show()
            return int(error.exit_code)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
