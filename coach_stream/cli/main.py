"""Entry point of ``coach-stream``: assembles the command groups and turns errors into one line.

Each command group lives in its own module and exposes ``register(app)``. Only the module of
the command being run is imported, so ``coach-stream stack up`` or ``--version`` does not
pay for importing torch; ``--help`` (no command) lists ``COMMAND_SUMMARIES`` and imports none.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
from collections.abc import Sequence

import typer
import typer.main
from rich.console import Console
from rich.markup import escape

from coach_stream import __version__
from coach_stream.cli.help_text import show_as_written
from coach_stream.errors import CoachStreamError, DeliveryError, ServiceUnavailableError

COMMAND_MODULES: dict[str, str] = {
    "stack": "coach_stream.cli.stack",
    "launch": "coach_stream.cli.launch",
    "attach": "coach_stream.cli.attach",
    "status": "coach_stream.cli.run_control",
    "logs": "coach_stream.cli.run_control",
    "stop": "coach_stream.cli.run_control",
    "resume": "coach_stream.cli.resume",
    "scale": "coach_stream.cli.nomad",
    "train": "coach_stream.cli.train",
    "rollout": "coach_stream.cli.rollout",
    "replay": "coach_stream.cli.replay",
    "report": "coach_stream.cli.report",
    "play": "coach_stream.cli.after",
    "export-policy": "coach_stream.cli.after",
    "versions": "coach_stream.cli.after",
}
"""Which module registers each top-level command (a module may register several)."""

COMMAND_SUMMARIES: dict[str, str] = {
    "launch": "Start a trainer, N rollout workers and an evaluator, and follow them to the end.",
    "attach": "Learn from another run's experience with an extra off-policy learner of its own.",
    "status": "Show a run: every task (SILENT when it stopped reporting), the trainer's "
    "throughput, consumer lag and checkpoint, the return and its trend "
    "(docs/observability.md).",
    "logs": "Print a run's logs: one task's, or all tasks' prefixed with [task] (on Nomad: "
    "each allocation's stderr then stdout, through the API).",
    "stop": "Stop a run: SIGTERM every task, SIGKILL what is left after the grace period.",
    "resume": "Start a failed or stopped run's tasks again; they resume where the run left off.",
    "scale": "Set a Nomad run's rollout worker count (the job's rollout group, Nomad's scale API).",
    "train": "Train a preset: read experience, learn, announce policy versions, end the run.",
    "rollout": "Act with the newest policy and write experience (or evaluate it greedily).",
    "report": "Plot a run from its Kafka topics alone and print whether it learned.",
    "play": "Play greedy episodes of a policy version and print each return and the mean.",
    "export-policy": "Write a policy version's greedy action function as one ONNX or "
    "TorchScript file.",
    "versions": "List a run's announced policy versions: time, env steps, evaluation, URI, "
    "sha256, and whether the checkpoint store still holds each (retention deletes old ones).",
    "stack": "Run Kafka and a GCS emulator as local processes on 127.0.0.1.",
    "replay": "Inspect, export and train offline from a run's stored experience topic.",
}
"""What ``coach-stream --help`` lists, in its order: the listing is built from these instead
of importing every command group (3.4 s, torch & co., against 0.3-0.5). A unit test checks them
against the groups' own help (tests/unit/test_cli.py)."""

TASK_COMMANDS = frozenset({"train", "rollout"})
"""Commands that run as a run's tasks: they log to their files, librdkafka's lines included."""


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


def _listed_only() -> None:
    """Never runs: a command that is named is built from its own module (``build_app``)."""
    raise RuntimeError("a listing stub ran; build_app registers the named command's group")


def build_listing() -> typer.Typer:
    """The CLI as ``coach-stream --help`` (or a bare ``coach-stream``) shows it: every
    command's summary, no command group imported."""
    app = build_app("--version")  # the root and its options only
    for name, summary in COMMAND_SUMMARIES.items():
        app.command(name, help=summary)(_listed_only)
    return app


def build_cli(command: str | None = None) -> typer.core.TyperGroup:
    """``build_app(command)`` as the click command that runs, its help shown as written;
    without a command, the listing (``build_listing``)."""
    app = build_listing() if command is None else build_app(command)
    cli = show_as_written(typer.main.get_command(app))
    if not isinstance(cli, typer.core.TyperGroup):
        raise TypeError("coach-stream's CLI is expected to be a command group")
    return cli


EXIT_SOLVED = 0
EXIT_NOT_SOLVED = 1
EXIT_BAD_INPUT = 2
"""Bad input or an error no retry can fix; the supervisor does not restart a task that exits 2."""
EXIT_UNAVAILABLE = 3
"""A service (Kafka, GCS) could not be reached in time; a later retry may succeed, so the
supervisor restarts a task that exits 3 like a crashed one."""
EXIT_INTERRUPTED = 130

_TRANSIENT: tuple[type[CoachStreamError], ...] = (ServiceUnavailableError, DeliveryError)


def exit_code_of(error: CoachStreamError) -> int:
    """2 for what the user (or the config) must fix, 3 for an unreachable service."""
    return EXIT_UNAVAILABLE if isinstance(error, _TRANSIENT) else EXIT_BAD_INPUT


def _usage_line(error: typer.TyperException) -> str:
    """A usage error as one line: what was wrong, then where the help is."""
    message = " ".join(error.format_message().split())
    ctx = getattr(error, "ctx", None)
    command = getattr(ctx, "command_path", None) or "coach-stream"
    return f"{message.rstrip('.')}; see `{command} --help`."


def _unknown_command(command: str) -> str:
    known = sorted(COMMAND_MODULES)
    close = difflib.get_close_matches(command, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"No such command {command!r}; {hint}use one of {', '.join(known)} "
        "(see `coach-stream --help`)."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (see ``EXIT_*``); errors become one red line."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args if not a.startswith("-")), None)
    if command is None and "--version" in args:
        command = "--version"
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if command is not None and command not in COMMAND_MODULES and command != "--version":
        # Answered without importing every command group (torch & co., seconds).
        err.print(f"[bold red]error:[/] {escape(_unknown_command(command))}")
        return EXIT_BAD_INPUT
    if command not in TASK_COMMANDS:
        # librdkafka's own lines (a refused connection, "all brokers down") only repeat what
        # the one error line of a failed command says; a task keeps them in its log file.
        logging.getLogger("coach_stream.transport.librdkafka").disabled = True
    try:
        # In non-standalone mode click hands back the code of a `typer.Exit(n)` (and 130
        # for Ctrl-C) as the return value instead of raising it, so the value must be used.
        # The program's name is the installed command's, however Python was started: click
        # would otherwise name it after `python -m ...` in the help hints.
        result = build_cli(command)(args=args, prog_name="coach-stream", standalone_mode=False)
    except CoachStreamError as error:
        # One line, always: a message that quotes a YAML error or a broker's answer may span
        # several, and scripts (and the supervisor) read the last line as the cause.
        err.print(f"[bold red]error:[/] {escape(' '.join(str(error).split()))}")
        return exit_code_of(error)
    except typer.Exit as done:
        return int(done.exit_code or 0)
    except (typer.Abort, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    except typer.TyperException as error:
        if error.__class__.__name__ == "NoArgsIsHelpError":
            # A bare `coach-stream` (or `coach-stream stack`): the help (rich prints it on
            # stdout while formatting it), and exit 2, since nothing was done.
            if message := error.format_message().strip():
                typer.echo(message)
            return EXIT_BAD_INPUT
        # Usage errors (unknown flag or command, --workers abc, a value out of range).
        err.print(f"[bold red]error:[/] {escape(_usage_line(error))}")
        return EXIT_BAD_INPUT if error.exit_code == 2 else int(error.exit_code)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
