"""Entry point of ``coach-stream``: assembles the command groups and turns errors into one line.

Each command group lives in its own module and exposes ``register(app)``. Only the module of
the command being run is imported, so ``coach-stream stack up`` or ``--version`` does not
pay for importing torch; ``--help`` (no command) imports them all to list them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import typer
from rich.console import Console

from coach_stream import __version__
from coach_stream.errors import CoachStreamError

COMMAND_MODULES: dict[str, str] = {
    "stack": "coach_stream.cli.stack",
    "launch": "coach_stream.cli.launch",
    "status": "coach_stream.cli.launch",
    "logs": "coach_stream.cli.launch",
    "stop": "coach_stream.cli.launch",
    "train": "coach_stream.cli.train",
    "rollout": "coach_stream.cli.rollout",
}
"""Which module registers each top-level command (a module may register several)."""


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"coach-stream {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Show the version."
    ),
) -> None:
    """Distributed reinforcement learning whose experience flows through Kafka."""


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI with ``command``'s group registered, or every group when it is not known."""
    app = typer.Typer(
        name="coach-stream",
        help="Distributed reinforcement learning whose experience flows through Kafka.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    if command in COMMAND_MODULES:
        modules = [COMMAND_MODULES[command]]
    elif command == "--version":
        modules = []
    else:
        modules = list(dict.fromkeys(COMMAND_MODULES.values()))
    for module in modules:
        importlib.import_module(module).register(app)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; a ``CoachStreamError`` becomes one red line and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args if not a.startswith("-")), None)
    if command is None and "--version" in args:
        command = "--version"
    try:
        build_app(command)(args=args, standalone_mode=False)
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
